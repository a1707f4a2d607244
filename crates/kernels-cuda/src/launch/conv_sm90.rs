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
//! `tiles.rs`; every choice can be forced through the environment ([`Knobs`], read per call).
//!
//! Clusters of two CTAs run only the 192-row tiles, where both CTAs take the column tiles of one
//! row tile and share its activations ([`cluster_pays`] says where). Pairs on adjacent row tiles
//! of 128 rows sharing the filter tile instead measured slower than single CTAs on every
//! ResNet-50 layer at batch 32 on an H100 (28x28 512 -> 256: 19.9 against 19.0 us, 14x14
//! 1024 -> 512: 16.0 against 14.4, 256-wide tiles no better).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use cudarc::driver::{CudaStream, DeviceRepr};
use max_graph::DType;

use super::conv::Scratch;
use super::epilogue::Epilogue;
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
mod counts;
mod gemm;
mod knobs;
mod maps;
pub mod pad;
mod shape;
pub mod split;
mod tiles;

use super::tma::TmaMap;
use cluster::{cluster_pays, max_clusters};
use counts::{CLUSTER, LAUNCHES, LEAN, PACKED, PINGPONG, RES_BUF, RES_RING, SHORT, SPLIT, TMA_OUT, TRIO, VECTOR, WIDE};
pub use counts::{
    cluster_launches, gemm_launches, launches, lean_launches, packed_launches, padded_launches, pingpong_launches,
    res_buf_launches, res_ring_launches, short_launches, split_launches, tma_out_launches, trio_launches,
    vector_out_launches, wide_launches,
};
pub use knobs::Knobs;
use maps::{filter_map, im2col_map, matrix_map, output_map, residual_map};
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

/// Shared memory past the barriers for either staging, per consumer warp: the 8-byte staged
/// epilogue's buffer (16 rows x 40 f32, the kernel's CV_SW) or the 16-byte result stores' tile
/// (16 rows x 144 bytes, less).
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
/// knobs come from the environment ([`Knobs::from_env`]).
pub fn conv2d(
    stream: &Arc<CudaStream>,
    dtype: DType,
    ptrs: (u64, u64, u64, u64),
    sh: &Conv2dShape,
    epi: &Epilogue,
) -> Result<Outcome> {
    conv2d_with(stream, dtype, ptrs, sh, epi, &Knobs::from_env())
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
    if sh.c % 8 != 0 {
        return pad::conv2d(stream, dtype, ptrs, sh, epi, knobs);
    }
    run(stream, dtype, ptrs, sh, epi, knobs)
}

