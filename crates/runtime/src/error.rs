//! The runtime's error type. Each variant maps to one Python exception in crates/python.

use cudarc::driver::{DriverError, sys::cudaError_enum};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad shapes, dtypes or arguments (Python ValueError).
    #[error("{0}")]
    Value(String),
    /// An argument of the wrong kind (Python TypeError).
    #[error("{0}")]
    Type(String),
    /// An index out of range (Python IndexError).
    #[error("{0}")]
    Index(String),
    /// Host or device memory exhausted (Python MemoryError).
    #[error("{0}")]
    OutOfMemory(String),
    /// No such device, or no driver (Python RuntimeError).
    #[error("{0}")]
    Device(String),
    /// A CUDA driver call failed (Python RuntimeError, with the CUDA error name).
    #[error("CUDA error in {op}: {err}")]
    Cuda { op: &'static str, err: DriverError },
    /// Kernel compilation or launch failed (Python RuntimeError).
    #[error(transparent)]
    Kernel(max_kernels_cuda::Error),
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub(crate) fn cuda(op: &'static str) -> impl FnOnce(DriverError) -> Error {
        move |err| {
            if err.0 == cudaError_enum::CUDA_ERROR_OUT_OF_MEMORY {
                Error::OutOfMemory(format!("CUDA device memory exhausted in {op}"))
            } else {
                Error::Cuda { op, err }
            }
        }
    }
}

/// A kernel-crate error as the runtime's: a problem no kernel takes (`Unsupported`) is a value
/// error (ValueError in Python), a device out of memory is OutOfMemory, the rest kernel errors.
impl From<max_kernels_cuda::Error> for Error {
    fn from(e: max_kernels_cuda::Error) -> Self {
        if let max_kernels_cuda::Error::Unsupported(m) = e {
            return Error::Value(m);
        }
        match e.driver_error() {
            Some(d) if d.0 == cudaError_enum::CUDA_ERROR_OUT_OF_MEMORY => Error::OutOfMemory(e.to_string()),
            _ => Error::Kernel(e),
        }
    }
}
