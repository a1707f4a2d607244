//! Compiling graphs into executable plans and running them.

mod control;
mod cuda_graphs;
pub(crate) mod exec;
mod gpu;
pub mod host_dispatch;
pub mod memory;
pub mod model;
pub mod passes;
pub mod plan;
pub mod program;
pub mod shapes;
mod workers;

pub use model::Model;
