// conv_sm90_aux.cu: the helpers of the Hopper conv2d (conv_sm90.cu, launched by
// launch/conv_sm90.rs and its submodules), plain CUDA that runs on any architecture:
//
// * conv_sm90_pad_x / conv_sm90_pad_f: channel padding, for inputs whose channel count C is not
//   a multiple of 8 (the kernel's TMA strides must be multiples of 16 bytes). The input
//   [N, H, W, C] becomes x' [N, H', Q', C'] and the RSCF filter, as [R*S*C, K], becomes
//   f' [G, C', K] (f'[g, e] = f[g*real + e] for e < real and g*real + e < R*S*C, else 0), so the
//   padded conv is the same sum plus exact zeros. In general
//     x'[n, t, q, (j*F + s)*C + c] = x[n, t*a + j - b, q*sw - pw + s*dw, c]  (j < J, s < F)
//   and zero outside the input and for channels past J*F*C. Three forms (launch/conv_sm90/pad.rs
//   picks one):
//   - plain: J = F = 1, a = 1, b = 0, H' = H, Q' = W, C' = C rounded up to 8; G = R*S, real = C.
//   - columns folded (a 1-D im2col along the width): J = 1, F = S, a = 1, b = 0, H' = H,
//     Q' = Q (the output width), C' = S*C rounded up to 8; the conv becomes R x 1 with stride
//     (sh, 1), padding (ph, 0) and dilation (dh, 1); G = R, real = S*C.
//   - rows and columns folded (stride sh > 1, dh = 1): J = sh input rows of the columns fold
//     side by side, a = sh, b = ph, H' = P + R' - 1 with R' = ceil(R / sh), C' = sh*S*C rounded
//     up to 8; the conv becomes R' x 1 with stride 1 and no padding (x' row p + i holds input
//     rows p*sh - ph + i*sh + j, that is filter rows r = i*sh + j), G = R', real = sh*S*C, and
//     filter rows r >= R are zero. For the ResNet stem (C = 3, 7x7, stride 2) that is 4 k-steps
//     of 48 channels (42 real) per tile, against 7 of 24 (21) with the columns fold, for a copy
//     of about the same size.
//   x' is written one (row, segment of Q') unit per block: the J input row spans the segment
//   needs are read, coalesced (4-byte loads where every input row starts 4-byte aligned), into
//   shared memory (zeros outside the input), then each thread writes 8 channels (16 bytes) at
//   a time from there. Both work on raw 16-bit values (bf16 and f16 alike): C' and K are
//   multiples of 8, the destinations are fresh allocations (256-byte aligned) and the filter is
//   16-byte aligned (checked by the launcher).
//
// * conv_sm90_splitk_reduce_<dtype>: the split-K epilogue. The conv kernel with S > 1 splits of
//   the reduction writes S f32 partial products [S, M, K] (each split its own plane, no
//   atomics); this kernel sums them in split order (deterministic), then applies the conv's
//   bias and prelude.cuh's Epilogue exactly as the conv kernel's register epilogue does (conv
//   bias, epilogue bias, activation, clamp, + beta * residual) and rounds once to the output
//   type. Four consecutive columns per thread (K % 8 == 0): 16-byte partial loads, 4-byte
//   bias, residual and output accesses (those are only 4-byte aligned).

struct PadXArgs {
    u64 src;       // [N, H, W, C]
    u64 dst;       // [N, H', Q', C']
    i64 units;     // N * H' * segments
    i32 h_in, w_in, c_in;
    i32 h_out, q_out, c_out;
    i32 rows, row_step, row_pad;  // J, a, b
    i32 fold, sw, pw, dw;         // F and the width's stride, padding and dilation
    i32 seg;       // output pixels per unit (the last unit of a row may have fewer)
    i32 span;      // input pixels of a unit's row span: (seg - 1) * sw + (F - 1) * dw + 1
    i32 pad;
};

// Words of shared memory per input row span of `run` words: room for one word of lead (the
// pair loads' alignment) and even, so that every span starts 4-byte aligned.
__device__ __forceinline__ int pad_x_stride(int run) { return (run + 3) & ~1; }

// i / n for 0 <= i, n < 2^20, without an integer division.
__device__ __forceinline__ int pad_x_div(int i, int n, float inv) {
    int q = __float2int_rz(__int2float_rn(i) * inv);
    if (q * n > i) --q;
    if ((q + 1) * n <= i) ++q;
    return q;
}

// The shared-memory offsets of the 8 channels e0 .. e0 + 7 of one x' pixel, relative to the
// pixel's first input column in the spans (each `stride` words, its input words from `lead`
// on), -1 for the padding channels (e >= J * F * C).
__device__ __forceinline__ void pad_x_offsets(const PadXArgs& p, int stride, int lead, int e0, int (&off)[8]) {
    const int pix = p.fold * p.c_in;
    int j = e0 / pix;
    int s = (e0 - j * pix) / p.c_in;
    int c = e0 - j * pix - s * p.c_in;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
        off[e] = j < p.rows ? j * stride + lead + s * p.dw * p.c_in + c : -1;
        if (++c == p.c_in) {
            c = 0;
            if (++s == p.fold) s = 0, ++j;
        }
    }
}

