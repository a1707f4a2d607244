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

/// The default choice: every plain 1x1 conv without a residual whose reduction is shorter than
/// 2048 input channels. Measured on an H200 against the conv kernel (ResNet-50 batch 32,
/// `benchmarks/gpu_conv2d.py --variants gemm=MAX_CONV_SM90_GEMM=1 conv=MAX_CONV_SM90_GEMM=0`,
/// after the GEMM's staged epilogue became its default up to K = 2048), GEMM against conv
/// kernel in us: 56x56 64 -> 64 16.0 / 18.4, 64 -> 256 25.0 / 57.9, 256 -> 64 24.1 / 25.9,
/// 256 -> 128 25.6 / 37.7; 28x28 128 -> 512 16.5 / 31.8, 512 -> 128 14.7 / 15.5, 512 -> 256
/// 19.7 / 24.1; 14x14 256 -> 1024 14.9 / 18.5, 1024 -> 256 13.5 / 14.0, 1024 -> 512 17.3 /
/// 21.2; 7x7 512 -> 2048 12.2 / 16.3; but 7x7 2048 -> 512 22.3 / 12.4 (the GEMM splits its
/// long reduction). With a residual the conv kernel's epilogue (the residual prefetched into
/// L2 by TMA) is the one: conv + bias + relu + residual 84.2 against 86.8 us (64 -> 256) but
/// 32.3 against 25.4 us (256 -> 1024).
fn prefer(sh: &Conv2dShape, epi: &Epilogue) -> bool {
    epi.residual == 0 && sh.c < 2048
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
