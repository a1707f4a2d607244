#line 1 "matmul.cu"
// matmul.cu: C[b] = A[b] @ B[b] for row-major A [M, K], B [K, N], C [M, N] (batch b in
// gridDim.z; a batch stride of 0 broadcasts an operand).
//
// matmul_mma_{bf16,f16}: tensor cores through mma.sync.m16n8k16 (sm_80 and later), f32
// accumulation. A 128x128 block tile, 8 warps in a 2x4 grid (64x32 per warp), K in steps of 32
// loaded by cp.async 16-byte copies into a 3-stage ring of padded shared-memory tiles (the
// padding spreads ldmatrix rows over all banks). Operands are fed to the MMA with ldmatrix (A)
// and ldmatrix.trans (B, which is row-major [K, N] and must reach the MMA column-major).
// Requires K % 8 == 0 and N % 8 == 0 and 16-byte aligned rows; edges in M, N and K are
// predicated (zero fill), so any M works.
//
// matmul_simt_*: a plain shared-memory tiled kernel for every other case (f32 and f64 exact,
// odd shapes), one output element per thread.

#define BM 128
#define BN 128
#define BK 32
#define STAGES 3
#define A_LD (BK + 8)
#define B_LD (BN + 8)

struct MatmulArgs {
    u64 a, b, c;
    i64 m, n, k;
    i64 stride_a, stride_b, stride_c;  // elements between batches (0 = broadcast)
    Epilogue epi;                      // applied to every output element (prelude.cuh)
};

// smem_addr, cp_async16, ldmatrix_x4 and mma16816 come from mma_sync.cuh, in front.

template <typename T, bool BF16>
__device__ __forceinline__ void mma_kernel(const MatmulArgs& p) {
    extern __shared__ __align__(16) u16 smem[];
    u16* sa = smem;                              // STAGES x BM x A_LD
    u16* sb = smem + STAGES * BM * A_LD;         // STAGES x BK x B_LD
    const u16* A = (const u16*)p.a + blockIdx.z * p.stride_a;
    const u16* B = (const u16*)p.b + blockIdx.z * p.stride_b;
    T* C = (T*)p.c + blockIdx.z * p.stride_c;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const i64 m0 = (i64)blockIdx.y * BM, n0 = (i64)blockIdx.x * BN;
    const int wm = (warp / 4) * 64, wn = (warp % 4) * 32;

    auto load_stage = [&](int stage, i64 k0) {
        // A: 128 rows x 32 cols = 512 chunks of 8; B: 32 rows x 128 cols = 512 chunks.
        for (int c = tid; c < 512; c += 256) {
            int r = c / 4, col = (c % 4) * 8;
            i64 gr = m0 + r, gc = k0 + col;
            bool ok = gr < p.m && gc < p.k;
            cp_async16(smem_addr(sa + (stage * BM + r) * A_LD + col), ok ? A + gr * p.k + gc : A, ok);
        }
        for (int c = tid; c < 512; c += 256) {
            int r = c / 16, col = (c % 16) * 8;
            i64 gr = k0 + r, gc = n0 + col;
            bool ok = gr < p.k && gc < p.n;
            cp_async16(smem_addr(sb + (stage * BK + r) * B_LD + col), ok ? B + gr * p.n + gc : B, ok);
        }
    };

    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

    const i64 ktiles = (p.k + BK - 1) / BK;
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < ktiles) load_stage(s, s * BK);
        cp_async_commit();
    }
    for (i64 kt = 0; kt < ktiles; ++kt) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        i64 next = kt + STAGES - 1;
        if (next < ktiles) load_stage((int)(next % STAGES), next * BK);
        cp_async_commit();
        const int stage = (int)(kt % STAGES);
        const u16* ta = sa + stage * BM * A_LD;
        const u16* tb = sb + stage * BK * B_LD;
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            u32 af[4][4], bf[4][2];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                int row = wm + i * 16 + (lane % 16), col = kk + (lane / 16) * 8;
                ldmatrix_x4(af[i][0], af[i][1], af[i][2], af[i][3], smem_addr(ta + row * A_LD + col));
            }
