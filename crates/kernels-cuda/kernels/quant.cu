#line 1 "quant.cu"
// quant.cu: dequantize of the GGUF block encodings (Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K), the
// dequantize-to-scratch half of qmatmul with many lhs rows, and GPTQ. Small-M qmatmul decodes in
// registers instead: qgemv.cu. crates/kernels-cuda/src/launch/quant.rs strings these together;
// the CPU reference is crates/runtime/src/cpu/quant.rs (+ quant/blocks.rs, quant/gptq.rs).
//
// dequantize_*   one thread per output element: it decodes its element from its block with the
//                CPU's exact sequence of f32 operations (explicit __fmul_rn / __fadd_rn, so
//                nothing is contracted into an fma), f16 scales through the prelude's exact
//                to_f32: bit-identical to the CPU and to ggml.
// dequant_t_*    the same, written transposed ([K, nc] for weight rows n0 .. n0+nc) as the
//                right-hand side of the f32 GEMM (qmatmul with many lhs rows, before Hopper).
// dequant_rows_bf16_*  the same values rounded to bf16 and written as stored ([nc, K], K-major):
//                the B operand of the Hopper wgmma GEMM (qmatmul with many lhs rows on sm_90).
// add_residual_f32: a residual added to a qmatmul's f32 result.
// store_cols_*:  a block of columns of the f32 GEMM's result stored as T (plus a residual).
// gptq_gemv_m{1,2,4,8}, gptq_dequant_t, store_cols_*: GPTQ (4 bits, [K/8, N] int32 words then
//                f16 scales [K/group, N]) for small and large M, and the column stores of the
//                chunked large-M path.

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

// 8 consecutive elements e .. e + 7 of the block at b (e % 8 == 0: they lie in one block, every
// block holds a multiple of 32) rounded to bf16 and packed as one 16-byte vector. The values are
// deq_elem's, operation for operation; the encodings read their quants as 16- or 32-bit words
// (their blocks start on 2 or 4 bytes: rows of whole blocks from an aligned base).
__device__ __forceinline__ u32 bf16_pair(float lo, float hi) {
    return (u32)FromF32<bf16>::go(lo).bits | ((u32)FromF32<bf16>::go(hi).bits << 16);
}
template <int E> __device__ __forceinline__ uint4 deq8_bytes(const u8* b, int e) {
    u32 p[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) p[i] = bf16_pair(deq_elem<E>(b, e + 2 * i), deq_elem<E>(b, e + 2 * i + 1));
    return make_uint4(p[0], p[1], p[2], p[3]);
}
template <int E> __device__ __forceinline__ uint4 deq8(const u8* b, int e) { return deq8_bytes<E>(b, e); }
// The 8 quant bytes at q (2-byte aligned) as two words.
__device__ __forceinline__ void bytes8_u16(const u8* q, u32& lo, u32& hi) {
    const u16* h = reinterpret_cast<const u16*>(q);
    lo = (u32)h[0] | ((u32)h[1] << 16);
    hi = (u32)h[2] | ((u32)h[3] << 16);
}
// Byte j (0..7) of the words lo, hi.
__device__ __forceinline__ u32 byte_of(u32 lo, u32 hi, int j) { return ((j < 4 ? lo : hi) >> (8 * (j & 3))) & 0xFF; }
template <> __device__ __forceinline__ uint4 deq8<ENC_Q4_0>(const u8* b, int e) {
    const float d = to_f32(f16{*reinterpret_cast<const u16*>(b)});
    u32 lo, hi;
    bytes8_u16(b + 2 + (e & 15), lo, hi);
    const int sh = e < 16 ? 0 : 4;
    u32 p[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int q0 = (int)((byte_of(lo, hi, 2 * i) >> sh) & 0xF) - 8;
        const int q1 = (int)((byte_of(lo, hi, 2 * i + 1) >> sh) & 0xF) - 8;
        p[i] = bf16_pair(__fmul_rn((float)q0, d), __fmul_rn((float)q1, d));
    }
    return make_uint4(p[0], p[1], p[2], p[3]);
}
template <> __device__ __forceinline__ uint4 deq8<ENC_Q4_1>(const u8* b, int e) {
    const u32 dm = *reinterpret_cast<const u32*>(b);
    const float d = to_f32(f16{(u16)(dm & 0xFFFF)}), m = to_f32(f16{(u16)(dm >> 16)});
    const u32* qw = reinterpret_cast<const u32*>(b + 4 + (e & 15));  // 4-byte aligned
    const uint2 q = make_uint2(qw[0], qw[1]);
    const int sh = e < 16 ? 0 : 4;
    u32 p[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const u32 q0 = (byte_of(q.x, q.y, 2 * i) >> sh) & 0xF, q1 = (byte_of(q.x, q.y, 2 * i + 1) >> sh) & 0xF;
        p[i] = bf16_pair(__fadd_rn(__fmul_rn(d, (float)q0), m), __fadd_rn(__fmul_rn(d, (float)q1), m));
    }
    return make_uint4(p[0], p[1], p[2], p[3]);
}
template <> __device__ __forceinline__ uint4 deq8<ENC_Q8_0>(const u8* b, int e) {
    const float d = to_f32(f16{*reinterpret_cast<const u16*>(b)});
    u32 lo, hi;
    bytes8_u16(b + 2 + e, lo, hi);
    u32 p[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float x0 = (float)(i8)byte_of(lo, hi, 2 * i), x1 = (float)(i8)byte_of(lo, hi, 2 * i + 1);
        p[i] = bf16_pair(__fmul_rn(x0, d), __fmul_rn(x1, d));
    }
    return make_uint4(p[0], p[1], p[2], p[3]);
}

