#line 1 "reduction.cu"
// reduction.cu: sum, mean, reduce_max, reduce_min, argmax and argmin along one axis. The input
// is contiguous and seen as [outer, n, inner] around the axis; a *line* is the n elements of
// one (outer, inner) pair; the output holds one element per line (int64 for argmax/argmin).
//
// Semantics are those of crates/runtime/src/cpu/reduction/reduce.rs:
//   * floats accumulate in f32 (f64 for float64), compensated (Neumaier) within each thread,
//     so long per-thread runs stay accurate; integers in 64 bits, wrapping; an integer mean
//     truncates toward zero; a float mean of an empty axis is 0/0 = NaN (the host rejects the
//     other empty reductions and the integer mean of an empty axis before launching);
//   * max/min propagate NaN;
//   * argmax/argmin give the first index of the extreme, a NaN counting as the extreme. The
//     candidates (value, index) are compared under a total order (NaN above every number,
//     then the value, then the lower index), so merging partial results in any order gives
//     the CPU's answer.
//
// Kernels, for each op class (sum: sum and mean, ext: max and min, arg: argmax and argmin)
// and each dtype (kernel names red_<layout>_<class>_<dtype>):
//   red_rows_*: inner == 1, a line is a contiguous row. A group of `g` threads (a warp for
//     short rows, the whole block for long ones) reduces one row, or one segment of a row
//     when rows are few and long (`splits` > 1), reading 16-byte vectors (walk_row).
//   red_cols_*: inner > 1. A block covers `tx` neighbouring lines (threads over inner, so each
//     read of the block is coalesced) and 256/tx threads stride along the axis for each; the
//     per-thread results merge in a fixed shared-memory tree.
//   red_finish_*: with splits > 1, one thread per line merges the per-segment partial results
//     (written to a scratch buffer) in segment order and writes the line's result.

struct RedArgs {
    u64 x;       // const T*: the input, [outer, n, inner]
    u64 out;     // T* (int64 for the arg class): [outer, inner]
    u64 part;    // Acc*: [lines, splits] partial results when splits > 1
    i64 outer;   // rows kernel: the number of rows
    i64 n;       // the axis length
    i64 inner;   // 1 for the rows kernel
    i64 splits;  // segments per line
    i64 seg;     // axis elements per segment
    i64 tiles;   // cols kernel: ceil(inner / tx)
    i32 kind;    // 0 sum, 1 mean, 2 max, 3 min, 4 argmax, 5 argmin
    i32 g;       // rows kernel: threads per row (32 or blockDim.x)
    i32 tx;      // cols kernel: lines per block (a power of two <= 32)
};

// ---- accumulators: init, add (in increasing index order per thread), merge, shuffle --------

template <typename W> struct SumAcc {
    W s, c;
    __device__ __forceinline__ void init(bool) { s = 0; c = 0; }
    __device__ __forceinline__ void add(W x, i64, bool) { comp_add(s, c, x); }
    __device__ __forceinline__ void merge(const SumAcc& o, bool) {
        comp_add(s, c, o.s);
        c += o.c;  // (stays 0 for integers)
    }
    __device__ __forceinline__ SumAcc shfl(int m) const { return SumAcc{shfl_xor(s, m), shfl_xor(c, m)}; }
};

template <typename W> struct ExtAcc {
    W v;
    __device__ __forceinline__ void init(bool mx) {
        W lo, hi;
        extremes(lo, hi);
        v = mx ? lo : hi;
    }
    // NaN propagates: a NaN candidate always replaces, and nothing replaces a NaN.
    __device__ __forceinline__ void add(W x, i64, bool mx) {
        if (!is_nan(v) && (is_nan(x) || (mx ? x > v : x < v))) v = x;
    }
    __device__ __forceinline__ void merge(const ExtAcc& o, bool mx) { add(o.v, 0, mx); }
    __device__ __forceinline__ ExtAcc shfl(int m) const { return ExtAcc{shfl_xor(v, m)}; }
};

