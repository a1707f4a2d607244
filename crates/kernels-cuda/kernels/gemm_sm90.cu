#line 1 "gemm_sm90.cu"
// gemm_sm90.cu: C[b] = A[b] @ B[b] on Hopper (sm_90a) with wgmma tensor cores fed by TMA.
//
// A [M, K] row-major (K-major). B [K, N] row-major is read as it is (N-major, wgmma's
// transposed-B mode) when N % 8 == 0 (TMA needs 16-byte row strides); otherwise the caller
// transposes it to Bt [N, K] first (the layout family's tiled transpose) and it is read
// K-major. Shared-memory tiles use the 128-byte swizzle that TMA writes. Block tile
// 128 x 256 x 64; 3 warpgroups: one producer (a single thread issues the TMA loads of a
// 4-stage ring, guarded by mbarriers) and two consumers, each computing a 64 x 256 slice with
// m64n256k16 wgmma into 128 f32 registers per thread (setmaxnreg moves registers from the
// producer to the consumers). Out-of-range
// rows and columns are zero-filled by TMA on load and skipped on store, so any M and N work;
// K must be a multiple of 8 (16-byte TMA strides). The epilogue (bias, activation, residual:
// see prelude.cuh) runs in registers and stores straight to global memory. sm90_pipe.cuh (in
// front of this file) has the building blocks.

#define G_BM 128
#define G_BN 256
#define G_BK 64
#define G_STAGES 4
#define G_A_BYTES (G_BM * G_BK * 2)
#define G_B_BYTES (G_BN * G_BK * 2)
#define G_STAGE_BYTES (G_A_BYTES + G_B_BYTES)

struct GemmArgs {
    u64 c;
    i64 m, n, k;
    i64 stride_c;  // elements between batches of C
    i64 group_m;   // row tiles per raster group (see below)
    Epilogue epi;  // applied to every output element (prelude.cuh)
};

