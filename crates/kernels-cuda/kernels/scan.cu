#line 1 "scan.cu"
// scan.cu: cumsum along one axis (exclusive and reverse flags). The input and output are
// contiguous, seen as [outer, n, inner] around the axis. Sums run in W (f32 for the narrow
// floats and f32, f64 for f64, wrapping 64-bit integers), as crates/runtime/src/cpu/reduction/
// sort.rs does; a scan in reverse runs from the last element of the line to the first.
//
// cumsum_rows_{warp,block}_*: inner == 1. A group of G threads (a warp, 8 rows per block, for
//   rows of up to 256 elements; a 512-thread block otherwise) scans a row in chunks of
//   G * ITEMS elements: each thread scans ITEMS consecutive elements, a warp shuffle scan and a
//   scan of the warp totals in shared memory give each thread its prefix, and a carry (a
//   compensated sum for floats, so long rows keep their accuracy) joins the chunks.
// cumsum_cols_*: inner > 1. One thread per line (threads over inner: coalesced), walking the
//   axis with the CPU's compensated (Neumaier) running sum, so results match it exactly.

struct ScanArgs {
    u64 x, out;
    i64 outer, n, inner;
    i32 exclusive, reverse;
};

#define ITEMS 4

template <typename T, int G> __device__ __forceinline__ void cumsum_rows(const ScanArgs& a) {
    typedef typename Work<T>::W W;
    __shared__ W warp_tot[32];
    const int groups = blockDim.x / G, lane = threadIdx.x % G, l32 = threadIdx.x % 32, wid = lane / 32;
    const bool rev = a.reverse != 0, excl = a.exclusive != 0;
    for (i64 row = (i64)blockIdx.x * groups + threadIdx.x / G; row < a.outer; row += (i64)gridDim.x * groups) {
        const T* in = (const T*)a.x + row * a.n;
        T* out = (T*)a.out + row * a.n;
        W cs = 0, cc = 0;  // the carry: the sum of the chunks before this one
        for (i64 base = 0; base < a.n; base += (i64)G * ITEMS) {  // uniform across the group
            W v[ITEMS];
            const i64 first = base + (i64)lane * ITEMS;
#pragma unroll
            for (int k = 0; k < ITEMS; ++k) {
                const i64 l = first + k;
                v[k] = l < a.n ? convert<W>(in[rev ? a.n - 1 - l : l]) : (W)0;
            }
#pragma unroll
            for (int k = 1; k < ITEMS; ++k) v[k] = wadd(v[k - 1], v[k]);
            // Inclusive scan of the thread totals across the warp.
            W x = v[ITEMS - 1];
#pragma unroll
            for (int d = 1; d < 32; d <<= 1) {
                W y = __shfl_up_sync(FULL_MASK, x, d);
                if (l32 >= d) x = wadd(x, y);
            }
            W before = __shfl_up_sync(FULL_MASK, x, 1);  // the warp's sum before this thread
            if (l32 == 0) before = 0;
            W chunk;
            if (G > 32) {
                if (l32 == 31) warp_tot[wid] = x;
                __syncthreads();
                W wp = 0;
                chunk = 0;
                for (int w = 0; w < G / 32; ++w) {
                    if (w == wid) wp = chunk;
                    chunk = wadd(chunk, warp_tot[w]);
                }
                before = wadd(wp, before);
                __syncthreads();  // warp_tot is reused by the next chunk
            } else {
                chunk = __shfl_sync(FULL_MASK, x, 31);
            }
            const W start = wadd(total(cs, cc), before);
#pragma unroll
            for (int k = 0; k < ITEMS; ++k) {
                const i64 l = first + k;
                if (l < a.n) {
                    W r = excl ? (k == 0 ? start : wadd(start, v[k - 1])) : wadd(start, v[k]);
                    out[rev ? a.n - 1 - l : l] = convert<T>(r);
                }
            }
            comp_add(cs, cc, chunk);
        }
    }
}

template <typename T> __device__ __forceinline__ void cumsum_cols(const ScanArgs& a) {
    typedef typename Work<T>::W W;
    const i64 lines = a.outer * a.inner;
    for (i64 line = blockIdx.x * (i64)blockDim.x + threadIdx.x; line < lines; line += (i64)gridDim.x * blockDim.x) {
        const i64 o = line / a.inner, i = line % a.inner;
        const T* in = (const T*)a.x + o * a.n * a.inner + i;
        T* out = (T*)a.out + o * a.n * a.inner + i;
        W s = 0, c = 0;
        for (i64 step = 0; step < a.n; ++step) {
            const i64 j = (a.reverse ? a.n - 1 - step : step) * a.inner;
            const W v = convert<W>(in[j]);
            if (a.exclusive) {
                out[j] = convert<T>(total(s, c));
                comp_add(s, c, v);
            } else {
                comp_add(s, c, v);
                out[j] = convert<T>(total(s, c));
            }
        }
    }
}

#define SCAN_DTYPE(NAME, T)                                                                          \
    extern "C" __global__ void __launch_bounds__(256, 1) cumsum_rows_warp_##NAME(ScanArgs a) {         \
        cumsum_rows<T, 32>(a);                                                                       \
    }                                                                                                \
    extern "C" __global__ void __launch_bounds__(512, 1) cumsum_rows_block_##NAME(ScanArgs a) {        \
        cumsum_rows<T, 512>(a);                                                                      \
    }                                                                                                \
    extern "C" __global__ void __launch_bounds__(256, 1) cumsum_cols_##NAME(ScanArgs a) { cumsum_cols<T>(a); }

SCAN_DTYPE(bool, bool)
SCAN_DTYPE(i8, i8)
SCAN_DTYPE(i16, i16)
SCAN_DTYPE(i32, i32)
SCAN_DTYPE(i64, i64)
SCAN_DTYPE(u8, u8)
SCAN_DTYPE(u16, u16)
SCAN_DTYPE(u32, u32)
SCAN_DTYPE(u64, u64)
SCAN_DTYPE(f16, f16)
SCAN_DTYPE(bf16, bf16)
SCAN_DTYPE(f32, float)
SCAN_DTYPE(f64, double)
SCAN_DTYPE(f8e4m3fn, f8e4m3)
SCAN_DTYPE(f8e5m2, f8e5m2)
