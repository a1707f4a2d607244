//! Direct loops for the common storage dtypes (float32, float64, bfloat16, float16, int32, int64,
//! bool): loading, rounding and storing without going through `Canon` element by element. The
//! conversions repeat the rules of cast.rs inline so the loops can vectorise; lanes/tests.rs
//! checks them against the `Canon` paths bit for bit.

use half::{bf16, f16};
use max_graph::DType;

use super::{Arg, Lane};
use crate::cpu::cast::{bf16_from_f32_odd, int_to_f32_odd};

/// A lane element type: f64, i64, u64 or bool.
pub trait Wide: Copy + Default + Send + Sync + 'static {
    /// The lane's values, after making the lane of this element type (emptied if it was not).
    fn vec(lane: &mut Lane) -> &mut Vec<Self>;
}

impl Wide for f64 {
    fn vec(lane: &mut Lane) -> &mut Vec<f64> {
        if !matches!(lane, Lane::F(_)) {
            *lane = Lane::F(Vec::new());
        }
        match lane {
            Lane::F(v) => v,
            _ => unreachable!("the lane was just made a float lane"),
        }
    }
}

impl Wide for i64 {
    fn vec(lane: &mut Lane) -> &mut Vec<i64> {
        if !matches!(lane, Lane::I(_)) {
            *lane = Lane::I(Vec::new());
        }
        match lane {
            Lane::I(v) => v,
            _ => unreachable!("the lane was just made a signed lane"),
        }
    }
}

impl Wide for u64 {
    fn vec(lane: &mut Lane) -> &mut Vec<u64> {
        if !matches!(lane, Lane::U(_)) {
            *lane = Lane::U(Vec::new());
        }
        match lane {
            Lane::U(v) => v,
            _ => unreachable!("the lane was just made an unsigned lane"),
        }
    }
}

impl Wide for bool {
    fn vec(lane: &mut Lane) -> &mut Vec<bool> {
        if !matches!(lane, Lane::B(_)) {
            *lane = Lane::B(Vec::new());
        }
        match lane {
            Lane::B(v) => v,
            _ => unreachable!("the lane was just made a bool lane"),
        }
    }
}

/// A storage type with a direct path, and the cast rules of cast.rs for it.
pub trait Fast: Copy + Send + Sync + 'static {
    type W: Wide;
    /// The value in its lane (exact).
    fn widen(self) -> Self::W;
    /// A lane value of this type's own kind, rounded to this type.
    fn narrow(w: Self::W) -> Self;
    fn from_f(v: f64) -> Self;
    fn from_i(v: i64) -> Self;
    fn from_u(v: u64) -> Self;
    /// Bools convert as the unsigned integers 0 and 1.
    fn from_b(v: bool) -> Self {
        Self::from_u(v as u64)
    }
}

/// Memory holding a bool (read as a byte so any nonzero byte is true).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(transparent)]
pub struct Bool8(pub u8);

/// f64 -> f32 rounded to odd: cast.rs's `f64_to_f32_odd`, here so that it inlines.
#[inline(always)]
fn f64_to_f32_odd(v: f64) -> f32 {
    if v.is_nan() {
        return f32::NAN;
    }
    let mut t = v as f32;
    if t.is_infinite() && v.is_finite() {
        t = f32::MAX.copysign(v as f32);
    } else if (t as f64).abs() > v.abs() {
        t = f32::from_bits(t.to_bits() - 1);
    }
    if (t as f64) != v {
        t = f32::from_bits(t.to_bits() | 1);
    }
    t
}

impl Fast for f32 {
    type W = f64;
    #[inline(always)]
    fn widen(self) -> f64 {
        self as f64
    }
    #[inline(always)]
    fn narrow(w: f64) -> f32 {
        Self::from_f(w)
    }
    #[inline(always)]
    fn from_f(v: f64) -> f32 {
        if v.is_nan() { f32::from_bits(((v.is_sign_negative() as u32) << 31) | 0x7FC0_0000) } else { v as f32 }
    }
    #[inline(always)]
    fn from_i(v: i64) -> f32 {
        v as f32
    }
    #[inline(always)]
    fn from_u(v: u64) -> f32 {
        v as f32
    }
}

