#line 1 "gemm_skinny.cu"
// gemm_skinny.cu: C[z] = epilogue(A[z] @ B[z]) for small M (decode shapes), row-major contiguous
// A [M, K], B [K, N], C [M, N]; batch z in gridDim.z with element strides per operand (0 shares
// one matrix between batches). These products are bound by reading B (K*N elements, M << N), so
// both kernels split K over blocks (grid.y) until the grid fills the GPU even for N = 4096, and
// stream B with wide coalesced loads. With one split the block applies the epilogue and writes
// C; otherwise every split writes f32 partial sums to a workspace [splits, batch, M, N], and the
// last block of each tile to finish adds them in split order (deterministic), applies the
// epilogue once and converts (`fixup`; skinny_reduce_* does the same as a kernel of its own
// when no ticket counters are at hand). Block index: blockIdx.x = m_tile + m_tiles * n_tile (the blocks that share a strip
// of B are neighbours, so the second m-tile finds it in L2), blockIdx.y = split, blockIdx.z = z.
//
// skinny_simt_<T>_m<MT>_<vec|any>: any dtype and alignment, up to MT (1..16) rows per block.
// 256 threads; a block owns NT = 32 * V columns (V = 16 / sizeof(T): 8 for 16-bit, 4 for f32)
// and the block's K slice, 8 warps taking every 8th row of it. Each lane reads V consecutive
// columns of a B row with one 16-byte load (`vec`: N % V == 0 and B 16-byte aligned) or V
// scalar loads (`any`), U rows in flight, and does MT x V f32 FMAs per row against A values
// staged in shared memory as f32 [k][m] (one broadcast 16-byte read covers 4 rows of A). The 8
// warps' sums are added through shared memory at the end, one row of the tile at a time.
//
// skinny_mma_<T>_m<BM>: bf16/f16 on tensor cores (mma.sync m16n8k16, f32 accumulation), for
// K % 8 == 0, N % 8 == 0 and 16-byte aligned A and B. A BM x 128 tile per block (BM = 16, 32,
// 64 or 128), 4 warps along N (32 columns each) times 1 or 2 along M, K in steps of 32 through
// a 4-stage ring of cp.async 16-byte copies (zero-filled past M, N and the split's end), fed to
// the MMA with ldmatrix (A) and ldmatrix.trans (B) exactly as in matmul.cu.

#define SIMT_THREADS 256
#define SIMT_WARPS 8
#define SIMT_KC 256  // rows of K whose A values are staged in shared memory at once

#define MMA_BN 128
#define MMA_BK 32
#define MMA_STAGES 4
#define MMA_A_LD (MMA_BK + 8)
#define MMA_B_LD (MMA_BN + 8)

struct SkinnyArgs {
    u64 a, b, c;
    u64 ws;  // f32 [splits, batch, m, n] partial sums; unused with one split
    i64 m, n, k;
    i64 stride_a, stride_b, stride_c;  // elements between batches (0 = shared)
    i64 k_per_split;                   // rows of K per split (grid.y)
    i64 splits;
    i64 m_tiles;  // row tiles per n tile (blockIdx.x = m_tile + m_tiles * n_tile)
    u64 counters; // u32 per (tile, z), zero between launches: the split-K fixup's tickets (0: none)
    Epilogue epi;
};

struct ReduceArgs {
    u64 ws, c;
    i64 total;  // batch * m * n
    i64 mn, n;
    i64 splits;
    i64 stride_c;
    Epilogue epi;
};

struct __align__(16) F4 { float x, y, z, w; };

// One finished value: the epilogue and C with one split, the workspace otherwise.
template <typename T>
__device__ __forceinline__ void put(const SkinnyArgs& p, float s, i64 split, i64 z, i64 r, i64 col) {
    if (p.splits == 1) {
        const i64 idx = z * p.stride_c + r * p.n + col;
        reinterpret_cast<T*>(p.c)[idx] = FromF32<T>::go(epilogue<T>(p.epi, s, idx, col));
    } else {
        reinterpret_cast<float*>(p.ws)[((split * (i64)gridDim.z + z) * p.m + r) * p.n + col] = s;
    }
}

