//! The Hopper conv2d's kernel choice as data: [`select`] maps a problem, the device's facts and
//! the tuning knobs to a [`ConvConfig`] (tile shape, splits, grid, epilogue form, which TMA maps
//! and prefetches, shared memory, the kernel entry), touching no GPU, so the heuristics are
//! table-tested here. The launcher builds what the config names; where the driver refuses a
//! tensor map the config asked for, it selects again with that feature turned off.

use max_graph::DType;

use super::cluster::cluster_pays;
use super::tiles::{pingpong, ring_fits, short_rows, tile_rows, tile_width, trio_tiles};
use super::{BK, BM, Conv2dShape, I32, Knobs, MAX_WORKSPACE, SMEM_MAX, gemm_like, res_buf_smem, smem_of, split};
use crate::Result;
use crate::launch::epilogue::Epilogue;

/// One conv2d as the launcher sees it: the element type, the shape, the device addresses of the
/// input, filter, the conv's own bias (0: none) and output, and the fused epilogue.
#[derive(Clone, Copy, Debug)]
pub struct Problem<'a> {
    pub dtype: DType,
    pub sh: &'a Conv2dShape,
    pub ptrs: (u64, u64, u64, u64),
    pub epi: &'a Epilogue,
}

/// What selection needs of the device: its SMs, its L2 size, and how many 2-CTA clusters of a
/// kernel entry (shared memory bytes, 192-row tiles or not) fit at once.
pub struct DeviceFacts<'a> {
    pub sms: usize,
    pub l2_bytes: usize,
    pub clusters: &'a dyn Fn(u32, bool) -> Result<usize>,
}

/// How one conv2d runs on the Hopper kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConvConfig {
    /// The kernel entry (`conv_sm90_bf16_n128_t_lean_c2`, ...).
    pub kernel: String,
    /// Rows (128, 192 or 256) and columns per tile.
    pub bm: usize,
    pub bn: usize,
    /// Rows per plain ping-pong tile where fewer than 128.
    pub tm: Option<usize>,
    pub splits: usize,
    pub tiles: usize,
    pub grid: usize,
    /// Consumer warpgroups: 2, or 3 with 192-row tiles.
    pub consumers: u32,
    pub pingpong: bool,
    /// The entry compiled without epilogue options (`_plain`) or for the lean epilogue (`_lean`).
    pub plain: bool,
    pub lean: bool,
    /// Clusters of two CTAs sharing the A tile.
    pub cluster: bool,
    /// The stores: 0 from the fragments (or split-K partials), 2 as 16-byte vectors staged
    /// through shared memory, 3 the same adding a 16-byte aligned residual on the way out.
    pub staged: i32,
    /// x read through a tiled [M, C] map (1x1 convs) rather than the im2col one.
    pub tiled_a: bool,
    /// The residual loaded into the ring by TMA; prefetched into L2; each warp's rows prefetched.
    pub res_ring: bool,
    pub prefetch_l2: bool,
    pub line_prefetch: bool,
    /// The lean epilogue's results written over the residual's slots and stored from there; its
    /// residual in a buffer of its own; added on pairs of the element type; stored as vectors
    /// (else by TMA); its biases loaded when a warp starts a tile.
    pub tma_out: bool,
    pub res_buf: bool,
    pub packed: bool,
    pub vector: bool,
    pub early_bias: bool,
    pub pdl: bool,
    /// Dynamic shared memory per block.
    pub smem: u32,
}

impl ConvConfig {
    /// Rows of A each CTA loads per k-step (the TMA box height of the A map).
    pub fn a_rows(&self) -> usize {
        if self.cluster { self.bm / 2 } else { self.tm.unwrap_or(self.bm) }
    }

    /// The kernel's flag word (`ConvArgs::prefetch` in kernels/conv_sm90.cuh).
    pub fn flags(&self) -> i32 {
        self.prefetch_l2 as i32
            | ((self.line_prefetch as i32) << 1)
            | ((self.pdl as i32) << 2)
            | ((self.res_ring as i32) << 3)
            | ((self.res_buf as i32) << 4)
            | ((self.tma_out as i32) << 5)
            | ((self.early_bias as i32) << 6)
            | ((self.vector as i32) << 7)
            | ((self.tm.unwrap_or(0) as i32) << 8)
            | ((self.packed as i32) << 16)
    }

    /// The fields as (name, value) pairs, for the launch record.
    pub fn fields(&self) -> Vec<(&'static str, i64)> {
        vec![
            ("bm", self.bm as i64),
            ("bn", self.bn as i64),
            ("tm", self.tm.unwrap_or(0) as i64),
            ("splits", self.splits as i64),
            ("tiles", self.tiles as i64),
            ("grid", self.grid as i64),
            ("consumers", self.consumers as i64),
            ("pingpong", self.pingpong as i64),
            ("plain", self.plain as i64),
            ("lean", self.lean as i64),
            ("cluster", self.cluster as i64),
            ("staged", self.staged as i64),
            ("tiled_a", self.tiled_a as i64),
            ("res_ring", self.res_ring as i64),
            ("prefetch_l2", self.prefetch_l2 as i64),
            ("line_prefetch", self.line_prefetch as i64),
            ("tma_out", self.tma_out as i64),
            ("res_buf", self.res_buf as i64),
            ("packed", self.packed as i64),
            ("vector", self.vector as i64),
            ("early_bias", self.early_bias as i64),
            ("pdl", self.pdl as i64),
            ("smem", self.smem as i64),
        ]
    }
}

/// What [`select`] decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Selection {
    Run(ConvConfig),
    /// The kernel cannot take the problem; the reason.
    NotEligible(String),
}

