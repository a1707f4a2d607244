//! Launching kernels/allreduce_p2p.cu: allreduce.sum over the GPUs of one process, one launch
//! per rank on its own stream: up to MAX_BYTES pushed through the signal buffers, larger
//! tensors (up to READ_MAX_RANKS ranks) read from the peers where they lie. [`fits`] says
//! whether a call can take it (the tensor's size and alignment, the signal buffers' size, the
//! number of ranks); the caller has made sure every GPU may access every other's memory.

use std::sync::Arc;

use cudarc::driver::{CudaStream, DeviceRepr, LaunchConfig};
use max_graph::DType;
use max_graph::ops::reduction::RmsNormParams;

use crate::sources::{ALLREDUCE_P2P, Family};
use crate::{Error, Result, function};

/// Most ranks (the kernel's AR_MAX_RANKS).
pub const MAX_RANKS: usize = 8;
/// Threads per block, and bytes of the tensor per block (AR_THREADS, AR_CHUNK).
const THREADS: usize = 256;
const CHUNK: usize = THREADS * 16 * 2;
/// Most blocks, so most bytes a call (AR_MAX_BLOCKS * AR_CHUNK: 1 MiB).
const MAX_BLOCKS: usize = 128;
pub const MAX_BYTES: usize = MAX_BLOCKS * CHUNK;
/// Where the receive areas start in a signal buffer (AR_RECV), and one rank's slot in each:
/// plain data, and lines of 8 bytes of data beside 8 of flags (twice the bytes) for calls of
/// at most LL_BLOCKS blocks (AR_SLOT, AR_LL_BLOCKS, AR_LL_SLOT).
const RECV: usize = 65_536;
const SLOT: usize = MAX_BYTES;
const LL_BLOCKS: usize = 32;
const LL_SLOT: usize = 2 * LL_BLOCKS * CHUNK;
/// Tensors past MAX_BYTES are read from the peers (allreduce_p2p_read_*): each rank loads every
/// other rank's share over NVLink, so a byte crosses ranks - 1 times; from 5 ranks on a ring
/// (NCCL) moves fewer bytes per GPU, so larger groups keep NCCL.
pub const READ_MAX_RANKS: usize = 4;
/// Threads of the read kernels' blocks and vectors each holds (AR_READ_THREADS, AR_READ_PER):
/// a normalised row is at most READ_THREADS * READ_PER vectors.
const READ_THREADS: usize = 512;
const READ_PER: usize = 2;
/// Blocks of a read launch: two 512-thread blocks on each of an H200's 132 SMs (one for the
/// norm kernels, whose registers allow one), enough loads in flight to keep NVLink busy.
const READ_BLOCKS: usize = 264;

/// Bytes a signal buffer needs for `ranks` ranks: counters, flags, two sets of receive slots
/// of each kind.
pub fn signal_bytes(ranks: usize) -> usize {
    RECV + 2 * ranks * (SLOT + LL_SLOT)
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct ArArgs {
    input: u64,
    out: u64,
    sig: [u64; MAX_RANKS],
    count: i64,
    rank: i32,
    ranks: i32,
    timeout_ns: u64,
    ll: i32,
    pad: i32,
    residual: u64,
}

// SAFETY: plain-old-data with the layout of the kernel's `ArArgs`.
unsafe impl DeviceRepr for ArArgs {}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct ArNormArgs {
    ar: ArArgs,
    gamma: u64,
    normed: u64,
    k: i64,
    eps: f32,
    offset: f32,
    mbc: i32,
    pad: i32,
}

// SAFETY: plain-old-data with the layout of the kernel's `ArNormArgs`.
unsafe impl DeviceRepr for ArNormArgs {}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct ArReadArgs {
    input: [u64; MAX_RANKS],
    sig: [u64; MAX_RANKS],
    out: u64,
    residual: u64,
    count: i64,
    rank: i32,
    ranks: i32,
    timeout_ns: u64,
    gamma: u64,
    normed: u64,
    k: i64,
    eps: f32,
    offset: f32,
    mbc: i32,
    pad: i32,
}

// SAFETY: plain-old-data with the layout of the kernel's `ArReadArgs`.
unsafe impl DeviceRepr for ArReadArgs {}

/// The RMSNorm `allreduce_p2p` may also apply to the sum (kernel `allreduce_p2p_norm_*`): each
/// rank's weight and result, rows of `k` elements, the rms_norm op's parameters.
#[derive(Clone, Copy, Debug)]
pub struct NormOut<'a> {
    pub gammas: &'a [u64],
    pub normed: &'a [u64],
    pub k: usize,
    pub params: RmsNormParams,
}

