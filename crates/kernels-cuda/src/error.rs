//! The one error type of this crate.

use cudarc::driver::DriverError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("NVRTC could not be loaded: {0}")]
    NvrtcMissing(String),
    #[error("NVRTC failed to compile {family} for {arch}:\n{log}")]
    Compile { family: String, arch: String, log: String },
    #[error("NVRTC error in {op}: {msg}")]
    Nvrtc { op: &'static str, msg: String },
    #[error("CUDA error in {op}: {err}")]
    Driver { op: &'static str, err: DriverError },
    #[error("{0}")]
    Unsupported(String),
}

impl Error {
    pub(crate) fn driver(op: &'static str) -> impl FnOnce(DriverError) -> Error {
        move |err| Error::Driver { op, err }
    }

    /// The CUDA driver's error code, when this came from the driver.
    pub fn driver_error(&self) -> Option<&DriverError> {
        match self {
            Error::Driver { err, .. } => Some(err),
            _ => None,
        }
    }
}
