//! Launching sampling.cu: sample_tokens (one 1024-thread block per row) and apply_penalties (a
//! copy of the logits, then three launches of one block per row over the rows' histories).
//! Every tensor is contiguous; the kernels' comment says how they work and what out-of-range
//! histories do.

use std::sync::Arc;

use cudarc::driver::{CudaStream, DeviceRepr, LaunchConfig, PushKernelArg, result};

use max_graph::ops::sampling::MAX_VOCAB;

use crate::sources::SAMPLING;
use crate::{Error, Result, function};

/// Threads of a sample_tokens block (THREADS in sampling.cu).
const SAMPLE_THREADS: u32 = 1024;
/// Threads of an apply_penalties block.
const PENALTY_THREADS: u32 = 256;
/// Grid-stride loops over the rows cover the rest.
const MAX_BLOCKS: usize = 1 << 16;

fn go<A: DeviceRepr>(stream: &Arc<CudaStream>, name: &str, args: &A, config: LaunchConfig) -> Result<()> {
    let f = function(stream.context(), &SAMPLING, name)?;
    let mut launch = stream.launch_builder(&f);
    launch.arg(args);
    // SAFETY: each caller passes the #[repr(C)] twin of its kernel's argument struct, with device
    // pointers to buffers holding the elements its shapes describe.
    unsafe { launch.launch(config) }.map_err(Error::driver("cuLaunchKernel(sampling)"))?;
    Ok(())
}

fn rows(batch: usize, threads: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (batch.clamp(1, MAX_BLOCKS) as u32, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    }
}

#[repr(C)]
#[derive(Clone, Copy)]
struct SampleArgs {
    logits: u64,
    temperature: u64,
    top_k: u64,
    top_p: u64,
    min_p: u64,
    seed: u64,
    out: u64,
    batch: i64,
    vocab: i64,
}
// SAFETY: plain-old-data with the layout of the kernel's `SampleArgs`.
unsafe impl DeviceRepr for SampleArgs {}

/// The device tensors of a sample_tokens call: logits [batch, vocab] f32; temperature, top_p
/// and min_p [batch] f32; top_k [batch] i64; seed [batch] u64; out [batch] i64.
#[derive(Clone, Copy, Debug)]
pub struct SamplePtrs {
    pub logits: u64,
    pub temperature: u64,
    pub top_k: u64,
    pub top_p: u64,
    pub min_p: u64,
    pub seed: u64,
    pub out: u64,
}

/// One token per row of `batch` rows of `vocab` logits.
pub fn sample_tokens(stream: &Arc<CudaStream>, p: SamplePtrs, batch: usize, vocab: usize) -> Result<()> {
    if vocab >= MAX_VOCAB {
        return Err(Error::Unsupported(format!(
            "sample_tokens: logits: rows of fewer than {MAX_VOCAB} values are supported, got {vocab}"
        )));
    }
    if batch == 0 {
        return Ok(());
    }
    let args = SampleArgs {
        logits: p.logits,
        temperature: p.temperature,
        top_k: p.top_k,
        top_p: p.top_p,
        min_p: p.min_p,
        seed: p.seed,
        out: p.out,
        batch: batch as i64,
        vocab: vocab as i64,
    };
    go(stream, "sample_tokens", &args, rows(batch, SAMPLE_THREADS))
}

#[repr(C)]
#[derive(Clone, Copy)]
struct PenaltyArgs {
    logits: u64,
    tokens: u64,
    offsets: u64,
    prompt_lengths: u64,
    frequency: u64,
    presence: u64,
    repetition: u64,
    out: u64,
    counts: u64,
    batch: i64,
    vocab: i64,
    ntokens: i64,
}
// SAFETY: plain-old-data with the layout of the kernel's `PenaltyArgs`.
unsafe impl DeviceRepr for PenaltyArgs {}

/// The device tensors of an apply_penalties call: logits and out [batch, vocab] f32; tokens
/// [ntokens] i64; offsets [batch + 1] and prompt_lengths [batch] u32; frequency, presence and
/// repetition [batch] f32; counts: scratch of [`penalty_scratch`] bytes (no need to clear it).
#[derive(Clone, Copy, Debug)]
pub struct PenaltyPtrs {
    pub logits: u64,
    pub tokens: u64,
    pub offsets: u64,
    pub prompt_lengths: u64,
    pub frequency: u64,
    pub presence: u64,
    pub repetition: u64,
    pub out: u64,
    pub counts: u64,
}

/// Bytes of the scratch apply_penalties needs: a u32 per (row, token id).
pub fn penalty_scratch(batch: usize, vocab: usize) -> usize {
    batch * vocab * 4
}

/// `out` = `logits` with the penalties of every row's history.
pub fn apply_penalties(
    stream: &Arc<CudaStream>,
    p: PenaltyPtrs,
    batch: usize,
    vocab: usize,
    ntokens: usize,
) -> Result<()> {
    if ntokens >= 1 << 31 {
        return Err(Error::Unsupported(format!("apply_penalties takes fewer than 2^31 tokens, got {ntokens}")));
    }
    let bytes = batch * vocab * 4;
    if bytes == 0 {
        return Ok(());
    }
    // SAFETY: logits and out are distinct device buffers of `bytes` on this stream's device.
    unsafe { result::memcpy_dtod_async(p.out, p.logits, bytes, stream.cu_stream()) }
        .map_err(Error::driver("cuMemcpyDtoDAsync(apply_penalties)"))?;
    if ntokens == 0 {
        return Ok(());
    }
    let args = PenaltyArgs {
        logits: p.logits,
        tokens: p.tokens,
        offsets: p.offsets,
        prompt_lengths: p.prompt_lengths,
        frequency: p.frequency,
        presence: p.presence,
        repetition: p.repetition,
        out: p.out,
        counts: p.counts,
        batch: batch as i64,
        vocab: vocab as i64,
        ntokens: ntokens as i64,
    };
    for name in ["penalties_clear", "penalties_count", "penalties_apply"] {
        go(stream, name, &args, rows(batch, PENALTY_THREADS))?;
    }
    Ok(())
}

/// Every kernel these wrappers launch: (family, name, bytes of its argument struct), for the
/// compile checks in tests/.
#[doc(hidden)]
pub fn kernels() -> Vec<(crate::sources::Family, String, usize)> {
    let mut all = vec![(SAMPLING, "sample_tokens".to_string(), size_of::<SampleArgs>())];
    for name in ["penalties_clear", "penalties_count", "penalties_apply"] {
        all.push((SAMPLING, name.to_string(), size_of::<PenaltyArgs>()));
    }
    all
}
