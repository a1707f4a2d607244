#line 1 "sort.cu"
// sort.cu: top_k (along any axis) and argsort (rank 1). The input is contiguous, seen as
// [outer, n, inner]; a line is the n elements of one (outer, inner) pair, `inner` apart.
//
// Order (crates/runtime/src/cpu/reduction/sort.rs): NaN above every number, -0.0 equal to 0.0,
// ties broken by the lower index; top_k takes the largest first, argsort sorts ascending or
// descending, stable in both directions. Every element becomes a 64-bit key whose unsigned
// order is that order (floats: NaN made positive, -0 made +0, then the usual sign flip;
// signed integers: the sign bit flipped), complemented for a descending order, and then
// (key, index) pairs are sorted ascending: they are all distinct, so the result is the CPU's
// exactly, whatever the sorting network does.
//
// sort_block_*: one block per line, a bitonic sort of (key, u32 index) pairs in shared memory
//   (P entries, a power of two <= CAP, padded with sentinels that sort last). A line of up to
//   CAP elements is sorted at once. A longer line (top_k with next_pow2(k) = K2 <= CAP / 2)
//   streams through: the block keeps the best K2 so far in slots [0, K2) and appends, in
//   rounds of blockDim elements, only the elements that beat the current k-th best to slots
//   [K2, CAP); when those may overflow, everything is sorted again and the k-th best updated.
//   The first k entries are written out (values when a values output is given).
// sort_chunks_* / sort_merge / sort_emit_*: any line length (argsort of long tensors, top_k
//   with large k on long lines). Chunks of CAP elements are sorted by blocks as above into a
//   scratch buffer; merge passes then join sorted runs pairwise (each element finds its place
//   in the other run by binary search: positions are unique since keys are distinct), and the
//   first k of each line are written.

#define CAP 4096
#define SENTINEL_KEY 0xffffffffffffffffull
#define SENTINEL_IDX 0xffffffffu

struct SortArgs {
    u64 x;        // const T*: [outer, n, inner]
    u64 values;   // T*: [outer, k, inner], or 0 (argsort)
    u64 indices;  // i64*: [outer, k, inner]
    u64 keys;     // sort_chunks/sort_emit: u64 [lines * n] scratch
    u64 idx;      // sort_chunks/sort_emit: u32 [lines * n] scratch
    i64 outer, n, inner, k;
    i32 desc;  // descending order (top_k, argsort with ascending=false)
    i32 p;     // sort_block: sorting network size (a power of two <= CAP)
    i32 k2;    // sort_block on long lines: slots kept for the best so far
};

__device__ __forceinline__ u64 key_of(float f) {
    u32 b = isnan(f) ? 0x7fc00000u : (f == 0.0f ? 0u : __float_as_uint(f));
    return (u64)((b & 0x80000000u) ? ~b : (b | 0x80000000u));
}
__device__ __forceinline__ u64 key_of(double f) {
    u64 b = isnan(f) ? 0x7ff8000000000000ull : (f == 0.0 ? 0ull : (u64)__double_as_longlong(f));
    return (b & 0x8000000000000000ull) ? ~b : (b | 0x8000000000000000ull);
}
__device__ __forceinline__ u64 key_of(i64 v) { return (u64)v ^ 0x8000000000000000ull; }
__device__ __forceinline__ u64 key_of(u64 v) { return v; }

template <typename T> __device__ __forceinline__ u64 sort_key(T x, bool desc) {
    u64 k = key_of(convert<typename Work<T>::W>(x));
    return desc ? ~k : k;
}

__device__ __forceinline__ bool less(u64 ka, u32 ia, u64 kb, u32 ib) { return ka < kb || (ka == kb && ia < ib); }

// Sorts keys[0, p) and idx[0, p) ascending by (key, index); p is a power of two. Every thread
// of the block calls it.
__device__ __forceinline__ void bitonic(u64* keys, u32* idx, int p) {
    for (int size = 2; size <= p; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int t = threadIdx.x; t < p / 2; t += blockDim.x) {
                const int lo = 2 * t - (t & (stride - 1)), hi = lo + stride;
                const bool up = (lo & size) == 0;
                const u64 ka = keys[lo], kb = keys[hi];
                const u32 ia = idx[lo], ib = idx[hi];
                if (less(kb, ib, ka, ia) == up) {
                    keys[lo] = kb;
                    keys[hi] = ka;
                    idx[lo] = ib;
                    idx[hi] = ia;
                }
            }
            __syncthreads();
        }
    }
}

