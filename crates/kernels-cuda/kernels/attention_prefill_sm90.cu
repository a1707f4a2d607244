#line 1 "attention_prefill_sm90.cu"
// attention_prefill_sm90.cu: paged_attention for prefill-shaped batches on Hopper (sm_90a) with
// wgmma, in the manner of FlashAttention-3: the same calls, masks and results as
// attention_prefill.cu (the mma.sync kernel, which every other device and every call this
// kernel is not compiled for still takes), with 128 query rows per CTA and 128-key tiles.
// sources.rs puts attention_args.cuh, sm90_pipe.cuh (mbarriers, descriptors, wgmma),
// attention_prefill.cuh (what both prefill kernels share) and attention_prefill_sm90.cuh (this
// kernel's building blocks) in front.
//
// Block: 3 warpgroups (384 threads).
// - Warpgroup 0, the producer (setmaxnreg.dec to 24), copies with cp.async: first the Q tile
//   (128 rows; rows past the sequence zero-filled), then the key tiles into an S-stage ring of
//   (K, V) stages, K and V each with its own `full` and `empty` barriers, K one tile ahead of V
//   (K of tile u, then V of tile u - 1), as the consumers use them. For K of tile u, thread i
//   looks up the page of key k0 + i (one table read per key row; the cache is [pages, 2, layers,
//   page_size, kv_heads, D], so a key row is contiguous and consecutive keys are not) and
//   publishes the row's element offset in the producer's own ring (a key without a page is
//   zero-filled); then the 128 threads copy the rows' 16-byte chunks. V of the tile reuses the offsets. Each K or V copy is one cp.async group. Once a
//   thread's group has landed (cp.async.wait_group, checked before each new group), the thread
//   fences its writes to the async proxy (wgmma reads shared memory through it) and arrives on
//   the group's `full` barrier (128 arrivals; the Q tile has its own barrier, `qbar`).
//   With pages of a multiple of 64 keys (PrefillArgs::tma, attention.prefill_tma) one thread
//   of the producer loads instead with TMA (cp.async.bulk.tensor; the host's tensor maps over
//   the cache as [page * 2 * layers + kv * layers + layer, page_size, kv_heads, D] and over Q,
//   in boxes of 64 rows x 64 dims written with the 128-byte swizzle below): the Q tile, then per
//   tile (key tiles start at multiples of 128, so each 64-key half lies in one page) the K boxes
//   and the V boxes in the same order, every full barrier taking its one arrival with the
//   tile's bytes; a half without a page is read past the tensor, which TMA fills with zeros.
// - Warpgroups 1 and 2, the consumers (setmaxnreg.inc to 240), own query rows 0..63 and 64..127
//   of the tile; warp w of a consumer owns 16 of them, lane l rows l/4 and l/4 + 8 (the wgmma
//   accumulator layout, as in gemm_sm90p.cu). Per key tile:
//     S = Q K^T      m64n128k16 wgmma, D / 16 steps, both operands from shared memory (Q the
//                    K-major A, K rows the K-major B), 64 f32 accumulators per thread,
//     x = S * scale (or softcap * tanh(S * scale / softcap)), in log2 units, -inf where masked
//                    (a positive scale is applied with the max in the exp2's FFMA),
//     online softmax running row max m and partial row sum l in registers (a row lives in the
//                    4 lanes of a quad, so the max is two shuffles away), p = 2^(x - m),
//     O += P V       m64nDk16 wgmma with A from registers: the accumulators of keys 16k..16k+15
//                    (two n8 column groups) are, packed to 16 bits, the A fragment of step k;
//                    V [keys, D] is the N-major B (transpose bit set).
//   The two products overlap as in FlashAttention-3 (one warpgroup's tiles in flight together):
//   tile t's S = Q K^T is issued, then tile t - 1's P V; the softmax of tile t runs once S has
//   landed (wgmma.wait_group 1) while P V finishes; after wait_group 0, O is rescaled by tile
//   t's factors and tile t's P becomes the next A fragments. (D = 128 with softcap runs one tile
//   at a time: its tanh did not fit the registers beside three tiles' worth.) Accumulators and
//   fragments are fenced (fa_fence_regs) around each issue and wait. Lane 0 of each consumer
//   warp releases a tile's K (arrives on `empty_k`, 8 arrivals) once its S has landed, and its
//   V once its P V has retired; the producer waits for these before refilling a stage. So a
//   stage's K is refilled while its V is still being read, and K arrives well ahead of its S,
//   V ahead of its P V. The tiles a consumer's rows see are a run; the others it only waits for
//   and releases, so the barriers' phases stay in step. Which keys of a tile have a page (a key
//   without one is masked) each consumer warp reads from the page table itself: once for all
//   its tiles before its loop (a lane per page, a vote), and tile by tile, a tile ahead, only
//   where a page is missing. No shared-memory word passes from producer threads to consumer
//   threads beside the tiles, which only the tensor cores read (compute-sanitizer's racecheck
//   does not take mbarrier phases as ordering threads' accesses, and flagged such words); a
//   check before every tile's S cost 5-13% (benchmarks/history-3.md).
// Finally O / l is stored; a row with no visible key stores 0, as the reference does.
//
// Shared tiles (Q, K, V) are the wgmma canonical layout with the 128-byte swizzle: rows of
// 64 elements (128 bytes) in blocks of 64 columns, block j of a tile of R rows R * 128 bytes
// after block j - 1; 16-byte chunk c of row r lies at chunk c ^ (r % 8) of its 128-byte row, and
// every block starts 1024-byte aligned. Read K-major (Q, K: rows of the D axis) it is what
// sw128_desc describes (8-row groups 1024 bytes apart, the k-th 16-element slice 32 bytes on,
// the next 64 columns one block on); read N-major (V: the key axis is K, the D axis N) it is
// gemm_sm90p.cu's B layout with blocks of FA_KEYS rows (64-column groups FA_KEYS * 128 bytes
// apart, 16-key slices 2048 bytes apart).
//
// Rows, keys, masks, slots, skipped tiles and out-of-range indices follow attention_prefill.cu
// with 128-row tiles: the host launches tokens / 128 + batch tile slots per head, slot
// offsets[b] / 128 + b is sequence b's first, a CTA whose slot is past its sequence's rows exits
// at once, and slots are handed out last first. Key tiles outside every row's range are never
// loaded; the per-element mask runs only on tiles that cross a bound of one of the consumer's
// rows or hold a key without a page.