impl Fast for f64 {
    type W = f64;
    #[inline(always)]
    fn widen(self) -> f64 {
        self
    }
    #[inline(always)]
    fn narrow(w: f64) -> f64 {
        Self::from_f(w)
    }
    #[inline(always)]
    fn from_f(v: f64) -> f64 {
        if v.is_nan() { f64::from_bits(((v.is_sign_negative() as u64) << 63) | 0x7FF8_0000_0000_0000) } else { v }
    }
    #[inline(always)]
    fn from_i(v: i64) -> f64 {
        v as f64
    }
    #[inline(always)]
    fn from_u(v: u64) -> f64 {
        v as f64
    }
}

impl Fast for bf16 {
    type W = f64;
    #[inline(always)]
    fn widen(self) -> f64 {
        // Exact; a NaN may keep another payload than half's conversion, which nothing sees.
        f32::from_bits((self.to_bits() as u32) << 16) as f64
    }
    #[inline(always)]
    fn narrow(w: f64) -> bf16 {
        Self::from_f(w)
    }
    #[inline(always)]
    fn from_f(v: f64) -> bf16 {
        if v.is_nan() {
            return bf16::from_bits(((v.is_sign_negative() as u16) << 15) | 0x7FC0);
        }
        bf16_from_f32_odd(f64_to_f32_odd(v))
    }
    // (through an f32 rounded to odd from the integer: through f64, 64-bit ones would round twice)
    #[inline(always)]
    fn from_i(v: i64) -> bf16 {
        bf16_from_f32_odd(int_to_f32_odd(v as i128))
    }
    #[inline(always)]
    fn from_u(v: u64) -> bf16 {
        bf16_from_f32_odd(int_to_f32_odd(v as i128))
    }
}

impl Fast for f16 {
    type W = f64;
    #[inline(always)]
    fn widen(self) -> f64 {
        self.to_f64()
    }
    #[inline(always)]
    fn narrow(w: f64) -> f16 {
        Self::from_f(w)
    }
    #[inline(always)]
    fn from_f(v: f64) -> f16 {
        if v.is_nan() {
            return f16::from_bits(((v.is_sign_negative() as u16) << 15) | 0x7E00);
        }
        f16::from_f32(f64_to_f32_odd(v))
    }
    #[inline(always)]
    fn from_i(v: i64) -> f16 {
        Self::from_f(v as f64)
    }
    #[inline(always)]
    fn from_u(v: u64) -> f16 {
        Self::from_f(v as f64)
    }
}

macro_rules! int_fast {
    ($($t:ty),*) => {$(
        impl Fast for $t {
            type W = i64;
            #[inline(always)]
            fn widen(self) -> i64 {
                self as i64
            }
            #[inline(always)]
            fn narrow(w: i64) -> $t {
                w as $t
            }
            #[inline(always)]
            fn from_f(v: f64) -> $t {
                v as $t
            }
            #[inline(always)]
            fn from_i(v: i64) -> $t {
                v as $t
            }
            #[inline(always)]
            fn from_u(v: u64) -> $t {
                v as $t
            }
        }
    )*};
}
int_fast!(i32, i64);

impl Fast for Bool8 {
    type W = bool;
    #[inline(always)]
    fn widen(self) -> bool {
        self.0 != 0
    }
    #[inline(always)]
    fn narrow(w: bool) -> Bool8 {
        Bool8(w as u8)
    }
    #[inline(always)]
    fn from_f(v: f64) -> Bool8 {
        Bool8((v != 0.0) as u8)
    }
    #[inline(always)]
    fn from_i(v: i64) -> Bool8 {
        Bool8((v != 0) as u8)
    }
    #[inline(always)]
    fn from_u(v: u64) -> Bool8 {
        Bool8((v != 0) as u8)
    }
}

/// Runs `$body` with `$t` bound to the storage type of `$dtype` when it has a direct path.
macro_rules! with_fast_type {
    ($dtype:expr, $t:ident, $body:expr, $otherwise:expr) => {
        match $dtype {
            DType::Float32 => {
                type $t = f32;
                $body
            }
            DType::Float64 => {
                type $t = f64;
                $body
            }
            DType::BFloat16 => {
                type $t = bf16;
                $body
            }
            DType::Float16 => {
                type $t = f16;
                $body
            }
            DType::Int32 => {
                type $t = i32;
                $body
            }
            DType::Int64 => {
                type $t = i64;
                $body
            }
            DType::Bool => {
                type $t = Bool8;
                $body
            }
            _ => $otherwise,
        }
    };
}

