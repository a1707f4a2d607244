//! The run-time checks of the sampling ops' tensors (dtypes, one row of logits per sequence),
//! shared by the host and CUDA kernels.

use max_graph::DType;
use max_graph::ops::sampling::{MAX_VOCAB, Rows};
use max_graph::ops::{Op, OpKind};

use crate::{Buffer, Error, Result};

/// The dtypes every input of `op` must have, in order, and its result's.
pub(crate) fn sampling_dtypes(kind: OpKind) -> (&'static [DType], DType) {
    use DType::*;
    match kind {
        OpKind::SampleTokens => (&[Float32, Float32, Int64, Float32, Float32, UInt64], Int64),
        _ => (&[Float32, Int64, UInt32, UInt32, Float32, Float32, Float32], Float32),
    }
}

/// Checks the dtypes and shapes of a sampling op's run-time tensors.
pub(crate) fn check_sampling(name: &str, op: &Op, inputs: &[Buffer], out: &Buffer) -> Result<Rows> {
    let (want, out_dtype) = sampling_dtypes(op.kind);
    let args = op.kind.arg_names();
    if inputs.len() != want.len() {
        return Err(Error::Value(format!("{name}: expected {} inputs, got {}", want.len(), inputs.len())));
    }
    for ((b, &d), arg) in inputs.iter().zip(want).zip(args) {
        if b.dtype() != d {
            return Err(Error::Value(format!("{name}: {arg}: must be {d}, got {}", b.dtype())));
        }
    }
    let per_row: Vec<(&str, usize)> = match op.kind {
        OpKind::SampleTokens => (1..6).map(|i| (args[i], inputs[i].num_elements())).collect(),
        _ => (3..7).map(|i| (args[i], inputs[i].num_elements())).collect(),
    };
    let rows = Rows::check(inputs[0].shape(), &per_row).map_err(|m| Error::Value(format!("{name}: {m}")))?;
    if op.kind == OpKind::ApplyPenalties && inputs[2].num_elements() != rows.batch + 1 {
        return Err(Error::Value(format!(
            "{name}: offsets: holds {} values for {} rows of logits (expected batch + 1)",
            inputs[2].num_elements(),
            rows.batch
        )));
    }
    if op.kind == OpKind::SampleTokens && rows.vocab >= MAX_VOCAB {
        return Err(Error::Value(format!(
            "{name}: logits: rows of fewer than {MAX_VOCAB} values are supported, got {}",
            rows.vocab
        )));
    }
    let out_len = if op.kind == OpKind::SampleTokens { rows.batch } else { rows.batch * rows.vocab };
    if out.dtype() != out_dtype || out.num_elements() != out_len {
        return Err(Error::Value(format!(
            "{name}: the output is {} {:?}, expected {out_len} elements of {out_dtype}",
            out.dtype(),
            out.shape()
        )));
    }
    Ok(rows)
}
