#line 1 "sampling_reduce.cuh"
// sampling_reduce.cuh: the reductions of sample_tokens (sampling.cu) over the values of a row:
// the best (value, index) and exact integer sums, over a warp, a block and the cluster of CTAs
// that share the row.

// ---- block-wide reductions (every thread of the block calls them; all get the result) ------

struct Best {
    float v;
    u32 i;
};

// Larger value first, then lower index.
__device__ __forceinline__ bool better(float v, u32 i, const Best& b) { return v > b.v || (v == b.v && i < b.i); }

__device__ __forceinline__ Best warp_best(Best b) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float v = __shfl_xor_sync(FULL_MASK, b.v, o);
        const u32 i = __shfl_xor_sync(FULL_MASK, b.i, o);
        if (better(v, i, b)) b = Best{v, i};
    }
    return b;
}

// sh: WARPS + 1 slots; the last holds the result, so back-to-back calls need no third barrier.
__device__ Best block_best(Best b, Best* sh) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    b = warp_best(b);
    if (lane == 0) sh[warp] = b;
    __syncthreads();
    if (warp == 0) {
        b = lane < WARPS ? sh[lane] : Best{NEG_INF, NONE};
        b = warp_best(b);
        if (lane == 0) sh[WARPS] = b;
    }
    __syncthreads();
    return sh[WARPS];
}

__device__ u64 block_sum(u64 v, u64* sh) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < WARPS ? sh[lane] : 0;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
        if (lane == 0) sh[WARPS] = v;
    }
    __syncthreads();
    return sh[WARPS];
}

// ---- one row per cluster ---------------------------------------------------------------------
// A row is shared by the C CTAs of a cluster (launch/sampling.rs picks C: up to 8, so a row's
// passes run on C SMs), CTA `rank` taking the slice [rank * slice, (rank + 1) * slice). Block
// results become the cluster's through exchanges: every CTA puts its value in slot s of xb[par]
// in its own shared memory, the cluster meets at one barrier, and every CTA reads all C values
// (DSMEM) and joins them the same way (exact integer sums; `better` is a total order), so all
// CTAs take every decision alike. Two buffers, flipped at every exchange: a CTA writes buffer p
// again only after the next exchange's barrier, which every CTA reaches after its reads of p.
// Before sm_90 (no clusters) C is 1 and an exchange is a block barrier.
#define XSLOTS 16
#define MAX_CLUSTER 8  // launch/sampling.rs: MAX_CLUSTER (cluster_add reads 8 CTAs)

struct Xchg {
    u64 (*xb)[XSLOTS];  // [2][XSLOTS], shared
    u32 par;            // the buffer of the next exchange (every thread keeps it)
};

// The cluster's sums of n <= XSLOTS values, `mine` in thread j < n for slot j: every thread
// takes part (the barrier); tot[0..n) (shared) holds them afterwards. Lane l of warp 0 reads
// slot l % 16 of CTAs l / 16, + 2, + 4, + 6 (the loads in flight together), a shuffle joins
// the two halves of the warp.
__device__ void cluster_add(u64 mine, int n, u64* tot, Xchg& x) {
    if ((int)threadIdx.x < n) x.xb[x.par][threadIdx.x] = mine;
    cluster_sync_aligned();
    if (threadIdx.x < 32) {
        const u32 j = threadIdx.x % 16, c = threadIdx.x / 16, size = cluster_size();
        u64 s = 0;
        if ((int)j < n) {
            u64 v[MAX_CLUSTER / 2];
#pragma unroll
            for (int i = 0; i < MAX_CLUSTER / 2; ++i) v[i] = c + 2 * i < size ? cluster_ld_u64(&x.xb[x.par][j], c + 2 * i) : 0;
#pragma unroll
            for (int i = 0; i < MAX_CLUSTER / 2; ++i) s += v[i];
        }
        s += __shfl_xor_sync(FULL_MASK, s, 16);
        if ((int)threadIdx.x < n) tot[threadIdx.x] = s;
    }
    x.par ^= 1u;
    __syncthreads();
}

// The cluster's best of every CTA's `b` (the same in each thread of a CTA).
__device__ Best cluster_best(Best b, Best* sh, Xchg& x) {
    if (threadIdx.x == 0) x.xb[x.par][0] = ((u64)__float_as_uint(b.v) << 32) | b.i;
    cluster_sync_aligned();
    if (threadIdx.x < 32) {
        Best o{NEG_INF, NONE};
        if (threadIdx.x < cluster_size()) {
            const u64 v = cluster_ld_u64(&x.xb[x.par][0], threadIdx.x);
            o = Best{__uint_as_float((u32)(v >> 32)), (u32)v};
        }
        o = warp_best(o);
        if (threadIdx.x == 0) sh[WARPS] = o;
    }
    x.par ^= 1u;
    __syncthreads();
    return sh[WARPS];
}

// The warp's sums of eight u64 per lane (v is overwritten), in 9 exchanges instead of 40: each
// step halves what a lane holds, keeping one half and sending the other to its partner. Lane l
// ends with the sum of value (l >> 2) & 7: bits 4, 3 and 2 of l pick the half kept at each step.
__device__ __forceinline__ u64 warp_sum8(u64 (&v)[8]) {
    const u32 lane = threadIdx.x % 32;
    const bool a = lane & 16, b = lane & 8, c = lane & 4;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const u64 got = __shfl_xor_sync(FULL_MASK, a ? v[i] : v[i + 4], 16);
        v[i] = (a ? v[i + 4] : v[i]) + got;
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const u64 got = __shfl_xor_sync(FULL_MASK, b ? v[i] : v[i + 2], 8);
        v[i] = (b ? v[i + 2] : v[i]) + got;
    }
    u64 z = (c ? v[1] : v[0]) + __shfl_xor_sync(FULL_MASK, c ? v[0] : v[1], 4);
    z += __shfl_xor_sync(FULL_MASK, z, 2);
    z += __shfl_xor_sync(FULL_MASK, z, 1);
    return z;
}

// The same for sixteen u32 per lane, in 16 exchanges: lane l ends with value (l >> 1) & 15.
template <int H> __device__ __forceinline__ void halve16(u32 (&v)[16], u32 lane) {
    const bool up = lane & (2 * H);
#pragma unroll
    for (int i = 0; i < H; ++i) {
        const u32 got = __shfl_xor_sync(FULL_MASK, up ? v[i] : v[i + H], 2 * H);
        v[i] = (up ? v[i + H] : v[i]) + got;
    }
}
__device__ __forceinline__ u32 warp_sum16(u32 (&v)[16]) {
    const u32 lane = threadIdx.x % 32;
    halve16<8>(v, lane);
    halve16<4>(v, lane);
    halve16<2>(v, lane);
    halve16<1>(v, lane);
    return v[0] + __shfl_xor_sync(FULL_MASK, v[0], 1);
}
