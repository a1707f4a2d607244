#line 1 "quant_common.cuh"
// quant_common.cuh: the GGUF block encodings shared by quant.cu (dequantize, large-M qmatmul,
// GPTQ) and qgemv.cu (small-M qmatmul); sources.rs puts it in front of both, after prelude.cuh.
// A block of ELEMS elements takes BYTES bytes: f16 scale(s), then packed quants (ggml layout).

#define ENC_Q4_0 0
#define ENC_Q4_1 1
#define ENC_Q8_0 2
#define ENC_Q4_K 3
#define ENC_Q5_K 4
#define ENC_Q6_K 5

template <int E> struct Enc;
template <> struct Enc<ENC_Q4_0> { enum { ELEMS = 32, BYTES = 18 }; };
template <> struct Enc<ENC_Q4_1> { enum { ELEMS = 32, BYTES = 20 }; };
template <> struct Enc<ENC_Q8_0> { enum { ELEMS = 32, BYTES = 34 }; };
template <> struct Enc<ENC_Q4_K> { enum { ELEMS = 256, BYTES = 144 }; };
template <> struct Enc<ENC_Q5_K> { enum { ELEMS = 256, BYTES = 176 }; };
template <> struct Enc<ENC_Q6_K> { enum { ELEMS = 256, BYTES = 210 }; };

__device__ __forceinline__ float f16_at(const u8* b, int o) {
    return to_f32(f16{(u16)((u32)b[o] | ((u32)b[o + 1] << 8))});
}

