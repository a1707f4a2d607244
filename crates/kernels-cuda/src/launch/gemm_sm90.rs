//! Launching the Hopper GEMM: TMA descriptors are encoded for A and B (read as it is when
//! N % 8 == 0, else transposed into a scratch Bt first), then the persistent, clustered,
//! split-K kernel of kernels/gemm_sm90p.cu runs (launch/gemm_sm90p.rs plans it), or with
//! `MAX_GEMM_SM90_LEGACY=1` the original kernels/gemm_sm90.cu (one block per 128 x 256 tile).
//! `MAX_GEMM_SM90_MIN_M` = rows from which matmul prefers this kernel (default 128).

use std::sync::Arc;

use cudarc::driver::sys::CUtensorMapSwizzle;
use cudarc::driver::{CudaStream, DeviceRepr, LaunchConfig, PushKernelArg, result};
use max_graph::DType;

use super::epilogue::Epilogue;
use super::gemm_sm90p;
use super::tma::{self, TmaMap};
use crate::sources::GEMM_SM90;
use crate::{Error, Result, function};

const BM: usize = 128;
const BN: usize = 256;
const BK: u32 = 64;
/// 4 stages of (128 + 256) x 64 16-bit elements, the stage barriers, and slack to align the
/// stages to 1024 bytes.
const SMEM: u32 = 4 * ((BM + BN) as u32 * BK * 2) + 64 + 1024;

#[repr(C)]
#[derive(Clone, Copy)]
struct GemmArgs {
    c: u64,
    m: i64,
    n: i64,
    k: i64,
    stride_c: i64,
    group_m: i64,
    epi: Epilogue,
}
// SAFETY: plain-old-data with the kernel's `GemmArgs` layout.
unsafe impl DeviceRepr for GemmArgs {}

/// A 3-D tiled TMA map over `batch` row-major [rows, k] matrices of 16-bit elements, in boxes
/// of 64 (the inner `k` extent, 128 bytes) x `box_rows`, 128-byte swizzle.
pub(crate) fn tma_map(dtype: DType, ptr: u64, k: usize, rows: usize, batch: usize, box_rows: u32) -> Result<TmaMap> {
    let dims = [k as u64, rows as u64, batch as u64];
    let strides = [(k * 2) as u64, (rows * k * 2) as u64];
    tma::tiled(
        tma::half_type(dtype),
        ptr,
        &dims,
        &strides,
        &[BK, box_rows, 1],
        CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
    )
    .map_err(Error::driver("cuTensorMapEncodeTiled"))
}

fn legacy() -> bool {
    std::env::var("MAX_GEMM_SM90_LEGACY").as_deref() == Ok("1")
}

/// Whether the one-tile-per-CTA kernel runs: only when forced (`MAX_GEMM_SM90_LEGACY=1`). It led
/// the persistent kernel from 8 waves of tiles until the clusters' barrier fix; since then the
/// persistent kernel with 2-CTA clusters measured faster on an H200 (8192^3 bf16: 704 vs 624
/// TFLOP/s).
fn use_legacy(_stream: &Arc<CudaStream>, _tiles: usize) -> Result<bool> {
    Ok(legacy())
}

/// Rows from which the Hopper kernel is worth it: 128 (split-K fills the GPU from there; the
/// legacy kernel wants 256), or `MAX_GEMM_SM90_MIN_M` (1 sends every shape here, for tests).
pub fn min_rows() -> usize {
    let default = if legacy() { 256 } else { 128 };
    std::env::var("MAX_GEMM_SM90_MIN_M").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(default).max(1)
}

/// Whether the Hopper kernel can take this problem (16-bit types, K a multiple of 8, 16-byte
/// aligned operands) and is worth it (at least [`min_rows`] rows; fewer go to mma.sync, which
/// reads B without transposing it).
pub fn suitable(dtype: DType, m: usize, k: usize, a: u64, b: u64) -> bool {
    matches!(dtype, DType::BFloat16 | DType::Float16) && k % 8 == 0 && k > 0 && m >= min_rows() && (a | b) % 16 == 0
}

