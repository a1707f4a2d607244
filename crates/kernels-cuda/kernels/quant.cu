// quant.cu: the GGUF block encodings (Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K) and GPTQ.
// crates/kernels-cuda/src/launch/quant.rs strings these together; the CPU reference is
// crates/runtime/src/cpu/quant.rs (+ quant/blocks.rs, quant/gptq.rs).
//
// dequantize_*   one thread per output element: it decodes its element from its block with the
//                CPU's exact sequence of f32 operations (explicit __fmul_rn / __fadd_rn, so
//                nothing is contracted into an fma), f16 scales through the prelude's exact
//                to_f32: bit-identical to the CPU and to ggml.
// dequant_t_*    the same, written transposed ([K, nc] for weight rows n0 .. n0+nc) as the
//                right-hand side of a GEMM (qmatmul with many lhs rows).
// qgemv_*_m{1,2,4,8}   qmatmul for up to 8 lhs rows, the memory-bound decode case: the quantized
//                weights are read once, in 16-byte vectors, and decoded in registers. A block of
//                8 warps handles 16 weight rows (2 per warp) and walks K in chunks of 1024
//                elements: the lhs chunk ([MR, 1024] f32) is staged once in shared memory for the
//                whole block (lane runs 36 floats apart: 16-byte reads without bank
//                conflicts), each warp copies its rows' chunk bytes (whole blocks) into shared
//                memory (cp.async, double-buffered: the next chunk loads while this one is
//                decoded), then lane l decodes elements 32l .. 32l+31 of the chunk (one 32-element
//                block, or one sub-block of a 256-element super-block) of each of its rows and
//                accumulates the dot products with the lhs rows. Quants are turned into floats
//                with the 2^23 trick (bit operations instead of the slower int-to-float
//                conversion) and the block scales are applied once per 16 or 32 elements
//                (sum of lhs * q, times the scale, minus min times the sum of lhs), so the result
//                equals lhs @ dequantize(w)^T up to f32 rounding, like the CPU's gemm. Lanes then
//                reduce with shuffles; the result is deterministic.
// gptq_gemv_m{1,2,4,8}, gptq_dequant_t, store_cols_*: GPTQ (4 bits, [K/8, N] int32 words then
//                f16 scales [K/group, N]) for small and large M, and the column stores of the
//                chunked large-M path.

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

// Element e (0 .. ELEMS) of the block at b, exactly as crates/runtime/src/cpu/quant/blocks.rs.
template <int E> __device__ __forceinline__ float deq_elem(const u8* b, int e);
template <> __device__ __forceinline__ float deq_elem<ENC_Q4_0>(const u8* b, int e) {
    const u32 byte = b[2 + (e & 15)];
    const int q = (int)(e < 16 ? byte & 0xF : byte >> 4) - 8;
    return __fmul_rn((float)q, f16_at(b, 0));
}
template <> __device__ __forceinline__ float deq_elem<ENC_Q4_1>(const u8* b, int e) {
    const u32 byte = b[4 + (e & 15)];
    const u32 q = e < 16 ? byte & 0xF : byte >> 4;
    return __fadd_rn(__fmul_rn(f16_at(b, 0), (float)q), f16_at(b, 2));
}
template <> __device__ __forceinline__ float deq_elem<ENC_Q8_0>(const u8* b, int e) {
    return __fmul_rn((float)(i8)b[2 + e], f16_at(b, 0));
}
template <> __device__ __forceinline__ float deq_elem<ENC_Q4_K>(const u8* b, int e) {
    const int sb = e / 32, l = e % 32;
    u32 sc, m;
    scale_min(sb, b + 4, sc, m);
    const float d1 = __fmul_rn(f16_at(b, 0), (float)sc), m1 = __fmul_rn(f16_at(b, 2), (float)m);
    const u32 q = (b[16 + 32 * (sb / 2) + l] >> (4 * (sb & 1))) & 0xF;
    return __fsub_rn(__fmul_rn(d1, (float)q), m1);
}
template <> __device__ __forceinline__ float deq_elem<ENC_Q5_K>(const u8* b, int e) {
    const int sb = e / 32, l = e % 32;
    u32 sc, m;
    scale_min(sb, b + 4, sc, m);
    const float d1 = __fmul_rn(f16_at(b, 0), (float)sc), m1 = __fmul_rn(f16_at(b, 2), (float)m);
    const u32 q = ((b[48 + 32 * (sb / 2) + l] >> (4 * (sb & 1))) & 0xF) | (((b[16 + l] >> sb) & 1) << 4);
    return __fsub_rn(__fmul_rn(d1, (float)q), m1);
}
template <> __device__ __forceinline__ float deq_elem<ENC_Q6_K>(const u8* b, int e) {
    const int h = e / 128, p = (e % 128) / 32, l = e % 32;
    const u32 nib = (b[64 * h + 32 * (p & 1) + l] >> (4 * (p >> 1))) & 0xF;
    const u32 hi = (b[128 + 32 * h + l] >> (2 * p)) & 3;
    const int q = (int)(nib | (hi << 4)) - 32;
    return __fmul_rn(__fmul_rn(f16_at(b, 208), (float)(i8)b[192 + e / 16]), (float)q);
}

