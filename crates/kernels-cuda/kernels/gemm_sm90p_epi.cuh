#line 1 "gemm_sm90p_epi.cuh"
// gemm_sm90p_epi.cuh: the epilogue of gemm_sm90p.cu (see "Epilogue" at the top of that file):
// bias, activation and clamp in registers, then the stores of a consumer's accumulators with the
// residual: 32-bit pairs or elements (store_tile), f32 C (store_tile_f32), or staged through
// shared memory (store_tile_staged); and the residual's L2 prefetch. sources.rs puts it between
// gemm_sm90p_sched.cuh (GemmPArgs, Work) and gemm_sm90p.cu.

// Accumulator layout of m64nN: warp w of the warpgroup owns rows 16w..16w+15; lane l holds rows
// l/4 and l/4+8, columns 8j + 2(l%4) and +1 (d[4j], d[4j+1] and d[4j+2], d[4j+3]) for
// j = 0..N/8-1. `offset` is the element offset in C of (row0, col0); column pair j exists while
// 8j < cols (elements: 8j and 8j + 1 < cols); rows row0 (has0) and row0 + 8 (has1).
// epi_math: bias, activation and clamp in registers (the residual comes with the stores).
template <typename T, int BN> __device__ __forceinline__ void epi_math(float* d, const GemmPArgs& p, int col0, int cols) {
    if (p.epi.bias) {
        if (p.pairs) {
            const u32* bias = (const u32*)((const T*)p.epi.bias + col0);
#pragma unroll
            for (int j = 0; j < BN / 8; ++j) {
                const u32 b = j * 8 < cols ? bias[j * 4] : 0u;
                const float b0 = lo_of<T>(b), b1 = hi_of<T>(b);
                d[j * 4] += b0, d[j * 4 + 1] += b1, d[j * 4 + 2] += b0, d[j * 4 + 3] += b1;
                // Keeps the compiler from hoisting every load ahead of its adds: with the
                // accumulators live there are no registers for them.
                asm volatile("" ::: "memory");
            }
        } else {
            const T* bias = (const T*)p.epi.bias + col0;
#pragma unroll
            for (int j = 0; j < BN / 8; ++j) {
                const float b0 = j * 8 < cols ? to_f32(bias[j * 8]) : 0.f;
                const float b1 = j * 8 + 1 < cols ? to_f32(bias[j * 8 + 1]) : 0.f;
                d[j * 4] += b0, d[j * 4 + 1] += b1, d[j * 4 + 2] += b0, d[j * 4 + 3] += b1;
                asm volatile("" ::: "memory");
            }
        }
    }
    if (p.epi.act != EPI_NONE) act_all_1exp<BN / 2>(p.epi.act, d);
    if (p.epi.clamp) epi_clamp_all<BN / 2>(p.epi, d);
}

// v rounded to T and back.
template <typename T> __device__ __forceinline__ float round_to_t(float v) { return to_f32(FromF32<T>::go(v)); }

// After epi_math. C at `cs` (the segment's), rows `n` apart. RES: p.epi.residual is set (a
// template argument, so that the path without a residual carries no predicated-off loads: the
// epilogue's code is fetched cold once per tile); a residual has C's layout.
template <typename T, int BN, bool RES>
__device__ __forceinline__ void store_tile(float* d, const GemmPArgs& p, T* cs, i64 n, i64 offset, int col0, int cols,
                                           bool has0, bool has1) {
    const float beta = p.epi.beta;
    if (p.pairs) {
        const u32* r0 = (const u32*)((const T*)p.epi.residual + offset);
        const u32* r1 = (const u32*)((const T*)p.epi.residual + offset + 8 * n);
        u32* o0 = (u32*)(cs + offset);
        u32* o1 = (u32*)(cs + offset + 8 * n);
        // The residual of RC column pairs loaded together ahead of their stores: C and the
        // residual may alias as far as the compiler knows, so a load after a store would wait
        // for it, and each pair would pay a whole memory round trip.
        constexpr int RC = 4;
#pragma unroll
        for (int j0 = 0; j0 < BN / 8; j0 += RC) {
            u32 v0[RC], v1[RC];
            if (RES) {
#pragma unroll
                for (int i = 0; i < RC; ++i) {
                    const bool col = (j0 + i) * 8 < cols;
                    v0[i] = has0 && col ? r0[(j0 + i) * 4] : 0u;
                    v1[i] = has1 && col ? r1[(j0 + i) * 4] : 0u;
                }
            }
#pragma unroll
            for (int i = 0; i < RC; ++i) {
                const int j = j0 + i;
                if (has0 && j * 8 < cols) {
                    float x = d[j * 4], y = d[j * 4 + 1];
                    if (RES) x += beta * lo_of<T>(v0[i]), y += beta * hi_of<T>(v0[i]);
                    o0[j * 4] = pack2<T>(x, y);
                }
                if (has1 && j * 8 < cols) {
                    float x = d[j * 4 + 2], y = d[j * 4 + 3];
                    if (RES) x += beta * lo_of<T>(v1[i]), y += beta * hi_of<T>(v1[i]);
                    o1[j * 4] = pack2<T>(x, y);
                }
            }
        }
        return;
    }
    const T* r0 = (const T*)p.epi.residual + offset;
    const T* r1 = r0 + 8 * n;
    T* c0 = cs + offset;
    T* c1 = c0 + 8 * n;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            if (has0 && j * 8 + e < cols)
                c0[j * 8 + e] = FromF32<T>::go(d[j * 4 + e] + (RES ? beta * to_f32(r0[j * 8 + e]) : 0.f));
            if (has1 && j * 8 + e < cols)
                c1[j * 8 + e] = FromF32<T>::go(d[j * 4 + 2 + e] + (RES ? beta * to_f32(r1[j * 8 + e]) : 0.f));
        }
    }
}

