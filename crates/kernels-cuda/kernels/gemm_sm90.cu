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
// see prelude.cuh) runs in registers and stores straight to global memory.

#define G_BM 128
#define G_BN 256
#define G_BK 64
#define G_STAGES 4
#define G_A_BYTES (G_BM * G_BK * 2)
#define G_B_BYTES (G_BN * G_BK * 2)
#define G_STAGE_BYTES (G_A_BYTES + G_B_BYTES)

struct alignas(64) TmaMap { u64 data[16]; };

struct GemmArgs {
    u64 c;
    i64 m, n, k;
    i64 stride_c;  // elements between batches of C
    i64 group_m;   // row tiles per raster group (see below)
    Epilogue epi;  // applied to every output element (prelude.cuh)
};

__device__ __forceinline__ u32 s_addr(const void* p) { return (u32)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void mbar_init(u64* bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(s_addr(bar)), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(u64* bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(s_addr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(u64* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(s_addr(bar)) : "memory");
}
__device__ __forceinline__ void mbar_wait(u64* bar, u32 parity) {
    asm volatile(
        "{\n.reg .pred p;\nLAB_WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
        "@!p bra LAB_WAIT;\n}\n" ::"r"(s_addr(bar)), "r"(parity) : "memory");
}

__device__ __forceinline__ void tma_load_3d(void* dst, const TmaMap* map, u64* bar, int c0, int c1, int c2) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];\n"
        ::"r"(s_addr(dst)), "l"((u64)map), "r"(s_addr(bar)), "r"(c0), "r"(c1), "r"(c2) : "memory");
}

// A shared-memory matrix descriptor for a K-major tile with the 128-byte swizzle: rows of 128
// bytes, 8-row groups 1024 bytes apart (the stride byte offset); the leading byte offset is
// unused in this layout. The tile base must be 1024-byte aligned.
__device__ __forceinline__ u64 sw128_desc(const void* p) {
    u64 addr = s_addr(p);
    return ((addr & 0x3FFFF) >> 4) | ((u64)1 << 16) | ((u64)(1024 >> 4) << 32) | ((u64)1 << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait1() { asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory"); }

// The 128 accumulator operands of m64n256 (d[0..127]), shared by every wgmma variant below.
#define WG_D_REGS "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"
#define WG_D_OUTS "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
// scale-d is a predicate from operand 130; imm-scale-a/b = 1; imm-trans-a = 0 (A K-major);
// imm-trans-b = TB (1: B N-major, i.e. row-major [K, N] as the caller stores it).
#define WG_MMA(TYPES, TB)                                                                                   \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                                           \
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32." TYPES " " WG_D_REGS ", %128, %129, p, 1, 1, 0, " #TB \
                 ";\n}\n"                                                                                 \
                 : WG_D_OUTS                                                                               \
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d))

template <bool BF16, bool TB>
__device__ __forceinline__ void wgmma_256(float* d, u64 desc_a, u64 desc_b, u32 scale_d) {
    if (BF16) {
        if (TB) WG_MMA("bf16.bf16", 1); else WG_MMA("bf16.bf16", 0);
    } else {
        if (TB) WG_MMA("f16.f16", 1); else WG_MMA("f16.f16", 0);
    }
}

// Descriptor of an N-major B tile: TMA writes it as 64-column (128-byte) swizzled boxes of
// G_BK rows each, so the 64-column groups lie G_BK * 128 bytes apart (leading byte offset)
// and 8-row groups 1024 bytes apart (stride byte offset).
__device__ __forceinline__ u64 sw128_desc_nmajor(const void* p) {
    u64 addr = s_addr(p);
    return ((addr & 0x3FFFF) >> 4) | ((u64)((G_BK * 128) >> 4) << 16) | ((u64)(1024 >> 4) << 32) | ((u64)1 << 62);
}

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
                mbar_wait(&empty[s], ((kt / G_STAGES) & 1) ^ 1);
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
        mbar_wait(&full[s], (kt / G_STAGES) & 1);
        const u8* sa = smem + s * G_STAGE_BYTES + c * (64 * 128);
        const u8* sb = smem + s * G_STAGE_BYTES + G_A_BYTES;
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < G_BK / 16; ++kk) {
            // Within a swizzled row, the k-th 16-element slice starts 32 bytes further.
            // K-major B: the k-th 16-element slice is 32 bytes into each row; N-major B: it is
            // 16 rows (2048 bytes) further down each box.
            const u64 desc_b = TB ? sw128_desc_nmajor(sb) + kk * (2048 >> 4) : sw128_desc(sb) + 2 * kk;
            wgmma_256<BF16, TB>(d, sw128_desc(sa) + 2 * kk, desc_b, (kt > 0 || kk > 0) ? 1u : 0u);
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
