//! Op attributes: the non-tensor arguments of an op (axes, shapes, flags, constant data), as a
//! small typed map. Getters report a missing or mistyped attribute as an error naming the op.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::dim::Dim;
use crate::dtype::DType;
use crate::types::{DeviceRef, Type};

#[derive(Clone, Debug, PartialEq)]
pub enum Attr {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Ints(Vec<i64>),
    Dims(Vec<Dim>),
    DType(DType),
    Device(DeviceRef),
    Types(Vec<Type>),
    /// Raw little-endian element bytes (constants).
    Data(Arc<Vec<u8>>),
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Attrs(pub BTreeMap<String, Attr>);

impl Attrs {
    pub fn new() -> Attrs {
        Attrs(BTreeMap::new())
    }

    pub fn with(mut self, key: &str, value: Attr) -> Attrs {
        self.0.insert(key.to_string(), value);
        self
    }

    pub fn get(&self, key: &str) -> Option<&Attr> {
        match self.0.get(key) {
            None | Some(Attr::None) => None,
            Some(a) => Some(a),
        }
    }
}

impl std::fmt::Display for Attr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Attr::None => f.write_str("None"),
            Attr::Bool(b) => write!(f, "{b}"),
            Attr::Int(i) => write!(f, "{i}"),
            Attr::Float(x) => write!(f, "{x:?}"),
            Attr::Str(s) => write!(f, "{s:?}"),
            Attr::Ints(v) => write!(f, "{v:?}"),
            Attr::Dims(v) => f.write_str(&crate::types::shape_str(v)),
            Attr::DType(d) => write!(f, "{d}"),
            Attr::Device(d) => write!(f, "{d}"),
            Attr::Types(t) => {
                let parts: Vec<String> = t.iter().map(|t| t.to_string()).collect();
                write!(f, "[{}]", parts.join(", "))
            }
            Attr::Data(d) => write!(f, "<{} bytes>", d.len()),
        }
    }
}
