#line 1 "allreduce_p2p.cu"
// allreduce_p2p.cu: allreduce.sum of a small tensor (a decode step's activations) over the GPUs
// of one process, through their signal buffers, which every rank can write over peer access
// (launch/allreduce_p2p.rs; it takes the op instead of NCCL under `collective.p2p`).
//
// allreduce_p2p_<T>: one launch per rank, each on its own device's stream. The tensor is cut
// into chunks of AR_CHUNK bytes, one block each. Block b of every rank:
//   1. reads its chunk of the input and its epoch, one more than the last this block of this
//      rank finished (a counter in the rank's own signal buffer; the ranks run the same sequence
//      of collectives, so their epochs agree), which picks the receive slot set of its parity;
//   2. pushes its chunk of the input into slot [parity][rank] of every other rank's receive
//      area. Calls of at most AR_LL_BLOCKS blocks (`ll`) send 16-byte lines of two 8-byte
//      halves, each 4 bytes of data beside the epoch as a flag (st.volatile over NVLink: an
//      8-byte half lands whole, so its data is there when its flag is): no fence and no
//      separate flag, which cost a system-scope fence and a second NVLink crossing (two H200s:
//      8 KiB in 3.5 us against 5.1). Larger calls, where the lines' doubled bytes cost more
//      than that, push plain data, then (after a system-scope fence) set flag [b][rank] of
//      every other rank to the epoch (a release store);
//   3. waits for each other rank's share: until both flags of each of its lines hold the
//      epoch, or until its own flag [b][r] of every other rank r has reached the epoch
//      (acquire loads); after `timeout_ns` of waiting it traps: a peer that never comes fails
//      the launch instead of hanging it;
//   4. sums the chunk in rank order (its own share from its registers), in f32, rounds once to
//      T and stores the result: every rank gets the very same bits.
// Two slot sets by epoch parity are enough: a rank pushes epoch e + 2 into the set of epoch e
// only after its wait of epoch e + 1, which needs every peer's lines of e + 1, which a peer
// pushes only after its launch of epoch e has finished reading. A line's flags are compared
// for equality: the lines of e - 2 (or zero, never an epoch) cannot pass for those of e; lines
// and plain data have receive areas of their own, so data never passes for a flag. The receive
// areas are read around the SMs' L1 (ld.volatile, ld.global.cg): peers write them behind it.
// allreduce_p2p_norm_<T> is the same exchange followed by the RMSNorm of the sum (a decoder
// layer's norm after the attention's or the MLP's allreduce): every block holds whole rows of
// k elements (AR_CHUNK a multiple of a row, a row whole warps of vectors), so after step 4 it
// sums the squares of its rows' rounded sums (per warp, then the row's warps in order through
// shared memory: the same bits every run), and writes the normalised rows too, with the
// rms_norm kernels' arithmetic (norm.cu: rms_norm_cached).
// The launch may overlap the previous kernel (programmatic dependent launch): every thread
// waits for it before reading the input. Its dependents launch as it exits, not earlier: a
// decode step's next GEMV started at the end of the exchange (its first weight loads in
// flight during the norm) measured 0.8% slower on two H200s (8B-shaped, TP=2), and a grid
// that never triggers them cannot have a block kept from its SM by their waiting blocks.

#define AR_MAX_RANKS 8
#define AR_THREADS 256
#define AR_CHUNK (AR_THREADS * 16 * 2)    // bytes per block: two 16-byte vectors per thread
#define AR_MAX_BLOCKS 128                  // so at most AR_MAX_BLOCKS * AR_CHUNK = 1 MiB a call
#define AR_LL_BLOCKS 32                    // lines for calls of at most 32 blocks (256 KiB)
// Signal buffer layout (bytes): the blocks' epoch counters, the flags [block][rank] of plain
// calls, then the receive areas: plain data [2 parities][ranks][AR_SLOT], then lines
// [2 parities][ranks][AR_LL_SLOT].
#define AR_COUNTERS 0
#define AR_FLAGS 4096
#define AR_RECV 65536
#define AR_SLOT (AR_MAX_BLOCKS * AR_CHUNK)
#define AR_LL_SLOT (2 * AR_LL_BLOCKS * AR_CHUNK)

