#line 1 "pool.cu"
// pool.cu: max_pool2d and avg_pool2d over NHWC input, and fold ([N, C*kh*kw, L] blocks summed
// back into [N, C, H, W]). One thread per output element, consecutive threads on consecutive
// output elements (channels for pooling, columns for fold), so reads and writes coalesce.
//
// Semantics and order of operations follow crates/runtime/src/cpu/conv/pool.rs exactly, so the
// results are bit-identical to the CPU's:
//   * taps outside the input (padding, the ceil_mode overhang) are skipped; max starts at the
//     working type's lowest value (-inf, or the integer minimum) and takes v when v > acc or v
//     is NaN (NaN propagates);
//   * avg sums the taps inside in (r, s) order in the working type (f32 for 16/8-bit floats,
//     f64, wrapping 64-bit integers) and divides by kh*kw (count_boundary) or by the taps
//     inside; an integer divided by a count of 0 is 0, a float one is NaN;
//   * fold sums, for each output element, the tap (i, j) contributions in (i, j) order.
// Kernels are declared __launch_bounds__(256, 1): with a bare (256), ptxas aims at a low
// register count and spills a few values to local memory.

struct PoolGeo {
    i64 n, c;
    i64 in[2], out[2], ker[2], stride[2], dil[2], pad[2];  // fold: `in` is the block grid
};

// Work<T> and w_add: work_types.cuh, in front.

__device__ __forceinline__ float w_lowest(float) { return -__int_as_float(0x7F800000); }
__device__ __forceinline__ double w_lowest(double) { return -__longlong_as_double(0x7FF0000000000000ll); }
__device__ __forceinline__ i64 w_lowest(i64) { return (i64)0x8000000000000000ull; }
__device__ __forceinline__ u64 w_lowest(u64) { return 0; }

__device__ __forceinline__ bool w_nan(float v) { return isnan(v); }
__device__ __forceinline__ bool w_nan(double v) { return isnan(v); }
__device__ __forceinline__ bool w_nan(i64) { return false; }
__device__ __forceinline__ bool w_nan(u64) { return false; }

__device__ __forceinline__ float w_div(float a, i64 n) { return __fdiv_rn(a, (float)n); }
__device__ __forceinline__ double w_div(double a, i64 n) { return __ddiv_rn(a, (double)n); }
__device__ __forceinline__ i64 w_div(i64 a, i64 n) { return n == 0 ? 0 : a / n; }
__device__ __forceinline__ u64 w_div(u64 a, i64 n) { return n == 0 ? 0 : a / (u64)n; }

template <typename T> __device__ __forceinline__ typename Work<T>::W load_w(T x) {
    return convert<typename Work<T>::W>(x);
}

// 2-D grids: images along y, the elements of one image along x, so that no 64-bit division
// (a subroutine call, around which values would spill) is needed; coordinates within an image
// are 32-bit (launch/conv.rs checks that the extents fit in an int).
__device__ __forceinline__ int divmod32(int a, int b, int& r) {
    const int q = a / b;
    r = a - q * b;
    return q;
}

// 32-bit loop counters (the host keeps n and per below 2^30): a 64-bit counter would make the
// compiler divide by the 64-bit step to count the iterations.
#define IMAGE_LOOP(img, e, n, per)                                       \
    for (int img = blockIdx.y; img < (int)(n); img += gridDim.y)        \
        for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < (int)(per); e += gridDim.x * blockDim.x)

