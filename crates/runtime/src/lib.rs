//! The engine's runtime: devices (the host CPU, CUDA GPUs through cudarc), streams, buffers
//! with strided views, copies between devices, and the host reference kernels.
//!
//! A buffer is a view (dtype, shape, strides, byte offset) over a reference-counted storage
//! that lives on one device. Views share storage; copies make new storage.

mod buffer;
pub mod cpu;
mod cuda;
mod device;
pub mod engine;
mod error;
mod host_pool;
mod index;
pub mod nccl;
mod operands;
mod scalar;
mod shared;
mod staging;
mod storage;
mod stream;
mod strided;
mod transfer;
pub mod weights;

pub use buffer::Buffer;
pub use cuda::{CudaDevice, accelerator_count, cuda_unavailable_reason};
pub use device::{Device, DeviceStats};
pub use error::{Error, Result};
pub use index::IndexItem;
pub use scalar::Scalar;
pub use storage::{External, Storage};
pub use stream::Stream;

pub use max_graph::DType;
