//! The persistent Hopper GEMM's plan: row tile height, column tile width, cluster size, split-K
//! or stream-K, the raster, and the `gemm.*` tuning knobs that force them (see the parent
//! module).

use max_tuning::{Knob, Tuning};

use super::BK;

/// The forced choices (the `gemm.*` tuning knobs), each `None` when left to the heuristic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Knobs {
    pub bm: Option<usize>,
    pub bn: Option<usize>,
    /// CTAs per cluster along M (sharing B).
    pub cluster: Option<usize>,
    /// CTAs per cluster along N (sharing A).
    pub cluster_n: Option<usize>,
    pub splits: Option<usize>,
    pub persistent: Option<bool>,
    pub grid: Option<usize>,
    pub group_m: Option<usize>,
    pub tail: Option<bool>,
    /// The staged epilogue (`Some(true)`) or the direct one.
    pub staged: Option<bool>,
    /// Constant B loaded before the PDL wait (`gemm.early_weights`; on when unset).
    pub early_b: Option<bool>,
}

impl Knobs {
    pub fn from_tuning(t: &Tuning) -> Knobs {
        Knobs {
            bm: t.int(Knob::GemmBm),
            bn: t.int(Knob::GemmBn),
            cluster: t.int(Knob::GemmCluster),
            cluster_n: t.int(Knob::GemmClusterN),
            splits: t.int(Knob::GemmSplitk),
            persistent: t.flag(Knob::GemmPersistent),
            grid: t.int(Knob::GemmGrid),
            group_m: t.int(Knob::GemmGroupM),
            tail: t.flag(Knob::GemmTail),
            staged: t.choice(Knob::GemmEpilogue).map(|s| s == "staged"),
            early_b: t.flag(Knob::GemmEarlyWeights),
        }
    }
}

/// How one product runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Rows of a tile: 128, or 64 (the consumer warpgroups split the columns).
    pub bm: usize,
    pub bn: usize,
    /// CTAs per cluster: cluster / cluster_n along M by cluster_n along N.
    pub cluster: usize,
    pub cluster_n: usize,
    pub splits: usize,
    pub k_per_split: usize,
    pub k_tiles: usize,
    pub m_tiles: usize,
    pub n_tiles: usize,
    /// Cluster row units per raster group.
    pub group: usize,
    /// Cluster tiles: batch * ceil(m_tiles / (cluster / cluster_n)) * ceil(n_tiles / cluster_n).
    pub cluster_tiles: usize,
    /// Leading units that take a whole cluster tile; each later cluster tile is `splits` units.
    pub dp_units: usize,
    /// dp_units + (cluster_tiles - dp_units) * splits.
    pub units: usize,
    pub persistent: bool,
    /// A last, partial wave may be split (stream-K on persistent grids).
    pub tail: bool,
    /// Stream-K: k-tiles per cluster range (0: none), the tiles after `dp_units` it covers,
    /// and the most ranges one tile meets (partials per tile in the workspace).
    pub sk_len: usize,
    pub sk_tiles: usize,
    pub sk_stride: usize,
}

/// Relative time of one k-tile of a 128 x `bn` tile, of the split-K partial round trip, and of
/// a unit's fixed cost (pipeline fill, epilogue): a rough model to pick the tile width and the
/// splits. With 4 row tiles or more a 128-column k-tile does half the work in 0.76 of the time:
/// on an H200 (bf16 W^T, 2048 rows, K 2048-14336, N 2048-28672, gpu_gemm.py with gemm.bn
/// forced) 128-column tiles ran 420-490 TFLOP/s where 256-column ones ran 550-750, a tail wave
/// included (0.55 picked 128 columns for 2048 x 4096 x 7168: 510 against 673 TFLOP/s). With
/// fewer, the product streams B and a narrower tile costs less (0.55: 128 x 4096 x 4096 ran 193
/// TFLOP/s on 128 columns split 4 ways, 154 on 256 split 8 ways).
fn unit_cost(bn: usize, m_tiles: usize, k_tiles: usize, splits: usize) -> f64 {
    let narrow = if m_tiles >= 4 { 0.76 } else { 0.55 };
    let (step, reduce) = if bn == 256 { (1.0, 3.0) } else { (narrow, 1.5) };
    let kps = k_tiles.div_ceil(splits);
    kps as f64 * step + if splits > 1 { reduce } else { 0.0 } + 2.0
}

