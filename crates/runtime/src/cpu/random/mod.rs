//! Host kernels of the random family (crates/graph/src/ops/random.rs): random_uniform and
//! random_normal, also the reference of kernels/random.cu. `values` holds the recipe to the
//! bit, `philox` the generator. The output is filled in chunks on the worker threads; each
//! value depends only on its index, so the split does not change the tensor.

pub mod philox;
pub mod values;

use half::{bf16, f16};
use max_graph::DType;
use max_graph::ops::Op;
use max_graph::ops::random::{RandomParams, Recipe};
use rayon::prelude::*;

use super::attention::{slice, slice_mut};
use super::cast::{Canon, Elem, F8E4m3, F8E5m2};
use crate::{Buffer, Error, Result};

/// Below this many elements the output is filled on the calling thread.
const PAR_MIN: usize = 1 << 15;
/// Elements per parallel chunk (a multiple of every block size).
const CHUNK: usize = 1 << 13;

/// A random op's checked parameters, seed and output: what both backends need.
pub(crate) struct Call {
    pub params: RandomParams,
    pub recipe: Recipe,
}

/// Checks a random op's run-time operands (a one-value int64/uint64 seed, an output of the
/// op's dtype) and parses its parameters.
pub(crate) fn check(op: &Op, inputs: &[Buffer], outputs: &[Buffer]) -> Result<Call> {
    let name = op.kind.name();
    let params = RandomParams::from_op(op.kind, &op.attrs).map_err(|m| Error::Value(format!("{name}: {m}")))?;
    let recipe = params.recipe().map_err(|m| Error::Value(format!("{name}: {m}")))?;
    let ([seed], [out]) = (inputs, outputs) else {
        return Err(Error::Value(format!("{name}: expected a seed and one output")));
    };
    if !matches!(seed.dtype(), DType::Int64 | DType::UInt64) || seed.num_elements() != 1 {
        return Err(Error::Value(format!(
            "{name}: seed: must hold one int64 or uint64 value, got {} {:?}",
            seed.dtype(),
            seed.shape()
        )));
    }
    if out.dtype() != params.dtype || !out.is_contiguous() {
        return Err(Error::Value(format!(
            "{name}: the output is {} (contiguous: {}), expected a contiguous {} tensor",
            out.dtype(),
            out.is_contiguous(),
            params.dtype
        )));
    }
    Ok(Call { params, recipe })
}

pub fn run(op: &Op, inputs: &[Buffer], outputs: &[Buffer]) -> Result<()> {
    let name = op.kind.name();
    let Call { params, recipe } = check(op, inputs, outputs)?;
    let seed = if inputs[0].is_contiguous() { inputs[0].clone() } else { inputs[0].contiguous()? };
    let seed = slice::<u64>(name, &seed)?[0];
    let out = &outputs[0];
    let stream = params.stream;
    match params.dtype {
        DType::Float32 => fill_narrow(slice_mut::<f32>(name, out)?, &recipe, seed, stream),
        DType::Float16 => fill_narrow(slice_mut::<f16>(name, out)?, &recipe, seed, stream),
        DType::BFloat16 => fill_narrow(slice_mut::<bf16>(name, out)?, &recipe, seed, stream),
        DType::Float8E4m3fn => fill_narrow(slice_mut::<F8E4m3>(name, out)?, &recipe, seed, stream),
        DType::Float8E5m2 => fill_narrow(slice_mut::<F8E5m2>(name, out)?, &recipe, seed, stream),
        DType::Float64 => fill(slice_mut::<f64>(name, out)?, 2, |j| values::wide_block(&recipe, seed, stream, j)),
        other => return Err(Error::Value(format!("{name}: no host kernel for {other}"))),
    }
    Ok(())
}

fn fill_narrow<T: Elem>(out: &mut [T], r: &Recipe, seed: u64, stream: u64) {
    fill(out, 4, |j| values::narrow_block(r, seed, stream, j).map(|v| T::from_canon(Canon::F(v as f64))));
}

/// Fills `out` with the values of consecutive blocks of `per` elements (`block(j)` gives
/// elements `per * j ..`), in parallel chunks for large outputs.
fn fill<T: Send, const N: usize>(out: &mut [T], per: usize, block: impl Fn(u64) -> [T; N] + Sync) {
    debug_assert_eq!(per, N);
    let chunk = |(c, part): (usize, &mut [T])| {
        let first = (c * CHUNK / N) as u64;
        for (j, dst) in part.chunks_mut(N).enumerate() {
            for (d, v) in dst.iter_mut().zip(block(first + j as u64)) {
                *d = v;
            }
        }
    };
    if out.len() >= PAR_MIN {
        out.par_chunks_mut(CHUNK).enumerate().for_each(chunk);
    } else {
        out.chunks_mut(CHUNK).enumerate().for_each(chunk);
    }
}

#[cfg(test)]
mod tests;
