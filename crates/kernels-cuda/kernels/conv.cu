#line 1 "conv.cu"
// conv.cu: convolutions. conv2d is handled as conv3d with a depth of 1; conv2d_transpose has
// its own kernels. crates/kernels-cuda/src/launch/conv.rs strings these kernels together; the
// results match crates/runtime/src/cpu/conv (same working types, same cast rules on store).
//
// Forward (conv2d / conv3d), for f16, bf16, f32 and f64: im2col + GEMM.
//   conv_weights_*  the filter (any layout: its element strides are in ConvGeo) as `groups`
//                   matrices [Kp, Np]: row kk < Kg = taps * Cg is (tap q r s, input channel),
//                   row Kg holds the bias when there is one (im2col puts a column of ones
//                   against it, so the bias is added inside the GEMM's f32 accumulation and the
//                   result is rounded once), and the rows and columns past Kg(+1) and Fg are
//                   zero padding up to multiples of 8, which lets 16-bit types use tensor cores.
//   conv_im2col_*   rows p0 .. p0+rows of the im2col matrix ([groups, rows, Kp]): one warp
//                   per row (its output position is decoded once), lanes along K, so writes
//                   are coalesced and channels-last reads too. Input strides are arbitrary
//                   (NHWC or NCHW).
//   conv_scatter_*  the GEMM result [groups, rows, Np] into the channels-last output
//                   [rows, F] (only when groups > 1 or F was padded; otherwise the GEMM writes
//                   the output directly).
// conv_direct_* (every dtype): one thread per output element, summing taps (q, r, s) then
//   input channels in the working type (f32 for the 16-bit and 8-bit floats, f64, wrapping
//   64-bit integers). Used for depthwise convolutions (one input channel per group: the
//   same order of operations as the CPU, so bit-identical there) and for the dtypes the GEMM
//   does not take (integers, bool, float8).
//
// conv2d_transpose (output in the input's layout):
//   convt_weights_*  the filter as one [Kp, Np] matrix: row = input channel, column = (r, s,
//                    output channel), zero padded.
//   convt_pack_*     input pixels as GEMM rows [rows, Kp] (channels-last, zero padded), when
//                    x is NCHW or K needs padding; otherwise the GEMM reads x itself.
//   convt_col2im_*   after GEMM gives every input pixel's contribution to its R x S patch
//                   ([rows, Np]), one thread per output element of a band gathers the (at most
//                   R x S) contributions that land on it: no atomics, deterministic.
//   convt_direct_*   every dtype: one thread per output element, gathering taps and channels.
//
// Index arithmetic is 64-bit where it reaches element offsets; coordinates within an image
// are 32-bit (see `divmod`). Kernels are declared __launch_bounds__(256, 1): with a bare (256),
// ptxas aims at a low register count and spills a few values to local memory.

struct ConvGeo {
    i64 n, c, f, groups, cg, fg;
    i64 in[3], out[3], ker[3], stride[3], dil[3], pad[3];  // (depth, height, width)
    i64 xs_n, xs_c, xs[3];                                  // element strides of x
    i64 ftap[3], fc, ff;                                    // element strides of the filter
    i64 kg, kp, np;                                         // GEMM K per group, padded K, padded N
    i64 has_bias;
};

struct ConvTGeo {
    i64 n, cin, f;
    i64 in[2], out[2], ker[2], stride[2], dil[2], pad[2];  // pad: top, left
    i64 xs_n, xs_c, xs[2];
    i64 ftap[2], fin, fout;
    i64 kp, np;
    i64 channels_last, has_bias;
};

// Output rows [oy0, oy1) of images [img0, img0 + nimg), whose contributions come from input
// rows [h_lo, h_hi) of those images (GEMM rows ((img - img0) * (h_hi - h_lo) + h - h_lo) * W + w).
struct Band {
    i64 img0, nimg, oy0, oy1, h_lo, h_hi;
};

