//! Host kernels of the sampling family (crates/graph/src/ops/sampling.rs): sample_tokens and
//! apply_penalties, also the references of the CUDA kernels (kernels/sampling.cu and
//! penalties.cu), which they match exactly (math.rs says how). The host checks what the device
//! cannot afford to: token ids and offsets out of range are errors here, and ignored there.

pub mod math;
pub mod penalties;
pub mod sample;
#[cfg(test)]
mod tests;

use max_graph::ops::{Op, OpKind};

use super::attention::{slice, slice_mut};
use crate::operands::check_sampling as check;
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