// The super-block encodings: 8 elements of one 32-element sub-block (Q6_K: of one 16-element
// scale group), their quant bytes as two 16-bit-load words, the rest as deq_elem.
// Q4_K and Q5_K (its fifth bits from the 32 qh bytes at 16, its quants after them at 48).
template <int E> __device__ __forceinline__ uint4 deq8_k45(const u8* b, int e) {
    const int sb = e / 32, l = e % 32;
    u32 sc, m, lo, hi, hlo = 0, hhi = 0;
    scale_min(sb, b + 4, sc, m);
    const float d1 = __fmul_rn(f16_at(b, 0), (float)sc), m1 = __fmul_rn(f16_at(b, 2), (float)m);
    bytes8_u16(b + (E == ENC_Q5_K ? 48 : 16) + 32 * (sb / 2) + l, lo, hi);
    if (E == ENC_Q5_K) bytes8_u16(b + 16 + l, hlo, hhi);
    const int sh = 4 * (sb & 1);
    u32 p[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        float v[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int j = 2 * i + h;
            const u32 q = ((byte_of(lo, hi, j) >> sh) & 0xF) | (((byte_of(hlo, hhi, j) >> sb) & 1) << 4);
            v[h] = __fsub_rn(__fmul_rn(d1, (float)q), m1);
        }
        p[i] = bf16_pair(v[0], v[1]);
    }
    return make_uint4(p[0], p[1], p[2], p[3]);
}
template <> __device__ __forceinline__ uint4 deq8<ENC_Q4_K>(const u8* b, int e) { return deq8_k45<ENC_Q4_K>(b, e); }
template <> __device__ __forceinline__ uint4 deq8<ENC_Q5_K>(const u8* b, int e) { return deq8_k45<ENC_Q5_K>(b, e); }
template <> __device__ __forceinline__ uint4 deq8<ENC_Q6_K>(const u8* b, int e) {
    const int h = e / 128, q4 = (e % 128) / 32, l = e % 32;
    u32 lo, hi, hlo, hhi;
    bytes8_u16(b + 64 * h + 32 * (q4 & 1) + l, lo, hi);
    bytes8_u16(b + 128 + 32 * h + l, hlo, hhi);
    const float ds = __fmul_rn(f16_at(b, 208), (float)(i8)b[192 + e / 16]);
    const int sh = 4 * (q4 >> 1);
    u32 p[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        float v[2];
#pragma unroll
        for (int k = 0; k < 2; ++k) {
            const int j = 2 * i + k;
            const u32 nib = (byte_of(lo, hi, j) >> sh) & 0xF, top = (byte_of(hlo, hhi, j) >> (2 * q4)) & 3;
            v[k] = __fmul_rn(ds, (float)((int)(nib | (top << 4)) - 32));
        }
        p[i] = bf16_pair(v[0], v[1]);
    }
    return make_uint4(p[0], p[1], p[2], p[3]);
}

