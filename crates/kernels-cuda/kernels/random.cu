#line 1 "random.cu"
// random.cu: random_uniform and random_normal (crates/graph/src/ops/random.rs defines them;
// crates/runtime/src/cpu/random/values.rs is the reference and states the recipe to the bit).
//
// One thread per Philox4x32-10 block, in a grid-stride loop over the blocks: block j is the
// generator's output for counter (j, j >> 32, stream, stream >> 32) under the key (seed,
// seed >> 32), and gives 4 contiguous elements (2 for float64). The seed is read from device
// memory (8 bytes, int64 or uint64), so a captured CUDA graph replays with the seed of each
// call. Each thread writes its elements with one vector store (16 bytes for float32 and
// float64, 8 for the 16-bit types, 4 for float8) when the block is whole and the output aligned, so a warp
// writes one contiguous span; the last partial block is written element by element.
//
// Uniform values are the host's bit for bit: u from the top 24 (or 53) bits of the words is
// exact, `offset + scale * u` is one product and one sum with the __f*_rn / __d*_rn intrinsics
// (never contracted into an FMA), then the clamp to [lo, hi] and the nearest-even conversion of
// prelude.cuh. Normal values use logf, sqrtf and sincospif (log, sqrt, sincospi for float64):
// within a few ulps of the host, which evaluates the same formula in float64. sincospi keeps the
// argument reduction exact and needs no stack frame (sinf would carry the Payne-Hanek path).

#define PHILOX_M0 0xd2511f53u
#define PHILOX_M1 0xcd9e8d57u
#define PHILOX_W0 0x9e3779b9u
#define PHILOX_W1 0xbb67ae85u
#define TWO_POW_M24 5.9604644775390625e-8f
#define TWO_POW_M53 1.1102230246251565404e-16

struct RandomArgs {
    u64 out;     // T*: n elements
    u64 seed;    // const u64*: one int64 or uint64 value
    u64 n;
    u64 stream;
    double offset;  // each value is offset + scale * x, clamped to [lo, hi]
    double scale;
    double lo;
    double hi;
};

__device__ __forceinline__ uint4 philox4x32_10(uint4 c, u32 k0, u32 k1) {
#pragma unroll
    for (int round = 0; round < 10; ++round) {
        if (round > 0) {
            k0 += PHILOX_W0;
            k1 += PHILOX_W1;
        }
        const u32 hi0 = __umulhi(PHILOX_M0, c.x), lo0 = PHILOX_M0 * c.x;
        const u32 hi1 = __umulhi(PHILOX_M1, c.z), lo1 = PHILOX_M1 * c.z;
        c = make_uint4(hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0);
    }
    return c;
}

__device__ __forceinline__ uint4 philox_block(u64 seed, u64 stream, u64 j) {
    return philox4x32_10(make_uint4((u32)j, (u32)(j >> 32), (u32)stream, (u32)(stream >> 32)), (u32)seed,
                         (u32)(seed >> 32));
}

__device__ __forceinline__ float unit24(u32 w) { return (float)(w >> 8) * TWO_POW_M24; }
__device__ __forceinline__ u64 bits53(u32 hi, u32 lo) { return ((u64)hi << 21) | (u64)(lo >> 11); }

// The four f32 values of a block, as values.rs's narrow_block.
template <bool NORMAL>
__device__ __forceinline__ void narrow_values(const RandomArgs& a, uint4 w, float v[4]) {
    const float offset = (float)a.offset, scale = (float)a.scale;
    if (NORMAL) {
        const u32 words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
        for (int p = 0; p < 2; ++p) {
            const float u1 = (float)((words[2 * p] >> 8) + 1u) * TWO_POW_M24;
            const float r = sqrtf(-2.f * logf(u1));
            float s, c;
            sincospif(2.f * unit24(words[2 * p + 1]), &s, &c);
            v[2 * p] = __fadd_rn(offset, __fmul_rn(scale, __fmul_rn(r, c)));
            v[2 * p + 1] = __fadd_rn(offset, __fmul_rn(scale, __fmul_rn(r, s)));
        }
    } else {
        const float lo = (float)a.lo, hi = (float)a.hi;
        const u32 words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
        for (int l = 0; l < 4; ++l) v[l] = fminf(fmaxf(__fadd_rn(offset, __fmul_rn(scale, unit24(words[l]))), lo), hi);
    }
}

// The raw bits of a narrow output element.
__device__ __forceinline__ u32 out_bits(float v, float*) { return __float_as_uint(v); }
__device__ __forceinline__ u32 out_bits(float v, f16*) { return FromF32<f16>::go(v).bits; }
__device__ __forceinline__ u32 out_bits(float v, bf16*) { return FromF32<bf16>::go(v).bits; }
__device__ __forceinline__ u32 out_bits(float v, f8e4m3*) { return FromF32<f8e4m3>::go(v).bits; }
__device__ __forceinline__ u32 out_bits(float v, f8e5m2*) { return FromF32<f8e5m2>::go(v).bits; }

