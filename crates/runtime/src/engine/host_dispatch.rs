//! Host dispatch: which host kernel runs each op that is not elementwise (elementwise ops and
//! fused groups go to cpu::elementwise from exec.rs). One entry point per op family.

use max_graph::ops::{Family, Op, OpKind};

use crate::{Buffer, Error, Result, cpu};

/// Runs `op` on the host; `outputs` are allocated with their planned shapes.
pub fn run_cpu(op: &Op, inputs: &[Buffer], outputs: &[Buffer]) -> Result<()> {
    match op.kind.family() {
        Family::Linalg => cpu::linalg::run(op, inputs, outputs),
        Family::Layout => cpu::layout::run(op, inputs, outputs),
        Family::Reduction => cpu::reduction::run(op, inputs, outputs),
        Family::Conv => cpu::conv::run(op, inputs, outputs),
        Family::Indexing => cpu::indexing::run(op, inputs, outputs),
        // Sibling qmatmuls (one activation, several weights; see engine/passes): one at a time.
        Family::Quant if op.kind == OpKind::QMatmul && inputs.len() > 2 && inputs.len() == outputs.len() + 1 => {
            for (w, out) in inputs[1..].iter().zip(outputs) {
                cpu::quant::run(op, &[inputs[0].clone(), w.clone()], std::slice::from_ref(out))?;
            }
            Ok(())
        }
        Family::Quant => cpu::quant::run(op, inputs, outputs),
        Family::Attention => cpu::attention::run(op, inputs, outputs),
        Family::Sampling => cpu::sampling::run(op, inputs, outputs),
        _ => Err(Error::Value(format!("{}: no CPU kernel for this op", op.kind.name()))),
    }
}

/// Ops whose result shape depends on the input values (nonzero's count of non-zero elements).
/// When such a result's shape cannot be evaluated before the step runs, the executor calls
/// `run_dynamic` instead of `run_cpu`.
pub fn data_dependent(kind: OpKind) -> bool {
    matches!(kind, OpKind::NonZero)
}

pub use crate::shared::Dynamic;

/// Runs a data-dependent op on host `inputs`, allocating its results.
pub fn run_dynamic(op: &Op, inputs: &[Buffer]) -> Result<Dynamic> {
    match op.kind {
        OpKind::NonZero => cpu::indexing::nonzero_dynamic(op, inputs),
        _ => Err(Error::Value(format!("{}: not a data-dependent op", op.kind.name()))),
    }
}
