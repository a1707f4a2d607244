//! Helpers for the ops' tests: tensor and buffer types from dim strings, attributes, and
//! running one op's inference.
use crate::attrs::{Attr, Attrs};
use crate::dim::Dim;
use crate::dtype::DType;
use crate::error::{GraphError, Result};
use crate::ops::{Op, OpKind, infer};
use crate::types::{DeviceRef, TensorType, Type, shape_str};

/// "3" is static, "-1" static -1, "a" symbolic, "a*2" / "a+1" / "a-2" / "a//2" algebraic.
pub fn d(s: &str) -> Dim {
    for (op, f) in [("+", Dim::add as fn(&Dim, &Dim) -> _), ("-", Dim::sub), ("//", Dim::floordiv), ("*", Dim::mul)] {
        if let Some((a, b)) = s.split_once(op).filter(|(a, _)| !a.is_empty()) {
            return f(&d(a), &d(b)).unwrap();
        }
    }
    s.parse::<i64>().map(Dim::stat).unwrap_or_else(|_| Dim::sym(s).unwrap())
}

pub fn dims(s: &[&str]) -> Vec<Dim> {
    s.iter().map(|x| d(x)).collect()
}

pub fn tt(dtype: DType, s: &[&str]) -> Type {
    Type::Tensor(TensorType::new(dtype, dims(s), DeviceRef::CPU))
}

pub fn f32(s: &[&str]) -> Type {
    tt(DType::Float32, s)
}

pub fn buf(dtype: DType, s: &[&str]) -> Type {
    Type::Buffer(TensorType::new(dtype, dims(s), DeviceRef::CPU))
}

/// A tensor type's shape, as error messages print it.
pub fn shape_of(t: &Type) -> String {
    shape_str(&t.tensor().unwrap().shape)
}

/// `kind`'s inference with `attrs` over `inputs`.
pub fn infer_with(kind: OpKind, attrs: Attrs, inputs: &[Type]) -> Result<Vec<Type>> {
    infer(&Op { kind, attrs }, inputs)
}

/// The same for an op of one result.
pub fn infer_one(kind: OpKind, attrs: Attrs, inputs: &[Type]) -> Result<Type> {
    infer_with(kind, attrs, inputs).map(|mut v| v.remove(0))
}

/// `kind`'s inference without attributes.
pub fn infer_plain(kind: OpKind, inputs: &[Type]) -> Result<Vec<Type>> {
    infer_with(kind, Attrs::new(), inputs)
}

pub fn run(kind: OpKind, inputs: &[Type], attrs: &[(&str, Attr)]) -> Result<Vec<Type>> {
    let mut a = Attrs::new();
    for (k, v) in attrs {
        a = a.with(k, v.clone());
    }
    infer(&Op { kind, attrs: a }, inputs)
}

/// The single result's shape.
pub fn shape(kind: OpKind, inputs: &[Type], attrs: &[(&str, Attr)]) -> Vec<Dim> {
    let out = run(kind, inputs, attrs).unwrap();
    assert_eq!(out.len(), 1);
    out[0].tensor().unwrap().shape.clone()
}

pub fn value_err(r: Result<Vec<Type>>, needle: &str) {
    match r {
        Err(GraphError::Value(m)) => assert!(m.contains(needle), "{m}"),
        other => panic!("expected a ValueError containing {needle:?}, got {other:?}"),
    }
}

pub fn type_err(r: Result<Vec<Type>>, needle: &str) {
    match r {
        Err(GraphError::Type(m)) => assert!(m.contains(needle), "{m}"),
        other => panic!("expected a TypeError containing {needle:?}, got {other:?}"),
    }
}

pub fn index_err(r: Result<Vec<Type>>, needle: &str) {
    match r {
        Err(GraphError::Index(m)) => assert!(m.contains(needle), "{m}"),
        other => panic!("expected an IndexError containing {needle:?}, got {other:?}"),
    }
}

pub fn int(v: i64) -> Attr {
    Attr::Int(v)
}

pub fn ints(v: &[i64]) -> Attr {
    Attr::Ints(v.to_vec())
}

pub fn dims_attr(s: &[&str]) -> Attr {
    Attr::Dims(dims(s))
}
