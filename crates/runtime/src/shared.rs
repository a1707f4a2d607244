//! Types the engine and both backends share, defined below all of them: fused elementwise
//! expressions (built by the engine's passes, evaluated by the host and CUDA kernels) and the
//! results of data-dependent ops.

use max_graph::Type;
use max_graph::ops::Op;

use crate::Buffer;

/// An operand of a fused expression: a group input or an earlier node of the group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operand {
    Input(usize),
    Node(usize),
}

/// A tree of elementwise ops evaluated together; the last node is the result.
#[derive(Clone, Debug, PartialEq)]
pub struct Fused {
    pub nodes: Vec<(Op, Vec<Operand>, Type)>,
}

impl Fused {
    /// A single elementwise op as a one-node group.
    pub fn single(op: &Op, out_type: &Type, arity: usize) -> Fused {
        Fused { nodes: vec![(op.clone(), (0..arity).map(Operand::Input).collect(), out_type.clone())] }
    }
}

/// The results of a data-dependent op, and the (symbol, value) bindings their new dims introduce.
pub type Dynamic = (Vec<Buffer>, Vec<(String, i64)>);