// The F32 store: float pairs (8 bytes; 4 lanes write a row's 32-byte sector) when p.pairs (C and
// the residual 8-byte aligned, p.ldc even), else single floats.
template <int BN, bool RES>
__device__ __forceinline__ void store_tile_f32(const float* d, const GemmPArgs& p, i64 offset, int cols, bool has0,
                                               bool has1) {
    const i64 ld = p.ldc;
    const float beta = p.epi.beta;
    float* c0 = (float*)p.c + offset;
    float* c1 = c0 + 8 * ld;
    const float* r0 = (const float*)p.epi.residual + offset;
    const float* r1 = r0 + 8 * ld;
    if (p.pairs) {
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
            if (j * 8 >= cols) continue;
            if (has0) {
                float2 v = make_float2(d[j * 4], d[j * 4 + 1]);
                if (RES) {
                    const float2 r = *(const float2*)(r0 + j * 8);
                    v.x += beta * r.x, v.y += beta * r.y;
                }
                *(float2*)(c0 + j * 8) = v;
            }
            if (has1) {
                float2 v = make_float2(d[j * 4 + 2], d[j * 4 + 3]);
                if (RES) {
                    const float2 r = *(const float2*)(r1 + j * 8);
                    v.x += beta * r.x, v.y += beta * r.y;
                }
                *(float2*)(c1 + j * 8) = v;
            }
        }
        return;
    }
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            if (has0 && j * 8 + e < cols) c0[j * 8 + e] = d[j * 4 + e] + (RES ? beta * r0[j * 8 + e] : 0.f);
            if (has1 && j * 8 + e < cols) c1[j * 8 + e] = d[j * 4 + 2 + e] + (RES ? beta * r1[j * 8 + e] : 0.f);
        }
    }
}

// Staged epilogue (the _st kernels, MAX_GEMM_SM90_EPI=staged, cooperative schedule only; the
// launcher picks them only when p.pairs, n % 8 == 0 and C is 16-byte aligned, so every 8-column
// piece of a row is one aligned 16-byte vector, either wholly inside C or wholly past column n).
// Each consumer warp owns a 16-row x 64-column staging tile of T in shared memory (rows
// STG_STRIDE = 144 bytes apart: 128 plus 16 of padding), after the ring and its barriers, which
// nothing else touches. For each 64-column chunk of its 16 x BN fragment the warp writes the packed
// pairs (after the same math as store_tile, residual included, so the results are bit for bit the
// same) and reads back 16-byte vectors, 8 lanes per row: each store instruction writes 4 rows of
// 128 contiguous bytes. Bank conflict free: a fragment write puts lane l at word
// 36 * (l / 4) + 4 * jj + l % 4, i.e. bank 4 * (l / 4 + jj) + l % 4 (mod 32), all distinct; a
// 16-byte read phase (8 lanes) covers one row's 128 bytes. Rows past m and vectors past column n
// are not stored.
// (STG_STRIDE, STG_WARP_BYTES and the staging accessors are in sm90_pipe.cuh.)

