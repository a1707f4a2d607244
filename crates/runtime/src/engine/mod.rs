//! Compiling graphs into executable plans and running them.

mod control;
pub mod conv_epilogue;
pub mod epilogue;
pub(crate) mod exec;
mod gpu;
mod graphs;
pub mod kernels;
pub mod memory;
pub mod model;
pub mod plan;
pub mod program;
pub mod shapes;
mod workers;

pub use model::Model;
