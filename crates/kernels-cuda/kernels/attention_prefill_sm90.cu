#line 1 "attention_prefill_sm90.cu"
// attention_prefill_sm90.cu: paged_attention for prefill-shaped batches on Hopper (sm_90a) with
// wgmma, in the manner of FlashAttention-3: the same calls, masks and results as
// attention_prefill.cu (the mma.sync kernel, which every other device and every call this
// kernel is not compiled for still takes), with 128 query rows per CTA and 128-key tiles.
// sources.rs puts attention_args.cuh and sm90_pipe.cuh (mbarriers, descriptors, wgmma) in front.
//
// Block: 3 warpgroups (384 threads).
// - Warpgroup 0, the producer (setmaxnreg.dec to 24), copies with cp.async: first the Q tile
//   (128 rows; rows past the sequence zero-filled), then the key tiles into an S-stage ring of
//   (K, V) stages, K and V each with its own `full` and `empty` barriers, K one tile ahead of V
//   (K of tile u, then V of tile u - 1), as the consumers use them. For K of tile u, thread i
//   looks up the page of key k0 + i (one table read per key row; the cache is [pages, 2, layers,
//   page_size, kv_heads, D], so a key row is contiguous and consecutive keys are not) and
//   publishes the row's element offset (in the producer's own ring) and whether it has a page
//   (in the stage's flags, for the consumers' mask); then the 128 threads copy the rows' 16-byte
//   chunks. V of the tile reuses the offsets. Each K or V copy is one cp.async group. Once a
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
//   warp releases a tile's K (arrives on `empty_k`, 8 arrivals) once its S has landed and its
//   page flags have been read, and its V once its P V has retired; the producer waits for these
//   before refilling a stage. So a stage's K is refilled while its V is still being read, and
//   K arrives well ahead of its S, V ahead of its P V. The tiles a consumer's rows see are a
//   run; the others it only waits for and releases, so the barriers' phases stay in step.
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

#define FA_ROWS 128    // query rows per CTA (64 per consumer warpgroup)
#define FA_KEYS 128    // keys per tile
#define FA_LOG2E 1.4426950408889634f
#define FA_NEG_INF (-__int_as_float(0x7f800000))

// The kernels' one parameter, a grid constant (the tensor maps are read where they lie).
struct alignas(64) PrefillArgs {
    TmaMap kv;   // the cache [slabs, page_size, kv_heads, D] (slab: page * 2 * layers + kv * layers +
                 // layer), boxes of 64 dims x 1 head x 64 tokens, 128-byte swizzle (TMA producer only)
    TmaMap q;    // Q [tokens, q_heads, D], boxes of 64 dims x 1 head x 64 rows, 128-byte swizzle
    AttnArgs a;  // attention_args.cuh
    i64 slots;   // tile slots per head: tokens / 128 + batch
    i32 tma;     // the producer loads with TMA (page_size % 64 == 0; 0: cp.async)
    i32 pad;
};

// One box of a 4-D tensor map (coordinates innermost first) into shared memory at `dst`, the
// bytes counted on `bar`.
__device__ __forceinline__ void fa_tma_4d(u32 dst, const TmaMap* map, u64* bar, int c0, int c1, int c2, int c3) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], [%2];\n"
        ::"r"(dst), "l"((u64)map), "r"(s_addr(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3) : "memory");
}
__device__ __forceinline__ void fa_tma_3d(u32 dst, const TmaMap* map, u64* bar, int c0, int c1, int c2) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];\n"
        ::"r"(dst), "l"((u64)map), "r"(s_addr(bar)), "r"(c0), "r"(c1), "r"(c2) : "memory");
}

__device__ __forceinline__ void fa_cp16(u32 dst, const void* src, bool valid) {
    const int n = valid ? 16 : 0;  // src-size 0 zero-fills the chunk
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n) : "memory");
}
__device__ __forceinline__ void fa_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void fa_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