// Split-K fixup: every split has written its partial sums for the tile [m0, m0 + rows) x
// [n0, n0 + cols); the block that finishes last (a ticket per tile, taken after a fence) adds
// the splits in order, exactly as skinny_reduce does, applies the epilogue, writes C and puts
// the ticket back to zero for the next launch. Saves the reduction's launch, which in a decode
// step costs more than the reduction itself. Returns without work in every other block.
template <typename T>
__device__ __forceinline__ void fixup(const SkinnyArgs& p, int tid, int threads, i64 m0, int rows, i64 n0, int cols) {
    __shared__ u32 ticket;
    __threadfence();
    __syncthreads();
    u32* counter = reinterpret_cast<u32*>(p.counters) + blockIdx.x + (u64)gridDim.x * blockIdx.z;
    if (tid == 0) ticket = atomicAdd(counter, 1u);
    __syncthreads();
    if (ticket != (u32)(p.splits - 1)) return;
    __threadfence();
    const i64 z = blockIdx.z;
    const float* ws = reinterpret_cast<const float*>(p.ws);
    const i64 total = (i64)gridDim.z * p.m * p.n;
#pragma unroll 1
    for (int e = tid; e < rows * cols; e += threads) {
        const int r = e / cols, c = e % cols;
        const i64 col = n0 + c;
        if (col >= p.n) continue;
        const i64 at = (z * p.m + m0 + r) * p.n + col;
        // Four splits' loads in flight, added in split order.
        float s = 0.f;
#pragma unroll 1
        for (i64 sp = 0; sp < p.splits; sp += 4) {
            float v[4];
#pragma unroll
            for (int u = 0; u < 4; ++u) v[u] = sp + u < p.splits ? __ldcg(ws + (sp + u) * total + at) : 0.f;
#pragma unroll
            for (int u = 0; u < 4; ++u)
                if (sp + u < p.splits) s += v[u];
        }
        const i64 idx = z * p.stride_c + (m0 + r) * p.n + col;
        reinterpret_cast<T*>(p.c)[idx] = FromF32<T>::go(epilogue<T>(p.epi, s, idx, col));
    }
    if (tid == 0) *counter = 0u;
}

// ---- SIMT kernel -----------------------------------------------------------------------------

// acc[m][v] += a[m] * b[v] for the MT staged A values of one row of K.
template <int MT, int V>
__device__ __forceinline__ void fma_row(float (&acc)[MT][V], const float* a, const float* b) {
    if constexpr (MT >= 4) {
#pragma unroll
        for (int m = 0; m < MT; m += 4) {
            const F4 q = *reinterpret_cast<const F4*>(a + m);
            const float av[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int v = 0; v < V; ++v) acc[m + i][v] = fmaf(av[i], b[v], acc[m + i][v]);
        }
    } else {
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
            for (int v = 0; v < V; ++v) acc[m][v] = fmaf(a[m], b[v], acc[m][v]);
    }
}

