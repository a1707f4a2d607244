#line 1 "gemv_mma.cu"
// gemv_mma.cu: C = epilogue(A @ W^T), W [N, K] as a linear layer stores it, for the 2-16 rows of
// a batched decode step, on tensor cores (mma.sync m16n8k16, f32 accumulation): the weights
// stream from DRAM straight into the mma's registers, as gemv_nt.cu streams them into CUDA-core
// FMAs at 1-4 rows (launch/gemv_mma.rs).
//
// gemv_mma_<bf16|f16>_n<NT>[_gated]: A [M, K] with M <= 8 * NT (NT = 1 or 2 mma column tiles),
// W [N, K], C [M, N], row-major, K % 8 == 0 and every operand 16-byte aligned. The mma's M is
// W's rows and its N is A's rows: a warp owns a tile of 16 rows of W and the whole of A, so W
// is read once whatever M, and A (a few KiB to a few hundred, shared by every warp) comes
// through L1 and L2.
//
// No shared memory holds W. A dot product does not care in which order K is walked, provided
// both operands walk it in the same order, so each lane loads W in 16-byte vectors (lane g * 4
// + t: rows g and g + 8 of the tile, columns [c + 8t, c + 8t + 8) and [c + 32 + 8t, ...) of the
// chunk at c, 64 columns) and hands them to the mma as they are: for the mma, logical column
// 2t + j of a k16 step is physical column 8t + j and logical 2t + 8 + j is 8t + 2 + j (words 0
// and 1 of the vector), the next step words 2 and 3. A's fragment (its row g, the same
// physical columns) is one 16-byte load too. Four mmas per chunk and column tile.
//
// K is split between S = `parts` warps of a block sharing a tile (1, 2, 4 or 8; part p takes
// the chunks p, p + S, ..., so the S warps read each row in runs of S * 128 bytes), which meet
// in shared memory and are added in part order: the sums, their order and so the results do
// not depend on M, only on S (launch/gemv_mma.rs picks S from the launch's tiles, K and the
// device, never from M). A tile past the last segment's end computes nothing but still takes
// part in the block's barrier.
//
// Up to GM_SEGS weights of one A run as one launch (q, k and v; tiles [first[s], first[s+1])
// are segment s's). `_gated` is the gated MLP's first half, act(A @ Wg^T) * (A @ Wu^T) with
// Wg = w[0], Wu = w[1] (one segment): a tile's 16 mma rows are 8 rows of each, so a lane ends
// with the gate and the up value of the same result, rounded to T before their product as the
// separate gate, up and mul steps round them.
//
// An RMSNorm before the product is not folded in (the rms_norm kernel runs first): a `_postnorm`
// fold like gemv_nt.cu's, A * gamma rounded to T on the way into the mma and the products
// scaled by 1 / rms at the end, made Llama-3-8B-shaped decode at 8 rows 1,199 tok/s against
// 1,568 with the norms apart (an H200), its extra registers costing the weight stream.
//
// Programmatic dependent launch (launch/pdl.rs): the first group of weight loads is issued
// before griddepcontrol.wait, A, the residual and C after it; the launcher uses PDL only for
// constant weights (launch_weights_early), which no earlier kernel writes.

#define GM_WARPS 8
#define GM_SEGS 4
#define GM_CHUNK 64

struct GmArgs {
    u64 a;
    i64 m, k;
    i64 segs;
    u64 w[GM_SEGS], c[GM_SEGS];
    i64 n[GM_SEGS];
    i64 first[GM_SEGS + 1];  // first tile of each segment, then the total
    Epilogue epi;
    i32 parts;  // S: warps per tile
    i32 pad;
};

template <typename T> struct GmBf16 { enum { V = 0 }; };
template <> struct GmBf16<bf16> { enum { V = 1 }; };

// One chunk of a lane's two W rows: vectors [lo c+8t, lo c+32+8t, hi c+8t, hi c+32+8t], zero
// for a row past N (null) or columns past K.
template <bool EARLY>
__device__ __forceinline__ void gm_load_w(u32 (&w)[4][4], const u16* lo, const u16* hi, i64 col, i64 k) {
#pragma unroll
    for (int v = 0; v < 4; ++v) {
        const u16* row = v < 2 ? lo : hi;
        const i64 c = col + (v % 2) * 32;
        if (row != nullptr && c < k) {
            ld_stream16<EARLY>(w[v], row + c);
        } else {
#pragma unroll
            for (int i = 0; i < 4; ++i) w[v][i] = 0;
        }
    }
}

// A's fragments for one chunk: per column tile j the lane's row 8j + g at the same two
// columns as its W vectors (zero past M or K), through L1.
template <int NT>
__device__ __forceinline__ void gm_load_a(u32 (&a)[NT][2][4], const u16* A, int g, i64 m, i64 col, i64 k) {
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const i64 r = 8 * j + g, c = col + h * 32;
            if (r < m && c < k) {
                const uint4 q = __ldg(reinterpret_cast<const uint4*>(A + r * k + c));
                a[j][h][0] = q.x, a[j][h][1] = q.y, a[j][h][2] = q.z, a[j][h][3] = q.w;
            } else {
#pragma unroll
                for (int i = 0; i < 4; ++i) a[j][h][i] = 0;
            }
        }
}

