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

/// Relative time of one k-tile of a 128 x `bn` tile (a 128-column tile moves 3/4 of the bytes
/// for half the work), of the split-K partial round trip, and of a unit's fixed cost (pipeline
/// fill, epilogue): a rough model to pick the tile width and the splits when the tiles alone
/// leave SMs idle.
fn unit_cost(bn: usize, k_tiles: usize, splits: usize) -> f64 {
    let (step, reduce) = if bn == 256 { (1.0, 3.0) } else { (0.55, 1.5) };
    let kps = k_tiles.div_ceil(splits);
    kps as f64 * step + if splits > 1 { reduce } else { 0.0 } + 2.0
}

/// Estimates for an H200, for the 64-row tile's cost ([`skinny_cost`]), in bytes, flops and
/// microseconds: the memory's rate (4.14 TB/s measured by a device copy), the TMA loads one SM
/// sustains (about 80 SMs' worth reach the memory's rate), an SM's dense 16-bit wgmma rate.
const HBM_BYTES_PER_US: f64 = 4.0e6;
const SM_BYTES_PER_US: f64 = 5.0e4;
const SM_FLOPS_PER_US: f64 = 6.0e6;
/// A wave's fixed cost (pipeline fill, epilogue) and split-K's (the counters' memset, a node of
/// its own in a captured graph; the workspace allocation; the last part's wait for the others).
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
                waves as f64 * unit_cost(bn, k_tiles, s)
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
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// A piece of work as the kernel's `next_unit` gives it: (batch, row tile, column tile, k0,
    /// k1, part, parts, slot).
    type Piece = (usize, usize, usize, usize, usize, usize, usize, Option<usize>);

    /// The kernel's `place`: cluster tile r to (batch, row tile, column tile).
    fn place(p: &Plan, mut r: usize, rank: usize) -> (usize, usize, usize) {
        let (cn, cm) = (p.cluster_n, p.cluster / p.cluster_n);
        let (rm, rn) = (rank % cm, rank / cm);
        let (m_units, n_units) = (p.m_tiles.div_ceil(cm), p.n_tiles.div_ceil(cn));
        let per_batch = m_units * n_units;
        let z = r / per_batch;
        r -= z * per_batch;
        let per_group = p.group * n_units;
        let g = r / per_group;
        let first = g * p.group;
        let rows = (m_units - first).min(p.group);
        let inn = r - g * per_group;
        (z, (first + inn % rows) * cm + rm, (inn / rows) * cn + rn)
    }

    /// The kernel's `next_unit` walk for cluster `cid` of `clusters`.
    fn walk(p: &Plan, cid: usize, clusters: usize, rank: usize) -> Vec<Piece> {
        let mut out = Vec::new();
        for u in (cid..p.units).step_by(clusters) {
            let (r, k0, k1, split, parts, slot) = if u < p.dp_units {
                (u, 0, p.k_tiles, 0, 1, None)
            } else {
                let v = u - p.dp_units;
                let (t, split) = (v / p.splits, v % p.splits);
                let k0 = split * p.k_per_split;
                (p.dp_units + t, k0, (k0 + p.k_per_split).min(p.k_tiles), split, p.splits, Some(t * p.cluster + rank))
            };
            let (z, mt, nt) = place(p, r, rank);
            out.push((z, mt, nt, k0, k1, split, parts, slot));
        }
        if p.sk_len > 0 {
            let (kt, len) = (p.k_tiles, p.sk_len);
            let (s0, total) = (cid * len, p.sk_tiles * kt);
            let s1 = (s0 + len).min(total);
            let mut t = s0 / kt;
            while s0 < total && t * kt < s1 {
                let (first, last) = (t * kt / len, ((t + 1) * kt - 1) / len);
                let parts = last - first + 1;
                let (z, mt, nt) = place(p, p.dp_units + t, rank);
                let slot = (parts > 1).then_some(t * p.cluster + rank);
                out.push((z, mt, nt, s0.max(t * kt) - t * kt, s1.min((t + 1) * kt) - t * kt, cid - first, parts, slot));
                t += 1;
            }
        }
        out
    }

    fn knobs(cluster: usize, bn: usize, splits: Option<usize>, group_m: usize) -> Knobs {
        Knobs { cluster: Some(cluster), bn: Some(bn), splits, group_m: Some(group_m), ..Knobs::default() }
    }

    #[test]
    fn units_cover_every_tile_and_k_once() {
        let shapes = [
            (1, 8, 8, 1),
            (300, 1000, 4096, 3),
            (8192, 8192, 8192, 1),
            (128, 11008, 4096, 1),
            (2048, 11008, 4096, 1),
            (2049, 520, 136, 2),
            (64, 14336, 4096, 1),
            (33, 1000, 576, 3),
            (200, 4096, 1024, 1),
            // The two-GPU tiny model's per-device products (K = 32 under one k-tile, N = 16).
            (12, 16, 64, 1),
            (12, 64, 32, 1),
            (12, 32, 32, 1),
            (64, 16, 32, 1),
        ];
        for (rows, n, k, z) in shapes {
            let all = [
                Knobs::default(),
                knobs(1, 128, Some(3), 3),
                knobs(2, 256, Some(2), 5),
                knobs(2, 128, None, 4),
                knobs(1, 256, None, 1),
                Knobs { cluster_n: Some(2), ..knobs(2, 256, None, 4) },
                Knobs { cluster_n: Some(2), ..knobs(1, 128, Some(3), 3) },
                Knobs { cluster_n: Some(2), ..Knobs::default() },
                Knobs { persistent: Some(false), ..Knobs::default() },
                Knobs { tail: Some(false), ..Knobs::default() },
                Knobs { bm: Some(64), ..Knobs::default() },
                Knobs { bm: Some(64), ..knobs(1, 64, Some(3), 2) },
                Knobs { bm: Some(64), persistent: Some(false), ..Knobs::default() },
                Knobs { bm: Some(64), cluster_n: Some(2), ..knobs(2, 128, None, 4) },
                Knobs { bm: Some(128), ..Knobs::default() },
            ];
            for (kn, n_major) in all.into_iter().flat_map(|kn| [(kn, false), (kn, true)]) {
                let p = plan(rows, n, k, z, 132, n_major, kn).unwrap();
                assert!(p.bm == 128 || p.bn == 128 || (p.bn == 64 && !n_major), "{p:?}");
                assert!(p.splits * p.k_per_split >= p.k_tiles && (p.splits - 1) * p.k_per_split < p.k_tiles);
                assert!(p.splits > 1 || p.dp_units == p.cluster_tiles, "{p:?}");
                for clusters in [132 / p.cluster, 7, 1] {
                    let (p, clusters) = if p.persistent { (p.with_clusters(clusters), clusters) } else { (p, p.units) };
                    let (split_tiles, stride) = p.split_tiles();
                    let mut ks: HashMap<(usize, usize, usize), Vec<Piece>> = HashMap::new();
                    for cid in 0..clusters {
                        for rank in 0..p.cluster {
                            for piece in walk(&p, cid, clusters, rank) {
                                let (bz, mt, nt, k0, k1, split, parts, slot) = piece;
                                let (cm, cn) = (p.cluster / p.cluster_n, p.cluster_n);
                                assert!(bz < z && nt < p.n_tiles.div_ceil(cn) * cn && mt < p.m_tiles.div_ceil(cm) * cm);
                                assert!(k0 < k1, "{rows}x{n}x{k} {kn:?}: cluster {cid} has an empty piece");
                                assert!(split < parts && (parts == 1) == slot.is_none(), "{piece:?} {p:?}");
                                assert!(slot.is_none_or(|s| s < split_tiles && parts <= stride), "{piece:?} {p:?}");
                                ks.entry((bz, mt, nt)).or_default().push(piece);
                            }
                        }
                    }
                    let (cm, cn) = (p.cluster / p.cluster_n, p.cluster_n);
                    assert_eq!(ks.len(), z * p.n_tiles.div_ceil(cn) * cn * p.m_tiles.div_ceil(cm) * cm);
                    for (tile, mut pieces) in ks {
                        pieces.sort_by_key(|q| q.3);
                        let mut at = 0;
                        for (i, q) in pieces.iter().enumerate() {
                            assert_eq!((q.3, q.5, q.6), (at, i, pieces.len()), "{rows}x{n}x{k} {kn:?}: tile {tile:?}");
                            at = q.4;
                        }
                        assert_eq!(at, p.k_tiles);
                    }
                }
            }
        }
    }

    #[test]
    fn heuristic_fills_the_gpu() {
        let p = plan(128, 4096, 4096, 1, 132, false, Knobs::default()).unwrap();
        assert!(p.units * p.cluster >= 64 && p.splits > 1 && p.dp_units == 0, "{p:?}");
        // From 16 row tiles, clusters of 2.
        let p = plan(8192, 8192, 8192, 1, 132, false, Knobs::default()).unwrap();
        assert_eq!((p.bn, p.cluster, p.splits), (256, 2, 1));
        assert_eq!(plan(1920, 8192, 8192, 1, 132, false, Knobs::default()).unwrap().cluster, 1);
        // 688 tiles on 132 SMs: 5 full waves; the 28 tiles left are 28 * 64 k-tiles spread over
        // the 132 CTAs as stream-K ranges of 14 (each tile meets at most 6 of them).
        let c1 = Knobs { cluster: Some(1), ..Knobs::default() };
        let p = plan(2048, 11008, 4096, 1, 132, false, c1).unwrap();
        assert_eq!((p.bn, p.cluster, p.cluster_tiles, p.dp_units, p.sk_len), (256, 1, 688, 688, 0), "{p:?}");
        let p = p.with_clusters(132);
        assert_eq!((p.dp_units, p.units, p.splits, p.sk_len, p.sk_tiles, p.sk_stride), (660, 660, 1, 14, 28, 6));
        assert_eq!(p.split_tiles(), (28, 6));
        // Clusters of 2: 344 cluster tiles on 66 clusters, the 14 left as ranges of 14 k-tiles.
        let p = plan(2048, 11008, 4096, 1, 132, false, Knobs::default()).unwrap().with_clusters(66);
        assert_eq!((p.bn, p.cluster, p.cluster_tiles, p.dp_units, p.sk_len, p.sk_tiles), (256, 2, 344, 330, 14, 14));
        assert_eq!(p.split_tiles(), (28, 6));
        // 8192^3: 1024 cluster tiles, 34 in the last wave, ranges of 66 of their 128 k-tiles.
        let p = plan(8192, 8192, 8192, 1, 132, false, Knobs::default()).unwrap().with_clusters(66);
        assert_eq!((p.dp_units, p.sk_len, p.sk_tiles, p.sk_stride), (990, 66, 34, 3));
        // Not when a range would cost as much as the wave it replaces, nor when forced off.
        let p = plan(4096, 4096, 4096, 1, 132, false, Knobs::default()).unwrap().with_clusters(66);
        assert_eq!((p.dp_units, p.sk_len), (256, 0), "{p:?}");
        let p = plan(2048, 11008, 4096, 1, 132, false, Knobs { tail: Some(false), ..c1 }).unwrap().with_clusters(132);
        assert_eq!((p.dp_units, p.splits, p.sk_len), (688, 1, 0));
        let p = plan(2048, 11008, 4096, 1, 132, false, Knobs { splits: Some(1), ..c1 }).unwrap().with_clusters(132);
        assert_eq!((p.dp_units, p.splits, p.sk_len), (688, 1, 0));
        // Non-persistent grids keep the fixed split of the last wave's tiles.
        let p = plan(2048, 11008, 4096, 1, 132, false, Knobs { persistent: Some(false), ..c1 }).unwrap();
        assert_eq!((p.dp_units, p.sk_len), (660, 0));
        assert!(p.splits > 1 && p.with_clusters(132) == p, "{p:?}");
    }

    /// The two-GPU tensor-parallel tiny model's products (hidden 64, 12 prompt rows; per device
    /// q 64 -> 32, k/v 64 -> 16, o-proj K = 32, gate/up and down 64 x 64), and the single-GPU
    /// ones, on the 64-row tile: one unsplit unit per column tile over all of K (1 or 2
    /// k-tiles), no cluster, no stream-K and so no workspace or counters; a grid of one CTA per
    /// unit. The kernel's only waits in such a launch are the ring's mbarriers (which trap after
    /// 20 s), so these shapes cannot hang the GEMM itself.
    #[test]
    fn tiny_tensor_parallel_shapes_plan_one_unit_per_tile() {
        let f = Knobs { bm: Some(64), ..Knobs::default() };
        for rows in [1, 9, 12, 64] {
            for (k, n) in [(64, 32), (64, 16), (32, 64), (64, 64), (32, 32), (64, 128), (128, 64), (64, 400), (8, 8)] {
                for n_major in [false, true] {
                    let p = plan(rows, n, k, 1, 132, n_major, f).unwrap().with_clusters(132);
                    let what = format!("{rows}x{k}x{n} n_major={n_major}: {p:?}");
                    assert_eq!((p.bm, p.m_tiles, p.cluster, p.splits, p.sk_len), (64, 1, 1, 1, 0), "{what}");
                    assert_eq!((p.k_tiles, p.k_per_split), (k.div_ceil(BK), k.div_ceil(BK)), "{what}");
                    assert_eq!(
                        (p.units, p.dp_units, p.cluster_tiles, p.n_tiles),
                        (p.n_tiles, p.n_tiles, p.n_tiles, n.div_ceil(p.bn)),
                        "{what}"
                    );
                    assert_eq!(p.split_tiles().0, 0, "{what}");
                }
            }
        }
    }

    /// The split-K / stream-K workspace the launcher allocates holds every partial the kernel
    /// writes: per split tile `stride` partials of bm x bn f32 (the kernel's TILE = BM * BN),
    /// with the plan's own bm (64-row tiles have half the partial of 128-row ones).
    #[test]
    fn split_workspace_covers_every_slot_for_both_heights() {
        for bm in [64, 128] {
            for (rows, n, k, kn) in [
                (64, 4096, 4096, Knobs::default()),
                (33, 1000, 576, Knobs { splits: Some(3), ..Knobs::default() }),
                (9, 1000, 4096, Knobs { splits: Some(1), grid: Some(5), ..Knobs::default() }),
                (200, 4096, 4096, Knobs { cluster: Some(2), splits: Some(2), ..Knobs::default() }),
            ] {
                let kn = Knobs { bm: Some(bm), ..kn };
                let p = plan(rows, n, k, 1, 132, false, kn).unwrap();
                let clusters = kn.grid.map_or(132 / p.cluster, |g| (g / p.cluster).max(1));
                let p = p.with_clusters(clusters);
                let clusters = if p.persistent { p.units.min(clusters) } else { p.units };
                let (split_tiles, stride) = p.split_tiles();
                assert_eq!(p.bm, bm);
                for cid in 0..clusters {
                    for rank in 0..p.cluster {
                        for (_, _, _, _, _, split, parts, slot) in walk(&p, cid, clusters, rank) {
                            if let Some(s) = slot {
                                // The partial's last f32 lies inside split_tiles * stride tiles.
                                let end = (s * stride + split + 1) * p.bm * p.bn;
                                assert!(
                                    s < split_tiles && parts <= stride && end <= split_tiles * stride * p.bm * p.bn,
                                    "{p:?}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    /// (bm, bn, splits) for Bt [n, k] on 132 SMs.
    fn shape(rows: usize, n: usize, k: usize, kn: Knobs) -> (usize, usize, usize) {
        let p = plan(rows, n, k, 1, 132, false, kn).unwrap();
        (p.bm, p.bn, p.splits)
    }

    #[test]
    fn decode_batches_take_the_64_row_tile() {
        let d = Knobs::default();
        // Llama-3-8B at 64 sequences: gate/up (112 tiles of 128 columns) unsplit; the others
        // split until about a wave of CTAs streams B.
        assert_eq!(shape(64, 14336, 4096, d), (64, 128, 1));
        assert_eq!(shape(64, 4096, 4096, d), (64, 128, 4));
        assert_eq!(shape(64, 4096, 14336, d), (64, 128, 4));
        assert_eq!(shape(64, 6144, 4096, d), (64, 128, 2));
        assert_eq!(shape(9, 14336, 4096, d), (64, 128, 1));
        // A short reduction: 64-column tiles rather than a split.
        assert_eq!(shape(16, 1000, 576, d), (64, 64, 1));
        // Enough tiles: no split (the lm_head's 1002 tiles; stream-K may take its last wave).
        assert_eq!(shape(64, 128256, 4096, d), (64, 128, 1));
        // K or N under one 64-element box: the 128-row tile unless forced (the two-GPU
        // tiny model's o-proj, K = 32, and k/v projections, N = 16).
        assert_eq!(shape(12, 64, 32, d).0, 128);
        assert_eq!(shape(12, 16, 64, d).0, 128);
        assert_eq!(shape(12, 32, 32, d).0, 128);
        assert_eq!(plan(12, 16, 64, 1, 132, true, d).unwrap().bm, 128);
        assert_eq!(shape(12, 64, 64, d), (64, 64, 1));
        assert_eq!(shape(12, 64, 32, Knobs { bm: Some(64), ..d }).0, 64);
        assert_eq!(shape(12, 16, 64, Knobs { bm: Some(64), ..d }).0, 64);
        // From 65 rows the 128-row tile, as before.
        assert_eq!(shape(65, 4096, 4096, d).0, 128);
        // Forced either way; a forced width the height lacks is ignored, 256 implies 128 rows.
        assert_eq!(shape(64, 4096, 4096, Knobs { bm: Some(128), ..d }).0, 128);
        assert_eq!(shape(256, 4096, 4096, Knobs { bm: Some(64), ..d }).0, 64);
        assert_eq!(shape(64, 4096, 4096, Knobs { bn: Some(256), ..d }).0, 128);
        assert_eq!(shape(64, 4096, 4096, Knobs { bm: Some(64), bn: Some(256), ..d }).0, 64);
        assert_eq!(shape(64, 4096, 4096, Knobs { bm: Some(128), bn: Some(64), ..d }).1 % 128, 0);
        assert_eq!(shape(64, 4096, 4096, Knobs { bn: Some(64), ..d }).1, 64);
        // N-major B has no 64-column 64-row tile.
        assert_eq!(plan(16, 1000, 576, 1, 132, true, d).unwrap().bn, 128);
        // Batches: 64 rows each, 8 batches of 4096 columns fill the GPU unsplit.
        let p = plan(64, 4096, 4096, 8, 132, false, d).unwrap();
        assert_eq!((p.bm, p.bn, p.splits, p.m_tiles), (64, 128, 1, 1));
    }

    #[test]
    fn every_gemm_knob_changes_the_plan() {
        let from = |spec: &str| Knobs::from_tuning(&Tuning::parse(spec).unwrap());
        let sms = 132;
        let at = |(m, n, k): (usize, usize, usize), spec: &str| plan(m, n, k, 1, sms, false, from(spec)).unwrap();
        let big = (8192, 8192, 8192);
        let skinny = (256, 4096, 4096);
        let cases: [(&str, (usize, usize, usize), &str, fn(&Plan) -> bool); 10] = [
            ("gemm.bn", big, "gemm.bn=128", |p| p.bn == 128),
            ("gemm.bm", big, "gemm.bm=64", |p| p.bm == 64),
            ("gemm.bm=128", (64, 4096, 4096), "gemm.bm=128", |p| p.bm == 128),
            ("gemm.cluster", big, "gemm.cluster=1", |p| p.cluster == 1),
            ("gemm.cluster_n", big, "gemm.cluster=2,gemm.cluster_n=2", |p| p.cluster_n == 2),
            ("gemm.splitk", big, "gemm.splitk=2", |p| p.splits == 2),
            ("gemm.persistent", big, "gemm.persistent=0", |p| !p.persistent),
            ("gemm.group_m", big, "gemm.group_m=2", |p| p.group == 1),
            ("gemm.tail", skinny, "gemm.tail=0", |p| !p.tail),
            ("gemm.splitk=1", skinny, "gemm.splitk=1", |p| p.splits == 1 && p.sk_len == 0),
        ];
        for (name, dims, spec, holds) in cases {
            let (before, after) = (at(dims, ""), at(dims, spec));
            assert!(holds(&after) && before != after, "{name}: {before:?} -> {after:?}");
        }
        assert_eq!(from("gemm.epilogue=staged").staged, Some(true));
        assert_eq!(from("gemm.epilogue=direct").staged, Some(false));
        assert_eq!(from("gemm.grid=8").grid, Some(8));
    }
}
