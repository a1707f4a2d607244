//! The GGML tensor types a GGUF file may hold: code, name, block geometry, and what MAX makes
//! of each (a plain dtype, or uint8 blocks of a `QuantizationEncoding`).

use crate::DType;

/// A GGML tensor type, by its code in GGUF files.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GgmlType(u32);

/// (code, name, elements per block, bytes per block). Codes 4, 5 and 31..=33, 36..=38 were
/// retired by ggml and are refused like any unknown code.
const TABLE: &[(u32, &str, usize, usize)] = &[
    (0, "F32", 1, 4),
    (1, "F16", 1, 2),
    (2, "Q4_0", 32, 18),
    (3, "Q4_1", 32, 20),
    (6, "Q5_0", 32, 22),
    (7, "Q5_1", 32, 24),
    (8, "Q8_0", 32, 34),
    (9, "Q8_1", 32, 36),
    (10, "Q2_K", 256, 84),
    (11, "Q3_K", 256, 110),
    (12, "Q4_K", 256, 144),
    (13, "Q5_K", 256, 176),
    (14, "Q6_K", 256, 210),
    (15, "Q8_K", 256, 292),
    (16, "IQ2_XXS", 256, 66),
    (17, "IQ2_XS", 256, 74),
    (18, "IQ3_XXS", 256, 98),
    (19, "IQ1_S", 256, 50),
    (20, "IQ4_NL", 32, 18),
    (21, "IQ3_S", 256, 110),
    (22, "IQ2_S", 256, 82),
    (23, "IQ4_XS", 256, 136),
    (24, "I8", 1, 1),
    (25, "I16", 1, 2),
    (26, "I32", 1, 4),
    (27, "I64", 1, 8),
    (28, "F64", 1, 8),
    (29, "IQ1_M", 256, 56),
    (30, "BF16", 1, 2),
    (34, "TQ1_0", 256, 54),
    (35, "TQ2_0", 256, 66),
    (39, "MXFP4", 32, 17),
];

impl GgmlType {
    pub const F32: GgmlType = GgmlType(0);
    pub const F16: GgmlType = GgmlType(1);
    pub const Q4_0: GgmlType = GgmlType(2);
    pub const Q4_1: GgmlType = GgmlType(3);
    pub const Q8_0: GgmlType = GgmlType(8);
    pub const Q4_K: GgmlType = GgmlType(12);
    pub const Q5_K: GgmlType = GgmlType(13);
    pub const Q6_K: GgmlType = GgmlType(14);
    pub const BF16: GgmlType = GgmlType(30);

    pub fn from_code(code: u32) -> Option<GgmlType> {
        TABLE.iter().any(|e| e.0 == code).then_some(GgmlType(code))
    }

    pub fn from_name(name: &str) -> Option<GgmlType> {
        TABLE.iter().find(|e| e.1 == name).map(|e| GgmlType(e.0))
    }

    fn entry(self) -> (u32, &'static str, usize, usize) {
        // Values are only made from table codes.
        TABLE.iter().copied().find(|e| e.0 == self.0).unwrap_or((self.0, "?", 1, 1))
    }

    pub fn code(self) -> u32 {
        self.0
    }

    pub fn name(self) -> &'static str {
        self.entry().1
    }

    /// (elements, bytes) of one block; (1, element size) for plain types.
    pub fn block(self) -> (usize, usize) {
        let e = self.entry();
        (e.2, e.3)
    }

    pub fn is_block(self) -> bool {
        self.block().0 > 1
    }

    /// The dtype of a plain type.
    pub fn dtype(self) -> Option<DType> {
        Some(match self.0 {
            0 => DType::Float32,
            1 => DType::Float16,
            24 => DType::Int8,
            25 => DType::Int16,
            26 => DType::Int32,
            27 => DType::Int64,
            28 => DType::Float64,
            30 => DType::BFloat16,
            _ => return None,
        })
    }

    /// The `QuantizationEncoding` value of a block type MAX computes with.
    pub fn encoding(self) -> Option<&'static str> {
        Some(match self.0 {
            2 => "Q4_0",
            3 => "Q4_1",
            8 => "Q8_0",
            12 => "Q4_K",
            13 => "Q5_K",
            14 => "Q6_K",
            _ => return None,
        })
    }

    pub fn all() -> impl Iterator<Item = GgmlType> {
        TABLE.iter().map(|e| GgmlType(e.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings_agree_with_the_quant_kernels() {
        for t in GgmlType::all() {
            if let Some(enc) = t.encoding() {
                assert_eq!(super::super::encoding_block(enc), Some(t.block()), "{}", t.name());
            }
            assert!(t.dtype().is_none() || !t.is_block());
            assert_eq!(GgmlType::from_name(t.name()), Some(t));
        }
        assert_eq!(GgmlType::from_code(4), None);
        assert_eq!(GgmlType::from_code(31), None);
        assert_eq!(GgmlType::BF16.dtype(), Some(DType::BFloat16));
    }
}
