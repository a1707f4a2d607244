//! Compiling graphs into executable plans and running them.

pub mod memory;
pub mod shapes;
