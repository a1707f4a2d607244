//! 1x1 convolutions with stride 1 and no padding as the GEMM they are: the NHWC input is the
//! matrix [M = N * H * W, C], the RSCF filter [1, 1, C, K] the matrix [C, K] as it is stored, and
//! the NHWC output [M, K]. The persistent Hopper GEMM (kernels/gemm_sm90p.cu) runs them with the
//! same epilogue contract (bias, activation, clamp, then + beta * residual) when asked to (see
//! [`try_run`]: the conv kernel, which reads these layers through a tiled [M, C] map, measured
//! faster).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use cudarc::driver::CudaStream;
use max_graph::DType;

use super::{Conv2dShape, Outcome};
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

/// Runs the conv as a GEMM when it is one and `MAX_CONV_SM90_GEMM=1` asks for it; None when the
/// conv kernel should run it (the default). Since the conv kernel stores its results as 16-byte
/// vectors staged through shared memory it measured faster on every ResNet-50 1x1 layer (H200,
/// batch 32, `benchmarks/gpu_conv2d.py --variants conv=MAX_CONV_SM90_GEMM=0
/// gemm=MAX_CONV_SM90_GEMM=1`, conv kernel against GEMM in us): 56x56 64 -> 64 11.7 / 16.0,
/// 64 -> 256 22.8 / 25.1, 256 -> 64 22.3 / 24.3, 256 -> 128 25.1 / 25.6; 28x28 128 -> 512
/// 14.6 / 16.6, 512 -> 128 12.3 / 14.7, 512 -> 256 17.4 / 19.7; 14x14 256 -> 1024 13.2 / 14.9,
/// 1024 -> 256 11.4 / 13.5, 1024 -> 512 16.2 / 17.2; 7x7 512 -> 2048 11.2 / 12.3, 2048 -> 512
/// 11.1 / 22.1; with bias, relu and a residual 25.4 / 32.8 (256 -> 1024).
pub(super) fn try_run(
    stream: &Arc<CudaStream>,
    dtype: DType,
    (x, f, bias, out): (u64, u64, u64, u64),
    sh: &Conv2dShape,
    epi: &Epilogue,
) -> Result<Option<Outcome>> {
    let wanted = knob().unwrap_or(false);
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
