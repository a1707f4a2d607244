//! The working types of the reduction and window kernels, and raw element access.
//!
//! Every storage type computes in one working type `W` ([`Typed::W`]): f32 for float16,
//! bfloat16, float32 and the float8 types, f64 for float64, i64 for the signed integers and u64
//! for the unsigned ones and bool (integer arithmetic wraps). Ops that are only meaningful on
//! reals (softmax, layer_norm) compute in [`Typed::F`]: f32 as above, f64 for float64 and the
//! integer types. Values load exactly and store with the cast rules of `cpu::cast`.

use std::any::TypeId;
use std::ops::{Add, Div, Mul, Neg, Sub};

use half::{bf16, f16};

use crate::Buffer;
use crate::cpu::cast::{Canon, Elem, F8E4m3, F8E5m2};

/// A working type: f32, f64, i64 or u64.
pub(crate) trait Num: Copy + Default + Send + Sync + PartialOrd + 'static {
    fn from_canon(c: Canon) -> Self;
    fn to_canon(self) -> Canon;
    fn is_nan(self) -> bool;
    /// `self + o`, wrapping for integers.
    fn wadd(self, o: Self) -> Self;
    /// `self * o`, wrapping for integers.
    fn wmul(self, o: Self) -> Self;
    /// `self / n` (truncating for integers); None for an integer divided by 0.
    fn div_count(self, n: usize) -> Option<Self>;
    /// The identity of max: -inf, or the type's minimum.
    fn lowest() -> Self;
    /// Adds `x` to the running sum `(sum, comp)`: compensated (Neumaier) for floats, wrapping
    /// for integers; the sum so far is `sum + comp`.
    fn comp_add(sum: &mut Self, comp: &mut Self, x: Self);
}

/// The real working types, f32 and f64.
pub(crate) trait Float:
    Num + Add<Output = Self> + Sub<Output = Self> + Mul<Output = Self> + Div<Output = Self> + Neg<Output = Self>
{
    fn exp(self) -> Self;
    fn ln(self) -> Self;
    fn sqrt(self) -> Self;
    fn from_f64(v: f64) -> Self;
}

macro_rules! float_num {
    ($t:ty) => {
        impl Num for $t {
            #[inline]
            fn from_canon(c: Canon) -> Self {
                match c {
                    Canon::F(v) => v as $t,
                    Canon::I(i) => i as $t,
                    Canon::U(u) => u as $t,
                }
            }
            #[inline]
            fn to_canon(self) -> Canon {
                Canon::F(self as f64)
            }
            #[inline]
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
            #[inline]
            fn wadd(self, o: Self) -> Self {
                self + o
            }
            #[inline]
            fn wmul(self, o: Self) -> Self {
                self * o
            }
            #[inline]
            fn div_count(self, n: usize) -> Option<Self> {
                Some(self / n as $t)
            }
            fn lowest() -> Self {
                <$t>::NEG_INFINITY
            }
            #[inline]
            fn comp_add(sum: &mut Self, comp: &mut Self, x: Self) {
                let t = *sum + x;
                if t.is_finite() {
                    if sum.abs() >= x.abs() {
                        *comp += (*sum - t) + x;
                    } else {
                        *comp += (x - t) + *sum;
                    }
                }
                *sum = t;
            }
        }
        impl Float for $t {
            #[inline]
            fn exp(self) -> Self {
                <$t>::exp(self)
            }
            #[inline]
            fn ln(self) -> Self {
                <$t>::ln(self)
            }
            #[inline]
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            #[inline]
            fn from_f64(v: f64) -> Self {
                v as $t
            }
        }
    };
}
float_num!(f32);
float_num!(f64);