/// Estimates for an H200, for the 64-row tile's cost ([`skinny_cost`]), in bytes, flops and
/// microseconds: the memory's rate (4.14 TB/s measured by a device copy), the TMA loads one SM
/// sustains (about 80 SMs' worth reach the memory's rate), an SM's dense 16-bit wgmma rate.
const HBM_BYTES_PER_US: f64 = 4.0e6;
const SM_BYTES_PER_US: f64 = 5.0e4;
const SM_FLOPS_PER_US: f64 = 6.0e6;
/// A wave's fixed cost (pipeline fill, epilogue) and split-K's (the workspace allocation; the
/// last part's wait for the others; a memset of the counters where the stream's ticket counters
/// cannot serve). (Measured while every split launch had that memset, which no longer precedes
/// most of them.)
const WAVE_US: f64 = 2.0;
const SPLIT_US: f64 = 3.0;

/// Estimated time of a 64-row-tile product of `ctas` tiles split `splits` ways on `sms` SMs,
/// `b_bytes` of B in all: these few-row products are bound by streaming B, either by the
/// memory's rate or, with few SMs busy, by what each SM loads per k-tile (A and B), unless a
/// k-tile's MMAs take longer; plus each wave's fixed cost and split-K's costs (its partials
/// written once and read once).
fn skinny_cost(bn: usize, k_tiles: usize, splits: usize, ctas: usize, sms: usize, b_bytes: f64) -> f64 {
    let units = ctas * splits;
    let waves = units.div_ceil(sms);
    let kps = k_tiles.div_ceil(splits);
    let stage_bytes = ((SKINNY_BM + bn) * BK * 2) as f64;
    let flops = (2 * SKINNY_BM * bn * BK) as f64;
    let per_k_tile = (stage_bytes / SM_BYTES_PER_US).max(flops / SM_FLOPS_PER_US);
    let stream = ((waves * kps) as f64 * per_k_tile).max(b_bytes / HBM_BYTES_PER_US);
    let split = if splits > 1 { SPLIT_US + (units * SKINNY_BM * bn * 4 * 2) as f64 / HBM_BYTES_PER_US } else { 0.0 };
    stream + waves as f64 * WAVE_US + split
}

/// Clusters of 2 only for reductions of at least this many k-tiles (see [`plan`]).
const CLUSTER_MIN_K_TILES: usize = 32;

/// The 64-row tile's height, and the rows per batch up to which it is the default: with 64
/// rows or fewer the second consumer warpgroup of a 128-row tile multiplies only zeros, and
/// the wasted MMAs make products that should stream B at the memory's rate compute-bound.
pub const SKINNY_BM: usize = 64;

/// The 64-row tile is the default only for K and N of at least one whole 64-element box each.
/// A two-GPU tensor-parallel run of a tiny model (12 rows; K = 32 for the row-parallel o-proj,
/// N = 16 for the k/v projections) once hung on the 64-row tile; a later run of the same test
/// with `gemm.bm=64` forced passed, and reading the kernel and these plans (one unsplit unit
/// per column tile, tests below) found no deadlock. Products narrower than a box in K or N (a
/// few microseconds either way) keep the 128-row tile; `gemm.bm=64` still forces the 64-row one.
pub const SKINNY_MIN_K: usize = BK;
pub const SKINNY_MIN_N: usize = BK;

/// Tile widths per height: 256 and 128 for 128-row tiles; 128 and 64 for 64-row ones (64 for
/// Bt [N, K] only: a warpgroup's 32 columns of an N-major box would start inside its
/// swizzled rows). A forced `gemm.bn` picks among them; one the height lacks is ignored.
fn widths(bm: usize, n_major: bool) -> &'static [usize] {
    match (bm, n_major) {
        (SKINNY_BM, false) => &[128, 64],
        (SKINNY_BM, true) => &[128],
        _ => &[256, 128],
    }
}

