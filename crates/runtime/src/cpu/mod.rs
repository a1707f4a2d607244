//! Host kernels. Each is also the reference its CUDA twin is checked against.

pub mod cast;
pub mod copy;
