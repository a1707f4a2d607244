#line 1 "gemm_sm90p.cu"
// gemm_sm90p.cu: C[b] = A[b] @ B[b] on Hopper (sm_90a), the persistent, clustered and split-K
// form of gemm_sm90.cu (same operands, same epilogue, same results up to the f32 summation
// order of split-K). sm90_pipe.cuh (in front of this file) has the building blocks,
// gemm_sm90p_sched.cuh (next) the arguments and the tile scheduler, gemm_sm90p_epi.cuh (last,
// right before this file) the epilogue.
//
// Operands: A [M, K] row-major (K-major), read through a 3-D TMA map (k, row, batch); B [K, N]
// row-major read as it is (N-major, wgmma's transposed-B mode, TB = 1) through 64-column boxes,
// or transposed by the caller to Bt [N, K] (K-major, TB = 0). Out-of-range rows, columns and
// k are zero-filled by TMA, so any M, N and K % 8 == 0 work. 128-byte swizzled tiles.
//
// Work units: a cluster of CL = CM x CN CTAs (1, 2 x 1 or 2 x 2; CN = p.cn) takes CM row tiles of
// BM rows (128, or 64: see below) by CN column tiles of BN: the CTAs of a cluster row share an A
// tile, those of a cluster column a B tile, each loading 1/CN of its A tile and 1/CM of its B tile,
// multicast to the CTAs that share it, so each crosses L2 once per cluster. Such a cluster tile is
// numbered r = (batch, then a grouped raster: p.group row units per group, walked down the rows
// before moving one column tile right, so the units running at once share A rows and B columns in
// L2). The first p.dp_units units are the cluster tiles 0 .. dp_units - 1 over all of K; each later
// cluster tile is p.splits units, one per k-range (splits of one tile adjacent): all tiles split
// when the tiles alone leave SMs idle (dp_units = 0), or none. Cluster c takes units c,
// c + clusters, ... (a grid of one cluster per unit is the non-persistent form), then, with
// stream-K, its share of the last, partial wave (see Stream-K below).
// A row or column tile past the last one (M not a multiple of CM * BM, or the column tiles not of
// CN) is computed on zeros and never stored.
//
// Block: 3 warpgroups. Warpgroup 0 is the producer (setmaxnreg.dec to 40): one thread walks the
// block's (unit, k-tile) sequence and issues the TMA loads of a STAGES-deep ring guarded by
// mbarriers: full[s] (1 arrival: the producer's expect_tx of the whole stage, A plus all of B,
// completed by the bytes of its own loads and of the peers' multicasts) and empty[s]
// (8 * (CM + CN - 1) arrivals: lane 0 of each of the 8 consumer warps of every CTA this CTA's
// producer writes into, itself included, after the warp's wgmma.wait_group has retired the MMAs
// that read the stage; arrivals and waits at the default .cta semantics, see mbar_arrive_cluster).
// Warpgroups 1 and 2 (setmaxnreg.inc to 232) each compute 64 rows of the 128 x BN tile with
// m64nBNk16 wgmma into BN / 2 f32 registers per thread. The ring's stage and phase run on across
// units, so the producer loads the next unit while the consumers run the epilogue of the current
// one. Shared memory is written only by TMA and read only by wgmma (both async proxy).
//
// The 64-row tile (BM = 64, the `_m64` kernels, for products of at most 64 rows per batch:
// decode batches): with 128-row tiles the second consumer warpgroup would multiply TMA's zero
// rows, doubling the MMAs of products that should stream B at the memory's rate. Both consumer
// warpgroups take the tile's 64 rows, consumer c the columns c * BN / 2 .. (c + 1) * BN / 2 - 1
// with m64n(BN/2)k16 (BN / 4 accumulators per thread), its B descriptor offset into the stage's
// B tile: BN / 2 rows of 128 bytes for K-major Bt, BN / 128 boxes of 64 columns for N-major B
// (so BN = 64 takes Bt only). The same producer, ring (deeper: a stage is BN + 64 rows),
// barriers, scheduler, split-K and stream-K (partial tiles of 64 x BN f32, in the same
// fragment order over the 256 consumer threads) and direct epilogues; no staged epilogue.
//
// A ping-pong schedule (each consumer warpgroup on its own 128 x 128 tile, alternating, so that
// one's epilogue overlaps the other's mainloop) measured 0.62-0.64x cuBLAS on an H200 where this
// cooperative one ran 0.83-0.90x (bf16, 2048 to 8192 rows) and was deleted.
//
// Split-K (units past dp_units): split s sums k-tiles [s * k_per_split, (s + 1) * k_per_split).
// Stream-K (p.sk_len > 0, persistent grids only; then p.units == dp_units and every unit is a
// whole tile): the p.sk_tiles cluster tiles after the data-parallel ones are one run of
// sk_tiles * k_tiles k-tiles, cut into ranges of sk_len; cluster i takes range i (after its
// data-parallel units), one piece per tile the range touches, so the last, partial wave's work
// is spread evenly over the clusters. A tile's pieces (its parts) are numbered in range order.
// A split or stream-K piece writes its f32 partial tile to the workspace in fragment order
// (16-byte stores, coalesced across threads), fences, and bumps the tile's counter; the CTA
// that brings it to the tile's part count reads all partials back in part order 0, 1, ... (so
// the sum is deterministic), then runs the epilogue. A stream-K tile that one range covers
// whole is not split. Counters are zero at launch (the stream's ticket counters, or zeroed by
// the launcher) and the CTA that completes a tile puts its counter back to zero.
//
// Segments (p.segs > 1, Bt only): up to GP_SEGS weights read against the same A (a layer's q,
// k and v projections), each its own TMA map, column tiles and C: segment s owns column tiles
// p.seg_tiles[s] .. p.seg_tiles[s + 1] - 1, its columns p.seg_n[s] and C p.seg_c[s] (rows
// seg_n apart). One launch, one schedule, as if the weights were one matrix; an identity
// epilogue only (the launcher's condition).
//
// Gated (the `_gt` kernels, Bt only, clusters along N at most): C = act(A @ Wg^T) * (A @ Wu^T)
// of a gated MLP, maps m[0] = Wg and m[1] = Wu, both [seg_n[0], K]. A column tile of BN B rows
// makes BN / 2 columns of C: each consumer warpgroup's WN rows of the stage are WN / 2 rows of
// Wg then the same WN / 2 rows of Wu, so a thread holds the gate and the up product of the same
// columns in accumulator groups j and j + WN / 16; the epilogue rounds act(gate) and up to T
// and multiplies them (gemv_nt.cu's `_gated` sums the same way), and stores WN / 2 columns.
//
// Epilogue (prelude.cuh: bias, activation, clamp, beta * residual) in registers, stored
// straight to global memory: 32-bit pairs when p.pairs (N even, 4-byte aligned C, bias and
// residual), else element by element; or, in the _st kernels (opt-in), staged through a per-warp
// shared-memory tile into coalesced 16-byte stores (gemm_sm90p_epi.cuh: store_tile_staged).
// The _f32 kernels (F32) store f32 C instead, rows p.ldc apart (a column range of a wider
// result: qmatmul's weight chunks), with `C = acc + beta * residual` (f32, same layout) as their
// only epilogue (the launcher refuses bias, activation and clamp): qmatmul on many rows, whose
// result and residual are f32, with bf16 operands and f32 accumulation.

