//! Host kernels of the conv ops (being written).

use max_graph::ops::Op;

use crate::{Buffer, Error, Result};

pub fn run(op: &Op, _inputs: &[Buffer], _outputs: &[Buffer]) -> Result<()> {
    Err(Error::Value(format!("{}: no CPU kernel for this op yet", op.kind.name())))
}
