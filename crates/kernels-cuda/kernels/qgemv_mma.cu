#line 1 "qgemv_mma.cu"
// qgemv_mma.cu: qmatmul for 1 to 8 lhs rows over 4-bit weights (Q4_0, Q4_1, Q4_K) on integer
// tensor cores, sm_90: qgemv_mma_<enc>_m{1,2,4,8} (m4 serves 3 and 4 rows, m8 5 to 8: one mma
// per pair of rows on each weight fragment, the weights read once); and Q6_K for one row
// (qgemv_mma_q6_k_m1, below). At M = 1 qgemv_stream.cu spends three
// instructions per weight on decode (permute, subtract, fma) and is bound by instruction issue
// at half the memory system's rate; here the quants go into an mma as they are stored, 8 per
// lane per 3 instructions (two masks and a shift), and one mma does 512 multiply-adds.
//
// Exactness. mma.m16n8k32.u8.s8.s32 multiplies the quants (0..15, exact) by the lhs in fixed
// point: per 32-element unit the lhs x is scaled by 2^-e (e from the unit's largest |x|, so
// the largest lands in [2^20, 2^21)), rounded to an integer x' (|x - 2^e x'| <= 2^(e-1), under
// 2^-21 of the unit's largest value) and split into three int8 columns of the mma's B operand,
// x' = hi * 2^14 + mid * 2^7 + lo (hi signed, mid and lo in 0..127). Integer sums are exact;
// each lane joins its two columns in 32 bits, converts once to f32 and applies the unit's
// scales: the result is lhs @ dequantize(w)^T with f32 rounding plus the fixed-point rounding
// of the lhs, well inside the bound of a K-term f32 dot product. Summation order is fixed
// (deterministic). Q4_0's "q - 8" is folded in as -8 * sum(x') per unit; the mins of Q4_1 and
// Q4_K multiply the unit's sum of lhs (2^e * sum(x')).
//
// One lhs row fills three of the mma's 8 B columns, so a lane's C holds one piece of a column
// group or nothing, and the join and scaling after each mma ran on lanes with nothing to do.
// Q4_0, Q4_1 and Q4_K at one row take units in pairs: the first unit's pieces in B columns
// 0..2, a second mma over the next unit's quants with its pieces in columns 4..6 accumulating
// into the same C; lanes t = 0, 1 then join and scale the first unit, t = 2, 3 the second (one
// join and one scaling a pair per lane instead of one a unit).
//
// Work. A block of 8 warps first turns the whole lhs into B fragments in shared memory
// (qm_prep, while the first weight copies are in flight; launched in clusters, each CTA of a
// cluster prepares a run of whole units and copies it into the others' shared memory through
// DSMEM, `qgemv.cluster`: at long K or many rows, where the preparation is a large part of
// every CTA's work), then each warp walks its own tiles of
// 16 weight rows (the mma's M) through a private ring of QmSegs::stages stages, each filled by one 2-D
// TMA copy of 16 rows x 256 elements onto the stage's mbarrier, so warps never wait on each
// other. Tiles go round-robin over the grid's warps; S = 1, 2, 4 or 8 warps of a block share a
// tile, part p taking K's chunks p, p + S, ... (neighbouring pieces of the same rows are read
// at about the same time), and the group sums the parts in order through shared memory.
// launch/quant.rs (qgemv_mma) sizes the grid, S and the shared memory, and launches with
// programmatic stream serialization: the grid starts while the previous kernel drains and
// waits (griddepcontrol.wait) before reading anything it may have written; with QmSegs::early
// the first weight stages are requested before the wait (`qgemv.early_weights`). Weight rows
// must start on 16 bytes (row_bytes % 16 == 0, w aligned), as TMA requires.
//
// Activations: f32, or bf16 / f16 (kernel suffix _bf16 / _f16), read as f32 by qm_prep; the
// result is rounded once to that type as it is stored (the residual, if any, added first).
// Gated (QmSegs::gated): silu(lhs W_gate^T) * (lhs W_up^T) in one launch, a tile's 16 mma rows
// being 8 rows of each weight (two TMA copies per stage), the store rounding as the separate
// products and the fused silu * mul would (quant_common.cuh's qn_gated).
// A folded RMSNorm (QmSegs::norm) normalises the lhs in qm_prep: warp r first sums the squares
// of lhs row r, and every element is rounded to T as the rms_norm kernel stores it.
// A folded rope + KV-cache store (QmSegs::rope, quant_common.cuh's QRope; segments q, k, v):
// the tile's sums are stored rotated into q_out and the cache instead of the outputs, each
// row's pair partner (the adjacent row) taken from lane g ^ 1 with one shuffle.
//
// Q6_K (one lhs row): the 6-bit quants q (0..63) go into the mma as bytes (low nibbles and
// high bits joined: two masks, a shift and an or per 4 quants), and one scale covers 16
// elements, so each half of a unit gets its own B columns: column g is piece g % 4 of the
// unit's elements 0..15 (g < 4) or 16..31 (g >= 4), zeros elsewhere. A lane's two C columns
// are then pieces of one half, which it scales by that half's scale; "q - 32" is -32 times the
// half's sum of x' (QmMeta::xh). A stage's 16 rows x 210 bytes are read as boxes of 224 bytes
// from the 16 bytes at or below the chunk (TMA boxes and their starts are whole 16 bytes), so
// chunk c begins (210 c) % 16 = 2 c % 16 bytes into its slot: 32-bit words 2 bytes off a
// word boundary (odd c) are joined from two aligned loads.
//
// H200, 32000 x 4096 at M = 1 (73.7 MB of Q4_0): 24.5 us back to back, 0.73-0.75 of the
// device copy rate, against 40 us for qgemv_stream.cu.