template <typename T> __device__ __forceinline__ void sort_block(const SortArgs& a) {
    extern __shared__ __align__(16) unsigned char smem[];
    const int p = a.p;
    u64* keys = reinterpret_cast<u64*>(smem);  // [p], then idx [p], then the pending count
    u32* idx = reinterpret_cast<u32*>(smem + p * sizeof(u64));
    int* pending = reinterpret_cast<int*>(smem + p * (sizeof(u64) + sizeof(u32)));
    const bool desc = a.desc != 0;
    const i64 lines = a.outer * a.inner;
    for (i64 line = blockIdx.x; line < lines; line += gridDim.x) {  // uniform per block
        const i64 o = line / a.inner, i = line % a.inner;
        const T* x = (const T*)a.x + o * a.n * a.inner + i;
        if (a.n <= p) {
            for (int t = threadIdx.x; t < p; t += blockDim.x) {
                const bool real = t < a.n;
                keys[t] = real ? sort_key(x[t * a.inner], desc) : SENTINEL_KEY;
                idx[t] = real ? (u32)t : SENTINEL_IDX;
            }
            __syncthreads();
            bitonic(keys, idx, p);
        } else {
            const int k2 = a.k2, room = p - k2;
            for (int t = threadIdx.x; t < p; t += blockDim.x) {
                keys[t] = SENTINEL_KEY;
                idx[t] = SENTINEL_IDX;
            }
            if (threadIdx.x == 0) *pending = 0;
            u64 tk = SENTINEL_KEY;  // the current k-th best: only better elements can enter
            u32 ti = SENTINEL_IDX;
            __syncthreads();
            for (i64 base = 0; base < a.n; base += blockDim.x) {
                const int pend = *pending;
                __syncthreads();  // every thread has read the count before any adds to it
                if (pend > room - (int)blockDim.x) {  // (uniform)
                    bitonic(keys, idx, p);
                    for (int t = k2 + threadIdx.x; t < p; t += blockDim.x) {
                        keys[t] = SENTINEL_KEY;
                        idx[t] = SENTINEL_IDX;
                    }
                    tk = keys[a.k - 1];
                    ti = idx[a.k - 1];
                    __syncthreads();
                    if (threadIdx.x == 0) *pending = 0;
                    __syncthreads();
                }
                const i64 j = base + threadIdx.x;
                if (j < a.n) {
                    const u64 key = sort_key(x[j * a.inner], desc);
                    if (less(key, (u32)j, tk, ti)) {
                        const int slot = atomicAdd(pending, 1);
                        keys[k2 + slot] = key;
                        idx[k2 + slot] = (u32)j;
                    }
                }
                __syncthreads();
            }
            bitonic(keys, idx, p);
        }
        for (i64 t = threadIdx.x; t < a.k; t += blockDim.x) {
            const u32 j = idx[t];
            const i64 at = (o * a.k + t) * a.inner + i;
            ((i64*)a.indices)[at] = (i64)j;
            if (a.values) ((T*)a.values)[at] = x[(i64)j * a.inner];
        }
        __syncthreads();  // the shared arrays are reused by the next line
    }
}

// Sorts each chunk of CAP elements of every line into the scratch keys/idx ([lines, n]).
template <typename T> __device__ __forceinline__ void sort_chunks(const SortArgs& a) {
    extern __shared__ __align__(16) unsigned char smem[];
    u64* keys = reinterpret_cast<u64*>(smem);
    u32* idx = reinterpret_cast<u32*>(smem + CAP * sizeof(u64));
    const bool desc = a.desc != 0;
    const i64 chunks = (a.n + CAP - 1) / CAP, lines = a.outer * a.inner;
    for (i64 t = blockIdx.x; t < lines * chunks; t += gridDim.x) {  // uniform per block
        const i64 line = t / chunks, c0 = (t % chunks) * CAP;
        const i64 o = line / a.inner, i = line % a.inner;
        const T* x = (const T*)a.x + o * a.n * a.inner + i;
        const int len = (int)min64(CAP, a.n - c0);
        for (int e = threadIdx.x; e < CAP; e += blockDim.x) {
            const bool real = e < len;
            keys[e] = real ? sort_key(x[(c0 + e) * a.inner], desc) : SENTINEL_KEY;
            idx[e] = real ? (u32)(c0 + e) : SENTINEL_IDX;
        }
        __syncthreads();
        bitonic(keys, idx, CAP);
        u64* gk = (u64*)a.keys + line * a.n + c0;
        u32* gi = (u32*)a.idx + line * a.n + c0;
        for (int e = threadIdx.x; e < len; e += blockDim.x) {
            gk[e] = keys[e];
            gi[e] = idx[e];
        }
        __syncthreads();
    }
}