template <int D, bool BF16, bool CAP, bool PP>
__device__ __forceinline__ void attention_prefill_sm90(const PrefillArgs& p) {
    const AttnArgs& a = p.a;
    const i64 slots = p.slots;
    const bool tma = p.tma != 0;
    constexpr int S = FaStages<D>::S;
    constexpr int CPR = D / 8;                      // 16-byte chunks per row
    constexpr int Q_BYTES = FA_ROWS * D * 2;
    constexpr int KV_BYTES = FA_KEYS * D * 2;       // one K or V tile
    constexpr int LOADS = FA_KEYS * CPR / 128;      // chunks per producer thread per K (or V) tile
    extern __shared__ u8 fa_raw[];
    u8* smem = (u8*)(((u64)fa_raw + 1023) & ~(u64)1023);
    const u32 sq = s_addr(smem);                                  // Q tile
    const u32 skv = sq + Q_BYTES;                                 // stage s: K at skv + 2s KV_BYTES, V after it
    u64* full_k = (u64*)(smem + Q_BYTES + 2 * S * KV_BYTES);      // [S]: K of the stage landed
    u64* full_v = full_k + S;                                     // [S]: V of the stage landed
    u64* empty_k = full_v + S;                                    // [S]: K of the stage read
    u64* empty_v = empty_k + S;                                   // [S]: V of the stage read
    u64* qbar = empty_v + S;                                      // the Q tile landed
    u64* rowoff = qbar + 1;                                       // [FA_ROWOFF][FA_KEYS] (producer's)

    const int tid = threadIdx.x, wg = tid / 128;
    PfTile tile;
    if (!pf_tile<FA_ROWS>(a, slots, tile)) return;  // uniform per CTA
    const i64 h = tile.h, b = tile.b, r0 = tile.r0, rows = tile.rows, total = tile.total, pos0 = tile.pos0;
    // Keys any row of the tile sees. Tiles start at multiples of FA_KEYS (with pages of a
    // multiple of 64 keys, each 64-key half of a tile lies in one page: one TMA box); keys before
    // a row's range are masked.
    const PfKeys keys = pf_keys(a, tile);
    const u32 k_begin = keys.lo & ~(u32)(FA_KEYS - 1), k_end = keys.end;
    const int tiles = k_end > keys.lo ? (int)((k_end - k_begin + FA_KEYS - 1) / FA_KEYS) : 0;

    if (tid == 0) {
        // The full barriers: one arrival with the bytes expected under TMA, else one per
        // producer thread.
        const u32 fills = tma ? 1 : 128;
        for (int s = 0; s < S; ++s) {
            mbar_init(&full_k[s], fills);
            mbar_init(&full_v[s], fills);
            mbar_init(&empty_k[s], 8);
            mbar_init(&empty_v[s], 8);
        }
        mbar_init(qbar, fills);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) {
        // ---- producer ------------------------------------------------------------------------
        asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n");
        if (tma) {
            // One thread issues every load: the Q tile (4 or 2 boxes; rows past the tensor are
            // zeros, rows of the next sequence are loaded but never stored), then per tile u the
            // K boxes of tile u and the V boxes of tile u - 1 (K one tile ahead, as above), each
            // 64 keys of one page and 64 dims. Each full barrier takes the one arrival with the
            // tile's bytes. A box without a page (past the keys, past the table, or a page id past the
            // cache) is read at slab `slabs`, past the tensor: TMA writes zeros and counts its
            // bytes all the same.
            if (tid == 0) {
                const TmaMap* mkv = &p.kv;
                const TmaMap* mq = &p.q;
                const i64 slabs = a.pages * 2 * a.layers;  // the host checked it fits an int
                const u32 ps = (u32)a.page_size;
                const int kvh = (int)(h / (a.q_heads / a.kv_heads));
                const u32* table = (const u32*)a.table + b * a.width;
                if (tiles > 0) {
                    mbar_expect_tx(qbar, Q_BYTES);
#pragma unroll
                    for (int j = 0; j < D / 64; ++j)
#pragma unroll
                        for (int hh = 0; hh < FA_ROWS / 64; ++hh)
                            fa_tma_3d(sq + j * (FA_ROWS * 128) + hh * (64 * 128), mq, qbar, 64 * j, (int)h, (int)(r0 + 64 * hh));
                }
                int kslab[2] = {0, 0}, ktok[2] = {0, 0};  // tile u's boxes (K: kslab, V: + layers)
                int vslab[2] = {0, 0}, vtok[2] = {0, 0};  // tile u - 1's V boxes
                for (int u = 0; u <= tiles; ++u) {
                    if (u < tiles) {
                        const int st = u % S;
                        const u32 k0 = k_begin + (u32)u * FA_KEYS;
#pragma unroll
                        for (int bx = 0; bx < 2; ++bx) {
                            const u32 j = k0 + 64u * bx;
                            i64 slab = slabs;
                            if (j < k_end && j >= k0) {  // (no wrap past 2^32)
                                const u32 page = table[j / ps];
                                if (page < (u64)a.pages) slab = (i64)page * 2 * a.layers + a.layer;
                            }
                            kslab[bx] = (int)slab;
                            ktok[bx] = (int)(j % ps);
                        }
                        mbar_wait(&empty_k[st], ((u32)(u / S) & 1) ^ 1);
                        mbar_expect_tx(&full_k[st], KV_BYTES);
                        const u32 sk = skv + (u32)st * (2 * KV_BYTES);
#pragma unroll
                        for (int bx = 0; bx < 2; ++bx)
#pragma unroll
                            for (int j = 0; j < D / 64; ++j)
                                fa_tma_4d(sk + j * (FA_KEYS * 128) + bx * (64 * 128), mkv, &full_k[st], 64 * j, kvh, ktok[bx], kslab[bx]);
                    }
                    if (u >= 1) {
                        const int v = u - 1, st = v % S;
                        mbar_wait(&empty_v[st], ((u32)(v / S) & 1) ^ 1);
                        mbar_expect_tx(&full_v[st], KV_BYTES);
                        const u32 sv = skv + (u32)st * (2 * KV_BYTES) + KV_BYTES;
#pragma unroll
                        for (int bx = 0; bx < 2; ++bx)
#pragma unroll
                            for (int j = 0; j < D / 64; ++j)
                                fa_tma_4d(sv + j * (FA_KEYS * 128) + bx * (64 * 128), mkv, &full_v[st], 64 * j, kvh, vtok[bx], vslab[bx]);
                    }
#pragma unroll
                    for (int bx = 0; bx < 2; ++bx) {
                        vslab[bx] = kslab[bx] < slabs ? kslab[bx] + (int)a.layers : (int)slabs;
                        vtok[bx] = ktok[bx];
                    }
                }
                // No load outlives the CTA: the consumers wait for every K and V tile, and with
                // tiles consumer 0 for Q (its first row sees a key: t_lo = 0 < t_hi).
            }
            return;
        }
        const PfKv kv = pf_kv<D>(a, tile);
        const u16* cache = (const u16*)a.blocks;
        const u16* q = (const u16*)a.q;

        for (int c = tid; c < FA_ROWS * CPR; c += 128) {
            const int r = c / CPR, ch = c % CPR;
            const bool ok = r < rows;
            const u16* src = ok ? q + ((u64)(r0 + r) * a.q_heads + h) * D + ch * 8 : q;
            fa_cp16(sq + fa_at<FA_ROWS>(r, ch), src, ok);
        }
        fa_commit();

        // Cp.async groups in commit order: 0 the Q tile, 1 K of tile 0, then for u = 1..tiles
        // K of tile u (2u; an empty group for u = tiles) and V of tile u - 1 (2u + 1): K runs a
        // tile ahead of V, as the consumers need them. `sig` groups have been announced;
        // announce(n) announces those below n, which have landed.
        int sig = 0, committed = 0;
        auto bar_of = [&](int g) -> u64* {
            if (g == 0) return qbar;
            if (g == 1) return &full_k[0];
            const int u = g / 2;
            if (g % 2 == 0) return u < tiles ? &full_k[u % S] : nullptr;
            return &full_v[(u - 1) % S];
        };
        auto announce = [&](int n) {
            if (sig >= n) return;
            fence_proxy_async_smem();
            for (; sig < n; ++sig) {
                u64* bar = bar_of(sig);
                if (bar) mbar_arrive(bar);
            }
        };
        auto commit = [&]() { fa_commit(), ++committed; };
        commit();  // the Q tile
        for (int u = 0; tiles > 0 && u <= tiles; ++u) {
            if (u < tiles) {
                // K of tile u. Thread i looks up key k0 + i: its element offset (~0: no page)
                // into the producer's ring of offsets.
                fa_wait<1>();
                announce(committed - 1);
                const int st = u % S, ro = u % FA_ROWOFF;
                mbar_wait(&empty_k[st], ((u32)(u / S) & 1) ^ 1);
                const u32 k0 = k_begin + (u32)u * FA_KEYS;
                u64 at;
                const bool ok = pf_key_at(kv, k0 + (u32)tid, k0, k_end, 0, at);
                rowoff[ro * FA_KEYS + tid] = ok ? at : ~0ull;
                named_sync(1, 128);
                const u32 sk = skv + (u32)st * (2 * KV_BYTES);
#pragma unroll 4
                for (int i = 0; i < LOADS; ++i) {
                    const int c = tid + i * 128, r = c / CPR, ch = c % CPR;
                    const u64 off = rowoff[ro * FA_KEYS + r];
                    const bool has = off != ~0ull;
                    fa_cp16(sk + fa_at<FA_KEYS>(r, ch), cache + (has ? off + ch * 8 : 0), has);
                }
            }
            commit();
            if (u >= 1) {
                // V of tile u - 1, at the offsets its K step published (the ring holds
                // FA_ROWOFF > S tiles' offsets: a thread may still read these while another
                // publishes tile u + 1's).
                fa_wait<1>();
                announce(committed - 1);
                const int v = u - 1, st = v % S, ro = v % FA_ROWOFF;
                mbar_wait(&empty_v[st], ((u32)(v / S) & 1) ^ 1);
                const u32 sv = skv + (u32)st * (2 * KV_BYTES) + KV_BYTES;
#pragma unroll 4
                for (int i = 0; i < LOADS; ++i) {
                    const int c = tid + i * 128, r = c / CPR, ch = c % CPR;
                    const u64 off = rowoff[ro * FA_KEYS + r];
                    const bool has = off != ~0ull;
                    fa_cp16(sv + fa_at<FA_KEYS>(r, ch), cache + (has ? off + kv.value_off + ch * 8 : 0), has);
                }
                commit();
            }
        }
        fa_wait<0>();
        announce(committed);
        return;
    }

    // ---- consumers ---------------------------------------------------------------------------
    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n");
    const int c = wg - 1;                                  // rows 64c..64c+63 of the tile
    const int wt = tid - 128 * wg, warp = wt / 32, lane = wt % 32;
    const int g = lane / 4, tig = lane % 4;                // quad (row) and lane in quad
    const i64 wrow0 = 64 * c;
    const i64 wrows = rows - wrow0 < 0 ? 0 : (rows - wrow0 < 64 ? rows - wrow0 : 64);

    // The keys this consumer's rows see: [wlo_min, whi_max) in all, [wlo_max, whi_min) by every
    // row (tiles inside need no mask).
    i64 wlo_min = 0, whi_min = 0, wlo_max = 0, whi_max = 0;
    if (wrows > 0) {
        pf_range(a, pos0 + wrow0, total, wlo_min, whi_min);
        pf_range(a, pos0 + wrow0 + wrows - 1, total, wlo_max, whi_max);
    }
    const float sl2 = a.scale * PF_LOG2E;
    const float cap_in = CAP ? a.scale / a.softcap : 0.f, cap_l2 = a.softcap * PF_LOG2E;
    // The keys [rlo, rhi) of this thread's two rows, clamped to the keys loaded.
    u32 rlo[2], rhi[2];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) pf_row_keys(a, pos0 + wrow0 + warp * 16 + g + 8 * hr, total, k_end, rlo[hr], rhi[hr]);

    float o[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
    float m[2] = {PF_NEG_INF, PF_NEG_INF}, l[2] = {0.f, 0.f};
    const u32 sq_c = sq + (u32)c * (64 * 128);             // this consumer's 64 rows of each block

    // The tiles this consumer's rows see: [t_lo, t_hi), a run (the others it only waits for and
    // releases).
    int t_lo = 0, t_hi = 0;
    if (wrows > 0 && tiles > 0) {
        const i64 from = wlo_min - (i64)k_begin, to = whi_max - (i64)k_begin;
        t_lo = from > 0 ? (int)(from / FA_KEYS) : 0;
        t_hi = to > 0 ? (int)((to + FA_KEYS - 1) / FA_KEYS) : 0;
        if (t_hi > tiles) t_hi = tiles;
        if (t_lo > t_hi) t_lo = t_hi;
    }
    // Ping-pong (PP; FlashAttention-3's inter-warpgroup schedule): the consumers take turns at
    // issuing their wgmma, one round (S of a tile and P V of the one before it) each, through
    // named barriers 2 + c (consumer c waits on its own, 256 threads: itself and the other's
    // arrival), so that one's softmax runs while the other's products occupy the tensor cores.
    // Both then walk every tile of the CTA (a tile a consumer's rows do not see is all masked),
    // so that their rounds pair up; with 64 rows or fewer the second consumer has no rows and
    // the turns are off (the same decision in both: `rows` is the CTA's).
    const bool pp = PP && FaOverlap<D, CAP>::on && rows > 64;
    if (pp) t_lo = 0, t_hi = tiles;
    auto take_turn = [&]() {
        if (pp) named_sync(2 + c, 256);
    };
    // The other consumer's turn next (none after consumer 1's last round: nobody would take it).
    auto pass_turn = [&](bool last) {
        if (pp && !(c == 1 && last)) named_arrive(2 + (1 - c), 256);
    };
    if (pp && c == 1 && tiles > 0) named_arrive(2, 256);  // consumer 0 takes the first turn
    auto stage_of = [&](int t) { return t % S; };
    auto wait_k = [&](int t) { mbar_wait(&full_k[stage_of(t)], (u32)(t / S) & 1); };
    auto wait_v = [&](int t) { mbar_wait(&full_v[stage_of(t)], (u32)(t / S) & 1); };
    // This warp's reads of tile t's K or V are done (its wgmma have retired), or were never
    // made: the producer may refill it. Lane 0 arrives for the warp.
    auto release_k = [&](int t) {
        if (lane == 0) mbar_arrive(&empty_k[stage_of(t)]);
    };
    auto release_v = [&](int t) {
        if (lane == 0) mbar_arrive(&empty_v[stage_of(t)]);
    };
    // Whether every key of tile t (below k_end) has a page. First, before the loop (while Q
    // lands), one pass over the pages of the warp's tiles [t_lo, t_hi) (lane i: pages i, i + 32,
    // ..., eight loads in flight): where all have one (all_paged, the usual case) no tile is
    // checked again. Otherwise lane i reads the table entry of a tile's page i (tile_page; pages
    // of under 4 keys also i + 32, ...) a tile ahead, and the warp votes (tile_paged) at the
    // tile's softmax. The producer finds the same pages for its loads.
    const PfKv kv = pf_kv<D>(a, tile);
    auto tile_page = [&](int t) -> u32 {  // the lane's page id (0: none of its own), or one past the cache
        const u32 k0 = k_begin + (u32)t * FA_KEYS;
        const u64 last = ((u64)k0 + FA_KEYS < (u64)k_end ? (u64)k0 + FA_KEYS : (u64)k_end) - 1;
        u64 pg = k0 / kv.ps + (u32)lane;
        if (pg > last / kv.ps) return 0u;
        u32 id = kv.table[pg];
        for (pg += 32; pg <= last / kv.ps; pg += 32) {
            const u32 more = kv.table[pg];
            if (more >= kv.pages) id = more;
        }
        return id;
    };
    auto tile_paged = [&](u32 id) -> bool { return __all_sync(FULL_MASK, id < kv.pages); };
    auto range_paged = [&](int t0, int t1) -> bool {  // every tile of [t0, t1) (t0 < t1)
        const u32 k0 = k_begin + (u32)t0 * FA_KEYS;
        const u64 end = (u64)k_begin + (u64)t1 * FA_KEYS, last = (end < (u64)k_end ? end : (u64)k_end) - 1;
        u32 worst = 0u;
#pragma unroll 8
        for (u64 pg = k0 / kv.ps + (u32)lane; pg <= last / kv.ps; pg += 32) worst = max(worst, kv.table[pg]);
        return __all_sync(FULL_MASK, worst < kv.pages);
    };
    auto skip = [&](int t) { wait_k(t), release_k(t), wait_v(t), release_v(t); };
    auto k_smem = [&](int t) { return skv + (u32)stage_of(t) * (2 * KV_BYTES); };

    // S = Q K^T of tile t, issued (one wgmma group): k step kk reads dims 16kk.. (32 bytes into
    // the 128-byte rows of block kk / 4).
    auto qk = [&](float* sc, int t) {
        const u64 dq0 = fa_desc_k(sq_c), dk0 = fa_desc_k(k_smem(t));
        fa_fence_regs<FA_KEYS / 2>(sc);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            const u64 dq = fa_desc_add(dq0, (kk / 4) * (FA_ROWS * 128 >> 4) + 2 * (kk % 4));
            const u64 dk = fa_desc_add(dk0, (kk / 4) * (FA_KEYS * 128 >> 4) + 2 * (kk % 4));
            Wgmma<FA_KEYS, BF16, false>::run(sc, dq, dk, kk > 0 ? 1u : 0u);
        }
        wgmma_commit();
    };
    // O += P V of tile t, issued (one wgmma group): k step kk covers keys 16kk..16kk+15 (the
    // accumulator column groups 2kk and 2kk + 1 of S), V rows 16kk.. (2048 bytes per step).
    auto pv = [&](u32 (*pa)[4], int t) {
        const u64 dv0 = fa_desc_n(k_smem(t) + KV_BYTES);
        fa_fence_regs<D / 2>(o);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < FA_KEYS / 16; ++kk) WgmmaRS<D, BF16>::run(o, pa[kk], fa_desc_add(dv0, kk * (2048 >> 4)), 1u);
        wgmma_commit();
    };
    // Scores of tile t (in sc) to probabilities: log2 units, the mask only where a row's bound
    // crosses the tile or a key lacks a page (sc[4j + 2hr + e] is row g + 8hr, key 8j + 2tig + e),
    // then the online softmax of both rows. Returns the factors (alpha) by which O must be
    // rescaled; l is updated, O is not touched (a P V may still be accumulating into it).
    auto softmax = [&](float* sc, int t, bool paged, float* alpha) {
        const u32 k0 = k_begin + (u32)t * FA_KEYS;
        const bool edge = !paged || (i64)k0 + FA_KEYS > whi_min || (i64)k0 < wlo_max;
        // With a positive scale (and no softcap) the scores stay raw: the scale times their max
        // is the max of the scaled scores, and one FFMA per element scales and subtracts it ahead
        // of the exp2 (FlashAttention-3's softmax). Otherwise they are scaled here (mul 1).
        const bool raw = !CAP && sl2 > 0.f;
        const float mul = raw ? sl2 : 1.f;
        if (CAP) {
#pragma unroll
            for (int i = 0; i < FA_KEYS / 2; ++i) sc[i] = cap_l2 * tanhf(sc[i] * cap_in);
        } else if (!raw) {
#pragma unroll
            for (int i = 0; i < FA_KEYS / 2; ++i) sc[i] *= sl2;
        }
        if (edge) {
#pragma unroll
            for (int j = 0; j < FA_KEYS / 8; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int kc = 8 * j + 2 * tig + (e & 1);
                    const u32 key = k0 + (u32)kc;
                    const int hr = e >> 1;
                    const bool has = paged || key >= k_end || kv.table[key / kv.ps] < kv.pages;
                    if (pf_hidden(has, key, rlo[hr], rhi[hr])) sc[4 * j + e] = PF_NEG_INF;
                }
        }
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
            float mx = PF_NEG_INF;
#pragma unroll
            for (int j = 0; j < FA_KEYS / 8; ++j) mx = fmaxf(mx, fmaxf(sc[4 * j + 2 * hr], sc[4 * j + 2 * hr + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, 2));
            mx = fmaxf(m[hr], mx * mul);                     // log2 units (mul > 0: -inf stays)
            const float base = mx == PF_NEG_INF ? 0.f : mx;  // a row with nothing visible yet
            alpha[hr] = pf_exp2(m[hr] - base);               // 0 while m was -inf
            m[hr] = mx;
            float sum = 0.f;
#pragma unroll
            for (int j = 0; j < FA_KEYS / 8; ++j) {
                sc[4 * j + 2 * hr] = pf_exp2(fmaf(sc[4 * j + 2 * hr], mul, -base));
                sc[4 * j + 2 * hr + 1] = pf_exp2(fmaf(sc[4 * j + 2 * hr + 1], mul, -base));
                sum += sc[4 * j + 2 * hr] + sc[4 * j + 2 * hr + 1];
            }
            l[hr] = l[hr] * alpha[hr] + sum;
        }
    };
    // P as the A fragments of the k steps of P V (the accumulator layout of two n8 column
    // groups is the A layout of one k16 step).
    auto pack = [&](const float* sc, u32 (*pa)[4]) {
#pragma unroll
        for (int kk = 0; kk < FA_KEYS / 16; ++kk) {
            pa[kk][0] = pf_pack<BF16>(sc[8 * kk], sc[8 * kk + 1]);
            pa[kk][1] = pf_pack<BF16>(sc[8 * kk + 2], sc[8 * kk + 3]);
            pa[kk][2] = pf_pack<BF16>(sc[8 * kk + 4], sc[8 * kk + 5]);
            pa[kk][3] = pf_pack<BF16>(sc[8 * kk + 6], sc[8 * kk + 7]);
        }
    };

    // O *= alpha, row by row.
    auto rescale = [&](const float* alpha) {
#pragma unroll
        for (int j = 0; j < D / 8; ++j) {
            o[4 * j] *= alpha[0], o[4 * j + 1] *= alpha[0];
            o[4 * j + 2] *= alpha[1], o[4 * j + 3] *= alpha[1];
        }
    };

    int t = 0;
    for (; t < t_lo; ++t) skip(t);
    if (t_lo < t_hi) {
        float sc[FA_KEYS / 2];
        u32 pa[FA_KEYS / 16][4];
        float alpha[2];
        const bool all_paged = range_paged(t_lo, t_hi);
        u32 pid = all_paged ? 0u : tile_page(t_lo), pid_next = 0u;
        auto paged = [&](u32 id) { return all_paged || tile_paged(id); };  // (all_paged: the warp's alike)
        mbar_wait(qbar, 0);
        if (FaOverlap<D, CAP>::on) {
            // Tile t's S = Q K^T runs on the tensor cores together with tile t - 1's P V, and its
            // softmax while that P V finishes (FlashAttention-3's intra-warpgroup overlap): O is
            // rescaled by tile t's alpha only once tile t - 1's P V has retired.
            take_turn();
            wait_k(t_lo);
            qk(sc, t_lo);
            pass_turn(false);
            if (!all_paged && t_lo + 1 < t_hi) pid_next = tile_page(t_lo + 1);
            wgmma_wait0();
            fa_fence_regs<FA_KEYS / 2>(sc);
            softmax(sc, t_lo, paged(pid), alpha);  // O is still 0: nothing to rescale
            release_k(t_lo);
            pack(sc, pa);
            for (t = t_lo + 1; t < t_hi; ++t) {
                pid = pid_next;
                take_turn();
                wait_k(t);
                qk(sc, t);
                wait_v(t - 1);
                pv(pa, t - 1);
                pass_turn(false);
                if (!all_paged && t + 1 < t_hi) pid_next = tile_page(t + 1);
                wgmma_wait1();  // S of tile t (the older group) has landed
                fa_fence_regs<FA_KEYS / 2>(sc);
                softmax(sc, t, paged(pid), alpha);
                release_k(t);
                wgmma_wait0();  // P V of tile t - 1 too
                fa_fence_regs<D / 2>(o);
                release_v(t - 1);
                rescale(alpha);
                pack(sc, pa);
            }
            take_turn();
            wait_v(t_hi - 1);
            pv(pa, t_hi - 1);
            pass_turn(true);
            wgmma_wait0();
            fa_fence_regs<D / 2>(o);
            release_v(t_hi - 1);
        } else {
            // One tile at a time: S, softmax, P V.
            for (t = t_lo; t < t_hi; ++t) {
                if (t > t_lo) pid = pid_next;
                wait_k(t);
                qk(sc, t);
                if (!all_paged && t + 1 < t_hi) pid_next = tile_page(t + 1);
                wgmma_wait0();
                fa_fence_regs<FA_KEYS / 2>(sc);
                softmax(sc, t, paged(pid), alpha);
                release_k(t);
                rescale(alpha);
                pack(sc, pa);
                wait_v(t);
                pv(pa, t);
                wgmma_wait0();
                fa_fence_regs<D / 2>(o);
                release_v(t);
            }
        }
        t = t_hi;
    }
    for (; t < tiles; ++t) skip(t);

    pf_store<D, BF16>(a, tile, o, l, wrow0 + warp * 16 + g, tig);
}

