#line 1 "conv_sm90.cu"
// conv_sm90.cu: conv2d forward on Hopper (sm_90a) as an implicit GEMM on wgmma tensor cores fed
// by TMA, with the epilogue (the conv's bias, then prelude.cuh's: bias, activation, clamp,
// beta * residual) applied in registers.
//
// GEMM view: out[M, K] = A[M, R*S*C] x B[R*S*C, K], where M = N*P*Q output pixels (the rows of
// the NHWC output), K = output channels, A is the im2col matrix of the NHWC input (never
// materialised) and B the filter as the graph holds it, RSCF ([R, S, C, K]: row (r, s, c) holds
// the K output channels), so no filter transform is needed. The reduction runs tap by tap
// (r, s), and within a tap over C in 64-channel (128-byte) slices.
//
// A: one TMA load in im2col mode per (tile, r, s, channel slice) brings 128 consecutive output
//    pixels x 64 channels. The tensor map (launch/conv_sm90.rs) describes the input [N, H, W, C]
//    with the conv's stride as the traversal stride and a pixel bounding box from -pad to the
//    last window corner, so walking 128 pixels from the tile's first one follows the output's
//    row-major (n, p, q) order across rows and images; the instruction's im2col offsets
//    (s * dilation_w, r * dilation_h) move every pixel to tap (r, s). Padding, channels past C
//    and pixels past the last image are zero-filled by TMA. K-major, 128-byte swizzle.
// B: tiled TMA over the filter viewed as [R*S, C, K]: boxes of 64 channels (rows) x 64 output
//    channels (columns, 128 bytes) x 1 tap, BN / 64 of them side by side per k-step (boxes
//    wholly past K are not loaded; their stale columns only feed accumulators that are never
//    stored). Channels past C and output channels past K are zero-filled. This is the N-major
//    operand of wgmma (imm-trans-b = 1) with the 128-byte swizzle, exactly as gemm_sm90.cu reads
//    a row-major B: 64-column groups BK * 128 bytes apart, 8-row groups 1024 bytes apart.
//
// Block: 3 warpgroups. Warpgroup 0 is the producer (setmaxnreg.dec to 40; one thread issues the
// TMA loads into a ring of STAGES buffers guarded by full/empty mbarriers); warpgroups 1 and 2
// each compute 64 rows of the 128 x BN tile with m64nBNk16 wgmma into BN/2 f32 registers per
// thread (setmaxnreg.inc to 232). BN is 64, 128 or 256 (chosen per shape on the host).
// The grid is persistent: block b takes tiles b, b + gridDim.x, ... (column tile fastest, so
// the blocks running at once share activation rows in L2). The ring and its phase bits run on
// across tiles (producer and consumers walk the same (tile, k-step) sequence), so the producer
// loads the next tile while the consumers run the epilogue of the current one. A stage is
// handed back (empty barrier, 8 arrivals: lane 0 of every consumer warp) only once the wgmmas that
// read it have completed (wgmma.wait_group), so a refill never overwrites data still being read.
// Shared memory is written only by TMA and read only by wgmma (both async proxy, ordered by the
// full barrier's complete_tx); nothing is written through the generic proxy, so no
// fence.proxy.async is needed. The epilogue (conv bias, bias, activation, clamp, beta * residual)
// runs in registers; the results leave through a per-warp shared-memory staging tile as 16-byte
// vectors (store_vec_staged; the staging area lies past the barriers, which the ring never
// touches) or, where the output is not 16-byte aligned, as pairs straight from the fragments.
// A 16-byte aligned residual is then added on the way out, read as 16-byte vectors
// (store_vec_residual, staged == 3) instead of as pairs in the fragments' scattered layout.
// Rows past M and columns past K are not stored.
//
// Split-K (args.splits > 1, chosen by the launcher for problems with few output tiles and long
// reductions): the work units are (tile, split) pairs, split fastest; split j of a tile reduces
// k-steps [j * ktiles / splits, (j + 1) * ktiles / splits) (never empty: splits <= ktiles) and
// stores its raw f32 accumulators to its own plane of the workspace [splits, M, K] (paired
// 8-byte stores, no atomics); conv_sm90_aux.cu's reduce kernel sums the planes in split order
// and applies the epilogue. The ring runs on across units exactly as across tiles.
//
// Residual prefetch (args.prefetch, unsplit convs with a 16-byte aligned residual): when the
// producer starts a tile it asks for the tile's residual rows in L2 (cp.async.bulk.prefetch.tensor
// over a 2-D map of the residual [M, K], one 64-column x 128-row box per B box), so the
// epilogue's residual loads, issued in chunks of several column groups at once, hit L2 instead
// of waiting on DRAM. With args.prefetch bit 1 (unsplit convs with a residual) each consumer warp
// also asks for its own 16 rows of the tile's residual when it starts the tile, one 128-byte
// line per lane, so those lines arrive during the mainloop whatever the producer's lead; the
// producer's prefetch is left out for residuals above half of L2 (it runs up to a ring ahead
// and evicted lines before their use). A prefetch only warms L2: it changes no result.
//
// Tiled A (args.tiled_a): a 1x1 conv with stride 1 and no padding reads x as the plain matrix
// [M, C]; map_a is then a tiled 2-D map with 64-channel x 128-row boxes and the same 128-byte
// swizzle, so the shared-memory tile is the same (rows past M are zero-filled).
//
// Staged epilogue (args.staged == 1, opt-in, unsplit): instead of storing the accumulator
// fragment as it lies (each warp store instruction then touches 8 rows x 16 bytes: 8 partial
// 32-byte sectors), each warp passes its 16 rows through a private shared-memory buffer 32
// columns at a time (f32, rows CV_SW floats apart: conflict-free float2 writes and float4
// reads) and reads them back row-contiguous: a lane then owns 4 consecutive columns of one
// row, so the bias, residual and output accesses are 8 bytes per lane and 64 contiguous bytes
// per row (whole sectors), and the next chunk's bias and residual are loaded while this chunk
// is computed.
// Same arithmetic in the same order as the register epilogue: the same bits. It measured slower
// than the default (math in registers, then store_vec_staged) on the ResNet-50 layers.
//
// Requirements (checked by the launcher, which falls back otherwise): bf16/f16; C % 8 == 0 and
// K % 8 == 0 (16-byte TMA strides); 16-byte aligned input and filter, 4-byte aligned output,
// bias and residual (paired accesses); stride <= 8; padding and the bounding box within the
// im2col corner range [-128, 127]; dilated taps (r - 1) * dilation <= 255; extents below 2^31.