// ggml's get_scale_min_k4: the 6-bit scale and min of sub-block j (0..8) from 12 bytes.
__device__ __forceinline__ void scale_min(int j, const u8* q, u32& sc, u32& m) {
    if (j < 4) {
        sc = q[j] & 63;
        m = q[j + 4] & 63;
    } else {
        sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// The activations the GEMVs take and give: f32, or the bf16 / f16 of a model computing in 16
// bits (read as f32, products accumulated in f32, the result rounded once to T as stored).
// Lhs<T> is the staged lhs of qgemv.cu / qgemv_stream.cu: lane runs of 32 elements LD apart
// (f32: 144 bytes, 16-byte reads conflict-free; 16-bit: 80 bytes, so each 16-byte copy of VEC
// elements lands aligned, and 8-byte reads of 4 elements meet 2-way bank conflicts).
template <typename T> struct Lhs { enum { LD = 36, VEC = 4 }; };
template <> struct Lhs<bf16> { enum { LD = 40, VEC = 8 }; };
template <> struct Lhs<f16> { enum { LD = 40, VEC = 8 }; };

// Four elements at p (16-byte aligned for f32, 8-byte for 16-bit) as floats.
__device__ __forceinline__ void ld4(const float* p, float (&x)[4]) {
    const float4 v = *(const float4*)p;
    x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
}
__device__ __forceinline__ void ld4(const bf16* p, float (&x)[4]) {
    const uint2 v = *(const uint2*)p;
    x[0] = __uint_as_float(v.x << 16), x[1] = __uint_as_float(v.x & 0xFFFF0000u);
    x[2] = __uint_as_float(v.y << 16), x[3] = __uint_as_float(v.y & 0xFFFF0000u);
}
// (cvt keeps a NaN a NaN; the product only needs that.)
__device__ __forceinline__ float h2f(u32 bits) {
    float r;
    asm("cvt.f32.f16 %0, %1;\n" : "=f"(r) : "h"((u16)bits));
    return r;
}
__device__ __forceinline__ void ld4(const f16* p, float (&x)[4]) {
    const uint2 v = *(const uint2*)p;
    x[0] = h2f(v.x), x[1] = h2f(v.x >> 16), x[2] = h2f(v.y), x[3] = h2f(v.y >> 16);
}

// v rounded to T and back (the value a separate step would have stored).
template <typename T> __device__ __forceinline__ float round_t(float v) { return to_f32(FromF32<T>::go(v)); }

// The RMSNorm folded into a qmatmul's lhs (launch/quant.rs `QNorm`, passes/fuse_norm_gemv.rs):
// the kernels read x and normalise each element as they stage it, rounding to T as the
// rms_norm kernel (norm.cu) stores its result, so the product sees the values the separate
// step would have written. gamma == 0: no norm.
struct QNorm {
    u64 gamma;     // T [K]
    float eps;     // added to mean(x^2)
    float offset;  // added to every weight
    int mbc;       // the weight multiplies before the rounding to T
    int pad;
};

// The inverse rms of one lhs row of k elements (k % 32 == 0, 16-byte aligned), for every lane
// of the calling warp: the squares summed in rms_norm_cached_warp's order (each lane its
// 16-byte vectors in turn, then a butterfly), so rows that kernel takes get its very value.
// A lane loads U of its vectors at once (as raw words, the ones past k as zeros, which add
// nothing) before it sums them: one round trip per 32 * U vectors of the warp, at U registers
// of 16 bytes a lane (qgemv.cu: U = 8 for f32, 1024 elements a round trip, and U = 2 for 16-bit
// rows, 512; kernels short of registers keep U = 1).
template <typename T, int U = 1> __device__ __forceinline__ float qn_inv_rms(const T* row, int k, float eps, int lane) {
    constexpr int V = 16 / sizeof(T);
    float s = 0.f;
    for (int base = lane * V; base < k; base += 32 * V * U) {
        u32 raw[U][4];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int col = base + 32 * V * u;
            const uint4 v = col < k ? *(const uint4*)(row + col) : make_uint4(0u, 0u, 0u, 0u);
            raw[u][0] = v.x, raw[u][1] = v.y, raw[u][2] = v.z, raw[u][3] = v.w;
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            float a[V];
            Unpack<T>::go(raw[u], a);
#pragma unroll
            for (int e = 0; e < V; ++e) s += a[e] * a[e];
        }
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xFFFFFFFFu, s, off);
    s = __shfl_sync(0xFFFFFFFFu, s, 0);
    return 1.0f / sqrtf(s / (float)k + eps);
}

// The inverse rms of each of the m (<= MR) rows of lhs [m, k] (k a whole number of
// 16-byte vectors) into inv[MR], by all NW warps of the block: warp w sums 16-byte vectors w * 32 +
// lane + 32 NW j of each row (four loads in flight), the warps' sums join in order through
// part[NW * MR]. Every thread of the block calls it (two barriers).
template <typename T, int MR, int NW>
__device__ __forceinline__ void qn_inv_rms_block(const T* __restrict__ lhs, int k, int m, float eps, int warp, int lane,
                                                 float* part, float* inv) {
    constexpr int V = 16 / sizeof(T);
    const int nv = k / V;
#pragma unroll
    for (int r = 0; r < MR; ++r) {
        if (r >= m) break;
        const T* row = lhs + (i64)r * k;
        float s = 0.f;
#pragma unroll 4
        for (int v = warp * 32 + lane; v < nv; v += 32 * NW) {
#pragma unroll
            for (int h = 0; h < V / 4; ++h) {
                float a[4];
                ld4(row + V * v + 4 * h, a);
#pragma unroll
                for (int j = 0; j < 4; ++j) s += a[j] * a[j];
            }
        }
#pragma unroll
        for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xFFFFFFFFu, s, off);
        if (lane == 0) part[warp * MR + r] = s;
    }
    __syncthreads();
    if ((int)threadIdx.x < m) {
        float s = 0.f;
        for (int w = 0; w < NW; ++w) s += part[w * MR + threadIdx.x];
        inv[threadIdx.x] = 1.0f / sqrtf(s / (float)k + eps);
    }
    __syncthreads();
}

// x normalised by `inv` and times the weight g (as stored in T), rounded as rms_norm rounds.
template <typename T>
__device__ __forceinline__ float qn_apply(float x, float inv, float g, const QNorm& nm) {
    g += nm.offset;
    return nm.mbc ? round_t<T>(x * inv * g) : round_t<T>(round_t<T>(x * inv) * round_t<T>(g));
}

// The gated MLP's silu(gate) * up folded into the store of the gate and up products
// (passes/fuse_gated_gemv.rs on qmatmul siblings): gate, up and silu(gate) rounded to T as the
// separate products and the fused elementwise step (fused.rs: every node rounded) store them.
template <typename T> __device__ __forceinline__ float qn_gated(float gate, float up) {
    const float g = round_t<T>(gate);
    return round_t<T>(g * epi_sigmoid(g)) * round_t<T>(up);
}

