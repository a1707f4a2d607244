//! `max._core.dtype`: the dtype table (crates/graph is its source of truth) and conversions
//! between Python `max.dtype.DType` members and the Rust enum.

use max_graph::DType;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyDict;

static DTYPE_CLASS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

pub fn class(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    Ok(DTYPE_CLASS.get_or_try_init(py, || py.import("max.dtype")?.getattr("DType").map(Bound::unbind))?.bind(py))
}

/// A `max.dtype.DType` member as the Rust enum; anything else is a TypeError naming `what`.
pub fn extract(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<DType> {
    let cls = class(obj.py())?;
    if !obj.is_instance(cls)? {
        let got = obj.get_type().name()?;
        return Err(PyTypeError::new_err(format!("{what} must be a max.dtype.DType, got {got} ({obj})")));
    }
    let code: i64 = obj.getattr("value")?.extract()?;
    DType::from_code(code).map_err(|e| PyTypeError::new_err(format!("{what}: {e}")))
}

/// The Python member for a Rust dtype.
pub fn to_py(py: Python<'_>, dtype: DType) -> PyResult<Bound<'_, PyAny>> {
    class(py)?.call1((dtype.code(),))
}

/// Every dtype's properties, keyed by member name; the Python enum is checked against it.
#[pyfunction]
fn table(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let out = PyDict::new(py);
    for d in DType::ALL {
        let row = PyDict::new(py);
        row.set_item("value", d.code())?;
        row.set_item("size_in_bits", d.size_in_bits())?;
        row.set_item("size_in_bytes", d.size_in_bytes())?;
        row.set_item("align", d.align())?;
        row.set_item("is_float", d.is_float())?;
        row.set_item("is_float8", d.is_float8())?;
        row.set_item("is_half", d.is_half())?;
        row.set_item("is_integral", d.is_integral())?;
        row.set_item("is_signed_integral", d.is_signed_integral())?;
        row.set_item("is_unsigned_integral", d.is_unsigned_integral())?;
        out.set_item(d.name(), row)?;
    }
    Ok(out)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(table, m)?)
}