/// The plan for `z` batches of [rows, k] x [k, n] (B N-major when `n_major`, else Bt [n, k])
/// on `sms` SMs.
pub fn plan(rows: usize, n: usize, k: usize, z: usize, sms: usize, n_major: bool, knobs: Knobs) -> Option<Plan> {
    let sms = sms.max(1);
    let k_tiles = k.div_ceil(BK).max(1);
    // A forced 256-column tile implies 128 rows (the 64-row kernels are not built that wide).
    let bm = match knobs.bm {
        Some(b) => b,
        None if knobs.bn == Some(256) => 128,
        None => {
            if rows <= SKINNY_BM && k >= SKINNY_MIN_K && n >= SKINNY_MIN_N {
                SKINNY_BM
            } else {
                128
            }
        }
    };
    let bm = if bm == SKINNY_BM { SKINNY_BM } else { 128 };
    let m_tiles = rows.div_ceil(bm);
    let all = widths(bm, n_major);
    let forced: Vec<usize> = all.iter().copied().filter(|&b| knobs.bn.is_none_or(|f| f == b)).collect();
    let widths = if forced.is_empty() { all.to_vec() } else { forced };
    let b_bytes = (z * n * k * 2) as f64;
    // Clusters of 2 (B multicast) from 16 row tiles (M >= 2048) and 32 k-tiles (K >= 2048),
    // where they measured faster on an H200 (bf16, cluster 2 against 1: 8192^3 704 vs 670
    // TFLOP/s, 4096^3 666 vs 642, 2048 x 4096 x 4096 627 vs 618); with few row tiles a
    // cluster's second CTA idles (128 x 4096 x 4096: 145 vs 193), and short reductions ran
    // slower in pairs (us, cluster 2 against 1: 100352x64x256 36.4 vs 30.1, 25088x128x512
    // 16.1 vs 14.6, 6272x512x1024 23.5 vs 22.3).
    let cluster_for =
        |m_tiles: usize| knobs.cluster.unwrap_or(if m_tiles >= 16 && k_tiles >= CLUSTER_MIN_K_TILES { 2 } else { 1 });
    // Clusters along N (sharing A) only when forced, and from 2 column tiles.
    let cluster_n_for = |n_tiles: usize| knobs.cluster_n.unwrap_or(1).min(n_tiles.max(1));
    let mut best: Option<(f64, usize, usize)> = None;
    for bn in widths {
        let n_tiles = n.div_ceil(bn);
        let (cm, cn) = (cluster_for(m_tiles), cluster_n_for(n_tiles));
        let ctas_per_split = z * m_tiles.div_ceil(cm) * cm * n_tiles.div_ceil(cn) * cn;
        let choices: Vec<usize> = match knobs.splits {
            Some(s) => vec![s.min(k_tiles)],
            // Split only while the tiles leave SMs idle, each split keeping 4 k-tiles or more
            // and the units within two waves (bounding the partials' workspace).
            None if ctas_per_split < sms => {
                (1..=16).filter(|&s| s == 1 || (k_tiles / s >= 4 && ctas_per_split * s <= 2 * sms)).collect()
            }
            None => vec![1],
        };
        for s in choices {
            let waves = (ctas_per_split * s).div_ceil(sms);
            let cost = if bm == SKINNY_BM {
                skinny_cost(bn, k_tiles, s, ctas_per_split, sms, b_bytes)
            } else {
                waves as f64 * unit_cost(bn, m_tiles, k_tiles, s)
            };
            if best.is_none_or(|(c, _, _)| cost < c - 1e-9) {
                best = Some((cost, bn, s));
            }
        }
    }
    let (_, bn, splits) = best?;
    let n_tiles = n.div_ceil(bn);
    let (cm, cluster_n) = (cluster_for(m_tiles), cluster_n_for(n_tiles));
    let cluster = cm * cluster_n;
    let cluster_tiles = z.checked_mul(m_tiles.div_ceil(cm))?.checked_mul(n_tiles.div_ceil(cluster_n))?;
    // Every tile split (splits > 1: the tiles alone leave SMs idle), or none, or (by default)
    // only those of a last wave at most half full, so that it ends sooner: split s ways with
    // s * tail <= the clusters that run at once.
    // (Persistent grids spread such a wave over every cluster instead: [`Plan::with_clusters`].)
    let persistent = knobs.persistent.unwrap_or(true);
    let waves_of = (sms / cluster).max(1);
    let tail = cluster_tiles % waves_of;
    let (dp_units, splits) = if splits > 1 {
        (0, splits)
    } else if knobs.splits.is_none()
        && !persistent
        && knobs.tail.unwrap_or(true)
        && cluster_tiles > waves_of
        && tail > 0
        && tail * 2 <= waves_of
    {
        let s = (waves_of / tail).min(k_tiles / 4).min(8);
        if s >= 2 { (cluster_tiles - tail, s) } else { (cluster_tiles, 1) }
    } else {
        (cluster_tiles, 1)
    };
    let k_per_split = k_tiles.div_ceil(splits);
    // No empty split: the splits actually needed for that many k-tiles each.
    let splits = k_tiles.div_ceil(k_per_split);
    let dp_units = if splits == 1 { cluster_tiles } else { dp_units };
    let units = dp_units.checked_add((cluster_tiles - dp_units).checked_mul(splits)?)?;
    if units == 0 || units.checked_mul(cluster)? > i32::MAX as usize || cluster_tiles * cluster > i32::MAX as usize {
        return None;
    }
    // Row tiles per raster group: 16 (2048 rows) by default, so the ~132 tiles in flight cover
    // about 16 x 8 tiles of 128 x 256, a square of C, sharing A rows and B columns in L2.
    let group = (knobs.group_m.unwrap_or(16) / cm).max(1);
    Some(Plan {
        bm,
        bn,
        cluster,
        cluster_n,
        splits,
        k_per_split,
        k_tiles,
        m_tiles,
        n_tiles,
        group,
        cluster_tiles,
        dp_units,
        units,
        persistent,
        // (A forced split count turns it off unless gemm.tail=1 asks for it.)
        tail: knobs.tail.unwrap_or(knobs.splits.is_none()),
        sk_len: 0,
        sk_tiles: 0,
        sk_stride: 0,
    })
}

