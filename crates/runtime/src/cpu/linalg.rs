//! Host kernels of the linear-algebra ops: matmul (cpu::matmul) and outer.

use max_graph::ops::{Op, OpKind};

use crate::{Buffer, Error, Result, cpu};

pub fn run(op: &Op, inputs: &[Buffer], outputs: &[Buffer]) -> Result<()> {
    match op.kind {
        OpKind::Matmul => cpu::matmul::run(&inputs[0], &inputs[1], &outputs[0]),
        OpKind::Outer => {
            // outer(a, b) == matmul(a as a column, b as a row)
            let a = inputs[0].reshaped(vec![inputs[0].num_elements(), 1])?;
            let b = inputs[1].reshaped(vec![1, inputs[1].num_elements()])?;
            cpu::matmul::run(&a, &b, &outputs[0])
        }
        other => Err(Error::Value(format!("{}: no CPU kernel for this op", other.name()))),
    }
}
