#line 1 "qgemv_stream.cu"
// qgemv_stream.cu: the decode GEMV of qgemv.cu (qgemv_s_<enc>_m{1,2,4,8}) for the word-decoded
// encodings (Q4_0, Q4_1, Q8_0, Q4_K) on sm_90, when the weights are 16-byte aligned rows (the
// base pointer and row_bytes multiples of 16) and lhs is 16-byte aligned: launch/quant.rs picks
// it then (but for 1-2 rows of small weights, and where the tensor-core GEMV takes the rows),
// and qgemv.cu's general kernel otherwise. Same chunking, stage layout and per-lane
// arithmetic (chunk_dot), so the same bits; at M = 1 the general kernel is
// bound by instruction issue (an H200 profile: 0.8 instructions issued per scheduler and cycle,
// 37% of DRAM bandwidth, about 8 instructions per weight), so this one cuts instructions:
//
// - Bulk copies: lane c < 2 of each warp copies the chunk of the warp's row c (contiguous) with
//   cp.async.bulk, completing on the stage's mbarrier; each thread copies its 16 bytes of lhs
//   with cp.async (the lane runs of the staged lhs are padded, so no single copy fills them).
//   Per-thread 16-byte cp.async copies of the weights cost about 1.5 instructions per weight in
//   address arithmetic.
// - Persistent: a grid of at most (blocks per SM) x SMs blocks, block b taking row groups
//   b, b + gridDim.x, ...; the ring of stages runs on across groups, so the next group's first
//   chunks are in flight while this group's last one is decoded (with K = 4096 a group is four
//   chunks, and a block per group filled and drained the ring each time).
//
// The __syncthreads after the waits of step it (the stage's mbarrier, this thread's cp.async
// group) publishes every thread's lhs copies and tells every warp that the stage refilled next,
// the one read in step it - 1, is free.

// The streaming kernel's block: 8 warps of CW weight rows each (4 for up to two lhs rows, which
// halves the per-row share of each step's fixed costs: waits, the barrier, issuing copies);
// a ring of ST stages, each the lhs chunk ([MR][32 lanes][Lhs<T>::LD] T) and ROWS weight slots,
// then an mbarrier per stage. launch/quant.rs (stream_layout) sizes it the same way. 16-bit lhs
// and out: kernel suffix _bf16 / _f16 (as in qgemv.cu).
template <int E, int MR, typename T> struct Qs {
    enum {
        CW = MR <= 2 ? 4 : 2,
        ROWS = QV_WARPS * CW,
        ST = MR <= 4 ? 3 : 2,
        LHS = MR * 32 * Lhs<T>::LD * (int)sizeof(T),
        BUF = LHS + ROWS * Chunk<E>::SLOT,
    };
};

