//! Launching the Hopper GEMM: TMA descriptors are encoded for A and B (read as it is when
//! N % 8 == 0, else transposed into a scratch Bt first), then the persistent, clustered,
//! split-K kernel of kernels/gemm_sm90p.cu runs (launch/gemm_sm90p.rs plans it). The tuning
//! knob `gemm.min_m` sets the rows from which matmul prefers this kernel (default 9).
//! The one-tile-per-CTA kernel this replaced measured slower on an H200 once the clusters'
//! barrier was fixed (8192^3 bf16: 624 against 704 TFLOP/s) and was deleted.

use std::sync::Arc;

use cudarc::driver::sys::CUtensorMapSwizzle;
use cudarc::driver::{CudaStream, result};
use max_graph::DType;

use super::epilogue::Epilogue;
use super::gemm_sm90p;
use super::tma::{self, TmaMap};
use crate::{Error, Result};

const BK: u32 = 64;

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

/// Rows from which the Hopper kernel is worth it by default: at 16 rows of 4096 x 4096 (bf16,
/// H200) its 128-row tile measured 0.71x cuBLAS and its 64-row tile (gemm.bm=64) 0.96x, where
/// gemm_skinny's mma.sync kernel measured 0.62x; fewer rows waste less of gemm_skinny's 16-row
/// tiles (and its SIMT kernel takes up to 4).
const MIN_M: usize = 9;

/// Rows below which, by default, the Hopper kernel takes B [k, n] only as given (n % 8 == 0): a
/// transposed scratch copy of B costs more than a product of so few rows, and gemm_skinny
/// reads any n.
const TRANSPOSE_MIN_M: usize = 128;

/// Whether the Hopper kernel can take this product of [m, k] by [k, n] (16-bit types, K a
/// multiple of 8, 16-byte aligned operands) and is worth it: at least `gemm.min_m` rows when
/// that knob is set (1 sends every shape here, for tests), else at least [`MIN_M`] rows and,
/// below [`TRANSPOSE_MIN_M`], B readable as given.
pub fn suitable(dtype: DType, m: usize, n: usize, k: usize, a: u64, b: u64) -> bool {
    let t = max_tuning::current();
    let rows = match t.int(max_tuning::Knob::GemmMinM).filter(|_| t.is_set(max_tuning::Knob::GemmMinM)) {
        Some(min) => m >= min,
        None => m >= MIN_M && (m >= TRANSPOSE_MIN_M || n.is_multiple_of(8)),
    };
    matches!(dtype, DType::BFloat16 | DType::Float16)
        && k.is_multiple_of(8)
        && k > 0
        && rows
        && (a | b).is_multiple_of(16)
}

/// C = epilogue(A @ W^T) for A [m, k] at `a` and W [n, k] at `w` (a linear layer's weight as
/// stored: the K-major B operand the kernel reads without a transpose), any m >= 1.
/// `weights_constant`: no kernel writes W, so under PDL the kernel streams its first stages of
/// W before it waits for the kernel ahead (`gemm.early_weights`).
#[allow(clippy::too_many_arguments)]
pub fn gemm_bt(
    stream: &Arc<CudaStream>,
    dtype: DType,
    (a, w, c): (u64, u64, u64),
    (m, n, k): (usize, usize, usize),
    epi: &Epilogue,
    weights_constant: bool,
) -> Result<()> {
    check_bt(dtype, k, a | w)?;
    if m == 0 || n == 0 {
        return Ok(());
    }
    gemm_sm90p::launch(stream, dtype, (a, w, c), (m, n, k), (1, 1, false), epi, weights_constant)
}

