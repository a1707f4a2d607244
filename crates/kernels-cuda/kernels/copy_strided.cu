// copy_strided.cu: gather a strided view into a contiguous buffer (Buffer.contiguous(), copies of
// sliced GPU buffers). Each thread turns its linear output index into coordinates with the view's
// shape and reads through the view's strides (in elements, possibly negative). Writes are
// coalesced; reads are as coalesced as the view allows. The host merges dimensions that are
// contiguous with each other first, so rank <= MAX_RANK covers every buffer in practice.

#define MAX_RANK 8

struct StridedView {
    i64 shape[MAX_RANK];
    i64 strides[MAX_RANK];
    i32 rank;
};

#define COPY_STRIDED(NAME, T)                                                                  \
    extern "C" __global__ void NAME(const T* __restrict__ src, T* __restrict__ dst, u64 n,      \
                                    StridedView v) {                                           \
        for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n;                        \
             i += (u64)gridDim.x * blockDim.x) {                                               \
            u64 rest = i;                                                                      \
            i64 off = 0;                                                                       \
            for (int d = v.rank - 1; d >= 0; --d) {                                            \
                u64 extent = (u64)v.shape[d];                                                  \
                off += (i64)(rest % extent) * v.strides[d];                                    \
                rest /= extent;                                                                \
            }                                                                                  \
            dst[i] = src[off];                                                                 \
        }                                                                                      \
    }

COPY_STRIDED(copy_strided_b8, u8)
COPY_STRIDED(copy_strided_b16, u16)
COPY_STRIDED(copy_strided_b32, u32)
COPY_STRIDED(copy_strided_b64, u64)