// A row chunk's bytes, and its pitch in a stage (the TMA box: whole 16 bytes): 144 bytes for
// Q4_0 and Q4_K (36 words, so the 8 rows of a load fall in distinct banks), 160 for Q4_1
// (two-way conflicts), 210 in 224 for Q6_K (two-way).
template <int E> struct Qm {
    enum {
        CHUNK_BYTES = QM_CHUNK / Enc<E>::ELEMS * Enc<E>::BYTES,
        SLOT = (CHUNK_BYTES + 15) / 16 * 16,
        STAGE = 16 * SLOT,  // a multiple of 128 bytes, as TMA destinations must be
    };
};
// Stages per warp (QmSegs::stages): 2, or up to QM_MAX_ST where more cost no block per SM
// (long K, whose lhs fragments already hold the SM to 1-2 blocks: launch/qgemv_mma.rs).
#define QM_MAX_ST 4

// The weights as a 2-D tensor of bytes [n rows, row_bytes], boxes of 16 rows x CHUNK_BYTES
// (launch/quant.rs encodes it): one TMA copy fills a stage, rows past n and bytes past a row's
// end read as zeros.
struct __align__(64) QmMap {
    u64 opaque[16];
};

// Sibling products of one lhs (a layer's q/k/v, its gate/up) in one launch: segment s has its
// own weights (maps.map[s]), output out[s] of n[s] rows, and the tiles first[s] .. first[s+1]
// of the launch's tiles, so warps never wait for a sibling's launch to drain (launch/quant.rs).
#define QM_SEGS 3
struct QmMaps {
    QmMap map[QM_SEGS];
};
struct QmSegs {
    void* out[QM_SEGS];  // T [m, n[s]]
    int n[QM_SEGS];
    int first[QM_SEGS + 1];
    int count;
    QNorm norm;  // the RMSNorm folded into the lhs (quant_common.cuh), or gamma 0
    int early;   // issue the first weight stages before griddepcontrol.wait
    // silu(map[0] product) * (map[1] product) into out[0] (one segment of n rows): a tile is 8
    // rows of each weight (maps of 8-row boxes), or 0
    int gated;
    int stages;  // weight stages per warp, 2..QM_MAX_ST
    int pad;
    QRope rope;  // segments q, k, v: the rope and the cache store in the products' store (rope.on)
};