// ---- working types: Work<T> and w_add come from work_types.cuh, in front; the products here ---
// One rounding per operation (no contraction into fma), integers wrap: as the CPU computes.
__device__ __forceinline__ float w_mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double w_mul(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ i64 w_mul(i64 a, i64 b) { return (i64)((u64)a * (u64)b); }
__device__ __forceinline__ u64 w_mul(u64 a, u64 b) { return a * b; }

template <typename T> __device__ __forceinline__ typename Work<T>::W load_w(T x) {
    return convert<typename Work<T>::W>(x);
}

// q = a / b and r = a - q * b with one division. A 64-bit division is a subroutine call, and the
// values live across it would spill; so the per-element kernels run on 2-D grids (images along
// y, the elements of an image along x: IMAGE_LOOP) and do every coordinate within an image in
// 32 bits (launch/conv.rs checks that per-image extents, padded spatial ranges and K fit in an
// int). Only the warp-per-row im2col/pack kernels divide 64-bit row indices, once per row.
// Element offsets are computed in 64 bits.
__device__ __forceinline__ i64 divmod(i64 a, i64 b, i64& r) {
    const i64 q = a / b;
    r = a - q * b;
    return q;
}
__device__ __forceinline__ int divmod32(int a, int b, int& r) {
    const int q = a / b;
    r = a - q * b;
    return q;
}

// Images (or rows) along y, elements of one (fewer than 2^31) along x.
// 32-bit loop counters (the host keeps n and per below 2^30): a 64-bit counter would make the
// compiler divide by the 64-bit step to count the iterations.
#define IMAGE_LOOP(img, e, n, per)                                       \
    for (int img = blockIdx.y; img < (int)(n); img += gridDim.y)        \
        for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < (int)(per); e += gridDim.x * blockDim.x)

// ---- forward ---------------------------------------------------------------------------------

// Input coordinate along dim i for output coordinate z and kernel tap k; -1 when outside.
__device__ __forceinline__ int in_at(const ConvGeo& g, int i, int z, int k) {
    const int v = z * (int)g.stride[i] + k * (int)g.dil[i] - (int)g.pad[i];
    return (v >= 0 && v < (int)g.in[i]) ? v : -1;
}

// Output position p (0 .. positions) as (depth, height, width) coordinates.
__device__ __forceinline__ void position(const ConvGeo& g, int p, int& zd, int& zh, int& zw) {
    const int oh = (int)g.out[1], ow = (int)g.out[2];
    int rest;
    zd = divmod32(p, oh * ow, rest);
    zh = divmod32(rest, ow, zw);
}

// Tap t (0 .. taps) as kernel coordinates (q, r, s).
__device__ __forceinline__ void tap(const ConvGeo& g, int t, int& q, int& r, int& s) {
    const int kh = (int)g.ker[1], kw = (int)g.ker[2];
    int rest;
    q = divmod32(t, kh * kw, rest);
    r = divmod32(rest, kw, s);
}

// The filter as [groups, kp, np] (the host checks that this fits in an int).
template <typename T>
__device__ __forceinline__ void conv_weights(const T* __restrict__ w, const T* __restrict__ bias, T* __restrict__ dst,
                                             const ConvGeo& g) {
    const int np = (int)g.np, kp = (int)g.kp, kg = (int)g.kg, fg = (int)g.fg, cg = (int)g.cg;
    IMAGE_LOOP(one_, e, 1, g.groups * g.kp * g.np) {
        int j, kk;
        const int grp = divmod32(divmod32(e, np, j), kp, kk);
        T v = FromF32<T>::go(0.f);
        if (j < fg) {
            const i64 o = (i64)grp * fg + j;
            if (kk < kg) {
                int ci, q, r, s;
                tap(g, divmod32(kk, cg, ci), q, r, s);
                v = w[q * g.ftap[0] + r * g.ftap[1] + s * g.ftap[2] + ci * g.fc + o * g.ff];
            } else if (kk == kg && g.has_bias) {
                v = bias[o];
            }
        }
        dst[e] = v;
    }
}