fn kernel(dtype: DType) -> Option<&'static str> {
    match dtype {
        DType::BFloat16 => Some("allreduce_p2p_bf16"),
        DType::Float16 => Some("allreduce_p2p_f16"),
        DType::Float32 => Some("allreduce_p2p_f32"),
        _ => None,
    }
}

/// Whether a call of `count` elements of `dtype` over `ranks` GPUs reads from the peers (past
/// MAX_BYTES) rather than pushing through the signal buffers.
fn reads(dtype: DType, count: usize) -> bool {
    count * dtype.size_in_bytes() > MAX_BYTES
}

/// Whether an allreduce of `count` elements of `dtype` over `ranks` GPUs, with signal buffers of
/// `signal` bytes (the smallest) and tensors at `addrs` (inputs and outputs), can run here:
/// 2..=MAX_RANKS ranks (READ_MAX_RANKS past MAX_BYTES), a summable 16-bit or f32 type, a whole
/// number of 16-byte vectors, 16-byte aligned tensors and room for the receive slots.
pub fn fits(dtype: DType, count: usize, ranks: usize, signal: usize, addrs: &[u64]) -> bool {
    let bytes = count * dtype.size_in_bytes();
    let most = if reads(dtype, count) { READ_MAX_RANKS } else { MAX_RANKS };
    kernel(dtype).is_some()
        && (2..=most).contains(&ranks)
        && bytes > 0
        && bytes.is_multiple_of(16)
        && signal >= signal_bytes(ranks)
        && addrs.iter().all(|a| a.is_multiple_of(16))
}

/// Whether the sum's rows of `k` elements (of a tensor of `count` that [`fits`]) can also be
/// normalised in the same launch: up to MAX_BYTES a row is whole warps of 16-byte vectors and a
/// block's chunk whole rows; past it a row is whole vectors, at most READ_THREADS * READ_PER.
pub fn fits_norm(dtype: DType, count: usize, k: usize) -> bool {
    let row = k * dtype.size_in_bytes();
    if k == 0 || !count.is_multiple_of(k) {
        return false;
    }
    if reads(dtype, count) {
        row.is_multiple_of(16) && row / 16 <= READ_THREADS * READ_PER
    } else {
        row.is_multiple_of(16 * 32) && CHUNK.is_multiple_of(row)
    }
}

/// The kernels the launcher names with their argument size (tests/launched_kernels.rs).
pub fn kernels() -> Vec<(Family, String, usize)> {
    let dtypes = [DType::BFloat16, DType::Float16, DType::Float32];
    let plain = dtypes.into_iter().filter_map(kernel).map(|k| (ALLREDUCE_P2P, k.to_string(), size_of::<ArArgs>()));
    let normed = dtypes
        .into_iter()
        .filter_map(kernel)
        .map(|k| (ALLREDUCE_P2P, k.replacen("allreduce_p2p_", "allreduce_p2p_norm_", 1), size_of::<ArNormArgs>()));
    let read = dtypes.into_iter().filter_map(kernel).flat_map(|k| {
        ["allreduce_p2p_read_", "allreduce_p2p_read_norm_"]
            .map(|to| (ALLREDUCE_P2P, k.replacen("allreduce_p2p_", to, 1), size_of::<ArReadArgs>()))
    });
    plain.chain(normed).chain(read).collect()
}