// The decode step's rope and KV-cache store folded into the store of its q/k/v products
// (launch/qgemv_fold.rs `QRope`, passes/fuse_qkv_rope_store.rs): the launch's segments are q, k
// and v, one token per lhs row; q's elements rotate into q_out, k's into the cache, v's are
// copied into it, as attention.cu's rope_kv_store does with the products' stored values.
// Interleaved ropes only (a pair is two adjacent output rows, which one warp holds). on == 0:
// the plain products.
struct QRope {
    u64 q_out;   // T [m, q rows]
    u64 blocks;  // the paged cache [pages, 2, layers, page_size, kv rows]
    u64 slots, freqs, pos;
    i64 npos, page_size, layers, pages, layer;
    int dim, rot, freqs_f32, on;
};

// What qrope_store needs besides the products, for rows of one rotated pair: the pair's
// (cos, sin) at the token's position (`bad`: past the table) and the token's slot. The kernels
// read it once the previous kernel is done and well before their stores, which then wait on
// no global load.
struct QRopeAt {
    float c, s;
    u32 slot;
    int bad;
};

template <typename T> __device__ __forceinline__ QRopeAt qrope_at(const QRope& rp, int seg, i64 r, i64 row) {
    QRopeAt a = {1.f, 0.f, 0u, 0};
    const i64 d = row % rp.dim;
    if (seg < 2 && d < rp.rot) {
        const u32 p = ((const u32*)rp.pos)[r];
        a.bad = (i64)p >= rp.npos;  // past the table: NaN, as rope_at
        if (!a.bad) {
            const i64 at = (i64)p * rp.rot + (d & ~(i64)1);
            a.c = rp.freqs_f32 ? ((const float*)rp.freqs)[at] : to_f32(((const T*)rp.freqs)[at]);
            a.s = rp.freqs_f32 ? ((const float*)rp.freqs)[at + 1] : to_f32(((const T*)rp.freqs)[at + 1]);
        }
    }
    if (seg > 0) a.slot = ((const u32*)rp.slots)[r];
    return a;
}

// Element `row` of lhs row r of segment seg (n rows) as the unfused steps leave it, from the
// product's x and y, that of its pair's other row (row ^ 1; every pair of rotated dims is
// adjacent and begins on an even row), and the pair's QRopeAt.
template <typename T>
__device__ __forceinline__ void qrope_store(const QRope& rp, const QRopeAt& a, int seg, i64 r, i64 row, i64 n, float x,
                                            float y) {
    x = round_t<T>(x);  // the products' stored values
    y = round_t<T>(y);
    const i64 d = row % rp.dim;
    float o = x;
    if (seg < 2 && d < rp.rot) {
        float oa, ob;
        if (d % 2 == 0) rotate_pair(x, y, a.c, a.s, oa, ob);
        else rotate_pair(y, x, a.c, a.s, ob, oa);
        o = a.bad ? nan32(false) : oa;
    }
    if (seg == 0) {
        ((T*)rp.q_out)[r * n + row] = FromF32<T>::go(o);
        return;
    }
    const i64 slot = a.slot;
    if (slot >= rp.pages * rp.page_size) return;  // no page: not stored, as kv_cache_store
    const i64 page = slot / rp.page_size, off = slot % rp.page_size;
    T* keys = (T*)rp.blocks + ((page * 2) * rp.layers + rp.layer) * rp.page_size * n + off * n;
    keys[(seg == 2 ? rp.layers * rp.page_size * n : 0) + row] = FromF32<T>::go(o);
}

#define ENCODINGS(X) X(q4_0, ENC_Q4_0) X(q4_1, ENC_Q4_1) X(q8_0, ENC_Q8_0) X(q4_k, ENC_Q4_K) X(q5_k, ENC_Q5_K) X(q6_k, ENC_Q6_K)

// cp.async (sm_80+): 16-byte global -> shared copies that complete asynchronously, in groups.
// src-size 0 zero-fills the destination without reading.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
    const u32 d = (u32)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// The mbarrier steps of the bulk-copy GEMVs (qgemv_stream.cu, qgemv_mma.cu; sm_90).
__device__ __forceinline__ u32 smem_u32(const void* p) { return (u32)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_init(u32 bar, u32 arrivals) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals));
}
__device__ __forceinline__ void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
// One arrival that also expects `bytes` of asynchronous copies.
__device__ __forceinline__ void mbar_expect(u32 bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// Waits until the phase of parity `phase` has completed.
__device__ __forceinline__ void mbar_wait(u32 bar, u32 phase) {
    asm volatile(
        "{\n.reg .pred p;\nMBAR_WAIT:\nmbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@!p bra MBAR_WAIT;\n}\n" ::"r"(
            bar),
        "r"(phase)
        : "memory");
}