template <typename T>
__device__ __forceinline__ void conv_im2col(const T* __restrict__ x, T* __restrict__ col, const ConvGeo& g, i64 p0,
                                            i64 rows) {
    const int lane = threadIdx.x % 32;
    const i64 warps = (i64)gridDim.x * (blockDim.x / 32);
    const i64 positions = g.out[0] * g.out[1] * g.out[2];
    const int cg = (int)g.cg, kp = (int)g.kp, kg = (int)g.kg;
    const T zero = FromF32<T>::go(0.f), one = FromF32<T>::go(1.f);
    for (i64 rw = blockIdx.x * (i64)(blockDim.x / 32) + threadIdx.x / 32; rw < g.groups * rows; rw += warps) {
        i64 m, pos;
        const i64 grp = divmod(rw, rows, m);
        const i64 img = divmod(p0 + m, positions, pos);
        int zd, zh, zw;
        position(g, (int)pos, zd, zh, zw);
        const T* xi = x + img * g.xs_n + grp * g.cg * g.xs_c;
        T* dst = col + rw * g.kp;
        for (int kk = lane; kk < kp; kk += 32) {
            T v = zero;
            if (kk < kg) {
                int ci, q, r, s;
                tap(g, divmod32(kk, cg, ci), q, r, s);
                const int d = in_at(g, 0, zd, q), h = in_at(g, 1, zh, r), w = in_at(g, 2, zw, s);
                if (d >= 0 && h >= 0 && w >= 0) v = xi[ci * g.xs_c + d * g.xs[0] + h * g.xs[1] + w * g.xs[2]];
            } else if (kk == kg && g.has_bias) {
                v = one;
            }
            dst[kk] = v;
        }
    }
}

template <typename T>
__device__ __forceinline__ void conv_scatter(const T* __restrict__ cbuf, T* __restrict__ out, const ConvGeo& g,
                                             i64 rows) {
    IMAGE_LOOP(m, o, rows, g.f) {
        int j;
        const int grp = divmod32((int)o, (int)g.fg, j);
        out[m * g.f + o] = cbuf[((i64)grp * rows + m) * g.np + j];
    }
}

template <typename T>
__device__ __forceinline__ void conv_direct(const T* __restrict__ x, const T* __restrict__ w,
                                            const T* __restrict__ bias, T* __restrict__ out, const ConvGeo& g) {
    typedef typename Work<T>::W W;
    const i64 per_image = g.out[0] * g.out[1] * g.out[2] * g.f;
    const int f = (int)g.f, cg = (int)g.cg, kd = (int)g.ker[0], kh = (int)g.ker[1], kw = (int)g.ker[2];
    IMAGE_LOOP(img, rest, g.n, per_image) {
        int o, zd, zh, zw;
        position(g, divmod32((int)rest, f, o), zd, zh, zw);
        const T* xi = x + img * g.xs_n + (i64)(o / (int)g.fg) * cg * g.xs_c;
        const T* wo = w + o * g.ff;
        W acc = 0;
        for (int q = 0; q < kd; ++q) {
            const int d = in_at(g, 0, zd, q);
            if (d < 0) continue;
            for (int r = 0; r < kh; ++r) {
                const int h = in_at(g, 1, zh, r);
                if (h < 0) continue;
                for (int s = 0; s < kw; ++s) {
                    const int wi = in_at(g, 2, zw, s);
                    if (wi < 0) continue;
                    const T* xp = xi + d * g.xs[0] + h * g.xs[1] + wi * g.xs[2];
                    const T* wp = wo + q * g.ftap[0] + r * g.ftap[1] + s * g.ftap[2];
                    for (int ci = 0; ci < cg; ++ci) acc = w_add(acc, w_mul(load_w(xp[ci * g.xs_c]), load_w(wp[ci * g.fc])));
                }
            }
        }
        if (g.has_bias) acc = w_add(acc, load_w(bias[o]));
        out[(i64)img * per_image + rest] = convert<T>(acc);
    }
}

// ---- transposed ------------------------------------------------------------------------------

// The filter as [kp, np] (the host checks that this fits in an int).
template <typename T>
__device__ __forceinline__ void convt_weights(const T* __restrict__ w, T* __restrict__ dst, const ConvTGeo& g) {
    const int f = (int)g.f, kw = (int)g.ker[1], cols = (int)(g.ker[0] * g.ker[1] * g.f), np = (int)g.np;
    IMAGE_LOOP(one_, e, 1, g.kp * g.np) {
        int col;
        const int ci = divmod32(e, np, col);
        T v = FromF32<T>::go(0.f);
        if (ci < g.cin && col < cols) {
            int o, s;
            const int r = divmod32(divmod32(col, f, o), kw, s);
            v = w[r * g.ftap[0] + s * g.ftap[1] + ci * g.fin + o * g.fout];
        }
        dst[e] = v;
    }
}

