#line 1 "qgemv_mma_tile.cu"
// qgemv_mma_tile.cu: one lhs row over Q8_0 weights of short rows on integer tensor cores
// (qgemv_mma_tile_q8_0_m1, sm_90): a vocabulary projection such as SmolLM2's tied Q8_0
// embeddings (49152 x 576). Their 612-byte rows are not on 16 bytes, so TMA's 2-D boxes
// (qgemv_mma.cu) cannot fetch them, and qgemv_stream.cu spends three instructions per weight
// with 18 of a warp's 32 lanes busy at K = 576 (a lane per 32-element block): bound by
// instruction issue at 43% of the copy rate.
//
// Sixteen rows of whole 34-byte blocks are 16 x row_bytes = 17 K bytes, whole 16-byte pieces,
// and contiguous: a tile of 16 rows (the mma's M) is one 1-D bulk copy (cp.async.bulk) into a
// stage, on 16 bytes where the weights are (launch/qgemv_mma_tile.rs: K a multiple of 64 up to
// 960, a stage at most 16 KiB). A last tile of fewer rows copies its bytes up to the
// last whole 16 in bulk and the rest (under 16 bytes, whole words) with plain loads. Each warp
// walks its own tiles (round-robin over the grid's warps) through a private ring of `stages`
// stages (one by default: two blocks of 8 warps an SM at K = 576), one mbarrier each, refilled
// as soon as the warp has read it; with `early` (constant weights) the first stages go out
// before griddepcontrol.wait.
//
// The lhs: qgemv_mma.cu's fixed point (qm_prep, run by every CTA: three int8 pieces per element
// and a power-of-two scale per 32-element unit), normalised first where an RMSNorm is folded in
// (QNorm). Units go in pairs as in qgemv_mma.cu's one-row kernels: unit j's pieces in B columns
// 0..2 and unit j + 1's in 4..6 of two mmas into one C, lanes t = 0, 1 then holding unit j's
// sums and t = 2, 3 unit j + 1's. The quants are signed bytes and go into the mma as stored
// (mma.m16n8k32.s8.s8). With |q| up to 128 a column's sum reaches 2^19, and 2^14 times that
// overflows 32 bits, so a lane joins its two columns in f32 (one rounding per unit, 2^-24 of
// it), then applies 2^e and the block's f16 scale. Lane (g, t) reads rows g and g + 8; unit j's
// quants start 34 j + 2 bytes into its row, so an even unit's words lie 2 bytes past a word
// boundary (each joined from two aligned loads) and an odd unit's on one (row_bytes is a
// multiple of 4). Summation order is fixed: the result is deterministic. As in qgemv_mma.cu, a
// unit of the lhs holding an inf or NaN makes every product NaN (its scale is NaN).
// __launch_bounds__(256, 2): two blocks an SM at K = 576 (one stage each: the launcher's default).

#define QT_WARPS 8  // launch/qgemv_mma_tile.rs: QT_WARPS