struct ArArgs {
    u64 in, out;                // this rank's input and output: count elements of T
    u64 sig[AR_MAX_RANKS];      // every rank's signal buffer (peer addresses), this rank's at [rank]
    i64 count;                  // elements; count * sizeof(T) a multiple of 16
    i32 rank, ranks;
    u64 timeout_ns;             // how long step 3 may wait
    i32 ll, pad;                // lines (at most AR_LL_BLOCKS blocks), or plain data and flags
    u64 residual;               // 0, or count elements of T added to the rounded sum (each rank its own)
};

// The RMSNorm of allreduce_p2p_norm: this rank's weight and result, the row length and the
// rms_norm op's parameters.
struct ArNormArgs {
    ArArgs ar;
    u64 gamma, normed;  // [k] and [count] elements of T on this rank's device
    i64 k;              // elements per row: k / (16 / sizeof(T)) a multiple of 32 dividing AR_CHUNK / 16
    float eps, offset;  // added to mean(x^2), and to every weight
    i32 mbc, pad;       // multiply by the weight before the cast to T
};

__device__ __forceinline__ u64 ar_now() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Whether more than `timeout_ns` have passed since t0 (signed: a clock stepping back is no wait).
__device__ __forceinline__ bool ar_waited_past(u64 t0, u64 timeout_ns) {
    return (i64)(ar_now() - t0) > (i64)timeout_ns;
}

__device__ __forceinline__ void ar_release(u32* p, u32 v) {
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ u32 ar_acquire(const u32* p) {
    u32 v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// One 16-byte line: data a and b, each beside the flag f.
__device__ __forceinline__ void ar_put(uint4* p, u32 a, u32 b, u32 f) {
    asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(a), "r"(f), "r"(b), "r"(f) : "memory");
}

// Waits for the line at p to carry flag f in both halves and returns its two data words.
__device__ __forceinline__ uint2 ar_take(const uint4* p, u32 f, u64 t0, u64 timeout_ns) {
    u32 a, fa, b, fb;
    while (true) {
        asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(a), "=r"(fa), "=r"(b), "=r"(fb)
                     : "l"(p)
                     : "memory");
        if (fa == f && fb == f) return make_uint2(a, b);
        if (ar_waited_past(t0, timeout_ns)) asm volatile("trap;");
    }
}

// acc (+)= the vector's values (`first`: acc = them, so that -0 + -0 stays -0).
template <typename T> __device__ __forceinline__ void ar_add(float (&acc)[16 / sizeof(T)], uint4 q, bool first) {
    constexpr int V = 16 / sizeof(T);
    u32 w[4] = {q.x, q.y, q.z, q.w};
    float f[V];
    Unpack<T>::go(w, f);
#pragma unroll
    for (int i = 0; i < V; ++i) acc[i] = first ? f[i] : acc[i] + f[i];
}

