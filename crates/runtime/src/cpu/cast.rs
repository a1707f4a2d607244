//! Element-type conversion on the host, and the reference for kernels/cast.cu: the same rules,
//! bit for bit (see the header of prelude.cuh):
//!   * float -> float through f64 (exact for every source), rounded once to nearest-even; the
//!     narrow targets round through an f32 rounded-to-odd, which keeps that single rounding exact;
//!   * int -> float rounds once to nearest-even; the narrow targets through an f32 rounded to
//!     odd from the integer itself (through f64 a 64-bit integer would be rounded twice);
//!   * NaN becomes the target's canonical quiet NaN, sign kept;
//!   * float -> int truncates, saturates, NaN -> 0 (Rust's `as`); int -> int wraps;
//!   * anything -> bool is `x != 0`, NaN included;
//!   * float8_e4m3fn has no infinity (inf and overflow become NaN); float8_e5m2 overflows to inf.

use half::{bf16, f16};
use max_graph::DType;

use crate::{Error, Result};

/// A value in the widest form of its kind; every element converts through one of these.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Canon {
    F(f64),
    I(i64),
    U(u64),
}

/// One element type the host kernels handle.
pub trait Elem: Copy + Send + Sync + 'static {
    fn canon(self) -> Canon;
    fn from_canon(c: Canon) -> Self;
}

