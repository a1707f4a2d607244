//! Launching the Hopper implicit-GEMM conv2d (kernels/conv_sm90.cu): the im2col tensor map of
//! the NHWC input, the tiled map of the RSCF filter (read as it is: the kernel's B operand is
//! N-major, so no filter transform is needed), the tile shape and the persistent grid.
//! [`unsuitable`] says why a problem cannot run here; [`conv2d`] runs one that can, or returns
//! [`Outcome::NotEligible`] without launching anything (the caller then takes the im2col + GEMM
//! path of launch/conv.rs).
//!
//! Input channel counts that are not a multiple of 8 run on padded copies of the input and the
//! filter ([`pad`]).
//!
//! Problems with few output tiles and long reductions split them ([`split`]: split-K with f32
//! partials and a reduce kernel that applies the epilogue). A fused residual is prefetched into
//! L2 while the tile's mainloop runs.
//!
//! The tile shape (column width, 128, 192 or 256 rows, ping-pong) comes from the cost models of
//! `tiles.rs`, put together by [`select`] (pure: table-tested without a GPU); every choice can be
//! forced through the `conv.*` tuning knobs ([`Knobs`]).
//!
//! Clusters of two CTAs run only the 192-row tiles, where both CTAs take the column tiles of one
//! row tile and share its activations ([`cluster_pays`] says where). Pairs on adjacent row tiles
//! of 128 rows sharing the filter tile instead measured slower than single CTAs on every
//! ResNet-50 layer at batch 32 on an H100 (28x28 512 -> 256: 19.9 against 19.0 us, 14x14
//! 1024 -> 512: 16.0 against 14.4, 256-wide tiles no better).

use std::sync::Arc;

use cudarc::driver::{CudaStream, DeviceRepr};
use max_graph::DType;

use super::conv::Scratch;
use super::epilogue::Epilogue;
use super::pdl::Pdl;
use super::{l2_bytes, sm_count};
use crate::sources::{CONV_SM90_BF16, CONV_SM90_F16, CONV_SM90_PP_BF16, CONV_SM90_PP_F16};
use crate::{Result, arch_name, function};

/// Rows (output pixels) per tile and channels per k-step, as in the kernel.
const BM: usize = 128;
const BK: usize = 64;
const I32: usize = i32::MAX as usize;
/// The largest split-K workspace (bytes); larger problems run unsplit.
const MAX_WORKSPACE: usize = 1 << 30;

mod cluster;
mod knobs;
mod maps;
pub mod pad;
pub mod select;
mod shape;
pub mod split;
mod tiles;

use super::record;
use super::tma::TmaMap;
use cluster::max_clusters;
pub use knobs::Knobs;
use maps::{filter_map, im2col_map, matrix_map, output_map, residual_map};
pub use select::{ConvConfig, DeviceFacts, Problem, Selection, select};
pub use shape::{Conv2dShape, unsuitable};
pub use tiles::{pingpong, ring_fits, short_rows, tile_rows, tile_width, trio_tiles, wide_tiles};

/// What [`conv2d`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Ran,
    /// Nothing was launched; the reason.
    NotEligible(String),
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct ConvArgs {
    out: u64,
    m: i64,
    k: i32,
    pq: i32,
    q: i32,
    sh: i32,
    sw: i32,
    ph: i32,
    pw: i32,
    dh: i32,
    dw: i32,
    s: i32,
    taps: i32,
    c_tiles: i32,
    n_tiles: i32,
    tiles: i32,
    bias: u64,
    epi: Epilogue,
    ws: u64,
    splits: i32,
    prefetch: i32,
    staged: i32,
    tiled_a: i32,
}
// SAFETY: plain-old-data with the kernel's `ConvArgs` layout (no implicit padding).
unsafe impl DeviceRepr for ConvArgs {}

/// Shared memory past the barriers for the staged stores, per consumer warp: 16 rows x 40 f32
/// (the kernel's CV_SW), which the 16-byte result stores pass through.
const STAGE_WARP_BYTES: u32 = 16 * 40 * 4;

/// The launch's dynamic shared memory: the ring and, where the results are staged, a staging
/// buffer per consumer warp.
fn smem_of(bm: usize, bn: usize, staged: i32, consumers: u32) -> u32 {
    smem_bytes(bm, bn) + if staged > 0 { 4 * consumers * STAGE_WARP_BYTES } else { 0 }
}

/// The most dynamic shared memory a block may have on sm_90 (227 KB).
const SMEM_MAX: u32 = 227 * 1024;

/// The launch's dynamic shared memory with the residual in a buffer of its own (the lean
/// epilogue storing by TMA, no staging buffer): the ring, 1024 bytes for the barriers, then
/// the tile's residual in 64 x 64 boxes of 8 KB.
fn res_buf_smem(bm: usize, bn: usize) -> u32 {
    smem_bytes(bm, bn) + 1024 + ((bm / 64) * bn.div_ceil(64) * 64 * 64 * 2) as u32
}

