//! Split-K for the Hopper conv2d: when a problem has few output tiles for the SMs and a long
//! reduction (the late ResNet layers: 7x7 outputs at batch 32 are 13 row tiles), the kernel
//! splits each tile's k-steps over several persistent blocks, each writing its f32 partial
//! products to its own plane of a workspace [splits, M, K]; a reduce kernel
//! (kernels/conv_sm90_aux.cu) sums the planes in split order (deterministic: no atomics, the
//! same bits for every schedule) and applies the whole epilogue (conv bias, bias, activation,
//! clamp, + beta * residual).
//!
//! [`choose`] picks the tile width and the split count from a rough cost model (k-steps per
//! block, waves of work units over the SMs, the partial products' traffic and the reduce
//! launch); the knob `MAX_CONV_SM90_SPLITK` = n (read per call) forces n splits (1: never
//! split), at most one per k-step; `MAX_CONV_SM90_BN` still forces the tile width.

use std::sync::Arc;

use cudarc::driver::{CudaStream, DeviceRepr, LaunchConfig, PushKernelArg};
use max_graph::DType;

use super::super::epilogue::Epilogue;
use super::BM;
use crate::sources::CONV_SM90_AUX;
use crate::{Error, Result, function};

/// The most splits the heuristic considers.
const MAX_SPLITS: usize = 16;
/// Nanoseconds per unit of the kernel's k-step cost (a 128 x BN k-step costs BN + 48 units),
/// measured on an H200 (the 7x7x512 3x3 layer at batch 32: 72 k-steps of BN = 64 in 20 us).
const NS_PER_UNIT: f64 = 2.5;
/// Bytes per nanosecond one SM's epilogue stores, and the reduce kernel's bandwidth over its
/// partial products (just written: mostly L2-resident). Calibrated with
/// benchmarks/gpu_conv2d.py --variants on an H200: the 7x7x512 3x3 layer at batch 32 took
/// 24.3 us split 5 ways at BN = 256 and 20.2 us unsplit at BN = 64, so a split's reduce costs
/// more than its traffic alone (the launch, the partial products' round trip); with these, no
/// ResNet-50 layer splits at batch 32, and the late layers at batch 1 (one row tile) do.
const STORE_BYTES_PER_NS: f64 = 55.0;
const REDUCE_BYTES_PER_NS: f64 = 3000.0;
/// The reduce launch's fixed cost, in nanoseconds.
const REDUCE_NS: f64 = 3000.0;
/// A split must beat the best unsplit plan by this factor.
const MARGIN: f64 = 0.9;

/// The modelled time (ns) of the conv with tile width `bn` and `splits` splits.
pub fn cost(m: usize, k: usize, ktiles: usize, sms: usize, bn: usize, splits: usize, residual: bool) -> f64 {
    let units = m.div_ceil(BM) * k.div_ceil(bn) * splits;
    let waves = units.div_ceil(sms.max(1)) as f64;
    let steps = ktiles.div_ceil(splits.max(1)) as f64;
    let out_bytes = if splits > 1 { 4.0 } else { 2.0 };
    let epilogue = (BM * bn) as f64 * out_bytes / STORE_BYTES_PER_NS;
    let mut t = waves * (steps * (bn + 48) as f64 * NS_PER_UNIT + epilogue);
    if splits > 1 {
        let mk = (m * k) as f64;
        let bytes = splits as f64 * mk * 4.0 + mk * 2.0 * if residual { 2.0 } else { 1.0 };
        t += REDUCE_NS + bytes / REDUCE_BYTES_PER_NS;
    }
    t
}