#define CV_BM 128
#define CV_BK 64
#define CV_A_BYTES (CV_BM * CV_BK * 2)
#define CV_B_BOX_BYTES (64 * CV_BK * 2)

struct ConvArgs {
    u64 out;       // [M, K] (the NHWC output)
    i64 m;         // output pixels N * P * Q
    i32 k;         // output channels
    i32 pq, q;     // output pixels per image, output width
    i32 sh, sw;    // stride
    i32 ph, pw;    // padding before (top, left)
    i32 dh, dw;    // dilation
    i32 s;         // filter width
    i32 taps;      // R * S
    i32 c_tiles;   // 64-channel slices per tap
    i32 n_tiles;   // column tiles: ceil(K / BN)
    i32 tiles;     // row tiles * column tiles
    u64 bias;      // the conv's own bias (K values) or 0; added before the epilogue's
    Epilogue epi;  // out = beta * residual + clamp(act(acc + bias + epi.bias)) (prelude.cuh)
    u64 ws;        // split-K: the f32 workspace [splits, M, K] (0 when splits == 1)
    i32 splits;    // splits of the reduction (1: the epilogue runs here)
    i32 prefetch;  // bit 0: the producer prefetches each tile's residual rows into L2 through
                   // map_r; bit 1: each consumer warp prefetches its rows before the mainloop;
                   // bit 2: launched under programmatic stream serialization (wait first)
    i32 staged;    // 1: the staged epilogue (8-byte aligned out, biases and residual); 2: the
                   // results stored as 16-byte vectors staged through shared memory (16-byte
                   // aligned out); 3: as 2, the residual (16-byte aligned) added on the way out
    i32 tiled_a;   // nonzero: map_a is a tiled 2-D map of x as [M, C] (1x1, stride 1, no padding)
};

// 128 pixels x 64 channels of the input in im2col mode: coordinates (c, w, h, n) of the tile's
// first window corner, offsets (w, h) of the tap.
__device__ __forceinline__ void tma_im2col(void* dst, const TmaMap* map, u64* bar, int c, int w, int h, int n, u16 ow,
                                           u16 oh) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4, %5, %6}], [%2], {%7, %8};\n"
        ::"r"(s_addr(dst)), "l"((u64)map), "r"(s_addr(bar)), "r"(c), "r"(w), "r"(h), "r"(n), "h"(ow), "h"(oh)
        : "memory");
}