// As store_tile (same d, offset, col0, cols, has0, has1), plus: row_w, the warp's first row (of
// the batch); base_w, the element offset in C of (row_w, col_t), col_t the tile's first column;
// staging, the 8 consumer warps' staging tiles (warp (threadIdx.x - 128) / 32 owns the tile at
// that index).
template <typename T, int BN, bool RES>
__device__ __forceinline__ void store_tile_staged(float* d, const GemmPArgs& p, T* cs, i64 n, i64 offset, int col0,
                                                  int cols, bool has0, bool has1, i64 row_w, i64 base_w, i64 col_t,
                                                  u8* staging) {
    // The thread index read here (volatile), so that the lane's shared addresses are computed
    // at each epilogue rather than hoisted out of the unit loop into registers held across the
    // mainloops.
    u32 tid;
    asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(tid));
    const int lane = (int)(tid % 32);
    const u32 stg = s_addr(staging) + (tid / 32 - 4) * STG_WARP_BYTES;
    const float beta = p.epi.beta;
    const u32* r0 = (const u32*)((const T*)p.epi.residual + offset);
    const u32* r1 = (const u32*)((const T*)p.epi.residual + offset + 8 * n);
    // Fragment writes: rows lane / 4 and lane / 4 + 8, the pair at column 8 jj + 2 (lane % 4).
    const u32 w0 = stg + (lane / 4) * STG_STRIDE + (lane % 4) * 4;
    const u32 w1 = w0 + 8 * STG_STRIDE;
    // Vector reads: row 4 i + rr, columns 8 v .. 8 v + 7 of the chunk.
    const int rr = lane / 8, v = lane % 8;
    const u32 rd = stg + rr * STG_STRIDE + v * 16;
    T* out = cs + base_w + (i64)rr * n + v * 8;
    // Row 4 i + rr exists while 4 i < rows; 8-column piece v of chunk q while 64 q < cols_v.
    const int rows = (int)min(p.m - row_w - rr, (i64)16);
    const int cols_v = (int)min(n - col_t - v * 8, (i64)BN);
#pragma unroll
    for (int q = 0; q < BN / 64; ++q) {
        // The reads of the previous chunk (or of the previous call) are done.
        warp_sync();
        // (The residual loads need no batching here: ptxas hoists them above the shared-memory
        // stores, which cannot alias them.)
#pragma unroll
        for (int jj = 0; jj < 8; ++jj) {
            const int j = q * 8 + jj;
            float x0 = d[j * 4], y0 = d[j * 4 + 1];
            if (RES && has0 && j * 8 < cols) {
                const u32 t = r0[j * 4];
                x0 += beta * lo_of<T>(t), y0 += beta * hi_of<T>(t);
            }
            sts32(w0 + jj * 16, pack2<T>(x0, y0));
            float x1 = d[j * 4 + 2], y1 = d[j * 4 + 3];
            if (RES && has1 && j * 8 < cols) {
                const u32 t = r1[j * 4];
                x1 += beta * lo_of<T>(t), y1 += beta * hi_of<T>(t);
            }
            sts32(w1 + jj * 16, pack2<T>(x1, y1));
        }
        warp_sync();
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            u32 a, b, c, e;
            lds128(rd + i * 4 * STG_STRIDE, a, b, c, e);
            if (q * 64 < cols_v && i * 4 < rows) stg128(out + (i64)(i * 4) * n + q * 64, a, b, c, e);
        }
    }
}

// The residual rows of this thread's part of unit w's tile asked into L2 as the unit starts, so
// that the epilogue's loads hit L2: lane l takes the 128-byte line l % 4 (64 columns) of its
// rows l / 4 and l / 4 + 8 (the rows as the epilogue has them). row_base and col_base: the
// warpgroup's first row and column in the tile; WN its columns.
template <typename T, int BM, int BN, int WN>
__device__ __forceinline__ void prefetch_residual(const GemmPArgs& p, const Work& w, int row_base, int col_base,
                                                  int warp, int lane) {
    const int line = (lane % 4) * 64;
    const i64 col = (i64)w.nt * BN + col_base + line;
    if (w.mt >= p.m_tiles || w.nt >= p.n_tiles || line >= WN || col >= p.n) return;
    const i64 row0 = (i64)w.mt * BM + row_base + warp * 16 + lane / 4;
#pragma unroll
    for (int r = 0; r < 2; ++r)
        if (row0 + 8 * r < p.m)
            prefetch_l2((const T*)p.epi.residual + (i64)w.z * p.stride_c + (row0 + 8 * r) * p.n + col);
}
