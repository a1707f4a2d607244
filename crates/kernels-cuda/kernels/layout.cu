// layout.cu: the data movers of the layout ops (transpose, permute, broadcast_to, slice_tensor,
// tile, concat, stack, split, repeat_interleave, pad, band_part). They move element bits, so
// kernels exist per element width (b8..b64), not per dtype; b128 is a 16-byte "element" the
// host uses when a copy's inner runs are contiguous and 16-byte aligned (vector loads).
//
//   copy_view_<w>_<i>   out[dst(c)] = in[src(c)] for every coordinate c of a shape of rank <= 8,
//                       with per-dim source strides (negative: reversals, 0: broadcasts) and
//                       destination strides (a block inside a bigger result: concat, stack,
//                       pad). One thread per element, consecutive threads on consecutive
//                       coordinates, so the writes (and contiguous reads) coalesce. <i> is the
//                       index arithmetic: i32 when the element count fits 32 bits (division is
//                       several times cheaper), i64 otherwise.
//   transpose_<w>       the same copy for a view whose innermost dim is strided in the source
//                       while another dim is contiguous there (a transpose): 32x32 tiles staged
//                       in shared memory, read along the source's contiguous dim and written
//                       along the destination's, so both sides coalesce.
//   pad_<w>_<i>         constant padding: out[c] = in[c - lo] inside the input's box, else the
//                       pad value (read from device memory, one element).
//   band_part_<w>_<i>   a contiguous copy with the elements outside (or inside, `exclude`) the
//                       diagonal band of the last two dims zeroed.
//
// The host merges dims that are contiguous on both sides and drops extent-1 dims first, so the
// rank limit of 8 is rarely reached (the host splits the leading dim when it is).

#define MAX_RANK 8
#define MAX_BATCH 6

struct alignas(16) b128 {
    u64 lo, hi;
};

// ---- copy_view ---------------------------------------------------------------------------

struct CopyGeo {
    i64 shape[MAX_RANK];
    i64 src[MAX_RANK];
    i64 dst[MAX_RANK];
    i32 rank;
};

template <typename T, typename I>
__device__ __forceinline__ void copy_view(const T* __restrict__ src, T* __restrict__ dst, u64 n,
                                          const CopyGeo& g) {
    const I total = (I)n;
    for (I i = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; i < total; i += (I)gridDim.x * (I)blockDim.x) {
        I rest = i;
        i64 so = 0, dof = 0;
#pragma unroll
        for (int d = MAX_RANK - 1; d >= 0; --d) {
            if (d < g.rank) {
                const I extent = (I)g.shape[d];
                const I q = rest / extent;
                const i64 c = (i64)(rest - q * extent);
                rest = q;
                so += c * g.src[d];
                dof += c * g.dst[d];
            }
        }
        dst[dof] = src[so];
    }
}

#define COPY_VIEW(W, T)                                                                         \
    extern "C" __global__ void copy_view_##W##_i32(const T* __restrict__ src, T* __restrict__ dst, \
                                                   u64 n, CopyGeo g) {                          \
        copy_view<T, u32>(src, dst, n, g);                                                      \
    }                                                                                           \
    extern "C" __global__ void copy_view_##W##_i64(const T* __restrict__ src, T* __restrict__ dst, \
                                                   u64 n, CopyGeo g) {                          \
        copy_view<T, u64>(src, dst, n, g);                                                      \
    }

COPY_VIEW(b8, u8)
COPY_VIEW(b16, u16)
COPY_VIEW(b32, u32)
COPY_VIEW(b64, u64)
COPY_VIEW(b128, b128)

// ---- transpose ---------------------------------------------------------------------------
// Block (32, 8); blockIdx.x walks tiles of the last dim (cols), y tiles of the dim contiguous in
// the source (rows), z the other ("batch") dims, with grid-stride loops over y and z.

struct TileGeo {
    i64 rows, cols;
    i64 src_r, src_c;
    i64 dst_r, dst_c;
    i64 bshape[MAX_BATCH];
    i64 bsrc[MAX_BATCH];
    i64 bdst[MAX_BATCH];
    i32 brank;
    i64 nbatch;
};

template <typename T>
__device__ __forceinline__ void transpose_tiles(const T* __restrict__ src, T* __restrict__ dst,
                                                const TileGeo& g, T (*tile)[33]) {
    const int tx = threadIdx.x, ty = threadIdx.y;
    const i64 tiles_r = (g.rows + 31) / 32;
    const i64 c0 = (i64)blockIdx.x * 32;
    for (i64 b = blockIdx.z; b < g.nbatch; b += gridDim.z) {
        i64 rest = b, so = 0, dof = 0;
#pragma unroll
        for (int d = MAX_BATCH - 1; d >= 0; --d) {
            if (d < g.brank) {
                const i64 c = rest % g.bshape[d];
                rest /= g.bshape[d];
                so += c * g.bsrc[d];
                dof += c * g.bdst[d];
            }
        }
        for (i64 tr = blockIdx.y; tr < tiles_r; tr += gridDim.y) {
            const i64 r0 = tr * 32;
            // Read: consecutive tx on consecutive rows (the source's contiguous dim).
#pragma unroll
            for (int j = 0; j < 32; j += 8) {
                const i64 r = r0 + tx, c = c0 + ty + j;
                if (r < g.rows && c < g.cols) tile[ty + j][tx] = src[so + r * g.src_r + c * g.src_c];
            }
            __syncthreads();
            // Write: consecutive tx on consecutive cols (the destination's contiguous dim).
#pragma unroll
            for (int j = 0; j < 32; j += 8) {
                const i64 r = r0 + ty + j, c = c0 + tx;
                if (r < g.rows && c < g.cols) dst[dof + r * g.dst_r + c * g.dst_c] = tile[tx][ty + j];
            }
            __syncthreads();
        }
    }
}