template <typename T, bool BF16, bool TB>
__device__ __forceinline__ void gemm_sm90(const TmaMap* map_a, const TmaMap* map_bt, const GemmArgs& p) {
    extern __shared__ u8 raw_smem[];
    // Stage buffers start on a 1024-byte boundary (the swizzle pattern repeats every 1024 bytes).
    u8* smem = (u8*)(((u64)raw_smem + 1023) & ~(u64)1023);
    u64* full = (u64*)(smem + G_STAGES * G_STAGE_BYTES);
    u64* empty = full + G_STAGES;
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
    // Grouped raster: consecutive blocks walk group_m row tiles down before moving one
    // column tile right, so the blocks resident at once share A row strips and B column strips
    // in L2 instead of sweeping all of B for a handful of rows.
    const int n_tiles = (int)((p.n + G_BN - 1) / G_BN), m_tiles = (int)((p.m + G_BM - 1) / G_BM);
    const int group_m = (int)p.group_m;
    const int id = blockIdx.x, per_group = group_m * n_tiles;
    const int first_m = (id / per_group) * group_m;
    const int group_rows = min(m_tiles - first_m, group_m);
    const int m0 = (first_m + (id % per_group) % group_rows) * G_BM;
    const int n0 = ((id % per_group) / group_rows) * G_BN, z = blockIdx.z;
    const int ktiles = (int)((p.k + G_BK - 1) / G_BK);
    if (threadIdx.x == 0) {
        for (int s = 0; s < G_STAGES; ++s) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], 256);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        if (tid == 0) {
            for (int kt = 0; kt < ktiles; ++kt) {
                const int s = kt % G_STAGES;
                mbar_wait_spin(&empty[s], ((kt / G_STAGES) & 1) ^ 1);
                u8* sa = smem + s * G_STAGE_BYTES;
                mbar_expect_tx(&full[s], G_STAGE_BYTES);
                tma_load_3d(sa, map_a, &full[s], kt * G_BK, m0, z);
                if (TB) {
                    // B [K, N] row-major: four 64-column boxes of G_BK rows.
                    for (int j = 0; j < G_BN / 64; ++j)
                        tma_load_3d(sa + G_A_BYTES + j * (G_BK * 128), map_bt, &full[s], n0 + 64 * j, kt * G_BK, z);
                } else {
                    tma_load_3d(sa + G_A_BYTES, map_bt, &full[s], kt * G_BK, n0, z);
                }
            }
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    const int c = wg - 1;  // consumer 0 takes rows 0..63 of the tile, consumer 1 rows 64..127
    float d[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) d[i] = 0.f;
    for (int kt = 0; kt < ktiles; ++kt) {
        const int s = kt % G_STAGES;
        mbar_wait_spin(&full[s], (kt / G_STAGES) & 1);
        const u8* sa = smem + s * G_STAGE_BYTES + c * (64 * 128);
        const u8* sb = smem + s * G_STAGE_BYTES + G_A_BYTES;
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < G_BK / 16; ++kk) {
            // Within a swizzled row, the k-th 16-element slice starts 32 bytes further.
            // K-major B: the k-th 16-element slice is 32 bytes into each row; N-major B: it is
            // 16 rows (2048 bytes) further down each box.
            const u64 desc_b = TB ? sw128_desc_nmajor(sb) + kk * (2048 >> 4) : sw128_desc(sb) + 2 * kk;
            Wgmma<256, BF16, TB>::run(d, sw128_desc(sa) + 2 * kk, desc_b, (kt > 0 || kk > 0) ? 1u : 0u);
        }
        wgmma_commit();
        // Keep this k-tile's MMAs in flight; once the previous tile's have finished, its
        // stage can be refilled.
        wgmma_wait1();
        if (kt > 0) mbar_arrive(&empty[(kt - 1) % G_STAGES]);
    }
    wgmma_wait0();
    // Accumulator layout of m64nN: warp w of the warpgroup owns rows 16w..16w+15; lane l holds
    // rows l/4 and l/4+8, columns 8j + 2(l%4) and +1, for j = 0..N/8-1.
    const int warp = tid / 32, lane = tid % 32;
    // This thread's rows (row0, row0 + 8) and first column; column j * 8 (+1) of the fragment
    // exists while it is below `cols`. Pointers to the two rows keep the per-element
    // arithmetic 32-bit, which leaves registers for the 128 accumulators.
    const i64 row0 = (i64)m0 + c * 64 + warp * 16 + lane / 4;
    const int col0 = n0 + (lane % 4) * 2;
    const int cols = (int)min(p.n - col0, (i64)G_BN);
    const bool has0 = row0 < p.m, has1 = row0 + 8 < p.m;
    // The epilogue runs as whole-fragment passes (bias, activation, residual), each skipped
    // entirely when absent, so the store loop stays the same compact code for every GEMM.
    if (p.epi.bias) {
        const T* bias = (const T*)p.epi.bias + col0;
#pragma unroll
        for (int j = 0; j < G_BN / 8; ++j) {
            const float b0 = j * 8 < cols ? to_f32(bias[j * 8]) : 0.f;
            const float b1 = j * 8 + 1 < cols ? to_f32(bias[j * 8 + 1]) : 0.f;
            d[j * 4] += b0, d[j * 4 + 1] += b1, d[j * 4 + 2] += b0, d[j * 4 + 3] += b1;
            // Keeps the compiler from hoisting all 64 bias loads ahead of their adds: with 128
            // live accumulators there are no registers for them.
            asm volatile("" ::: "memory");
        }
    }
    if (p.epi.act != EPI_NONE) epi_act_all<128>(p.epi.act, d);
    if (p.epi.clamp) epi_clamp_all<128>(p.epi, d);
    const i64 offset = (i64)z * p.stride_c + row0 * p.n + col0;
    if (p.epi.residual) {
        const float beta = p.epi.beta;
        const T* r0 = (const T*)p.epi.residual + offset;
        const T* r1 = r0 + 8 * p.n;
#pragma unroll
        for (int j = 0; j < G_BN / 8; ++j) {
            if (has0 && j * 8 < cols) d[j * 4] += beta * to_f32(r0[j * 8]);
            if (has0 && j * 8 + 1 < cols) d[j * 4 + 1] += beta * to_f32(r0[j * 8 + 1]);
            if (has1 && j * 8 < cols) d[j * 4 + 2] += beta * to_f32(r1[j * 8]);
            if (has1 && j * 8 + 1 < cols) d[j * 4 + 3] += beta * to_f32(r1[j * 8 + 1]);
            asm volatile("" ::: "memory");
        }
    }
    T* c0 = (T*)p.c + offset;
    T* c1 = c0 + 8 * p.n;
#pragma unroll
    for (int j = 0; j < G_BN / 8; ++j) {
        if (has0 && j * 8 < cols) c0[j * 8] = FromF32<T>::go(d[j * 4]);
        if (has0 && j * 8 + 1 < cols) c0[j * 8 + 1] = FromF32<T>::go(d[j * 4 + 1]);
        if (has1 && j * 8 < cols) c1[j * 8] = FromF32<T>::go(d[j * 4 + 2]);
        if (has1 && j * 8 + 1 < cols) c1[j * 8 + 1] = FromF32<T>::go(d[j * 4 + 3]);
    }
}

#define GEMM_ENTRY(NAME, T, BF16, TB)                                                                  \
    extern "C" __global__ void __launch_bounds__(384, 1)                                                  \
        NAME(const __grid_constant__ TmaMap map_a, const __grid_constant__ TmaMap map_b, GemmArgs p) {   \
        GEMM_BODY(T, BF16, TB)                                                                          \
    }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define GEMM_BODY(T, BF16, TB) gemm_sm90<T, BF16, TB>(&map_a, &map_b, p);
#else
#define GEMM_BODY(T, BF16, TB)
#endif
// B transposed to [N, K] first (any N) / B as given, [K, N] (N % 8 == 0).
GEMM_ENTRY(gemm_sm90_bf16, bf16, true, false)
GEMM_ENTRY(gemm_sm90_f16, f16, false, false)
GEMM_ENTRY(gemm_sm90_bf16_nn, bf16, true, true)
GEMM_ENTRY(gemm_sm90_f16_nn, f16, false, true)