// Stages of the ring per column tile width: (128 + BN) x 64 16-bit elements each (192 KB in
// all), within the 227 KB of shared memory a block may have. launch/conv_sm90.rs mirrors this.
template <int BN> struct Ring { static const int stages = BN == 256 ? 4 : BN == 128 ? 6 : 8; };

// Column groups whose epilogue operands (bias pairs, residual pairs) are loaded at once: the
// loads of a chunk are in flight together, so a tile's epilogue waits on BN / 8 / CV_CHUNK
// round trips instead of BN / 8; a chunk's registers come on top of the BN / 2 accumulators
// (16 keeps BN = 256 free of spills). Chunk<BN> never exceeds the BN / 8 groups of a tile.
#define CV_CHUNK 16
template <int BN> struct Chunk { static const int n = BN / 8 < CV_CHUNK ? BN / 8 : CV_CHUNK; };

// d += bias[col] over the fragment (see the accumulator layout below); `bias` points at this
// thread's first column, column pair j exists while 8j < cols.
template <typename T, int BN> __device__ __forceinline__ void add_bias(float* d, const T* bias_at, int cols) {
    const u32* bias = (const u32*)bias_at;
#pragma unroll
    for (int j0 = 0; j0 < BN / 8; j0 += Chunk<BN>::n) {
        u32 b[Chunk<BN>::n];
#pragma unroll
        for (int i = 0; i < Chunk<BN>::n; ++i) b[i] = (j0 + i) * 8 < cols ? bias[(j0 + i) * 4] : 0u;
#pragma unroll
        for (int i = 0; i < Chunk<BN>::n; ++i) {
            const int j = j0 + i;
            const float b0 = lo_of<T>(b[i]), b1 = hi_of<T>(b[i]);
            d[j * 4] += b0, d[j * 4 + 1] += b1, d[j * 4 + 2] += b0, d[j * 4 + 3] += b1;
        }
        // Keeps the compiler from hoisting every chunk's loads ahead of the adds: with the
        // accumulators live there are no registers for them.
        asm volatile("" ::: "memory");
    }
}

// d += beta * residual over the fragment, rows row0 (has0) and row0 + 8 (has1); r0 and r1 point
// at this thread's first column of those rows. Missing elements (rows past M, columns past K)
// load nothing, add zeros and are never stored.
template <typename T, int BN>
__device__ __forceinline__ void add_residual(float* d, const u32* r0, const u32* r1, bool has0, bool has1, int cols,
                                             float beta) {
#pragma unroll
    for (int j0 = 0; j0 < BN / 8; j0 += Chunk<BN>::n) {
        u32 v0[Chunk<BN>::n], v1[Chunk<BN>::n];
#pragma unroll
        for (int i = 0; i < Chunk<BN>::n; ++i) {
            const bool col = (j0 + i) * 8 < cols;
            v0[i] = has0 && col ? r0[(j0 + i) * 4] : 0u;
            v1[i] = has1 && col ? r1[(j0 + i) * 4] : 0u;
        }
#pragma unroll
        for (int i = 0; i < Chunk<BN>::n; ++i) {
            const int j = j0 + i;
            d[j * 4] += beta * lo_of<T>(v0[i]), d[j * 4 + 1] += beta * hi_of<T>(v0[i]);
            d[j * 4 + 2] += beta * lo_of<T>(v1[i]), d[j * 4 + 3] += beta * hi_of<T>(v1[i]);
        }
        asm volatile("" ::: "memory");
    }
}

// The staged epilogue's buffer: per consumer warp 16 rows of 32 f32 columns, CV_SW floats apart
// (the 8-float pad moves each row 8 banks over: a float2 store of 16 lanes over 4 rows and a
// float4 load of 8 lanes along a row hit 32 distinct banks).
#define CV_SW 40
#define CV_STAGE_FLOATS (8 * 16 * CV_SW)

template <typename T> __device__ __forceinline__ void add4(float* v, const uint2 x, float scale) {
    v[0] += scale * lo_of<T>(x.x), v[1] += scale * hi_of<T>(x.x);
    v[2] += scale * lo_of<T>(x.y), v[3] += scale * hi_of<T>(x.y);
}