// GEMM rows for input pixels pix0 .. pix0 + rows (pixel = (img * H + h) * W + w).
template <typename T>
__device__ __forceinline__ void convt_pack(const T* __restrict__ x, T* __restrict__ dst, const ConvTGeo& g, i64 pix0,
                                           i64 rows) {
    const int lane = threadIdx.x % 32;
    const i64 warps = (i64)gridDim.x * (blockDim.x / 32);
    const int kp = (int)g.kp, cin = (int)g.cin;
    const T zero = FromF32<T>::go(0.f);
    for (i64 row = blockIdx.x * (i64)(blockDim.x / 32) + threadIdx.x / 32; row < rows; row += warps) {
        i64 rest;
        const i64 img = divmod(pix0 + row, g.in[0] * g.in[1], rest);
        int w;
        const int h = divmod32((int)rest, (int)g.in[1], w);
        const T* xp = x + img * g.xs_n + h * g.xs[0] + w * g.xs[1];
        for (int ci = lane; ci < kp; ci += 32) dst[row * g.kp + ci] = ci < cin ? xp[ci * g.xs_c] : zero;
    }
}

// Element `rest` (in output order) of a band of `bh` output rows from row oy0 of image `img`:
// its output row, column, channel, and its offset in the output.
struct OutAt {
    i64 img, off;
    int oy, ox, o;
};
__device__ __forceinline__ OutAt out_at(const ConvTGeo& g, i64 img, int rest, int oy0, int bh) {
    const int oh = (int)g.out[0], ow = (int)g.out[1], f = (int)g.f;
    OutAt a;
    a.img = img;
    int y;
    if (g.channels_last) {
        y = divmod32(divmod32(rest, f, a.o), ow, a.ox);
        a.oy = oy0 + y;
        a.off = ((a.img * oh + a.oy) * ow + a.ox) * (i64)f + a.o;
    } else {
        a.o = divmod32(divmod32(rest, ow, a.ox), bh, y);
        a.oy = oy0 + y;
        a.off = ((a.img * f + a.o) * oh + a.oy) * (i64)ow + a.ox;
    }
    return a;
}

// The input coordinate that reaches output coordinate `z` through tap `k` along dim i, or -1.
__device__ __forceinline__ int src_at(const ConvTGeo& g, int i, int z, int k) {
    const int num = z + (int)g.pad[i] - k * (int)g.dil[i];
    if (num < 0) return -1;
    int rem;
    const int v = divmod32(num, (int)g.stride[i], rem);
    return (rem == 0 && v < (int)g.in[i]) ? v : -1;
}

template <typename T>
__device__ __forceinline__ void convt_col2im(const T* __restrict__ cbuf, const T* __restrict__ bias,
                                             T* __restrict__ out, const ConvTGeo& g, Band b) {
    typedef typename Work<T>::W W;
    const int bh = (int)(b.oy1 - b.oy0), kh = (int)g.ker[0], kw = (int)g.ker[1], f = (int)g.f;
    const int h_lo = (int)b.h_lo, h_hi = (int)b.h_hi;
    IMAGE_LOOP(i, e, b.nimg, (i64)bh * g.out[1] * g.f) {
        const OutAt a = out_at(g, b.img0 + i, e, (int)b.oy0, bh);
        W acc = 0;
        for (int r = 0; r < kh; ++r) {
            const int h = src_at(g, 0, a.oy, r);
            if (h < h_lo || h >= h_hi) continue;  // also h == -1
            const i64 row0 = ((a.img - b.img0) * (h_hi - h_lo) + (h - h_lo)) * g.in[1];
            for (int s = 0; s < kw; ++s) {
                const int w = src_at(g, 1, a.ox, s);
                if (w < 0) continue;
                acc = w_add(acc, load_w(cbuf[(row0 + w) * g.np + (r * kw + s) * f + a.o]));
            }
        }
        if (g.has_bias) acc = w_add(acc, load_w(bias[a.o]));
        out[a.off] = convert<T>(acc);
    }
}