#define TRANSPOSE(W, T)                                                                         \
    extern "C" __global__ void __launch_bounds__(256) transpose_##W(const T* __restrict__ src,  \
                                                                    T* __restrict__ dst,        \
                                                                    TileGeo g) {                \
        __shared__ T tile[32][33];                                                              \
        transpose_tiles<T>(src, dst, g, tile);                                                  \
    }

TRANSPOSE(b8, u8)
TRANSPOSE(b16, u16)
TRANSPOSE(b32, u32)
TRANSPOSE(b64, u64)

// ---- pad ---------------------------------------------------------------------------------

struct PadGeo {
    i64 shape[MAX_RANK];  // the result's
    i64 lo[MAX_RANK];     // padding before the input, per dim
    i64 in[MAX_RANK];     // the input's extents
    i64 src[MAX_RANK];    // the input's strides
    i32 rank;
};

template <typename T, typename I>
__device__ __forceinline__ void pad(const T* __restrict__ src, const T* __restrict__ value,
                                    T* __restrict__ dst, u64 n, const PadGeo& g) {
    const T v = *value;
    const I total = (I)n;
    for (I i = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; i < total; i += (I)gridDim.x * (I)blockDim.x) {
        I rest = i;
        i64 so = 0;
        bool inside = true;
#pragma unroll
        for (int d = MAX_RANK - 1; d >= 0; --d) {
            if (d < g.rank) {
                const I extent = (I)g.shape[d];
                const I q = rest / extent;
                const i64 k = (i64)(rest - q * extent) - g.lo[d];
                rest = q;
                inside = inside && k >= 0 && k < g.in[d];
                so += k * g.src[d];
            }
        }
        dst[i] = inside ? src[so] : v;
    }
}

#define PAD(W, T)                                                                               \
    extern "C" __global__ void pad_##W##_i32(const T* __restrict__ src, const T* __restrict__ value, \
                                             T* __restrict__ dst, u64 n, PadGeo g) {            \
        pad<T, u32>(src, value, dst, n, g);                                                     \
    }                                                                                           \
    extern "C" __global__ void pad_##W##_i64(const T* __restrict__ src, const T* __restrict__ value, \
                                             T* __restrict__ dst, u64 n, PadGeo g) {            \
        pad<T, u64>(src, value, dst, n, g);                                                     \
    }

PAD(b8, u8)
PAD(b16, u16)
PAD(b32, u32)
PAD(b64, u64)

// ---- band_part ---------------------------------------------------------------------------
// Element (m, n) of each [rows, cols] matrix is in the band when
// (lower < 0 || m - n <= lower) && (upper < 0 || n - m <= upper); kept when in the band xor
// `exclude`, else zero (the all-zero bit pattern in every dtype).

template <typename T, typename I>
__device__ __forceinline__ void band_part(const T* __restrict__ src, T* __restrict__ dst, u64 n,
                                          i64 rows, i64 cols, i64 lower, i64 upper, int exclude) {
    const I total = (I)n, ncols = (I)cols, nrows = (I)rows;
    for (I i = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; i < total; i += (I)gridDim.x * (I)blockDim.x) {
        const I t = i / ncols;
        const i64 c = (i64)(i - t * ncols);
        const i64 m = (i64)(t % nrows);
        const bool in_band = (lower < 0 || m - c <= lower) && (upper < 0 || c - m <= upper);
        dst[i] = (in_band != (exclude != 0)) ? src[i] : (T)0;
    }
}

#define BAND_PART(W, T)                                                                         \
    extern "C" __global__ void band_part_##W##_i32(const T* __restrict__ src, T* __restrict__ dst, \
                                                   u64 n, i64 rows, i64 cols, i64 lower,        \
                                                   i64 upper, int exclude) {                    \
        band_part<T, u32>(src, dst, n, rows, cols, lower, upper, exclude);                      \
    }                                                                                           \
    extern "C" __global__ void band_part_##W##_i64(const T* __restrict__ src, T* __restrict__ dst, \
                                                   u64 n, i64 rows, i64 cols, i64 lower,        \
                                                   i64 upper, int exclude) {                    \
        band_part<T, u64>(src, dst, n, rows, cols, lower, upper, exclude);                      \
    }

BAND_PART(b8, u8)
BAND_PART(b16, u16)
BAND_PART(b32, u32)
BAND_PART(b64, u64)
