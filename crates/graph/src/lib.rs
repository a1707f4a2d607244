//! The engine's graph layer, pure Rust (no Python, no CUDA): element types, dims and shapes
//! (static, symbolic, algebraic), the IR, each op family's inference, the promotion rule, and
//! the text form of graphs.

pub mod attrs;
pub mod dim;
pub mod dtype;
pub mod error;
pub mod graph;
pub mod ops;
pub mod promote;
pub mod types;

pub use attrs::{Attr, Attrs};
pub use dim::{Dim, DimKind};
pub use dtype::{DType, DTypeError};
pub use error::{GraphError, Result};
pub use graph::{Graph, NodeId, ValueId};
pub use ops::{Op, OpKind};
pub use types::{DeviceKind, DeviceRef, Shape, TensorType, Type};