#define GRID_STRIDE(e, total) \
    for (i64 e = blockIdx.x * (i64)blockDim.x + threadIdx.x; e < (total); e += (i64)gridDim.x * blockDim.x)

// `total` elements of whole blocks (rows of blocks are contiguous, so the block of element i is
// i / ELEMS wherever the row breaks fall).
template <int E>
__device__ __forceinline__ void dequantize(const u8* __restrict__ x, float* __restrict__ out, i64 total) {
    GRID_STRIDE(i, total) out[i] = deq_elem<E>(x + (i / Enc<E>::ELEMS) * Enc<E>::BYTES, (int)(i % Enc<E>::ELEMS));
}

// wt[kk, jj] = weight row n0 + jj, element kk, for jj < nc.
template <int E>
__device__ __forceinline__ void dequant_t(const u8* __restrict__ w, float* __restrict__ wt, i64 row_bytes, i64 k,
                                          i64 n0, i64 nc) {
    GRID_STRIDE(e, k * nc) {
        const i64 jj = e % nc, kk = e / nc;
        const u8* b = w + (n0 + jj) * row_bytes + (kk / Enc<E>::ELEMS) * Enc<E>::BYTES;
        wt[e] = deq_elem<E>(b, (int)(kk % Enc<E>::ELEMS));
    }
}

// ---- qgemv -----------------------------------------------------------------------------------

#define QV_WARPS 8
#define QV_CW 2        // weight rows per warp
#define QV_CHUNK 1024  // elements of K per step, 32 per lane
#define QV_LD 36       // floats between lane runs in the staged lhs

template <int E> struct Chunk {
    enum { BYTES = QV_CHUNK / Enc<E>::ELEMS * Enc<E>::BYTES, SLOT = (BYTES + 16 + 15) / 16 * 16 };
};

// (float)v for 0 <= v < 2^23 with bit operations; `bias` is subtracted exactly.
__device__ __forceinline__ float small_float(u32 v, float bias) { return __int_as_float(0x4B000000u | v) - (8388608.f + bias); }