// The sums rounded to T, packed as the 16 bytes of their vector.
__device__ __forceinline__ u32 ar_bits(float v) { return f32_bits(FromF32<float>::go(v)); }
__device__ __forceinline__ u32 ar_bits(bf16 v) { return v.bits; }
__device__ __forceinline__ u32 ar_bits(f16 v) { return v.bits; }
template <typename T> __device__ __forceinline__ uint4 ar_pack(const float (&acc)[16 / sizeof(T)]) {
    u32 w[4];
    if constexpr (sizeof(T) == 4) {
#pragma unroll
        for (int i = 0; i < 4; ++i) w[i] = ar_bits(acc[i]);
    } else {
#pragma unroll
        for (int i = 0; i < 4; ++i)
            w[i] = ar_bits(FromF32<T>::go(acc[2 * i])) | (ar_bits(FromF32<T>::go(acc[2 * i + 1])) << 16);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
}

// The rounded sum s4 plus the residual's vector r4, rounded again: the allreduce then the add,
// bit for bit.
template <typename T> __device__ __forceinline__ uint4 ar_plus(uint4 s4, uint4 r4) {
    constexpr int V = 16 / sizeof(T);
    u32 sw[4] = {s4.x, s4.y, s4.z, s4.w}, rw[4] = {r4.x, r4.y, r4.z, r4.w};
    float a[V], b[V];
    Unpack<T>::go(sw, a);
    Unpack<T>::go(rw, b);
#pragma unroll
    for (int e = 0; e < V; ++e) a[e] = b[e] + a[e];
    return ar_pack<T>(a);
}

// One vector of a normalised row: the sums `v` times `inv` (1 / rms) and the weights `gq` (plus
// `offset`), with the rms_norm kernels' arithmetic (`mbc`: multiply by the weight before the
// cast to T; else round the scaled sum and the weight to T first), packed.
template <typename T>
__device__ __forceinline__ uint4 ar_scaled(const float (&v)[16 / sizeof(T)], uint4 gq, float inv, float offset, int mbc) {
    constexpr int V = 16 / sizeof(T);
    u32 gw[4] = {gq.x, gq.y, gq.z, gq.w};
    float g[V], y[V];
    Unpack<T>::go(gw, g);
#pragma unroll
    for (int e = 0; e < V; ++e) {
        const float ge = g[e] + offset;
        y[e] = mbc ? v[e] * inv * ge : to_f32(FromF32<T>::go(to_f32(FromF32<T>::go(v[e] * inv)) * to_f32(FromF32<T>::go(ge))));
    }
    return ar_pack<T>(y);
}

// Rows of the block's vectors normalised (allreduce_p2p_norm): `sum[j]` holds this thread's
// j-th vector (index v0 + tid + j * AR_THREADS) of the rounded sums, `have[j]` whether it exists.
template <typename T, int PER>
__device__ __forceinline__ void ar_norm(const ArNormArgs& n, i64 v0, const float (&sum)[PER][16 / sizeof(T)],
                                        const bool (&have)[PER], const uint4 (&gq)[PER]) {
    constexpr int V = 16 / sizeof(T), WARPS = AR_THREADS / 32;
    __shared__ float wsum[PER * WARPS];
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const i64 vpr = n.k / V;  // vectors per row, a multiple of 32: a warp's vectors share a row
#pragma unroll
    for (int j = 0; j < PER; ++j) {
        float s = 0.f;
        if (have[j]) {
#pragma unroll
            for (int e = 0; e < V; ++e) s += sum[j][e] * sum[j][e];
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0) wsum[j * WARPS + warp] = s;
    }
    __syncthreads();
    uint4* normed = reinterpret_cast<uint4*>(n.normed);
    const i64 wpr = vpr / 32;
#pragma unroll
    for (int j = 0; j < PER; ++j) {
        if (!have[j]) continue;
        const i64 rel = tid + (i64)j * AR_THREADS, first = rel / vpr * wpr;
        float ss = 0.f;
        for (i64 w = 0; w < wpr; ++w) ss += wsum[first + w];
        const float inv = 1.0f / sqrtf(ss / (float)n.k + n.eps);
        normed[v0 + rel] = ar_scaled<T>(sum[j], gq[j], inv, n.offset, n.mbc);
    }
}

template <typename T, bool NORM> __device__ __forceinline__ void allreduce_p2p(const ArArgs& p, const ArNormArgs* n) {
    constexpr int V = 16 / sizeof(T);
    constexpr int PER = AR_CHUNK / 16 / AR_THREADS;  // vectors per thread
    const int b = blockIdx.x, tid = threadIdx.x;
    u8* mine = reinterpret_cast<u8*>(p.sig[p.rank]);
    __shared__ u32 s_epoch;
    const i64 nvec = p.count / V, v0 = (i64)b * (AR_CHUNK / 16);
    const i64 v1 = min(nvec, v0 + AR_CHUNK / 16);
    bool have[PER];
    uint4 x[PER], gq[PER], xr[PER];
    pdl_wait();
    // 1. the input, the epoch and the norm's weights read together (the weights' latency then
    // hides behind the exchange's)
    const uint4* in = reinterpret_cast<const uint4*>(p.in);
#pragma unroll
    for (int j = 0; j < PER; ++j) {
        have[j] = v0 + tid + (i64)j * AR_THREADS < v1;
        x[j] = have[j] ? in[v0 + tid + (i64)j * AR_THREADS] : make_uint4(0u, 0u, 0u, 0u);
        xr[j] = have[j] && p.residual ? reinterpret_cast<const uint4*>(p.residual)[v0 + tid + (i64)j * AR_THREADS]
                                      : make_uint4(0u, 0u, 0u, 0u);
        gq[j] = make_uint4(0u, 0u, 0u, 0u);
        if constexpr (NORM) {
            if (have[j]) gq[j] = __ldg(reinterpret_cast<const uint4*>(n->gamma) + (tid + j * AR_THREADS) % (n->k / V));
        }
    }
    if (tid == 0) {
        // Epoch 0 is skipped when the counter wraps (2^32 - 1 -> 2, still alternating parity):
        // a line never written holds flag 0.
        const u32 e = *reinterpret_cast<volatile u32*>(mine + AR_COUNTERS + 4 * b) + 1;
        s_epoch = e == 0 ? 2u : e;
    }
    __syncthreads();
    const u32 epoch = s_epoch;
    const i64 parity = epoch & 1;
    // 2. and 3.: lines, or plain data then a flag (see the top of the file)
    const u64 t0 = ar_now();
    const i64 ll_base = AR_RECV + 2 * p.ranks * AR_SLOT;
#pragma unroll
    for (int j = 0; j < PER; ++j) {
        const i64 v = v0 + tid + (i64)j * AR_THREADS;
        if (!have[j]) continue;
        for (int r = 0; r < p.ranks; ++r) {
            if (r == p.rank) continue;
            u8* peer = reinterpret_cast<u8*>(p.sig[r]);
            if (p.ll) {
                uint4* line = reinterpret_cast<uint4*>(peer + ll_base + (parity * p.ranks + p.rank) * AR_LL_SLOT) + 2 * v;
                ar_put(line, x[j].x, x[j].y, epoch);
                ar_put(line + 1, x[j].z, x[j].w, epoch);
            } else {
                reinterpret_cast<uint4*>(peer + AR_RECV + (parity * p.ranks + p.rank) * AR_SLOT)[v] = x[j];
            }
        }
    }
    if (!p.ll) {
        __syncthreads();
        if (tid < p.ranks && tid != p.rank) {
            __threadfence_system();
            ar_release(reinterpret_cast<u32*>(reinterpret_cast<u8*>(p.sig[tid]) + AR_FLAGS) + b * AR_MAX_RANKS + p.rank, epoch);
            const u32* flag = reinterpret_cast<const u32*>(mine + AR_FLAGS) + b * AR_MAX_RANKS + tid;
            while ((int)(ar_acquire(flag) - epoch) < 0) {
                if (ar_waited_past(t0, p.timeout_ns)) asm volatile("trap;");
            }
        }
        __syncthreads();
    }
    // 4. the sum in rank order (this rank's share from its registers)
    float sum[PER][V];
#pragma unroll
    for (int j = 0; j < PER; ++j) {
        if (!have[j]) continue;
        const i64 v = v0 + tid + (i64)j * AR_THREADS;
        float acc[V];
        for (int r = 0; r < p.ranks; ++r) {
            uint4 q = x[j];
            if (r != p.rank && p.ll) {
                const uint4* line = reinterpret_cast<const uint4*>(mine + ll_base + (parity * p.ranks + r) * AR_LL_SLOT) + 2 * v;
                const uint2 lo = ar_take(line, epoch, t0, p.timeout_ns), hi = ar_take(line + 1, epoch, t0, p.timeout_ns);
                q = make_uint4(lo.x, lo.y, hi.x, hi.y);
            } else if (r != p.rank) {
                q = __ldcg(reinterpret_cast<const uint4*>(mine + AR_RECV + (parity * p.ranks + r) * AR_SLOT) + v);
            }
            ar_add<T>(acc, q, r == 0);
        }
        const uint4 s4 = p.residual ? ar_plus<T>(ar_pack<T>(acc), xr[j]) : ar_pack<T>(acc);
        reinterpret_cast<uint4*>(p.out)[v] = s4;
        if constexpr (NORM) {
            u32 w[4] = {s4.x, s4.y, s4.z, s4.w};
            Unpack<T>::go(w, sum[j]);  // the norm reads the sum as stored
        }
    }
    __syncthreads();
    if (tid == 0) *reinterpret_cast<volatile u32*>(mine + AR_COUNTERS + 4 * b) = epoch;
    if constexpr (NORM) ar_norm<T, PER>(*n, v0, sum, have, gq);
}

#define AR_ENTRY(T, NAME)                                                                               \
    extern "C" __global__ void __launch_bounds__(AR_THREADS) allreduce_p2p_##NAME(const __grid_constant__ ArArgs p) { \
        allreduce_p2p<T, false>(p, nullptr);                                                                \
    }                                                                                                       \
    extern "C" __global__ void __launch_bounds__(AR_THREADS)                                                \
        allreduce_p2p_norm_##NAME(const __grid_constant__ ArNormArgs n) {                                   \
        allreduce_p2p<T, true>(n.ar, &n);                                                                   \
    }