// out [n] = lhs [k] @ dequantize(w)^T (+ res), w [n, row_bytes] of Q8_0; lhs, out, res of T.
// Shared memory (launch/qgemv_mma_tile.rs sizes it): the lhs fragments [units][3][4][2 words]
// and per-unit terms (qgemv_mma_prep.cuh), 128 zero bytes, then, 128-byte aligned, each warp's
// `stages` stages of 16 x row_bytes, then their mbarriers.
template <typename T>
__device__ __forceinline__ void qgemv_mma_tile(const u8* __restrict__ w, T* __restrict__ out,
                                               const T* __restrict__ lhs, const T* __restrict__ res, int n, int k,
                                               int row_bytes, int nst, int early, const QNorm& nm) {
#if __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) u8 qm_smem[];
    __shared__ float qt_inv[1];
    const int units = k / 32;
    u8* frag = qm_smem;
    QmMeta* meta = (QmMeta*)(qm_smem + units * 96);
    u8* zero = (u8*)(meta + units);
    u8* stages = qm_smem + ((units * 112 + 128 + 127) & ~127);
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int tile_bytes = 16 * row_bytes;
    u8* ring = stages + warp * nst * tile_bytes;
    u64* full = (u64*)(stages + QT_WARPS * nst * tile_bytes) + warp * nst;
    const int tiles = (n + 15) / 16, nw = gridDim.x * QT_WARPS;

    if (lane == 0)
        for (int s = 0; s < nst; ++s) mbar_init(smem_u32(&full[s]), 1);
    mbar_init_fence();
    __syncwarp();

    // Tile `tile` (if there is one) into stage `buf`: lane 0 issues the bulk copy of its whole
    // 16 bytes, lanes 0.. copy the words after them (a last tile of fewer rows). Every lane of
    // the warp calls it.
    auto stage = [&](int tile, int buf) {
        if (tile < tiles) {
            const i64 bytes = (i64)min(16, n - 16 * tile) * row_bytes;
            const u32 bulk = (u32)(bytes & ~15ll);
            u8* dst = ring + buf * tile_bytes;
            const u8* src = w + (i64)tile * tile_bytes;
            if (lane == 0) {
                const u32 bar = smem_u32(&full[buf]);
                // (the stage's tail words, if any, were last written through the generic proxy)
                asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
                mbar_expect(bar, bulk);
                asm volatile(
                    "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                        smem_u32(dst)),
                    "l"(src), "r"(bulk), "r"(bar)
                    : "memory");
            }
            if (lane < (int)(bytes - bulk) / 4) ((u32*)(dst + bulk))[lane] = ((const u32*)(src + bulk))[lane];
        }
        __syncwarp();
    };
    // Under programmatic stream serialization the grid may start while the previous kernel
    // drains: with `early` (constant weights: no kernel of the program writes them) the first
    // stages are copied before griddepcontrol.wait, the lhs and every store after it.
    if (!early) pdl_wait();
    for (int s = 0; s < nst; ++s) stage(blockIdx.x * QT_WARPS + warp + s * nw, s);
    if (early) pdl_wait();

    for (int i = tid; i < 128 / 4; i += blockDim.x) ((u32*)zero)[i] = 0u;
    if (nm.gamma) {
        // The folded RMSNorm's inverse rms (K <= 960: one warp, summing as the rms_norm kernel does).
        if (warp == 0) {
            const float v = qn_inv_rms<T>(lhs, k, nm.eps, lane);
            if (lane == 0) qt_inv[0] = v;
        }
        __syncthreads();
    }
    qm_prep<1, T, false>(lhs, k, 1, frag, meta, warp, lane, nm, qt_inv);
    __syncthreads();
    pdl_launch_dependents();

    // B column g: piece g of unit j (g < 3) or piece g - 4 of unit j + 1 (4 <= g < 7), zeros
    // otherwise; C columns 2t, 2t + 1: pieces (hi, mid) of the lane's unit for even t, (lo, -)
    // for odd t, joined with weights (2^14, 2^7) or (1, 0).
    const u8* b0p = g < 3 ? frag + g * 32 + t * 8 : zero;
    const u8* b1p = g >= 4 && g < 7 ? frag + 96 + (g - 4) * 32 + t * 8 : zero;
    const int b0s = g < 3 ? 96 : 0, b1s = g >= 4 && g < 7 ? 96 : 0, second = t / 2;
    const float fm0 = t % 2 ? 1.f : 16384.f, fm1 = t % 2 ? 0.f : 128.f;

    u32 phase = 0;
    int buf = 0;
    for (int tile = blockIdx.x * QT_WARPS + warp; tile < tiles; tile += nw) {
        mbar_wait(smem_u32(&full[buf]), phase);
        const u8* r0 = ring + buf * tile_bytes + g * row_bytes;
        const u8* r1 = r0 + 8 * row_bytes;
        float acc[2] = {0.f, 0.f};
#pragma unroll 3
        for (int j = 0; j < units; j += 2) {
            // unit j: 2 bytes past a word boundary; unit j + 1 (34 bytes on): on one
            const u8* a = r0 + 34 * j + 2 + 4 * t;
            const u8* b = r1 + 34 * j + 2 + 4 * t;
            const uint2 x0 = *(const uint2*)(b0p + j * b0s), x1 = *(const uint2*)(b1p + j * b1s);
            int c[4];
            mma_s8s8(c, qm_word6<true>(a), qm_word6<true>(b), qm_word6<true>(a + 16), qm_word6<true>(b + 16), x0.x,
                     x0.y);
            mma_s8s8_acc(c, *(const u32*)(a + 34), *(const u32*)(b + 34), *(const u32*)(a + 50), *(const u32*)(b + 50),
                         x1.x, x1.y);
            const int mine = j + second;
            const float s = meta[mine].s;
            acc[0] = fmaf(fmaf((float)c[0], fm0, (float)c[1] * fm1) * s, qm_f16(r0 + 34 * mine), acc[0]);
            acc[1] = fmaf(fmaf((float)c[2], fm0, (float)c[3] * fm1) * s, qm_f16(r1 + 34 * mine), acc[1]);
        }
        __syncwarp();  // every lane is done with the stage: refill it
        stage(tile + nst * nw, buf);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            acc[h] += __shfl_xor_sync(0xFFFFFFFFu, acc[h], 1);
            acc[h] += __shfl_xor_sync(0xFFFFFFFFu, acc[h], 2);
        }
        const int row = tile * 16 + g;
        if (t == 0 && row < n) out[row] = FromF32<T>::go(res ? acc[0] + to_f32(res[row]) : acc[0]);
        if (t == 0 && row + 8 < n) out[row + 8] = FromF32<T>::go(res ? acc[1] + to_f32(res[row + 8]) : acc[1]);
        if (++buf == nst) buf = 0, phase ^= 1u;
    }
#else
    __trap();  // launch/qgemv_mma_tile.rs launches it on sm_90 and later only
#endif
}

#define QGEMV_MMA_TILE(T, TS)                                                                                   \
    extern "C" __global__ void __launch_bounds__(256, 2) qgemv_mma_tile_q8_0_m1##TS(                            \
        const u8* w, T* out, const T* lhs, const T* res, int n, int k, int row_bytes, int stages, int early,    \
        QNorm norm) {                                                                                           \
        qgemv_mma_tile<T>(w, out, lhs, res, n, k, row_bytes, stages, early, norm);                              \
    }
QGEMV_MMA_TILE(float, )
QGEMV_MMA_TILE(bf16, _bf16)
QGEMV_MMA_TILE(f16, _f16)