// Two f32 as one register of the 16-bit type, lo in the low half (the lower column or k index).
template <bool BF16> __device__ __forceinline__ u32 fa_pack(float lo, float hi) {
    u32 r;
    if (BF16) asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    else asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

__device__ __forceinline__ float fa_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// Byte offset of 16-byte chunk c of row r in a swizzled tile of R rows (see the top).
template <int R> __device__ __forceinline__ u32 fa_at(int r, int c) {
    return (u32)((c >> 3) * (R * 128) + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

// Descriptors of a 1024-byte aligned tile at shared address `addr`: K-major with the 128-byte
// swizzle (as sw128_desc), and N-major with 64-column groups FA_KEYS * 128 bytes apart.
__device__ __forceinline__ u64 fa_desc_k(u32 addr) {
    return ((u64)(addr & 0x3FFFF) >> 4) | ((u64)1 << 16) | ((u64)(1024 >> 4) << 32) | ((u64)1 << 62);
}
__device__ __forceinline__ u64 fa_desc_n(u32 addr) {
    return ((u64)(addr & 0x3FFFF) >> 4) | ((u64)((FA_KEYS * 128) >> 4) << 16) | ((u64)(1024 >> 4) << 32) |
           ((u64)1 << 62);
}

// Descriptor d advanced by n 16-byte units, computed where it is used (volatile: the compiler
// would otherwise keep every step's descriptor of the loop live in registers).
__device__ __forceinline__ u64 fa_desc_add(u64 d, u32 n) {
    u64 r;
    asm volatile("add.s64 %0, %1, %2;\n" : "=l"(r) : "l"(d), "l"((u64)n));
    return r;
}

// m64nNk16 with A from registers (4 registers of 16-bit pairs, the mma.sync A layout per warp)
// and an N-major B from shared memory (transpose bit set); accumulates into d (N / 2 floats).
#define FA_RS(SHAPE, REGS, OUTS, A0, A1, A2, A3, IB, IS, TYPES)                                           \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" IS ", 0;\n"                                          \
                 "wgmma.mma_async.sync.aligned." SHAPE ".f32." TYPES " " REGS ", {%" A0 ", %" A1 ", %" A2  \
                 ", %" A3 "}, %" IB ", p, 1, 1, 1;\n}\n"                                                   \
                 : OUTS                                                                                    \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d))
template <int N, bool BF16> struct WgmmaRS;
template <bool BF16> struct WgmmaRS<64, BF16> {
    static __device__ __forceinline__ void run(float* d, const u32* a, u64 desc_b, u32 scale_d) {
        if (BF16) FA_RS("m64n64k16", PW_REGS32, PW_OUTS32, "32", "33", "34", "35", "36", "37", "bf16.bf16");
        else FA_RS("m64n64k16", PW_REGS32, PW_OUTS32, "32", "33", "34", "35", "36", "37", "f16.f16");
    }
};
template <bool BF16> struct WgmmaRS<128, BF16> {
    static __device__ __forceinline__ void run(float* d, const u32* a, u64 desc_b, u32 scale_d) {
        if (BF16) FA_RS("m64n128k16", PW_REGS64, PW_OUTS64, "64", "65", "66", "67", "68", "69", "bf16.bf16");
        else FA_RS("m64n128k16", PW_REGS64, PW_OUTS64, "64", "65", "66", "67", "68", "69", "f16.f16");
    }
};

// Ties registers to this point of the instruction stream (CUTLASS's warpgroup_fence_operand):
// accumulators an asynchronous wgmma writes are neither read before its wait_group nor written
// before it is issued, whatever the compiler's scheduling.
template <int N> __device__ __forceinline__ void fa_fence_regs(float* r) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

// The visible keys [lo, hi) of a query at pos in a sequence of total keys (Mask::range).
__device__ __forceinline__ void fa_range(const AttnArgs& a, i64 pos, i64 total, i64& lo, i64& hi) {
    lo = 0;
    hi = pos + 1 < total ? pos + 1 : total;
    if (a.mask == 1) lo = pos + 1 - a.window > 0 ? pos + 1 - a.window : 0;
    if (a.mask == 2) hi = total;
}

// Whether the consumers overlap one tile's S = Q K^T and softmax with the previous tile's P V:
// not at D = 128 with softcap, where the tanh's registers on top of three live tiles of
// accumulators and fragments spilled.
template <int D, bool CAP> struct FaOverlap { static constexpr bool on = !(CAP && D == 128); };

// Tiles of key offsets the producer keeps (more than S: see the V step).
#define FA_ROWOFF 4

// Stages of the (K, V) ring: two at D = 128 (160 KiB of tiles with Q), three at D = 64.
template <int D> struct FaStages { static constexpr int S = D == 128 ? 2 : 3; };

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
    u8* valid = (u8*)(rowoff + FA_ROWOFF * FA_KEYS);              // [S][FA_KEYS]: the key has a page
    u8* bad = valid + S * FA_KEYS;                                // [S][4]: a producer warp's keys lack a page

    const int tid = threadIdx.x, wg = tid / 128;
    const i64 h = blockIdx.x % a.q_heads;
    const i64 slot = slots - 1 - (i64)(blockIdx.x / a.q_heads);
    if (slot < 0) return;

    // The sequence of this slot: the last b with offsets[b] / 128 + b <= slot.
    const u32* offsets = (const u32*)a.offsets;
    i64 lo_b = 0, hi_b = a.batch - 1;
    while (lo_b < hi_b) {
        const i64 mid = (lo_b + hi_b + 1) / 2;
        if ((i64)(offsets[mid] / FA_ROWS) + mid <= slot) lo_b = mid; else hi_b = mid - 1;
    }
    const i64 b = lo_b;
    const i64 first = offsets[b], local = slot - (first / FA_ROWS + b);
    i64 end = offsets[b + 1];
    if (end > a.tokens) end = a.tokens;
    const i64 r0 = first + local * FA_ROWS;          // first query row of the tile
    if (local < 0 || r0 >= end) return;              // uniform per CTA
    const i64 q_len = end - first;
    const i64 rows = end - r0 < FA_ROWS ? end - r0 : FA_ROWS;
    const i64 cached = ((const u32*)a.lengths)[b];
    const i64 total = cached + q_len;
    const i64 pos0 = cached + (r0 - first);          // position of the tile's first row

    // Keys any row of the tile sees. Keys past the table's columns have no page; key positions
    // are u32, as the engine's are.
    i64 lo_min, hi_min, lo_max, hi_max;
    fa_range(a, pos0, total, lo_min, hi_min);
    fa_range(a, pos0 + rows - 1, total, lo_max, hi_max);
    i64 k_last = a.width * a.page_size;
    if (k_last > 0xffffffffll) k_last = 0xffffffffll;
    // Tiles start at multiples of FA_KEYS (with pages of a multiple of 64 keys, each 64-key half
    // of a tile lies in one page: one TMA box); keys before a row's range are masked.
    const u32 k_lo = (u32)(lo_min < k_last ? lo_min : k_last);
    const u32 k_begin = k_lo & ~(u32)(FA_KEYS - 1);
    const u32 k_end = (u32)(hi_max < k_last ? hi_max : k_last);
    const int tiles = k_end > k_lo ? (int)((k_end - k_begin + FA_KEYS - 1) / FA_KEYS) : 0;

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
            // tile's bytes; the page flags of a stage are written before it (the arrival releases
            // them). A box without a page (past the keys, past the table, or a page id past the
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
                        u64* vf = (u64*)(valid + st * FA_KEYS);
#pragma unroll
                        for (int bx = 0; bx < 2; ++bx)
#pragma unroll
                            for (int i = 0; i < 8; ++i) vf[8 * bx + i] = kslab[bx] < slabs ? 0x0101010101010101ull : 0ull;
                        *(u32*)(bad + st * 4) = (kslab[0] < slabs ? 0u : 0x0101u) | (kslab[1] < slabs ? 0u : 0x01010000u);
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
        const int lane = tid % 32, warp = tid / 32;
        const u32 ps = (u32)a.page_size;
        const i64 kvh = h / (a.q_heads / a.kv_heads);
        const u64 row_elems = (u64)a.kv_heads * D;
        const u64 page_elems = (u64)a.page_size * row_elems;          // one layer's keys of a page
        const u64 page_stride = 2 * (u64)a.layers * page_elems;
        const u64 layer_off = (u64)a.layer * page_elems + (u64)kvh * D;
        const u64 value_off = (u64)a.layers * page_elems;             // keys -> values of a page
        const u32* table = (const u32*)a.table + b * a.width;
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
                // into the producer's ring of offsets, its flag into the stage's.
                fa_wait<1>();
                announce(committed - 1);
                const int st = u % S, ro = u % FA_ROWOFF;
                mbar_wait(&empty_k[st], ((u32)(u / S) & 1) ^ 1);
                const u32 k0 = k_begin + (u32)u * FA_KEYS;
                const u32 j = k0 + (u32)tid;
                bool ok = j < k_end && j >= k0;  // (no wrap past 2^32)
                u64 at = 0;
                if (ok) {
                    const u32 page = table[j / ps];
                    ok = page < (u64)a.pages;
                    at = page * page_stride + layer_off + (u64)(j % ps) * row_elems;
                }
                rowoff[ro * FA_KEYS + tid] = ok ? at : ~0ull;
                valid[st * FA_KEYS + tid] = ok;
                const u32 any_bad = __ballot_sync(FULL_MASK, !ok);
                if (lane == 0) bad[st * 4 + warp] = any_bad != 0;
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
                    fa_cp16(sv + fa_at<FA_KEYS>(r, ch), cache + (has ? off + value_off + ch * 8 : 0), has);
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
        fa_range(a, pos0 + wrow0, total, wlo_min, whi_min);
        fa_range(a, pos0 + wrow0 + wrows - 1, total, wlo_max, whi_max);
    }
    const float sl2 = a.scale * FA_LOG2E;
    const float cap_in = CAP ? a.scale / a.softcap : 0.f, cap_l2 = a.softcap * FA_LOG2E;
    // The keys [rlo, rhi) of this thread's two rows, clamped to the keys loaded.
    u32 rlo[2], rhi[2];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
        i64 lo, hi;
        fa_range(a, pos0 + wrow0 + warp * 16 + g + 8 * hr, total, lo, hi);
        rlo[hr] = (u32)(lo < (i64)k_end ? lo : (i64)k_end);
        rhi[hr] = (u32)(hi < (i64)k_end ? hi : (i64)k_end);
    }

    float o[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
    float m[2] = {FA_NEG_INF, FA_NEG_INF}, l[2] = {0.f, 0.f};
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
    // This warp's reads of tile t's K (with its page flags) or V are done, or were never made:
    // the producer may refill it.
    auto release_k = [&](int t) {
        if (lane == 0) mbar_arrive(&empty_k[stage_of(t)]);
    };
    auto release_v = [&](int t) {
        if (lane == 0) mbar_arrive(&empty_v[stage_of(t)]);
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
    auto softmax = [&](float* sc, int t, float* alpha) {
        const int st = stage_of(t);
        const u32 k0 = k_begin + (u32)t * FA_KEYS;
        const bool all_valid = *(const u32*)(bad + st * 4) == 0;
        const bool edge = !all_valid || (i64)k0 + FA_KEYS > whi_min || (i64)k0 < wlo_max;
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
                    if (!valid[st * FA_KEYS + kc] || key < rlo[hr] || key >= rhi[hr]) sc[4 * j + e] = FA_NEG_INF;
                }
        }
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
            float mx = FA_NEG_INF;
#pragma unroll
            for (int j = 0; j < FA_KEYS / 8; ++j) mx = fmaxf(mx, fmaxf(sc[4 * j + 2 * hr], sc[4 * j + 2 * hr + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, 2));
            mx = fmaxf(m[hr], mx * mul);                     // log2 units (mul > 0: -inf stays)
            const float base = mx == FA_NEG_INF ? 0.f : mx;  // a row with nothing visible yet
            alpha[hr] = fa_exp2(m[hr] - base);               // 0 while m was -inf
            m[hr] = mx;
            float sum = 0.f;
#pragma unroll
            for (int j = 0; j < FA_KEYS / 8; ++j) {
                sc[4 * j + 2 * hr] = fa_exp2(fmaf(sc[4 * j + 2 * hr], mul, -base));
                sc[4 * j + 2 * hr + 1] = fa_exp2(fmaf(sc[4 * j + 2 * hr + 1], mul, -base));
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
            pa[kk][0] = fa_pack<BF16>(sc[8 * kk], sc[8 * kk + 1]);
            pa[kk][1] = fa_pack<BF16>(sc[8 * kk + 2], sc[8 * kk + 3]);
            pa[kk][2] = fa_pack<BF16>(sc[8 * kk + 4], sc[8 * kk + 5]);
            pa[kk][3] = fa_pack<BF16>(sc[8 * kk + 6], sc[8 * kk + 7]);
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
        mbar_wait(qbar, 0);
        if (FaOverlap<D, CAP>::on) {
            // Tile t's S = Q K^T runs on the tensor cores together with tile t - 1's P V, and its
            // softmax while that P V finishes (FlashAttention-3's intra-warpgroup overlap): O is
            // rescaled by tile t's alpha only once tile t - 1's P V has retired.
            take_turn();
            wait_k(t_lo);
            qk(sc, t_lo);
            pass_turn(false);
            wgmma_wait0();
            fa_fence_regs<FA_KEYS / 2>(sc);
            softmax(sc, t_lo, alpha);  // O is still 0: nothing to rescale
            release_k(t_lo);
            pack(sc, pa);
            for (t = t_lo + 1; t < t_hi; ++t) {
                take_turn();
                wait_k(t);
                qk(sc, t);
                wait_v(t - 1);
                pv(pa, t - 1);
                pass_turn(false);
                wgmma_wait1();  // S of tile t (the older group) has landed
                fa_fence_regs<FA_KEYS / 2>(sc);
                softmax(sc, t, alpha);
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
                wait_k(t);
                qk(sc, t);
                wgmma_wait0();
                fa_fence_regs<FA_KEYS / 2>(sc);
                softmax(sc, t, alpha);
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

    // O / l, each row's sum gathered from its quad.
    u16* out = (u16*)a.out;
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
        float sum = l[hr];
        sum += __shfl_xor_sync(FULL_MASK, sum, 1);
        sum += __shfl_xor_sync(FULL_MASK, sum, 2);
        const float inv = sum > 0.f ? 1.f / sum : 0.f;
        const i64 r = wrow0 + warp * 16 + g + 8 * hr;
        if (r >= rows) continue;
        u32* dst = (u32*)(out + ((u64)(r0 + r) * a.q_heads + h) * D + 2 * tig);
#pragma unroll
        for (int j = 0; j < D / 8; ++j) dst[j * 4] = fa_pack<BF16>(o[4 * j + 2 * hr] * inv, o[4 * j + 2 * hr + 1] * inv);
    }
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
