#line 1 "qgemv_tc.cu"
// qgemv_tc.cu: qmatmul for 1 or 2 lhs rows over 4-bit weights (Q4_0, Q4_1, Q4_K) on tensor
// cores (mma.sync m16n8k16 bf16, sm_80+): qgemv_tc_<enc>_m{1,2}. At M = 1 a 4-bit weight is half
// a byte, and decoding it on the CUDA cores (qgemv.cu: permute, subtract, fma per weight) costs
// more issue slots than the memory system needs to deliver it; here a warp decodes 8 weights per
// lane per instruction pair and one mma does 256 multiply-adds.
//
// Opt-in for now (MAX_QGEMV_TC=1): exact and tested, but on an H200 still slower than qgemv.cu.
//
// Exactness. The quants become bf16 exactly (128 + q under bf16's exponent, minus the offset,
// all small integers). The lhs is split into three bf16 parts, x = hi + mid + lo (each the
// bf16 rounding of what the previous parts leave), which is exact for every f32 whose low part
// stays a normal bf16 (|x| > 2^-100); each part is a column of the mma's B operand (lhs row r:
// columns 3r .. 3r+2), so products are exact and only the f32 accumulation rounds, as in the
// CUDA-core kernel. Block scales apply per 32-element unit after the unit's two mma steps,
// mins (Q4_1, Q4_K) as min * sum(lhs over the unit), like qgemv.cu's combine: the result equals
// lhs @ dequantize(w)^T up to f32 rounding, in a fixed order (deterministic).
//
// Layout. qgemv_tc_prep_m{1,2} first splits the lhs once per call into the mma's B fragments
// ([K/16 k-steps][12 lanes per lhs row][2 registers], the lanes that hold columns 0 .. 3MR-1)
// and its sums per 32-element unit, in scratch memory. A block of 4 warps owns 32 weight rows
// (two groups of 16, the mma's M; two warps per group take half of each chunk's units, for twice
// the warps to hide latency with) and walks K in chunks of 512 elements (16 units of 32) through
// a ring of 3 shared-memory stages, each holding the chunk's B fragments, unit sums and each
// row's chunk bytes, by cp.async. Per chunk the block turns each row's unit scales (and mins)
// into f32 pairs; each warp then runs 2 mma per unit (elements 0-15, 16-31) and scales the unit's
// result into its accumulators. Rows must start on 16 bytes (row_bytes % 16 == 0, w aligned):
// launch/quant.rs sends other layouts to qgemv.cu.

#define TC_WARPS 4                 // 2 row groups of 16 (the mma's M) x 2 halves of each chunk's units
#define TC_THREADS (TC_WARPS * 32)
#define TC_ROWS 32
#define TC_CHUNK 512
#define TC_UNITS (TC_CHUNK / 32)
#define TC_ST 3

// Row slots 16 bytes longer than a row chunk (304 or 336 bytes: 48 or 80 mod 128), so the 8
// rows one load instruction touches fall in distinct banks.
template <int E> struct TcChunk {
    enum { BYTES = TC_CHUNK / Enc<E>::ELEMS * Enc<E>::BYTES, SLOT = BYTES + 16 };
};

// One stage: B fragments [32 k-steps][12 * MR lanes] (u32 pairs), lhs unit sums [MR][16], then
// TC_ROWS row slots. After the ring: unit scales [TC_ROWS][16] (scale, min).
template <int E, int MR> struct Tc {
    enum {
        BLANES = 12 * MR,
        FRAG = 32 * BLANES * 8,
        LSUM = MR * TC_UNITS * 4,
        SLOTS = FRAG + LSUM,
        BUF = SLOTS + TC_ROWS * TcChunk<E>::SLOT,
        SC_OFF = TC_ST * BUF,
        RED_OFF = SC_OFF + TC_ROWS * TC_UNITS * 8,
        SMEM = RED_OFF + 2 * 32 * (4 + 2 * MR) * 4,
    };
};

// bf16 bits of x rounded to nearest even (x finite).
__device__ __forceinline__ u32 bf16_rn(float x) {
    const u32 b = __float_as_uint(x);
    return (b + 0x7FFFu + ((b >> 16) & 1u)) >> 16;
}
__device__ __forceinline__ float bf16_f32(u32 h) { return __uint_as_float(h << 16); }

// The mma's k order within a 16-element step is ours to choose, as long as A and B agree: lane
// t's A registers hold step elements (4t, 4t+2) and (4t+1, 4t+3), so one 32-bit word of quant
// bytes feeds both, and a mask picks two nibbles at once. An A register from the nibbles `sh`
// bits down in bytes 0 and 2 of v, minus `bias2` (a bf16 pair).
__device__ __forceinline__ u32 quant_pair(u32 v, int sh, u32 bias2) {
    const u32 q = ((v >> sh) & 0x000F000Fu) | 0x43004300u;  // 128 + q per half
    u32 r;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(r) : "r"(q), "r"(0x3F803F80u), "r"(bias2));
    return r;
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
#if __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