// The segment of tile `tile` (first[0] = 0 <= tile < first[count]).
__device__ __forceinline__ int qm_seg(const QmSegs& sg, int tile) {
    int s = 0;
#pragma unroll
    for (int i = 1; i < QM_SEGS; ++i) s += (i < sg.count && tile >= sg.first[i]) ? 1 : 0;
    return s;
}

template <int E, int MR, typename T>
__device__ __forceinline__ void qgemv_mma(const QmMaps& maps, const QmSegs& sg, const T* __restrict__ lhs, int m, int k,
                                          int split, const T* __restrict__ res) {
#if __CUDA_ARCH__ >= 900
    typedef Qm<E> Q;
    constexpr int CG = (MR + 1) / 2;  // mma column groups: two lhs rows each
    // One lhs row of Q4_0, Q4_1 or Q4_K: units in pairs, the second's sums in the C columns the first
    // leaves empty (see the header).
    constexpr bool PAIRS = MR == 1 && (E == ENC_Q4_0 || E == ENC_Q4_1 || E == ENC_Q4_K);
    extern __shared__ __align__(128) u8 qm_smem[];
    const int units = k / 32;
    u8* frag = qm_smem;
    QmMeta* meta = (QmMeta*)(qm_smem + units * MR * 96);
    u8* zero = (u8*)(meta + units * MR);
    u8* stages = qm_smem + ((units * MR * 112 + 128 + 127) & ~127);  // TMA destinations: 128-byte aligned
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    // Launched in clusters (launch/qgemv_mma.rs, `qgemv.cluster`), the CTAs of a cluster share
    // the lhs preparation: each prepares a run of whole units and copies it into the others'
    // shared memory. This arrival says the CTA has started (its shared memory may be written
    // once the others have waited for it).
    // (Q4_K's 2-row kernels are never launched in clusters: its super-block scales leave them
    // no register for this at four blocks an SM.)
    constexpr bool CL = !(E == ENC_Q4_K && MR == 2);
    if (CL && cluster_size() > 1) cluster_arrive_relaxed_aligned();
    const int nst = sg.stages;
    u8* ring = stages + warp * (nst * Q::STAGE);
    u64* full = (u64*)(stages + QM_WARPS * nst * Q::STAGE) + warp * nst;
    float* red = (float*)(full + (QM_WARPS - warp) * nst) + warp * 64 * CG;  // [warp][lane][CG][2]

    const bool gated = sg.gated != 0;
    // The warp's tiles and K range: group `grp` of `split` warps, part `part` of K.
    const int tiles = sg.first[sg.count], chunks = (k + QM_CHUNK - 1) / QM_CHUNK;
    const int grp = warp / split, part = warp % split;
    const int gid = grp * gridDim.x + blockIdx.x, gstride = (QM_WARPS / split) * gridDim.x;
    // Part p takes chunks p, p + split, ...: the group's warps read neighbouring pieces of the
    // same rows at about the same time (longer runs of each DRAM page than contiguous ranges).
    const int nch = (chunks - part + split - 1) / split;
    const int my_tiles = gid < tiles ? (tiles - 1 - gid) / gstride + 1 : 0;
    const int items = nch > 0 ? my_tiles * nch : 0;

    if (lane == 0)
        for (int s = 0; s < nst; ++s)
            mbar_init(smem_u32(&full[s]), 1);
    mbar_init_fence();
    __syncwarp();

    // Stages the next item (tile st_tile, chunk part + st_k * split) into stage st_buf (item
    // n goes to stage n % nst, where item n - nst was): one TMA copy by lane 0. Items go in
    // order, so no division is needed.
    int st_n = 0, st_k = 0, st_tile = gid;
    auto stage = [&](int st_buf) {
        if (st_n < items && lane == 0) {
            const int seg = qm_seg(sg, st_tile);
            const u32 bar = smem_u32(&full[st_buf]);
            // TMA boxes start on 16 bytes: Q6_K's chunk lies (210 c) % 16 bytes into its slot
            const int col = (part + st_k * split) * (int)Q::CHUNK_BYTES & ~15;
            u8* dst = ring + st_buf * Q::STAGE;
            mbar_expect(bar, (u32)Q::STAGE);
            // Gated: slots 0..7 the tile's gate rows, 8..15 the same rows of the up weights.
            const int copies = gated ? 2 : 1;
            for (int c = 0; c < copies; ++c) {
                const QmMap& map = maps.map[gated ? c : seg];
                const int row0 = (st_tile - sg.first[seg]) * (gated ? 8 : 16);
                asm volatile(
                    "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, "
                    "%3}], [%4];\n" ::"r"(smem_u32(dst + c * 8 * Q::SLOT)),
                    "l"(&map), "r"(col), "r"(row0), "r"(bar)
                    : "memory");
            }
        }
        ++st_n;
        if (++st_k == nch) st_k = 0, st_tile += gstride;
    };
    // Launched with programmatic stream serialization (launch/quant.rs), this grid may start
    // while the previous kernel of the stream finishes: nothing that kernel may write is read
    // (nor out written) before griddepcontrol.wait. With `early` (the launch sets it only for
    // constant weights, which no kernel of the program writes) the first stages' copies go out
    // before the wait (an L2 prefetch of them there made the kernel 14% slower on its own; in a
    // chain the previous kernel's tail hides the copies).
    const bool early = sg.early != 0;
    if (!early) asm volatile("griddepcontrol.wait;\n" ::: "memory");
    for (int s = 0; s < nst; ++s) stage(s);
    if (early) {
        asm volatile("griddepcontrol.wait;\n" ::: "memory");
        asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
    }

    for (int i = tid; i < 128 / 4; i += blockDim.x) ((u32*)zero)[i] = 0u;
    // The folded RMSNorm's inverse rms of each lhs row: rows of up to 1024 elements a warp each
    // (warp r row r, summing as the rms_norm kernel does), longer ones every warp a part.
    __shared__ float qm_inv[MR], qm_part[QM_WARPS * MR];
    if (sg.norm.gamma) {
        if (k <= 1024) {
            if (warp < m) {
                const float v = qn_inv_rms<T>(lhs + (i64)warp * k, k, sg.norm.eps, lane);
                if (lane == 0) qm_inv[warp] = v;
            }
            __syncthreads();
        } else {
            qn_inv_rms_block<T, MR, QM_WARPS>(lhs, k, m, sg.norm.eps, warp, lane, qm_part, qm_inv);
        }
    }
    // This CTA's run of units, prepared here, then copied to the cluster's other CTAs.
    qm_prep<MR, T, CL>(lhs, k, m, frag, meta, warp, lane, sg.norm, qm_inv);
    __syncthreads();
    if (CL && cluster_size() > 1) qm_share<MR>(frag, meta, units, tid);
    if (!early) asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");

    // Lane (g, t) in column group c (lhs rows 2c, 2c + 1; one mma each, the same weights): B
    // column g is piece g % 4 of lhs row 2c + g / 4 (pieces 0..2; column 3 of each row is
    // empty); C columns 2t, 2t + 1 are pieces (0, 1) of row 2c + t / 2 for even t, (2, -) for
    // odd t. The lane joins them with weights (2^14, 2^7) or (1, 0); the even lane of a row
    // that exists also adds the row's offset and min terms.
    const int bp = g % 4;
    const int m0 = t % 2 ? 1 : 1 << 14, m1 = t % 2 ? 0 : 1 << 7;
    const u8* bsrc[CG];
    int bstride[CG], crow[CG], xk_mul[CG];
    float min_mul[CG];
#pragma unroll
    for (int c = 0; c < CG; ++c) {
        const int br = 2 * c + g / 4;
        const bool bcol = bp < 3 && br < m;
        bsrc[c] = bcol ? frag + br * 96 + bp * 32 + t * 8 : zero;
        bstride[c] = bcol ? MR * 96 : 0;
        crow[c] = min(2 * c + t / 2, MR - 1);
        // (units in pairs: both halves of the quad are row 0, of the pair's two units)
        const bool lead = t % 2 == 0 && (PAIRS || 2 * c + t / 2 < m);
        xk_mul[c] = (E == ENC_Q4_0 && lead) ? -8 : 0;
        min_mul[c] = lead ? 1.f : 0.f;
    }

    // PAIRS: two units a step, the first unit's pieces in B columns 0..2 of one mma, the
    // second's in columns 4..6 of a second mma into the same C; lanes t = 0, 1 then hold the
    // first unit's sums, t = 2, 3 the second's (`second`: the lane's unit of the pair).
    const u8* bpair[2];
    int bpstride[2];
    const int second = t / 2;
    bpair[0] = g < 3 ? frag + g * 32 + t * 8 : zero;
    bpstride[0] = g < 3 ? 96 : 0;
    bpair[1] = g >= 4 && g < 7 ? frag + 96 + (g - 4) * 32 + t * 8 : zero;
    bpstride[1] = g >= 4 && g < 7 ? 96 : 0;

    float acc[CG][2];
#pragma unroll
    for (int c = 0; c < CG; ++c) acc[c][0] = acc[c][1] = 0.f;
    // A folded rope (QRope; one or two lhs rows). (What its stores read besides the products
    // comes in at the store: held in registers through the loop it made these kernels spill.)
    const bool rope = MR <= 2 && sg.rope.on;
    int tile_it = 0, cur_tile = gid;
    u32 phase = 0;
    for (int it = 0, buf = 0; it < items; ++it) {
        const u32 bar = smem_u32(&full[buf]);
        mbar_wait(bar, phase);
        const int ch = part + tile_it * split;
        const u8* r0 = ring + buf * Q::STAGE + g * Q::SLOT;
        const u8* r1 = r0 + 8 * Q::SLOT;
        const int u0 = ch * QM_UNITS;
        if (E == ENC_Q4_K) {
            // The super-block's scales: sc and min of sub-block j in byte j % 4 of sc[j / 4], mn[j / 4].
            float d[2], dm[2];
            u32 sc[2][2], mn[2][2];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const uint4 v = *(const uint4*)(h ? r1 : r0);
                d[h] = qm_h2f(v.x & 0xFFFFu);
                dm[h] = qm_h2f(v.x >> 16);
                sc[h][0] = v.y & 0x3F3F3F3Fu;
                mn[h][0] = v.z & 0x3F3F3F3Fu;
                sc[h][1] = (v.w & 0x0F0F0F0Fu) | ((v.y >> 2) & 0x30303030u);
                mn[h][1] = ((v.w >> 4) & 0x0F0F0F0Fu) | ((v.z >> 2) & 0x30303030u);
            }
            // Sums over the super-block of v * sc and of min * sum(lhs); d and dmin once at its end.
            float aq[CG][2], am[CG][2];
#pragma unroll
            for (int c = 0; c < CG; ++c) aq[c][0] = aq[c][1] = am[c][0] = am[c][1] = 0.f;
#pragma unroll
            for (int p = 0; p < 4; ++p) {
                // sub-blocks 2p (low nibbles) and 2p + 1 (high)
                u32 wa[2], wb[2];
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const u8* q = (h ? r1 : r0) + 16 + 32 * p + 4 * t;
                    wa[h] = *(const u32*)q;
                    wb[h] = *(const u32*)(q + 16);
                }
                if (PAIRS) {
                    // as a pair of units
                    const int u = u0 + 2 * p;
                    const uint2 b0 = *(const uint2*)(bpair[0] + u * bpstride[0]);
                    const uint2 b1 = *(const uint2*)(bpair[1] + u * bpstride[1]);
                    int c[4];
                    mma_u8s8(c, wa[0] & 0x0F0F0F0Fu, wa[1] & 0x0F0F0F0Fu, wb[0] & 0x0F0F0F0Fu,
                             wb[1] & 0x0F0F0F0Fu, b0.x, b0.y);
                    mma_u8s8_acc(c, (wa[0] >> 4) & 0x0F0F0F0Fu, (wa[1] >> 4) & 0x0F0F0F0Fu,
                                 (wb[0] >> 4) & 0x0F0F0F0Fu, (wb[1] >> 4) & 0x0F0F0F0Fu, b1.x, b1.y);
                    const QmMeta mt = meta[u + second];
                    float v[2];
                    qm_join(c, m0, m1, 0, mt.s, v);
                    const float xm = mt.xf * min_mul[0];
                    const int jb = 2 * (p % 2) + second;  // the lane's sub-block's byte in sc[h][p / 2]
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        aq[0][h] = fmaf(v[h], qm_byte(sc[h][p / 2], jb), aq[0][h]);
                        am[0][h] = fmaf(qm_byte(mn[h][p / 2], jb), xm, am[0][h]);
                    }
                } else {
#pragma unroll
                    for (int hi = 0; hi < 2; ++hi) {
                        const int j = 2 * p + hi, u = u0 + j;
                        const int sh = 4 * hi;
#pragma unroll
                        for (int cg = 0; cg < CG; ++cg) {
                            const uint2 b = *(const uint2*)(bsrc[cg] + u * bstride[cg]);
                            const QmMeta mt = meta[u * MR + crow[cg]];
                            int c[4];
                            mma_u8s8(c, (wa[0] >> sh) & 0x0F0F0F0Fu, (wa[1] >> sh) & 0x0F0F0F0Fu,
                                     (wb[0] >> sh) & 0x0F0F0F0Fu, (wb[1] >> sh) & 0x0F0F0F0Fu, b.x, b.y);
                            float v[2];
                            qm_join(c, m0, m1, 0, mt.s, v);
                            const float xm = mt.xf * min_mul[cg];
#pragma unroll
                            for (int h = 0; h < 2; ++h) {
                                aq[cg][h] = fmaf(v[h], qm_byte(sc[h][j / 4], j % 4), aq[cg][h]);
                                am[cg][h] = fmaf(qm_byte(mn[h][j / 4], j % 4), xm, am[cg][h]);
                            }
                        }
                    }
                }
            }
