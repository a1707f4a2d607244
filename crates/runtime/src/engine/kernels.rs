//! Kernel choice: which host kernel runs each op that is not elementwise (elementwise ops and
//! fused groups go to cpu::elementwise from exec.rs). One entry point per op family.

use max_graph::ops::{Family, Op};

use crate::{Buffer, Error, Result, cpu};

/// Runs `op` on the host; `outputs` are allocated with their planned shapes.
pub fn run_cpu(op: &Op, inputs: &[Buffer], outputs: &[Buffer]) -> Result<()> {
    match op.kind.family() {
        Family::Linalg => cpu::linalg::run(op, inputs, outputs),
        Family::Layout => cpu::layout::run(op, inputs, outputs),
        Family::Reduction => cpu::reduction::run(op, inputs, outputs),
        Family::Conv => cpu::conv::run(op, inputs, outputs),
        Family::Indexing => cpu::indexing::run(op, inputs, outputs),
        Family::Quant => cpu::quant::run(op, inputs, outputs),
        _ => Err(Error::Value(format!("{}: no CPU kernel for this op", op.kind.name()))),
    }
}