// The 8 channels of x' pixel ql of the unit from the spans, as one 16-byte store.
__device__ __forceinline__ void pad_x_store(const PadXArgs& p, const u16* spans, const int (&off)[8], int ql, u16* dst) {
    const int at = ql * p.sw * p.c_in;
    u32 v[4] = {0u, 0u, 0u, 0u};
#pragma unroll
    for (int e = 0; e < 8; ++e)
        if (off[e] >= 0) v[e / 2] |= (u32)spans[at + off[e]] << (16 * (e % 2));
    *(uint4*)dst = make_uint4(v[0], v[1], v[2], v[3]);
}

// One block of 256 threads per unit (grid-stride), J * pad_x_stride(span * C) 16-bit words of
// dynamic shared memory; 6 blocks per SM (40 registers).
extern "C" __global__ void __launch_bounds__(256, 6) conv_sm90_pad_x(PadXArgs p) {
    extern __shared__ u16 rows_smem[];
    const int segs = (p.q_out + p.seg - 1) / p.seg;
    const int groups = p.c_out / 8;
    const int stride = pad_x_stride(p.span * p.c_in);
    const int wc = p.w_in * p.c_in;  // < 2^31 (checked by the launcher)
    // Input words are read in pairs (4-byte loads) where every row starts 4-byte aligned.
    const bool pairs = (wc & 1) == 0 && (p.src & 3) == 0;
    const int width = pairs ? stride / 2 : stride;  // loads per span
    const int total = p.rows * width;
    const float inv = 1.0f / (float)width;
    // Each thread keeps one 8-channel group (and so its 8 offsets) for the whole unit and
    // steps over the pixels, `per` at a time; with more groups than threads, it loops over
    // groups too.
    const int per = blockDim.x / groups;
    for (i64 u = blockIdx.x; u < p.units; u += gridDim.x) {
        const i64 row = u / segs;             // n * H' + t
        const int q0 = (int)(u - row * segs) * p.seg;
        const int nq = min(p.seg, p.q_out - q0);
        const i64 n = row / p.h_out;
        const int t = (int)(row - n * p.h_out);
        const int h0 = t * p.row_step - p.row_pad;
        // Span j holds the words of input row h0 + j from w0 * C - lead on (zeros outside the
        // input: a pixel is inside exactly when its words are), lead = 1 where pairs need the
        // even word before. Eight loads per thread are in flight at once: a unit is only a few
        // KB, so it is their latency that counts.
        const int w0c = (q0 * p.sw - p.pw) * p.c_in;
        const int lead = pairs ? (w0c & 1) : 0;
        const u16* image = (const u16*)p.src + n * p.h_in * (i64)wc;
        for (int base = 0; base < total; base += 8 * blockDim.x) {
            u32 v[8];
#pragma unroll
            for (int k = 0; k < 8; ++k) {
                const int i = base + k * blockDim.x + threadIdx.x;
                const int j = pad_x_div(i, width, inv);
                const int h = h0 + j;
                const int at = w0c - lead + (pairs ? 2 : 1) * (i - j * width);
                const bool inside = i < total && h >= 0 && h < p.h_in && at >= 0 && at < wc;
                const u16* from = image + (i64)h * wc + at;
                v[k] = !inside ? 0u : pairs ? *(const u32*)from : (u32)*from;
            }
#pragma unroll
            for (int k = 0; k < 8; ++k) {
                const int i = base + k * blockDim.x + threadIdx.x;
                if (i < total) {
                    if (pairs) ((u32*)rows_smem)[i] = v[k];
                    else rows_smem[i] = (u16)v[k];
                }
            }
        }
        __syncthreads();
        u16* out = (u16*)p.dst + (row * p.q_out + q0) * p.c_out;
        int off[8];
        if (per > 0) {
            if (threadIdx.x < per * groups) {
                const int g = threadIdx.x % groups;
                pad_x_offsets(p, stride, lead, g * 8, off);
                for (int ql = threadIdx.x / groups; ql < nq; ql += per)
                    pad_x_store(p, rows_smem, off, ql, out + (i64)ql * p.c_out + g * 8);
            }
        } else {
            for (int g = threadIdx.x; g < groups; g += blockDim.x) {
                pad_x_offsets(p, stride, lead, g * 8, off);
                for (int ql = 0; ql < nq; ++ql) pad_x_store(p, rows_smem, off, ql, out + (i64)ql * p.c_out + g * 8);
            }
        }
        __syncthreads();
    }
}

struct PadFArgs {
    u64 src;       // [R*S*C, k]
    u64 dst;       // [g, c_out, k]
    i64 g;         // filter rows of f': R' (rows folded), R (columns folded) or R * S (plain)
    i64 total;     // rows of the source, R * S * C
    i32 real;      // source rows per f' row: J * S * C, S * C or C
    i32 c_out;     // channels per row in the destination (a multiple of 8, >= real)
    i32 k;         // output channels (a multiple of 8)
    i32 pad;
};

extern "C" __global__ void conv_sm90_pad_f(PadFArgs p) {
    const int kg = p.k / 8;
    const i64 all = p.g * p.c_out * kg;
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < all; i += (i64)gridDim.x * blockDim.x) {
        const i64 rj = i / kg;  // g * c_out + j
        const int k0 = (int)(i - rj * kg) * 8;
        const i64 g = rj / p.c_out;
        const int j = (int)(rj - g * p.c_out);
        const i64 from = g * p.real + j;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (j < p.real && from < p.total) v = *(const uint4*)((const u16*)p.src + from * p.k + k0);
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
