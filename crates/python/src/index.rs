//! Python index expressions and scalar values, turned into the runtime's types.

use max_runtime::{IndexItem, Scalar};
use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyEllipsis, PyFloat, PySlice, PyTuple};

fn opt_i64(obj: Bound<'_, PyAny>) -> PyResult<Option<i64>> {
    if obj.is_none() { Ok(None) } else { Ok(Some(obj.extract()?)) }
}

fn item(obj: &Bound<'_, PyAny>) -> PyResult<IndexItem> {
    if obj.is_none() {
        return Ok(IndexItem::NewAxis);
    }
    if obj.is_instance_of::<PyEllipsis>() {
        return Ok(IndexItem::Ellipsis);
    }
    if let Ok(s) = obj.cast::<PySlice>() {
        return Ok(IndexItem::Slice {
            start: opt_i64(s.getattr("start")?)?,
            stop: opt_i64(s.getattr("stop")?)?,
            step: opt_i64(s.getattr("step")?)?,
        });
    }
    if obj.is_instance_of::<PyBool>() || obj.is_instance_of::<PyFloat>() {
        return Err(PyTypeError::new_err(format!(
            "Buffer indices must be integers, slices, '...' or None, got {}",
            obj.get_type().name()?
        )));
    }
    match obj.extract::<i64>() {
        Ok(i) => Ok(IndexItem::At(i)),
        Err(e) if e.is_instance_of::<PyOverflowError>(obj.py()) => {
            Err(PyOverflowError::new_err(format!("Buffer index {obj} does not fit in 64 bits")))
        }
        Err(_) => Err(PyTypeError::new_err(format!(
            "Buffer indices must be integers, slices, '...' or None, got {}",
            obj.get_type().name()?
        ))),
    }
}

/// `buf[...]`'s key as index items (a tuple is one item per entry).
pub fn parse_index(key: &Bound<'_, PyAny>) -> PyResult<Vec<IndexItem>> {
    match key.cast::<PyTuple>() {
        Ok(t) => t.iter().map(|k| item(&k)).collect(),
        Err(_) => Ok(vec![item(key)?]),
    }
}

/// ValueError (naming `who`) unless `value` is exactly an element of an integral or bool
/// `dtype` (an integer in its range; a float that is finite and whole; 0 or 1 for bool), as
/// ``Tensor.full`` and ``ops.constant`` check. Float dtypes take any value (rounding as IEEE).
pub fn check_fits(value: Scalar, dtype: max_runtime::DType, who: &str) -> PyResult<()> {
    use max_runtime::DType as D;
    let (lo, hi): (i128, i128) = match dtype {
        D::Bool => (0, 1),
        D::Int8 => (i8::MIN.into(), i8::MAX.into()),
        D::Int16 => (i16::MIN.into(), i16::MAX.into()),
        D::Int32 => (i32::MIN.into(), i32::MAX.into()),
        D::Int64 => (i64::MIN.into(), i64::MAX.into()),
        D::UInt8 => (0, u8::MAX.into()),
        D::UInt16 => (0, u16::MAX.into()),
        D::UInt32 => (0, u32::MAX.into()),
        D::UInt64 => (0, u64::MAX.into()),
        _ => return Ok(()),
    };
    let v: Option<i128> = match value {
        Scalar::Bool(b) => Some(b as i128),
        Scalar::Int(i) => Some(i.into()),
        Scalar::UInt(u) => Some(u.into()),
        Scalar::Float(f) => {
            if !f.is_finite() || f.fract() != 0.0 {
                return Err(PyValueError::new_err(format!(
                    "{who}: {f} is not a whole number, so it does not fit in {}",
                    dtype.name()
                )));
            }
            // (a whole f64 beyond i128 is far outside every range)
            (f.abs() < 1.7e38).then_some(f as i128)
        }
    };
    match v {
        Some(v) if (lo..=hi).contains(&v) => Ok(()),
        _ => {
            let shown = match value {
                Scalar::Float(f) => format!("{f}"),
                Scalar::Int(i) => i.to_string(),
                Scalar::UInt(u) => u.to_string(),
                Scalar::Bool(b) => b.to_string(),
            };
            Err(PyValueError::new_err(format!("{who}: {shown} does not fit in {} (range {lo}..{hi})", dtype.name())))
        }
    }
}

/// A Python bool, int or float (numpy scalars included) as a Scalar; None if it is not one.
pub fn parse_scalar(obj: &Bound<'_, PyAny>) -> PyResult<Option<Scalar>> {
    // Arrays (numpy, Buffer, torch) are not scalars, except numpy's 0-d ones.
    if let Ok(ndim) = obj.getattr("ndim").and_then(|n| n.extract::<usize>()) {
        if ndim > 0 || !obj.hasattr("item")? {
            return Ok(None);
        }
        return parse_scalar(&obj.call_method0("item")?);
    }
    if obj.hasattr("__len__")? {
        return Ok(None);
    }
    if obj.is_instance_of::<PyBool>() {
        return Ok(Some(Scalar::Bool(obj.extract()?)));
    }
    let np_bool = obj.get_type().name().map(|n| n == "bool" || n == "bool_").unwrap_or(false);
    if np_bool {
        return Ok(Some(Scalar::Bool(obj.is_truthy()?)));
    }
    if obj.is_instance_of::<PyFloat>() {
        return Ok(Some(Scalar::Float(obj.extract()?)));
    }
    if obj.hasattr("__index__")? {
        if let Ok(i) = obj.extract::<i64>() {
            return Ok(Some(Scalar::Int(i)));
        }
        if let Ok(u) = obj.extract::<u64>() {
            return Ok(Some(Scalar::UInt(u)));
        }
        return Err(PyOverflowError::new_err(format!("{obj} does not fit in 64 bits")));
    }
    if obj.hasattr("__float__")? && !obj.hasattr("__len__")? {
        return Ok(Some(Scalar::Float(obj.extract()?)));
    }
    Ok(None)
}

/// A Scalar as the matching Python object.
pub fn scalar_to_py(py: Python<'_>, s: Scalar) -> PyResult<Py<PyAny>> {
    use pyo3::IntoPyObjectExt;
    match s {
        Scalar::Bool(b) => b.into_py_any(py),
        Scalar::Int(i) => i.into_py_any(py),
        Scalar::UInt(u) => u.into_py_any(py),
        Scalar::Float(f) => f.into_py_any(py),
    }
}
