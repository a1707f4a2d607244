//! Host kernels, one module per op family. Each is also the reference its CUDA twin is checked
//! against.

pub mod attention;
pub mod cast;
pub mod collective;
pub mod conv;
pub mod copy;
pub mod elementwise;
pub mod fft;
pub mod indexing;
pub mod lanes;
pub mod layout;
pub mod linalg;
pub mod matmul;
pub mod quant;
pub mod random;
pub mod reduction;
pub mod sampling;
