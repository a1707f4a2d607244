//! Element types. The numeric codes are MAX's own (`DType.float32.value == 81`), so a code can
//! cross the Python boundary as a plain integer and mean the same thing on both sides.

use std::fmt;

/// Every element type the engine knows. Sub-byte float types occupy one byte per element
/// in memory (MAX stores them unpacked), so `size_in_bytes` is 1 for them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum DType {
    Bool = 1,
    Float4E2m1fn = 64,
    Float6E2m3fn = 65,
    Float6E3m2fn = 66,
    Float8E8m0fnu = 73,
    Float8E4m3fn = 75,
    Float8E4m3fnuz = 76,
    Float8E5m2 = 77,
    Float8E5m2fnuz = 78,
    Float16 = 79,
    BFloat16 = 80,
    Float32 = 81,
    Float64 = 82,
    UInt8 = 134,
    Int8 = 135,
    UInt16 = 136,
    Int16 = 137,
    UInt32 = 138,
    Int32 = 139,
    UInt64 = 140,
    Int64 = 141,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DTypeError {
    #[error("unknown dtype code {0}; valid codes are those of max.dtype.DType")]
    UnknownCode(i64),
    #[error("unknown dtype name {0:?}")]
    UnknownName(String),
}

impl DType {
    /// All members, in MAX's listing order.
    pub const ALL: [DType; 21] = [
        DType::Bool,
        DType::Int8,
        DType::Int16,
        DType::Int32,
        DType::Int64,
        DType::UInt8,
        DType::UInt16,
        DType::UInt32,
        DType::UInt64,
        DType::Float16,
        DType::Float32,
        DType::Float64,
        DType::BFloat16,
        DType::Float4E2m1fn,
        DType::Float6E2m3fn,
        DType::Float6E3m2fn,
        DType::Float8E8m0fnu,
        DType::Float8E4m3fn,
        DType::Float8E4m3fnuz,
        DType::Float8E5m2,
        DType::Float8E5m2fnuz,
    ];

    pub fn from_code(code: i64) -> Result<DType, DTypeError> {
        DType::ALL.into_iter().find(|d| *d as i64 == code).ok_or(DTypeError::UnknownCode(code))
    }

    pub fn from_name(name: &str) -> Result<DType, DTypeError> {
        DType::ALL.into_iter().find(|d| d.name() == name).ok_or_else(|| DTypeError::UnknownName(name.to_string()))
    }

    pub fn code(self) -> u8 {
        self as u8
    }

    /// The Python member name (`DType.float8_e4m3fn`).
    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::Int8 => "int8",
            DType::Int16 => "int16",
            DType::Int32 => "int32",
            DType::Int64 => "int64",
            DType::UInt8 => "uint8",
            DType::UInt16 => "uint16",
            DType::UInt32 => "uint32",
            DType::UInt64 => "uint64",
            DType::Float16 => "float16",
            DType::Float32 => "float32",
            DType::Float64 => "float64",
            DType::BFloat16 => "bfloat16",
            DType::Float4E2m1fn => "float4_e2m1fn",
            DType::Float6E2m3fn => "float6_e2m3fn",
            DType::Float6E3m2fn => "float6_e3m2fn",
            DType::Float8E8m0fnu => "float8_e8m0fnu",
            DType::Float8E4m3fn => "float8_e4m3fn",
            DType::Float8E4m3fnuz => "float8_e4m3fnuz",
            DType::Float8E5m2 => "float8_e5m2",
            DType::Float8E5m2fnuz => "float8_e5m2fnuz",
        }
    }

    /// Bits of information per element (4 for float4, 6 for float6).
    pub fn size_in_bits(self) -> usize {
        match self {
            DType::Float4E2m1fn => 4,
            DType::Float6E2m3fn | DType::Float6E3m2fn => 6,
            _ => self.size_in_bytes() * 8,
        }
    }

    /// Bytes one element occupies in memory.
    pub fn size_in_bytes(self) -> usize {
        match self {
            DType::Bool
            | DType::Int8
            | DType::UInt8
            | DType::Float4E2m1fn
            | DType::Float6E2m3fn
            | DType::Float6E3m2fn
            | DType::Float8E8m0fnu
            | DType::Float8E4m3fn
            | DType::Float8E4m3fnuz
            | DType::Float8E5m2
            | DType::Float8E5m2fnuz => 1,
            DType::Int16 | DType::UInt16 | DType::Float16 | DType::BFloat16 => 2,
            DType::Int32 | DType::UInt32 | DType::Float32 => 4,
            DType::Int64 | DType::UInt64 | DType::Float64 => 8,
        }
    }

    /// Natural alignment in bytes: every type here is aligned to its own size.
    pub fn align(self) -> usize {
        self.size_in_bytes()
    }

    pub fn is_float(self) -> bool {
        (self as u8) >= 64 && (self as u8) <= 82
    }

    pub fn is_float8(self) -> bool {
        matches!(
            self,
            DType::Float8E8m0fnu
                | DType::Float8E4m3fn
                | DType::Float8E4m3fnuz
                | DType::Float8E5m2
                | DType::Float8E5m2fnuz
        )
    }

    pub fn is_half(self) -> bool {
        matches!(self, DType::Float16 | DType::BFloat16)
    }

    pub fn is_integral(self) -> bool {
        self.is_signed_integral() || self.is_unsigned_integral()
    }

    pub fn is_signed_integral(self) -> bool {
        matches!(self, DType::Int8 | DType::Int16 | DType::Int32 | DType::Int64)
    }

    pub fn is_unsigned_integral(self) -> bool {
        matches!(self, DType::UInt8 | DType::UInt16 | DType::UInt32 | DType::UInt64)
    }

    pub fn is_bool(self) -> bool {
        self == DType::Bool
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_are_unique() {
        for d in DType::ALL {
            assert_eq!(DType::from_code(d as i64), Ok(d));
            assert_eq!(DType::from_name(d.name()), Ok(d));
        }
        let mut codes: Vec<u8> = DType::ALL.iter().map(|d| d.code()).collect();
        codes.sort();
        codes.dedup();
        assert_eq!(codes.len(), DType::ALL.len());
        assert_eq!(DType::from_code(2), Err(DTypeError::UnknownCode(2)));
        assert!(DType::from_name("complex64").is_err());
    }

    #[test]
    fn categories_partition_the_types() {
        for d in DType::ALL {
            let kinds = [d.is_float(), d.is_integral(), d.is_bool()];
            assert_eq!(kinds.iter().filter(|k| **k).count(), 1, "{d}");
            assert!(d.size_in_bits() <= d.size_in_bytes() * 8);
        }
        assert_eq!(DType::Float32.code(), 81);
        assert_eq!(DType::BFloat16.size_in_bytes(), 2);
        assert!(DType::Float8E5m2.is_float8() && DType::Float8E5m2.is_float());
        assert_eq!(DType::Float4E2m1fn.size_in_bits(), 4);
    }
}
