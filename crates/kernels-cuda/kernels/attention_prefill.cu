#line 1 "attention_prefill.cu"
// attention_prefill.cu: paged_attention for prefill-shaped batches on tensor cores, in the
// manner of FlashAttention-2 (crates/graph/src/ops/attention.rs defines the op,
// crates/runtime/src/cpu/attention/paged.rs is the reference; attention.cu keeps the decode
// forms). f16 or bf16 activations and cache, head dim D of 64 or 128, f32 accumulation.
// On sm_90 attention_prefill_sm90.cu (wgmma, same calls and results) runs instead, unless the
// knob attention.prefill_wgmma is off.
//
// One CTA of 4 warps per (tile of 64 query rows of one sequence, query head); each warp owns
// 16 rows. Its Q tile is loaded once (cp.async into shared memory, then ldmatrix into
// registers, where it stays). The CTA walks the key tiles of 64 keys that any of its rows can
// see, two tiles in flight: while tile i is used, tile i + 1 is being copied by cp.async from
// the paged cache, one page-table lookup per key row (the cache is [pages, 2, layers,
// page_size, kv_heads, D]: a key row is contiguous, consecutive keys are not). Per tile:
//   S = Q K^T        mma.sync m16n8k16 (K rows straight from ldmatrix are the col-major B),
//   x = S * scale (or softcap * tanh(S * scale / softcap)), in log2 units, -inf where masked,
//   online softmax   running row max m and partial row sum l in registers (a row lives in the
//                    4 lanes of a quad, so the max is two shuffles away), p = 2^(x - m),
//   O += P V         P re-packed from the S accumulators into A fragments without moving
//                    (the C layout of two n8 tiles is the A layout of one k16 step); V rows
//                    reach the col-major B operand through ldmatrix.trans.
// Finally O / l is stored; a row with no visible key stores 0, as the reference does.
//
// Shared tiles are 64 rows of D/8 16-byte chunks; chunk c of row r is stored at c ^ (r % 8),
// so the 8 rows an ldmatrix reads at once fall on 8 different bank groups.
//
// Rows, keys and masks follow the reference: sequence b's rows are offsets[b]..offsets[b+1]
// at positions lengths[b] + i; a query at pos sees keys [lo, hi) (Mask::range). The host
// knows only tokens and batch, so it launches tokens / 64 + batch tile slots per head: slot
// offsets[b] / 64 + b is sequence b's first, and a sequence of n rows at offset o owns
// floor((o + n) / 64) - floor(o / 64) + 1 >= ceil(n / 64) slots, so every row is covered and
// the slots of consecutive sequences never overlap. A CTA with a slot past its sequence's rows
// exits at once. Slots are handed out last first, so the longest causal tiles start first.
// Key tiles wholly outside every row's range are never loaded; a per-element mask runs only
// on tiles that cross a row's bound or hold a key without a page. Index tensors come from the
// engine's bookkeeping; out-of-range pages or table columns skip the key (as in attention.cu),
// and nonsense offsets or lengths never make a CTA read or write outside q, out or the table.

#define PF_ROWS 64     // query rows per CTA
#define PF_KEYS 64     // keys per tile
#define PF_THREADS 128
#define PF_LOG2E 1.4426950408889634f
#define PF_NEG_INF (-__int_as_float(0x7f800000))

struct PrefillArgs {
    AttnArgs a;  // attention_args.cuh
    i64 slots;   // tile slots per head: tokens / 64 + batch
};

