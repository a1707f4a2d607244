#line 1 "attention_decode_mma.cu"
// attention_decode_mma.cu: the decode form of paged_attention on tensor cores, for f16/bf16
// caches with head dims D of 16 to 256 (after attention_decode.cu, whose DecodeArgs,
// decode_split and decode_finish it shares with the CUDA-core kernel), and for f32 caches of up
// to 128 dims (`_f32`: the query, keys and values rounded to bf16 as they become mma fragments,
// as the f32 prefill kernels stage them; the output f32). One block of DEC_WARPS warps per
// (query row, kv head, split); the kv head's query heads (up to DM_HEADS) share every key and
// value load.
//
// A decode step reads every key and value once and does two multiply-adds per byte, so the
// kernel is shaped to keep as many bytes in flight as the memory system needs (at ~4.5 TB/s and
// ~1.5 us under load, ~50 KiB per SM) and to keep the arithmetic off the critical path:
//   - each warp takes a contiguous quarter of its block's split and streams it through its own
//     ring of DM_STAGES tiles of DM_KEYS keys (keys and values) in shared memory, filled with
//     16-byte cp.async copies (a half warp reads a 256-byte key row): DM_STAGES - 1 tiles
//     (16 KiB at D = 128) are in flight while one is used, and no block barrier sits in the
//     key loop, so warps run free;
//   - page ids come 32 at a time, one per lane, and the next 32 are loaded when a window is
//     entered: only the warp's first copies wait for the lookup table;
//   - per tile, on mma.sync m16n8k16 with the tile's keys as M and the query heads as N (so a
//     group of 4 or 8 heads wastes at most half of the tensor core, never 3/4 as heads-as-M
//     would):
//        S^T = K Q^T     K rows from ldmatrix are the row-major A (f32 rows: the same
//                        fragments from 8-byte shared loads, rounded to bf16 pairs); the
//                        query, loaded once into registers, is the col-major B;
//        online softmax  per head over the tile's keys: a head's scores sit in the 8 lanes of
//                        equal lane % 4, three shuffles for the max; the sums stay per lane
//                        until the end;
//        O^T += V^T P^T  V rows through ldmatrix.trans are the row-major A (f32 rows: 4-byte
//                        shared loads, rounded); P^T goes through 256 bytes of shared memory
//                        and comes back by ldmatrix.trans as B.
// Rows in shared memory are padded to D * 2 + 16 bytes, so the 8 rows an ldmatrix reads fall on
// 8 different bank groups (f32: keys to D * 4 + 32, values to D * 4 + 16, see ROWK). Keys past
// the split's end or on a bad page are copied as zeros (cp.async with no source bytes) and
// scored -inf, so they weigh exactly 0. Page indices within a window are u32: page sizes below
// 2^26 tokens.

#define DM_KEYS 16   // keys per tile (the M of S^T and the K of O^T)
#define DM_STAGES 3  // tiles in a warp's ring; launch/attention_decode.rs: MMA_STAGES
#define DM_HEADS 8   // the N of the mma: query heads per kv head, padded

template <bool BF16> struct DmElem {
    typedef f16 T;
};
template <> struct DmElem<true> {
    typedef bf16 T;
};
// The cache's (and the query's and output's) element: the mma's 16-bit type, or f32 (F32).
template <bool F32, typename T> struct DmStore {
    typedef T S;
};
template <typename T> struct DmStore<true, T> {
    typedef float S;
};