/// Dynamic shared memory of the kernel for a tile of `bm` rows (128, 192 or 256) and `bn`
/// columns: the ring (the kernel's `Ring`), its barriers, alignment slack.
fn smem_bytes(bm: usize, bn: usize) -> u32 {
    let stages = match (bm, bn) {
        (256 | 192, 128) => 4,
        (256 | 192, _) => 5,
        (_, 256) => 4,
        (_, 128) => 6,
        _ => 8,
    };
    (stages * (bm + bn) * BK * 2 + stages * 16 + 1024) as u32
}

/// out = beta * residual + clamp(act(conv2d(x, f) + bias + epi.bias)) (every part but the
/// convolution optional: `epi` as prelude.cuh's `Epilogue`), on the Hopper kernel. `x`, `f`,
/// `bias` and `out` are device addresses of the NHWC input, the RSCF filter, the conv's own
/// bias (K values; 0 for none) and the NHWC output; the epilogue's bias has K values and its
/// residual the output's shape.
/// Returns [`Outcome::NotEligible`] (launching nothing) when [`unsuitable`] says so, off
/// sm_90a, or when the driver rejects a tensor map; errors only on launch failures. Input
/// channel counts that are not a multiple of 8 run on padded copies ([`pad`]). The tuning
/// knobs come from the tuning registry ([`Knobs::from_tuning`]).
pub fn conv2d(
    stream: &Arc<CudaStream>,
    dtype: DType,
    ptrs: (u64, u64, u64, u64),
    sh: &Conv2dShape,
    epi: &Epilogue,
) -> Result<Outcome> {
    conv2d_with(stream, dtype, ptrs, sh, epi, &Knobs::from_tuning(&max_tuning::current()))
}

/// [`conv2d`] with the given tuning knobs.
pub fn conv2d_with(
    stream: &Arc<CudaStream>,
    dtype: DType,
    ptrs: (u64, u64, u64, u64),
    sh: &Conv2dShape,
    epi: &Epilogue,
    knobs: &Knobs,
) -> Result<Outcome> {
    if !sh.c.is_multiple_of(8) {
        return pad::conv2d(stream, dtype, ptrs, sh, epi, knobs);
    }
    run(stream, dtype, ptrs, sh, epi, knobs)
}

