//! Host kernels of the sampling family (crates/graph/src/ops/sampling.rs): sample_tokens and
//! apply_penalties, also the references of the CUDA kernels (kernels/sampling.cu), which they
//! match exactly (math.rs says how). The host checks what the device cannot afford to: token
//! ids and offsets out of range are errors here, and ignored there.

pub mod math;
pub mod penalties;
pub mod sample;
#[cfg(test)]
mod tests;

use max_graph::DType;
use max_graph::ops::sampling::{MAX_VOCAB, Rows};
use max_graph::ops::{Op, OpKind};

use super::attention::{slice, slice_mut};
use crate::{Buffer, Error, Result};

pub fn run(op: &Op, inputs: &[Buffer], outputs: &[Buffer]) -> Result<()> {
    let name = op.kind.name();
    let inputs: Vec<Buffer> =
        inputs.iter().map(|b| if b.is_contiguous() { Ok(b.clone()) } else { b.contiguous() }).collect::<Result<_>>()?;
    match (op.kind, inputs.as_slice(), outputs) {
        (OpKind::SampleTokens, [logits, temperature, top_k, top_p, min_p, seed], [out]) => {
            let rows = check(name, op, &inputs, out)?;
            let (t, k, p, mp, s) = (
                slice::<f32>(name, temperature)?,
                slice::<i64>(name, top_k)?,
                slice::<f32>(name, top_p)?,
                slice::<f32>(name, min_p)?,
                slice::<u64>(name, seed)?,
            );
            let params: Vec<sample::RowParams> = (0..rows.batch)
                .map(|b| sample::RowParams { temperature: t[b], top_k: k[b], top_p: p[b], min_p: mp[b], seed: s[b] })
                .collect();
            sample::sample(slice::<f32>(name, logits)?, rows.vocab, &params, slice_mut::<i64>(name, out)?);
            Ok(())
        }
        (OpKind::ApplyPenalties, [logits, tokens, offsets, prompt_lengths, frequency, presence, repetition], [out]) => {
            let rows = check(name, op, &inputs, out)?;
            let tokens = slice::<i64>(name, tokens)?;
            let offsets = slice::<u32>(name, offsets)?;
            let prompt = slice::<u32>(name, prompt_lengths)?;
            let (f, p, r) =
                (slice::<f32>(name, frequency)?, slice::<f32>(name, presence)?, slice::<f32>(name, repetition)?);
            let mut per_row = Vec::with_capacity(rows.batch);
            for b in 0..rows.batch {
                let (s, e) = (offsets[b] as usize, offsets[b + 1] as usize);
                if s > e || e > tokens.len() {
                    return Err(Error::Value(format!(
                        "{name}: offsets: row {b} spans tokens {s}..{e}, which is not a range of the {} tokens",
                        tokens.len()
                    )));
                }
                let history = &tokens[s..e];
                if prompt[b] as usize > history.len() {
                    return Err(Error::Value(format!(
                        "{name}: prompt_lengths: row {b} has a prompt of {} tokens in a history of {}",
                        prompt[b],
                        history.len()
                    )));
                }
                if let Some(&t) = history.iter().find(|&&t| t < 0 || t as u64 >= rows.vocab as u64) {
                    return Err(Error::Value(format!(
                        "{name}: tokens: row {b} holds the token id {t}, outside a vocabulary of {}",
                        rows.vocab
                    )));
                }
                per_row.push(penalties::RowPenalties {
                    history,
                    prompt: prompt[b] as usize,
                    frequency: f[b],
                    presence: p[b],
                    repetition: r[b],
                });
            }
            penalties::apply(slice::<f32>(name, logits)?, rows.vocab, &per_row, slice_mut::<f32>(name, out)?);
            Ok(())
        }
        _ => Err(Error::Value(format!("{name}: unexpected inputs or outputs for this op"))),
    }
}

/// The dtypes every input of `op` must have, in order, and its result's.
pub fn dtypes(kind: OpKind) -> (&'static [DType], DType) {
    use DType::*;
    match kind {
        OpKind::SampleTokens => (&[Float32, Float32, Int64, Float32, Float32, UInt64], Int64),
        _ => (&[Float32, Int64, UInt32, UInt32, Float32, Float32, Float32], Float32),
    }
}

/// Checks the dtypes and shapes of a sampling op's run-time tensors (both backends use it).
pub fn check(name: &str, op: &Op, inputs: &[Buffer], out: &Buffer) -> Result<Rows> {
    let (want, out_dtype) = dtypes(op.kind);
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