template <typename T>
__device__ __forceinline__ void convt_direct(const T* __restrict__ x, const T* __restrict__ w,
                                             const T* __restrict__ bias, T* __restrict__ out, const ConvTGeo& g) {
    typedef typename Work<T>::W W;
    const int oh = (int)g.out[0], kh = (int)g.ker[0], kw = (int)g.ker[1], cin = (int)g.cin;
    IMAGE_LOOP(img, e, g.n, (i64)oh * g.out[1] * g.f) {
        const OutAt a = out_at(g, img, e, 0, oh);
        W acc = 0;
        for (int r = 0; r < kh; ++r) {
            const int h = src_at(g, 0, a.oy, r);
            if (h < 0) continue;
            for (int s = 0; s < kw; ++s) {
                const int wi = src_at(g, 1, a.ox, s);
                if (wi < 0) continue;
                const T* xp = x + a.img * g.xs_n + h * g.xs[0] + wi * g.xs[1];
                const T* wp = w + r * g.ftap[0] + s * g.ftap[1] + a.o * g.fout;
                for (int ci = 0; ci < cin; ++ci) acc = w_add(acc, w_mul(load_w(xp[ci * g.xs_c]), load_w(wp[ci * g.fin])));
            }
        }
        if (g.has_bias) acc = w_add(acc, load_w(bias[a.o]));
        out[a.off] = convert<T>(acc);
    }
}

// ---- entry points ----------------------------------------------------------------------------

#define GEMM_TYPES(X) X(f16, f16) X(bf16, bf16) X(f32, float) X(f64, double)
#define ALL_TYPES(X)                                                                                   \
    X(bool, bool) X(i8, i8) X(i16, i16) X(i32, i32) X(i64, i64) X(u8, u8) X(u16, u16) X(u32, u32)     \
    X(u64, u64) X(f16, f16) X(bf16, bf16) X(f32, float) X(f64, double) X(f8e4m3fn, f8e4m3) X(f8e5m2, f8e5m2)

#define GEMM_KERNELS(SUF, T)                                                                            \
    extern "C" __global__ void __launch_bounds__(256, 1)                                                  \
        conv_weights_##SUF(const T* w, const T* bias, T* dst, ConvGeo g) { conv_weights<T>(w, bias, dst, g); } \
    extern "C" __global__ void __launch_bounds__(256, 1)                                                  \
        conv_im2col_##SUF(const T* x, T* col, ConvGeo g, i64 p0, i64 rows) { conv_im2col<T>(x, col, g, p0, rows); } \
    extern "C" __global__ void __launch_bounds__(256, 1)                                                  \
        conv_scatter_##SUF(const T* cbuf, T* out, ConvGeo g, i64 rows) { conv_scatter<T>(cbuf, out, g, rows); } \
    extern "C" __global__ void __launch_bounds__(256, 1)                                                  \
        convt_weights_##SUF(const T* w, T* dst, ConvTGeo g) { convt_weights<T>(w, dst, g); }              \
    extern "C" __global__ void __launch_bounds__(256, 1)                                                  \
        convt_pack_##SUF(const T* x, T* dst, ConvTGeo g, i64 pix0, i64 rows) { convt_pack<T>(x, dst, g, pix0, rows); } \
    extern "C" __global__ void __launch_bounds__(256, 1)                                                  \
        convt_col2im_##SUF(const T* cbuf, const T* bias, T* out, ConvTGeo g, Band b) {                  \
        convt_col2im<T>(cbuf, bias, out, g, b);                                                        \
    }
GEMM_TYPES(GEMM_KERNELS)

#define DIRECT_KERNELS(SUF, T)                                                                          \
    extern "C" __global__ void __launch_bounds__(256, 1)                                                  \
        conv_direct_##SUF(const T* x, const T* w, const T* bias, T* out, ConvGeo g) {                   \
        conv_direct<T>(x, w, bias, out, g);                                                            \
    }                                                                                                  \
    extern "C" __global__ void __launch_bounds__(256, 1)                                                  \
        convt_direct_##SUF(const T* x, const T* w, const T* bias, T* out, ConvTGeo g) {                 \
        convt_direct<T>(x, w, bias, out, g);                                                           \
    }
ALL_TYPES(DIRECT_KERNELS)