/// [`conv2d`] on the kernel itself (C % 8 == 0): [`select`] chooses, this builds the tensor maps
/// the config names and launches (selecting again without a feature whose map the driver
/// refuses).
fn run(
    stream: &Arc<CudaStream>,
    dtype: DType,
    (x, f, bias, out): (u64, u64, u64, u64),
    sh: &Conv2dShape,
    epi: &Epilogue,
    knobs: &Knobs,
) -> Result<Outcome> {
    if let Some(why) = unsuitable(dtype, sh, (x, f, bias, out), epi) {
        return Ok(Outcome::NotEligible(why));
    }
    let arch = arch_name(stream.context())?;
    if arch != "sm_90a" {
        return Ok(Outcome::NotEligible(format!("the kernel needs sm_90a, the device is {arch}")));
    }
    let clusters = |smem: u32, trio: bool| max_clusters(stream, dtype, smem, trio);
    let dev = DeviceFacts { sms: sm_count(stream)?, l2_bytes: l2_bytes(stream)?, clusters: &clusters };
    let problem = Problem { dtype, sh, ptrs: (x, f, bias, out), epi };
    let (m, mut knobs) = (sh.m(), *knobs);
    let (cfg, map_r, map_o) = loop {
        let cfg = match select(&problem, &dev, &knobs)? {
            Selection::Run(cfg) => cfg,
            Selection::NotEligible(why) => return Ok(Outcome::NotEligible(why)),
        };
        let map_r = if cfg.res_ring || cfg.prefetch_l2 {
            let rows = if cfg.res_ring { 64 } else { BM as u32 };
            match residual_map(dtype, epi.residual, m, sh.k, rows) {
                Ok(map) => Some(map),
                Err(_) if cfg.res_ring => {
                    knobs.no_res_ring = true;
                    continue;
                }
                Err(_) => {
                    knobs.no_prefetch = true;
                    continue;
                }
            }
        } else {
            None
        };
        let map_o = if cfg.tma_out {
            match output_map(dtype, out, m, sh.k) {
                Ok(map) => Some(map),
                Err(_) => {
                    knobs.no_tma_out = true;
                    continue;
                }
            }
        } else {
            None
        };
        break (cfg, map_r, map_o);
    };
    let a_map =
        if cfg.tiled_a { matrix_map(dtype, x, m, sh.c, cfg.a_rows()) } else { im2col_map(dtype, x, sh, cfg.a_rows()) };
    let maps = a_map.and_then(|a| Ok((a, filter_map(dtype, f, sh)?)));
    let (map_a, map_b) = match maps {
        Ok(m) => m,
        Err(why) => return Ok(Outcome::NotEligible(why)),
    };
    let splits = cfg.splits;
    let ws = if splits > 1 { Some(Scratch::new(stream, splits * m * sh.k * 4)?) } else { None };
    let args = ConvArgs {
        out,
        m: m as i64,
        k: sh.k as i32,
        pq: (sh.p * sh.q) as i32,
        q: sh.q as i32,
        sh: sh.stride[0] as i32,
        sw: sh.stride[1] as i32,
        ph: sh.pad[0] as i32,
        pw: sh.pad[1] as i32,
        dh: sh.dil[0] as i32,
        dw: sh.dil[1] as i32,
        s: sh.s as i32,
        taps: (sh.r * sh.s) as i32,
        c_tiles: sh.c.div_ceil(BK) as i32,
        n_tiles: sh.k.div_ceil(cfg.bn) as i32,
        tiles: cfg.tiles as i32,
        bias,
        epi: *epi,
        ws: ws.as_ref().map_or(0, |w| w.ptr()),
        splits: splits as i32,
        prefetch: cfg.flags(),
        staged: cfg.staged,
        tiled_a: cfg.tiled_a as i32,
    };
    let map_r = map_r.unwrap_or(TmaMap([0; 16]));
    let map_o = map_o.unwrap_or(TmaMap([0; 16]));
    let family = match (dtype == DType::BFloat16, cfg.pingpong || cfg.bm != BM) {
        (true, false) => &CONV_SM90_BF16,
        (false, false) => &CONV_SM90_F16,
        (true, true) => &CONV_SM90_PP_BF16,
        (false, true) => &CONV_SM90_PP_F16,
    };
    let func = function(stream.context(), family, &cfg.kernel)?;
    crate::allow_smem(stream.context(), &func, cfg.smem)?;
    let (mut map_a, mut map_b, mut map_r, mut map_o, mut args) = (map_a, map_b, map_r, map_o, args);
    let mut params: [*mut std::ffi::c_void; 5] = [
        &mut map_a as *mut TmaMap as *mut _,
        &mut map_b as *mut TmaMap as *mut _,
        &mut map_r as *mut TmaMap as *mut _,
        &mut map_o as *mut TmaMap as *mut _,
        &mut args as *mut ConvArgs as *mut _,
    ];
    // SAFETY: the parameters are the kernel's (four maps, ConvArgs) by value, live across the
    // call; the maps describe the live input, filter, residual and output (map_r is read only
    // when bit 0 or 3 of args.prefetch is set, map_o only with bit 5); out, the bias and the
    // epilogue's bias and residual hold what the shape says (the caller's contract); ws holds
    // splits planes of M x K f32; under PDL the kernel waits (bit 2 of args.prefetch) before
    // touching global memory.
    // The kernel waits only when cfg.pdl set bit 2 of args.prefetch.
    let pdl = if cfg.pdl { Pdl::of(family, &cfg.kernel, Some(max_tuning::Knob::ConvPdl)) } else { Pdl::OFF };
    unsafe {
        super::launch_ex_cluster(
            stream,
            &func,
            (cfg.grid as u32, 128 * (1 + cfg.consumers), cfg.smem),
            &mut params,
            pdl,
            if cfg.cluster { 2 } else { 1 },
            "cuLaunchKernelEx(conv_sm90)",
        )
    }?;
    record::record("conv_sm90", || (cfg.kernel.clone(), cfg.fields()));
    if let Some(ws) = &ws {
        split::reduce(stream, dtype, ws.ptr(), out, bias, (m, sh.k), splits, epi, dev.sms)?;
    }
    // ws is freed on the stream after the reduce (Drop, stream-ordered).
    Ok(Outcome::Ran)
}

/// Whether the shape is a plain GEMM: a 1x1 window, stride 1, no padding (x is then the matrix
/// [M, C] and may be read through a tiled map).
fn gemm_like(sh: &Conv2dShape) -> bool {
    (sh.r, sh.s, sh.p, sh.q) == (1, 1, sh.h, sh.w) && sh.stride == [1, 1] && sh.pad == [0, 0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn residual_buffer_fits_all_but_256_wide_tiles() {
        assert_eq!(res_buf_smem(192, 128), 4 * 320 * 128 + 64 + 1024 + 1024 + 6 * 8192);
        assert!(res_buf_smem(192, 128) <= SMEM_MAX);
        assert!(res_buf_smem(128, 128) <= SMEM_MAX);
        assert!(res_buf_smem(128, 64) <= SMEM_MAX);
        assert!(res_buf_smem(128, 256) > SMEM_MAX);
    }

    #[test]
    fn args_have_the_kernels_layout() {
        assert_eq!(std::mem::offset_of!(ConvArgs, bias), 72);
        assert_eq!(std::mem::offset_of!(ConvArgs, epi), 80);
        assert_eq!(std::mem::offset_of!(ConvArgs, ws), 80 + std::mem::size_of::<Epilogue>());
        assert_eq!(std::mem::size_of::<ConvArgs>(), 104 + std::mem::size_of::<Epilogue>());
        assert_eq!(std::mem::size_of::<TmaMap>(), 128);
    }
}
