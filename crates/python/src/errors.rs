//! The runtime's errors as Python exceptions: ValueError, TypeError, IndexError, MemoryError,
//! RuntimeError (device and driver failures, with the CUDA error name).

use max_runtime::Error;
use pyo3::PyErr;
use pyo3::exceptions::{PyIndexError, PyMemoryError, PyRuntimeError, PyTypeError, PyValueError};

pub fn to_py(e: Error) -> PyErr {
    let msg = e.to_string();
    match e {
        Error::Value(_) => PyValueError::new_err(msg),
        Error::Type(_) => PyTypeError::new_err(msg),
        Error::Index(_) => PyIndexError::new_err(msg),
        Error::OutOfMemory(_) => PyMemoryError::new_err(msg),
        Error::Device(_) | Error::Cuda { .. } | Error::Kernel(_) => PyRuntimeError::new_err(msg),
    }
}

/// `.py()?` turns a runtime result into a Python one.
pub trait PyResultExt<T> {
    fn py(self) -> pyo3::PyResult<T>;
}

impl<T> PyResultExt<T> for Result<T, Error> {
    fn py(self) -> pyo3::PyResult<T> {
        self.map_err(to_py)
    }
}