__device__ __forceinline__ u32 ld_u16(const u8* p) { return *(const u16*)p; }

// The 4 quant bytes at p; Q4_0's 18-byte blocks leave them only 2-byte aligned.
template <int E> __device__ __forceinline__ u32 quant_word(const u8* p) {
    if (E == ENC_Q4_0) return ld_u16(p) | (ld_u16(p + 2) << 16);
    return *(const u32*)p;
}

// Unit u's (scale, min) of the row chunk at p, the min signed as it enters the sum
// (w = scale * q + min).
template <int E> __device__ __forceinline__ float2 unit_scale(const u8* p, int u);
template <> __device__ __forceinline__ float2 unit_scale<ENC_Q4_0>(const u8* p, int u) {
    return make_float2(f16_at(p + u * 18, 0), 0.f);
}
template <> __device__ __forceinline__ float2 unit_scale<ENC_Q4_1>(const u8* p, int u) {
    return make_float2(f16_at(p + u * 20, 0), f16_at(p + u * 20, 2));
}
template <> __device__ __forceinline__ float2 unit_scale<ENC_Q4_K>(const u8* p, int u) {
    const u8* b = p + (u / 8) * 144;
    u32 sc, m;
    scale_min(u % 8, b + 4, sc, m);
    return make_float2(f16_at(b, 0) * (float)sc, -(f16_at(b, 2) * (float)m));
}

// Byte offset, within a row chunk, of unit u's 16 quant bytes for mma step s (0: elements
// 0-15, 1: 16-31), and which nibble holds them.
template <int E> __device__ __forceinline__ int quant_at(int u, int s) {
    if (E == ENC_Q4_K) return (u / 8) * 144 + 16 + 32 * ((u % 8) / 2) + 16 * s;
    return u * Enc<E>::BYTES + (E == ENC_Q4_1 ? 4 : 2);
}

// frag [K/16][12 * MR][2] u32: the B fragments of the lhs split x = hi + mid + lo; lsum [MR][K/32]:
// the lhs sums per unit. One thread per lhs value; a warp is one unit (K % 32 == 0).
template <int MR>
__device__ __forceinline__ void qgemv_tc_prep(const float* __restrict__ lhs, u16* __restrict__ frag,
                                              float* __restrict__ lsum, i64 k) {
    const i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    const bool valid = i < MR * k;  // whole warps either way
    const int r = valid ? (int)(i / k) : 0;
    const i64 e = valid ? i % k : 0;
    const float x = valid ? lhs[i] : 0.f;
    if (valid) {
        const u32 hi = bf16_rn(x);
        const float r1 = x - bf16_f32(hi);
        const u32 mid = bf16_rn(r1);
        const u32 lo = bf16_rn(r1 - bf16_f32(mid));
        // Step element kk = 4t + j sits in lane 4c + t (column c = 3r + part), register j & 1,
        // half j >> 1 (see quant_pair); the next column is 4 lanes * 2 registers * 2 halves on.
        const int kk = (int)(e % 16), j = kk % 4;
        const i64 at = (((e / 16) * (12 * MR) + 12 * r + kk / 4) * 2 + (j & 1)) * 2 + (j >> 1);
        frag[at] = (u16)hi;
        frag[at + 16] = (u16)mid;
        frag[at + 32] = (u16)lo;
    }
    float part = x;
#pragma unroll
    for (int off = 16; off > 0; off /= 2) part += __shfl_xor_sync(0xFFFFFFFFu, part, off);
    if (valid && e % 32 == 0) lsum[r * (k / 32) + e / 32] = part;
}