AR_ENTRY(bf16, bf16)
AR_ENTRY(f16, f16)
AR_ENTRY(float, f32)

// ---- allreduce_p2p_read_<T>: tensors past AR_MAX_BLOCKS * AR_CHUNK (a prefill's activations) --
// Every rank reads every other rank's input where it lies (peer loads over NVLink) and sums in
// rank order (then adds its own residual where the call has one, as the push kernels do), so
// each byte crosses once and nothing is staged: on two GPUs the same bytes as a
// reduce-scatter and an allgather, in one pass. Two barriers through the signal buffers' flags
// bracket the reads, both as release/acquire pairs at system scope with a counter of calls as
// the epoch (the rank's own, in its signal buffer, moved on by the call's last block):
//   ready: every block, after its wait for the previous kernel, tells every other rank that
//     this rank's input is complete (a system fence, then a release store of the epoch into
//     ready[rank] of the peer's buffer; every block stores the same value, so no block depends
//     on another being scheduled), then waits until ready[r] of its own buffer holds the epoch
//     for every other rank r;
//   done: the last block to finish (a counter in the rank's buffer) tells every other rank that
//     this rank has read its input, then waits for every other rank's word: until then a rank's
//     launch has not completed and the kernels after it, which may overwrite its input, wait.
// Blocks take rows (allreduce_p2p_read_norm_<T>: the sum's RMSNorm too, with the rms_norm
// kernels' arithmetic, a row of up to AR_READ_THREADS * AR_READ_PER vectors held in
// registers) or AR_READ_THREADS * AR_READ_PER vectors at a time, each rank's loads of them in
// flight together.
#define AR_READ_THREADS 512
#define AR_READ_PER 2
#define AR_READ_COUNTER 8192   // u32: the last epoch this rank finished
#define AR_READ_BLOCKS 8196    // u32: blocks of the current call that have finished
#define AR_READ_READY 8256     // u32 [AR_MAX_RANKS]: ready[r], written by rank r
#define AR_READ_DONE 8320      // u32 [AR_MAX_RANKS]: done[r], written by rank r

