//! The dtype promotion rule, in one place.
//!
//! 1. Two tensors: the result is one of the two dtypes, the one the other converts to without
//!    losing any value (`float16 + float32 -> float32`, `int16 + float32 -> float32`,
//!    `int8 + float16 -> float16`, `bool + x -> x`). If neither converts losslessly into the
//!    other (`int32 + float32`, `uint8 + int8`, `bfloat16 + float16`), it is an error: insert an
//!    explicit cast. There is no third type chosen for the pair.
//! 2. Python scalars and numpy values are weak: they take the tensor's dtype. An int must fit an
//!    integer dtype's range; a float cannot become an integer; a bool fits anything.
//! 3. True division (`/`) of integer or bool operands computes in float64, as Python does.

use crate::dtype::DType;

/// (precision bits including the implicit one, largest exponent, smallest normal exponent)
fn float_params(d: DType) -> Option<(i32, i32, i32)> {
    Some(match d {
        DType::Float16 => (11, 15, -14),
        DType::BFloat16 => (8, 127, -126),
        DType::Float32 => (24, 127, -126),
        DType::Float64 => (53, 1023, -1022),
        DType::Float8E4m3fn => (4, 8, -6),
        DType::Float8E4m3fnuz => (4, 7, -7),
        DType::Float8E5m2 => (3, 15, -14),
        DType::Float8E5m2fnuz => (3, 15, -15),
        DType::Float8E8m0fnu => (1, 127, -127),
        DType::Float4E2m1fn => (2, 2, 0),
        DType::Float6E2m3fn => (4, 2, 0),
        DType::Float6E3m2fn => (3, 4, -2),
        _ => return None,
    })
}

/// Whether every value of `from` is exactly representable in `to`.
pub fn converts_losslessly(from: DType, to: DType) -> bool {
    if from == to || from == DType::Bool {
        return true;
    }
    let bits = |d: DType| (d.size_in_bytes() * 8) as i32;
    match (from, to) {
        (_, DType::Bool) => false,
        (f, t) if f.is_unsigned_integral() && t.is_unsigned_integral() => bits(t) >= bits(f),
        (f, t) if f.is_unsigned_integral() && t.is_signed_integral() => bits(t) > bits(f),
        (f, t) if f.is_signed_integral() && t.is_signed_integral() => bits(t) >= bits(f),
        (f, t) if f.is_integral() && t.is_float() => {
            let Some((p, emax, _)) = float_params(t) else {
                return false;
            };
            // magnitude bits the integer needs (the most negative value is a power of two)
            let need = if f.is_signed_integral() { bits(f) - 1 } else { bits(f) };
            p >= need && emax >= need && t != DType::Float8E8m0fnu
        }
        (f, t) if f.is_float() && t.is_float() => {
            let (Some((pf, ef, nf)), Some((pt, et, nt))) = (float_params(f), float_params(t)) else {
                return false;
            };
            // precision, range, and the smallest subnormal all covered
            pt >= pf && et >= ef && nt - pt <= nf - pf && t != DType::Float8E8m0fnu
        }
        _ => false,
    }
}

/// The dtype of an elementwise op over `a` and `b`, or None when no lossless choice exists.
pub fn promote(a: DType, b: DType) -> Option<DType> {
    if converts_losslessly(a, b) {
        Some(b)
    } else if converts_losslessly(b, a) {
        Some(a)
    } else {
        None
    }
}

/// The dtype true division computes in.
pub fn true_division_dtype(d: DType) -> DType {
    if d.is_float() { d } else { DType::Float64 }
}

/// A Python scalar given to an op next to a tensor.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    Bool(bool),
    Int(i128),
    Float(f64),
}

/// Checks that a weak scalar can take `dtype`; the message says why not.
pub fn scalar_fits(dtype: DType, value: Scalar) -> Result<(), String> {
    match value {
        Scalar::Bool(_) => Ok(()),
        Scalar::Float(_) if !dtype.is_float() => Err(format!(
            "a Python float does not combine with a tensor of {dtype} (floats never convert to integers implicitly); cast the tensor to a float type first, or pass an int"
        )),
        Scalar::Float(_) => Ok(()),
        Scalar::Int(v) => {
            let (lo, hi): (i128, i128) = match dtype {
                DType::Bool => (0, 1),
                DType::Int8 => (i8::MIN as i128, i8::MAX as i128),
                DType::Int16 => (i16::MIN as i128, i16::MAX as i128),
                DType::Int32 => (i32::MIN as i128, i32::MAX as i128),
                DType::Int64 => (i64::MIN as i128, i64::MAX as i128),
                DType::UInt8 => (0, u8::MAX as i128),
                DType::UInt16 => (0, u16::MAX as i128),
                DType::UInt32 => (0, u32::MAX as i128),
                DType::UInt64 => (0, u64::MAX as i128),
                _ => return Ok(()),
            };
            if v < lo || v > hi {
                return Err(format!("the Python int {v} does not fit in {dtype} (range {lo}..={hi})"));
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use DType::*;

    #[test]
    fn the_documented_pairs() {
        assert_eq!(promote(Float16, Float32), Some(Float32));
        assert_eq!(promote(Int16, Float32), Some(Float32));
        assert_eq!(promote(Int8, Float16), Some(Float16));
        assert_eq!(promote(Bool, Float32), Some(Float32));
        assert_eq!(promote(Int32, Float64), Some(Float64));
        assert_eq!(promote(UInt8, Int16), Some(Int16));
        assert_eq!(promote(Float8E4m3fn, BFloat16), Some(BFloat16));
        assert_eq!(promote(Int32, Float32), None);
        assert_eq!(promote(UInt8, Int8), None);
        assert_eq!(promote(BFloat16, Float16), None);
        assert_eq!(promote(Int64, Float64), None);
        assert_eq!(promote(Float8E5m2, Float8E4m3fn), None);
    }

    #[test]
    fn weak_scalars() {
        assert!(scalar_fits(Int8, Scalar::Int(127)).is_ok());
        assert!(scalar_fits(Int8, Scalar::Int(300)).is_err());
        assert!(scalar_fits(UInt32, Scalar::Int(-1)).is_err());
        assert!(scalar_fits(Int32, Scalar::Float(2.5)).is_err());
        assert!(scalar_fits(Float16, Scalar::Float(1e10)).is_ok());
        assert!(scalar_fits(Float32, Scalar::Int(1 << 40)).is_ok());
        assert!(scalar_fits(Int64, Scalar::Bool(true)).is_ok());
        assert_eq!(true_division_dtype(Int32), Float64);
    }
}
