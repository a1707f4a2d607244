//! GPU kernels of the sampling family (sample_tokens, apply_penalties) through
//! max_kernels_cuda::launch::sampling. Dtypes and shapes are checked as the CPU kernels check
//! them (crates/runtime/src/cpu/sampling defines the behaviour, and the kernels match it
//! exactly); the histories' token ids and offsets stay on the device and are not read back
//! (see penalties.cu for what out-of-range values do).

use max_graph::DType;
use max_graph::ops::{Op, OpKind};
use max_kernels_cuda::launch::sampling::{self as k, PenaltyPtrs, SamplePtrs};

use crate::cuda::CudaDevice;
use crate::operands::check_sampling as check;
use crate::{Buffer, Error, Result};

fn packed(b: &Buffer) -> Result<Buffer> {
    if b.is_contiguous() { Ok(b.clone()) } else { b.contiguous() }
}

pub(crate) fn run(dev: &CudaDevice, op: &Op, inputs: &[Buffer], outputs: &[Buffer]) -> Result<()> {
    let name = op.kind.name();
    let inputs: Vec<Buffer> = inputs.iter().map(packed).collect::<Result<_>>()?;
    let [out] = outputs else {
        return Err(Error::Value(format!("{name}: expected one output")));
    };
    let rows = check(name, op, &inputs, out)?;
    dev.bind()?;
    match (op.kind, inputs.as_slice()) {
        (OpKind::SampleTokens, [logits, temperature, top_k, top_p, min_p, seed]) => {
            let ptrs = SamplePtrs {
                logits: logits.addr(),
                temperature: temperature.addr(),
                top_k: top_k.addr(),
                top_p: top_p.addr(),
                min_p: min_p.addr(),
                seed: seed.addr(),
                out: out.addr(),
            };
            k::sample_tokens(&dev.stream, ptrs, rows.batch, rows.vocab).map_err(Error::from)
        }
        (OpKind::ApplyPenalties, [logits, tokens, offsets, prompt_lengths, frequency, presence, repetition]) => {
            let bytes = k::penalty_scratch(rows.batch, rows.vocab);
            let counts = if bytes > 0 && tokens.num_elements() > 0 {
                Some(Buffer::empty_on(DType::UInt8, &[bytes as i64], out.stream())?)
            } else {
                None
            };
            let ptrs = PenaltyPtrs {
                logits: logits.addr(),
                tokens: tokens.addr(),
                offsets: offsets.addr(),
                prompt_lengths: prompt_lengths.addr(),
                frequency: frequency.addr(),
                presence: presence.addr(),
                repetition: repetition.addr(),
                out: out.addr(),
                counts: counts.as_ref().map_or(0, |b| b.addr()),
            };
            k::apply_penalties(&dev.stream, ptrs, rows.batch, rows.vocab, tokens.num_elements()).map_err(Error::from)
        }
        _ => Err(Error::Value(format!("{name}: unexpected inputs or outputs for this op"))),
    }
}