// wgmma and setmaxnreg exist on sm_90a only; elsewhere the entry points trap (the launcher never
// uses them there).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FA_BODY(D, BF16, CAP, PP) attention_prefill_sm90<D, BF16, CAP, PP>(p);
#else
#define FA_BODY(D, BF16, CAP, PP) asm volatile("trap;");
#endif
// attention_prefill_sm90_d<D>_<type>[_cap: softcap > 0 | _pp: the consumers' ping-pong] (with
// both score forms in one kernel, the tanh path's registers pushed the D = 128 consumers into
// spills).
#define ATTENTION_PREFILL_SM90(NAME, D, BF16, CAP, PP) \
    extern "C" __global__ void __launch_bounds__(384, 1) NAME(const __grid_constant__ PrefillArgs p) { FA_BODY(D, BF16, CAP, PP) }

ATTENTION_PREFILL_SM90(attention_prefill_sm90_d64_bf16, 64, true, false, false)
ATTENTION_PREFILL_SM90(attention_prefill_sm90_d64_f16, 64, false, false, false)
ATTENTION_PREFILL_SM90(attention_prefill_sm90_d128_bf16, 128, true, false, false)
ATTENTION_PREFILL_SM90(attention_prefill_sm90_d128_f16, 128, false, false, false)
ATTENTION_PREFILL_SM90(attention_prefill_sm90_d64_bf16_cap, 64, true, true, false)
ATTENTION_PREFILL_SM90(attention_prefill_sm90_d64_f16_cap, 64, false, true, false)
ATTENTION_PREFILL_SM90(attention_prefill_sm90_d128_bf16_cap, 128, true, true, false)
ATTENTION_PREFILL_SM90(attention_prefill_sm90_d128_f16_cap, 128, false, true, false)
ATTENTION_PREFILL_SM90(attention_prefill_sm90_d64_bf16_pp, 64, true, false, true)
ATTENTION_PREFILL_SM90(attention_prefill_sm90_d64_f16_pp, 64, false, false, true)
ATTENTION_PREFILL_SM90(attention_prefill_sm90_d128_bf16_pp, 128, true, false, true)
ATTENTION_PREFILL_SM90(attention_prefill_sm90_d128_f16_pp, 128, false, false, true)