/// Enqueues rank i's share on `streams[i]`: out[i] = the sum over ranks of ins[r] (`count`
/// elements of `dtype` each), every rank the same bits. `sigs[r]` is rank r's signal buffer
/// (zeroed when it was made, then used only by these launches). A rank that waits longer than
/// `timeout_ns` for the others traps (its context fails) instead of hanging.
///
/// The caller checked [`fits`] and that every device may access every other's memory.
///
/// With `residuals` (none, or one per rank, each `count` elements on its rank's device, 16-byte
/// aligned), rank i's result is the rounded sum plus residuals[i], rounded again (the
/// allreduce, then the add). With `norm`, rank i also writes the RMSNorm of its result's rows
/// (weight `norm.gammas[i]`) to `norm.normed[i]` in the same launch; the caller checked
/// [`fits_norm`].
pub fn allreduce_p2p(
    streams: &[Arc<CudaStream>],
    dtype: DType,
    (ins, outs, sigs): (&[u64], &[u64], &[u64]),
    count: usize,
    timeout_ns: u64,
    residuals: &[u64],
    norm: Option<NormOut>,
) -> Result<()> {
    let ranks = streams.len();
    if !residuals.is_empty() && residuals.len() != ranks {
        return Err(Error::Unsupported(format!("allreduce_p2p: {} residuals for {ranks} ranks", residuals.len())));
    }
    let name = kernel(dtype).ok_or_else(|| Error::Unsupported(format!("allreduce_p2p: {dtype}")))?;
    if ins.len() != ranks || outs.len() != ranks || sigs.len() != ranks || !(2..=MAX_RANKS).contains(&ranks) {
        return Err(Error::Unsupported(format!("allreduce_p2p: {ranks} ranks with {} inputs", ins.len())));
    }
    if let Some(n) = &norm
        && (n.gammas.len() != ranks || n.normed.len() != ranks || !fits_norm(dtype, count, n.k))
    {
        return Err(Error::Unsupported(format!("allreduce_p2p: no norm of rows of {} {dtype}", n.k)));
    }
    if reads(dtype, count) {
        if ranks > READ_MAX_RANKS {
            return Err(Error::Unsupported(format!("allreduce_p2p: {count} {dtype} over {ranks} ranks")));
        }
        return allreduce_read(streams, dtype, (ins, outs, sigs), count, timeout_ns, residuals, norm);
    }
    let normed_name = name.replacen("allreduce_p2p_", "allreduce_p2p_norm_", 1);
    let name = if norm.is_some() { normed_name.as_str() } else { name };
    let blocks = (count * dtype.size_in_bytes()).div_ceil(CHUNK) as u32;
    let ll = blocks as usize <= LL_BLOCKS;
    let mut sig = [0u64; MAX_RANKS];
    sig[..ranks].copy_from_slice(sigs);
    // Every rank's function first: a rank launched before another's failed would wait for it
    // until its timeout.
    let fs = streams.iter().map(|s| function(s.context(), &ALLREDUCE_P2P, name)).collect::<Result<Vec<_>>>()?;
    // The sum and norm of one row (a decode step at one sequence) sits between one-row GEMVs,
    // which ask for all of the shared memory under `launch.smem_carveout=one_row`: so does it.
    let one_row = norm.as_ref().is_some_and(|n| n.k == count);
    let carveout = if one_row { crate::modules::one_row_carveout(&max_tuning::current()) } else { None };
    for (i, (stream, f)) in streams.iter().zip(&fs).enumerate() {
        let args = ArArgs {
            input: ins[i],
            out: outs[i],
            sig,
            count: count as i64,
            rank: i as i32,
            ranks: ranks as i32,
            timeout_ns,
            ll: ll as i32,
            pad: 0,
            residual: residuals.get(i).copied().unwrap_or(0),
        };
        let cfg = LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (THREADS as u32, 1, 1), shared_mem_bytes: 0 };
        let what = "cuLaunchKernelEx(allreduce_p2p)";
        // SAFETY: the argument struct matches the kernel's; each rank's input and output (and
        // normalised result) hold `count` elements on its device, its norm weight `k`, and
        // every signal buffer holds signal_bytes(ranks) bytes reachable from every device (the
        // caller's contract, checked by `fits` and `fits_norm`).
        match &norm {
            None => unsafe { super::pdl::launch_pdl(stream, (&ALLREDUCE_P2P, name, f), cfg, &args, None, what) }?,
            Some(n) => {
                let p = n.params;
                let args = ArNormArgs {
                    ar: args,
                    gamma: n.gammas[i],
                    normed: n.normed[i],
                    k: n.k as i64,
                    // f32 as the rms_norm kernel computes it
                    eps: p.epsilon as f32,
                    offset: p.weight_offset as f32,
                    mbc: p.multiply_before_cast as i32,
                    pad: 0,
                };
                let knobs = (None, carveout);
                unsafe { super::pdl::launch_pdl_carveout(stream, (&ALLREDUCE_P2P, name, f), cfg, &args, knobs, what) }?
            }
        };
    }
    super::record::record("allreduce_p2p", || {
        (
            name.to_string(),
            vec![("ranks", ranks as i64), ("blocks", blocks as i64), ("count", count as i64), ("ll", ll as i64)],
        )
    });
    Ok(())
}