// Stages of the ring: (BM + BN) x 64 16-bit elements each. 128-row tiles: 4 x 48 KB or 7 x
// 32 KB (the 128-column tiles serve the memory-bound few-row shapes, where depth hides
// latency); 6 x 32 KB with the staged epilogue (ST), whose 18 KB of staging tiles do not fit
// next to 7. 64-row tiles (never staged): 9 x 24 KB (BN 128) or 12 x 16 KB (BN 64), the bytes
// in flight per SM that stream B at the memory's rate. Within the 227 KB a block may have;
// launch/gemm_sm90p.rs mirrors this.
template <int BM, int BN, bool ST> struct PRing {
    static const int stages = BM == 128 ? (BN == 256 ? 4 : (ST ? 6 : 7)) : (BN == 256 ? 5 : (BN == 128 ? 9 : 12));
};

// Hands stage s back to the producers of every CTA of the cluster that writes into it (`peers`,
// a mask of ranks: see the producer), once this warp's MMAs that read it have retired (all lanes
// have passed wgmma.wait_group).
__device__ __forceinline__ void release(u64* empty, int lane, int CL, u32 peers) {
    __syncwarp();
    if (lane == 0) {
        if (CL == 1) {
            mbar_arrive(empty);
        } else {
            for (u32 r = 0; r < (u32)CL; ++r)
                if (peers >> r & 1u) mbar_arrive_cluster(empty, r);
        }
    }
}