__device__ __forceinline__ u32 pf_smem(const void* p) { return (u32)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void pf_cp16(u32 dst, const void* src, bool valid) {
    const int n = valid ? 16 : 0;  // src-size 0 zero-fills the chunk
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
__device__ __forceinline__ void pf_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void pf_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void pf_ldsm(u32* r, u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void pf_ldsm_t(u32* r, u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

// c += a b for one 16x8x16 step: a the four A registers, b0/b1 the two B registers.
template <bool BF16> __device__ __forceinline__ void pf_mma(float* c, const u32* a, u32 b0, u32 b1) {
    if (BF16) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
}

// Two f32 as one register of the 16-bit type, lo in the low half (the lower column or k index).
template <bool BF16> __device__ __forceinline__ u32 pf_pack(float lo, float hi) {
    u32 r;
    if (BF16) asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    else asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

__device__ __forceinline__ float pf_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// Byte offset of 16-byte chunk c of row r in a tile of rows of CPR chunks (swizzled).
template <int CPR> __device__ __forceinline__ u32 pf_at(int r, int c) {
    return (u32)(r * CPR + (c ^ (r & 7))) * 16u;
}

// The visible keys [lo, hi) of a query at pos in a sequence of total keys (Mask::range).
__device__ __forceinline__ void pf_range(const AttnArgs& a, i64 pos, i64 total, i64& lo, i64& hi) {
    lo = 0;
    hi = pos + 1 < total ? pos + 1 : total;
    if (a.mask == 1) lo = pos + 1 - a.window > 0 ? pos + 1 - a.window : 0;
    if (a.mask == 2) hi = total;
}

template <int D, bool BF16> __device__ __forceinline__ void attention_prefill(const AttnArgs& a, i64 slots) {
    constexpr int CPR = D / 8;                      // 16-byte chunks per row
    constexpr int TILE = PF_ROWS * D * 2;           // bytes of one tile
    constexpr int DK = D / 16;                      // k steps of S = Q K^T
    constexpr int DN = D / 8;                       // n8 tiles of O
    constexpr int LOADS = PF_KEYS * CPR / PF_THREADS;  // chunks per thread per K (or V) tile
    extern __shared__ __align__(128) u8 pf_buf[];
    const u32 sq = pf_smem(pf_buf);                 // Q tile
    const u32 sk = sq + TILE;                       // 2 K tiles
    const u32 sv = sk + 2 * TILE;                   // 2 V tiles
    u8* valid = pf_buf + 5 * TILE;                  // [2][PF_KEYS]: the key has a page

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int g = lane / 4, tig = lane % 4;         // quad (row) and lane in quad
    const i64 h = blockIdx.x % a.q_heads;
    const i64 slot = slots - 1 - (i64)(blockIdx.x / a.q_heads);
    if (slot < 0) return;

    // The sequence of this slot: the last b with offsets[b] / 64 + b <= slot.
    const u32* offsets = (const u32*)a.offsets;
    i64 lo_b = 0, hi_b = a.batch - 1;
    while (lo_b < hi_b) {
        const i64 mid = (lo_b + hi_b + 1) / 2;
        if ((i64)(offsets[mid] / PF_ROWS) + mid <= slot) lo_b = mid; else hi_b = mid - 1;
    }
    const i64 b = lo_b;
    const i64 first = offsets[b], local = slot - (first / PF_ROWS + b);
    i64 end = offsets[b + 1];
    if (end > a.tokens) end = a.tokens;
    const i64 r0 = first + local * PF_ROWS;          // first query row of the tile
    if (local < 0 || r0 >= end) return;              // uniform per CTA
    const i64 q_len = end - first;
    const i64 rows = end - r0 < PF_ROWS ? end - r0 : PF_ROWS;
    const i64 cached = ((const u32*)a.lengths)[b];
    const i64 total = cached + q_len;
    const i64 pos0 = cached + (r0 - first);          // position of the tile's first row

    // Keys any row of the tile sees, and the bounds every row sees (tiles inside need no mask).
    i64 lo_min, hi_min, lo_max, hi_max;
    pf_range(a, pos0, total, lo_min, hi_min);
    pf_range(a, pos0 + rows - 1, total, lo_max, hi_max);
    // Keys past the table's columns have no page; key positions are u32, as the engine's are.
    i64 k_last = a.width * a.page_size;
    if (k_last > 0xffffffffll) k_last = 0xffffffffll;
    const u32 k_begin = (u32)(lo_min < k_last ? lo_min : k_last);
    const u32 k_end = (u32)(hi_max < k_last ? hi_max : k_last);
    const int tiles = k_end > k_begin ? (int)((k_end - k_begin + PF_KEYS - 1) / PF_KEYS) : 0;
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

    // Q tile: rows past the sequence are zero.
    for (int c = tid; c < PF_ROWS * CPR; c += PF_THREADS) {
        const int r = c / CPR, ch = c % CPR;
        const bool ok = r < rows;
        const u16* src = ok ? q + ((u64)(r0 + r) * a.q_heads + h) * D + ch * 8 : q;
        pf_cp16(sq + pf_at<CPR>(r, ch), src, ok);
    }
    pf_commit();

    // Copies key tile t into stage t % 2; returns whether every key of it has a page.
    auto load = [&](int t) -> bool {
        const u32 k0 = k_begin + (u32)t * PF_KEYS;
        const u32 st = (u32)(t & 1) * TILE;
        bool all = true;
#pragma unroll
        for (int i = 0; i < LOADS; ++i) {
            const int c = tid + i * PF_THREADS, r = c / CPR, ch = c % CPR;
            const u32 j = k0 + (u32)r;
            bool ok = j < k_end && j >= k0;  // (no wrap past 2^32)
            u64 at = 0;
            if (ok) {
                const u32 page = table[j / ps];
                ok = page < (u64)a.pages;
                at = page * page_stride + layer_off + (u64)(j % ps) * row_elems + ch * 8;
            }
            pf_cp16(sk + st + pf_at<CPR>(r, ch), cache + at, ok);
            pf_cp16(sv + st + pf_at<CPR>(r, ch), cache + at + value_off, ok);
            if (ch == 0) valid[(t & 1) * PF_KEYS + r] = ok;
            all = all && ok;
        }
        return all;
    };

    float o[DN][4];
#pragma unroll
    for (int n = 0; n < DN; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[n][e] = 0.f;
    float m[2] = {PF_NEG_INF, PF_NEG_INF}, l[2] = {0.f, 0.f};
    u32 qf[DK][4];

    bool all_next = tiles > 0 ? load(0) : true;
    pf_commit();
    pf_wait<1>();  // the Q tile
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < DK; ++kk) {
        const int r = warp * 16 + (lane % 8) + 8 * ((lane / 8) % 2), ch = 2 * kk + lane / 16;
        pf_ldsm(qf[kk], sq + pf_at<CPR>(r, ch));
    }

    const bool cap = a.softcap > 0.f;
    const float sl2 = a.scale * PF_LOG2E;
    const float cap_in = cap ? a.scale / a.softcap : 0.f, cap_l2 = a.softcap * PF_LOG2E;
    // The keys [rlo, rhi) of this thread's two rows (g and g + 8 of its warp's 16), clamped to
    // the keys loaded (the rest are masked anyway).
    u32 rlo[2], rhi[2];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
        i64 lo, hi;
        pf_range(a, pos0 + warp * 16 + g + 8 * hr, total, lo, hi);
        rlo[hr] = (u32)(lo < (i64)k_end ? lo : (i64)k_end);
        rhi[hr] = (u32)(hi < (i64)k_end ? hi : (i64)k_end);
    }

    for (int t = 0; t < tiles; ++t) {
        const bool all_here = all_next;
        if (t + 1 < tiles) all_next = load(t + 1);
        pf_commit();
        pf_wait<1>();
        const bool all_valid = __syncthreads_and(all_here) != 0;
        const u32 k0 = k_begin + (u32)t * PF_KEYS;
        const u32 st = (u32)(t & 1) * TILE;

        // S = Q K^T for this warp's 16 rows and the tile's 64 keys.
        float s[PF_KEYS / 8][4];
#pragma unroll
        for (int n = 0; n < PF_KEYS / 8; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[n][e] = 0.f;
#pragma unroll
        for (int kk = 0; kk < DK; ++kk) {
#pragma unroll
            for (int np = 0; np < PF_KEYS / 16; ++np) {
                // Keys 16np.. (+8 for lanes 16-31), dims 16kk.. (+8 for lanes 8-15, 24-31):
                // r[0], r[1] the B registers of n8 tile 2np, r[2], r[3] of tile 2np + 1.
                u32 r[4];
                const int kr = np * 16 + (lane % 8) + 8 * (lane / 16), ch = 2 * kk + (lane / 8) % 2;
                pf_ldsm(r, sk + st + pf_at<CPR>(kr, ch));
                pf_mma<BF16>(s[2 * np], qf[kk], r[0], r[1]);
                pf_mma<BF16>(s[2 * np + 1], qf[kk], r[2], r[3]);
            }
        }

        // Scores in log2 units; the mask only where some row's bound crosses the tile.
        const bool edge = !all_valid || (i64)k0 + PF_KEYS > hi_min || (i64)k0 < lo_max;
#pragma unroll
        for (int n = 0; n < PF_KEYS / 8; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                float x = s[n][e];
                if (cap) x = cap_l2 * tanhf(x * cap_in);
                else x *= sl2;
                if (edge) {
                    const int kc = n * 8 + 2 * tig + (e & 1);
                    const u32 j = k0 + kc;
                    const int hr = e >> 1;
                    if (!valid[(t & 1) * PF_KEYS + kc] || j < rlo[hr] || j >= rhi[hr]) x = PF_NEG_INF;
                }
                s[n][e] = x;
            }

        // Online softmax of both rows.
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
            float mx = m[hr];
#pragma unroll
            for (int n = 0; n < PF_KEYS / 8; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * hr], s[n][2 * hr + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float base = mx == PF_NEG_INF ? 0.f : mx;  // a row with nothing visible yet
            const float alpha = pf_exp2(m[hr] - base);       // 0 while m was -inf
            m[hr] = mx;
            float sum = 0.f;
#pragma unroll
            for (int n = 0; n < PF_KEYS / 8; ++n) {
                s[n][2 * hr] = pf_exp2(s[n][2 * hr] - base);
                s[n][2 * hr + 1] = pf_exp2(s[n][2 * hr + 1] - base);
                sum += s[n][2 * hr] + s[n][2 * hr + 1];
            }
            l[hr] = l[hr] * alpha + sum;
#pragma unroll
            for (int n = 0; n < DN; ++n) {
                o[n][2 * hr] *= alpha;
                o[n][2 * hr + 1] *= alpha;
            }
        }

        // O += P V: k step kk covers keys 16kk..16kk+15 (S tiles 2kk and 2kk + 1).
#pragma unroll
        for (int kk = 0; kk < PF_KEYS / 16; ++kk) {
            u32 pa[4];
            pa[0] = pf_pack<BF16>(s[2 * kk][0], s[2 * kk][1]);
            pa[1] = pf_pack<BF16>(s[2 * kk][2], s[2 * kk][3]);
            pa[2] = pf_pack<BF16>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
            pa[3] = pf_pack<BF16>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
            for (int dp = 0; dp < D / 16; ++dp) {
                // Keys 16kk.. (+8 for lanes 8-15, 24-31), dims 16dp.. (+8 for lanes 16-31),
                // transposed: r[0], r[1] the B registers of n8 tile 2dp, r[2], r[3] of 2dp + 1.
                u32 r[4];
                const int kr = kk * 16 + (lane % 8) + 8 * ((lane / 8) % 2), ch = 2 * dp + lane / 16;
                pf_ldsm_t(r, sv + st + pf_at<CPR>(kr, ch));
                pf_mma<BF16>(o[2 * dp], pa, r[0], r[1]);
                pf_mma<BF16>(o[2 * dp + 1], pa, r[2], r[3]);
            }
        }
        __syncthreads();  // the stage is free for tile t + 2
    }
    pf_wait<0>();

    // O / l, each row's sum gathered from its quad.
    u16* out = (u16*)a.out;
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
        float sum = l[hr];
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        const float inv = sum > 0.f ? 1.f / sum : 0.f;
        const int r = warp * 16 + g + 8 * hr;
        if (r >= rows) continue;
        u32* dst = (u32*)(out + ((u64)(r0 + r) * a.q_heads + h) * D + 2 * tig);
#pragma unroll
        for (int n = 0; n < DN; ++n) dst[n * 4] = pf_pack<BF16>(o[n][2 * hr] * inv, o[n][2 * hr + 1] * inv);
    }
}

#define ATTENTION_PREFILL(D)                                                                              \
    extern "C" __global__ void __launch_bounds__(PF_THREADS) attention_prefill_d##D##_bf16(PrefillArgs p) { \
        attention_prefill<D, true>(p.a, p.slots);                                                                    \
    }                                                                                                     \
    extern "C" __global__ void __launch_bounds__(PF_THREADS) attention_prefill_d##D##_f16(PrefillArgs p) {  \
        attention_prefill<D, false>(p.a, p.slots);                                                                   \
    }

ATTENTION_PREFILL(64)
ATTENTION_PREFILL(128)