#pragma unroll
            for (int j = 0; j < 4; j += 2) {
                // rows k of B, two adjacent n8 tiles: lanes 0-15 the first, 16-31 the second
                int row = kk + (lane % 16), col = wn + j * 8 + (lane / 16) * 8;
                ldmatrix_x4_trans(bf[j][0], bf[j][1], bf[j + 1][0], bf[j + 1][1], smem_addr(tb + row * B_LD + col));
            }
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) mma16816<BF16>(acc[i][j], af[i], bf[j]);
        }
    }
    cp_async_wait<0>();
    // Accumulator layout: rows lane/4 (+8), cols 2*(lane%4) (+1) of each 16x8 tile. The
    // epilogue runs as whole-fragment passes, each skipped when absent (see prelude.cuh).
    float* v = &acc[0][0][0];
    if (p.epi.bias) {
        const T* bias = (const T*)p.epi.bias;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const i64 cc = n0 + wn + j * 8 + (lane % 4) * 2;
            const float b0 = cc < p.n ? to_f32(bias[cc]) : 0.f, b1 = cc + 1 < p.n ? to_f32(bias[cc + 1]) : 0.f;
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[i][j][0] += b0, acc[i][j][1] += b1, acc[i][j][2] += b0, acc[i][j][3] += b1;
        }
    }
    if (p.epi.act != EPI_NONE) epi_act_all<64>(p.epi.act, v);
    if (p.epi.clamp) epi_clamp_all<64>(p.epi, v);
    const T* res = p.epi.residual ? (const T*)p.epi.residual + blockIdx.z * p.stride_c : nullptr;
    const float beta = p.epi.beta;
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                i64 r = m0 + wm + i * 16 + lane / 4 + h * 8;
                i64 cc = n0 + wn + j * 8 + (lane % 4) * 2;
                if (r < p.m) {
                    float x0 = acc[i][j][h * 2], x1 = acc[i][j][h * 2 + 1];
                    if (res) {
                        if (cc < p.n) x0 += beta * to_f32(res[r * p.n + cc]);
                        if (cc + 1 < p.n) x1 += beta * to_f32(res[r * p.n + cc + 1]);
                    }
                    if (cc < p.n) C[r * p.n + cc] = FromF32<T>::go(x0);
                    if (cc + 1 < p.n) C[r * p.n + cc + 1] = FromF32<T>::go(x1);
                }
            }
}

extern "C" __global__ void __launch_bounds__(256) matmul_mma_bf16(MatmulArgs p) { mma_kernel<bf16, true>(p); }
extern "C" __global__ void __launch_bounds__(256) matmul_mma_f16(MatmulArgs p) { mma_kernel<f16, false>(p); }

// SIMT fallback: 16x16 output tile per block, K in chunks of 16 through shared memory.
template <typename T, typename Acc>
__device__ __forceinline__ void simt_kernel(const MatmulArgs& p) {
    __shared__ Acc ta[16][17];
    __shared__ Acc tb[16][17];
    const T* A = (const T*)p.a + blockIdx.z * p.stride_a;
    const T* B = (const T*)p.b + blockIdx.z * p.stride_b;
    T* C = (T*)p.c + blockIdx.z * p.stride_c;
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const i64 row = (i64)blockIdx.y * 16 + ty, col = (i64)blockIdx.x * 16 + tx;
    Acc acc = 0;
    for (i64 k0 = 0; k0 < p.k; k0 += 16) {
        ta[ty][tx] = (row < p.m && k0 + tx < p.k) ? (Acc)to_f64(A[row * p.k + k0 + tx]) : (Acc)0;
        tb[ty][tx] = (k0 + ty < p.k && col < p.n) ? (Acc)to_f64(B[(k0 + ty) * p.n + col]) : (Acc)0;
        __syncthreads();
#pragma unroll
        for (int q = 0; q < 16; ++q) acc = acc + ta[ty][q] * tb[q][tx];
        __syncthreads();
    }
    if (row < p.m && col < p.n) {
        // The launcher refuses an epilogue for f64, whose accumulator would lose precision here.
        const i64 idx = (i64)blockIdx.z * p.stride_c + row * p.n + col;
        const double v = (p.epi.bias | p.epi.residual | (u64)p.epi.act | (u64)p.epi.clamp) ? (double)epilogue<T>(p.epi, (float)acc, idx, col) : (double)acc;
        C[row * p.n + col] = FromF64<T>::go(v);
    }
}

extern "C" __global__ void __launch_bounds__(256) matmul_simt_f32(MatmulArgs p) { simt_kernel<float, float>(p); }
extern "C" __global__ void __launch_bounds__(256) matmul_simt_f64(MatmulArgs p) { simt_kernel<double, double>(p); }
extern "C" __global__ void __launch_bounds__(256) matmul_simt_bf16(MatmulArgs p) { simt_kernel<bf16, float>(p); }
extern "C" __global__ void __launch_bounds__(256) matmul_simt_f16(MatmulArgs p) { simt_kernel<f16, float>(p); }