// Loads of one 32-column chunk of the staged epilogue for this lane: its 4 columns `col` of the
// conv bias, the epilogue bias and the residual rows row0 + 4 * it (zeros where absent).
template <typename T> struct StagedLoads {
    uint2 cb, eb, res[4];
    __device__ __forceinline__ void load(const ConvArgs& p, i64 row0, int col) {
        const uint2 z = make_uint2(0u, 0u);
        const bool in = col < p.k;
        cb = in && p.bias ? *(const uint2*)((const T*)p.bias + col) : z;
        eb = in && p.epi.bias ? *(const uint2*)((const T*)p.epi.bias + col) : z;
#pragma unroll
        for (int it = 0; it < 4; ++it) {
            const i64 row = row0 + 4 * it;
            res[it] = in && row < p.m && p.epi.residual ? *(const uint2*)((const T*)p.epi.residual + row * p.k + col) : z;
        }
    }
};

// The staged epilogue of one consumer warp (see the header): rows rowbase..rowbase + 15 of the
// tile, columns n0..n0 + BN - 1; `buf` is the warp's CV_SW x 16 floats.
template <typename T, int BN>
__device__ __forceinline__ void staged_epilogue(const float* d, float* buf, const ConvArgs& p, i64 rowbase, int n0,
                                                int lane) {
    const int r_in = lane / 8, cc = (lane % 8) * 4;  // this lane's first row (of 4) and its columns
    StagedLoads<T> next;
    next.load(p, rowbase + r_in, n0 + cc);
#pragma unroll
    for (int h = 0; h < BN / 32; ++h) {
        const StagedLoads<T> cur = next;
        if (h + 1 < BN / 32) next.load(p, rowbase + r_in, n0 + 32 * (h + 1) + cc);
        __syncwarp();
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) {
            const int j = 4 * h + jj;
            float* at = buf + (lane / 4) * CV_SW + jj * 8 + 2 * (lane % 4);
            *(float2*)at = make_float2(d[j * 4], d[j * 4 + 1]);
            *(float2*)(at + 8 * CV_SW) = make_float2(d[j * 4 + 2], d[j * 4 + 3]);
        }
        __syncwarp();
        const int col = n0 + 32 * h + cc;
        if (col < p.k) {
#pragma unroll
            for (int it = 0; it < 4; ++it) {
                const int r = r_in + 4 * it;
                const i64 row = rowbase + r;
                const float4 a = *(const float4*)(buf + r * CV_SW + cc);
                float v[4] = {a.x, a.y, a.z, a.w};
                if (p.bias) add4<T>(v, cur.cb, 1.f);
                if (p.epi.bias) add4<T>(v, cur.eb, 1.f);
                if (p.epi.act != EPI_NONE) act_all_1exp<4>(p.epi.act, v);
                if (p.epi.clamp) epi_clamp_all<4>(p.epi, v);
                if (p.epi.residual) add4<T>(v, cur.res[it], p.epi.beta);
                if (row < p.m)
                    *(uint2*)((T*)p.out + row * p.k + col) = make_uint2(pack2<T>(v[0], v[1]), pack2<T>(v[2], v[3]));
            }
        }
    }
}

// The stores with p.staged == 2 (the launcher's default for unsplit launches whose output is
// 16-byte aligned), after the epilogue's math: the warp's 16 x BN fragment (d, the results in
// f32) passes through its staging tile (sm90_pipe.cuh) 64 columns at a time and leaves as
// 16-byte vectors, 8 lanes per 128-byte row piece, instead of 4-byte pairs scattered over 8
// rows per store instruction (as gemm_sm90p.cu's store_tile_staged; K % 8 == 0, so a vector is
// wholly inside the row or wholly past column K). row_w: the warp's first row; n0: the tile's
// first column; wid: the warp's index 0..7 among the consumer warps.
template <typename T, int BN>
__device__ __forceinline__ void store_vec_staged(const float* d, const u8* staging, const ConvArgs& p, i64 row_w,
                                                   int n0, int wid, int lane) {
    const u32 stg = s_addr(staging) + wid * STG_WARP_BYTES;
    const u32 w0 = stg + (lane / 4) * STG_STRIDE + (lane % 4) * 4, w1 = w0 + 8 * STG_STRIDE;
    const int rr = lane / 8, v = lane % 8;
    const u32 rd = stg + rr * STG_STRIDE + v * 16;
    T* out = (T*)p.out + (row_w + rr) * p.k + n0 + v * 8;
    // Row 4 i + rr exists while 4 i < rows; this lane's vector of chunk q while 64 q < cols_v.
    const i64 rows = p.m - row_w - rr;
    const int cols_v = p.k - n0 - v * 8;
#pragma unroll
    for (int q = 0; q < BN / 64; ++q) {
        warp_sync();  // the previous chunk's (or tile's) reads are done
#pragma unroll
        for (int jj = 0; jj < 8; ++jj) {
            const int j = q * 8 + jj;
            sts32(w0 + jj * 16, pack2<T>(d[j * 4], d[j * 4 + 1]));
            sts32(w1 + jj * 16, pack2<T>(d[j * 4 + 2], d[j * 4 + 3]));
        }
        warp_sync();
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            u32 a, b, c, e;
            lds128(rd + i * 4 * STG_STRIDE, a, b, c, e);
            if (q * 64 < cols_v && i * 4 < rows) stg128(out + (i64)(i * 4) * p.k + q * 64, a, b, c, e);
        }
    }
}