/// (tile width, splits) for an M x K output with `ktiles` k-steps per tile on `sms` SMs, where
/// `unsplit_bn` is the width an unsplit conv takes. `forced_bn` fixes the width and
/// `forced_splits` the split count (at most one per k-step).
pub fn choose(
    (m, k, ktiles): (usize, usize, usize),
    sms: usize,
    residual: bool,
    unsplit_bn: usize,
    forced_bn: Option<usize>,
    forced_splits: Option<usize>,
) -> (usize, usize) {
    let widths: Vec<usize> = match forced_bn {
        Some(bn) => vec![bn],
        None => vec![256, 128, 64],
    };
    let ktiles = ktiles.max(1);
    let best = |splits: &[usize]| {
        let mut best = (f64::INFINITY, 128, 1);
        for &s in splits {
            for &bn in &widths {
                let c = cost(m, k, ktiles, sms, bn, s, residual);
                if c < best.0 {
                    best = (c, bn, s);
                }
            }
        }
        best
    };
    if let Some(n) = forced_splits.filter(|&n| n > 0) {
        if n.min(ktiles) == 1 {
            return (unsplit_bn, 1);
        }
        let (_, bn, s) = best(&[n.min(ktiles)]);
        return (bn, s);
    }
    let unsplit = cost(m, k, ktiles, sms, unsplit_bn, 1, residual);
    let candidates: Vec<usize> = (2..=MAX_SPLITS.min(ktiles)).collect();
    let (split, bn, s) = best(&candidates);
    if split < MARGIN * unsplit { (bn, s) } else { (unsplit_bn, 1) }
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct ReduceArgs {
    ws: u64,
    out: u64,
    bias: u64,
    m: i64,
    k: i32,
    splits: i32,
    epi: Epilogue,
}
// SAFETY: plain-old-data with the kernel's `ReduceArgs` layout (no implicit padding).
unsafe impl DeviceRepr for ReduceArgs {}

/// out[M, K] = epilogue(sum of the `splits` f32 planes of `ws` + bias) (see the module doc).
#[allow(clippy::too_many_arguments)]
pub fn reduce(
    stream: &Arc<CudaStream>,
    dtype: DType,
    ws: u64,
    out: u64,
    bias: u64,
    (m, k): (usize, usize),
    splits: usize,
    epi: &Epilogue,
    sms: usize,
) -> Result<()> {
    let args = ReduceArgs { ws, out, bias, m: m as i64, k: k as i32, splits: splits as i32, epi: *epi };
    let name = format!("conv_sm90_splitk_reduce_{}", if dtype == DType::BFloat16 { "bf16" } else { "f16" });
    let func = function(stream.context(), &CONV_SM90_AUX, &name)?;
    // Four outputs per thread, grid-stride beyond a few full waves.
    let groups = (m * k / 4).max(1) as u64;
    let blocks = groups.div_ceil(256).min(sms as u64 * 16).max(1) as u32;
    let cfg = LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
    let mut l = stream.launch_builder(&func);
    l.arg(&args);
    // SAFETY: ws holds splits planes of m * k f32 written by the conv kernel queued before this;
    // out, the bias and the epilogue's operands what the conv's caller passed.
    unsafe { l.launch(cfg) }.map_err(Error::driver("cuLaunchKernel(conv_sm90_splitk_reduce)"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn many_tiles_or_short_reductions_never_split() {
        // 784 row tiles (56x56 at batch 32)
        assert_eq!(choose((100352, 256, 1), 132, false, 256, None, None), (256, 1));
        assert_eq!(choose((100352, 64, 9), 132, true, 64, None, None), (64, 1));
        // few tiles, but a 1x1 with 512 channels: 8 k-steps
        assert_eq!(choose((1568, 2048, 8), 132, false, 256, None, None), (256, 1));
    }

    #[test]
    fn resnet50_batch32_never_splits() {
        // (M, K, k-steps): s5_3x3_512 (stride 1 and 2), then s5_1x1_2048_512, s4_3x3_256
        assert_eq!(choose((1568, 512, 72), 132, false, 64, None, None), (64, 1));
        assert_eq!(choose((1568, 512, 32), 132, false, 64, None, None), (64, 1));
        assert_eq!(choose((6272, 256, 36), 132, true, 128, None, None), (128, 1));
    }

    #[test]
    fn the_model_rewards_splitting_long_reductions_over_few_tiles() {
        // one row tile, 512 columns, 72 k-steps: 8 blocks busy unsplit
        let (bn, s) = choose((98, 512, 72), 132, false, 64, None, None);
        assert!(s > 1, "{bn} {s}");
        assert!(cost(98, 512, 72, 132, bn, s, false) < 0.5 * cost(98, 512, 72, 132, 64, 1, false));
        // a forced width is kept
        assert_eq!(choose((98, 512, 72), 132, false, 256, Some(256), None).0, 256);
        // forced counts, clamped to the k-steps; 1 keeps the unsplit width
        assert_eq!(choose((98, 512, 72), 132, false, 64, None, Some(1)), (64, 1));
        assert_eq!(choose((98, 512, 4), 132, false, 64, Some(128), Some(9)), (128, 4));
    }
}