/// A stream-K range's fixed cost in k-tiles of a 128 x 256 tile: its partials' round trip
/// (about two 128 KB partial tiles written and three read per CTA; a k-tile of 8192^3 takes
/// about 0.8 us on an H200).
const SK_COST: usize = 8;

impl Plan {
    /// The plan for a persistent grid of `clusters` clusters: a last, partial wave of whole
    /// tiles becomes stream-K ranges over all of them (see the kernel), when each range's
    /// k-tiles plus [`SK_COST`] are fewer than a whole tile's. Ranges are at least an eighth
    /// of a tile (at most 9 partials to add per tile) and 2 k-tiles.
    pub fn with_clusters(mut self, clusters: usize) -> Plan {
        let c = clusters.max(1);
        let t = self.cluster_tiles % c;
        if !self.persistent || !self.tail || self.splits > 1 || self.cluster_tiles <= c || t == 0 {
            return self;
        }
        let kt = self.k_tiles;
        let len = (t * kt).div_ceil(c).max(kt.div_ceil(8)).max(2);
        if len + SK_COST >= kt {
            return self;
        }
        self.dp_units = self.cluster_tiles - t;
        self.units = self.dp_units;
        self.sk_len = len;
        self.sk_tiles = t;
        // A tile meets at most ceil(kt / len) + 1 ranges.
        self.sk_stride = kt.div_ceil(len) + 1;
        self
    }

    /// CTA tiles whose pieces meet in the workspace (each with a counter), and partials per tile.
    pub fn split_tiles(&self) -> (usize, usize) {
        if self.sk_len > 0 {
            (self.sk_tiles * self.cluster, self.sk_stride)
        } else {
            ((self.cluster_tiles - self.dp_units) * self.cluster, self.splits)
        }
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