#pragma unroll
            for (int cg = 0; cg < CG; ++cg)
#pragma unroll
                for (int h = 0; h < 2; ++h) acc[cg][h] = fmaf(d[h], aq[cg][h], fmaf(-dm[h], am[cg][h], acc[cg][h]));
        } else if (E == ENC_Q6_K) {
            // One lhs row (MR = 1): B column g is piece g % 4 of half g / 4 of the unit, the
            // lane's C columns pieces of half t / 2, scaled by that half's scale.
            const int off = ch * (int)Q::CHUNK_BYTES & 15;
            if (off & 2) q6_stage<true>(r0 + off, r1 + off, frag, zero, meta, u0, g, t, m0, m1, acc[0]);
            else q6_stage<false>(r0 + off, r1 + off, frag, zero, meta, u0, g, t, m0, m1, acc[0]);
        } else {
            auto unit = [&](int j) {
                const int u = u0 + j;
                const u32 qa = qm_word<E>(r0, j, t), qb = qm_word<E>(r1, j, t);
#pragma unroll
                for (int cg = 0; cg < CG; ++cg) {
                    const uint2 b = *(const uint2*)(bsrc[cg] + u * bstride[cg]);
                    const QmMeta mt = meta[u * MR + crow[cg]];
                    int c[4];
                    mma_u8s8(c, qa & 0x0F0F0F0Fu, qb & 0x0F0F0F0Fu, (qa >> 4) & 0x0F0F0F0Fu, (qb >> 4) & 0x0F0F0F0Fu,
                             b.x, b.y);
                    float v[2];
                    qm_join(c, m0, m1, mt.x * xk_mul[cg], mt.s, v);
                    const float xm = mt.xf * min_mul[cg];
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const u8* blk = (h ? r1 : r0) + Enc<E>::BYTES * j;
                        acc[cg][h] = fmaf(v[h], qm_f16(blk), acc[cg][h]);
                        if (E == ENC_Q4_1) acc[cg][h] = fmaf(qm_f16(blk + 2), xm, acc[cg][h]);
                    }
                }
            };
            // Units j and j + 1 of the chunk (j even) at one lhs row. (A chunk's units come in
            // pairs: rows on 16 bytes make K / 32 a multiple of 8 for Q4_0, of 4 for Q4_1.)
            auto pair = [&](int j) {
                const int u = u0 + j;
                const u32 qa = qm_word<E>(r0, j, t), qb = qm_word<E>(r1, j, t);
                const u32 qa1 = qm_word<E>(r0, j + 1, t), qb1 = qm_word<E>(r1, j + 1, t);
                const uint2 b0 = *(const uint2*)(bpair[0] + u * bpstride[0]);
                const uint2 b1 = *(const uint2*)(bpair[1] + u * bpstride[1]);
                int c[4];
                mma_u8s8(c, qa & 0x0F0F0F0Fu, qb & 0x0F0F0F0Fu, (qa >> 4) & 0x0F0F0F0Fu, (qb >> 4) & 0x0F0F0F0Fu, b0.x,
                         b0.y);
                mma_u8s8_acc(c, qa1 & 0x0F0F0F0Fu, qb1 & 0x0F0F0F0Fu, (qa1 >> 4) & 0x0F0F0F0Fu,
                             (qb1 >> 4) & 0x0F0F0F0Fu, b1.x, b1.y);
                const int mine = j + second;  // the lane's unit of the chunk
                const QmMeta mt = meta[u0 + mine];
                float v[2];
                qm_join(c, m0, m1, mt.x * xk_mul[0], mt.s, v);
                const float xm = mt.xf * min_mul[0];
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const u8* blk = (h ? r1 : r0) + Enc<E>::BYTES * mine;
                    acc[0][h] = fmaf(v[h], qm_f16(blk), acc[0][h]);
                    if (E == ENC_Q4_1) acc[0][h] = fmaf(qm_f16(blk + 2), xm, acc[0][h]);
                }
            };
            // Whole chunks without a bound check per unit, so loads of later units can be
            // scheduled ahead of earlier units' arithmetic.
            if (PAIRS) {
                if (u0 + QM_UNITS <= units) {
#pragma unroll
                    for (int j = 0; j < QM_UNITS; j += 2) pair(j);
                } else {
#pragma unroll
                    for (int j = 0; j < QM_UNITS; j += 2)
                        if (u0 + j < units) pair(j);
                }
            } else if (u0 + QM_UNITS <= units) {
#pragma unroll 4
                for (int j = 0; j < QM_UNITS; ++j) unit(j);
            } else {
#pragma unroll
                for (int j = 0; j < QM_UNITS; ++j)
                    if (u0 + j < units) unit(j);
            }
        }
        __syncwarp();  // every lane is done with the stage: refill it
        stage(buf);
        if (++tile_it == nch) {
            // The tile's sums: over the lane's columns (the quad, or each half of it at MR >= 2),
            // then over the group's K parts in order.
            tile_it = 0;
            const int tile = cur_tile;
            cur_tile += gstride;
#pragma unroll
            for (int cg = 0; cg < CG; ++cg)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    acc[cg][h] += __shfl_xor_sync(0xFFFFFFFFu, acc[cg][h], 1);
                    if (MR == 1) acc[cg][h] += __shfl_xor_sync(0xFFFFFFFFu, acc[cg][h], 2);
                }
            if (split > 1) {
#pragma unroll
                for (int cg = 0; cg < CG; ++cg) {
                    red[2 * CG * lane + 2 * cg] = acc[cg][0];
                    red[2 * CG * lane + 2 * cg + 1] = acc[cg][1];
                }
                asm volatile("bar.sync %0, %1;\n" ::"r"(1 + grp), "r"(32 * split) : "memory");
                if (part == 0)
                    for (int p = 1; p < split; ++p)
#pragma unroll
                        for (int cg = 0; cg < CG; ++cg) {
                            acc[cg][0] += red[64 * CG * p + 2 * CG * lane + 2 * cg];
                            acc[cg][1] += red[64 * CG * p + 2 * CG * lane + 2 * cg + 1];
                        }
                asm volatile("bar.sync %0, %1;\n" ::"r"(1 + grp), "r"(32 * split) : "memory");
            }