template <typename T, int MT, bool VEC>
__device__ __forceinline__ void simt_kernel(const SkinnyArgs& p) {
    constexpr int V = 16 / sizeof(T);
    constexpr int NT = 32 * V;          // columns per block
    constexpr int NTP = NT + NT / 32;   // padded reduction row: conflict-free writes and reads
    constexpr int U = MT <= 4 ? 8 : 4;  // rows of B in flight per warp
    __shared__ __align__(16) float sa[SIMT_KC * MT];  // [kk][m]
    __shared__ float red[SIMT_WARPS * NTP];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const i64 mt = blockIdx.x % p.m_tiles, nt = blockIdx.x / p.m_tiles;
    const i64 split = blockIdx.y, z = blockIdx.z;
    const i64 m0 = mt * MT;
    const int rows = (int)min((i64)MT, p.m - m0);
    const i64 col0 = nt * NT + lane * V;  // this lane's first column
    const i64 kb = split * p.k_per_split;
    const i64 ke = min(p.k, kb + p.k_per_split);
    const T* A = reinterpret_cast<const T*>(p.a) + z * p.stride_a + m0 * p.k;
    const T* B = reinterpret_cast<const T*>(p.b) + z * p.stride_b;

    float acc[MT][V];
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int v = 0; v < V; ++v) acc[m][v] = 0.f;

    for (i64 k0 = kb; k0 < ke; k0 += SIMT_KC) {
        const int kc = (int)min((i64)SIMT_KC, ke - k0);
        __syncthreads();  // the previous chunk of sa is consumed
        for (int i = tid; i < SIMT_KC * MT; i += SIMT_THREADS) {
            const int m = i / SIMT_KC, kk = i % SIMT_KC;
            sa[kk * MT + m] = (m < rows && kk < kc) ? to_f32(A[(i64)m * p.k + k0 + kk]) : 0.f;
        }
        __syncthreads();
        const T* Bk = B + k0 * p.n;
        // Warp w takes rows w, w + 8, ... of the chunk (uniform per warp: no divergence).
        for (int kk = warp; kk < kc; kk += SIMT_WARPS * U) {
            u32 raw[U][4];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int r = kk + u * SIMT_WARPS;
                if (r < kc) {
                    load_row<T, VEC>(raw[u], Bk + (i64)r * p.n, col0, p.n);
                } else {
#pragma unroll
                    for (int i = 0; i < 4; ++i) raw[u][i] = 0;
                }
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int r = kk + u * SIMT_WARPS;
                if (r < kc) {
                    float b[V];
                    Unpack<T>::go(raw[u], b);
                    fma_row<MT, V>(acc, sa + r * MT, b);
                }
            }
        }
    }

    // Add the 8 warps' partial sums, one row of the tile at a time; thread t then owns column t.
    // The sums go to `fin` (sa is free now), so the epilogue is inlined once, in a plain loop.
    float* fin = sa;  // [m][NT]; SIMT_KC >= NT
#pragma unroll
    for (int m = 0; m < MT; ++m) {
        if (m >= rows) break;  // uniform over the block
        __syncthreads();       // sa (first row) or red (later rows) is no longer read
#pragma unroll
        for (int v = 0; v < V; ++v) {
            const int c = lane * V + v;
            red[warp * NTP + c + c / 32] = acc[m][v];
        }
        __syncthreads();
        if (tid < NT) {
            float s = 0.f;
#pragma unroll
            for (int w = 0; w < SIMT_WARPS; ++w) s += red[w * NTP + tid + tid / 32];
            fin[m * NT + tid] = s;
        }
    }
    const i64 col = nt * NT + tid;
    if (tid < NT && col < p.n) {
        // thread tid reads back only what it wrote
#pragma unroll 1
        for (int m = 0; m < rows; ++m) put<T>(p, fin[m * NT + tid], split, z, m0 + m, col);
    }
    if (p.splits > 1 && p.counters) fixup<T>(p, tid, SIMT_THREADS, m0, rows, nt * NT, NT);
}

#define SIMT_ENTRY(T, NAME, MT)                                                                           \
    extern "C" __global__ void __launch_bounds__(SIMT_THREADS) skinny_simt_##NAME##_m##MT##_vec(SkinnyArgs p) { \
        simt_kernel<T, MT, true>(p);                                                                      \
    }                                                                                                     \
    extern "C" __global__ void __launch_bounds__(SIMT_THREADS) skinny_simt_##NAME##_m##MT##_any(SkinnyArgs p) { \
        simt_kernel<T, MT, false>(p);                                                                     \
    }
#define SIMT_ENTRIES(T, NAME) SIMT_ENTRY(T, NAME, 1) SIMT_ENTRY(T, NAME, 2) SIMT_ENTRY(T, NAME, 4) \
    SIMT_ENTRY(T, NAME, 8) SIMT_ENTRY(T, NAME, 16)
SIMT_ENTRIES(bf16, bf16)
SIMT_ENTRIES(f16, f16)
SIMT_ENTRIES(float, f32)