template <typename T, int NT, bool GATED>
__device__ __forceinline__ void gm_kernel(const GmArgs& p) {
    constexpr bool BF16 = GmBf16<T>::V;
    constexpr int U = NT == 1 ? 4 : 2;  // chunks in flight per warp
    constexpr int TR = GATED ? 8 : 16;  // result rows per tile
    __shared__ float red[GM_WARPS][NT][4][32];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    const int S = p.parts;
    const int part = warp % S;
    const i64 tile = (i64)blockIdx.x * (GM_WARPS / S) + warp / S;
    const bool live = tile < p.first[p.segs];
    int s = 0;
    while (s + 1 < p.segs && tile >= p.first[s + 1]) ++s;
    const i64 n = p.n[s], k = p.k;
    const i64 row0 = (tile - p.first[s]) * TR;
    const u16* lo = nullptr;
    const u16* hi = nullptr;
    if (live && row0 + g < n) {
        lo = reinterpret_cast<const u16*>(p.w[s]) + (row0 + g) * k;
        if (GATED) hi = reinterpret_cast<const u16*>(p.w[1]) + (row0 + g) * k;
    }
    if (!GATED && live && row0 + g + 8 < n) hi = reinterpret_cast<const u16*>(p.w[s]) + (row0 + g + 8) * k;
    const i64 chunks = (k + GM_CHUNK - 1) / GM_CHUNK;
    const i64 stride = (i64)S * GM_CHUNK;  // between a part's chunks
    const i64 col0 = (i64)part * GM_CHUNK + 8 * t;

    u32 w[U][4][4];
#pragma unroll
    for (int u = 0; u < U; ++u) gm_load_w<true>(w[u], lo, hi, col0 + u * stride, k);
    pdl_wait();
    pdl_launch_dependents();
    const u16* A = reinterpret_cast<const u16*>(p.a);
    u32 a[U][NT][2][4];
#pragma unroll
    for (int u = 0; u < U; ++u) gm_load_a<NT>(a[u], A, g, p.m, col0 + u * stride, k);

    float acc[NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r) acc[j][r] = 0.f;
    if (live) {
        for (i64 c = part; c < chunks; c += U * S) {
#pragma unroll
            for (int u = 0; u < U; ++u) {
#pragma unroll
                for (int h = 0; h < 2; ++h)
#pragma unroll
                    for (int q = 0; q < 2; ++q) {
                        const u32 af[4] = {w[u][h][2 * q], w[u][2 + h][2 * q], w[u][h][2 * q + 1], w[u][2 + h][2 * q + 1]};
#pragma unroll
                        for (int j = 0; j < NT; ++j) {
                            const u32 bf[2] = {a[u][j][h][2 * q], a[u][j][h][2 * q + 1]};
                            mma16816<BF16>(acc[j], af, bf);
                        }
                    }
            }
            // the next group (the vectors of chunks past the part's last read as zeros)
            const i64 next = col0 + (c - part + U * S) * GM_CHUNK;
            if (c + U * S < chunks) {
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    gm_load_w<false>(w[u], lo, hi, next + u * stride, k);
                    gm_load_a<NT>(a[u], A, g, p.m, next + u * stride, k);
                }
            }
        }
    }
    if (S > 1) {
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) red[warp][j][r][lane] = acc[j][r];
        __syncthreads();
        if (part != 0) return;
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                float v = red[warp][j][r][lane];
                for (int q = 1; q < S; ++q) v += red[warp + q][j][r][lane];
                acc[j][r] = v;
            }
    }
    if (!live) return;
    // acc[j]: (W row g, A rows 8j + 2t, + 1), then (W row g + 8 or the up's row g, the same A rows)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const i64 r = 8 * j + 2 * t + e;
            if (r >= p.m) continue;
            if constexpr (GATED) {
                const i64 row = row0 + g;
                if (row < n) {
                    const i64 idx = r * n + row;
                    const float v = epilogue<T>(p.epi, acc[j][e], idx, row);
                    const float up = to_f32(FromF32<T>::go(acc[j][2 + e]));
                    reinterpret_cast<T*>(p.c[0])[idx] = FromF32<T>::go(__fmul_rn(to_f32(FromF32<T>::go(v)), up));
                }
            } else {
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const i64 row = row0 + g + 8 * h;
                    if (row < n) {
                        const i64 idx = r * n + row;
                        reinterpret_cast<T*>(p.c[s])[idx] = FromF32<T>::go(epilogue<T>(p.epi, acc[j][2 * h + e], idx, row));
                    }
                }
            }
        }
}

#define GM_ENTRY(T, NAME, NT, SUFFIX, GATED)                                                             \
    extern "C" __global__ void __launch_bounds__(GM_WARPS * 32, 2) gemv_mma_##NAME##_n##NT##SUFFIX(GmArgs p) { \
        gm_kernel<T, NT, GATED>(p);                                                                     \
    }
#define GM_ENTRIES(T, NAME)                                                                             \
    GM_ENTRY(T, NAME, 1, , false)                                                                       \
    GM_ENTRY(T, NAME, 2, , false)                                                                       \
    GM_ENTRY(T, NAME, 1, _gated, true)                                                                  \
    GM_ENTRY(T, NAME, 2, _gated, true)
GM_ENTRIES(bf16, bf16)
GM_ENTRIES(f16, f16)
