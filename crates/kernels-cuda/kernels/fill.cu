// fill.cu: write one bit pattern into every element of a contiguous buffer (zeros, constants).
// One kernel per element width; the dtype does not matter, only its size. The pattern arrives as
// a u64 and is truncated to the element width.

#define FILL(NAME, T)                                                                        \
    extern "C" __global__ void NAME(T* __restrict__ out, u64 n, u64 pattern) {               \
        const T v = (T)pattern;                                                              \
        for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n;                      \
             i += (u64)gridDim.x * blockDim.x)                                               \
            out[i] = v;                                                                      \
    }

FILL(fill_b8, u8)
FILL(fill_b16, u16)
FILL(fill_b32, u32)
FILL(fill_b64, u64)
