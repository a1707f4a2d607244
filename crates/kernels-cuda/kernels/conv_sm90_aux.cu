// conv_sm90_aux.cu: the helpers of the Hopper conv2d (conv_sm90.cu, launched by
// launch/conv_sm90.rs and its submodules), plain CUDA that runs on any architecture:
//
// * conv_sm90_pad_x / conv_sm90_pad_f: channel padding, for inputs whose channel count C is not
//   a multiple of 8 (the kernel's TMA strides must be multiples of 16 bytes). The input
//   [N*H, W, C] becomes x' [N*H, Q', C'] and the RSCF filter [G, real, K] becomes f' [G, C', K],
//   with zeros in every added channel, so the padded conv is the same sum plus exact zeros.
//   Two forms (launch/conv_sm90/pad.rs picks one):
//   - plain: Q' = W, C' = C rounded up to 8; x'[row, w, c] = x[row, w, c] for c < C.
//   - folded: the S filter columns move into the channels (a 1-D im2col along the width):
//     Q' = Q (the output width), C' = S*C rounded up to 8, and
//     x'[row, q, s*C + c] = x[row, q*sw - pw + s*dw, c] (zero outside the input), so the conv
//     becomes an R x 1 conv with stride (sh, 1), padding (ph, 0) and dilation (dh, 1) over x'.
//     In RSCF the rows (s, c) of one filter row r are already in the order s*C + c, so the
//     filter needs the same padding as in the plain form, with G = R and real = S*C.
//   Both work on raw 16-bit values (bf16 and f16 alike) and write 8 elements (16 bytes) per
//   thread: C' and K are multiples of 8, the destinations are fresh allocations (256-byte
//   aligned) and the filter is 16-byte aligned (checked by the launcher).
//
// * conv_sm90_splitk_reduce_<dtype>: the split-K epilogue. The conv kernel with S > 1 splits of
//   the reduction writes S f32 partial products [S, M, K] (each split its own plane, no
//   atomics); this kernel sums them in split order (deterministic), then applies the conv's
//   bias and prelude.cuh's Epilogue exactly as the conv kernel's register epilogue does (conv
//   bias, epilogue bias, activation, clamp, + beta * residual) and rounds once to the output
//   type. Four consecutive columns per thread (K % 8 == 0): 16-byte partial loads, 4-byte
//   bias, residual and output accesses (those are only 4-byte aligned).

struct PadXArgs {
    u64 src;     // [rows, w_in, c_in]
    u64 dst;     // [rows, q_out, c_out]
    i64 rows;    // N * H
    i32 w_in, c_in;
    i32 q_out, c_out;
    i32 fold;    // S (folded) or 1 (plain)
    i32 sw, pw, dw;
};

// Grid: x over the q_out * c_out / 8 groups of one row, y over the rows (both grid-stride), so
// that the per-thread index arithmetic stays in 32 bits; the channel index (s, c) of each of the
// thread's 8 elements is stepped, not divided.
extern "C" __global__ void conv_sm90_pad_x(PadXArgs p) {
    const int groups = p.c_out / 8;
    const int per_row = p.q_out * groups;
    const int real = p.fold * p.c_in;
    const u16* src = (const u16*)p.src;
    for (i64 row = blockIdx.y; row < p.rows; row += gridDim.y) {
        const u16* in = src + row * p.w_in * p.c_in;
        u16* out_row = (u16*)p.dst + row * p.q_out * p.c_out;
        for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < per_row; i += gridDim.x * blockDim.x) {
            const int q = i / groups;
            const int j0 = (i - q * groups) * 8;
            int s = j0 / p.c_in, c = j0 - s * p.c_in;
            u32 v[4] = {0u, 0u, 0u, 0u};
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                if (j0 + e < real) {
                    const int w = q * p.sw - p.pw + s * p.dw;
                    if (w >= 0 && w < p.w_in) v[e / 2] |= (u32)in[(i64)w * p.c_in + c] << (16 * (e % 2));
                }
                if (++c == p.c_in) c = 0, ++s;
            }
            *(uint4*)(out_row + (i64)i * 8) = make_uint4(v[0], v[1], v[2], v[3]);
        }
    }
}

