// indexing.cu: gather, gather_nd, scatter and scatter_nd (and repeat_interleave with a tensor
// of counts, which is a gather of rows). Data moves as element bits: kernels exist per element
// width (b8..b64, and b128 for rows whose bytes are a multiple of 16 with aligned bases).
//
//   resolve_<idx>        turns index vectors (k components each, any integer dtype) into row
//                        numbers: negative components count from the end of their dim, the
//                        vector's row is `(v / per_batch) * slices + lin` (batch_dims of
//                        gather_nd). A component out of range writes row 0 (so later kernels
//                        stay in bounds) and records its position with atomicMin in `err`, which
//                        the host reads back after the launches and turns into the CPU kernel's
//                        error (so the first bad index in row-major order is the one reported).
//   gather_rows_<w>_<i>  out[o, j, :] = in[o * src_rows + rows[j], :] with rows of `row`
//                        elements: one thread per output element, consecutive threads along a
//                        row (coalesced on both sides).
//   gather_idx_<w>_<idx>_<i>  gather_rows with the resolution of one index component inline
//                        (i32, i64, u32 or u64 indices: a plain gather's, one launch instead of
//                        two): the same rows, the same row 0 and error word for a bad index.
//   scatter_claim        later duplicates win, deterministically: every update first claims its
//   scatter_nd_claim     target with atomicMax(winner[target], u + 1) (order-independent), then
//                        only the update whose number is the winner writes. Skipped (winner is
//                        null) when no two updates can hit one target.
//   scatter_<w>          scatter's writes: update u at coordinate c of the updates' shape goes
//                        to the output coordinate c with c[axis] = rows[u].
//   scatter_rows_<w>_<i> scatter_nd's writes: row v of the updates to row rows[v] of the output.

#define MAX_RANK 8

struct alignas(16) b128 {
    u64 lo, hi;
};

// ---- resolve -----------------------------------------------------------------------------

struct ResolveGeo {
    i64 dims[MAX_RANK];  // the extent each component indexes
    i32 k;               // components per index vector
    i64 per_batch;       // index vectors per batch (>= 1)
    i64 slices;          // rows per batch in the source
};

// Index values as i64; unsigned values past i64::MAX saturate (they stay out of range instead
// of wrapping to a valid negative index), as the CPU kernel does.
template <typename I> __device__ __forceinline__ i64 index_value(I x) { return (i64)x; }
template <> __device__ __forceinline__ i64 index_value<u64>(u64 x) {
    return x > 0x7FFFFFFFFFFFFFFFull ? 0x7FFFFFFFFFFFFFFFll : (i64)x;
}

template <typename I>
__device__ __forceinline__ void resolve(const I* __restrict__ raw, i64* __restrict__ rows, u64 nvec,
                                        const ResolveGeo& g, unsigned long long* err) {
    for (u64 v = blockIdx.x * (u64)blockDim.x + threadIdx.x; v < nvec; v += (u64)gridDim.x * blockDim.x) {
        i64 lin = 0;
        bool ok = true;
#pragma unroll
        for (int t = 0; t < MAX_RANK; ++t) {
            if (t < g.k) {
                const u64 at = v * (u64)g.k + (u64)t;
                const i64 d = g.dims[t];
                const i64 x = index_value<I>(raw[at]);
                if (x < -d || x >= d) {
                    if (ok) atomicMin(err, (unsigned long long)at);
                    ok = false;
                } else {
                    lin = lin * d + (x < 0 ? x + d : x);
                }
            }
        }
        rows[v] = ok ? (i64)(v / (u64)g.per_batch) * g.slices + lin : 0;
    }
}

#define RESOLVE(N, I)                                                                           \
    extern "C" __global__ void resolve_##N(const I* __restrict__ raw, i64* __restrict__ rows,   \
                                           u64 nvec, ResolveGeo g, unsigned long long* err) {   \
        resolve<I>(raw, rows, nvec, g, err);                                                    \
    }

RESOLVE(i8, i8)
RESOLVE(i16, i16)
RESOLVE(i32, i32)
RESOLVE(i64, i64)
RESOLVE(u8, u8)
RESOLVE(u16, u16)
RESOLVE(u32, u32)
RESOLVE(u64, u64)

// ---- gather_rows -------------------------------------------------------------------------