template <int E, int MR, typename T>
__device__ __forceinline__ void qgemv_s(const T* __restrict__ lhs, const u8* __restrict__ w, T* __restrict__ out, int m,
                                        int n, int k, i64 row_bytes, u32 magic, const T* __restrict__ res) {
#if __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) u8 qv_smem[];
    typedef Qs<E, MR, T> S;
    enum { LD = Lhs<T>::LD, VEC = Lhs<T>::VEC };
    enum { CW = S::CW, ROWS = S::ROWS };
    u64* full = (u64*)(qv_smem + S::ST * S::BUF);  // one mbarrier per stage
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int sb = lane % (Enc<E>::ELEMS / 32);
    const int chunks = (k + QV_CHUNK - 1) / QV_CHUNK;
    const int groups = (n + ROWS - 1) / ROWS;
    const int my_groups = (int)blockIdx.x < groups ? (groups - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0;
    const int items = my_groups * chunks;
    if (tid < S::ST) mbar_init(smem_u32(&full[tid]), (u32)ROWS);
    mbar_init_fence();
    __syncthreads();
    // This thread's lhs vector: elements VEC tid .. VEC tid + VEC - 1 of the chunk (f32: every
    // thread; 16-bit: the first 128), in lane run VEC tid / 32.
    const int lhs_t = VEC * tid;
    const int lhs_dst = (lhs_t / 32) * LD + lhs_t % 32;

    // Stages the next item: each thread its lhs vector of each row (cp.async, one group per
    // stage), lane c < CW of each warp the chunk of the warp's row c (a bulk copy completing
    // on the stage's mbarrier, which expects one arrival per row of the block).
    int st_g = blockIdx.x, st_ch = 0, st_buf = 0;
    auto stage = [&]() {
        if (st_g < groups) {
            const int k0 = st_ch * QV_CHUNK;
            T* ls = (T*)(qv_smem + st_buf * S::BUF);
            const bool lok = lhs_t < k - k0;
            if (VEC * QV_WARPS * 32 <= QV_CHUNK || lhs_t < QV_CHUNK) {
#pragma unroll
                for (int r = 0; r < MR; ++r) {
                    const bool ok = lok && r < m;
                    cp_async16(ls + r * 32 * LD + lhs_dst, ok ? lhs + (i64)r * k + k0 + lhs_t : lhs, ok);
                }
            }
            if (lane < CW) {
                const int row = st_g * ROWS + warp * CW + lane;
                const i64 b0 = (i64)st_ch * Chunk<E>::BYTES;
                const u32 bytes = row < n ? (u32)min((i64)Chunk<E>::BYTES, row_bytes - b0) : 0u;  // a multiple of 16
                const u32 bar = smem_u32(&full[st_buf]);
                mbar_expect(bar, bytes);
                if (bytes)
                    asm volatile(
                        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                            smem_u32(qv_smem + st_buf * S::BUF + S::LHS + (warp * CW + lane) * Chunk<E>::SLOT)),
                        "l"(w + (i64)row * row_bytes + b0), "r"(bytes), "r"(bar)
                        : "memory");
            }
        }
        cp_async_commit();
        if (++st_ch == chunks) st_ch = 0, st_g += gridDim.x;
        if (++st_buf == S::ST) st_buf = 0;
    };

#pragma unroll
    for (int s = 0; s < S::ST - 1; ++s) stage();
    float acc[CW][MR];
#pragma unroll
    for (int c = 0; c < CW; ++c)
#pragma unroll
        for (int r = 0; r < MR; ++r) acc[c][r] = 0.f;
    const int lane_bytes = (lane * 32 / Enc<E>::ELEMS) * Enc<E>::BYTES;
    int g = blockIdx.x, ch = 0, buf = 0;
    u32 phase = 0;
    for (int it = 0; it < items; ++it) {
        cp_async_wait<S::ST - 2>();  // this thread's lhs copies of item it have landed
        const u32 bar = smem_u32(&full[buf]);
        mbar_wait(bar, phase);
        __syncthreads();  // everyone's lhs copies too; every warp is past step it - 1, whose stage is refilled now
        stage();
        if (ch * QV_CHUNK + 32 * lane < k) {
            const u8* sbase = qv_smem + buf * S::BUF;
            const u8* bb[CW];
#pragma unroll
            for (int c = 0; c < CW; ++c) bb[c] = sbase + S::LHS + (warp * CW + c) * Chunk<E>::SLOT + lane_bytes;
            chunk_dot<E, MR, CW, T>((const T*)sbase + lane * LD, bb, sb, magic, acc);
        }
        if (++ch == chunks) {
            const int row0 = g * ROWS + warp * CW;
#pragma unroll
            for (int c = 0; c < CW; ++c)
#pragma unroll
                for (int r = 0; r < MR; ++r) {
                    float v = acc[c][r];
#pragma unroll
                    for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, off);
                    if (lane == 0 && r < m && row0 + c < n)
                        out[(i64)r * n + row0 + c] = FromF32<T>::go(res ? v + to_f32(res[(i64)r * n + row0 + c]) : v);
                    acc[c][r] = 0.f;
                }
            ch = 0;
            g += gridDim.x;
        }
        if (++buf == S::ST) buf = 0, phase ^= 1u;
    }
#else
    __trap();  // launch/quant.rs launches these on sm_90 and later only
#endif
}

// MR >= 4 takes a minimum-blocks hint of 1: without it ptxas held qgemv_s_q8_0_m4 to 64
// registers and spilled.
#define QGEMV_S(NAME, E, MR, T, TS)                                                                       \
    extern "C" __global__ void __launch_bounds__(256, MR >= 4 ? 1 : 0)                                    \
        qgemv_s_##NAME##_m##MR##TS(const T* lhs, const u8* w, T* out, int m, int n, int k, i64 row_bytes, \
                                   u32 magic, const T* res) {                                             \
        qgemv_s<E, MR, T>(lhs, w, out, m, n, k, row_bytes, magic, res);                                   \
    }
#define QGEMV_S_T(NAME, E, T, TS) \
    QGEMV_S(NAME, E, 1, T, TS) QGEMV_S(NAME, E, 2, T, TS) QGEMV_S(NAME, E, 4, T, TS) QGEMV_S(NAME, E, 8, T, TS)
// The encoding and activation type that qgemv.cu's instantiation names (QV_E, ...), if it is one
// of the word-decoded encodings.
#if QV_E == ENC_Q4_0 || QV_E == ENC_Q4_1 || QV_E == ENC_Q8_0 || QV_E == ENC_Q4_K
QGEMV_S_T(QV_NAME, QV_E, QV_T, QV_TS)
#endif