// The quant of element t (0..32) of sub-block sb of the block at b, as a float, with the
// encoding's offset applied (q - 8, signed q, q - 32); Q4_1, Q4_K, Q5_K give q >= 0.
template <int E> __device__ __forceinline__ float quant(const u8* b, int sb, int t);
template <> __device__ __forceinline__ float quant<ENC_Q4_0>(const u8* b, int, int t) {
    const u32 byte = b[2 + (t & 15)];
    return small_float(t < 16 ? byte & 0xF : byte >> 4, 8.f);
}
template <> __device__ __forceinline__ float quant<ENC_Q4_1>(const u8* b, int, int t) {
    const u32 byte = b[4 + (t & 15)];
    return small_float(t < 16 ? byte & 0xF : byte >> 4, 0.f);
}
template <> __device__ __forceinline__ float quant<ENC_Q8_0>(const u8* b, int, int t) {
    return small_float((u32)b[2 + t] ^ 0x80u, 128.f);
}
template <> __device__ __forceinline__ float quant<ENC_Q4_K>(const u8* b, int sb, int t) {
    return small_float((b[16 + 32 * (sb >> 1) + t] >> (4 * (sb & 1))) & 0xF, 0.f);
}
template <> __device__ __forceinline__ float quant<ENC_Q5_K>(const u8* b, int sb, int t) {
    const u32 lo = (b[48 + 32 * (sb >> 1) + t] >> (4 * (sb & 1))) & 0xF;
    return small_float(lo | (((b[16 + t] >> sb) & 1) << 4), 0.f);
}
template <> __device__ __forceinline__ float quant<ENC_Q6_K>(const u8* b, int sb, int t) {
    const int h = sb >> 2, p = sb & 3;
    const u32 nib = (b[64 * h + 32 * (p & 1) + t] >> (4 * (p >> 1))) & 0xF;
    const u32 hi = (b[128 + 32 * h + t] >> (2 * p)) & 3;
    return small_float(nib | (hi << 4), 32.f);
}

// The sub-block's contribution from s[h] = sum of lhs * quant and l[h] = sum of lhs over its
// halves h (elements 0..15, 16..31).
template <int E> __device__ __forceinline__ float combine(const u8* b, int sb, const float* s, const float* l) {
    if (E == ENC_Q4_0 || E == ENC_Q8_0) return f16_at(b, 0) * (s[0] + s[1]);
    if (E == ENC_Q4_1) return f16_at(b, 0) * (s[0] + s[1]) + f16_at(b, 2) * (l[0] + l[1]);
    if (E == ENC_Q4_K || E == ENC_Q5_K) {
        u32 sc, m;
        scale_min(sb, b + 4, sc, m);
        return (f16_at(b, 0) * (float)sc) * (s[0] + s[1]) - (f16_at(b, 2) * (float)m) * (l[0] + l[1]);
    }
    const float d = f16_at(b, 208);  // Q6_K: one scale per 16 elements
    return (d * (float)(i8)b[192 + 2 * sb]) * s[0] + (d * (float)(i8)b[192 + 2 * sb + 1]) * s[1];
}