/// Whether `d` has direct loops here.
pub fn is_fast(d: DType) -> bool {
    matches!(
        d,
        DType::Float32 | DType::Float64 | DType::BFloat16 | DType::Float16 | DType::Int32 | DType::Int64 | DType::Bool
    )
}

/// Appends `len` elements of type T, `stride` elements apart, starting at `src`.
///
/// # Safety
/// `src` must be aligned for T and every element read must be inside a live buffer.
unsafe fn gather<T: Fast>(src: *const T, stride: isize, len: usize, lane: &mut Lane) {
    let out = T::W::vec(lane);
    // SAFETY: forwarded to the caller.
    unsafe {
        match stride {
            1 => out.extend(std::slice::from_raw_parts(src, len).iter().map(|x| x.widen())),
            0 => out.extend(std::iter::repeat_n((*src).widen(), len)),
            s => out.extend((0..len as isize).map(|i| (*src.offset(i * s)).widen())),
        }
    }
}

/// Appends `len` elements of dtype `d` (which must be fast), `stride` elements apart, starting
/// `offset` elements from `ptr`, to `lane` (which must be of `d`'s kind to keep its values).
///
/// # Safety
/// `ptr` must be aligned for `d` and every element read must be inside a live buffer.
pub unsafe fn load_run(d: DType, ptr: *const u8, offset: isize, stride: isize, len: usize, lane: &mut Lane) {
    with_fast_type!(
        d,
        T,
        {
            // SAFETY: forwarded to the caller.
            unsafe { gather::<T>(ptr.cast::<T>().offset(offset), stride, len, lane) }
        },
        debug_assert!(false, "load_run of {d}, which has no direct path")
    )
}

/// Writes the values as dtype `d` to contiguous elements from `start`; false when `d` has no
/// direct path (nothing is written then).
///
/// # Safety
/// `ptr` must be aligned for `d` and hold `start + arg.len()` elements that nothing else reads
/// or writes meanwhile.
pub unsafe fn store(d: DType, arg: Arg, ptr: *mut u8, start: usize) -> bool {
    with_fast_type!(
        d,
        T,
        {
            // SAFETY: forwarded to the caller.
            let out = unsafe { std::slice::from_raw_parts_mut(ptr.cast::<T>().add(start), arg.len()) };
            match arg {
                Arg::F(v) => out.iter_mut().zip(v).for_each(|(o, &x)| *o = T::from_f(x)),
                Arg::I(v) => out.iter_mut().zip(v).for_each(|(o, &x)| *o = T::from_i(x)),
                Arg::U(v) => out.iter_mut().zip(v).for_each(|(o, &x)| *o = T::from_u(x)),
                Arg::B(v) => out.iter_mut().zip(v).for_each(|(o, &x)| *o = T::from_b(x)),
            }
            true
        },
        false
    )
}

fn round_typed<T: Fast>(lane: &mut Lane) {
    T::W::vec(lane).iter_mut().for_each(|x| *x = T::narrow(*x).widen());
}

/// Rounds a lane of `d`'s kind in place to `d`; false when `d` has no direct path or the lane
/// is of another kind.
pub fn round(d: DType, lane: &mut Lane) -> bool {
    if lane.kind() != super::kind_of(d) {
        return false;
    }
    with_fast_type!(
        d,
        T,
        {
            round_typed::<T>(lane);
            true
        },
        false
    )
}

fn convert_typed<T: Fast>(arg: Arg, out: &mut Lane) {
    let v = T::W::vec(out);
    v.clear();
    match arg {
        Arg::F(a) => v.extend(a.iter().map(|&x| T::from_f(x).widen())),
        Arg::I(a) => v.extend(a.iter().map(|&x| T::from_i(x).widen())),
        Arg::U(a) => v.extend(a.iter().map(|&x| T::from_u(x).widen())),
        Arg::B(a) => v.extend(a.iter().map(|&x| T::from_b(x).widen())),
    }
}

/// `arg` converted to `d`'s lane kind and rounded to `d` (as `Arg::convert`), into `out`; false
/// when `d` has no direct path.
pub fn convert(d: DType, arg: Arg, out: &mut Lane) -> bool {
    with_fast_type!(
        d,
        T,
        {
            convert_typed::<T>(arg, out);
            true
        },
        false
    )
}
