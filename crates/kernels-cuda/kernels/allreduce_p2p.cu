#line 1 "allreduce_p2p.cu"
// allreduce_p2p.cu: allreduce.sum of a small tensor (a decode step's activations) over the GPUs
// of one process, through their signal buffers, which every rank can write over peer access
// (launch/allreduce_p2p.rs; it takes the op instead of NCCL under `collective.p2p`).
//
// allreduce_p2p_<T>: one launch per rank, each on its own device's stream. The tensor is cut
// into chunks of AR_CHUNK bytes, one block each. Block b of every rank:
//   1. reads its epoch, one more than the last this block of this rank finished (a counter in
//      the rank's own signal buffer; the ranks run the same sequence of collectives, so their
//      epochs agree), and the receive slot set of its parity;
//   2. pushes its chunk of the input into slot [parity][rank] of every rank's receive area
//      (plain stores, over NVLink for the peers), then, after a system-scope fence, sets flag
//      [b][rank] of every rank to the epoch (a release store);
//   3. waits until its own flags [b][r] of every rank r have reached the epoch (acquire loads;
//      after `timeout_ns` of waiting it traps: a peer that never comes fails the launch instead
//      of hanging it);
//   4. sums the chunk's slots in rank order from its own receive area, in f32, rounds once to T
//      and stores the result: every rank gets the very same bits.
// Two slot sets by epoch parity are enough: a rank pushes epoch e + 2 into the set of epoch e
// only after its wait of epoch e + 1, which needs every peer's flag of e + 1, which a peer sets
// only after its launch of epoch e has finished reading. The receive area is read through L2
// only (ld.global.cg): peers write it behind the SMs' L1.
// allreduce_p2p_norm_<T> is the same exchange followed by the RMSNorm of the sum (a decoder
// layer's norm after the attention's or the MLP's allreduce): every block holds whole rows of
// k elements (AR_CHUNK a multiple of a row, a row whole warps of vectors), so after step 4 it
// sums the squares of its rows' rounded sums (per warp, then the row's warps in order through
// shared memory: the same bits every run), and writes the normalised rows too, with the
// rms_norm kernels' arithmetic (norm.cu: rms_norm_cached).
// The launch may overlap the previous kernel (programmatic dependent launch): every thread
// waits for it before reading the input. Its dependents may launch once every block has its
// data (after step 3): by then all of its blocks are resident, so blocks of the next kernel
// waiting on the GPU cannot keep one of this grid's blocks from its SM.

#define AR_MAX_RANKS 8
#define AR_THREADS 256
#define AR_CHUNK (AR_THREADS * 16 * 2)    // bytes per block: two 16-byte vectors per thread
#define AR_MAX_BLOCKS 128                  // so at most AR_MAX_BLOCKS * AR_CHUNK = 1 MiB a call
// Signal buffer layout (bytes): the blocks' epoch counters, the flags [block][rank], then the
// receive area [2 parities][ranks][AR_SLOT].
#define AR_COUNTERS 0
#define AR_FLAGS 4096
#define AR_RECV 65536
#define AR_SLOT (AR_MAX_BLOCKS * AR_CHUNK)