macro_rules! int_num {
    ($t:ty, $kind:ident) => {
        impl Num for $t {
            #[inline]
            fn from_canon(c: Canon) -> Self {
                match c {
                    Canon::F(v) => v as $t,
                    Canon::I(i) => i as $t,
                    Canon::U(u) => u as $t,
                }
            }
            #[inline]
            fn to_canon(self) -> Canon {
                Canon::$kind(self)
            }
            #[inline]
            fn is_nan(self) -> bool {
                false
            }
            #[inline]
            fn wadd(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
            #[inline]
            fn wmul(self, o: Self) -> Self {
                self.wrapping_mul(o)
            }
            #[inline]
            fn div_count(self, n: usize) -> Option<Self> {
                if n == 0 { None } else { Some(self.wrapping_div(n as $t)) }
            }
            fn lowest() -> Self {
                <$t>::MIN
            }
            #[inline]
            fn comp_add(sum: &mut Self, _comp: &mut Self, x: Self) {
                *sum = sum.wrapping_add(x);
            }
        }
    };
}
int_num!(i64, I);
int_num!(u64, U);

/// The working types of a storage type.
pub(crate) trait Typed: Elem {
    type W: Num;
    type F: Float;
    #[inline]
    fn work(self) -> Self::W {
        Self::W::from_canon(self.canon())
    }
    #[inline]
    fn real(self) -> Self::F {
        Self::F::from_canon(self.canon())
    }
    #[inline]
    fn store<N: Num>(v: N) -> Self {
        Self::from_canon(v.to_canon())
    }
}

macro_rules! typed {
    ($w:ty, $f:ty: $($t:ty),*) => {$(
        impl Typed for $t {
            type W = $w;
            type F = $f;
        }
    )*};
}
typed!(f32, f32: f16, bf16, f32, F8E4m3, F8E5m2);
typed!(f64, f64: f64);
typed!(i64, f64: i8, i16, i32, i64);
typed!(u64, f64: u8, u16, u32, u64, bool);

/// Read access to the contiguous elements of a host buffer, from any thread.
#[derive(Clone, Copy)]
pub(crate) struct Src<T> {
    ptr: *const T,
    len: usize,
}

/// Write access to the contiguous elements of a host buffer, from any thread; callers write
/// disjoint elements.
#[derive(Clone, Copy)]
pub(crate) struct Dst<T> {
    ptr: *mut T,
    len: usize,
}

// SAFETY: the pointers address host buffers that outlive the kernel call; concurrent writers
// touch disjoint elements (each kernel partitions its output).
unsafe impl<T> Send for Src<T> {}
unsafe impl<T> Sync for Src<T> {}
unsafe impl<T> Send for Dst<T> {}
unsafe impl<T> Sync for Dst<T> {}

impl<T: Copy> Src<T> {
    /// The elements of `b`, whose dtype the caller matched to `T`.
    pub fn of(b: &Buffer) -> Src<T> {
        Src { ptr: b.addr() as *const T, len: b.num_elements() }
    }

    #[inline]
    pub fn get(&self, i: usize) -> T {
        assert!(i < self.len);
        // SAFETY: i is inside the buffer (checked above); unaligned reads accept any host buffer.
        unsafe { std::ptr::read_unaligned(self.ptr.add(i)) }
    }
}

impl<T: Elem> Src<T> {
    /// Elements a..a + out.len() as working values.
    #[inline]
    pub fn read<V: Num>(&self, a: usize, out: &mut [V]) {
        assert!(a.checked_add(out.len()).is_some_and(|b| b <= self.len));
        if TypeId::of::<T>() == TypeId::of::<V>() {
            // SAFETY: T and V are one type; the range is inside the buffer (checked above).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.ptr.add(a) as *const u8,
                    out.as_mut_ptr() as *mut u8,
                    size_of_val(out),
                )
            };
        } else {
            for (i, o) in out.iter_mut().enumerate() {
                // SAFETY: as above; unaligned reads accept any host buffer.
                *o = V::from_canon(unsafe { std::ptr::read_unaligned(self.ptr.add(a + i)) }.canon());
            }
        }
    }
}

impl<T: Elem> Dst<T> {
    /// Stores `vals` (rounded with the cast rules) at elements a..a + vals.len().
    #[inline]
    pub fn write<V: Num>(&self, a: usize, vals: &[V]) {
        assert!(a.checked_add(vals.len()).is_some_and(|b| b <= self.len));
        if TypeId::of::<T>() == TypeId::of::<V>() {
            // SAFETY: T and V are one type; the range is inside the buffer (checked above) and
            // written by this caller only.
            unsafe {
                std::ptr::copy_nonoverlapping(vals.as_ptr() as *const u8, self.ptr.add(a) as *mut u8, size_of_val(vals))
            };
        } else {
            for (i, v) in vals.iter().enumerate() {
                // SAFETY: as above.
                unsafe { std::ptr::write_unaligned(self.ptr.add(a + i), T::from_canon(v.to_canon())) };
            }
        }
    }
}

impl<T: Copy> Dst<T> {
    pub fn of(b: &Buffer) -> Dst<T> {
        Dst { ptr: b.addr() as *mut T, len: b.num_elements() }
    }

    #[inline]
    pub fn set(&self, i: usize, v: T) {
        assert!(i < self.len);
        // SAFETY: i is inside the buffer (checked above); no other thread writes element i.
        unsafe { std::ptr::write_unaligned(self.ptr.add(i), v) }
    }
}