/// `batch` products C = A @ B: A [m, k] batches at `a` (or one shared when `batch_a` is 1),
/// B [k, n] batches at `b` (likewise), C [m, n] batches at `c`.
#[allow(clippy::too_many_arguments)]
pub fn gemm(
    stream: &Arc<CudaStream>,
    dtype: DType,
    (a, b, c): (u64, u64, u64),
    (m, n, k): (usize, usize, usize),
    batch: usize,
    (batch_a, batch_b): (usize, usize),
    epi: &Epilogue,
) -> Result<()> {
    if m == 0 || n == 0 || batch == 0 {
        return Ok(());
    }
    // B as given (N-major) when TMA can stride its rows; else transposed into a scratch Bt.
    // MAX_GEMM_SM90_TRANSPOSE=1 and MAX_GEMM_SM90_GROUP_M=<row tiles> are tuning knobs.
    let n_major = n % 8 == 0 && b % 16 == 0 && std::env::var("MAX_GEMM_SM90_TRANSPOSE").as_deref() != Ok("1");
    // A shared by all batches with B batched is rare; everything else is one launch: batched A
    // with shared B folds the batches into the rows of one big A.
    let (rows_a, z) = if batch_b == 1 && batch_a == batch { (m * batch, 1) } else { (m, batch) };
    if z > 1 && (batch_a != batch || batch_b != batch) {
        return Err(Error::Unsupported("gemm_sm90: this batch broadcast goes through the generic path".into()));
    }
    let legacy = use_legacy(stream, z * rows_a.div_ceil(128) * n.div_ceil(256))?;
    // B [k, n] (n_major) or Bt [n, k] at `ptr`, batch_b of them.
    let launch_b = |ptr: u64, n_major: bool| -> Result<()> {
        if !legacy {
            return gemm_sm90p::launch(stream, dtype, (a, ptr, c), (rows_a, n, k), z, batch_b, n_major, epi);
        }
        let group_m: i64 = std::env::var("MAX_GEMM_SM90_GROUP_M").ok().and_then(|v| v.parse().ok()).unwrap_or(1).max(1);
        let name = match (dtype == DType::BFloat16, n_major) {
            (true, true) => "gemm_sm90_bf16_nn",
            (false, true) => "gemm_sm90_f16_nn",
            (true, false) => "gemm_sm90_bf16",
            (false, false) => "gemm_sm90_f16",
        };
        let f = function(stream.context(), &GEMM_SM90, name)?;
        crate::allow_smem(stream.context(), &f, SMEM)?;
        let map_b = if n_major {
            // 64 x 64 boxes of B [k, n]: rows of 128 bytes, the N-major swizzled layout.
            tma_map(dtype, ptr, n, k, batch_b, BK)?
        } else {
            tma_map(dtype, ptr, k, n, batch_b, BN as u32)?
        };
        let map_a = tma_map(dtype, a, k, rows_a, if z == 1 { 1 } else { batch_a }, BM as u32)?;
        let args =
            GemmArgs { c, m: rows_a as i64, n: n as i64, k: k as i64, stride_c: (m * n) as i64, group_m, epi: *epi };
        let cfg = LaunchConfig {
            grid_dim: ((n.div_ceil(BN) * rows_a.div_ceil(BM)) as u32, 1, z as u32),
            block_dim: (384, 1, 1),
            shared_mem_bytes: SMEM,
        };
        let mut launch = stream.launch_builder(&f);
        launch.arg(&map_a).arg(&map_b).arg(&args);
        // SAFETY: the maps describe live allocations; C holds z batches of rows_a x n.
        unsafe { launch.launch(cfg) }.map_err(Error::driver("cuLaunchKernel(gemm_sm90)"))?;
        Ok(())
    };
    if n_major {
        return launch_b(b, true);
    }
    // Bt: batch_b matrices [n, k].
    let bt_bytes = batch_b * n * k * 2;
    // SAFETY: stream-ordered allocation, freed below on the same stream after its last use.
    let bt = unsafe { result::malloc_async(stream.cu_stream(), bt_bytes) }.map_err(Error::driver("cuMemAllocAsync"))?;
    let run = || -> Result<()> {
        // The layout family's tiled transpose: Bt[z][j][i] = B[z][i][j].
        let (kn, ki, ni) = ((k * n) as isize, k as isize, n as isize);
        super::layout::copy_view(stream, b, &[kn, 1, ni], bt, &[kn, ki, 1], &[batch_b, n, k], 2)?;
        launch_b(bt, false)
    };
    let out = run();
    // SAFETY: allocated above on this stream; freed after the kernels that use it.
    let _ = unsafe { result::free_async(bt, stream.cu_stream()) };
    out
}