// PL: the launch's epilogue is the identity (no bias, activation, clamp or residual), so the
// kernel is compiled without that code (the `_pl` kernels): a tile's epilogue runs with a cold
// instruction cache, and in the general kernel its path jumps across the code of every option.
// F32: C is f32 (store_tile_f32; neither ST nor PL).
// BM: rows of a tile, 128 (each consumer warpgroup computes 64 rows by BN columns) or 64 (each
// computes the 64 rows by BN / 2 columns: see the top of the file); WN, the columns of a
// warpgroup's fragment. GT: the gated product (see the top of the file).
template <typename T, bool BF16, bool TB, int BM, int BN, bool ST, bool PL, bool F32, bool GT>
__device__ __forceinline__ void gemm_sm90p(const TmaMap* map_a, const TmaMaps* maps_b, const GemmPArgs& p) {
    static_assert(BM == 128 || BM == 64, "row tile");
    static_assert(!GT || (!TB && !ST && PL && !F32), "gated: Bt, direct stores, no other epilogue");
    constexpr int WN = BM == 128 ? BN : BN / 2;
    // The 64-row tile: no staged epilogue (a warpgroup's fragment may be narrower than the 64
    // columns of a staging tile), and N-major B only in whole 64-column boxes per warpgroup.
    static_assert(BM == 128 || (!ST && (!TB || WN % 64 == 0)), "64-row tile");
    constexpr int STAGES = PRing<BM, BN, ST>::stages;
    constexpr int A_BYTES = BM * P_BK * 2;
    constexpr int B_BYTES = BN * P_BK * 2;
    constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
    extern __shared__ u8 raw_smem[];
    // Stage buffers start on a 1024-byte boundary (the swizzle pattern repeats every 1024 bytes);
    // the offsets are the same in every CTA, as multicast needs.
    u8* smem = (u8*)(((u64)raw_smem + 1023) & ~(u64)1023);
    u64* full = (u64*)(smem + STAGES * STAGE_BYTES);
    u64* empty = full + STAGES;
    int* last_flag = (int*)(empty + STAGES);
    // Staged epilogue: 8 warps' staging tiles, 256 bytes past the ring (the barriers and flags
    // take at most 2 * 7 * 8 + 16 = 128 of them).
    static_assert(2 * STAGES * 8 + 32 <= 256, "barriers past the ring");
    u8* staging = smem + STAGES * STAGE_BYTES + 256;
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
    // Cluster size (1 or 2: the launch attribute) and this CTA's rank in its cluster.
    const int CL = (int)cluster_size();
    const int rank = CL > 1 ? (int)cluster_rank() : 0;
    const int cid = blockIdx.x / CL, clusters = gridDim.x / CL;
    // The cluster's CTAs: CM along M (sharing B) by CN = p.cn along N (sharing A), rank =
    // rm + CM * rn. This CTA's A tile goes to the CTAs of its row (mask_a), its B tile to those of
    // its column (mask_b); each loads 1/CN of the A tile and 1/CM of the B tile, multicast to
    // them. Before a producer refills a stage, every CTA it writes into must have released it.
    const int CN = p.cn, CM = CL / CN, rm = rank % CM, rn = rank / CM;
    u32 mask_a = 0, mask_b = 0;
    for (int j = 0; j < CN; ++j) mask_a |= 1u << (rm + CM * j);
    for (int i = 0; i < CM; ++i) mask_b |= 1u << (i + CM * rn);
    const u32 peers = mask_a | mask_b;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], 8 * (CM + CN - 1));
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    // The peer's barriers must be initialised before anything is multicast or arrived on them.
    if (CL > 1) cluster_sync();
    else __syncthreads();
    // Launched under programmatic stream serialization (gemm.pdl), the grid may start while the
    // stream's previous kernel drains: nothing in global memory that a kernel writes (A, the
    // epilogue's inputs, C, the workspace and counters) is read or written before the wait; the
    // setup above touches shared memory and the parameters only. With p.early_b (B is a
    // constant: a layer's weights) the producer issues B's loads of its first unit's first
    // STAGES k-tiles before it waits, so the weights stream while the kernel ahead finishes.
    // The next such grid may launch once this one has waited. (The launcher sets early_b only
    // with pdl and for Bt, a layer's weight as stored: the N-major kernels are compiled without
    // the early loads, which made their 256-column forms spill.)
    const bool early_b = !TB && p.early_b;
    if (p.pdl && !early_b) {
        pdl_wait();
        pdl_launch_dependents();
    }
    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        // Stage s's A tile (this CTA's share of it, multicast to its cluster row).
        auto load_a = [&](int s, const Work& w, int kt) {
            u8* sa = smem + s * STAGE_BYTES;
            if (CN > 1) {
                // Rows rn * BM / CN .. of the A tile (boxes of BM / CN rows).
                tma_load_3d_mc(sa + rn * (A_BYTES / CN), map_a, &full[s], kt * P_BK, w.mt * BM + rn * (BM / CN), w.z,
                               (u16)mask_a);
            } else {
                tma_load_3d(sa, map_a, &full[s], kt * P_BK, w.mt * BM, w.z);
            }
        };
        // Stage s's B tile (this CTA's share of it, multicast to its cluster column).
        auto load_b = [&](int s, const Work& w, int kt) {
            u8* sb = smem + s * STAGE_BYTES + A_BYTES;
            const int seg = GT ? 0 : seg_of(p, w.nt);
            const TmaMap* map_b = &maps_b->m[seg];
            const int nt = w.nt - p.seg_tiles[seg];  // the column tile within its segment
            if (GT) {
                // Each consumer's WN rows: WN / 2 rows of Wg, then the same rows of Wu (boxes
                // of WN / 2 rows; rows of 128 bytes).
                constexpr int H = WN / 2;
#pragma unroll
                for (int q = 0; q < BN / WN; ++q)
#pragma unroll
                    for (int h = 0; h < 2; ++h)
                        tma_load_3d(sb + (q * WN + h * H) * 128, &maps_b->m[h], &full[s], kt * P_BK,
                                    nt * (BN / 2) + q * H, w.z);
            } else if (TB) {
                // B [K, N]: BN / 64 boxes of 64 columns x 64 rows; this CTA loads its share
                // (boxes rm, rm + CM, ...) for its cluster column.
                for (int j = rm; j < BN / 64; j += CM) {
                    if (CM > 1)
                        tma_load_3d_mc(sb + j * (P_BK * 128), map_b, &full[s], nt * BN + 64 * j, kt * P_BK, w.z,
                                       (u16)mask_b);
                    else
                        tma_load_3d(sb + j * (P_BK * 128), map_b, &full[s], nt * BN + 64 * j, kt * P_BK, w.z);
                }
            } else if (CM > 1) {
                // Bt [N, K]: rows rm * BN / CM .. of the column tile (boxes of BN / CM rows).
                tma_load_3d_mc(sb + rm * (B_BYTES / CM), map_b, &full[s], kt * P_BK, nt * BN + rm * (BN / CM), w.z,
                               (u16)mask_b);
            } else {
                tma_load_3d(sb, map_b, &full[s], kt * P_BK, nt * BN, w.z);
            }
        };
        if (tid == 0) {
            int stage = 0;
            u32 phase = 0;
            int step = 0;
            Work w;
            // The first unit's k-tiles whose stage (the ring's first ones, free at launch)
            // was armed and given its B before the wait.
            int pre = 0;
            if (early_b) {
                int s0 = 0;
                if (next_unit(p, cid, clusters, rank, CL, s0, w)) {
                    pre = max(0, min(STAGES, w.k1 - w.k0));
                    for (int i = 0; i < pre; ++i) {
                        mbar_expect_tx(&full[i], STAGE_BYTES);
                        load_b(i, w, w.k0 + i);
                    }
                }
                pdl_wait();
                pdl_launch_dependents();
            }
            while (next_unit(p, cid, clusters, rank, CL, step, w)) {
                for (int kt = w.k0; kt < w.k1; ++kt) {
                    if (pre > 0) {
                        --pre;
                        load_a(stage, w, kt);
                    } else {
                        // Plain (.acquire.cta) even when the peer arrives: see mbar_arrive_cluster.
                        mbar_wait(&empty[stage], phase ^ 1);
                        mbar_expect_tx(&full[stage], STAGE_BYTES);
                        load_a(stage, w, kt);
                        load_b(stage, w, kt);
                    }
                    if (++stage == STAGES) stage = 0, phase ^= 1;
                }
            }
        } else if (early_b) {
            pdl_wait();
            pdl_launch_dependents();
        }
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
        if (early_b) {
            pdl_wait();
            pdl_launch_dependents();
        }
        // 128-row tiles: consumer 0 takes rows 0..63 of each tile, consumer 1 rows 64..127, each
        // over all BN columns. 64-row tiles: both take the 64 rows, consumer c columns
        // c * WN .. c * WN + WN - 1, reading the B tile from that column on: K-major Bt rows
        // (128 bytes each) or N-major 64-column boxes (P_BK * 128 bytes each).
        const int c = wg - 1;
        const int warp = tid / 32, lane = tid % 32;
        const int row_base = BM == 128 ? c * 64 : 0, col_base = BM == 128 ? 0 : c * WN;
        constexpr int A_OFF = BM == 128 ? 64 * 128 : 0;
        constexpr int B_OFF = BM == 128 ? 0 : (TB ? (WN / 64) * (P_BK * 128) : WN * 128);
        // This thread's index among the 256 that share a tile.
        const int ctid = threadIdx.x - 128;
        constexpr int NACC = WN / 2;  // accumulators per thread
        constexpr int TILE = BM * BN;  // f32 elements of a partial tile
        constexpr int SYNC_N = 256;  // threads per tile
        const u32 sync_id = 1;  // named barrier of the tile's threads
        float d[NACC];
        int stage = 0;
        u32 phase = 0;
        int step = 0;
        Work w;
        while (next_unit(p, cid, clusters, rank, CL, step, w)) {
            const int k0 = w.k0, k1 = w.k1;
#pragma unroll
            for (int i = 0; i < NACC; ++i) d[i] = 0.f;
            if (!F32 && p.epi.residual) prefetch_residual<T, BM, BN, WN>(p, w, row_base, col_base, warp, lane);
            int prev = 0;
            for (int kt = k0; kt < k1; ++kt) {
                mbar_wait(&full[stage], phase);
                const u8* sa = smem + stage * STAGE_BYTES + c * A_OFF;
                const u8* sb = smem + stage * STAGE_BYTES + A_BYTES + c * B_OFF;
                wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < P_BK / 16; ++kk) {
                    // K-major B: the k-th 16-element slice is 32 bytes into each row; N-major B:
                    // 16 rows (2048 bytes) further down each box.
                    const u64 desc_b = TB ? sw128_desc_nmajor(sb) + kk * (2048 >> 4) : sw128_desc(sb) + 2 * kk;
                    const u32 scale_d = (kt > k0 || kk > 0) ? 1u : 0u;
                    Wgmma<WN, BF16, TB>::run(d, sw128_desc(sa) + 2 * kk, desc_b, scale_d);
                }
                wgmma_commit();
                // Keep this k-tile's MMAs in flight; once the previous tile's have retired, its
                // stage can be refilled.
                wgmma_wait1();
                if (kt > k0) release(&empty[prev], lane, CL, peers);
                prev = stage;
                if (++stage == STAGES) stage = 0, phase ^= 1;
            }
            wgmma_wait0();
            if (k1 > k0) release(&empty[prev], lane, CL, peers);
            // The cluster's row or column tile past the last one.
            if (w.mt >= p.m_tiles || w.nt >= p.n_tiles) continue;
            if (w.slot >= 0) {
                const int tile = w.slot;
                const int stride = p.sk_len > 0 ? p.sk_stride : p.splits;
                float* slot = (float*)p.ws + (i64)tile * stride * TILE;
                // Fragment order: 4 floats per thread and step, SYNC_N threads per step.
                float* mine = slot + (i64)w.split * TILE + ctid * 4;
#pragma unroll
                for (int j = 0; j < NACC / 4; ++j)
                    st_cg4(mine + j * (SYNC_N * 4), d[j * 4], d[j * 4 + 1], d[j * 4 + 2], d[j * 4 + 3]);
                __threadfence();
                int* flag = last_flag;
                named_sync(sync_id, SYNC_N);
                if (ctid == 0) {
                    unsigned int* counter = (unsigned int*)p.counters + tile;
                    const bool last = atomicAdd(counter, 1u) == (unsigned int)(w.parts - 1);
                    // the last arrival leaves the counter at zero for the next launch on the
                    // stream (launch/tickets.rs: the counters are the stream's, zeroed once)
                    if (last) *counter = 0u;
                    *flag = last;
                }
                named_sync(sync_id, SYNC_N);
                // (Thread 0 rewrites the flag only after the first sync of a later split unit,
                // which every thread reaches after reading it.)
                if (!*flag) continue;
                __threadfence();
#pragma unroll
                for (int i = 0; i < NACC; ++i) d[i] = 0.f;
                for (int s = 0; s < w.parts; ++s) {
                    const float* part = slot + (i64)s * TILE + ctid * 4;
#pragma unroll
                    for (int j = 0; j < NACC / 4; ++j)
                        ld_cg4_add(part + j * (SYNC_N * 4), d[j * 4], d[j * 4 + 1], d[j * 4 + 2], d[j * 4 + 3]);
                }
            }
            const int seg = GT ? 0 : seg_of(p, w.nt);
            const int nt = w.nt - p.seg_tiles[seg];
            const i64 n = p.seg_n[seg];
            T* const cs = (T*)p.seg_c[seg];
            const i64 row0 = (i64)w.mt * BM + row_base + warp * 16 + lane / 4;
            const bool has0 = row0 < p.m, has1 = row0 + 8 < p.m;
            if (GT) {
                // Groups j < WN / 16 hold the gate, j + WN / 16 the up product of the same columns.
                constexpr int HALF = NACC / 2;
                if (p.epi.act != EPI_NONE) act_all_1exp<HALF>(p.epi.act, d);
#pragma unroll
                for (int i = 0; i < HALF; ++i) d[i] = __fmul_rn(round_to_t<T>(d[i]), round_to_t<T>(d[HALF + i]));
                const int col0 = nt * (BN / 2) + col_base / 2 + (lane % 4) * 2;
                const int cols = (int)min(n - col0, (i64)(WN / 2));
                store_tile<T, WN / 2, false>(d, p, cs, n, (i64)w.z * p.stride_c + row0 * n + col0, col0, cols, has0, has1);
                continue;
            }
            const int col0 = nt * BN + col_base + (lane % 4) * 2;
            const int cols = (int)min(n - col0, (i64)WN);
            if (F32) {
                const i64 offset = (i64)w.z * p.stride_c + row0 * p.ldc + col0;
                if (p.epi.residual)
                    store_tile_f32<WN, true>(d, p, offset, cols, has0, has1);
                else
                    store_tile_f32<WN, false>(d, p, offset, cols, has0, has1);
            } else {
                const i64 offset = (i64)w.z * p.stride_c + row0 * n + col0;
                if (!PL) epi_math<T, WN>(d, p, col0, cols);
                if (ST) {
                    const i64 row_w = row0 - lane / 4;
                    const i64 base_w = (i64)w.z * p.stride_c + row_w * n + (i64)nt * BN;
                    if (!PL && p.epi.residual)
                        store_tile_staged<T, BN, true>(d, p, cs, n, offset, col0, cols, has0, has1, row_w, base_w, (i64)nt * BN, staging);
                    else
                        store_tile_staged<T, BN, false>(d, p, cs, n, offset, col0, cols, has0, has1, row_w, base_w, (i64)nt * BN, staging);
                } else if (!PL && p.epi.residual) {
                    store_tile<T, WN, true>(d, p, cs, n, offset, col0, cols, has0, has1);
                } else {
                    store_tile<T, WN, false>(d, p, cs, n, offset, col0, cols, has0, has1);
                }
            }
        }
    }
    // No CTA may exit while its peer can still arrive on its barriers.
    if (CL > 1) cluster_sync();
}