struct PadFArgs {
    u64 src;     // [g, real, k]
    u64 dst;     // [g, c_out, k]
    i64 g;       // filter rows: R (folded) or R * S (plain)
    i32 real;    // channels per row in the source: S * C (folded) or C (plain)
    i32 c_out;   // channels per row in the destination (a multiple of 8, >= real)
    i32 k;       // output channels (a multiple of 8)
    i32 pad;
};

extern "C" __global__ void conv_sm90_pad_f(PadFArgs p) {
    const int kg = p.k / 8;
    const i64 total = p.g * p.c_out * kg;
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < total; i += (i64)gridDim.x * blockDim.x) {
        const i64 rj = i / kg;  // g * c_out + j
        const int k0 = (int)(i - rj * kg) * 8;
        const i64 g = rj / p.c_out;
        const int j = (int)(rj - g * p.c_out);
        uint4 v = make_uint4(0, 0, 0, 0);
        if (j < p.real) v = *(const uint4*)((const u16*)p.src + (g * p.real + j) * p.k + k0);
        *(uint4*)((u16*)p.dst + rj * p.k + k0) = v;
    }
}

struct ReduceArgs {
    u64 ws;    // [splits, m, k] f32 partial products
    u64 out;   // [m, k]
    u64 bias;  // the conv's own bias (k values) or 0
    i64 m;
    i32 k;
    i32 splits;
    Epilogue epi;
};

template <typename T> __device__ __forceinline__ void rd_add_pairs(float* v, const T* at, float scale) {
    const u32* a = (const u32*)at;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const u32 x = a[h];
        v[2 * h] += scale * to_f32(T{(u16)(x & 0xFFFFu)});
        v[2 * h + 1] += scale * to_f32(T{(u16)(x >> 16)});
    }
}

template <typename T> __device__ __forceinline__ void splitk_reduce(const ReduceArgs& p) {
    const i64 plane = p.m * (i64)p.k;
    const i64 total = plane / 4;
    const float* ws = (const float*)p.ws;
    for (i64 g = blockIdx.x * (i64)blockDim.x + threadIdx.x; g < total; g += (i64)gridDim.x * blockDim.x) {
        const i64 idx = g * 4;
        const int col = (int)(idx % p.k);
        float v[4] = {0.f, 0.f, 0.f, 0.f};
        for (int s = 0; s < p.splits; ++s) {
            const float4 a = *(const float4*)(ws + s * plane + idx);
            v[0] += a.x, v[1] += a.y, v[2] += a.z, v[3] += a.w;
        }
        if (p.bias) rd_add_pairs<T>(v, (const T*)p.bias + col, 1.f);
        if (p.epi.bias) rd_add_pairs<T>(v, (const T*)p.epi.bias + col, 1.f);
        if (p.epi.act != EPI_NONE) act_all_1exp<4>(p.epi.act, v);
        if (p.epi.clamp) epi_clamp_all<4>(p.epi, v);
        if (p.epi.residual) rd_add_pairs<T>(v, (const T*)p.epi.residual + idx, p.epi.beta);
        u32* o = (u32*)((T*)p.out + idx);
#pragma unroll
        for (int h = 0; h < 2; ++h)
            o[h] = (u32)FromF32<T>::go(v[2 * h]).bits | ((u32)FromF32<T>::go(v[2 * h + 1]).bits << 16);
    }
}

extern "C" __global__ void conv_sm90_splitk_reduce_bf16(ReduceArgs p) { splitk_reduce<bf16>(p); }
extern "C" __global__ void conv_sm90_splitk_reduce_f16(ReduceArgs p) { splitk_reduce<f16>(p); }