__device__ __forceinline__ void dm_cp16(u32 dst, const void* src, bool valid) {
    const int n = valid ? 16 : 0;  // src-size 0 zero-fills the chunk and reads nothing
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
__device__ __forceinline__ void dm_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void dm_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void dm_ldsm(u32* r, u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void dm_ldsm_t(u32* r, u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void dm_ldsm2_t(u32* r, u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(addr));
}

// c += a b for one 16x8x16 step: a the four A registers, b0/b1 the two B registers.
template <bool BF16> __device__ __forceinline__ void dm_mma(float* c, const u32* a, u32 b0, u32 b1) {
    if (BF16) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
}

// Two f32 as one register of the 16-bit type, lo in the low half (the lower index).
template <bool BF16> __device__ __forceinline__ u32 dm_pack(float lo, float hi) {
    u32 r;
    if (BF16) asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    else asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

template <int D, bool BF16, bool F32> __device__ __forceinline__ void paged_decode_mma(const DecodeArgs& da) {
    typedef typename DmElem<BF16>::T T;                // the mma's operands
    typedef typename DmStore<F32, T>::S S;             // the cache's, query's and output's elements
    constexpr int CPR = D * (int)sizeof(S) / 16;       // 16-byte chunks of a row
    constexpr int EPC = 16 / (int)sizeof(S);           // elements per chunk
    // Bytes of a padded row in shared memory: keys and values 4 banks apart row to row (the 8
    // rows an ldmatrix reads, or f32 values' 32-bit fragment loads, on distinct banks); f32
    // keys 8 banks apart (their fragments are 8-byte loads, a half warp each).
    constexpr int ROWK = D * (int)sizeof(S) + (F32 ? 32 : 16), ROWV = D * (int)sizeof(S) + 16;
    constexpr int TILEK = DM_KEYS * ROWK, TILEV = DM_KEYS * ROWV;  // a tile's keys, its values
    constexpr int SLOT = TILEK + TILEV;                // one ring slot: a tile's keys, then values
    constexpr int RING = DM_STAGES * SLOT;             // a warp's ring of tiles
    constexpr int WARP_BYTES = RING + DM_KEYS * 16;    // and its P^T: 16 keys x 8 heads
    constexpr int KPP = CPR < 32 ? 32 / CPR : 1;       // keys a warp copies per pass
    constexpr int PASSES = DM_KEYS / KPP;              // copies per lane per tile's keys (or values)
    static_assert(CPR <= 32 && CPR * KPP == 32, "a warp copies whole rows");
    constexpr int DK = D / 16;                         // k steps of S^T, m tiles of O^T
    static_assert(D % 16 == 0 && D <= 256, "head dims of 16 to 256, whole k steps");
    static_assert(DEC_WARPS * DM_HEADS * (2 + D) * 4 <= DEC_WARPS * WARP_BYTES, "red fits in the rings");
    extern __shared__ __align__(16) u8 dm_buf[];  // DEC_WARPS x WARP_BYTES; at the end red

    const AttnArgs& a = da.a;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const bool capped = a.softcap > 0.f;
    const float inv_cap = capped ? 1.f / a.softcap : 0.f;
    const int g = lane / 4, c = lane % 4;  // an mma fragment's row (group) and column pair
    const u32 pair = blockIdx.x / (u32)da.splits, row = pair / (u32)a.kv_heads;  // (see decode_split)
    const i64 kvh = pair - row * (u32)a.kv_heads, i = row, h0 = kvh * da.group;

    // Launched under programmatic serialization: nothing the previous kernel may write (the
    // query, the cache) is read before decode_wait. With DecodeArgs::early the split, the
    // warp's first page ids and the copies of its first tiles of older keys come before it.
    const bool early = da.early != 0;
    if (!early) decode_wait();

    // Q^T as the B operand of S^T = K Q^T (in flight with the search; with DecodeArgs::early
    // after it, once the wait is over): for k step k,
    // lane holds head g's dims 16k + 2c, +1 and 16k + 8 + 2c, +1; heads past the group are 0.
    u32 qb[DK][2];
    auto load_q = [&]() {
        const bool has = g < da.group;
        const S* qs = (const S*)a.q + (i * a.q_heads + h0 + (has ? g : 0)) * D;
        if constexpr (F32) {  // rounded to bf16 here (pairs of f32 loads)
            const float2* q2 = reinterpret_cast<const float2*>(qs);
#pragma unroll
            for (int k = 0; k < DK; ++k) {
                const float2 x = has ? __ldg(q2 + 8 * k + c) : make_float2(0.f, 0.f);
                const float2 y = has ? __ldg(q2 + 8 * k + 4 + c) : make_float2(0.f, 0.f);
                qb[k][0] = dm_pack<BF16>(x.x, x.y);
                qb[k][1] = dm_pack<BF16>(y.x, y.y);
            }
        } else {
            const u32* qrow = reinterpret_cast<const u32*>(qs);
#pragma unroll
            for (int k = 0; k < DK; ++k) {
                qb[k][0] = has ? __ldg(qrow + 8 * k + c) : 0u;
                qb[k][1] = has ? __ldg(qrow + 8 * k + 4 + c) : 0u;
            }
        }
    };
    if (!early) load_q();
    DecSplit sp;
    if (!decode_split<DEC_THREADS>(da, DEC_WARPS * DM_KEYS, sp)) {
        decode_unused_split<DEC_THREADS>(da, sp, !early);
        return;
    }

    // This warp's keys [wlo, whi): a quarter of the split in whole tiles.
    const i64 wper = ((sp.ke - sp.kb + DEC_WARPS - 1) / DEC_WARPS + DM_KEYS - 1) / DM_KEYS * DM_KEYS;
    const i64 wlo = sp.kb + warp * wper < sp.ke ? sp.kb + warp * wper : sp.ke;
    const i64 whi = wlo + wper < sp.ke ? wlo + wper : sp.ke;
    const int tiles = (int)((whi - wlo + DM_KEYS - 1) / DM_KEYS);

    const i64 ps = a.page_size;
    const u64 rowlen = (u64)a.kv_heads * D;
    const u64 page_elems = (u64)ps * rowlen;  // one layer's keys of a page
    const u64 page_stride = 2 * (u64)a.layers * page_elems;
    const u64 head_off = (u64)a.layer * page_elems + (u64)kvh * D;
    const u64 value_off = (u64)a.layers * page_elems;  // keys -> values of one page
    const u32* table = (const u32*)a.table + sp.b * a.width;
    const S* cache = (const S*)a.blocks;
    const u32 pages = a.pages < (i64)0xffffffff ? (u32)a.pages : 0xffffffffu;

    // The page ids of pages wp0 + lane (cur) and wp0 + 32 + lane (nxt); past the table: none.
    i64 wp0 = (u32)wlo / (u32)ps;  // keys and pages of a table fit 32 bits (see decode_split)
    u32 cur = 0xffffffffu, nxt = 0xffffffffu;
    if (tiles > 0) {
        if (wp0 + lane < a.width) cur = __ldcg(table + wp0 + lane);
        if (wp0 + 32 + lane < a.width) nxt = __ldcg(table + wp0 + 32 + lane);
    }

    const u32 ring = (u32)__cvta_generic_to_shared(dm_buf + warp * WARP_BYTES);
    const u32 ptile = ring + RING;
    u32* pt = reinterpret_cast<u32*>(dm_buf + warp * WARP_BYTES + RING);

    // Tile t's copies into ring slot t % DM_STAGES (none past the warp's tiles); returns which
    // of its keys are real (bit k: key k has a page and lies in the range). Called for t = 0,
    // 1, 2, ... in order: a tile starts at most 16 keys after the previous one, so at most one
    // window step is due and its keys lie in pages wp0 .. wp0 + 47.
    auto issue = [&](int t) -> u32 {
        if (t >= tiles) return 0u;
        const i64 k0 = wlo + (i64)t * DM_KEYS;
        i64 rel0 = k0 - wp0 * ps;
        if (rel0 >= 32 * ps) {
            wp0 += 32;
            rel0 -= 32 * ps;
            cur = nxt;
            nxt = wp0 + 32 + lane < a.width ? __ldg(table + wp0 + 32 + lane) : 0xffffffffu;
        }
        const int kl = lane % DM_KEYS;  // the key this lane locates (both half warps alike)
        const u32 rel = (u32)rel0 + (u32)kl;
        const u32 pw = rel / (u32)ps, slot = rel - pw * (u32)ps;
        u32 page = __shfl_sync(FULL_MASK, cur, pw & 31);
        if ((u32)(rel0 + DM_KEYS - 1) / (u32)ps >= 32) {  // the tile reaches the next window
            const u32 far = __shfl_sync(FULL_MASK, nxt, pw & 31);
            if (pw >= 32) page = far;
        }
        const bool ok = k0 + kl < whi && page < pages;
        const u64 off = ok ? (u64)page * page_stride + head_off + (u64)slot * rowlen : 0;
        const u32 vm = __ballot_sync(FULL_MASK, ok) & ((1u << DM_KEYS) - 1);
        const u32 kdst = ring + (u32)(t % DM_STAGES) * SLOT;
#pragma unroll
        for (int p = 0; p < PASSES; ++p) {
            const int k = p * KPP + lane / CPR % KPP, ch = lane % CPR;
            const u64 at = __shfl_sync(FULL_MASK, off, k);
            const bool v = (vm >> k) & 1u;
            const S* src = cache + at + ch * EPC;
            dm_cp16(kdst + (u32)(k * ROWK + ch * 16), src, v);
            dm_cp16(kdst + (u32)(TILEK + k * ROWV + ch * 16), src + value_off, v);
        }
        return vm;
    };

    float o[DK][4];  // O^T: m tile k holds dims 16k + g, +8 of heads 2c, 2c + 1
#pragma unroll
    for (int k = 0; k < DK; ++k) o[k][0] = o[k][1] = o[k][2] = o[k][3] = 0.f;
    float m0 = NEG_INF, m1 = NEG_INF, l0 = 0.f, l1 = 0.f;  // heads 2c and 2c + 1
    // ldmatrix row addresses: K as A (matrices: keys 0-7 | 8-15 x dims 0-7, then dims 8-15),
    // V^T as A (matrices: keys 0-7 x dims 0-7 | 8-15, then keys 8-15).
    // (f32 rows: the same fragments from four 8-byte loads (keys) or eight 4-byte loads
    // (values) per lane, rounded to bf16 pairs: key g, g + 8 x dims 2c, 2c + 1 (+ 8); dim g,
    // g + 8 x keys 2c, 2c + 1 (+ 8).)
    const u32 kaddr = (u32)(((lane & 7) + ((lane >> 3) & 1) * 8) * ROWK + (lane >> 4) * 16);
    const u32 vaddr = (u32)(((lane & 7) + (lane >> 4) * 8) * ROWV + ((lane >> 3) & 1) * 16);
    constexpr int RWK = ROWK / 4, RWV = ROWV / 4;  // f32 rows in words

    // The first tiles' copies. With DecodeArgs::early, those of tiles whose keys all lie below
    // sp.cached go before the wait: such keys were stored by an earlier execution of the program
    // (this step's stores write its own rows' keys, at cached and past it), and the stream's
    // previous kernel is one of this execution (passes/mark_early_index.rs), so the cache's
    // bytes there are final; at decode's short splits that is every copy of the block, whose
    // round trip then overlaps the kernels ahead of it.
    u32 vms[DM_STAGES - 1];
    bool waited = !early;
#pragma unroll
    for (int t = 0; t < DM_STAGES - 1; ++t) {
        const i64 end = wlo + (i64)(t + 1) * DM_KEYS;
        if (!waited && t < tiles && (end < whi ? end : whi) > sp.cached) {
            decode_wait();  // (uniform in the warp: wlo, whi and tiles are the warp's)
            waited = true;
        }
        vms[t] = issue(t);
        dm_commit();
    }
    if (!waited) decode_wait();
    if (early) load_q();
    for (int t = 0; t < tiles; ++t) {
        dm_wait<DM_STAGES - 2>();  // this lane's copies of tile t have landed
        __syncwarp();              // and every lane's; tile t - 1's slot and P^T are free
        const u32 vm = vms[0];
#pragma unroll
        for (int s = 0; s + 1 < DM_STAGES - 1; ++s) vms[s] = vms[s + 1];
        vms[DM_STAGES - 2] = issue(t + DM_STAGES - 1);
        dm_commit();

        const u32 kt = ring + (u32)(t % DM_STAGES) * SLOT, vt = kt + TILEK;
        const float* kf = reinterpret_cast<const float*>(dm_buf + warp * WARP_BYTES + t % DM_STAGES * SLOT);
        const float* vf = kf + TILEK / 4;
        float s4[4] = {0.f, 0.f, 0.f, 0.f};  // keys g, g + 8 x heads 2c, 2c + 1
#pragma unroll
        for (int k = 0; k < DK; ++k) {
            u32 af[4];
            if constexpr (F32) {
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    const float* k0 = kf + (g + 8 * (r & 1)) * RWK + 16 * k + 8 * (r >> 1) + 2 * c;
                    const float2 x = *reinterpret_cast<const float2*>(k0);
                    af[r] = dm_pack<BF16>(x.x, x.y);
                }
            } else {
                dm_ldsm(af, kt + kaddr + k * 32);
            }
            dm_mma<BF16>(s4, af, qb[k][0], qb[k][1]);
        }
        float x[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) x[e] = s4[e] * a.scale;
        if (capped) {  // one branch for the four scores (see attention_decode.cu's kernel)
#pragma unroll
            for (int e = 0; e < 4; ++e) x[e] = a.softcap * tanhf(x[e] * inv_cap);
        }
#pragma unroll
        for (int e = 0; e < 4; ++e) x[e] = (vm >> (g + 8 * (e >> 1))) & 1u ? x[e] : NEG_INF;
        float mx0 = fmaxf(x[0], x[2]), mx1 = fmaxf(x[1], x[3]);
#pragma unroll
        for (int off = 4; off < 32; off <<= 1) {
            mx0 = fmaxf(mx0, __shfl_xor_sync(FULL_MASK, mx0, off));
            mx1 = fmaxf(mx1, __shfl_xor_sync(FULL_MASK, mx1, off));
        }
        const float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1);
        const float b0 = n0 == NEG_INF ? 0.f : n0, b1 = n1 == NEG_INF ? 0.f : n1;
        const float r0 = __expf(m0 - b0), r1 = __expf(m1 - b1);
        m0 = n0;
        m1 = n1;
        const float p0 = __expf(x[0] - b0), p1 = __expf(x[1] - b1), p2 = __expf(x[2] - b0), p3 = __expf(x[3] - b1);
        l0 = l0 * r0 + p0 + p2;
        l1 = l1 * r1 + p1 + p3;
#pragma unroll
        for (int k = 0; k < DK; ++k) {
            o[k][0] *= r0;
            o[k][1] *= r1;
            o[k][2] *= r0;
            o[k][3] *= r1;
        }
        // P^T rows (keys) of 8 heads: this lane's two keys, heads 2c and 2c + 1.
        pt[g * 4 + c] = dm_pack<BF16>(p0, p1);
        pt[(g + 8) * 4 + c] = dm_pack<BF16>(p2, p3);
        __syncwarp();
        u32 pb[2];
        dm_ldsm2_t(pb, ptile + (lane & 15) * 16);
#pragma unroll
        for (int k = 0; k < DK; ++k) {
            u32 af[4];
            if constexpr (F32) {
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    const float* v0 = vf + (2 * c + 8 * (r >> 1)) * RWV + 16 * k + 8 * (r & 1) + g;
                    af[r] = dm_pack<BF16>(v0[0], v0[RWV]);
                }
            } else {
                dm_ldsm_t(af, vt + vaddr + k * 32);
            }
            dm_mma<BF16>(o[k], af, pb[0], pb[1]);
        }
    }
    dm_wait<0>();
#pragma unroll
    for (int off = 4; off < 32; off <<= 1) {
        l0 += __shfl_xor_sync(FULL_MASK, l0, off);
        l1 += __shfl_xor_sync(FULL_MASK, l1, off);
    }
    // The warps' (max, sum, values) per head into red [DEC_WARPS][DM_HEADS][2 + D], over the
    // rings once every warp is done with them.
    __syncthreads();
    float* red = reinterpret_cast<float*>(dm_buf);
    float* r0p = red + (warp * DM_HEADS + 2 * c) * (2 + D);
    float* r1p = r0p + (2 + D);
    if (g == 0) {
        r0p[0] = m0;
        r0p[1] = l0;
        r1p[0] = m1;
        r1p[1] = l1;
    }
#pragma unroll
    for (int k = 0; k < DK; ++k) {
        r0p[2 + 16 * k + g] = o[k][0];
        r1p[2 + 16 * k + g] = o[k][1];
        r0p[2 + 16 * k + g + 8] = o[k][2];
        r1p[2 + 16 * k + g + 8] = o[k][3];
    }
    __syncthreads();
    decode_finish<S, DEC_THREADS>(da, sp, red, DM_HEADS);
}

#define DECODE_MMA(D, NAME, BF16, F32)                                                             \
    extern "C" __global__ void __launch_bounds__(DEC_THREADS, 1) paged_decode_mma_d##D##_##NAME(   \
        DecodeArgs a) {                                                                            \
        paged_decode_mma<D, BF16, F32>(a);                                                         \
    }
#define DECODE_MMA_DIMS(NAME, BF16)    \
    DECODE_MMA(16, NAME, BF16, false)  \
    DECODE_MMA(32, NAME, BF16, false)  \
    DECODE_MMA(64, NAME, BF16, false)  \
    DECODE_MMA(128, NAME, BF16, false) \
    DECODE_MMA(256, NAME, BF16, false)

DECODE_MMA_DIMS(f16, false)
DECODE_MMA_DIMS(bf16, true)
// f32 caches, rounded to bf16 as the fragments are read (launch/attention_decode.rs:
// `attention.decode_f32_mma`); rows of up to 128 dims (a warp copies a row in one pass).
DECODE_MMA(16, f32, true, true)
DECODE_MMA(32, f32, true, true)
DECODE_MMA(64, f32, true, true)
DECODE_MMA(128, f32, true, true)