struct ArArgs {
    u64 in, out;                // this rank's input and output: count elements of T
    u64 sig[AR_MAX_RANKS];      // every rank's signal buffer (peer addresses), this rank's at [rank]
    i64 count;                  // elements; count * sizeof(T) a multiple of 16
    i32 rank, ranks;
    u64 timeout_ns;             // how long step 3 may wait
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

__device__ __forceinline__ void ar_release(u32* p, u32 v) {
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ u32 ar_acquire(const u32* p) {
    u32 v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
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

// Rows of the block's vectors normalised (allreduce_p2p_norm): `sum[j]` holds this thread's
// j-th vector (index v0 + tid + j * AR_THREADS) of the rounded sums, `have[j]` whether it exists.
template <typename T, int PER>
__device__ __forceinline__ void ar_norm(const ArNormArgs& n, i64 v0, const float (&sum)[PER][16 / sizeof(T)],
                                        const bool (&have)[PER]) {
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
    const uint4* gamma = reinterpret_cast<const uint4*>(n.gamma);
    uint4* normed = reinterpret_cast<uint4*>(n.normed);
    const i64 wpr = vpr / 32;
#pragma unroll
    for (int j = 0; j < PER; ++j) {
        if (!have[j]) continue;
        const i64 rel = tid + (i64)j * AR_THREADS, first = rel / vpr * wpr;
        float ss = 0.f;
        for (i64 w = 0; w < wpr; ++w) ss += wsum[first + w];
        const float inv = 1.0f / sqrtf(ss / (float)n.k + n.eps);
        const uint4 gq = __ldg(gamma + rel % vpr);
        u32 gw[4] = {gq.x, gq.y, gq.z, gq.w};
        float g[V], y[V];
        Unpack<T>::go(gw, g);
#pragma unroll
        for (int e = 0; e < V; ++e) {
            const float ge = g[e] + n.offset, v = sum[j][e];
            y[e] = n.mbc ? v * inv * ge : to_f32(FromF32<T>::go(to_f32(FromF32<T>::go(v * inv)) * to_f32(FromF32<T>::go(ge))));
        }
        normed[v0 + rel] = ar_pack<T>(y);
    }
}

template <typename T, bool NORM> __device__ __forceinline__ void allreduce_p2p(const ArArgs& p, const ArNormArgs* n) {
    constexpr int V = 16 / sizeof(T);
    const int b = blockIdx.x, tid = threadIdx.x;
    u8* mine = reinterpret_cast<u8*>(p.sig[p.rank]);
    __shared__ u32 s_epoch;
    pdl_wait();
    if (tid == 0) s_epoch = *reinterpret_cast<volatile u32*>(mine + AR_COUNTERS + 4 * b) + 1;
    __syncthreads();
    const u32 epoch = s_epoch;
    const i64 parity = epoch & 1;
    const i64 nvec = p.count / V, v0 = (i64)b * (AR_CHUNK / 16);
    const i64 v1 = min(nvec, v0 + AR_CHUNK / 16);
    // 2. push this rank's chunk into every rank's slot [parity][rank]
    const uint4* in = reinterpret_cast<const uint4*>(p.in);
    for (i64 v = v0 + tid; v < v1; v += AR_THREADS) {
        const uint4 x = in[v];
        for (int r = 0; r < p.ranks; ++r) {
            uint4* slot = reinterpret_cast<uint4*>(reinterpret_cast<u8*>(p.sig[r]) + AR_RECV + (parity * p.ranks + p.rank) * AR_SLOT);
            slot[v] = x;
        }
    }
    __syncthreads();
    if (tid < p.ranks) {
        __threadfence_system();
        ar_release(reinterpret_cast<u32*>(reinterpret_cast<u8*>(p.sig[tid]) + AR_FLAGS) + b * AR_MAX_RANKS + p.rank, epoch);
        // 3. wait for rank tid's chunk of this epoch
        const u32* flag = reinterpret_cast<const u32*>(mine + AR_FLAGS) + b * AR_MAX_RANKS + tid;
        const u64 t0 = ar_now();
        while ((int)(ar_acquire(flag) - epoch) < 0) {
            if (ar_now() - t0 > p.timeout_ns) asm volatile("trap;");
        }
    }
    __syncthreads();
    pdl_launch_dependents();
    // 4. the sum, in rank order, from this rank's receive area
    uint4* out = reinterpret_cast<uint4*>(p.out);
    constexpr int PER = AR_CHUNK / 16 / AR_THREADS;  // vectors per thread
    float sum[PER][V];
    bool have[PER];
#pragma unroll
    for (int j = 0; j < PER; ++j) {
        const i64 v = v0 + tid + (i64)j * AR_THREADS;
        have[j] = v < v1;
        if (!have[j]) continue;
        float acc[V];
        for (int r = 0; r < p.ranks; ++r) {
            const uint4* slot = reinterpret_cast<const uint4*>(mine + AR_RECV + (parity * p.ranks + r) * AR_SLOT);
            ar_add<T>(acc, __ldcg(slot + v), r == 0);
        }
        const uint4 q = ar_pack<T>(acc);
        out[v] = q;
        if constexpr (NORM) {
            u32 w[4] = {q.x, q.y, q.z, q.w};
            Unpack<T>::go(w, sum[j]);  // the norm reads the sum as stored
        }
    }
    if (tid == 0) *reinterpret_cast<volatile u32*>(mine + AR_COUNTERS + 4 * b) = epoch;
    if constexpr (NORM) ar_norm<T, PER>(*n, v0, sum, have);
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