struct ArReadArgs {
    u64 in[AR_MAX_RANKS];   // every rank's input (peer addresses), this rank's at [rank]
    u64 sig[AR_MAX_RANKS];  // every rank's signal buffer
    u64 out;                // this rank's result: count elements of T
    u64 residual;           // 0, or this rank's count elements added to the rounded sum
    i64 count;              // elements; count * sizeof(T) a multiple of 16
    i32 rank, ranks;
    u64 timeout_ns;
    u64 gamma, normed;      // the norm's weight [k] and result [count] (norm kernels)
    i64 k;                  // elements per row (norm kernels): k / (16 / sizeof(T)) <= AR_READ_THREADS * AR_READ_PER
    float eps, offset;
    i32 mbc, pad;
};

// Waits until the word at p has reached epoch e (a signed difference: wraps stay ordered).
__device__ __forceinline__ void ar_wait_epoch(const u32* p, u32 e, u64 t0, u64 timeout_ns) {
    while ((int)(ar_acquire(p) - e) < 0) {
        if (ar_waited_past(t0, timeout_ns)) asm volatile("trap;");
    }
}

// The sums in rank order of the PER vectors v0 + j * AR_READ_THREADS below nvec (a peer's
// share read around the L1: another GPU's kernel wrote it), rounded to T (then plus the
// residual, rounded again), packed; each rank's loads issued together.
template <typename T>
__device__ __forceinline__ void ar_read_sums(const ArReadArgs& a, i64 v0, i64 nvec, uint4 (&h)[AR_READ_PER]) {
    constexpr int V = 16 / sizeof(T);
    float acc[AR_READ_PER][V];
    uint4 res[AR_READ_PER];
    for (int r = 0; r < a.ranks; ++r) {
        uint4 q[AR_READ_PER];
#pragma unroll
        for (int j = 0; j < AR_READ_PER; ++j) {
            const i64 v = v0 + (i64)j * AR_READ_THREADS;
            q[j] = v < nvec ? __ldcg(reinterpret_cast<const uint4*>(a.in[r]) + v) : make_uint4(0u, 0u, 0u, 0u);
            if (r == 0) {
                res[j] = v < nvec && a.residual ? reinterpret_cast<const uint4*>(a.residual)[v] : make_uint4(0u, 0u, 0u, 0u);
            }
        }
#pragma unroll
        for (int j = 0; j < AR_READ_PER; ++j) ar_add<T>(acc[j], q[j], r == 0);
    }
#pragma unroll
    for (int j = 0; j < AR_READ_PER; ++j) h[j] = a.residual ? ar_plus<T>(ar_pack<T>(acc[j]), res[j]) : ar_pack<T>(acc[j]);
}

