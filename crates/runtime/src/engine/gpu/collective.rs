//! Collectives on GPUs through NCCL (crate::nccl): one communicator per ordered set of
//! devices, each device's share of the op enqueued on its own stream.

use super::super::program::{Step, StepKind};
use crate::{Buffer, Error, Result};

/// Runs collective `step` over its inputs (the tensors, then the signal buffers) on their GPUs.
pub(crate) fn run(step: &Step, inputs: &[Buffer], outputs: &[Buffer]) -> Result<()> {
    let StepKind::Op(op) = &step.kind else {
        return Err(Error::Value(format!("{}: not a collective", step.name())));
    };
    crate::nccl::run(op, inputs, outputs)
}