// out[r, :] = bf16(row n0 + r of w) for r < nc: a thread decodes 8 consecutive elements (deq8)
// and writes them as one 16-byte store, so the writes, which are most of the traffic,
// coalesce; the block bytes it reads come through L1 (its neighbours read the same block).
// k % 8 == 0, out 16-byte aligned (the launcher's scratch) and nc * k / 8 < 2^31 (a chunk of
// at most qmatmul_sm90.rs's WEIGHT_BUDGET bytes): 32-bit index arithmetic. Weights whose base
// is not 4-byte aligned (a view at an odd offset) take the byte loads of deq8_bytes.
template <int E>
__device__ __forceinline__ void dequant_rows_bf16(const u8* __restrict__ w, uint4* __restrict__ out, i64 row_bytes,
                                                  i64 k, i64 n0, i64 nc) {
    const u32 per_row = (u32)(k / 8), total = (u32)(nc * per_row);
    const bool words = ((u64)w & 3) == 0;
    for (u32 v = blockIdx.x * blockDim.x + threadIdx.x; v < total; v += gridDim.x * blockDim.x) {
        const u32 r = v / per_row, e0 = (v - r * per_row) * 8;
        const u8* b = w + (n0 + (i64)r) * row_bytes + (i64)(e0 / Enc<E>::ELEMS) * Enc<E>::BYTES;
        const int e = (int)(e0 % Enc<E>::ELEMS);
        out[v] = words ? deq8<E>(b, e) : deq8_bytes<E>(b, e);
    }
}

#define GQ_WARPS 8
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
    __shared__ float part[GQ_WARPS][MR][32];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const i64 col = (i64)blockIdx.x * 32 + lane;
    const int words = (int)(k / 8), per = (words + GQ_WARPS - 1) / GQ_WARPS;
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
            for (int i = 0; i < GQ_WARPS; ++i) v += part[i][r][lane];
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

// out[r, n0 + jj] = tmp[r, jj] (+ res[r, n0 + jj] when res is not null) for a [rows, nc] block
// of an [rows, n] result, rounded once to T.
template <typename T>
__device__ __forceinline__ void store_cols(const float* __restrict__ tmp, T* __restrict__ out, const T* __restrict__ res,
                                           i64 rows, i64 nc, i64 n, i64 n0) {
    GRID_STRIDE(e, rows * nc) {
        const i64 at = (e / nc) * n + n0 + e % nc;
        out[at] = FromF32<T>::go(res ? tmp[e] + to_f32(res[at]) : tmp[e]);
    }
}

// ---- entry points ----------------------------------------------------------------------------

// out += res: the residual of a qmatmul whose product came from the dequantize + GEMM path (the
// GEMV kernels add it as they store).
extern "C" __global__ void __launch_bounds__(256) add_residual_f32(float* out, const float* res, i64 total) {
    GRID_STRIDE(e, total) out[e] = out[e] + res[e];
}


#define ENC_KERNELS(NAME, E)                                                                                 \
    extern "C" __global__ void __launch_bounds__(256) dequantize_##NAME(const u8* x, float* out, i64 total) { \
        dequantize<E>(x, out, total);                                                                         \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(256)                                                        \
        dequant_t_##NAME(const u8* w, float* wt, i64 row_bytes, i64 k, i64 n0, i64 nc) {                     \
        dequant_t<E>(w, wt, row_bytes, k, n0, nc);                                                            \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(256)                                                        \
        dequant_rows_bf16_##NAME(const u8* w, uint4* out, i64 row_bytes, i64 k, i64 n0, i64 nc) {            \
        dequant_rows_bf16<E>(w, out, row_bytes, k, n0, nc);                                                   \
    }
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
#define STORE_COLS(T, NAME)                                                                                    \
    extern "C" __global__ void __launch_bounds__(256)                                                          \
        store_cols_##NAME(const float* tmp, T* out, const T* res, i64 rows, i64 nc, i64 n, i64 n0) {           \
        store_cols<T>(tmp, out, res, rows, nc, n, n0);                                                         \
    }
STORE_COLS(float, f32)
STORE_COLS(bf16, bf16)
STORE_COLS(f16, f16)
