//! Value types: tensors and buffers (a dtype, a shape of dims, a device), and the chain type
//! that orders side effects.

use std::fmt;

use crate::dim::Dim;
use crate::dtype::DType;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DeviceKind {
    Cpu,
    Gpu,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceRef {
    pub kind: DeviceKind,
    pub id: i64,
}

impl DeviceRef {
    pub const CPU: DeviceRef = DeviceRef { kind: DeviceKind::Cpu, id: 0 };

    pub fn gpu(id: i64) -> DeviceRef {
        DeviceRef { kind: DeviceKind::Gpu, id }
    }
}

impl fmt::Display for DeviceRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            DeviceKind::Cpu => "cpu",
            DeviceKind::Gpu => "gpu",
        };
        write!(f, "{kind}:{}", self.id)
    }
}

pub type Shape = Vec<Dim>;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorType {
    pub dtype: DType,
    pub shape: Shape,
    pub device: DeviceRef,
}

impl TensorType {
    pub fn new(dtype: DType, shape: Shape, device: DeviceRef) -> TensorType {
        TensorType { dtype, shape, device }
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    pub fn with_shape(&self, shape: Shape) -> TensorType {
        TensorType { shape, ..self.clone() }
    }

    pub fn with_dtype(&self, dtype: DType) -> TensorType {
        TensorType { dtype, ..self.clone() }
    }
}

/// `float32[batch, 3]`, the compact form used in messages and the text form of graphs.
pub fn shape_str(shape: &[Dim]) -> String {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("[{}]", dims.join(", "))
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{} on {}", self.dtype, shape_str(&self.shape), self.device)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Type {
    Tensor(TensorType),
    /// A mutable tensor, updated in place by buffer ops.
    Buffer(TensorType),
    /// Orders side effects (buffer ops, print); carries no data.
    Chain,
}

impl Type {
    pub fn tensor(&self) -> Option<&TensorType> {
        match self {
            Type::Tensor(t) => Some(t),
            _ => None,
        }
    }

    pub fn buffer(&self) -> Option<&TensorType> {
        match self {
            Type::Buffer(t) => Some(t),
            _ => None,
        }
    }
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Type::Tensor(t) => write!(f, "{t}"),
            Type::Buffer(t) => write!(f, "buffer {t}"),
            Type::Chain => f.write_str("chain"),
        }
    }
}