/// [`allreduce_p2p`] past MAX_BYTES: every rank reads the others' inputs (kernels
/// allreduce_p2p_read_*), rows of the sum normalised too with `norm`.
fn allreduce_read(
    streams: &[Arc<CudaStream>],
    dtype: DType,
    (ins, outs, sigs): (&[u64], &[u64], &[u64]),
    count: usize,
    timeout_ns: u64,
    residuals: &[u64],
    norm: Option<NormOut>,
) -> Result<()> {
    let ranks = streams.len();
    let base = kernel(dtype).ok_or_else(|| Error::Unsupported(format!("allreduce_p2p: {dtype}")))?;
    let to = if norm.is_some() { "allreduce_p2p_read_norm_" } else { "allreduce_p2p_read_" };
    let name = base.replacen("allreduce_p2p_", to, 1);
    let vectors = count * dtype.size_in_bytes() / 16;
    let blocks = match &norm {
        Some(n) => (count / n.k).min(READ_BLOCKS / 2),
        None => vectors.div_ceil(READ_THREADS * READ_PER).min(READ_BLOCKS),
    }
    .max(1) as u32;
    let mut input = [0u64; MAX_RANKS];
    input[..ranks].copy_from_slice(ins);
    let mut sig = [0u64; MAX_RANKS];
    sig[..ranks].copy_from_slice(sigs);
    let fs = streams.iter().map(|s| function(s.context(), &ALLREDUCE_P2P, &name)).collect::<Result<Vec<_>>>()?;
    for (i, (stream, f)) in streams.iter().zip(&fs).enumerate() {
        let (gamma, normed, k, p) = match &norm {
            Some(n) => (n.gammas[i], n.normed[i], n.k as i64, Some(n.params)),
            None => (0, 0, 0, None),
        };
        let args = ArReadArgs {
            input,
            sig,
            out: outs[i],
            residual: residuals.get(i).copied().unwrap_or(0),
            count: count as i64,
            rank: i as i32,
            ranks: ranks as i32,
            timeout_ns,
            gamma,
            normed,
            k,
            eps: p.map_or(0.0, |p| p.epsilon as f32),
            offset: p.map_or(0.0, |p| p.weight_offset as f32),
            mbc: p.is_some_and(|p| p.multiply_before_cast) as i32,
            pad: 0,
        };
        let cfg =
            LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (READ_THREADS as u32, 1, 1), shared_mem_bytes: 0 };
        // SAFETY: the argument struct matches the kernel's; every rank's input holds `count`
        // elements readable from every device, this rank's output (and normalised result)
        // `count` and its norm weight `k` on its device, and every signal buffer holds
        // signal_bytes(ranks) bytes reachable from every device (the caller's contract).
        unsafe {
            super::pdl::launch_pdl(
                stream,
                (&ALLREDUCE_P2P, &name, f),
                cfg,
                &args,
                None,
                "cuLaunchKernelEx(allreduce_p2p_read)",
            )
        }?;
    }
    super::record::record("allreduce_p2p", || {
        (name.clone(), vec![("ranks", ranks as i64), ("blocks", blocks as i64), ("count", count as i64), ("ll", 0)])
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_fits() {
        let sig = signal_bytes(2);
        assert_eq!(sig, 65_536 + 4 * (1_048_576 + 524_288));
        // a decode step's 4096 bf16 activations on 2 GPUs
        assert!(fits(DType::BFloat16, 4096, 2, sig, &[0x1000, 0x2000]));
        assert!(fits(DType::Float32, MAX_BYTES / 4, 2, sig, &[0]));
        assert!(fits(DType::Float32, MAX_BYTES / 4 + 4, 2, sig, &[0]), "past 1 MiB: read from the peers");
        assert!(fits(DType::BFloat16, 2048 * 4096, 4, signal_bytes(4), &[0]), "a prefill's 16 MiB on 4 GPUs");
        assert!(!fits(DType::BFloat16, 2048 * 4096, 5, signal_bytes(5), &[0]), "past READ_MAX_RANKS: NCCL");
        assert!(fits(DType::BFloat16, 4096, 5, signal_bytes(5), &[0]), "small calls push on any group");
        assert!(!fits(DType::BFloat16, 4095, 2, sig, &[0]), "not whole 16-byte vectors");
        assert!(!fits(DType::BFloat16, 4096, 2, sig, &[0x1008]), "misaligned");
        assert!(!fits(DType::BFloat16, 4096, 1, sig, &[0]), "one rank");
        assert!(!fits(DType::BFloat16, 4096, 9, signal_bytes(9), &[0]), "past 8 ranks");
        assert!(!fits(DType::BFloat16, 4096, 4, sig, &[0]), "signal buffers too small for 4 ranks");
        assert!(!fits(DType::Int64, 4096, 2, sig, &[0]));
        assert!(!fits(DType::BFloat16, 0, 2, sig, &[0]));
    }

    #[test]
    fn norms_of_whole_rows_per_block() {
        // Llama-3-8B's and Llama-3.2-1B's hidden rows, bf16 and f32: whole warps, whole rows a block
        for (dtype, k) in
            [(DType::BFloat16, 4096), (DType::BFloat16, 2048), (DType::Float32, 2048), (DType::Float16, 256)]
        {
            assert!(fits_norm(dtype, k, k), "{dtype:?} {k}");
        }
        assert!(!fits_norm(DType::BFloat16, 8192, 8192), "a row past one block");
        assert!(!fits_norm(DType::BFloat16, 576, 576), "SmolLM2: not whole warps of vectors");
        assert!(!fits_norm(DType::BFloat16, 3072, 3072), "rows straddling blocks");
        assert!(!fits_norm(DType::BFloat16, 128, 128), "a row of less than a warp of vectors");
        assert!(!fits_norm(DType::BFloat16, 0, 0));
        assert!(!fits_norm(DType::BFloat16, 4096 * 3, 8192), "not whole rows");
    }

    #[test]
    fn norms_of_read_rows() {
        // a prefill's rows (2048 tokens): 8B's 4096, SmolLM2's 576 (whole vectors), up to 8192 bf16
        for (dtype, k) in
            [(DType::BFloat16, 4096), (DType::BFloat16, 576), (DType::BFloat16, 8192), (DType::Float32, 4096)]
        {
            assert!(fits_norm(dtype, 2048 * k, k), "{dtype:?} {k}");
        }
        assert!(!fits_norm(DType::BFloat16, 2048 * 16384, 16384), "past 1024 vectors a row");
        assert!(!fits_norm(DType::BFloat16, 2048 * 1028, 1028), "not whole vectors");
    }
}