// ---- tensor-core kernel ----------------------------------------------------------------------

// smem_addr, cp_async16, ldmatrix_x4 and mma16816 come from mma_sync.cuh, in front.

// WARPS_M warps along M, each MI 16-row tiles; 4 warps along N, each 32 columns.
template <typename T, bool BF16, int WARPS_M, int MI>
__device__ __forceinline__ void mma_kernel(const SkinnyArgs& p) {
    constexpr int BM = WARPS_M * MI * 16;
    constexpr int THREADS = WARPS_M * 4 * 32;
    extern __shared__ __align__(16) u16 smem[];
    u16* sa = smem;                                // STAGES x BM x A_LD
    u16* sb = smem + MMA_STAGES * BM * MMA_A_LD;   // STAGES x BK x B_LD
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const i64 mt = blockIdx.x % p.m_tiles, nt = blockIdx.x / p.m_tiles;
    const i64 split = blockIdx.y, z = blockIdx.z;
    const i64 m0 = mt * BM, n0 = nt * MMA_BN;
    const i64 kb = split * p.k_per_split;
    const i64 ke = min(p.k, kb + p.k_per_split);
    const u16* A = reinterpret_cast<const u16*>(p.a) + z * p.stride_a;
    const u16* B = reinterpret_cast<const u16*>(p.b) + z * p.stride_b;
    const int wm = (warp / 4) * MI * 16, wn = (warp % 4) * 32;

    // K % 8 == 0 and N % 8 == 0, and split boundaries are multiples of 32: every 8-element
    // chunk lies entirely inside or entirely outside the valid range.
    auto load_stage = [&](int stage, i64 k0) {
        for (int c = tid; c < BM * (MMA_BK / 8); c += THREADS) {
            const int r = c / (MMA_BK / 8), col = (c % (MMA_BK / 8)) * 8;
            const i64 gr = m0 + r, gc = k0 + col;
            const bool ok = gr < p.m && gc < ke;
            cp_async16<true>(smem_addr(sa + (stage * BM + r) * MMA_A_LD + col), ok ? A + gr * p.k + gc : A, ok);
        }
        for (int c = tid; c < MMA_BK * (MMA_BN / 8); c += THREADS) {
            const int r = c / (MMA_BN / 8), col = (c % (MMA_BN / 8)) * 8;
            const i64 gr = k0 + r, gc = n0 + col;
            const bool ok = gr < ke && gc < p.n;
            cp_async16<true>(smem_addr(sb + (stage * MMA_BK + r) * MMA_B_LD + col), ok ? B + gr * p.n + gc : B, ok);
        }
    };

    float acc[MI][4][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

    const i64 ktiles = ke > kb ? (ke - kb + MMA_BK - 1) / MMA_BK : 0;
    for (int s = 0; s < MMA_STAGES - 1; ++s) {
        if (s < ktiles) load_stage(s, kb + s * MMA_BK);
        cp_async_commit();
    }
    for (i64 kt = 0; kt < ktiles; ++kt) {
        cp_async_wait<MMA_STAGES - 2>();
        __syncthreads();
        const i64 next = kt + MMA_STAGES - 1;
        if (next < ktiles) load_stage((int)(next % MMA_STAGES), kb + next * MMA_BK);
        cp_async_commit();
        const int stage = (int)(kt % MMA_STAGES);
        const u16* ta = sa + stage * BM * MMA_A_LD;
        const u16* tb = sb + stage * MMA_BK * MMA_B_LD;
#pragma unroll
        for (int kk = 0; kk < MMA_BK; kk += 16) {
            u32 af[MI][4], bfr[4][2];
#pragma unroll
            for (int i = 0; i < MI; ++i) {
                const int row = wm + i * 16 + (lane % 16), col = kk + (lane / 16) * 8;
                ldmatrix_x4(af[i][0], af[i][1], af[i][2], af[i][3], smem_addr(ta + row * MMA_A_LD + col));
            }
#pragma unroll
            for (int j = 0; j < 4; j += 2) {
                // rows k of B, two adjacent n8 tiles: lanes 0-15 the first, 16-31 the second
                const int row = kk + (lane % 16), col = wn + j * 8 + (lane / 16) * 8;
                ldmatrix_x4_trans(bfr[j][0], bfr[j][1], bfr[j + 1][0], bfr[j + 1][1], smem_addr(tb + row * MMA_B_LD + col));
            }
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) mma16816<BF16>(acc[i][j], af[i], bfr[j]);
        }
    }
    cp_async_wait<0>();
    __syncthreads();  // every warp is done with the ring: reuse it to stage the tile as f32

    // Accumulator layout: rows lane/4 (+8), cols 2*(lane%4) (+1) of each 16x8 tile. Staging
    // through shared memory makes the stores coalesced and inlines the epilogue only once.
    constexpr int ST_LD = MMA_BN + 4;
    float* st = reinterpret_cast<float*>(smem);  // BM x ST_LD, smaller than the ring
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = wm + i * 16 + lane / 4 + h * 8, c = wn + j * 8 + (lane % 4) * 2;
                st[r * ST_LD + c] = acc[i][j][h * 2];
                st[r * ST_LD + c + 1] = acc[i][j][h * 2 + 1];
            }
    __syncthreads();
    const int rows = (int)min((i64)BM, p.m - m0);