template <typename W> struct ArgAcc {
    W v;
    i64 i;  // -1: no candidate yet
    __device__ __forceinline__ void init(bool) {
        v = 0;
        i = -1;
    }
    // Whether candidate (x, j) comes before the current one in the total order.
    __device__ __forceinline__ bool beats(W x, i64 j, bool mx) const {
        if (j < 0) return false;
        if (i < 0) return true;
        bool xn = is_nan(x), vn = is_nan(v);
        if (xn != vn) return xn;
        if (!xn && x != v) return mx ? x > v : x < v;
        return j < i;
    }
    __device__ __forceinline__ void add(W x, i64 j, bool mx) {
        if (beats(x, j, mx)) {
            v = x;
            i = j;
        }
    }
    __device__ __forceinline__ void merge(const ArgAcc& o, bool mx) { add(o.v, o.i, mx); }
    __device__ __forceinline__ ArgAcc shfl(int m) const { return ArgAcc{shfl_xor(v, m), shfl_xor(i, m)}; }
};

// ---- results ------------------------------------------------------------------------------

__device__ __forceinline__ float mean_of(float s, i64 n) { return s / (float)n; }
__device__ __forceinline__ double mean_of(double s, i64 n) { return s / (double)n; }
__device__ __forceinline__ i64 mean_of(i64 s, i64 n) { return n > 0 ? s / n : 0; }
__device__ __forceinline__ u64 mean_of(u64 s, i64 n) { return n > 0 ? s / (u64)n : 0; }

template <typename T, typename W>
__device__ __forceinline__ void store(const RedArgs& a, i64 line, const SumAcc<W>& acc) {
    W v = total(acc.s, acc.c);
    if (a.kind == 1) v = mean_of(v, a.n);
    ((T*)a.out)[line] = convert<T>(v);
}
template <typename T, typename W>
__device__ __forceinline__ void store(const RedArgs& a, i64 line, const ExtAcc<W>& acc) {
    ((T*)a.out)[line] = convert<T>(acc.v);
}
template <typename T, typename W>
__device__ __forceinline__ void store(const RedArgs& a, i64 line, const ArgAcc<W>& acc) {
    ((i64*)a.out)[line] = acc.i < 0 ? 0 : acc.i;
}

// Writes a line's (or a segment's) result: the output element, or a partial.
template <typename T, typename Acc>
__device__ __forceinline__ void emit(const RedArgs& a, i64 line, i64 split, const Acc& acc) {
    if (a.splits > 1)
        ((Acc*)a.part)[line * a.splits + split] = acc;
    else
        store<T>(a, line, acc);
}

// ---- kernels ------------------------------------------------------------------------------

#define RED_BLOCK 512

template <typename T, typename Acc> __device__ __forceinline__ void reduce_rows(const RedArgs& a) {
    typedef typename Work<T>::W W;
    __shared__ Acc warp_part[RED_BLOCK / 32];
    const bool mx = a.kind == 2 || a.kind == 4;
    const int g = a.g, groups = blockDim.x / g;
    const int group = threadIdx.x / g, lane = threadIdx.x % g;
    const i64 tasks = a.outer * a.splits;
    // With g == blockDim.x every thread of the block walks the same tasks (uniform barriers).
    for (i64 t = (i64)blockIdx.x * groups + group; t < tasks; t += (i64)gridDim.x * groups) {
        const i64 row = t / a.splits, split = t % a.splits;
        const i64 lo = split * a.seg, hi = min64(a.n, lo + a.seg);
        Acc acc;
        acc.init(mx);
        if (hi > lo)
            walk_row((const T*)a.x + row * a.n + lo, hi - lo, lane, g,
                     [&](T v, i64 j) { acc.add(convert<W>(v), lo + j, mx); });
#pragma unroll
        for (int m = 16; m > 0; m >>= 1) acc.merge(acc.shfl(m), mx);
        if (g > 32) {
            const int warp = threadIdx.x / 32, nw = g / 32;
            if (lane % 32 == 0) warp_part[warp] = acc;
            __syncthreads();
            if (warp == 0) {
                acc.init(mx);
                if (lane < nw) acc = warp_part[lane];
#pragma unroll
                for (int m = 16; m > 0; m >>= 1) acc.merge(acc.shfl(m), mx);
            }
            __syncthreads();  // warp_part is reused by the next task
        }
        if (lane == 0) emit<T>(a, row, split, acc);
    }
}

