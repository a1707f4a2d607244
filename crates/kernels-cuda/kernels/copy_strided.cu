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

// copy_many: up to COPY_MANY contiguous copies on one device in one launch (a CUDA graph
// replay's staging copies of a decode step's small inputs: one launch instead of one memcpy
// each, launch/copy_many.rs). Block p copies piece p, in 16-byte vectors when both ends are
// 16-byte aligned.
#define COPY_MANY 16

struct CopyMany {
    u64 src[COPY_MANY], dst[COPY_MANY], bytes[COPY_MANY];
    i32 n, pad;
};

extern "C" __global__ void __launch_bounds__(256) copy_many(const __grid_constant__ CopyMany a) {
    const int p = blockIdx.x;
    if (p >= a.n) return;
    const u8* s = reinterpret_cast<const u8*>(a.src[p]);
    u8* d = reinterpret_cast<u8*>(a.dst[p]);
    const u64 n = a.bytes[p];
    u64 done = 0;
    if (((a.src[p] | a.dst[p]) & 15) == 0) {
        done = n / 16 * 16;
        for (u64 i = threadIdx.x; i < n / 16; i += blockDim.x)
            reinterpret_cast<uint4*>(d)[i] = reinterpret_cast<const uint4*>(s)[i];
    }
    for (u64 i = done + threadIdx.x; i < n; i += blockDim.x) d[i] = s[i];
}