#define GEMMP_ENTRY_ALL(NAME, T, BF16, TB, BM, BN, ST, PL, F32, GT)                                  \
    extern "C" __global__ void __launch_bounds__(384, 1)                                                  \
        NAME(const __grid_constant__ TmaMap map_a, const __grid_constant__ TmaMaps maps_b, GemmPArgs p) { \
        GEMMP_BODY(T, BF16, TB, BM, BN, ST, PL, F32, GT)                                            \
    }
#define GEMMP_ENTRY_OUT(NAME, T, BF16, TB, BM, BN, ST, PL, F32) GEMMP_ENTRY_ALL(NAME, T, BF16, TB, BM, BN, ST, PL, F32, false)
#define GEMMP_ENTRY(NAME, T, BF16, TB, BN, ST, PL) GEMMP_ENTRY_OUT(NAME, T, BF16, TB, 128, BN, ST, PL, false)
#define GEMMP_ENTRY64(NAME, T, BF16, TB, BN, PL) GEMMP_ENTRY_OUT(NAME, T, BF16, TB, 64, BN, false, PL, false)
#define GEMMP_ENTRY_GT(NAME, T, BF16, BM, BN) GEMMP_ENTRY_ALL(NAME, T, BF16, false, BM, BN, false, true, false, true)
// wgmma and setmaxnreg exist on sm_90a only; elsewhere the entry points trap (the launcher never
// uses them there).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define GEMMP_BODY(T, BF16, TB, BM, BN, ST, PL, F32, GT) gemm_sm90p<T, BF16, TB, BM, BN, ST, PL, F32, GT>(&map_a, &maps_b, p);
#else
#define GEMMP_BODY(T, BF16, TB, BM, BN, ST, PL, F32, GT) asm volatile("trap;");
#endif
// gemm_sm90p_<type>_<b: B [K, N] as given | t: Bt [N, K]>[_m64: 64-row tile]_n<BN>[_st: staged
// epilogue][_pl: no epilogue operations][_f32: f32 C, bf16 W^T products only][_gt: gated, Bt
// only, an activation of the gate at most]; the cluster size
// is the launch's. The 64-row tiles: BN 128 for both layouts, BN 64 for Bt only (a warpgroup's
// 32 columns of an N-major box would start inside its 128-byte swizzle row).
// sources.rs builds two families from this file, one per type (GP_BF16 defined or not), so a
// process compiles only the kernels of the types it multiplies.
#if defined(GP_BF16)
GEMMP_ENTRY(gemm_sm90p_bf16_b_n256, bf16, true, true, 256, false, false)
GEMMP_ENTRY(gemm_sm90p_bf16_b_n128, bf16, true, true, 128, false, false)
GEMMP_ENTRY(gemm_sm90p_bf16_t_n256, bf16, true, false, 256, false, false)
GEMMP_ENTRY(gemm_sm90p_bf16_t_n128, bf16, true, false, 128, false, false)
GEMMP_ENTRY(gemm_sm90p_bf16_b_n256_st, bf16, true, true, 256, true, false)
GEMMP_ENTRY(gemm_sm90p_bf16_b_n128_st, bf16, true, true, 128, true, false)
GEMMP_ENTRY(gemm_sm90p_bf16_t_n256_st, bf16, true, false, 256, true, false)
GEMMP_ENTRY(gemm_sm90p_bf16_t_n128_st, bf16, true, false, 128, true, false)
GEMMP_ENTRY(gemm_sm90p_bf16_b_n256_pl, bf16, true, true, 256, false, true)
GEMMP_ENTRY(gemm_sm90p_bf16_b_n256_st_pl, bf16, true, true, 256, true, true)
GEMMP_ENTRY(gemm_sm90p_bf16_b_n128_pl, bf16, true, true, 128, false, true)
GEMMP_ENTRY(gemm_sm90p_bf16_b_n128_st_pl, bf16, true, true, 128, true, true)
GEMMP_ENTRY(gemm_sm90p_bf16_t_n256_pl, bf16, true, false, 256, false, true)
GEMMP_ENTRY(gemm_sm90p_bf16_t_n256_st_pl, bf16, true, false, 256, true, true)
GEMMP_ENTRY(gemm_sm90p_bf16_t_n128_pl, bf16, true, false, 128, false, true)
GEMMP_ENTRY(gemm_sm90p_bf16_t_n128_st_pl, bf16, true, false, 128, true, true)
GEMMP_ENTRY_OUT(gemm_sm90p_bf16_t_n256_f32, bf16, true, false, 128, 256, false, true, true)
GEMMP_ENTRY_OUT(gemm_sm90p_bf16_t_n128_f32, bf16, true, false, 128, 128, false, true, true)
GEMMP_ENTRY64(gemm_sm90p_bf16_b_m64_n128, bf16, true, true, 128, false)
GEMMP_ENTRY64(gemm_sm90p_bf16_b_m64_n128_pl, bf16, true, true, 128, true)
GEMMP_ENTRY64(gemm_sm90p_bf16_t_m64_n128, bf16, true, false, 128, false)
GEMMP_ENTRY64(gemm_sm90p_bf16_t_m64_n128_pl, bf16, true, false, 128, true)
GEMMP_ENTRY64(gemm_sm90p_bf16_t_m64_n64, bf16, true, false, 64, false)
GEMMP_ENTRY64(gemm_sm90p_bf16_t_m64_n64_pl, bf16, true, false, 64, true)
GEMMP_ENTRY_OUT(gemm_sm90p_bf16_t_m64_n128_f32, bf16, true, false, 64, 128, false, true, true)
GEMMP_ENTRY_OUT(gemm_sm90p_bf16_t_m64_n64_f32, bf16, true, false, 64, 64, false, true, true)
GEMMP_ENTRY_GT(gemm_sm90p_bf16_t_n256_gt, bf16, true, 128, 256)
GEMMP_ENTRY_GT(gemm_sm90p_bf16_t_n128_gt, bf16, true, 128, 128)
GEMMP_ENTRY_GT(gemm_sm90p_bf16_t_m64_n128_gt, bf16, true, 64, 128)
GEMMP_ENTRY_GT(gemm_sm90p_bf16_t_m64_n64_gt, bf16, true, 64, 64)
#else
GEMMP_ENTRY(gemm_sm90p_f16_b_n256, f16, false, true, 256, false, false)
GEMMP_ENTRY(gemm_sm90p_f16_b_n128, f16, false, true, 128, false, false)
GEMMP_ENTRY(gemm_sm90p_f16_t_n256, f16, false, false, 256, false, false)
GEMMP_ENTRY(gemm_sm90p_f16_t_n128, f16, false, false, 128, false, false)
GEMMP_ENTRY(gemm_sm90p_f16_b_n256_st, f16, false, true, 256, true, false)
GEMMP_ENTRY(gemm_sm90p_f16_b_n128_st, f16, false, true, 128, true, false)
GEMMP_ENTRY(gemm_sm90p_f16_t_n256_st, f16, false, false, 256, true, false)
GEMMP_ENTRY(gemm_sm90p_f16_t_n128_st, f16, false, false, 128, true, false)
GEMMP_ENTRY(gemm_sm90p_f16_b_n256_pl, f16, false, true, 256, false, true)
GEMMP_ENTRY(gemm_sm90p_f16_b_n256_st_pl, f16, false, true, 256, true, true)
GEMMP_ENTRY(gemm_sm90p_f16_b_n128_pl, f16, false, true, 128, false, true)
GEMMP_ENTRY(gemm_sm90p_f16_b_n128_st_pl, f16, false, true, 128, true, true)
GEMMP_ENTRY(gemm_sm90p_f16_t_n256_pl, f16, false, false, 256, false, true)
GEMMP_ENTRY(gemm_sm90p_f16_t_n256_st_pl, f16, false, false, 256, true, true)
GEMMP_ENTRY(gemm_sm90p_f16_t_n128_pl, f16, false, false, 128, false, true)
GEMMP_ENTRY(gemm_sm90p_f16_t_n128_st_pl, f16, false, false, 128, true, true)
GEMMP_ENTRY64(gemm_sm90p_f16_b_m64_n128, f16, false, true, 128, false)
GEMMP_ENTRY64(gemm_sm90p_f16_b_m64_n128_pl, f16, false, true, 128, true)
GEMMP_ENTRY64(gemm_sm90p_f16_t_m64_n128, f16, false, false, 128, false)
GEMMP_ENTRY64(gemm_sm90p_f16_t_m64_n128_pl, f16, false, false, 128, true)
GEMMP_ENTRY64(gemm_sm90p_f16_t_m64_n64, f16, false, false, 64, false)
GEMMP_ENTRY64(gemm_sm90p_f16_t_m64_n64_pl, f16, false, false, 64, true)
GEMMP_ENTRY_GT(gemm_sm90p_f16_t_n256_gt, f16, false, 128, 256)
GEMMP_ENTRY_GT(gemm_sm90p_f16_t_n128_gt, f16, false, 128, 128)
GEMMP_ENTRY_GT(gemm_sm90p_f16_t_m64_n128_gt, f16, false, 64, 128)
GEMMP_ENTRY_GT(gemm_sm90p_f16_t_m64_n64_gt, f16, false, 64, 64)
#endif
