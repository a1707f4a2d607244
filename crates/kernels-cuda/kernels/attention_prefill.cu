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
// f32 activations and cache (the `_f32` kernels: GGUF models' default on the GPU): Q, K and V
// are rounded to bf16 as they are staged in shared memory (plain loads and stores instead of
// cp.async, the next tile's before this one's products), the products run as for bf16, and
// O is stored as f32: the precision of the bf16 tensor-core GEMMs that quantized prompts run
// on, against the decode kernels' CUDA-core f32 walk over every query row.
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
// attention_prefill.cuh (in front, after attention_args.cuh) has the code of these rules that
// attention_prefill_sm90.cu shares.

#define PF_ROWS 64     // query rows per CTA
#define PF_KEYS 64     // keys per tile
#define PF_THREADS 128

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

// Byte offset of 16-byte chunk c of row r in a tile of rows of CPR chunks (swizzled).
template <int CPR> __device__ __forceinline__ u32 pf_at(int r, int c) {
    return (u32)(r * CPR + (c ^ (r & 7))) * 16u;
}

// 8 f32 values at src (16-byte aligned) rounded to bf16 into the 16-byte chunk at dst, or zeros.
__device__ __forceinline__ void pf_st_f32(u32 dst, const float* src, bool valid) {
    u32 w[4] = {0u, 0u, 0u, 0u};
    if (valid) {
        const float4 x = __ldg(reinterpret_cast<const float4*>(src));
        const float4 y = __ldg(reinterpret_cast<const float4*>(src + 4));
        w[0] = pf_pack<true>(x.x, x.y), w[1] = pf_pack<true>(x.z, x.w);
        w[2] = pf_pack<true>(y.x, y.y), w[3] = pf_pack<true>(y.z, y.w);
    }
    asm volatile("st.shared.v4.u32 [%0], {%1,%2,%3,%4};\n" ::"r"(dst), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3])
                 : "memory");
}

template <int D, bool BF16, bool F32 = false>
__device__ __forceinline__ void attention_prefill(const AttnArgs& a, i64 slots) {
    static_assert(!F32 || BF16, "f32 activations run the bf16 products");
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
    PfTile tile;
    if (!pf_tile<PF_ROWS>(a, slots, tile)) return;  // uniform per CTA
    const i64 h = tile.h, r0 = tile.r0, rows = tile.rows, total = tile.total, pos0 = tile.pos0;
    const PfKeys keys = pf_keys(a, tile);
    const u32 k_begin = keys.lo, k_end = keys.end;
    const int tiles = k_end > k_begin ? (int)((k_end - k_begin + PF_KEYS - 1) / PF_KEYS) : 0;
    const PfKv kv = pf_kv<D>(a, tile);
    const u16* cache = (const u16*)a.blocks;
    const u16* q = (const u16*)a.q;
    const float* cache32 = (const float*)a.blocks;
    const float* q32 = (const float*)a.q;

    // Q tile: rows past the sequence are zero.
    for (int c = tid; c < PF_ROWS * CPR; c += PF_THREADS) {
        const int r = c / CPR, ch = c % CPR;
        const bool ok = r < rows;
        const u64 at = ok ? ((u64)(r0 + r) * a.q_heads + h) * D + ch * 8 : 0;
        if constexpr (F32) pf_st_f32(sq + pf_at<CPR>(r, ch), q32 + at, ok);
        else pf_cp16(sq + pf_at<CPR>(r, ch), q + at, ok);
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
            u64 at;
            const bool ok = pf_key_at(kv, k0 + (u32)r, k0, k_end, (u64)(ch * 8), at);
            if constexpr (F32) {
                pf_st_f32(sk + st + pf_at<CPR>(r, ch), cache32 + at, ok);
                pf_st_f32(sv + st + pf_at<CPR>(r, ch), cache32 + at + kv.value_off, ok);
            } else {
                pf_cp16(sk + st + pf_at<CPR>(r, ch), cache + at, ok);
                pf_cp16(sv + st + pf_at<CPR>(r, ch), cache + at + kv.value_off, ok);
            }
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
    for (int hr = 0; hr < 2; ++hr) pf_row_keys(a, pos0 + warp * 16 + g + 8 * hr, total, k_end, rlo[hr], rhi[hr]);

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
        const bool edge = !all_valid || (i64)k0 + PF_KEYS > keys.hi_min || (i64)k0 < keys.lo_max;
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
                    if (pf_hidden(valid[(t & 1) * PF_KEYS + kc], j, rlo[hr], rhi[hr])) x = PF_NEG_INF;
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

    pf_store<D, BF16, F32>(a, tile, &o[0][0], l, warp * 16 + g, tig);
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

#define ATTENTION_PREFILL_F32(D)                                                                          \
    extern "C" __global__ void __launch_bounds__(PF_THREADS) attention_prefill_d##D##_f32(PrefillArgs p) {  \
        attention_prefill<D, true, true>(p.a, p.slots);                                                   \
    }
ATTENTION_PREFILL_F32(64)
ATTENTION_PREFILL_F32(128)
