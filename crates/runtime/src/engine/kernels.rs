//! Kernel choice: which host kernel runs each (non-elementwise) op.

use max_graph::ops::{Op, OpKind};

use crate::{Buffer, Error, Result, cpu};

/// Runs `op` on the host; `outputs` are allocated with their planned shapes.
pub fn run_cpu(op: &Op, inputs: &[Buffer], outputs: &[Buffer]) -> Result<()> {
    match op.kind {
        OpKind::Matmul => cpu::matmul::run(&inputs[0], &inputs[1], &outputs[0]),
        other => Err(Error::Value(format!(
            "{}: no CPU kernel for this op yet",
            other.name()
        ))),
    }
}
