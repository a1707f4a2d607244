//! numpy in and out, sharing host memory both ways.
//!
//! `from_numpy` wraps the array's memory (the array is kept alive by the buffer); it copies only
//! when the array is not C-contiguous (as MAX documents) or is read-only (a buffer is writable).
//! `to_numpy` hands numpy an `__array_interface__` over the buffer's memory, so the array is a
//! view that keeps the buffer alive. Types numpy lacks (bfloat16, float8) travel as their bits
//! and are then viewed as `DType.to_numpy()` gives them.

use max_graph::DType;
use max_runtime::{Buffer, Device};
use numpy::{PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::dtype;
use crate::errors::{PyResultExt, detached};

/// numpy's type string for the bits of one element.
fn typestr(d: DType) -> &'static str {
    match d {
        DType::Bool => "|b1",
        DType::Int8 => "|i1",
        DType::Int16 => "<i2",
        DType::Int32 => "<i4",
        DType::Int64 => "<i8",
        DType::UInt8 => "|u1",
        DType::UInt16 => "<u2",
        DType::UInt32 => "<u4",
        DType::UInt64 => "<u8",
        DType::Float16 => "<f2",
        DType::Float32 => "<f4",
        DType::Float64 => "<f8",
        DType::BFloat16 => "<u2",
        _ => "|u1",
    }
}

/// An `__array_interface__` over a host buffer, for numpy.asarray.
#[pyclass(frozen, module = "max.driver")]
struct HostArrayView {
    buf: Buffer,
}

#[pymethods]
impl HostArrayView {
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let b = &self.buf;
        let item = b.dtype().size_in_bytes() as isize;
        let d = PyDict::new(py);
        d.set_item("version", 3)?;
        d.set_item("shape", PyTuple::new(py, b.shape())?)?;
        d.set_item("typestr", typestr(b.dtype()))?;
        d.set_item("data", (b.addr(), false))?;
        let strides: Vec<isize> = b.strides().iter().map(|s| s * item).collect();
        d.set_item("strides", PyTuple::new(py, strides)?)?;
        Ok(d)
    }
}

pub fn to_numpy(py: Python<'_>, buf: &Buffer) -> PyResult<Py<PyAny>> {
    let host = if buf.device().is_host() {
        buf.clone()
    } else {
        let b = buf.clone();
        detached(py, "Buffer.to_numpy", move || b.copy_to(&Device::Cpu))?
    };
    let np = py.import("numpy")?;
    let ts = typestr(host.dtype());
    let arr = if host.num_elements() == 0 {
        let shape = PyTuple::new(py, host.shape())?;
        np.call_method1("empty", (shape, ts))?
    } else {
        np.call_method1("asarray", (HostArrayView { buf: host.clone() },))?
    };
    let native = !host.dtype().is_float() || matches!(host.dtype(), DType::Float16 | DType::Float32 | DType::Float64);
    if native {
        return Ok(arr.unbind());
    }
    let target = dtype::to_py(py, host.dtype())?.call_method0("to_numpy").map_err(|e| {
        PyValueError::new_err(format!(
            "to_numpy: {} has no numpy dtype here ({}); read its bits with .view(DType.uint{}).to_numpy()",
            host.dtype(),
            e.value(py),
            host.dtype().size_in_bytes() * 8
        ))
    })?;
    if arr.getattr("dtype")?.eq(&target)? {
        Ok(arr.unbind())
    } else {
        Ok(arr.call_method1("view", (target,))?.unbind())
    }
}

pub fn from_numpy(arr: &Bound<'_, PyAny>) -> PyResult<Buffer> {
    let py = arr.py();
    let np = py.import("numpy")?;
    if !arr.is_instance(&np.getattr("ndarray")?)? {
        return Err(PyTypeError::new_err(format!(
            "Buffer.from_numpy expects a numpy.ndarray, got {}",
            arr.get_type().name()?
        )));
    }
    let np_dtype = arr.getattr("dtype")?;
    let dt = dtype::class(py)?.call_method1("from_numpy", (&np_dtype,)).map_err(|_| {
        PyTypeError::new_err(format!(
            "Buffer.from_numpy: numpy dtype {np_dtype} has no max.dtype.DType (supported: bool, \
             int8-64, uint8-64, float16/32/64, and ml_dtypes' bfloat16 and float8 types)"
        ))
    })?;
    let dtype = dtype::extract(&dt, "dtype")?;
    let flags = arr.getattr("flags")?;
    let native: bool = np_dtype.getattr("isnative")?.extract()?;
    let shareable: bool =
        native && flags.getattr("c_contiguous")?.extract::<bool>()? && flags.getattr("writeable")?.extract()?;
    let arr = if shareable {
        arr.clone()
    } else {
        let kw = PyDict::new(py);
        kw.set_item("order", "C")?;
        kw.set_item("dtype", np_dtype.call_method1("newbyteorder", ("=",))?)?;
        np.call_method("array", (arr,), Some(&kw))?
    };
    let ua = arr.cast::<PyUntypedArray>()?;
    let item = ua.dtype().itemsize();
    if item != dtype.size_in_bytes() {
        return Err(PyValueError::new_err(format!(
            "Buffer.from_numpy: numpy dtype {np_dtype} has {item}-byte elements but {dtype} has {}",
            dtype.size_in_bytes()
        )));
    }
    let shape: Vec<usize> = ua.shape().to_vec();
    let strides: Vec<isize> = ua.strides().to_vec();
    // SAFETY: reading the data pointer of a live ndarray.
    let data = unsafe { (*ua.as_array_ptr()).data } as u64;
    let keep: Py<PyAny> = arr.clone().unbind();
    // SAFETY: the array owns (or keeps alive) its data for as long as `keep` holds it.
    unsafe { Buffer::from_external(data, dtype, &shape, &strides, Device::Cpu, Box::new(keep)) }.py()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<HostArrayView>()
}
