//! plan.rs's tests: the plans chosen for each shape and knob, and the work units they give.

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
    assert_eq!((from("").early_b, from("gemm.early_weights=0").early_b), (Some(true), Some(false)));
}

#[test]
fn tile_width_follows_the_measured_costs() {
    // H200, bf16 W^T: 2048 x 4096 x 7168 ran 673 TFLOP/s on 256 columns, 510 on 128; 128 x 4096
    // x 4096 (one row tile, streaming B) 193 on 128 columns split 4 ways, 154 on 256.
    let d = Knobs::default();
    for n_major in [false, true] {
        assert_eq!(plan(2048, 7168, 4096, 1, 132, n_major, d).unwrap().bn, 256);
        assert_eq!(plan(2048, 3072, 4096, 1, 132, n_major, d).unwrap().bn, 256);
        assert_eq!(plan(2048, 14336, 4096, 1, 132, n_major, d).unwrap().bn, 256);
        let p = plan(128, 4096, 4096, 1, 132, n_major, d).unwrap();
        assert_eq!((p.bn, p.splits), (128, 4), "{p:?}");
    }
}
