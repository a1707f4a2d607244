//! The engine's graph layer: element types, shapes and (later) the IR and its passes.
//! Pure Rust on purpose: no Python and no CUDA, so everything here is testable with `cargo test`.

pub mod dtype;

pub use dtype::{DType, DTypeError};