// AVG: 0 max, 1 average dividing by kh*kw, 2 average dividing by the taps inside.
template <typename T, int AVG>
__device__ __forceinline__ void pool(const T* __restrict__ x, T* __restrict__ out, const PoolGeo& g) {
    typedef typename Work<T>::W W;
    const int ih = (int)g.in[0], iw = (int)g.in[1], ow = (int)g.out[1], c = (int)g.c;
    const int kh = (int)g.ker[0], kw = (int)g.ker[1];
    const i64 per_image = g.out[0] * g.out[1] * g.c;
    IMAGE_LOOP(img, rest, g.n, per_image) {
        int ch, xo;
        const int y = divmod32(divmod32(rest, c, ch), ow, xo);
        W acc = AVG ? (W)0 : w_lowest(W());
        int inside = 0;
        for (int r = 0; r < kh; ++r) {
            const int h = y * (int)g.stride[0] + r * (int)g.dil[0] - (int)g.pad[0];
            if (h < 0 || h >= ih) continue;
            for (int s = 0; s < kw; ++s) {
                const int w = xo * (int)g.stride[1] + s * (int)g.dil[1] - (int)g.pad[1];
                if (w < 0 || w >= iw) continue;
                ++inside;
                const W v = load_w(x[(((i64)img * ih + h) * iw + w) * c + ch]);
                if (AVG) {
                    acc = w_add(acc, v);
                } else if (v > acc || w_nan(v)) {
                    acc = v;
                }
            }
        }
        if (AVG) acc = w_div(acc, AVG == 1 ? (i64)kh * kw : (i64)inside);
        out[(i64)img * per_image + rest] = convert<T>(acc);
    }
}

template <typename T>
__device__ __forceinline__ void fold(const T* __restrict__ x, T* __restrict__ out, const PoolGeo& g) {
    typedef typename Work<T>::W W;
    const int gh = (int)g.in[0], gw = (int)g.in[1], ow = (int)g.out[1], c = (int)g.c;
    const int kh = (int)g.ker[0], kw = (int)g.ker[1];
    const i64 per_image = g.c * g.out[0] * g.out[1];
    IMAGE_LOOP(img, rest, g.n, per_image) {
        int xo, y;
        const int ch = divmod32(divmod32(rest, ow, xo), (int)g.out[0], y);
        // Block (i, j) rows of this channel: [N, C * kh * kw, gh * gw].
        const T* xc = x + ((i64)img * c + ch) * kh * kw * gh * gw;
        W acc = 0;
        for (int i = 0; i < kh; ++i) {
            const int num = y + (int)g.pad[0] - i * (int)g.dil[0];
            if (num < 0) continue;
            int rem;
            const int bh = divmod32(num, (int)g.stride[0], rem);
            if (rem != 0 || bh >= gh) continue;
            for (int j = 0; j < kw; ++j) {
                const int numw = xo + (int)g.pad[1] - j * (int)g.dil[1];
                if (numw < 0) continue;
                int remw;
                const int bw = divmod32(numw, (int)g.stride[1], remw);
                if (remw != 0 || bw >= gw) continue;
                acc = w_add(acc, load_w(xc[(i64)(i * kw + j) * gh * gw + (i64)bh * gw + bw]));
            }
        }
        out[(i64)img * per_image + rest] = convert<T>(acc);
    }
}

#define ALL_TYPES(X)                                                                                   \
    X(bool, bool) X(i8, i8) X(i16, i16) X(i32, i32) X(i64, i64) X(u8, u8) X(u16, u16) X(u32, u32)     \
    X(u64, u64) X(f16, f16) X(bf16, bf16) X(f32, float) X(f64, double) X(f8e4m3fn, f8e4m3) X(f8e5m2, f8e5m2)

#define POOL_KERNELS(SUF, T)                                                                                      \
    extern "C" __global__ void __launch_bounds__(256, 1) max_pool_##SUF(const T* x, T* out, PoolGeo g) {              \
        pool<T, 0>(x, out, g);                                                                                   \
    }                                                                                                            \
    extern "C" __global__ void __launch_bounds__(256, 1) avg_pool_##SUF(const T* x, T* out, PoolGeo g) {              \
        pool<T, 1>(x, out, g);                                                                                   \
    }                                                                                                            \
    extern "C" __global__ void __launch_bounds__(256, 1) avg_pool_inside_##SUF(const T* x, T* out, PoolGeo g) {       \
        pool<T, 2>(x, out, g);                                                                                   \
    }                                                                                                            \
    extern "C" __global__ void __launch_bounds__(256, 1) fold_##SUF(const T* x, T* out, PoolGeo g) { fold<T>(x, out, g); }
ALL_TYPES(POOL_KERNELS)