// The stores with p.staged == 3 (as 2, with a 16-byte aligned residual): the residual is added
// on the way out instead of in the fragments. The warp's results (bias, activation and clamp
// applied) pass through the staged epilogue's buffer as f32, 32 columns at a time; a lane then
// owns 8 consecutive columns of rows lane / 4 and + 8, reads the residual there as 16-byte
// vectors (64 contiguous bytes per row piece, where the fragments read 4-byte pairs over 8 rows)
// and stores 16-byte vectors. The next chunk's residual loads are in flight while this one is
// stored. Same arithmetic as add_residual (d += beta * r, one rounding at the store); the
// compiler may contract the multiply-add in one path only, so results agree to one unit in the
// last place (tests/test_gpu_conv_sm90_more.py). Lanes of odd rows read their two 16-byte halves in the other order, which keeps the
// buffer reads free of bank conflicts.
template <typename T, int BN>
__device__ __forceinline__ void store_vec_residual(const float* d, float* buf, const ConvArgs& p, i64 row_w, int n0,
                                                   int lane) {
    const int r = lane / 4, v = lane % 4, swap = r & 1;
    const i64 row_a = row_w + r, row_b = row_a + 8;
    const bool has_a = row_a < p.m, has_b = row_b < p.m;
    const T* res = (const T*)p.epi.residual;
    T* out = (T*)p.out;
    const uint4 z = make_uint4(0u, 0u, 0u, 0u);
    uint4 na = z, nb = z;
    {
        const int col = n0 + 8 * v;
        if (col < p.k && has_a) na = *(const uint4*)(res + row_a * p.k + col);
        if (col < p.k && has_b) nb = *(const uint4*)(res + row_b * p.k + col);
    }
#pragma unroll
    for (int h = 0; h < BN / 32; ++h) {
        const uint4 ra = na, rb = nb;
        const int col = n0 + 32 * h + 8 * v;
        if (h + 1 < BN / 32) {
            na = col + 32 < p.k && has_a ? *(const uint4*)(res + row_a * p.k + col + 32) : z;
            nb = col + 32 < p.k && has_b ? *(const uint4*)(res + row_b * p.k + col + 32) : z;
        }
        __syncwarp();  // the previous chunk's (or tile's) reads are done
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) {
            const int j = 4 * h + jj;
            float* at = buf + r * CV_SW + jj * 8 + 2 * v;
            *(float2*)at = make_float2(d[j * 4], d[j * 4 + 1]);
            *(float2*)(at + 8 * CV_SW) = make_float2(d[j * 4 + 2], d[j * 4 + 3]);
        }
        __syncwarp();
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int rr = r + 8 * i;
            const float* src = buf + rr * CV_SW + 8 * v;
            const float4 x = *(const float4*)(src + 4 * swap), y = *(const float4*)(src + 4 - 4 * swap);
            float f[8] = {x.x, x.y, x.z, x.w, y.x, y.y, y.z, y.w};
            if (swap) f[0] = y.x, f[1] = y.y, f[2] = y.z, f[3] = y.w, f[4] = x.x, f[5] = x.y, f[6] = x.z, f[7] = x.w;
            const uint4 rv = i == 0 ? ra : rb;
            const u32 w[4] = {rv.x, rv.y, rv.z, rv.w};
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                f[2 * e] += p.epi.beta * lo_of<T>(w[e]);
                f[2 * e + 1] += p.epi.beta * hi_of<T>(w[e]);
            }
            if (col < p.k && (i == 0 ? has_a : has_b))
                stg128(out + (i == 0 ? row_a : row_b) * p.k + col, pack2<T>(f[0], f[1]), pack2<T>(f[2], f[3]),
                       pack2<T>(f[4], f[5]), pack2<T>(f[6], f[7]));
        }
    }
}

