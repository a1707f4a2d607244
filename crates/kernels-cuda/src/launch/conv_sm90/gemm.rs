//! 1x1 convolutions with stride 1 and no padding as the GEMM they are: the NHWC input is the
//! matrix [M = N * H * W, C], the RSCF filter [1, 1, C, K] the matrix [C, K] as it is stored, and
//! the NHWC output [M, K]. The persistent Hopper GEMM (kernels/gemm_sm90p.cu) runs them with the
//! same epilogue contract (bias, activation, clamp, then + beta * residual), where it measured
//! faster than the implicit-GEMM conv kernel (see [`prefer`]). This is the path the issue of 1x1
//! layers as GEMMs asked for; the conv kernel's own tiled [M, C] map serves the other 1x1 layers.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use cudarc::driver::CudaStream;
use max_graph::DType;

use super::{Conv2dShape, Knobs, Outcome};
use crate::Result;
use crate::launch::epilogue::Epilogue;
use crate::launch::gemm_sm90;

/// Of the Hopper conv2d launches, those that ran as a GEMM.
pub(super) static GEMM: AtomicU64 = AtomicU64::new(0);

/// `MAX_CONV_SM90_GEMM`: `Some(true)` always (where the shape is a plain GEMM), `Some(false)`
/// never; unset, [`prefer`] decides.
fn knob() -> Option<bool> {
    std::env::var("MAX_CONV_SM90_GEMM").ok().and_then(|v| v.trim().parse::<u8>().ok()).map(|v| v != 0)
}

/// Whether the shape is a plain GEMM: a 1x1 window, stride 1, no padding.
pub(super) fn is_gemm(sh: &Conv2dShape) -> bool {
    (sh.r, sh.s, sh.p, sh.q) == (1, 1, sh.h, sh.w) && sh.stride == [1, 1] && sh.pad == [0, 0]
}

/// The default choice: wide outputs from short reductions (K >= 256 output channels from
/// C <= 512 input channels, or K >= 128 from C <= 256) without a residual: output-bound GEMMs
/// whose staged epilogue stores C as coalesced 16-byte vectors. Measured on an H200 against the
/// conv kernel (ResNet-50 batch 32, plain convs, `benchmarks/gpu_conv2d.py --variants`): 56x56
/// 64 -> 256 26.3 against 57.2 us, 56x56 256 -> 128 30.2 against 37.3, 28x28 128 -> 512 18.0
/// against 31.7, 28x28 512 -> 256 22.8 against 25.3, 14x14 256 -> 1024 16.2 against 19.7, 7x7
/// 512 -> 2048 12.6 against 16.7; the other 1x1 layers ran faster on the conv kernel (28x28
/// 512 -> 128 15.9 against 17.2, 14x14 1024 -> 256 15.3 against 17.6, 56x56 256 -> 64 25.9
/// against 38.0). With a residual the conv kernel's epilogue (the residual prefetched into L2
/// by TMA) won: conv + bias + relu + residual 86.8 against 109.4 us (64 -> 256) and 25.0
/// against 33.7 us (256 -> 1024).
fn prefer(sh: &Conv2dShape, epi: &Epilogue) -> bool {
    epi.residual == 0 && ((sh.k >= 256 && sh.c <= 512) || (sh.k >= 128 && sh.c <= 256))
}

/// Runs the conv as a GEMM when it is one and the GEMM is the better (or forced) path; None
/// when the conv kernel should run it. Tuning knobs of the conv kernel (tile width, splits,
/// grid, staged epilogue) keep it on that kernel unless `MAX_CONV_SM90_GEMM=1`.
pub(super) fn try_run(
    stream: &Arc<CudaStream>,
    dtype: DType,
    (x, f, bias, out): (u64, u64, u64, u64),
    sh: &Conv2dShape,
    epi: &Epilogue,
    knobs: &Knobs,
) -> Result<Option<Outcome>> {
    let tuned = knobs.bn.is_some() || knobs.splits.is_some() || knobs.grid.is_some() || knobs.staged;
    let wanted = knob().unwrap_or(!tuned && prefer(sh, epi));
    // One bias in the GEMM's epilogue: the conv's own or the fused one, not both; row
    // coordinates within the GEMM's 32-bit TMA coordinates.
    if !wanted || !is_gemm(sh) || (bias != 0 && epi.bias != 0) || sh.m() > i32::MAX as usize {
        return Ok(None);
    }
    let mut e = *epi;
    if bias != 0 {
        e.bias = bias;
    }
    gemm_sm90::gemm(stream, dtype, (x, f, out), (sh.m(), sh.k, sh.c), 1, (1, 1), &e)?;
    GEMM.fetch_add(1, Ordering::Relaxed);
    Ok(Some(Outcome::Ran))
}