template <typename T, typename Acc> __device__ __forceinline__ void reduce_cols(const RedArgs& a) {
    typedef typename Work<T>::W W;
    __shared__ Acc part[256];
    const bool mx = a.kind == 2 || a.kind == 4;
    const int tx = threadIdx.x % a.tx, ty = threadIdx.x / a.tx, ny = blockDim.x / a.tx;
    const i64 tasks = a.outer * a.tiles * a.splits;
    for (i64 t = blockIdx.x; t < tasks; t += gridDim.x) {  // uniform per block
        const i64 split = t % a.splits, rest = t / a.splits;
        const i64 o = rest / a.tiles, i = (rest % a.tiles) * a.tx + tx;
        const i64 lo = split * a.seg, hi = min64(a.n, lo + a.seg);
        Acc acc;
        acc.init(mx);
        if (i < a.inner) {
            const T* x = (const T*)a.x + o * a.n * a.inner + i;
            for (i64 j = lo + ty; j < hi; j += ny) acc.add(convert<W>(x[j * a.inner]), j, mx);
        }
        part[threadIdx.x] = acc;
        __syncthreads();
        for (int s = ny / 2; s > 0; s >>= 1) {
            if (ty < s) {
                Acc other = part[threadIdx.x + s * a.tx];
                acc.merge(other, mx);
                part[threadIdx.x] = acc;
            }
            __syncthreads();
        }
        if (ty == 0 && i < a.inner) emit<T>(a, o * a.inner + i, split, acc);
        __syncthreads();  // part is reused by the next task
    }
}

template <typename T, typename Acc> __device__ __forceinline__ void reduce_finish(const RedArgs& a) {
    const bool mx = a.kind == 2 || a.kind == 4;
    const i64 lines = a.outer * a.inner;
    const Acc* part = (const Acc*)a.part;
    for (i64 line = blockIdx.x * (i64)blockDim.x + threadIdx.x; line < lines; line += (i64)gridDim.x * blockDim.x) {
        Acc acc = part[line * a.splits];
        for (i64 s = 1; s < a.splits; ++s) acc.merge(part[line * a.splits + s], mx);
        store<T>(a, line, acc);
    }
}

#define RED_CLASS(CLS, ACC, NAME, T)                                                                       \
    extern "C" __global__ void __launch_bounds__(RED_BLOCK, 1) red_rows_##CLS##_##NAME(RedArgs a) {          \
        reduce_rows<T, ACC<Work<T>::W> >(a);                                                               \
    }                                                                                                      \
    extern "C" __global__ void __launch_bounds__(256, 1) red_cols_##CLS##_##NAME(RedArgs a) {                \
        reduce_cols<T, ACC<Work<T>::W> >(a);                                                               \
    }                                                                                                      \
    extern "C" __global__ void __launch_bounds__(256, 1) red_finish_##CLS##_##NAME(RedArgs a) {              \
        reduce_finish<T, ACC<Work<T>::W> >(a);                                                             \
    }

#define RED_DTYPE(NAME, T) RED_CLASS(sum, SumAcc, NAME, T) RED_CLASS(ext, ExtAcc, NAME, T) RED_CLASS(arg, ArgAcc, NAME, T)

RED_DTYPE(bool, bool)
RED_DTYPE(i8, i8)
RED_DTYPE(i16, i16)
RED_DTYPE(i32, i32)
RED_DTYPE(i64, i64)
RED_DTYPE(u8, u8)
RED_DTYPE(u16, u16)
RED_DTYPE(u32, u32)
RED_DTYPE(u64, u64)
RED_DTYPE(f16, f16)
RED_DTYPE(bf16, bf16)
RED_DTYPE(f32, float)
RED_DTYPE(f64, double)
RED_DTYPE(f8e4m3fn, f8e4m3)
RED_DTYPE(f8e5m2, f8e5m2)
