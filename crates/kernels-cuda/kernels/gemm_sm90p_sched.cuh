#line 1 "gemm_sm90p_sched.cuh"
// gemm_sm90p_sched.cuh: the arguments of gemm_sm90p.cu and its tile scheduler, which hands each
// cluster its units: data-parallel tiles, split-K pieces and stream-K ranges (the work units are
// described at the top of gemm_sm90p.cu; sources.rs puts this file in front of it).

// B operands of one launch (gemm_sm90p.cu: "Segments" and "Gated"); map m[0] alone otherwise.
#define GP_SEGS 4
struct TmaMaps { TmaMap m[GP_SEGS]; };

struct GemmPArgs {
    u64 c;
    u64 ws;          // split-K partials: per (split tile, split) BM x BN f32 in fragment order
    u64 counters;    // split-K: one u32 per split tile (Work::slot), zero at launch; left at zero
    i64 m, n;        // rows per batch (of A's map and of C), columns
    i64 stride_c;    // elements between batches of C
    i32 k_tiles;     // ceil(K / 64)
    i32 splits, k_per_split;
    i32 m_tiles, n_tiles;
    i32 group;       // cluster row units per raster group
    i32 units;       // dp_units + (cluster tiles - dp_units) * splits
    i32 dp_units;    // leading units that take a whole cluster tile (all of K)
    i32 pairs;       // nonzero: 32-bit pair accesses in the epilogue
    i32 sk_len;      // stream-K: k-tiles per cluster range (0: no stream-K)
    i32 sk_tiles;    // stream-K: cluster tiles after the dp_units ones
    i32 sk_stride;   // stream-K: partials per split tile in the workspace (most parts a tile has)
    i32 cn;          // CTAs of a cluster along N (1 or 2; the cluster's CL / cn along M)
    i32 ldc;         // f32-output kernels: elements between rows of C and of the residual
    i32 pdl;         // nonzero: launched under PDL, waits for the previous grid after its setup
    i32 early_b;     // with pdl: B is a constant, its first stages are loaded before the wait
    i32 segs;                    // B operands side by side along N (1 to GP_SEGS; gated: 2)
    i32 seg_tiles[GP_SEGS + 1];  // each segment's first column tile; [segs] = n_tiles
    i64 seg_n[GP_SEGS];          // each segment's columns (of its B and its C)
    u64 seg_c[GP_SEGS];          // each segment's C (rows seg_n apart)
    Epilogue epi;
};

// The segment of column tile nt.
__device__ __forceinline__ int seg_of(const GemmPArgs& p, int nt) {
    int s = 0;
    while (s + 1 < p.segs && nt >= p.seg_tiles[s + 1]) ++s;
    return s;
}

// A unit: batch z, row tile mt (of this CTA), column tile nt, k-tiles [k0, k1), and for a
// split or stream-K piece its part index, the tile's part count and the index of its tile among
// the split ones (its counter and partials), else slot -1.
struct Work { int z, mt, nt, k0, k1, split, parts, slot; };

// Places cluster tile r: its batch, then the grouped raster (see the top of the file). The
// cluster's CTAs are CM = CL / p.cn along M by p.cn along N, rank = rm + CM * rn.
__device__ __forceinline__ void place(const GemmPArgs& p, int r, int rank, int CL, Work& w) {
    const int cm = CL / p.cn, rm = rank % cm, rn = rank / cm;
    const int m_units = (p.m_tiles + cm - 1) / cm, n_units = (p.n_tiles + p.cn - 1) / p.cn;
    const int per_batch = m_units * n_units;
    w.z = r / per_batch;
    r -= w.z * per_batch;
    const int per_group = p.group * n_units;
    const int g = r / per_group, first = g * p.group;
    const int rows = min(m_units - first, p.group);
    const int in = r - g * per_group;
    w.mt = (first + in % rows) * cm + rm;
    w.nt = (in / rows) * p.cn + rn;
}

__device__ __forceinline__ Work decode(const GemmPArgs& p, int u, int rank, int CL) {
    Work w;
    int r;
    if (u < p.dp_units) {
        r = u, w.split = 0, w.parts = 1, w.slot = -1, w.k0 = 0, w.k1 = p.k_tiles;
    } else {
        const int v = u - p.dp_units, t = v / p.splits;
        r = p.dp_units + t, w.split = v - t * p.splits, w.parts = p.splits, w.slot = t * CL + rank;
        w.k0 = w.split * p.k_per_split, w.k1 = min(w.k0 + p.k_per_split, p.k_tiles);
    }
    place(p, r, rank, CL, w);
    return w;
}

// The next unit of cluster `cid` (step counts this cluster's units from 0): its units cid,
// cid + clusters, ... below p.units, then its stream-K range's pieces. False when done.
__device__ __forceinline__ bool next_unit(const GemmPArgs& p, int cid, int clusters, int rank, int CL, int& step,
                                          Work& w) {
    const int own = cid < p.units ? (p.units - cid + clusters - 1) / clusters : 0;
    const int i = step++;
    if (i < own) {
        w = decode(p, cid + i * clusters, rank, CL);
        return true;
    }
    if (p.sk_len == 0) return false;
    const i64 kt = p.k_tiles, len = p.sk_len, total = (i64)p.sk_tiles * kt;
    const i64 s0 = (i64)cid * len;
    const i64 s1 = min(s0 + len, total);
    const i64 t = s0 / kt + (i - own);
    if (s0 >= total || t * kt >= s1) return false;
    // The ranges that touch tile t: first .. last.
    const i64 first = t * kt / len, last = ((t + 1) * kt - 1) / len;
    w.k0 = (int)(max(s0, t * kt) - t * kt);
    w.k1 = (int)(min(s1, (t + 1) * kt) - t * kt);
    w.split = (int)(cid - first);
    w.parts = (int)(last - first + 1);
    w.slot = w.parts > 1 ? (int)t * CL + rank : -1;
    place(p, p.dp_units + (int)t, rank, CL, w);
    return true;
}