template <typename T, bool NORM> __device__ __forceinline__ void allreduce_p2p_read(const ArReadArgs& a) {
    constexpr int V = 16 / sizeof(T), PER = AR_READ_PER, WARPS = AR_READ_THREADS / 32;
    const int tid = threadIdx.x;
    u8* mine = reinterpret_cast<u8*>(a.sig[a.rank]);
    __shared__ u32 s_epoch;
    pdl_wait();
    const u64 t0 = ar_now();
    if (tid == 0) {
        const u32 e = *reinterpret_cast<volatile u32*>(mine + AR_READ_COUNTER) + 1;
        s_epoch = e == 0 ? 1u : e;  // flags start at 0: never an epoch
    }
    __syncthreads();
    const u32 epoch = s_epoch;
    // ready
    if (tid < a.ranks && tid != a.rank) {
        __threadfence_system();
        ar_release(reinterpret_cast<u32*>(reinterpret_cast<u8*>(a.sig[tid]) + AR_READ_READY) + a.rank, epoch);
        ar_wait_epoch(reinterpret_cast<const u32*>(mine + AR_READ_READY) + tid, epoch, t0, a.timeout_ns);
    }
    __syncthreads();
    uint4* out = reinterpret_cast<uint4*>(a.out);
    const i64 nvec = a.count / V;
    if constexpr (NORM) {
        __shared__ float wsum[WARPS];
        const i64 vpr = a.k / V, rows = nvec / vpr;
        uint4* normed = reinterpret_cast<uint4*>(a.normed);
        uint4 gq[PER];
#pragma unroll
        for (int j = 0; j < PER; ++j) {
            const i64 c = tid + (i64)j * AR_READ_THREADS;
            gq[j] = c < vpr ? __ldg(reinterpret_cast<const uint4*>(a.gamma) + c) : make_uint4(0u, 0u, 0u, 0u);
        }
        for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {
            float sum[PER][V];
            uint4 h[PER];
            ar_read_sums<T>(a, row * vpr + tid, row * vpr + vpr, h);
            float s = 0.f;
#pragma unroll
            for (int j = 0; j < PER; ++j) {
                const i64 c = tid + (i64)j * AR_READ_THREADS;
                if (c >= vpr) continue;
                const uint4 s4 = h[j];
                out[row * vpr + c] = s4;
                u32 w[4] = {s4.x, s4.y, s4.z, s4.w};
                Unpack<T>::go(w, sum[j]);  // the norm reads the sum as stored
#pragma unroll
                for (int e = 0; e < V; ++e) s += sum[j][e] * sum[j][e];
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
            if (tid % 32 == 0) wsum[tid / 32] = s;
            __syncthreads();
            float ss = 0.f;
            for (int w = 0; w < WARPS; ++w) ss += wsum[w];  // in warp order: the same bits on every rank
            __syncthreads();
            const float inv = 1.0f / sqrtf(ss / (float)a.k + a.eps);
#pragma unroll
            for (int j = 0; j < PER; ++j) {
                const i64 c = tid + (i64)j * AR_READ_THREADS;
                if (c >= vpr) continue;
                normed[row * vpr + c] = ar_scaled<T>(sum[j], gq[j], inv, a.offset, a.mbc);
            }
        }
    } else {
        const i64 step = (i64)gridDim.x * AR_READ_THREADS * PER;
        for (i64 v0 = (i64)blockIdx.x * AR_READ_THREADS * PER + tid; v0 < nvec; v0 += step) {
            uint4 h[PER];
            ar_read_sums<T>(a, v0, nvec, h);
#pragma unroll
            for (int j = 0; j < PER; ++j) {
                const i64 v = v0 + (i64)j * AR_READ_THREADS;
                if (v < nvec) out[v] = h[j];
            }
        }
    }
    // done: the last block tells the others this rank has read their inputs, then waits for
    // theirs (its launch, and so the kernels after it, ends only then)
    __syncthreads();
    __shared__ bool s_last;
    if (tid == 0) {
        __threadfence();
        u32* blocks = reinterpret_cast<u32*>(mine + AR_READ_BLOCKS);
        s_last = atomicAdd(blocks, 1u) == gridDim.x - 1;
        if (s_last) *blocks = 0;
    }
    __syncthreads();
    if (!s_last) return;
    if (tid < a.ranks && tid != a.rank) {
        ar_release(reinterpret_cast<u32*>(reinterpret_cast<u8*>(a.sig[tid]) + AR_READ_DONE) + a.rank, epoch);
        ar_wait_epoch(reinterpret_cast<const u32*>(mine + AR_READ_DONE) + tid, epoch, t0, a.timeout_ns);
    }
    __syncthreads();
    if (tid == 0) *reinterpret_cast<volatile u32*>(mine + AR_READ_COUNTER) = epoch;
}

#define AR_READ_ENTRY(T, NAME)                                                                          \
    extern "C" __global__ void __launch_bounds__(AR_READ_THREADS, 2)                                     \
        allreduce_p2p_read_##NAME(const __grid_constant__ ArReadArgs a) {                              \
        allreduce_p2p_read<T, false>(a);                                                                \
    }                                                                                                   \
    extern "C" __global__ void __launch_bounds__(AR_READ_THREADS, 1)                                     \
        allreduce_p2p_read_norm_##NAME(const __grid_constant__ ArReadArgs a) {                         \
        allreduce_p2p_read<T, true>(a);                                                                 \
    }
AR_READ_ENTRY(bf16, bf16)
AR_READ_ENTRY(f16, f16)
AR_READ_ENTRY(float, f32)