// Hands a stage back: one arrival per consumer warp (lane 0, once every lane has passed the
// wgmma.wait_group that retired the warp's MMAs reading it), 8 in all, as gemm_sm90p.cu does
// (one per thread, 256, measured the same on an H200).
__device__ __forceinline__ void release_stage(u64* empty, int lane) {
    __syncwarp();
    if (lane == 0) mbar_arrive(empty);
}

// PLAIN: the launch has no epilogue (no bias, activation, clamp or residual), no split-K and no
// staged epilogue, so the tile's end is only the conversion and the stores. A short tile (one per
// block on most ResNet layers) runs its epilogue once with a cold instruction cache; in the
// general kernel that path jumps across the code of every epilogue option, and the misses cost
// more than the stores (ncu: "no instruction" stalls at each jump).
template <typename T, bool BF16, int BN, bool PLAIN>
__device__ __forceinline__ void conv_sm90(const TmaMap* map_a, const TmaMap* map_b, const TmaMap* map_r,
                                          const ConvArgs& p) {
    constexpr int STAGES = Ring<BN>::stages;
    constexpr int STAGE_BYTES = CV_A_BYTES + (BN / 64) * CV_B_BOX_BYTES;
    extern __shared__ u8 raw_smem[];
    // Stage buffers start on a 1024-byte boundary (the swizzle pattern repeats every 1024 bytes).
    u8* smem = (u8*)(((u64)raw_smem + 1023) & ~(u64)1023);
    u64* full = (u64*)(smem + STAGES * STAGE_BYTES);
    u64* empty = full + STAGES;
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
    const int ktiles = p.taps * p.c_tiles;
    const int units = p.tiles * p.splits;
    if (threadIdx.x == 0) {
        tma_prefetch_desc(map_a);
        tma_prefetch_desc(map_b);
        if (p.prefetch & 1) tma_prefetch_desc(map_r);
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], 8);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (p.prefetch & 4) {
        // Launched under programmatic stream serialization (unless MAX_CONV_SM90_PDL=0), the
        // grid may start while the stream's previous kernel drains: nothing in global memory is
        // read or written before this wait (the setup above touches shared memory and the kernel's
        // parameters only). The next such grid may then launch; its blocks start on the SMs
        // this grid's blocks leave.
        asm volatile("griddepcontrol.wait;\n" ::: "memory");
        asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
    }
    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        if (tid == 0) {
            int stage = 0;
            u32 phase = 0;
            for (int unit = blockIdx.x; unit < units; unit += gridDim.x) {
                const int tile = unit / p.splits, split = unit - tile * p.splits;
                const int k0 = (int)((i64)split * ktiles / p.splits), k1 = (int)((i64)(split + 1) * ktiles / p.splits);
                const int mt = tile / p.n_tiles, n0 = (tile - mt * p.n_tiles) * BN;
                // B boxes holding at least one output channel below K.
                const int boxes = min(BN / 64, (p.k - n0 + 63) / 64);
                const u32 bytes = CV_A_BYTES + boxes * CV_B_BOX_BYTES;
                // The tile's first output pixel (image, row, column) and its window corner.
                const i64 m0 = (i64)mt * CV_BM;
                const int img = (int)(m0 / p.pq);
                const int rem = (int)(m0 - (i64)img * p.pq);
                const int oy = rem / p.q, ox = rem - (rem / p.q) * p.q;
                const int h0 = oy * p.sh - p.ph, w0 = ox * p.sw - p.pw;
                if (!PLAIN && (p.prefetch & 1))
                    for (int j = 0; j < boxes; ++j) tma_prefetch_2d(map_r, n0 + 64 * j, (int)m0);
                // The k-step's tap t = (r, s) and channel slice ct, advanced by counting: this one
                // thread issues every load of the block, and per-step divisions made it the
                // pipeline's bottleneck on short tiles (consumers waited on full stages while it
                // never waited on an empty one).
                int t = k0 / p.c_tiles, ct = k0 - t * p.c_tiles;
                int r = t / p.s, s = t - r * p.s;
                int ow = s * p.dw, oh = r * p.dh;
                for (int kt = k0; kt < k1; ++kt) {
                    mbar_wait_spin(&empty[stage], phase ^ 1);
                    u8* sa = smem + stage * STAGE_BYTES;
                    mbar_expect_tx(&full[stage], bytes);
                    if (p.tiled_a) tma_load_2d(sa, map_a, &full[stage], ct * CV_BK, (int)m0);
                    else tma_im2col(sa, map_a, &full[stage], ct * CV_BK, w0, h0, img, (u16)ow, (u16)oh);
                    for (int j = 0; j < boxes; ++j)
                        tma_load_3d(sa + CV_A_BYTES + j * CV_B_BOX_BYTES, map_b, &full[stage], n0 + 64 * j, ct * CV_BK, t);
                    if (++stage == STAGES) stage = 0, phase ^= 1;
                    if (++ct == p.c_tiles) {
                        ct = 0, ++t, ++s, ow += p.dw;
                        if (s == p.s) s = 0, ow = 0, ++r, oh += p.dh;
                    }
                }
            }
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    const int c = wg - 1;  // consumer 0 takes rows 0..63 of the tile, consumer 1 rows 64..127
    const int warp = tid / 32, lane = tid % 32;
    float d[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) d[i] = 0.f;
    int stage = 0;
    u32 phase = 0;
    for (int unit = blockIdx.x; unit < units; unit += gridDim.x) {
        const int tile = unit / p.splits, split = unit - tile * p.splits;
        const int k0 = (int)((i64)split * ktiles / p.splits), k1 = (int)((i64)(split + 1) * ktiles / p.splits);
        const int mt = tile / p.n_tiles, n0 = (tile - mt * p.n_tiles) * BN;
        if (!PLAIN && (p.prefetch & 2)) {
            // This warp's 16 rows of the tile's residual into L2 before the mainloop (one
            // 128-byte line of 64 columns per lane and step), so that the epilogue's loads,
            // issued a few at a time, hit L2 instead of each waiting on DRAM.
            const i64 rw = (i64)mt * CV_BM + c * 64 + warp * 16;
#pragma unroll
            for (int i = lane; i < 16 * (BN / 64); i += 32) {
                const i64 row = rw + i / (BN / 64);
                const int col = n0 + (i % (BN / 64)) * 64;
                if (row < p.m && col < p.k) prefetch_l2((const T*)p.epi.residual + row * p.k + col);
            }
        }
        int prev = 0;
        for (int kt = k0; kt < k1; ++kt) {
            mbar_wait_spin(&full[stage], phase);
            const u8* sa = smem + stage * STAGE_BYTES + c * (64 * 128);
            const u8* sb = smem + stage * STAGE_BYTES + CV_A_BYTES;
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < CV_BK / 16; ++kk)
                Wgmma<BN, BF16, true>::run(d, sw128_desc(sa) + 2 * kk, sw128_desc_nmajor(sb) + kk * (2048 >> 4),
                                     (kt > k0 || kk > 0) ? 1u : 0u);
            wgmma_commit();
            // Keep this k-step's MMAs in flight; once the previous step's have finished, its
            // stage can be refilled.
            wgmma_wait1();
            if (kt > k0) release_stage(&empty[prev], lane);
            prev = stage;
            if (++stage == STAGES) stage = 0, phase ^= 1;
        }
        wgmma_wait0();
        release_stage(&empty[prev], lane);
        // Accumulator layout of m64nN: warp w of the warpgroup owns rows 16w..16w+15; lane l
        // holds rows l/4 and l/4+8, columns 8j + 2(l%4) and +1, for j = 0..N/8-1.
        const i64 row0 = (i64)mt * CV_BM + c * 64 + warp * 16 + lane / 4;
        const int col0 = n0 + (lane % 4) * 2;
        // Column pair j (col0 + 8j, + 1) exists while 8j < cols; K is even, so both do.
        const int cols = p.k - col0;
        const bool has0 = row0 < p.m, has1 = row0 + 8 < p.m;
        if (!PLAIN && p.splits > 1) {
            // This split's raw partial products into its plane of the workspace.
            float* w0 = (float*)p.ws + (i64)split * p.m * p.k + row0 * p.k + col0;
            float* w1 = w0 + 8 * (i64)p.k;
#pragma unroll
            for (int j = 0; j < BN / 8; ++j) {
                if (has0 && j * 8 < cols) *(float2*)(w0 + j * 8) = make_float2(d[j * 4], d[j * 4 + 1]);
                if (has1 && j * 8 < cols) *(float2*)(w1 + j * 8) = make_float2(d[j * 4 + 2], d[j * 4 + 3]);
            }
            continue;
        }
        if (!PLAIN && p.staged == 1) {
            float* buf = (float*)(empty + STAGES) + (c * 4 + warp) * (16 * CV_SW);
            staged_epilogue<T, BN>(d, buf, p, (i64)mt * CV_BM + c * 64 + warp * 16, n0, lane);
            continue;
        }
        if (!PLAIN && p.bias) add_bias<T, BN>(d, (const T*)p.bias + col0, cols);
        if (!PLAIN && p.epi.bias) add_bias<T, BN>(d, (const T*)p.epi.bias + col0, cols);
        if (!PLAIN && p.epi.act != EPI_NONE) act_all_1exp<BN / 2>(p.epi.act, d);
        if (!PLAIN && p.epi.clamp) epi_clamp_all<BN / 2>(p.epi, d);
        const i64 offset = row0 * p.k + col0;
        if (!PLAIN && p.staged == 3) {
            float* buf = (float*)(empty + STAGES) + (c * 4 + warp) * (16 * CV_SW);
            store_vec_residual<T, BN>(d, buf, p, (i64)mt * CV_BM + c * 64 + warp * 16, n0, lane);
            continue;
        }
        if (!PLAIN && p.epi.residual) {
            const u32* r0 = (const u32*)((const T*)p.epi.residual + offset);
            const u32* r1 = (const u32*)((const T*)p.epi.residual + offset + 8 * (i64)p.k);
            add_residual<T, BN>(d, r0, r1, has0, has1, cols, p.epi.beta);
        }
        if (p.staged == 2) {
            store_vec_staged<T, BN>(d, (const u8*)(empty + STAGES), p, (i64)mt * CV_BM + c * 64 + warp * 16, n0,
                                    c * 4 + warp, lane);
            continue;
        }
        u32* o0 = (u32*)((T*)p.out + offset);
        u32* o1 = (u32*)((T*)p.out + offset + 8 * (i64)p.k);
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
            if (has0 && j * 8 < cols) o0[j * 4] = pack2<T>(d[j * 4], d[j * 4 + 1]);
            if (has1 && j * 8 < cols) o1[j * 4] = pack2<T>(d[j * 4 + 2], d[j * 4 + 3]);
        }
    }
}

