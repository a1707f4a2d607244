//! Launching kernels/allreduce_p2p.cu: allreduce.sum of a small tensor over the GPUs of one
//! process through their signal buffers, one launch per rank on its own stream. [`fits`] says
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

/// Whether an allreduce of `count` elements of `dtype` over `ranks` GPUs, with signal buffers of
/// `signal` bytes (the smallest) and tensors at `addrs` (inputs and outputs), can run here:
/// 2..=MAX_RANKS ranks, a summable 16-bit or f32 type, a whole number of 16-byte vectors of at
/// most MAX_BYTES, 16-byte aligned tensors and room for the receive slots.
pub fn fits(dtype: DType, count: usize, ranks: usize, signal: usize, addrs: &[u64]) -> bool {
    let bytes = count * dtype.size_in_bytes();
    kernel(dtype).is_some()
        && (2..=MAX_RANKS).contains(&ranks)
        && bytes > 0
        && bytes % 16 == 0
        && bytes <= MAX_BYTES
        && signal >= signal_bytes(ranks)
        && addrs.iter().all(|a| a % 16 == 0)
}

/// Whether the sum's rows of `k` elements (a tensor that [`fits`]) can also be normalised in
/// the same launch: a row is whole warps of 16-byte vectors and a block's chunk whole rows.
pub fn fits_norm(dtype: DType, k: usize) -> bool {
    let row = k * dtype.size_in_bytes();
    k > 0 && row % (16 * 32) == 0 && CHUNK % row == 0
}

/// The kernels the launcher names with their argument size (tests/launched_kernels.rs).
pub fn kernels() -> Vec<(Family, String, usize)> {
    let dtypes = [DType::BFloat16, DType::Float16, DType::Float32];
    let plain = dtypes.into_iter().filter_map(kernel).map(|k| (ALLREDUCE_P2P, k.to_string(), size_of::<ArArgs>()));
    let normed = dtypes
        .into_iter()
        .filter_map(kernel)
        .map(|k| (ALLREDUCE_P2P, k.replacen("allreduce_p2p_", "allreduce_p2p_norm_", 1), size_of::<ArNormArgs>()));
    plain.chain(normed).collect()
}

/// Enqueues rank i's share on `streams[i]`: out[i] = the sum over ranks of ins[r] (`count`
/// elements of `dtype` each), every rank the same bits. `sigs[r]` is rank r's signal buffer
/// (zeroed when it was made, then used only by these launches). A rank that waits longer than
/// `timeout_ns` for the others traps (its context fails) instead of hanging.
///
/// The caller checked [`fits`] and that every device may access every other's memory.
///
/// With `norm`, rank i also writes the RMSNorm of the sum's rows (weight `norm.gammas[i]`) to
/// `norm.normed[i]` in the same launch; the caller checked [`fits_norm`].
pub fn allreduce_p2p(
    streams: &[Arc<CudaStream>],
    dtype: DType,
    (ins, outs, sigs): (&[u64], &[u64], &[u64]),
    count: usize,
    timeout_ns: u64,
    norm: Option<NormOut>,
) -> Result<()> {
    let ranks = streams.len();
    let name = kernel(dtype).ok_or_else(|| Error::Unsupported(format!("allreduce_p2p: {dtype}")))?;
    if ins.len() != ranks || outs.len() != ranks || sigs.len() != ranks || !(2..=MAX_RANKS).contains(&ranks) {
        return Err(Error::Unsupported(format!("allreduce_p2p: {ranks} ranks with {} inputs", ins.len())));
    }
    if let Some(n) = &norm {
        if n.gammas.len() != ranks || n.normed.len() != ranks || !fits_norm(dtype, n.k) || count % n.k != 0 {
            return Err(Error::Unsupported(format!("allreduce_p2p: no norm of rows of {} {dtype}", n.k)));
        }
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
                unsafe { super::pdl::launch_pdl(stream, (&ALLREDUCE_P2P, name, f), cfg, &args, None, what) }?
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
        assert!(!fits(DType::Float32, MAX_BYTES / 4 + 4, 2, sig, &[0]), "past 1 MiB");
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
            assert!(fits_norm(dtype, k), "{dtype:?} {k}");
        }
        assert!(!fits_norm(DType::BFloat16, 8192), "a row past one block");
        assert!(!fits_norm(DType::BFloat16, 576), "SmolLM2: not whole warps of vectors");
        assert!(!fits_norm(DType::BFloat16, 3072), "rows straddling blocks");
        assert!(!fits_norm(DType::BFloat16, 128), "a row of less than a warp of vectors");
        assert!(!fits_norm(DType::BFloat16, 0));
    }
}