/// [`conv2d`] on the kernel itself (C % 8 == 0).
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
    if let Some(done) = gemm::try_run(stream, dtype, (x, f, bias, out), sh, epi)? {
        LAUNCHES.fetch_add(1, Ordering::Relaxed);
        return Ok(done);
    }
    let m = sh.m();
    let sms = sm_count(stream)?;
    let ktiles = sh.r * sh.s * sh.c.div_ceil(BK);
    let residual = epi.residual != 0;
    let forced_bn = knobs.bn.filter(|b| [64, 128, 256].contains(b));
    let default_bn = tile_width(m, sh.k, ktiles, residual, sms);
    // Tiles of 192 rows (128 wide only) where forced, or where they beat the default's tiles.
    let want_trio = knobs.rows == Some(192)
        || knobs.rows.is_none() && forced_bn.is_none() && knobs.splits.is_none_or(|s| s == 1) && {
            let rows = tile_rows(m, sh.k, ktiles, default_bn, residual, sms);
            trio_tiles(m, sh.k, ktiles, residual, sms, m.div_ceil(rows) * sh.k.div_ceil(default_bn))
        };
    let forced_bn = forced_bn.or(if want_trio { Some(128) } else { None });
    let unsplit_bn = forced_bn.unwrap_or(default_bn);
    let (bn, mut splits) = split::choose((m, sh.k, ktiles), sms, residual, unsplit_bn, forced_bn, knobs.splits);
    // One split per k-step at most (so that none is empty); a workspace within reason.
    splits = splits.clamp(1, ktiles.max(1));
    if splits > 1 && splits.saturating_mul(m).saturating_mul(sh.k).saturating_mul(4) > MAX_WORKSPACE {
        splits = 1;
    }
    // A 1x1 conv with stride 1 and no padding may read x as the matrix [M, C] (tiled map).
    let tiled_a = knobs.tiled_a && gemm::is_gemm(sh) && m <= I32;
    // Tiles of 256 rows (unsplit, tile widths up to 128) or of 192 (unsplit, 128 wide).
    let bm = if splits > 1 {
        BM
    } else {
        match knobs.rows {
            _ if want_trio && bn == 128 => 192,
            Some(256) if bn <= 128 => 256,
            Some(_) => BM,
            None => tile_rows(m, sh.k, ktiles, bn, residual, sms),
        }
    };
    let (wide, trio) = (bm == 256, bm == 192);
    // A launch with nothing to do after the mainloop but store takes the kernel compiled without
    // the epilogue options (`_plain`: compact code for the one cold pass of a short tile).
    // Unsplit launches store their results as 16-byte vectors staged through shared memory
    // (staged = 2) where the output is 16-byte aligned, adding a 16-byte aligned residual on the
    // way out as 16-byte vectors too (staged = 3), or run the 8-byte staged epilogue when asked
    // for (staged = 1; its accesses 8-byte aligned); split ones leave the epilogue to the reduce
    // kernel.
    let plain = bias == 0 && epi.is_identity() && splits == 1 && !knobs.staged;
    let staged = if splits > 1 {
        0
    } else if knobs.staged && (out | bias | epi.bias | epi.residual) % 8 == 0 {
        1
    } else if !knobs.no_vec && out % 16 == 0 {
        if epi.residual != 0 && epi.residual % 16 == 0 && !knobs.no_res_vec { 3 } else { 2 }
    } else {
        0
    };
    let n_tiles = sh.k.div_ceil(bn);
    let tiles = m.div_ceil(bm) * n_tiles;
    let units = tiles.saturating_mul(splits);
    if units > I32 {
        return Ok(Outcome::NotEligible("too many tiles".into()));
    }
    // The persistent grid for `units` work units: one block per SM, or MAX_CONV_SM90_GRID.
    let grid_for = |units: usize| knobs.grid.filter(|&g| g > 0).unwrap_or(sms).min(units);
    let grid = grid_for(units);
    let steps = ktiles.div_ceil(splits);
    let pp = bm == BM && bn <= 128 && knobs.pingpong.unwrap_or_else(|| pingpong(units, grid, bn, steps));
    // The residual tile loaded into the ring by TMA (staged = 3 only: the epilogue reads it as
    // 16-byte vectors) where the tile form allows it, unless MAX_CONV_SM90_RES_RING=0, if the
    // map is accepted. Otherwise it is read from global memory, with its L2 prefetch (unsplit:
    // otherwise the reduce kernel reads it) unless MAX_CONV_SM90_PREFETCH=0, for residuals not
    // 16-byte aligned, or if the map is refused. A residual larger than half of L2 is left out:
    // prefetching it only evicts what the block is about to read (the 51 MB residual of the
    // 56x56 64->256 ResNet block on an H200: 60.9 us with the prefetch, 51.0 without).
    let ring_map = if staged == 3 && m <= I32 && ring_fits(bm, bn, pp) && !knobs.no_res_ring {
        residual_map(dtype, epi.residual, m, sh.k, 64).ok()
    } else {
        None
    };
    let res_ring = ring_map.is_some();
    let fits_l2 = m.saturating_mul(sh.k).saturating_mul(2) <= l2_bytes(stream)? / 2;
    let map_r = if res_ring {
        None
    } else if splits == 1 && epi.residual != 0 && epi.residual % 16 == 0 && m <= I32 && !knobs.no_prefetch && fits_l2 {
        residual_map(dtype, epi.residual, m, sh.k, BM as u32).ok()
    } else {
        None
    };
    // An epilogue of the ResNet pattern (the biases, relu or no activation, the residual in the
    // ring or absent; unsplit, stored as 16-byte vectors) takes the entry compiled for it alone
    // where the tile form has one (cooperative and 192-row tiles), unless MAX_CONV_SM90_LEAN=0.
    let lean = !plain
        && !knobs.no_lean
        && splits == 1
        && matches!(staged, 2 | 3)
        && epi.relu_at_most()
        && (epi.residual == 0 || res_ring)
        && !pp
        && !wide;
    // Clusters of two sharing A (unsplit, an even number of column tiles; 192-row tiles in the
    // plain or lean entry, or 128 x 64 ping-pong tiles in the plain one: the entry with every
    // epilogue option spilled with clusters) where the device holds nearly one cluster per SM
    // pair, and either MAX_CONV_SM90_CLUSTER=2 asks for them or, unset, the blocks have one and a
    // half tiles each or more (`cluster_pays`, 192-row tiles).
    let pp_pairs = pp && bn == 64 && bm == BM && plain;
    let want_cluster = splits == 1
        && n_tiles % 2 == 0
        && (trio && (plain || lean) && knobs.cluster.map_or_else(|| cluster_pays(tiles, sms), |c| c == 2)
            || pp_pairs && knobs.cluster == Some(2));
    // The lean epilogue with the residual in the ring writes its results over the residual's
    // slots and stores them from there (16-byte aligned output; as 16-byte vectors, or by TMA in
    // clusters or with MAX_CONV_SM90_STORE_TMA=1), unless MAX_CONV_SM90_TMA_OUT=0 or the output
    // map is refused. There, unless MAX_CONV_SM90_PACKED=0, it adds the residual on pairs of the
    // element type to relu's output rounded to it, where beta is exact in the element type.
    let map_o = if lean && res_ring && out % 16 == 0 && !knobs.no_tma_out {
        output_map(dtype, out, m, sh.k).ok()
    } else {
        None
    };
    // One producer warpgroup and two consumer ones, or three with tiles of 192 rows.
    let consumers: u32 = if trio { 3 } else { 2 };
    // With TMA stores the lean epilogue needs no staging buffer; its residual then takes a buffer
    // of its own (no ring slots taken from the next tile's k-steps) where shared memory has room
    // for it, unless MAX_CONV_SM90_RES_BUF=0.
    let buf_smem = res_buf_smem(bm, bn);
    let res_buf = map_o.is_some() && !knobs.no_res_buf && buf_smem <= SMEM_MAX;
    let smem = if res_buf { buf_smem } else { smem_of(bm, bn, staged, consumers) };
    let clusters = if want_cluster { max_clusters(stream, dtype, smem, trio)? } else { 0 };
    let cluster = want_cluster && clusters > 0;
    let grid = if cluster {
        let pairs = tiles / 2;
        (2 * clusters.min(pairs)).min(knobs.grid.map_or(usize::MAX, |g| (g / 2 * 2).max(2)))
    } else {
        grid
    };
    // Plain 128 x 64 ping-pong tiles (unclustered) of fewer rows, so that more blocks share the
    // work, where forced or where every block has one unit and `short_rows` finds a height.
    let tm = match knobs.tm {
        _ if !(pp && bn == 64 && bm == BM && plain && !cluster) => None,
        Some(t) => (t < BM).then_some(t),
        None if units <= grid => short_rows(m, n_tiles, sms),
        None => None,
    };
    let (tiles, grid) = match tm {
        Some(t) => (m.div_ceil(t) * n_tiles, grid_for(m.div_ceil(t) * n_tiles)),
        None => (tiles, grid),
    };
    // Each CTA of a cluster loads half of the A tile; a short tile loads its rows.
    let a_rows = if cluster { bm / 2 } else { tm.unwrap_or(bm) };
    let a_map = if tiled_a { matrix_map(dtype, x, m, sh.c, a_rows) } else { im2col_map(dtype, x, sh, a_rows) };
    let maps = a_map.and_then(|a| Ok((a, filter_map(dtype, f, sh)?)));
    let (map_a, map_b) = match maps {
        Ok(m) => m,
        Err(why) => return Ok(Outcome::NotEligible(why)),
    };
    let ws = if splits > 1 { Some(Scratch::new(stream, splits * m * sh.k * 4)?) } else { None };
    // The in-place end's packed arithmetic (relu, beta exact in the element type).
    let packed = map_o.is_some() && !knobs.no_packed && epi.is_relu() && epi.beta_exact_in(dtype);
    // Its stores: 16-byte vectors from the threads, or TMA (clusters, MAX_CONV_SM90_STORE_TMA=1).
    let vector = map_o.is_some() && !knobs.store_tma && !cluster;
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
        n_tiles: n_tiles as i32,
        tiles: tiles as i32,
        bias,
        epi: *epi,
        ws: ws.as_ref().map_or(0, |w| w.ptr()),
        splits: splits as i32,
        prefetch: map_r.is_some() as i32
            | (((splits == 1 && epi.residual != 0 && !res_ring && !knobs.no_line_prefetch) as i32) << 1)
            | ((knobs.pdl as i32) << 2)
            | ((res_ring as i32) << 3)
            | ((res_buf as i32) << 4)
            | ((map_o.is_some() as i32) << 5)
            | (((lean && bn <= 128 && !knobs.late_bias) as i32) << 6)
            | ((vector as i32) << 7)
            | ((tm.unwrap_or(0) as i32) << 8)
            | ((packed as i32) << 16),
        staged,
        tiled_a: tiled_a as i32,
    };
    let tma_out = map_o.is_some();
    let map_r = map_r.or(ring_map).unwrap_or(TmaMap([0; 16]));
    let map_o = map_o.unwrap_or(TmaMap([0; 16]));
    let name = format!(
        "conv_sm90_{}_n{bn}{}{}{}",
        if dtype == DType::BFloat16 { "bf16" } else { "f16" },
        if pp {
            "_pp"
        } else if wide {
            "_w"
        } else if trio {
            "_t"
        } else {
            ""
        },
        if plain {
            "_plain"
        } else if lean {
            "_lean"
        } else {
            ""
        },
        if cluster { "_c2" } else { "" }
    );
    let family = match (dtype == DType::BFloat16, pp || bm != BM) {
        (true, false) => &CONV_SM90_BF16,
        (false, false) => &CONV_SM90_F16,
        (true, true) => &CONV_SM90_PP_BF16,
        (false, true) => &CONV_SM90_PP_F16,
    };
    let func = function(stream.context(), family, &name)?;
    crate::allow_smem(stream.context(), &func, smem)?;
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
    // epilogue's bias and residual hold what the shape says (the caller's contract); ws holds splits planes of M x K f32; under PDL the
    // kernel waits (bit 2 of args.prefetch) before touching global memory.
    unsafe {
        super::launch_ex_cluster(
            stream,
            &func,
            (grid as u32, 128 * (1 + consumers), smem),
            &mut params,
            knobs.pdl,
            if cluster { 2 } else { 1 },
            "cuLaunchKernelEx(conv_sm90)",
        )
    }?;
    LAUNCHES.fetch_add(1, Ordering::Relaxed);
    if pp {
        PINGPONG.fetch_add(1, Ordering::Relaxed);
    }
    if wide {
        WIDE.fetch_add(1, Ordering::Relaxed);
    }
    if trio {
        TRIO.fetch_add(1, Ordering::Relaxed);
    }
    if tm.is_some() {
        SHORT.fetch_add(1, Ordering::Relaxed);
    }
    if lean {
        LEAN.fetch_add(1, Ordering::Relaxed);
    }
    if cluster {
        CLUSTER.fetch_add(1, Ordering::Relaxed);
    }
    if res_ring {
        RES_RING.fetch_add(1, Ordering::Relaxed);
    }
    if tma_out {
        TMA_OUT.fetch_add(1, Ordering::Relaxed);
    }
    if packed {
        PACKED.fetch_add(1, Ordering::Relaxed);
    }
    if vector {
        VECTOR.fetch_add(1, Ordering::Relaxed);
    }
    if res_buf {
        RES_BUF.fetch_add(1, Ordering::Relaxed);
    }
    if let Some(ws) = &ws {
        split::reduce(stream, dtype, ws.ptr(), out, bias, (m, sh.k), splits, epi, sms)?;
        SPLIT.fetch_add(1, Ordering::Relaxed);
    }
    // ws is freed on the stream after the reduce (Drop, stream-ordered).
    Ok(Outcome::Ran)
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
