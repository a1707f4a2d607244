//! Host kernels. Each is also the reference its CUDA twin is checked against.

pub mod cast;
pub mod copy;
pub mod elementwise;
pub mod lanes;
pub mod matmul;
