#line 1 "qgemv_stream.cu"
// qgemv_stream.cu: the decode GEMV of qgemv.cu (qgemv_s_<enc>_m{1,2,4,8}) for the word-decoded
// encodings (Q4_0, Q4_1, Q8_0, Q4_K) on sm_90, when the weights' base and lhs are 16-byte
// aligned and the rows whole 4-byte words: launch/quant.rs picks it then (but for 1-2 rows of
// small weights, and where the tensor-core GEMV takes the rows), and qgemv.cu's general kernel
// otherwise. Same chunking, stage layout and per-lane
// arithmetic (chunk_dot), so the same bits; at M = 1 the general kernel is
// bound by instruction issue (an H200 profile: 0.8 instructions issued per scheduler and cycle,
// 37% of DRAM bandwidth, about 8 instructions per weight), so this one cuts instructions:
//
// - Bulk copies: lane c < CW of each warp copies the 16-byte aligned middle of the chunk of the
//   warp's row c with cp.async.bulk, completing on the stage's mbarrier; rows that do not start
//   or end on 16 bytes (a vocabulary projection of K = 576: Q8_0 rows of 612 bytes) have their
//   head and tail words (under 16 bytes each) copied by lanes CW + c and 2 CW + c with 4-byte
//   cp.async. Each thread copies its 16 bytes of lhs with cp.async (the lane runs of the
//   staged lhs are padded, so no single copy fills them). Per-thread 16-byte cp.async copies
//   of the weights cost about 1.5 instructions per weight in address arithmetic.
// - Persistent: a grid of at most (blocks per SM) x SMs blocks, block b taking row groups
//   b, b + gridDim.x, ...; the ring of stages runs on across groups, so the next group's first
//   chunks are in flight while this group's last one is decoded (with K = 4096 a group is four
//   chunks, and a block per group filled and drained the ring each time). Where K is one chunk
//   (K <= 1024) every item has the same lhs: it is staged once, in front of the stages, which
//   then hold weights only; a folded RMSNorm (QNorm, K <= 1024 only) normalises it then, as
//   qgemv.cu does. qgemv.cu's block per 16 rows ran a vocabulary projection (49152 x 576) in
//   six waves of four blocks an SM, each a full round trip to memory.
// - Launched under PDL (launch/pdl.rs): before griddepcontrol.wait the first group's weight
//   bytes are asked into L2; or, with `early` (constant weights) where K is one chunk (the
//   stages then hold weights only), the first ST - 1 stages are copied in full before it.
//
// The __syncthreads after the waits of step it (the stage's mbarrier, this thread's cp.async
// group) publishes every thread's lhs and edge copies and tells every warp that the stage
// refilled next, the one read in step it - 1, is free.

// The streaming kernel's block: 8 warps of CW weight rows each (4 for up to two lhs rows, which
// halves the per-row share of each step's fixed costs: waits, the barrier, issuing copies);
// a ring of ST stages, each the lhs chunk ([MR][32 lanes][Lhs<T>::LD] T) and ROWS weight slots
// of `slot` bytes (a launch parameter: the bytes of a row's chunk, or of the whole row where it
// is shorter, plus 32, rounded to 16), then an mbarrier per stage; where K is one chunk, one lhs
// area in front and stages of weight slots only. launch/qgemv_stream.rs sizes it the same way.
// 16-bit lhs and out: kernel suffix _bf16 / _f16 (as in qgemv.cu).
template <int E, int MR, typename T> struct Qs {
    enum {
        CW = MR <= 2 ? 4 : 2,
        ROWS = QV_WARPS * CW,
        ST = MR <= 4 ? 3 : 2,
        LHS = MR * 32 * Lhs<T>::LD * (int)sizeof(T),
    };
};