template <typename T, typename I>
__device__ __forceinline__ void gather_rows(const T* __restrict__ src, T* __restrict__ dst,
                                            const i64* __restrict__ rows, u64 total, u64 n,
                                            u64 src_rows, u64 row) {
    const I all = (I)total, count = (I)n, len = (I)row;
    for (I i = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; i < all; i += (I)gridDim.x * (I)blockDim.x) {
        const I t = i / len;
        const I r = i - t * len;
        const I o = t / count;
        const I j = t - o * count;
        dst[i] = src[((i64)o * (i64)src_rows + rows[j]) * (i64)row + (i64)r];
    }
}

#define GATHER_ROWS(W, T)                                                                       \
    extern "C" __global__ void gather_rows_##W##_i32(const T* __restrict__ src, T* __restrict__ dst, \
                                                     const i64* __restrict__ rows, u64 total,   \
                                                     u64 n, u64 src_rows, u64 row) {            \
        gather_rows<T, u32>(src, dst, rows, total, n, src_rows, row);                           \
    }                                                                                           \
    extern "C" __global__ void gather_rows_##W##_i64(const T* __restrict__ src, T* __restrict__ dst, \
                                                     const i64* __restrict__ rows, u64 total,   \
                                                     u64 n, u64 src_rows, u64 row) {            \
        gather_rows<T, u64>(src, dst, rows, total, n, src_rows, row);                           \
    }

GATHER_ROWS(b8, u8)
GATHER_ROWS(b16, u16)
GATHER_ROWS(b32, u32)
GATHER_ROWS(b64, u64)
GATHER_ROWS(b128, b128)

// ---- gather_idx --------------------------------------------------------------------------

// out[o, j, :] = in[o * src_rows + row(raw[j]), :]: row() as resolve's for one component of
// extent src_rows (negative from the end; out of range: row 0, and index j recorded in err by
// the thread of its first element).
template <typename T, typename I, typename C>
__device__ __forceinline__ void gather_idx(const T* __restrict__ src, T* __restrict__ dst, const I* __restrict__ raw,
                                           u64 total, u64 n, u64 src_rows, u64 row, unsigned long long* err) {
    const C all = (C)total, count = (C)n, len = (C)row;
    const i64 d = (i64)src_rows;
    for (C i = (C)blockIdx.x * (C)blockDim.x + (C)threadIdx.x; i < all; i += (C)gridDim.x * (C)blockDim.x) {
        const C t = i / len;
        const C r = i - t * len;
        const C o = t / count;
        const C j = t - o * count;
        const i64 x = index_value<I>(raw[j]);
        const bool bad = x < -d || x >= d;
        if (bad && r == 0 && o == 0) atomicMin(err, (unsigned long long)j);
        const i64 at = bad ? 0 : (x < 0 ? x + d : x);
        dst[i] = src[((i64)o * d + at) * (i64)row + (i64)r];
    }
}

#define GATHER_IDX(W, T, N, I)                                                                  \
    extern "C" __global__ void gather_idx_##W##_##N##_i32(const T* __restrict__ src, T* __restrict__ dst, \
                                                          const I* __restrict__ raw, u64 total, u64 n,   \
                                                          u64 src_rows, u64 row, unsigned long long* err) { \
        gather_idx<T, I, u32>(src, dst, raw, total, n, src_rows, row, err);                     \
    }                                                                                           \
    extern "C" __global__ void gather_idx_##W##_##N##_i64(const T* __restrict__ src, T* __restrict__ dst, \
                                                          const I* __restrict__ raw, u64 total, u64 n,   \
                                                          u64 src_rows, u64 row, unsigned long long* err) { \
        gather_idx<T, I, u64>(src, dst, raw, total, n, src_rows, row, err);                     \
    }
#define GATHER_IDX_ALL(W, T) GATHER_IDX(W, T, i32, i32) GATHER_IDX(W, T, i64, i64) GATHER_IDX(W, T, u32, u32) \
    GATHER_IDX(W, T, u64, u64)

GATHER_IDX_ALL(b8, u8)
GATHER_IDX_ALL(b16, u16)
GATHER_IDX_ALL(b32, u32)
GATHER_IDX_ALL(b64, u64)
GATHER_IDX_ALL(b128, b128)

// ---- scatter -----------------------------------------------------------------------------

struct ScatterGeo {
    i64 ushape[MAX_RANK];  // the updates' (and indices') shape
    i64 ostride[MAX_RANK];  // the output's row-major strides
    i32 rank;
    i32 axis;
    i64 size;  // the output's extent along the axis
};