/// `A @ W_s^T` for several weights W_s [n_s, k] (16-bit, as stored) in one launch, each into
/// its own C [m, n_s]: `parts` are `(w, c, n_s)`, at most [`SIBLINGS`] of them (a layer's q, k
/// and v projections); an identity epilogue. `weights_constant` as for [`gemm_bt`].
pub fn gemm_bt_siblings(
    stream: &Arc<CudaStream>,
    dtype: DType,
    a: u64,
    parts: &[(u64, u64, usize)],
    (m, k): (usize, usize),
    weights_constant: bool,
) -> Result<()> {
    check_bt(dtype, k, parts.iter().fold(a, |acc, p| acc | p.0))?;
    if m == 0 || parts.iter().all(|p| p.2 == 0) {
        return Ok(());
    }
    gemm_sm90p::launch_segments(stream, dtype, a, parts, (m, k), weights_constant)
}

/// The most weights [`gemm_bt_siblings`] takes.
pub const SIBLINGS: usize = gemm_sm90p::SEGS;

/// C [m, n] = act(A @ Wg^T) * (A @ Wu^T) in one launch (a gated MLP's first half) for A [m, k]
/// and Wg, Wu [n, k] as stored (16-bit), `epi` an activation at most (applied to the gate); the
/// product rounds act(gate) and up to the type first, as the separate steps would.
/// `weights_constant` as for [`gemm_bt`].
pub fn gemm_bt_gated(
    stream: &Arc<CudaStream>,
    dtype: DType,
    (a, wg, wu, c): (u64, u64, u64, u64),
    (m, n, k): (usize, usize, usize),
    epi: &Epilogue,
    weights_constant: bool,
) -> Result<()> {
    check_bt(dtype, k, a | wg | wu)?;
    if m == 0 || n == 0 {
        return Ok(());
    }
    gemm_sm90p::launch_gated(stream, dtype, (a, wg, wu, c), (m, n, k), epi, weights_constant)
}

fn check_bt(dtype: DType, k: usize, addrs: u64) -> Result<()> {
    if !matches!(dtype, DType::BFloat16 | DType::Float16) || !k.is_multiple_of(8) || k == 0 || !addrs.is_multiple_of(16)
    {
        return Err(Error::Unsupported(format!(
            "gemm_sm90: W^T products need 16-bit, K % 8 == 0, aligned operands ({dtype}, k={k})"
        )));
    }
    Ok(())
}

/// C = A @ W^T + residual in f32 for bf16 A [m, k] at `a` and W [n, k] at `w` (K-major), C and
/// the residual (`epi`'s only operation, if any) [m, n] with rows `ldc` elements apart: the
/// many-rows qmatmul, whose result is f32 and whose weights are dequantized to bf16 in chunks
/// of rows (so C may be a column range of a wider result).
pub fn gemm_bt_f32(
    stream: &Arc<CudaStream>,
    (a, w, c): (u64, u64, u64),
    (m, n, k): (usize, usize, usize),
    ldc: usize,
    epi: &Epilogue,
) -> Result<()> {
    if k % 8 != 0 || (a | w) % 16 != 0 || k == 0 {
        return Err(Error::Unsupported(format!(
            "gemm_sm90: bf16 W^T products need K % 8 == 0 and aligned operands (k={k})"
        )));
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    gemm_sm90p::launch_f32(stream, (a, w, c), (m, n, k), ldc, epi)
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
    // B as given (N-major) when TMA can stride its rows (unless gemm.transpose); else transposed
    // into a scratch Bt.
    let transpose = max_tuning::current().flag_or(max_tuning::Knob::GemmTranspose, false);
    let n_major = n % 8 == 0 && b % 16 == 0 && !transpose;
    // A shared by all batches with B batched is rare; everything else is one launch: batched A
    // with shared B folds the batches into the rows of one big A.
    let (rows_a, z) = if batch_b == 1 && batch_a == batch { (m * batch, 1) } else { (m, batch) };
    if z > 1 && (batch_a != batch || batch_b != batch) {
        return Err(Error::Unsupported("gemm_sm90: this batch broadcast goes through the generic path".into()));
    }
    // B [k, n] (n_major) or Bt [n, k] at `ptr`, batch_b of them.
    let launch_b = |ptr: u64, n_major: bool| -> Result<()> {
        gemm_sm90p::launch(stream, dtype, (a, ptr, c), (rows_a, n, k), (z, batch_b, n_major), epi, false)
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