/// f64 -> f32 rounded to odd (truncate; set the last bit if anything was dropped).
pub fn f64_to_f32_odd(v: f64) -> f32 {
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

/// An integer -> f32 rounded to odd (truncate toward zero; set the last bit if anything was
/// dropped), as f64_to_f32_odd.
#[inline]
pub(crate) fn int_to_f32_odd(i: i128) -> f32 {
    let mut t = i as f32;
    if (t as i128).abs() > i.abs() {
        t = f32::from_bits(t.to_bits() - 1);
    }
    if t as i128 != i {
        t = f32::from_bits(t.to_bits() | 1);
    }
    t
}

/// A non-NaN f32 rounded to odd -> bf16, to nearest-even (inf stays inf).
#[inline]
pub(crate) fn bf16_from_f32_odd(t: f32) -> bf16 {
    let b = t.to_bits();
    let abs = b & 0x7FFF_FFFF;
    if abs == 0x7F80_0000 {
        return bf16::from_bits((b >> 16) as u16);
    }
    let r = abs + 0x7FFF + ((abs >> 16) & 1);
    bf16::from_bits((((b >> 31) << 15) | (r >> 16)) as u16)
}

/// A value rounded to odd in f32, for the narrow float targets (NaN stays NaN).
fn to_f32_odd(c: Canon) -> f32 {
    match c {
        Canon::F(v) => f64_to_f32_odd(v),
        Canon::I(i) => int_to_f32_odd(i as i128),
        Canon::U(u) => int_to_f32_odd(u as i128),
    }
}

/// f32 magnitude bits -> a small float's magnitude (mbits mantissa bits, bias), nearest-even.
/// Overflow shows as a value past the format's largest finite code; the caller maps it.
fn round_f32_to_small(abs: u32, mbits: u32, bias: i32) -> u32 {
    let exp = abs >> 23;
    if exp == 0 {
        return 0;
    }
    let mut e = exp as i32 - 127 + bias;
    let full = (abs & 0x7F_FFFF) | 0x80_0000;
    let mut shift = 23 - mbits as i32;
    if e < 1 {
        shift += 1 - e;
        e = 0;
    }
    if shift > 31 {
        return 0;
    }
    let mut q = full >> shift;
    let rem = full & ((1u32 << shift) - 1);
    let half = 1u32 << (shift - 1);
    if rem > half || (rem == half && q & 1 == 1) {
        q += 1;
    }
    if e >= 1 { ((e as u32) << mbits) + q - (1 << mbits) } else { q }
}

/// A small float (1 sign bit, ebits, mbits) to f64; the caller handles NaN and inf codes.
fn small_to_f64(bits: u32, ebits: u32, mbits: u32, bias: i32) -> f64 {
    let sign = (bits >> (ebits + mbits)) & 1;
    let e = (bits >> mbits) & ((1 << ebits) - 1);
    let m = bits & ((1 << mbits) - 1);
    let v = if e == 0 {
        m as f64 * 2f64.powi(1 - bias - mbits as i32)
    } else {
        (1.0 + m as f64 / (1u32 << mbits) as f64) * 2f64.powi(e as i32 - bias)
    };
    if sign == 1 { -v } else { v }
}

fn nan_with_sign(negative: bool) -> f64 {
    if negative { -f64::NAN } else { f64::NAN }
}

/// The float8_e4m3fn type: 4 exponent bits (bias 7), 3 mantissa bits, NaN = 0x7F, no inf.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(transparent)]
pub struct F8E4m3(pub u8);

/// The float8_e5m2 type: 5 exponent bits (bias 15), 2 mantissa bits, IEEE-style inf and NaN.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(transparent)]
pub struct F8E5m2(pub u8);

fn to_f64_checked(c: Canon) -> f64 {
    match c {
        Canon::F(v) => v,
        Canon::I(i) => i as f64,
        Canon::U(u) => u as f64,
    }
}

impl Elem for f64 {
    fn canon(self) -> Canon {
        Canon::F(self)
    }
    fn from_canon(c: Canon) -> Self {
        let v = to_f64_checked(c);
        if v.is_nan() { nan_with_sign(v.is_sign_negative()) } else { v }
    }
}

impl Elem for f32 {
    fn canon(self) -> Canon {
        Canon::F(self as f64)
    }
    fn from_canon(c: Canon) -> Self {
        match c {
            Canon::F(v) if v.is_nan() => f32::from_bits(((v.is_sign_negative() as u32) << 31) | 0x7FC0_0000),
            Canon::F(v) => v as f32,
            Canon::I(i) => i as f32,
            Canon::U(u) => u as f32,
        }
    }
}

impl Elem for f16 {
    fn canon(self) -> Canon {
        Canon::F(self.to_f64())
    }
    fn from_canon(c: Canon) -> Self {
        let v = to_f64_checked(c);
        if v.is_nan() {
            return f16::from_bits(((v.is_sign_negative() as u16) << 15) | 0x7E00);
        }
        f16::from_f32(to_f32_odd(c))
    }
}

impl Elem for bf16 {
    fn canon(self) -> Canon {
        Canon::F(self.to_f64())
    }
    fn from_canon(c: Canon) -> Self {
        let v = to_f64_checked(c);
        if v.is_nan() {
            return bf16::from_bits(((v.is_sign_negative() as u16) << 15) | 0x7FC0);
        }
        bf16_from_f32_odd(to_f32_odd(c))
    }
}

impl Elem for F8E4m3 {
    fn canon(self) -> Canon {
        if self.0 & 0x7F == 0x7F {
            return Canon::F(nan_with_sign(self.0 & 0x80 != 0));
        }
        Canon::F(small_to_f64(self.0 as u32, 4, 3, 7))
    }
    fn from_canon(c: Canon) -> Self {
        let v = to_f64_checked(c);
        let s = (v.is_sign_negative() as u8) << 7;
        if !v.is_finite() {
            return F8E4m3(s | 0x7F);
        }
        let m = round_f32_to_small(to_f32_odd(c).to_bits() & 0x7FFF_FFFF, 3, 7);
        F8E4m3(s | if m > 0x7E { 0x7F } else { m as u8 })
    }
}

impl Elem for F8E5m2 {
    fn canon(self) -> Canon {
        let neg = self.0 & 0x80 != 0;
        match self.0 & 0x7F {
            0x7C => Canon::F(if neg { f64::NEG_INFINITY } else { f64::INFINITY }),
            m if m > 0x7C => Canon::F(nan_with_sign(neg)),
            _ => Canon::F(small_to_f64(self.0 as u32, 5, 2, 15)),
        }
    }
    fn from_canon(c: Canon) -> Self {
        let v = to_f64_checked(c);
        let s = (v.is_sign_negative() as u8) << 7;
        if v.is_nan() {
            return F8E5m2(s | 0x7E);
        }
        if v.is_infinite() {
            return F8E5m2(s | 0x7C);
        }
        let m = round_f32_to_small(to_f32_odd(c).to_bits() & 0x7FFF_FFFF, 2, 15);
        F8E5m2(s | if m >= 0x7C { 0x7C } else { m as u8 })
    }
}

impl Elem for bool {
    fn canon(self) -> Canon {
        Canon::U(self as u64)
    }
    fn from_canon(c: Canon) -> Self {
        match c {
            Canon::F(v) => v != 0.0,
            Canon::I(i) => i != 0,
            Canon::U(u) => u != 0,
        }
    }
}

macro_rules! int_elem {
    ($($t:ty => $kind:ident),*) => {$(
        impl Elem for $t {
            fn canon(self) -> Canon {
                Canon::$kind(self as _)
            }
            fn from_canon(c: Canon) -> Self {
                match c {
                    Canon::F(v) => v as $t,
                    Canon::I(i) => i as $t,
                    Canon::U(u) => u as $t,
                }
            }
        }
    )*};
}
int_elem!(i8 => I, i16 => I, i32 => I, i64 => I, u8 => U, u16 => U, u32 => U, u64 => U);

/// Runs `$body` with `$t` bound to the Rust type of `$dtype`, for the dtypes cast supports.
#[macro_export]
macro_rules! with_cast_type {
    ($dtype:expr, $t:ident, $body:expr, $otherwise:expr) => {
        match $dtype {
            DType::Bool => {
                type $t = bool;
                $body
            }
            DType::Int8 => {
                type $t = i8;
                $body
            }
            DType::Int16 => {
                type $t = i16;
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
            DType::UInt8 => {
                type $t = u8;
                $body
            }
            DType::UInt16 => {
                type $t = u16;
                $body
            }
            DType::UInt32 => {
                type $t = u32;
                $body
            }
            DType::UInt64 => {
                type $t = u64;
                $body
            }
            DType::Float16 => {
                type $t = half::f16;
                $body
            }
            DType::BFloat16 => {
                type $t = half::bf16;
                $body
            }
            DType::Float32 => {
                type $t = f32;
                $body
            }
            DType::Float64 => {
                type $t = f64;
                $body
            }
            DType::Float8E4m3fn => {
                type $t = $crate::cpu::cast::F8E4m3;
                $body
            }
            DType::Float8E5m2 => {
                type $t = $crate::cpu::cast::F8E5m2;
                $body
            }
            _ => $otherwise,
        }
    };
}

fn unsupported(from: DType, to: DType) -> Error {
    Error::Value(format!(
        "cast from {from} to {to} is not supported: cast handles bool, the integer types, \
         float16, bfloat16, float32, float64, float8_e4m3fn and float8_e5m2"
    ))
}

fn cast_typed<S: Elem, D: Elem>(src: &[u8], dst: &mut [u8]) {
    let n = dst.len() / size_of::<D>();
    for i in 0..n {
        // SAFETY: i < n elements fit in both slices (checked by the caller); unaligned access
        // is used so host slices of any alignment work.
        unsafe {
            let s = std::ptr::read_unaligned(src.as_ptr().cast::<S>().add(i));
            std::ptr::write_unaligned(dst.as_mut_ptr().cast::<D>().add(i), D::from_canon(s.canon()));
        }
    }
}

/// Converts contiguous elements of `from` in `src` to `to` in `dst`.
pub fn cast_slice(src: &[u8], from: DType, dst: &mut [u8], to: DType) -> Result<()> {
    let n = src.len() / from.size_in_bytes();
    if src.len() != n * from.size_in_bytes() || dst.len() != n * to.size_in_bytes() {
        return Err(Error::Value(format!(
            "cast: {} bytes of {from} do not match {} bytes of {to}",
            src.len(),
            dst.len()
        )));
    }
    with_cast_type!(
        from,
        S,
        with_cast_type!(
            to,
            D,
            {
                cast_typed::<S, D>(src, dst);
                Ok(())
            },
            Err(unsupported(from, to))
        ),
        Err(unsupported(from, to))
    )
}

/// Decodes one element's bits (little-endian, in the low bytes of `bits`) to its widest form.
/// Handles every dtype, including the ones cast does not (float4/6, fnuz, e8m0).
pub fn decode(dtype: DType, bits: u64) -> Canon {
    let b8 = bits as u32 & 0xFF;
    match dtype {
        DType::Float4E2m1fn => Canon::F(small_to_f64(b8 & 0xF, 2, 1, 1)),
        DType::Float6E2m3fn => Canon::F(small_to_f64(b8 & 0x3F, 2, 3, 1)),
        DType::Float6E3m2fn => Canon::F(small_to_f64(b8 & 0x3F, 3, 2, 3)),
        DType::Float8E4m3fnuz if b8 == 0x80 => Canon::F(f64::NAN),
        DType::Float8E4m3fnuz => Canon::F(small_to_f64(b8, 4, 3, 8)),
        DType::Float8E5m2fnuz if b8 == 0x80 => Canon::F(f64::NAN),
        DType::Float8E5m2fnuz => Canon::F(small_to_f64(b8, 5, 2, 16)),
        DType::Float8E8m0fnu if b8 == 0xFF => Canon::F(f64::NAN),
        DType::Float8E8m0fnu => Canon::F(2f64.powi(b8 as i32 - 127)),
        DType::Bool => Canon::U((b8 != 0) as u64),
        DType::Int8 => Canon::I(bits as u8 as i8 as i64),
        DType::Int16 => Canon::I(bits as u16 as i16 as i64),
        DType::Int32 => Canon::I(bits as u32 as i32 as i64),
        DType::Int64 => Canon::I(bits as i64),
        DType::UInt8 => Canon::U(bits & 0xFF),
        DType::UInt16 => Canon::U(bits & 0xFFFF),
        DType::UInt32 => Canon::U(bits & 0xFFFF_FFFF),
        DType::UInt64 => Canon::U(bits),
        DType::Float16 => f16::from_bits(bits as u16).canon(),
        DType::BFloat16 => bf16::from_bits(bits as u16).canon(),
        DType::Float32 => f32::from_bits(bits as u32).canon(),
        DType::Float64 => f64::from_bits(bits).canon(),
        DType::Float8E4m3fn => F8E4m3(b8 as u8).canon(),
        DType::Float8E5m2 => F8E5m2(b8 as u8).canon(),
    }
}

/// Encodes a value as `dtype`'s bit pattern, with the cast rules.
pub fn encode(dtype: DType, value: Canon) -> Result<u64> {
    fn bits_of<T: Elem>(v: T) -> u64 {
        let mut out = [0u8; 8];
        // SAFETY: every Elem is at most 8 bytes of plain data.
        unsafe { std::ptr::write_unaligned(out.as_mut_ptr().cast::<T>(), v) };
        u64::from_le_bytes(out)
    }
    with_cast_type!(
        dtype,
        T,
        Ok(bits_of(T::from_canon(value))),
        Err(Error::Value(format!("values cannot be written as {dtype}: only its bit pattern can (use Buffer.view)")))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_to_odd_makes_double_rounding_exact() {
        // 1 + 2^-11 + 2^-40 lies just above the f16 halfway point between 1 and 1 + 2^-10:
        // rounding through a plain f32 would lose the 2^-40 and round to even (down).
        let v = 1.0 + 2f64.powi(-11) + 2f64.powi(-40);
        assert_eq!(f16::from_canon(Canon::F(v)).to_f64(), 1.0 + 2f64.powi(-10));
        assert_eq!(f16::from_canon(Canon::F(1.0 + 2f64.powi(-11))).to_f64(), 1.0);
        assert_eq!(bf16::from_canon(Canon::F(1.0 + 2f64.powi(-8) + 2f64.powi(-40))).to_f64(), 1.0 + 2f64.powi(-7));
    }

    #[test]
    fn float8_limits() {
        assert_eq!(F8E4m3::from_canon(Canon::F(448.0)).0, 0x7E);
        assert_eq!(F8E4m3::from_canon(Canon::F(464.0)).0, 0x7E); // tie, to even
        assert_eq!(F8E4m3::from_canon(Canon::F(465.0)).0, 0x7F); // overflow is NaN
        assert_eq!(F8E4m3::from_canon(Canon::F(-f64::INFINITY)).0, 0xFF);
        assert_eq!(F8E4m3::from_canon(Canon::F(2f64.powi(-9))).0, 0x01); // smallest subnormal
        assert_eq!(F8E5m2::from_canon(Canon::F(57344.0)).0, 0x7B);
        assert_eq!(F8E5m2::from_canon(Canon::F(61440.0)).0, 0x7C); // tie rounds to even = inf
        assert_eq!(F8E5m2::from_canon(Canon::F(2f64.powi(-16))).0, 0x01);
        for b in 0..=255u8 {
            let v = F8E4m3(b).canon();
            if let Canon::F(x) = v {
                if !x.is_nan() {
                    assert_eq!(F8E4m3::from_canon(v).0, b, "e4m3 {b:#x}");
                }
            }
            let v = F8E5m2(b).canon();
            if let Canon::F(x) = v {
                if !x.is_nan() {
                    assert_eq!(F8E5m2::from_canon(v).0, b, "e5m2 {b:#x}");
                }
            }
        }
    }

    #[test]
    fn int_rules() {
        assert_eq!(i8::from_canon(Canon::F(1e9)), 127);
        assert_eq!(u8::from_canon(Canon::F(-3.5)), 0);
        assert_eq!(i32::from_canon(Canon::F(f64::NAN)), 0);
        assert_eq!(i32::from_canon(Canon::F(-2.9)), -2);
        assert_eq!(u8::from_canon(Canon::I(300)), 44);
        assert_eq!(i64::from_canon(Canon::F(1e30)), i64::MAX);
        assert!(bool::from_canon(Canon::F(f64::NAN)));
        assert!(!bool::from_canon(Canon::F(-0.0)));
    }

    #[test]
    fn nan_is_canonical() {
        let nan = f32::from_bits(0xFFC1_2345);
        assert_eq!(f16::from_canon(nan.canon()).to_bits(), 0xFE00);
        assert_eq!(bf16::from_canon(nan.canon()).to_bits(), 0xFFC0);
        assert_eq!(f32::from_canon(nan.canon()).to_bits(), 0xFFC0_0000);
    }

    #[test]
    fn slices_convert() {
        let src: Vec<u8> = [1.5f32, -2.25, 70000.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut dst = vec![0u8; 6];
        cast_slice(&src, DType::Float32, &mut dst, DType::Float16).unwrap();
        let got: Vec<f32> = dst.chunks(2).map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32()).collect();
        assert_eq!(got, vec![1.5, -2.25, f32::INFINITY]);
        assert!(cast_slice(&src, DType::Float32, &mut dst, DType::Float4E2m1fn).is_err());
    }

    #[test]
    fn decode_small_formats() {
        assert_eq!(decode(DType::Float4E2m1fn, 0b0111), Canon::F(6.0));
        assert_eq!(decode(DType::Float8E8m0fnu, 127), Canon::F(1.0));
        assert_eq!(decode(DType::Float6E3m2fn, 0b011111), Canon::F(28.0));
    }
}