template <int E, int MR>
__device__ __forceinline__ void qgemv_tc(const u32* __restrict__ frag, const float* __restrict__ lsum_g,
                                         const u8* __restrict__ w, float* __restrict__ out, i64 m, i64 n, i64 k,
                                         i64 row_bytes) {
    extern __shared__ __align__(16) u8 tc_smem[];
    typedef Tc<E, MR> S;
    typedef TcChunk<E> C;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int rg = warp % 2, kh = warp / 2;  // row group (rows 16 rg ..) and half of the units
    const i64 row0 = (i64)blockIdx.x * TC_ROWS;
    const i64 chunks = (k + TC_CHUNK - 1) / TC_CHUNK, units_k = k / 32;
    const u32 bias2 = E == ENC_Q4_0 ? 0xC308C308u : 0xC300C300u;  // -136 (q - 8) or -128 (q)
    float2* scales = (float2*)(tc_smem + S::SC_OFF);
    // Staging: threads (c, part) copy a quarter of row c's chunk, 16 bytes at a time.
    const int my_row = tid / 4, my_part = tid % 4;
    const bool row_ok = row0 + my_row < n;
    const u8* my_src = w + (row0 + my_row) * row_bytes;

    auto stage = [&](i64 ch) {
        if (ch < chunks) {
            u8* st = tc_smem + (int)(ch % TC_ST) * S::BUF;
            const int steps = (int)min((i64)32, (k - ch * TC_CHUNK) / 16);
            // B fragments of the chunk's k-steps (contiguous in frag), then its unit sums.
            const u8* fsrc = (const u8*)(frag + ch * 32 * S::BLANES * 2);
            for (int v = tid; v < steps * S::BLANES / 2; v += TC_THREADS) cp_async16(st + 16 * v, fsrc + 16 * v, true);
            for (int v = tid; v < MR * TC_UNITS / 4; v += TC_THREADS) {
                const int r = v / (TC_UNITS / 4), o = 4 * (v % (TC_UNITS / 4));
                const bool ok = ch * TC_UNITS + o < units_k;
                cp_async16(st + S::FRAG + 4 * (r * TC_UNITS + o), ok ? lsum_g + r * units_k + ch * TC_UNITS + o : lsum_g, ok);
            }
            const i64 b0 = ch * C::BYTES;
            const int nv = (int)(min((i64)C::BYTES, row_bytes - b0) / 16);
            u8* dst = st + S::SLOTS + my_row * C::SLOT;
            const u8* src = my_src + b0;
            constexpr int V = C::BYTES / 16, PART = (V + 3) / 4;
#pragma unroll
            for (int j = 0; j < PART; ++j) {
                const int o = my_part * PART + j;
                if (o < V && o < nv && row_ok) cp_async16(dst + 16 * o, src + 16 * o, true);
            }
        }
        cp_async_commit();
    };

    float acc[4] = {0.f, 0.f, 0.f, 0.f};  // rows g, g + 8 of the warp's 16; columns 2t, 2t + 1
    float mins[2][MR];                     // lane t == 0: sum of min * lhs unit sums, rows g, g + 8
#pragma unroll
    for (int r = 0; r < MR; ++r) mins[0][r] = mins[1][r] = 0.f;

#pragma unroll
    for (int s = 0; s < TC_ST - 1; ++s) stage(s);
    for (i64 ch = 0; ch < chunks; ++ch) {
        cp_async_wait<TC_ST - 2>();
        __syncthreads();  // chunk ch is in; the previous chunk's scales are no longer read
        stage(ch + TC_ST - 1);
        const u8* st = tc_smem + (int)(ch % TC_ST) * S::BUF;
        const u32* bfrag = (const u32*)st;
        const float* lsum = (const float*)(st + S::FRAG);
        const u8* slots = st + S::SLOTS;
        const int units = (int)min((i64)TC_UNITS, units_k - ch * TC_UNITS);

        // Unit scales of every row: threads (c, part) take 4 units of row c (zero past K's end,
        // so that bytes never staged add nothing).
        {
            const u8* p = slots + my_row * C::SLOT;
#pragma unroll
            for (int j = 0; j < TC_UNITS / 4; ++j) {
                const int u = my_part * (TC_UNITS / 4) + j;
                scales[my_row * TC_UNITS + u] = u < units ? unit_scale<E>(p, u) : make_float2(0.f, 0.f);
            }
        }
        __syncthreads();

        const u8* r_lo = slots + (rg * 16 + g) * C::SLOT;  // row g
        const u8* r_hi = r_lo + 8 * C::SLOT;                  // row g + 8
        const float2* sc_lo = scales + (rg * 16 + g) * TC_UNITS;
        const float2* sc_hi = sc_lo + 8 * TC_UNITS;
        const bool has_b = lane < S::BLANES;
        // Unit u, its quants in nibble `nib` of their bytes for both steps (Q4_K) or in the low
        // nibbles for step 0 and the high ones for step 1 (Q4_0, Q4_1).
        auto unit = [&](int u, int nib_k) {
            float d[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
            for (int s = 0; s < 2; ++s) {
                const int q = quant_at<E>(u, s) + 4 * t, sh = 4 * (E == ENC_Q4_K ? nib_k : s);
                const u32 v_lo = quant_word<E>(r_lo + q), v_hi = quant_word<E>(r_hi + q);  // rows g, g+8
                u32 a[4];
                a[0] = quant_pair(v_lo, sh, bias2);      // row g: elements 4t, 4t+2
                a[1] = quant_pair(v_hi, sh, bias2);      // row g+8
                a[2] = quant_pair(v_lo, sh + 8, bias2);  // row g: elements 4t+1, 4t+3
                a[3] = quant_pair(v_hi, sh + 8, bias2);
                u32 b0 = 0, b1 = 0;
                if (has_b) {
                    const uint2 b = *(const uint2*)(bfrag + 2 * ((2 * u + s) * S::BLANES + lane));
                    b0 = b.x, b1 = b.y;
                }
                mma_bf16(d, a, b0, b1);
            }
            const float2 s_lo = sc_lo[u], s_hi = sc_hi[u];
            acc[0] = fmaf(s_lo.x, d[0], acc[0]);
            acc[1] = fmaf(s_lo.x, d[1], acc[1]);
            acc[2] = fmaf(s_hi.x, d[2], acc[2]);
            acc[3] = fmaf(s_hi.x, d[3], acc[3]);
            if (E != ENC_Q4_0 && t == 0) {
#pragma unroll
                for (int r = 0; r < MR; ++r) {
                    const float l = lsum[r * TC_UNITS + u];
                    mins[0][r] = fmaf(s_lo.y, l, mins[0][r]);
                    mins[1][r] = fmaf(s_hi.y, l, mins[1][r]);
                }
            }
        };
        // In pairs, so that a Q4_K unit's nibble is known at compile time (units is even there);
        // whole chunks unrolled, so that loads run ahead of the mma chains.
        constexpr int HALF = TC_UNITS / 2;
        const int u0 = kh * HALF, u1 = min(units, u0 + HALF);
        if (u1 - u0 == HALF) {
#pragma unroll
            for (int j = 0; j < HALF; j += 2) {
                unit(u0 + j, 0);
                unit(u0 + j + 1, 1);
            }
        } else {
            for (int u = u0; u < u1; u += 2) {
                unit(u, 0);
                if (u + 1 < u1) unit(u + 1, 1);
            }
        }
    }
    cp_async_wait<0>();
    // The second half's warps hand their sums to the first half's (a fixed order: deterministic).
    float* red = (float*)(tc_smem + S::RED_OFF) + (rg * 32 + lane) * (4 + 2 * MR);
    if (kh == 1) {
#pragma unroll
        for (int i = 0; i < 4; ++i) red[i] = acc[i];
#pragma unroll
        for (int r = 0; r < MR; ++r) red[4 + r] = mins[0][r], red[4 + MR + r] = mins[1][r];
    }
    __syncthreads();
    if (kh == 1) return;
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[i] += red[i];
#pragma unroll
    for (int r = 0; r < MR; ++r) mins[0][r] += red[4 + r], mins[1][r] += red[4 + MR + r];
    // Column c of the accumulators is part c % 3 of lhs row c / 3: add the parts (and the mins)
    // across the 4 lanes of the row.
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int r = 0; r < MR; ++r) {
            float v = (E != ENC_Q4_0 && t == 0) ? mins[h][r] : 0.f;
            if ((2 * t) / 3 == r) v += acc[2 * h];
            if ((2 * t + 1) / 3 == r) v += acc[2 * h + 1];
            v += __shfl_xor_sync(0xFFFFFFFFu, v, 1);
            v += __shfl_xor_sync(0xFFFFFFFFu, v, 2);
            const i64 row = row0 + rg * 16 + g + 8 * h;
            if (t == 0 && r < m && row < n) out[r * n + row] = v;
        }
}