#pragma unroll 1
    for (int e = tid; e < rows * MMA_BN; e += THREADS) {
        const int r = e / MMA_BN, c = e % MMA_BN;
        const i64 col = n0 + c;
        if (col < p.n) put<T>(p, st[r * ST_LD + c], split, z, m0 + r, col);
    }
    if (p.splits > 1 && p.counters) fixup<T>(p, tid, THREADS, m0, rows, n0, MMA_BN);
}

#define MMA_ENTRY(T, IS_BF16, NAME, BM, WARPS_M, MI)                                                      \
    extern "C" __global__ void __launch_bounds__(WARPS_M * 128, 4 / WARPS_M) skinny_mma_##NAME##_m##BM(SkinnyArgs p) { \
        mma_kernel<T, IS_BF16, WARPS_M, MI>(p);                                                           \
    }
MMA_ENTRY(bf16, true, bf16, 16, 1, 1)
MMA_ENTRY(bf16, true, bf16, 32, 1, 2)
MMA_ENTRY(bf16, true, bf16, 64, 2, 2)
MMA_ENTRY(bf16, true, bf16, 128, 2, 4)
MMA_ENTRY(f16, false, f16, 16, 1, 1)
MMA_ENTRY(f16, false, f16, 32, 1, 2)
MMA_ENTRY(f16, false, f16, 64, 2, 2)
MMA_ENTRY(f16, false, f16, 128, 2, 4)

// ---- split-K reduction -----------------------------------------------------------------------

// C = epilogue(sum over splits of ws[s]), the splits added in order; one thread per element of
// C (grid-stride), consecutive threads on consecutive elements.
template <typename T>
__device__ __forceinline__ void reduce_kernel(const ReduceArgs& p) {
    const float* ws = reinterpret_cast<const float*>(p.ws);
    T* C = reinterpret_cast<T*>(p.c);
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < p.total; i += (i64)gridDim.x * blockDim.x) {
        float s = 0.f;
#pragma unroll 4
        for (i64 sp = 0; sp < p.splits; ++sp) s += ws[sp * p.total + i];
        const i64 z = i / p.mn, rem = i - z * p.mn;
        const i64 col = rem % p.n;
        const i64 idx = z * p.stride_c + rem;
        C[idx] = FromF32<T>::go(epilogue<T>(p.epi, s, idx, col));
    }
}

extern "C" __global__ void __launch_bounds__(256) skinny_reduce_bf16(ReduceArgs p) { reduce_kernel<bf16>(p); }
extern "C" __global__ void __launch_bounds__(256) skinny_reduce_f16(ReduceArgs p) { reduce_kernel<f16>(p); }
extern "C" __global__ void __launch_bounds__(256) skinny_reduce_f32(ReduceArgs p) { reduce_kernel<float>(p); }