template <int E, int MR, typename T>
__device__ __forceinline__ void qgemv_s(const T* __restrict__ lhs, const u8* __restrict__ w, T* __restrict__ out, int m,
                                        int n, int k, i64 row_bytes, u32 magic, const T* __restrict__ res,
                                        const QNorm& nm, int slot, bool early) {
#if __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) u8 qv_smem[];
    __shared__ float qs_inv[MR];
    typedef Qs<E, MR, T> S;
    enum { LD = Lhs<T>::LD, VEC = Lhs<T>::VEC };
    enum { CW = S::CW, ROWS = S::ROWS };
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int sb = lane % (Enc<E>::ELEMS / 32);
    const int chunks = (k + QV_CHUNK - 1) / QV_CHUNK;
    const bool once = chunks == 1;  // the lhs staged once, in front of the stages
    if (nm.gamma && !once) __trap();  // (launch/qgemv_stream.rs folds a norm over one chunk only)
    // stage s: [lhs chunk, unless once] [ROWS weight slots] at ring + s * buf_bytes
    const int lhs_bytes = once ? 0 : S::LHS, buf_bytes = lhs_bytes + ROWS * slot;
    u8* ring = qv_smem + (once ? S::LHS : 0);
    u64* full = (u64*)(ring + S::ST * buf_bytes);  // one mbarrier per stage
    const int groups = (n + ROWS - 1) / ROWS;
    const int my_groups = (int)blockIdx.x < groups ? (groups - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0;
    const int items = my_groups * chunks;
    if (tid < S::ST) mbar_init(smem_u32(&full[tid]), (u32)ROWS);
    mbar_init_fence();
    // This thread's lhs vector: elements VEC tid .. VEC tid + VEC - 1 of the chunk (f32: every
    // thread; 16-bit: the first 128), in lane run VEC tid / 32.
    const int lhs_t = VEC * tid;
    const int lhs_dst = (lhs_t / 32) * LD + lhs_t % 32;
    const bool lhs_thread = VEC * QV_WARPS * 32 <= QV_CHUNK || lhs_t < QV_CHUNK;
    // Lane c (< 3 CW) of a warp copies a part of the chunk of the warp's row c % CW: the
    // 16-byte aligned middle (c < CW), the head or the tail.
    const int part = lane / CW, pc = lane % CW;

    // Stages the next item: each thread its lhs vector of each row (cp.async, one group per
    // stage; not where the lhs is staged once), and the warp's rows' chunks (a bulk copy of the
    // middle completing on the stage's mbarrier, which expects one arrival per row of the
    // block; the head and tail words with cp.async).
    int st_g = blockIdx.x, st_ch = 0, st_buf = 0;
    auto stage = [&]() {
        if (st_g < groups) {
            const int k0 = st_ch * QV_CHUNK;
            u8* sbase = ring + st_buf * buf_bytes;
            T* ls = (T*)sbase;
            if (!once && lhs_thread) {
                const bool lok = lhs_t < k - k0;
#pragma unroll
                for (int r = 0; r < MR; ++r) {
                    const bool ok = lok && r < m;
                    cp_async16(ls + r * 32 * LD + lhs_dst, ok ? lhs + (i64)r * k + k0 + lhs_t : lhs, ok);
                }
            }
            if (part < 3) {
                const int row = st_g * ROWS + warp * CW + pc;
                const i64 b0 = (i64)st_ch * Chunk<E>::BYTES;
                const i64 len = row < n ? min((i64)Chunk<E>::BYTES, row_bytes - b0) : 0;  // whole words
                const u64 a = (u64)(w + (i64)row * row_bytes + b0);
                // [a, va) head, [va, vb) the aligned middle, [vb, a + len) tail
                const u64 va = min((a + 15) & ~15ull, a + len);
                const u64 vb = max((a + len) & ~15ull, va);
                u8* dst = sbase + lhs_bytes + (warp * CW + pc) * slot + (a & 15);  // where byte a lands
                if (part == 0) {
                    const u32 bar = smem_u32(&full[st_buf]);
                    const u32 bytes = (u32)(vb - va);
                    // the slot's earlier bytes came by cp.async (generic proxy) as heads and tails
                    // of other rows: ordered before this bulk copy (async proxy) overwrites them
                    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
                    mbar_expect(bar, bytes);
                    if (bytes)
                        asm volatile(
                            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, "
                            "[%3];\n" ::"r"(smem_u32(dst + (va - a))),
                            "l"(va), "r"(bytes), "r"(bar)
                            : "memory");
                } else {
                    const u64 from = part == 1 ? a : vb, to = part == 1 ? va : a + len;
                    for (u64 p = from; p < to; p += 4) {
                        const u32 d = smem_u32(dst + (p - a));
                        asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(d), "l"(p));
                    }
                }
            }
        }
        cp_async_commit();
        if (++st_ch == chunks) st_ch = 0, st_g += gridDim.x;
        if (++st_buf == S::ST) st_buf = 0;
    };

    // Before the wait: the first stages of weights, where they hold nothing else (`early`: no
    // kernel of the program writes the weights); else the first group's first chunks into L2
    // (a hint).
    const bool pre = early && once;
    if (pre) {
        __syncthreads();  // the mbarriers' initialisation, before any copy completes on them
#pragma unroll
        for (int s = 0; s < S::ST - 1; ++s) stage();
    } else if ((int)blockIdx.x < groups) {
        const i64 pre_bytes = min(row_bytes, (i64)(S::ST - 1) * Chunk<E>::BYTES);
#pragma unroll
        for (int c = 0; c < CW; ++c) {
            const i64 row = (i64)blockIdx.x * ROWS + warp * CW + c;
            if (row < n)
                for (i64 o = (i64)lane * 128; o < pre_bytes + 127; o += 32 * 128)
                    asm volatile("prefetch.global.L2 [%0];" ::"l"(w + row * row_bytes + min(o, pre_bytes - 1))
                                 : "memory");
        }
    }
    pdl_wait();
    pdl_launch_dependents();
    if (once) {
        // The lhs (normalised and rounded to T as rms_norm stores it, with a folded norm) in
        // front of the stages; the loop's first barrier publishes it.
        if (nm.gamma) {
            if (warp < m) {
                const float v = qn_inv_rms<T>(lhs + (i64)warp * k, k, nm.eps, lane);
                if (lane == 0) qs_inv[warp] = v;
            }
            __syncthreads();
        }
        if (lhs_thread) {
#pragma unroll
            for (int r = 0; r < MR; ++r) {
                const bool ok = r < m && lhs_t < k;
                T v[VEC];
#pragma unroll
                for (int h = 0; h < VEC / 4; ++h) {
                    float x[4] = {0.f, 0.f, 0.f, 0.f}, g[4] = {0.f, 0.f, 0.f, 0.f};
                    if (ok) {
                        ld4(lhs + (i64)r * k + lhs_t + 4 * h, x);
                        if (nm.gamma) ld4((const T*)nm.gamma + lhs_t + 4 * h, g);
                    }
#pragma unroll
                    for (int j = 0; j < 4; ++j)
                        v[4 * h + j] = FromF32<T>::go(ok && nm.gamma ? qn_apply<T>(x[j], qs_inv[r], g[j], nm) : x[j]);
                }
                T* d = (T*)qv_smem + r * 32 * LD + lhs_dst;
#pragma unroll
                for (int j = 0; j < VEC; ++j) d[j] = v[j];
            }
        }
    }
    __syncthreads();  // the mbarriers' initialisation, before any copy completes on them

    if (!pre) {
#pragma unroll
        for (int s = 0; s < S::ST - 1; ++s) stage();
    }
    float acc[CW][MR];
#pragma unroll
    for (int c = 0; c < CW; ++c)
#pragma unroll
        for (int r = 0; r < MR; ++r) acc[c][r] = 0.f;
    const int lane_bytes = (lane * 32 / Enc<E>::ELEMS) * Enc<E>::BYTES;
    int g = blockIdx.x, ch = 0, buf = 0;
    u32 phase = 0;
    for (int it = 0; it < items; ++it) {
        cp_async_wait<S::ST - 2>();  // this thread's lhs and edge copies of item it have landed
        const u32 bar = smem_u32(&full[buf]);
        mbar_wait(bar, phase);
        __syncthreads();  // everyone's copies too; every warp is past step it - 1, whose stage is refilled now
        stage();
        if (ch * QV_CHUNK + 32 * lane < k) {
            const u8* sbase = ring + buf * buf_bytes;
            const u8* bb[CW];
#pragma unroll
            for (int c = 0; c < CW; ++c) {
                // the chunk lies (its address % 16) bytes into its slot, as stage() put it
                const u64 at = (u64)(w + (i64)(g * ROWS + warp * CW + c) * row_bytes + (i64)ch * Chunk<E>::BYTES);
                bb[c] = sbase + lhs_bytes + (warp * CW + c) * slot + (at & 15) + lane_bytes;
            }
            chunk_dot<E, MR, CW, T>((const T*)(once ? qv_smem : sbase) + lane * LD, bb, sb, magic, acc);
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
    cp_async_wait<0>();  // no copy may still target shared memory when the block exits
#else
    __trap();  // launch/quant.rs launches these on sm_90 and later only
#endif
}

// MR >= 4 takes a minimum-blocks hint of 1: without it ptxas held qgemv_s_q8_0_m4 to 64
// registers and spilled.
#define QGEMV_S(NAME, E, MR, T, TS)                                                                       \
    extern "C" __global__ void __launch_bounds__(256, MR >= 4 ? 1 : 0)                                    \
        qgemv_s_##NAME##_m##MR##TS(const T* lhs, const u8* w, T* out, int m, int n, int k, i64 row_bytes, \
                                   u32 magic, const T* res, QNorm norm, int slot, int early) {            \
        qgemv_s<E, MR, T>(lhs, w, out, m, n, k, row_bytes, magic, res, norm, slot, early != 0);           \
    }
#define QGEMV_S_T(NAME, E, T, TS) \
    QGEMV_S(NAME, E, 1, T, TS) QGEMV_S(NAME, E, 2, T, TS) QGEMV_S(NAME, E, 4, T, TS) QGEMV_S(NAME, E, 8, T, TS)
// The encoding and activation type that qgemv.cu's instantiation names (QV_E, ...), if it is one
// of the word-decoded encodings.
#if QV_E == ENC_Q4_0 || QV_E == ENC_Q4_1 || QV_E == ENC_Q8_0 || QV_E == ENC_Q4_K
QGEMV_S_T(QV_NAME, QV_E, QV_T, QV_TS)
#endif
