//! A single value crossing the API (Buffer.item(), assignments, fills), and its encoding as an
//! element of any dtype with the cast rules of cpu::cast.

use max_graph::DType;

use crate::Result;
use crate::cpu::cast::{Canon, decode, encode};

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
}

impl Scalar {
    fn canon(self) -> Canon {
        match self {
            Scalar::Bool(b) => Canon::U(b as u64),
            Scalar::Int(i) => Canon::I(i),
            Scalar::UInt(u) => Canon::U(u),
            Scalar::Float(f) => Canon::F(f),
        }
    }

    /// The bit pattern of this value as one `dtype` element (in the low bytes).
    pub fn to_bits(self, dtype: DType) -> Result<u64> {
        encode(dtype, self.canon())
    }

    /// The value of one `dtype` element given its bits.
    pub fn from_bits(dtype: DType, bits: u64) -> Scalar {
        match decode(dtype, bits) {
            Canon::U(u) if dtype == DType::Bool => Scalar::Bool(u != 0),
            Canon::F(f) => Scalar::Float(f),
            Canon::I(i) => Scalar::Int(i),
            Canon::U(u) => Scalar::UInt(u),
        }
    }
}