template <typename T, bool NORMAL> __device__ __forceinline__ void narrow(const RandomArgs& a) {
    const u64 seed = *(const u64*)a.seed;
    const u64 blocks = (a.n + 3) / 4;
    T* out = (T*)a.out;
    const bool aligned = (a.out & (4 * sizeof(T) - 1)) == 0;
    for (u64 j = blockIdx.x * (u64)blockDim.x + threadIdx.x; j < blocks; j += (u64)gridDim.x * blockDim.x) {
        float v[4];
        narrow_values<NORMAL>(a, philox_block(seed, a.stream, j), v);
        u32 b[4];
#pragma unroll
        for (int l = 0; l < 4; ++l) b[l] = out_bits(v[l], (T*)0);
        const u64 first = 4 * j;
        if (aligned && first + 4 <= a.n) {
            if (sizeof(T) == 4) {
                *(uint4*)(out + first) = make_uint4(b[0], b[1], b[2], b[3]);
            } else if (sizeof(T) == 2) {
                *(uint2*)(out + first) = make_uint2(b[0] | (b[1] << 16), b[2] | (b[3] << 16));
            } else {
                *(u32*)(out + first) = b[0] | (b[1] << 8) | (b[2] << 16) | (b[3] << 24);
            }
        } else {
            for (int l = 0; l < 4 && first + l < a.n; ++l) {
                if (sizeof(T) == 4) {
                    ((u32*)out)[first + l] = b[l];
                } else if (sizeof(T) == 2) {
                    ((u16*)out)[first + l] = (u16)b[l];
                } else {
                    ((u8*)out)[first + l] = (u8)b[l];
                }
            }
        }
    }
}

// The two f64 values of a block, as values.rs's wide_block.
template <bool NORMAL> __device__ __forceinline__ double2 wide_values(const RandomArgs& a, uint4 w) {
    const u64 m0 = bits53(w.x, w.y), m1 = bits53(w.z, w.w);
    if (NORMAL) {
        const double u1 = (double)(m0 + 1) * TWO_POW_M53;
        const double r = sqrt(-2.0 * log(u1));
        double s, c;
        sincospi(2.0 * ((double)m1 * TWO_POW_M53), &s, &c);
        return make_double2(__dadd_rn(a.offset, __dmul_rn(a.scale, __dmul_rn(r, c))),
                            __dadd_rn(a.offset, __dmul_rn(a.scale, __dmul_rn(r, s))));
    }
    const double x0 = __dadd_rn(a.offset, __dmul_rn(a.scale, (double)m0 * TWO_POW_M53));
    const double x1 = __dadd_rn(a.offset, __dmul_rn(a.scale, (double)m1 * TWO_POW_M53));
    return make_double2(fmin(fmax(x0, a.lo), a.hi), fmin(fmax(x1, a.lo), a.hi));
}

template <bool NORMAL> __device__ __forceinline__ void wide(const RandomArgs& a) {
    const u64 seed = *(const u64*)a.seed;
    const u64 blocks = (a.n + 1) / 2;
    double* out = (double*)a.out;
    const bool aligned = (a.out & 15) == 0;
    for (u64 j = blockIdx.x * (u64)blockDim.x + threadIdx.x; j < blocks; j += (u64)gridDim.x * blockDim.x) {
        const double2 v = wide_values<NORMAL>(a, philox_block(seed, a.stream, j));
        const u64 first = 2 * j;
        if (aligned && first + 2 <= a.n) {
            *(double2*)(out + first) = v;
        } else {
            out[first] = v.x;
            if (first + 1 < a.n) out[first + 1] = v.y;
        }
    }
}

extern "C" __global__ void random_uniform_f32(RandomArgs a) { narrow<float, false>(a); }
extern "C" __global__ void random_uniform_f16(RandomArgs a) { narrow<f16, false>(a); }
extern "C" __global__ void random_uniform_bf16(RandomArgs a) { narrow<bf16, false>(a); }
extern "C" __global__ void random_uniform_f8e4m3fn(RandomArgs a) { narrow<f8e4m3, false>(a); }
extern "C" __global__ void random_uniform_f8e5m2(RandomArgs a) { narrow<f8e5m2, false>(a); }
extern "C" __global__ void random_uniform_f64(RandomArgs a) { wide<false>(a); }
extern "C" __global__ void random_normal_f32(RandomArgs a) { narrow<float, true>(a); }
extern "C" __global__ void random_normal_f16(RandomArgs a) { narrow<f16, true>(a); }
extern "C" __global__ void random_normal_bf16(RandomArgs a) { narrow<bf16, true>(a); }
extern "C" __global__ void random_normal_f8e4m3fn(RandomArgs a) { narrow<f8e4m3, true>(a); }
extern "C" __global__ void random_normal_f8e5m2(RandomArgs a) { narrow<f8e5m2, true>(a); }
extern "C" __global__ void random_normal_f64(RandomArgs a) { wide<true>(a); }