#define QGEMV_TC(NAME, E, MR)                                                                                    \
    extern "C" __global__ void __launch_bounds__(TC_THREADS) qgemv_tc_##NAME##_m##MR(                            \
        const u32* frag, const float* lsum, const u8* w, float* out, i64 m, i64 n, i64 k, i64 row_bytes) {       \
        qgemv_tc<E, MR>(frag, lsum, w, out, m, n, k, row_bytes);                                                 \
    }
QGEMV_TC(q4_0, ENC_Q4_0, 1) QGEMV_TC(q4_0, ENC_Q4_0, 2)
QGEMV_TC(q4_1, ENC_Q4_1, 1) QGEMV_TC(q4_1, ENC_Q4_1, 2)
QGEMV_TC(q4_k, ENC_Q4_K, 1) QGEMV_TC(q4_k, ENC_Q4_K, 2)

#define QGEMV_TC_PREP(MR)                                                                                         \
    extern "C" __global__ void __launch_bounds__(256) qgemv_tc_prep_m##MR(const float* lhs, u16* frag, float* lsum, \
                                                                          i64 k) {                               \
        qgemv_tc_prep<MR>(lhs, frag, lsum, k);                                                                    \
    }
QGEMV_TC_PREP(1) QGEMV_TC_PREP(2)