// cp.async (sm_80+): 16-byte global -> shared copies that complete asynchronously, in groups.
// src-size 0 zero-fills the destination without reading.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
    const u32 d = (u32)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all_but_one() { asm volatile("cp.async.wait_group 1;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::); }

// Copies bytes [0, len) at src into slot + (src % 16), so that 16-byte aligned global vectors
// land on 16-byte aligned shared addresses: cp.async for the aligned middle, plain byte copies
// for the unaligned head and tail (only rows that do not start on 16 bytes have them).
__device__ __forceinline__ void stage_bytes(const u8* __restrict__ src, i64 len, u8* __restrict__ slot, int lane) {
    const u64 a = (u64)src, end = a + (u64)len;
    u8* dst = slot + (a & 15);
    u64 va = (a + 15) & ~15ull;
    if (va > end) va = end;
    u64 vb = end & ~15ull;
    if (vb < va) vb = va;
    for (u64 i = lane; i < va - a; i += 32) dst[i] = src[i];
    for (u64 i = lane; i < (vb - va) / 16; i += 32) cp_async16(dst + (va - a) + 16 * i, src + (va - a) + 16 * i, true);
    for (u64 i = lane; i < end - vb; i += 32) dst[(vb - a) + i] = src[(vb - a) + i];
}

// Two buffers of: the lhs chunk [MR][32 lanes][QV_LD] f32, then QV_WARPS * QV_CW weight slots.
template <int E, int MR> struct QvSmem {
    enum { LHS = MR * 32 * QV_LD * 4, BUF = LHS + QV_WARPS * QV_CW * Chunk<E>::SLOT };
};

template <int E, int MR>
__device__ __forceinline__ void qgemv(const float* __restrict__ lhs, const u8* __restrict__ w, float* __restrict__ out,
                                      i64 m, i64 n, i64 k, i64 row_bytes) {
    extern __shared__ __align__(16) u8 qv_smem[];
    typedef QvSmem<E, MR> S;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const i64 row0 = ((i64)blockIdx.x * QV_WARPS + warp) * QV_CW;
    const int sb = lane % (Enc<E>::ELEMS / 32);
    const bool lhs_aligned = ((u64)lhs & 15) == 0;  // k is a multiple of 32: every row then is
    const i64 chunks = (k + QV_CHUNK - 1) / QV_CHUNK;

    // Issues the copies of chunk ch into buffer buf (one cp.async group per thread).
    auto stage = [&](i64 ch, int buf) {
        float* ls = (float*)(qv_smem + buf * S::BUF);
        u8* slots = qv_smem + buf * S::BUF + S::LHS;
        const i64 k0 = ch * QV_CHUNK;
        for (int i = threadIdx.x; i < MR * QV_CHUNK / 4; i += blockDim.x) {
            const int r = i / (QV_CHUNK / 4), t = (i % (QV_CHUNK / 4)) * 4;  // 4 floats t..t+3 of row r
            const bool ok = r < m && k0 + t < k;
            float* d = ls + r * 32 * QV_LD + (t / 32) * QV_LD + t % 32;
            if (lhs_aligned) {
                cp_async16(d, ok ? lhs + r * k + k0 + t : lhs, ok);
            } else {
#pragma unroll
                for (int j = 0; j < 4; ++j) d[j] = ok ? lhs[r * k + k0 + t + j] : 0.f;
            }
        }
        const i64 b0 = ch * Chunk<E>::BYTES, blen = min((i64)Chunk<E>::BYTES, row_bytes - b0);
#pragma unroll
        for (int c = 0; c < QV_CW; ++c)
            if (row0 + c < n) stage_bytes(w + (row0 + c) * row_bytes + b0, blen, slots + (warp * QV_CW + c) * Chunk<E>::SLOT, lane);
        cp_async_commit();
    };

    float acc[QV_CW][MR];
#pragma unroll
    for (int c = 0; c < QV_CW; ++c)
#pragma unroll
        for (int r = 0; r < MR; ++r) acc[c][r] = 0.f;

    stage(0, 0);
    for (i64 ch = 0; ch < chunks; ++ch) {
        // Chunk ch + 1 loads into the other buffer (free since the barrier that ended the last
        // step) while chunk ch is decoded.
        if (ch + 1 < chunks) {
            stage(ch + 1, (int)((ch + 1) & 1));
            cp_async_wait_all_but_one();
        } else {
            cp_async_wait_all();
        }
        __syncthreads();
        const int buf = (int)(ch & 1);
        const i64 k0 = ch * QV_CHUNK, b0 = ch * Chunk<E>::BYTES;
        if (k0 + 32 * lane < k) {
            const float* ls = (const float*)(qv_smem + buf * S::BUF);
            const u8* slots = qv_smem + buf * S::BUF + S::LHS;
            const u8* bb[QV_CW];
#pragma unroll
            for (int c = 0; c < QV_CW; ++c)
                bb[c] = slots + (warp * QV_CW + c) * Chunk<E>::SLOT + ((u64)(w + (row0 + c) * row_bytes + b0) & 15) +
                        (lane * 32 / Enc<E>::ELEMS) * Enc<E>::BYTES;
            float s[QV_CW][MR][2], l[MR][2];
#pragma unroll
            for (int r = 0; r < MR; ++r) {
                l[r][0] = l[r][1] = 0.f;
#pragma unroll
                for (int c = 0; c < QV_CW; ++c) s[c][r][0] = s[c][r][1] = 0.f;
            }
            const float* lr = ls + lane * QV_LD;
#pragma unroll
            for (int t4 = 0; t4 < 8; ++t4) {
                float x[MR][4];
#pragma unroll
                for (int r = 0; r < MR; ++r) {
                    const float4 v = *(const float4*)(lr + r * 32 * QV_LD + 4 * t4);
                    x[r][0] = v.x, x[r][1] = v.y, x[r][2] = v.z, x[r][3] = v.w;
                }
#pragma unroll
                for (int u = 0; u < 4; ++u) {
                    const int t = 4 * t4 + u, h = t / 16;
#pragma unroll
                    for (int r = 0; r < MR; ++r) l[r][h] += x[r][u];
#pragma unroll
                    for (int c = 0; c < QV_CW; ++c) {
                        const float q = quant<E>(bb[c], sb, t);
#pragma unroll
                        for (int r = 0; r < MR; ++r) s[c][r][h] = fmaf(x[r][u], q, s[c][r][h]);
                    }
                }
            }
#pragma unroll
            for (int c = 0; c < QV_CW; ++c)
#pragma unroll
                for (int r = 0; r < MR; ++r) acc[c][r] += combine<E>(bb[c], sb, s[c][r], l[r]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int c = 0; c < QV_CW; ++c)
#pragma unroll
        for (int r = 0; r < MR; ++r) {
            float v = acc[c][r];
#pragma unroll
            for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, off);
            if (lane == 0 && r < m && row0 + c < n) out[r * n + row0 + c] = v;
        }
}

// ---- GPTQ ------------------------------------------------------------------------------------
// rhs: int32 words [K/8, N] (row k of the weight is nibble k % 8 of word [k / 8, n]), then f16
// scales [K/group, N]. With a permutation, weight row c takes its nibble from source row
// perm[c] (already checked on the host; negative entries count from the end) and its scale from
// group c / group. w = (q - 8) * scale, rounded once in f32 as the CPU does.

// The weight of row c, column col (K < 2^31, checked on the host: row arithmetic is 32-bit).
__device__ __forceinline__ float gptq_weight(const u8* __restrict__ rhs, const i32* __restrict__ perm, int c, i64 col,
                                             i64 n, int k, int group) {
    int s = c;
    if (perm) {
        s = perm[c];
        if (s < 0) s += k;
    }
    const u32 word = ((const u32*)rhs)[(i64)(s >> 3) * n + col];
    const u32 q = (word >> (4 * (s & 7))) & 0xF;
    const u16 sc = ((const u16*)(rhs + n * k / 2))[(i64)(c / group) * n + col];
    return __fmul_rn(__fsub_rn((float)q, 8.f), to_f32(f16{sc}));
}

// One lane per weight column (consecutive lanes read consecutive words), the 8 warps of a block
// split K in whole words; partial sums are added in warp order through shared memory.
template <int MR>
__device__ __forceinline__ void gptq_gemv(const bf16* __restrict__ lhs, const u8* __restrict__ rhs,
                                          const i32* __restrict__ perm, bf16* __restrict__ out, i64 m, i64 n, i64 k,
                                          i64 group) {
    __shared__ float part[QV_WARPS][MR][32];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const i64 col = (i64)blockIdx.x * 32 + lane;
    const int words = (int)(k / 8), per = (words + QV_WARPS - 1) / QV_WARPS;
    const int w0 = min(words, warp * per), w1 = min(words, (warp + 1) * per);
    const int kk = (int)k, gs = (int)group;
    const u16* scales = (const u16*)(rhs + n * k / 2);
    float acc[MR];
#pragma unroll
    for (int r = 0; r < MR; ++r) acc[r] = 0.f;
    if (col < n) {
        for (int wi = w0; wi < w1; ++wi) {
            const u32 word = perm ? 0u : ((const u32*)rhs)[(i64)wi * n + col];
#pragma unroll
            for (int u = 0; u < 8; ++u) {
                const int c = wi * 8 + u;
                const float wv = perm ? gptq_weight(rhs, perm, c, col, n, kk, gs)
                                      : __fmul_rn(__fsub_rn((float)((word >> (4 * u)) & 0xF), 8.f),
                                                  to_f32(f16{scales[(i64)(c / gs) * n + col]}));
#pragma unroll
                for (int r = 0; r < MR; ++r)
                    if (r < m) acc[r] = fmaf(to_f32(lhs[r * k + c]), wv, acc[r]);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < MR; ++r) part[warp][r][lane] = acc[r];
    __syncthreads();
    if (warp == 0 && col < n) {
#pragma unroll
        for (int r = 0; r < MR; ++r) {
            float v = 0.f;
            for (int i = 0; i < QV_WARPS; ++i) v += part[i][r][lane];
            if (r < m) out[r * n + col] = FromF32<bf16>::go(v);
        }
    }
}

__device__ __forceinline__ void gptq_dequant_t(const u8* __restrict__ rhs, const i32* __restrict__ perm,
                                               float* __restrict__ wt, i64 n, i64 k, i64 group, i64 n0, i64 nc) {
    GRID_STRIDE(e, k * nc) {
        const i64 c = e / nc;
        wt[e] = gptq_weight(rhs, perm, (int)c, n0 + (e - c * nc), n, (int)k, (int)group);
    }
}

// out[r, n0 + jj] = tmp[r, jj] for a [rows, nc] block of an [rows, n] result.
template <typename T>
__device__ __forceinline__ void store_cols(const float* __restrict__ tmp, T* __restrict__ out, i64 rows, i64 nc, i64 n,
                                           i64 n0) {
    GRID_STRIDE(e, rows * nc) out[(e / nc) * n + n0 + e % nc] = FromF32<T>::go(tmp[e]);
}

// ---- entry points ----------------------------------------------------------------------------

#define ENCODINGS(X) X(q4_0, ENC_Q4_0) X(q4_1, ENC_Q4_1) X(q8_0, ENC_Q8_0) X(q4_k, ENC_Q4_K) X(q5_k, ENC_Q5_K) X(q6_k, ENC_Q6_K)

#define QGEMV(NAME, E, MR)                                                                                 \
    extern "C" __global__ void __launch_bounds__(256)                                                     \
        qgemv_##NAME##_m##MR(const float* lhs, const u8* w, float* out, i64 m, i64 n, i64 k, i64 row_bytes) { \
        qgemv<E, MR>(lhs, w, out, m, n, k, row_bytes);                                                    \
    }
#define ENC_KERNELS(NAME, E)                                                                                 \
    extern "C" __global__ void __launch_bounds__(256) dequantize_##NAME(const u8* x, float* out, i64 total) { \
        dequantize<E>(x, out, total);                                                                         \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(256)                                                        \
        dequant_t_##NAME(const u8* w, float* wt, i64 row_bytes, i64 k, i64 n0, i64 nc) {                     \
        dequant_t<E>(w, wt, row_bytes, k, n0, nc);                                                            \
    }                                                                                                         \
    QGEMV(NAME, E, 1) QGEMV(NAME, E, 2) QGEMV(NAME, E, 4) QGEMV(NAME, E, 8)
ENCODINGS(ENC_KERNELS)

#define GPTQ_GEMV(MR)                                                                                        \
    extern "C" __global__ void __launch_bounds__(256, 1) gptq_gemv_m##MR(                                      \
        const bf16* lhs, const u8* rhs, const i32* perm, bf16* out, i64 m, i64 n, i64 k, i64 group) {       \
        gptq_gemv<MR>(lhs, rhs, perm, out, m, n, k, group);                                                  \
    }
GPTQ_GEMV(1) GPTQ_GEMV(2) GPTQ_GEMV(4) GPTQ_GEMV(8)

extern "C" __global__ void __launch_bounds__(256)
    gptq_dequant_t_f32(const u8* rhs, const i32* perm, float* wt, i64 n, i64 k, i64 group, i64 n0, i64 nc) {
    gptq_dequant_t(rhs, perm, wt, n, k, group, n0, nc);
}
extern "C" __global__ void __launch_bounds__(256)
    store_cols_f32(const float* tmp, float* out, i64 rows, i64 nc, i64 n, i64 n0) {
    store_cols<float>(tmp, out, rows, nc, n, n0);
}
extern "C" __global__ void __launch_bounds__(256)
    store_cols_bf16(const float* tmp, bf16* out, i64 rows, i64 nc, i64 n, i64 n0) {
    store_cols<bf16>(tmp, out, rows, nc, n, n0);
}