#pragma unroll
            for (int cg = 0; cg < CG; ++cg) {
                const int r = 2 * cg + t / 2;  // the lane's lhs row
                // With a folded rope (QRope) row g's pair is row g ^ 1, in lane (g ^ 1, t).
                float pair[2] = {0.f, 0.f};
                if (rope) {
                    pair[0] = __shfl_xor_sync(0xFFFFFFFFu, acc[cg][0], 4);
                    pair[1] = __shfl_xor_sync(0xFFFFFFFFu, acc[cg][1], 4);
                }
                if (rope && part == 0 && t % 2 == 0 && r < m) {
                    const int seg = qm_seg(sg, tile), n = sg.n[seg];
                    const int row = (tile - sg.first[seg]) * 16 + g;
                    if (row < n)
                        qrope_store<T>(sg.rope, qrope_at<T>(sg.rope, seg, r, row), seg, r, row, n, acc[cg][0], pair[0]);
                    if (row + 8 < n)
                        qrope_store<T>(sg.rope, qrope_at<T>(sg.rope, seg, r, row + 8), seg, r, row + 8, n, acc[cg][1],
                                       pair[1]);
                } else if (gated && part == 0 && t % 2 == 0 && r < m) {
                    // acc[cg][0] is gate row `row`, acc[cg][1] the same row of up
                    const int n = sg.n[0], row = tile * 8 + g;
                    if (row < n)
                        ((T*)sg.out[0])[(i64)r * n + row] = FromF32<T>::go(qn_gated<T>(acc[cg][0], acc[cg][1]));
                } else if (part == 0 && t % 2 == 0 && r < m) {
                    const int seg = qm_seg(sg, tile), n = sg.n[seg];
                    T* __restrict__ out = (T*)sg.out[seg];
                    const int row = (tile - sg.first[seg]) * 16 + g;
                    const i64 at = (i64)r * n + row;
                    if (row < n) out[at] = FromF32<T>::go(res ? acc[cg][0] + to_f32(res[at]) : acc[cg][0]);
                    if (row + 8 < n)
                        out[at + 8] = FromF32<T>::go(res ? acc[cg][1] + to_f32(res[at + 8]) : acc[cg][1]);
                }
                acc[cg][0] = acc[cg][1] = 0.f;
            }
        }
        if (++buf == nst) buf = 0, phase ^= 1u;
    }
