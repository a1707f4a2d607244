//! Launching the sampling family: sample_tokens (one cluster of 1024-thread CTAs per row, [`plan`]) and
//! apply_penalties (a copy of the logits, then three launches of one block per row over the
//! rows' histories).
//! Every tensor is contiguous; the kernels' comment says how they work and what out-of-range
//! histories do.

use std::sync::Arc;

use cudarc::driver::{CudaStream, DeviceRepr, LaunchConfig, PushKernelArg, result};

use max_graph::ops::sampling::MAX_VOCAB;

use crate::sources::SAMPLING;
use crate::{Error, Result, function};

/// Threads of a sample_tokens block (THREADS in sampling_math.cuh).
const SAMPLE_THREADS: u32 = 1024;
/// Threads of an apply_penalties block.
const PENALTY_THREADS: u32 = 256;
/// Grid-stride loops over the rows cover the rest.
const MAX_BLOCKS: usize = 1 << 16;
/// The most CTAs sharing a row of sample_tokens: the portable cluster size, which every GPC
/// of a Hopper part holds.
const MAX_CLUSTER: usize = 8;

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
    slice: i64,
    cached: i32,
    pad: i32,
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

/// How sample_tokens splits its rows: `cluster` CTAs per row (1 before sm_90), each taking
/// `slice` elements (a multiple of 4, so 16-byte aligned rows stay aligned per slice), and
/// what of a slice fits the shared memory a CTA may have: its keys (4 bytes an element), and
/// with them the top-p weights' exps (4 more). Slices whose keys do not fit run the
/// `sample_tokens_streamed` entry, which reads them from the logits at every pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SamplePlan {
    cluster: usize,
    slice: usize,
    keys: bool,
    exps: bool,
}

/// Sampling.cu's CACHE_KEYS and CACHE_EXPS.
const CACHE_KEYS: i32 = 1;
const CACHE_EXPS: i32 = 2;

/// As many CTAs per row as fill the `sms` SMs in one wave (a sampled row takes over a dozen
/// passes over itself, so a small batch on one SM per row would leave the GPU idle), up to
/// MAX_CLUSTER; `budget`: the bytes of shared memory a CTA may keep.
fn plan(batch: usize, vocab: usize, sms: usize, budget: usize, clusters: bool) -> SamplePlan {
    let mut cluster = 1;
    while clusters && cluster * 2 <= MAX_CLUSTER && batch * cluster * 2 <= sms {
        cluster *= 2;
    }
    let slice = vocab.div_ceil(cluster).next_multiple_of(4);
    SamplePlan { cluster, slice, keys: slice * 4 <= budget, exps: slice * 8 <= budget }
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
    let ctx = stream.context();
    let f = function(ctx, &SAMPLING, "sample_tokens")?;
    let attr = |a| ctx.attribute(a).map_err(Error::driver("cuDeviceGetAttribute"));
    let clusters = attr(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)? >= 9;
    let optin = attr(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?;
    let fixed = f.shared_size_bytes().map_err(Error::driver("cuFuncGetAttribute"))?;
    let budget = (optin.max(0) as usize).saturating_sub(fixed.max(0) as usize + 1024);
    let pl = plan(batch, vocab, super::sm_count(stream)?, budget, clusters);
    // (both entries have the same static shared memory: the budget holds for either)
    let name = if pl.keys { "sample_tokens" } else { "sample_tokens_streamed" };
    let f = if pl.keys { f } else { function(ctx, &SAMPLING, name)? };
    let smem = (pl.slice * 4 * (pl.keys as usize + pl.exps as usize)) as u32;
    crate::allow_smem(ctx, &f, smem)?;
    let mut args = SampleArgs {
        logits: p.logits,
        temperature: p.temperature,
        top_k: p.top_k,
        top_p: p.top_p,
        min_p: p.min_p,
        seed: p.seed,
        out: p.out,
        batch: batch as i64,
        vocab: vocab as i64,
        slice: pl.slice as i64,
        cached: if pl.exps {
            CACHE_KEYS | CACHE_EXPS
        } else if pl.keys {
            CACHE_KEYS
        } else {
            0
        },
        pad: 0,
    };
    let grid = (pl.cluster * batch.min(MAX_BLOCKS / pl.cluster)) as u32;
    let mut params = [&mut args as *mut SampleArgs as *mut std::ffi::c_void];
    // SAFETY: the parameter is the kernel's SampleArgs by value, live across the call, with
    // device pointers to buffers holding the elements its shapes describe; `smem` holds what
    // `cached` says of a slice, and the grid is whole clusters.
    unsafe {
        super::launch_ex_cluster(
            stream,
            &f,
            (grid, SAMPLE_THREADS, smem),
            &mut params,
            super::Pdl::of(&SAMPLING, name, None),
            pl.cluster as u32,
            "cuLaunchKernelEx(sample_tokens)",
        )
    }
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
    let sample = ["sample_tokens", "sample_tokens_streamed"].map(|n| (n, size_of::<SampleArgs>()));
    let penalties = ["penalties_clear", "penalties_count", "penalties_apply"].map(|n| (n, size_of::<PenaltyArgs>()));
    sample.into_iter().chain(penalties).map(|(n, size)| (SAMPLING, n.to_string(), size)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: usize = 1024;

    fn p(cluster: usize, slice: usize, keys: bool, exps: bool) -> SamplePlan {
        SamplePlan { cluster, slice, keys, exps }
    }

    #[test]
    fn small_batches_spread_a_row_over_a_cluster() {
        // One row of 128,256 logits on 132 SMs: eight CTAs, 16,032 keys and exps (125 KiB) each.
        assert_eq!(plan(1, 128_256, 132, 200 * KIB, true), p(8, 16_032, true, true));
        // 16 rows: eight CTAs each still fill no more than the SMs; 32 rows: four, keys only.
        assert_eq!(plan(16, 128_256, 132, 200 * KIB, true).cluster, 8);
        assert_eq!(plan(32, 128_256, 132, 200 * KIB, true), p(4, 32_064, true, false));
        // 64 rows: two CTAs each, slices streamed from global memory at every pass.
        assert_eq!(plan(64, 128_256, 132, 200 * KIB, true), p(2, 64_128, false, false));
        // Large batches: one CTA a row.
        assert_eq!(plan(512, 49_152, 132, 200 * KIB, true), p(1, 49_152, true, false));
    }

    #[test]
    fn slices_stay_aligned_and_rows_too_large_stream() {
        // An odd vocabulary: slices of whole 16-byte vectors, the last one shorter.
        let q = plan(1, 50_257, 132, 200 * KIB, true);
        assert_eq!((q.cluster, q.slice % 4, q.slice * q.cluster >= 50_257), (8, 0, true));
        // 600,001 logits: eight slices of 300 KB, streamed.
        assert_eq!(plan(1, 600_001, 132, 200 * KIB, true), p(8, 75_004, false, false));
        // Before sm_90: one CTA a row.
        assert_eq!(plan(1, 128_256, 108, 160 * KIB, false), p(1, 128_256, false, false));
    }
}