#define CONV_ENTRY(NAME, T, BF16, BN, PLAIN)                                                               \
    extern "C" __global__ void __launch_bounds__(384, 1)                                                  \
        NAME(const __grid_constant__ TmaMap map_a, const __grid_constant__ TmaMap map_b,                 \
             const __grid_constant__ TmaMap map_r, ConvArgs p) {                                          \
        CONV_BODY(T, BF16, BN, PLAIN)                                                                   \
    }
// wgmma and setmaxnreg exist on sm_90a only; on any other target the entry points trap (the
// launcher never uses them there), so a wrong launch fails loudly instead of leaving `out` unset.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define CONV_BODY(T, BF16, BN, PLAIN) conv_sm90<T, BF16, BN, PLAIN>(&map_a, &map_b, &map_r, p);
#else
#define CONV_BODY(T, BF16, BN, PLAIN) asm volatile("trap;");
#endif
CONV_ENTRY(conv_sm90_bf16_n64, bf16, true, 64, false)
CONV_ENTRY(conv_sm90_bf16_n128, bf16, true, 128, false)
CONV_ENTRY(conv_sm90_bf16_n256, bf16, true, 256, false)
CONV_ENTRY(conv_sm90_f16_n64, f16, false, 64, false)
CONV_ENTRY(conv_sm90_f16_n128, f16, false, 128, false)
CONV_ENTRY(conv_sm90_f16_n256, f16, false, 256, false)
CONV_ENTRY(conv_sm90_bf16_n64_plain, bf16, true, 64, true)
CONV_ENTRY(conv_sm90_bf16_n128_plain, bf16, true, 128, true)
CONV_ENTRY(conv_sm90_bf16_n256_plain, bf16, true, 256, true)
CONV_ENTRY(conv_sm90_f16_n64_plain, f16, false, 64, true)
CONV_ENTRY(conv_sm90_f16_n128_plain, f16, false, 128, true)
CONV_ENTRY(conv_sm90_f16_n256_plain, f16, false, 256, true)