#else
    __trap();  // launch/quant.rs launches these on sm_90 and later only
#endif
}

// Three blocks of 8 warps per SM at one row (80 registers, for the pairs of units), four at two
// rows (64), two at 3-4 rows (the fragments' shared memory allows two: 128), one at 5-8. Q6_K's
// one-row kernel two (128: the launcher's three weight stages of 224-byte slots hold a block to
// two at any K, and its stage reads each half's words once, in registers). `res` (added to the
// result) with one segment only.
#define QM_BLOCKS(E, MR) (E == ENC_Q6_K ? 2 : MR > 4 ? 1 : MR > 2 ? 2 : MR == 1 ? 3 : 4)
#define QGEMV_MMA1(NAME, E, MR, T, TS)                                                                    \
    extern "C" __global__ void __launch_bounds__(256, QM_BLOCKS(E, MR)) qgemv_mma_##NAME##_m##MR##TS(     \
        const __grid_constant__ QmMaps maps, const __grid_constant__ QmSegs segs, const T* lhs, int m, int k, \
        int split, const T* res) {                                                                        \
        qgemv_mma<E, MR, T>(maps, segs, lhs, m, k, split, res);                                           \
    }
#define QGEMV_MMA(NAME, E, MR) \
    QGEMV_MMA1(NAME, E, MR, float, ) QGEMV_MMA1(NAME, E, MR, bf16, _bf16) QGEMV_MMA1(NAME, E, MR, f16, _f16)
#define QGEMV_MMA_ROWS(MR) \
    QGEMV_MMA(q4_0, ENC_Q4_0, MR) QGEMV_MMA(q4_1, ENC_Q4_1, MR) QGEMV_MMA(q4_k, ENC_Q4_K, MR)
QGEMV_MMA_ROWS(1)
QGEMV_MMA(q6_k, ENC_Q6_K, 1)
QGEMV_MMA_ROWS(2)
QGEMV_MMA_ROWS(4)
QGEMV_MMA_ROWS(8)