struct MergeArgs {
    u64 keys_in, idx_in, keys_out, idx_out;  // u64 / u32 [lines, n]
    i64 lines, n, width;                     // runs of `width` sorted elements
};

extern "C" __global__ void __launch_bounds__(256, 1) sort_merge(MergeArgs a) {
    const u64* ki = (const u64*)a.keys_in;
    const u32* ii = (const u32*)a.idx_in;
    u64* ko = (u64*)a.keys_out;
    u32* io = (u32*)a.idx_out;
    const i64 total_n = a.lines * a.n;
    for (i64 g = blockIdx.x * (i64)blockDim.x + threadIdx.x; g < total_n; g += (i64)gridDim.x * blockDim.x) {
        const i64 line = g / a.n, pos = g % a.n, base = line * a.n;
        const i64 run = pos / a.width, other = run ^ 1, start = other * a.width;
        const u64 key = ki[g];
        const u32 id = ii[g];
        i64 dst = pos;
        if (start < a.n) {
            // Elements of the other run that come before this one.
            i64 lo = 0, hi = min64(a.n, start + a.width) - start;
            while (lo < hi) {
                const i64 mid = (lo + hi) / 2;
                if (less(ki[base + start + mid], ii[base + start + mid], key, id))
                    lo = mid + 1;
                else
                    hi = mid;
            }
            dst = min64(run, other) * a.width + (pos - run * a.width) + lo;
        }
        ko[base + dst] = key;
        io[base + dst] = id;
    }
}

// Writes the first k sorted entries of every line: indices, and values when asked for.
template <typename T> __device__ __forceinline__ void sort_emit(const SortArgs& a) {
    const i64 total_k = a.outer * a.inner * a.k;
    for (i64 g = blockIdx.x * (i64)blockDim.x + threadIdx.x; g < total_k; g += (i64)gridDim.x * blockDim.x) {
        const i64 line = g / a.k, t = g % a.k;
        const i64 o = line / a.inner, i = line % a.inner;
        const i64 j = ((const u32*)a.idx)[line * a.n + t];
        const i64 at = (o * a.k + t) * a.inner + i;
        ((i64*)a.indices)[at] = j;
        if (a.values) ((T*)a.values)[at] = ((const T*)a.x)[(o * a.n + j) * a.inner + i];
    }
}

#define SORT_DTYPE(NAME, T)                                                                             \
    extern "C" __global__ void __launch_bounds__(1024, 1) sort_block_##NAME(SortArgs a) { sort_block<T>(a); } \
    extern "C" __global__ void __launch_bounds__(1024, 1) sort_chunks_##NAME(SortArgs a) { sort_chunks<T>(a); } \
    extern "C" __global__ void __launch_bounds__(256, 1) sort_emit_##NAME(SortArgs a) { sort_emit<T>(a); }

SORT_DTYPE(bool, bool)
SORT_DTYPE(i8, i8)
SORT_DTYPE(i16, i16)
SORT_DTYPE(i32, i32)
SORT_DTYPE(i64, i64)
SORT_DTYPE(u8, u8)
SORT_DTYPE(u16, u16)
SORT_DTYPE(u32, u32)
SORT_DTYPE(u64, u64)
SORT_DTYPE(f16, f16)
SORT_DTYPE(bf16, bf16)
SORT_DTYPE(f32, float)
SORT_DTYPE(f64, double)
SORT_DTYPE(f8e4m3fn, f8e4m3)
SORT_DTYPE(f8e5m2, f8e5m2)