// The output offset of update u (its coordinate with the axis entry replaced by t), and its
// key in the winner array: (the coordinate off the axis, row-major in the updates' shape
// without the axis) * size + t.
__device__ __forceinline__ void scatter_target(u64 u, i64 t, const ScatterGeo& g, i64& key, i64& off) {
    u64 rest = u;
    i64 kmul = 1;
    key = 0;
    off = 0;
#pragma unroll
    for (int d = MAX_RANK - 1; d >= 0; --d) {
        if (d < g.rank) {
            const u64 extent = (u64)g.ushape[d];
            const i64 c = (i64)(rest % extent);
            rest /= extent;
            if (d == g.axis) {
                off += t * g.ostride[d];
            } else {
                off += c * g.ostride[d];
                key += c * kmul;
                kmul *= g.ushape[d];
            }
        }
    }
    key = key * g.size + t;
}

extern "C" __global__ void scatter_claim(const i64* __restrict__ rows, u32* __restrict__ winner, u64 n,
                                         ScatterGeo g) {
    for (u64 u = blockIdx.x * (u64)blockDim.x + threadIdx.x; u < n; u += (u64)gridDim.x * blockDim.x) {
        i64 key, off;
        scatter_target(u, rows[u], g, key, off);
        atomicMax(&winner[key], (u32)(u + 1));
    }
}

#define SCATTER(W, T)                                                                           \
    extern "C" __global__ void scatter_##W(const T* __restrict__ updates, T* __restrict__ out,  \
                                           const i64* __restrict__ rows,                        \
                                           const u32* __restrict__ winner, u64 n, ScatterGeo g) { \
        for (u64 u = blockIdx.x * (u64)blockDim.x + threadIdx.x; u < n;                         \
             u += (u64)gridDim.x * blockDim.x) {                                                \
            i64 key, off;                                                                       \
            scatter_target(u, rows[u], g, key, off);                                            \
            if (winner == nullptr || winner[key] == (u32)(u + 1)) out[off] = updates[u];        \
        }                                                                                       \
    }

SCATTER(b8, u8)
SCATTER(b16, u16)
SCATTER(b32, u32)
SCATTER(b64, u64)

// ---- scatter_nd --------------------------------------------------------------------------

extern "C" __global__ void scatter_nd_claim(const i64* __restrict__ rows, u32* __restrict__ winner, u64 nvec) {
    for (u64 v = blockIdx.x * (u64)blockDim.x + threadIdx.x; v < nvec; v += (u64)gridDim.x * blockDim.x)
        atomicMax(&winner[rows[v]], (u32)(v + 1));
}

template <typename T, typename I>
__device__ __forceinline__ void scatter_rows(const T* __restrict__ updates, T* __restrict__ out,
                                             const i64* __restrict__ rows, const u32* __restrict__ winner,
                                             u64 total, u64 row) {
    const I all = (I)total, len = (I)row;
    for (I i = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; i < all; i += (I)gridDim.x * (I)blockDim.x) {
        const I v = i / len;
        const I e = i - v * len;
        const i64 to = rows[v];
        if (winner == nullptr || winner[to] == (u32)(v + 1)) out[to * (i64)row + (i64)e] = updates[i];
    }
}

#define SCATTER_ROWS(W, T)                                                                      \
    extern "C" __global__ void scatter_rows_##W##_i32(const T* __restrict__ updates,            \
                                                      T* __restrict__ out,                      \
                                                      const i64* __restrict__ rows,             \
                                                      const u32* __restrict__ winner, u64 total, \
                                                      u64 row) {                                \
        scatter_rows<T, u32>(updates, out, rows, winner, total, row);                           \
    }                                                                                           \
    extern "C" __global__ void scatter_rows_##W##_i64(const T* __restrict__ updates,            \
                                                      T* __restrict__ out,                      \
                                                      const i64* __restrict__ rows,             \
                                                      const u32* __restrict__ winner, u64 total, \
                                                      u64 row) {                                \
        scatter_rows<T, u64>(updates, out, rows, winner, total, row);                           \
    }

SCATTER_ROWS(b8, u8)
SCATTER_ROWS(b16, u16)
SCATTER_ROWS(b32, u32)
SCATTER_ROWS(b64, u64)
SCATTER_ROWS(b128, b128)