/// The configuration for `p` (input channels a multiple of 8; [`super::unsuitable`] passed).
/// Every TMA map the config names is assumed to be accepted.
pub fn select(p: &Problem, dev: &DeviceFacts, knobs: &Knobs) -> Result<Selection> {
    let (sh, epi) = (p.sh, p.epi);
    let (_, _, bias, out) = p.ptrs;
    let (m, sms) = (sh.m(), dev.sms);
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
    let tiled_a = knobs.tiled_a && gemm_like(sh) && m <= I32;
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
    // way out as 16-byte vectors too (staged = 3); split ones leave the epilogue to the reduce
    // kernel.
    let plain = bias == 0 && epi.is_identity() && splits == 1;
    let staged = if splits > 1 {
        0
    } else if !knobs.no_vec && out % 16 == 0 {
        if epi.residual != 0 && epi.residual % 16 == 0 && !knobs.no_res_vec { 3 } else { 2 }
    } else {
        0
    };
    let n_tiles = sh.k.div_ceil(bn);
    let tiles = m.div_ceil(bm) * n_tiles;
    let units = tiles.saturating_mul(splits);
    if units > I32 {
        return Ok(Selection::NotEligible("too many tiles".into()));
    }
    // The persistent grid for `units` work units: one block per SM, or conv.grid.
    let grid_for = |units: usize| knobs.grid.filter(|&g| g > 0).unwrap_or(sms).min(units);
    let grid = grid_for(units);
    let steps = ktiles.div_ceil(splits);
    let pp = bm == BM && bn <= 128 && knobs.pingpong.unwrap_or_else(|| pingpong(units, grid, bn, steps));
    // The residual tile loaded into the ring by TMA (staged = 3 only: the epilogue reads it as
    // 16-byte vectors) where the tile form allows it, unless conv.res_ring=0. Otherwise it is
    // read from global memory, with its L2 prefetch (unsplit: otherwise the reduce kernel reads
    // it) unless conv.prefetch=0, for residuals 16-byte aligned. A residual larger than half of
    // L2 is left out: prefetching it only evicts what the block is about to read (the 51 MB
    // residual of the 56x56 64->256 ResNet block on an H200: 60.9 us with the prefetch, 51.0
    // without).
    let res_ring = staged == 3 && m <= I32 && ring_fits(bm, bn, pp) && !knobs.no_res_ring;
    let fits_l2 = m.saturating_mul(sh.k).saturating_mul(2) <= dev.l2_bytes / 2;
    let prefetch_l2 = !res_ring
        && splits == 1
        && epi.residual != 0
        && epi.residual % 16 == 0
        && m <= I32
        && !knobs.no_prefetch
        && fits_l2;
    // An epilogue of the ResNet pattern (the biases, relu or no activation, the residual in the
    // ring or absent; unsplit, stored as 16-byte vectors) takes the entry compiled for it alone
    // where the tile form has one (cooperative and 192-row tiles), unless conv.lean=0.
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
    // pair, and either conv.cluster=2 asks for them or, unset, the blocks have one and a half
    // tiles each or more (`cluster_pays`, 192-row tiles).
    let pp_pairs = pp && bn == 64 && bm == BM && plain;
    let want_cluster = splits == 1
        && n_tiles % 2 == 0
        && (trio && (plain || lean) && knobs.cluster.map_or_else(|| cluster_pays(tiles, sms), |c| c == 2)
            || pp_pairs && knobs.cluster == Some(2));
    // The lean epilogue with the residual in the ring writes its results over the residual's
    // slots and stores them from there (16-byte aligned output), unless conv.tma_out=0.
    let tma_out = lean && res_ring && out % 16 == 0 && !knobs.no_tma_out;
    // One producer warpgroup and two consumer ones, or three with tiles of 192 rows.
    let consumers: u32 = if trio { 3 } else { 2 };
    // With TMA stores the lean epilogue needs no staging buffer; its residual then takes a buffer
    // of its own (no ring slots taken from the next tile's k-steps) where shared memory has room
    // for it, unless conv.res_buf=0.
    let buf_smem = res_buf_smem(bm, bn);
    let res_buf = tma_out && !knobs.no_res_buf && buf_smem <= SMEM_MAX;
    let smem = if res_buf { buf_smem } else { smem_of(bm, bn, staged, consumers) };
    let clusters = if want_cluster { (dev.clusters)(smem, trio)? } else { 0 };
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
    // The in-place end's packed arithmetic (relu, beta exact in the element type) and its stores:
    // 16-byte vectors from the threads, or TMA (clusters, conv.store_tma=1).
    let packed = tma_out && !knobs.no_packed && epi.is_relu() && epi.beta_exact_in(p.dtype);
    let vector = tma_out && !knobs.store_tma && !cluster;
    let kernel = format!(
        "conv_sm90_{}_n{bn}{}{}{}",
        if p.dtype == DType::BFloat16 { "bf16" } else { "f16" },
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
    Ok(Selection::Run(ConvConfig {
        kernel,
        bm,
        bn,
        tm,
        splits,
        tiles,
        grid,
        consumers,
        pingpong: pp,
        plain,
        lean,
        cluster,
        staged,
        tiled_a,
        res_ring,
        prefetch_l2,
        line_prefetch: splits == 1 && epi.residual != 0 && !res_ring && !knobs.no_line_prefetch,
        tma_out,
        res_buf,
        packed,
        vector,
        early_bias: lean && bn <= 128 && !knobs.late_bias,
        pdl: knobs.pdl,
        smem,
    }))
}

#[cfg(test)]
#[path = "select_tests.rs"]
mod tests;
