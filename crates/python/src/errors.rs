//! The runtime's errors as Python exceptions: ValueError, TypeError, IndexError, MemoryError,
//! RuntimeError (device and driver failures, with the CUDA error name).

use std::panic::{AssertUnwindSafe, catch_unwind};

use max_runtime::Error;
use pyo3::exceptions::{PyIndexError, PyMemoryError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::{PyErr, PyResult, Python};

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

/// Runs `f` with the GIL released. A panic in it (a bug: bad input gets an error, never a
/// panic) comes back as a RuntimeError naming `what` and the panic's message, rather than as
/// pyo3's PanicException (a BaseException, which `except Exception` does not catch); the
/// process stays usable.
pub fn detached<T: Send>(py: Python<'_>, what: &str, f: impl FnOnce() -> Result<T, Error> + Send) -> PyResult<T> {
    match py.detach(|| catch_unwind(AssertUnwindSafe(f))) {
        Ok(r) => r.py(),
        Err(payload) => {
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "no message".into());
            Err(PyRuntimeError::new_err(format!("internal error in {what} (a bug in max; please report it): {msg}")))
        }
    }
}
