#line 1 "conv_sm90.cuh"
// conv_sm90.cuh: the Hopper conv2d's arguments and the end of its tiles (conv_sm90.cu, whose
// header describes the kernel, follows this file in the module): the epilogue's math in the
// accumulator fragments, the staged forms of the stores, and tile_out, which runs one consumer
// warp's 16 rows of a tile through them.

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
                   // bit 2: launched under programmatic stream serialization (wait first);
                   // bit 3: the producer loads each tile's residual into the ring through map_r
                   // (64 x 64 boxes; staged == 3, unsplit); bit 4: with bits 3 and 5, the lean
                   // entries load it into a buffer of its own instead (conv_sm90.cu's "Residual
                   // buffer"); bit 5: with bit 3, the lean entries write their results over
                   // the residual's slots and store them from there (ring_out; by TMA through
                   // map_o, or with bit 7 as 16-byte vectors); bit 6: the lean entries (up to 128
                   // wide) load their biases when a warp starts a tile (LeanBias); bits 8-15: rows
                   // per tile below 128 (a multiple of 16) for the plain ping-pong entries, or 0;
                   // bit 16: with bit 5 and relu, ring_out's packed arithmetic (set where beta
                   // is exact in T)
    i32 staged;    // 0: stored from the fragments; 2: the results stored as 16-byte vectors
                   // staged through shared memory (16-byte aligned out); 3: as 2, the residual
                   // (16-byte aligned) added on the way out
    i32 tiled_a;   // nonzero: map_a is a tiled 2-D map of x as [M, C] (1x1, stride 1, no padding)
};

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

// The staging buffer of the 16-byte stores: per consumer warp 16 rows of 32 f32 columns, CV_SW floats apart
// (the 8-float pad moves each row 8 banks over: a float2 store of 16 lanes over 4 rows and a
// float4 load of 8 lanes along a row hit 32 distinct banks).
#define CV_SW 40
#define CV_STAGE_FLOATS (8 * 16 * CV_SW)

// The stores with p.staged == 2 (the launcher's default for unsplit launches whose output is
// 16-byte aligned), after the epilogue's math: the warp's 16 x BN fragment (d, the results in
// f32) passes through its staging tile (sm90_pipe.cuh) 64 columns at a time and leaves as
// 16-byte vectors, 8 lanes per 128-byte row piece, instead of 4-byte pairs scattered over 8
// rows per store instruction (as gemm_sm90p's store_tile_staged; K % 8 == 0, so a vector is
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

// One consumer warp's residual for the stores with p.staged == 3, loaded when the warp starts
// the tile (before its mainloop) and held in registers until the epilogue: lane l's rows
// row_w + l / 4 (a) and + 8 (b), 8 columns (one 16-byte vector) at n0 + 32 h + 8 (l % 4) for
// h < BN / 32; zeros where a row is past M or a vector past K. Issuing the whole tile's loads
// at once, a mainloop ahead, takes the residual's L2 (or DRAM) latency out of the epilogue,
// which otherwise waits on BN / 32 round trips. It costs BN / 4 registers a thread per 16-row
// half on top of the BN / 2 accumulators: ptxas -v showed spills wherever the accumulators
// were more than 64, so only those tiles preload (`Preload`); larger ones load each 32-column
// chunk during the previous one's stores instead.
template <typename T, int BN> struct ResidualRows {
    uint4 a[BN / 32], b[BN / 32];
    __device__ __forceinline__ void load(const ConvArgs& p, i64 row_w, int n0, int lane) {
#pragma unroll
        for (int h = 0; h < BN / 32; ++h) load_chunk(p, row_w, n0, lane, h, a[h], b[h]);
    }
    // Chunk h (columns n0 + 32 h ..) of lane `lane`'s two rows.
    static __device__ __forceinline__ void load_chunk(const ConvArgs& p, i64 row_w, int n0, int lane, int h,
                                                      uint4& ra, uint4& rb) {
        const i64 row_a = row_w + lane / 4, row_b = row_a + 8;
        const T* res = (const T*)p.epi.residual;
        const uint4 z = make_uint4(0u, 0u, 0u, 0u);
        const int col = n0 + 32 * h + 8 * (lane % 4);
        ra = col < p.k && row_a < p.m ? *(const uint4*)(res + row_a * p.k + col) : z;
        rb = col < p.k && row_b < p.m ? *(const uint4*)(res + row_b * p.k + col) : z;
    }
};
// Whether a consumer holding HALVES x BN / 2 accumulators, with 168 registers a thread (REGS;
// 128 with three consumer warpgroups, whose epilogue spilled with the preload), preloads its
// residual rows.
template <int BN, int HALVES, int REGS> struct Preload { static const bool on = HALVES * BN <= 128 && REGS > 128; };

__device__ __forceinline__ void sts64f(u32 a, float x, float y) {
    asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(a), "f"(x), "f"(y) : "memory");
}
__device__ __forceinline__ void lds128f(u32 a, float* v) {
    asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n" : "=f"(v[0]), "=f"(v[1]), "=f"(v[2]), "=f"(v[3]) : "r"(a) : "memory");
}

// One 32-column chunk h of the stores with p.staged == 3 (as 2, with a 16-byte aligned
// residual; see store_vec_residual): the chunk's f32 results pass through the staging
// buffer; a lane then owns 8 consecutive columns of rows lane / 4 and + 8, adds beta times
// their residual (ra, rb: 16-byte vectors) and stores 16-byte vectors. In odd rows the two
// 16-byte halves of each lane's 8 columns trade places in the buffer (written there swapped,
// read back from the swapped addresses, so no register is moved), which keeps the reads free
// of bank conflicts; the buffer is addressed as shared memory (generic accesses to it cost
// address conversions in an epilogue that is short of issue slots).
template <typename T>
__device__ __forceinline__ void residual_chunk_out(const float* d, float* buf, const ConvArgs& p, i64 row_w, int n0,
                                                   int lane, int h, const uint4 ra, const uint4 rb) {
    const int r = lane / 4, v = lane % 4, swap = r & 1;
    const i64 row_a = row_w + r, row_b = row_a + 8;
    const int col = n0 + 32 * h + 8 * v;
    const u32 b = s_addr(buf);
    __syncwarp();  // the previous chunk's (or tile's) reads are done
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) {
        const int j = 4 * h + jj;
        // Columns 8 jj + 2 v, + 1 of rows r and r + 8 (the same parity): 16-byte unit 2 jj + v / 2
        // of the row, at its place swapped in odd rows.
        const u32 at = b + 4 * (r * CV_SW + (((2 * jj + v / 2) ^ swap) * 4) + (v % 2) * 2);
        sts64f(at, d[j * 4], d[j * 4 + 1]);
        sts64f(at + 4 * 8 * CV_SW, d[j * 4 + 2], d[j * 4 + 3]);
    }
    __syncwarp();
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const u32 src = b + 4 * ((r + 8 * i) * CV_SW + 8 * v);
        float f[8];
        lds128f(src + 16 * swap, f);
        lds128f(src + 16 - 16 * swap, f + 4);
        const uint4 rv = i == 0 ? ra : rb;
        const u32 w[4] = {rv.x, rv.y, rv.z, rv.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            f[2 * e] += p.epi.beta * lo_of<T>(w[e]);
            f[2 * e + 1] += p.epi.beta * hi_of<T>(w[e]);
        }
        const i64 row = i == 0 ? row_a : row_b;
        if (col < p.k && row < p.m)
            stg128((T*)p.out + row * p.k + col, pack2<T>(f[0], f[1]), pack2<T>(f[2], f[3]), pack2<T>(f[4], f[5]),
                   pack2<T>(f[6], f[7]));
    }
}

// The lean epilogue's biases (the conv's and the epilogue's) at this lane's column pairs j
// (columns col0 + 8 j, + 1), loaded when a warp starts a tile (p.prefetch bit 6; tiles up to 128
// wide: 2 x BN / 8 registers across the mainloop), so that the epilogue does not wait on their
// round trip to L2 after the last MMA. Zeros where a bias is absent or past K.
template <typename T, int BN> struct LeanBias {
    u32 c[BN / 8], e[BN / 8];
    __device__ __forceinline__ void load(const ConvArgs& p, int col0) {
        const int cols = p.k - col0;
        const u32* cb = (const u32*)((const T*)p.bias + col0);
        const u32* eb = (const u32*)((const T*)p.epi.bias + col0);
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
            c[j] = p.bias && j * 8 < cols ? cb[j * 4] : 0u;
            e[j] = p.epi.bias && j * 8 < cols ? eb[j * 4] : 0u;
        }
    }
};
// d += b[j] over the fragment (add_bias's arithmetic, from registers).
template <typename T, int BN> __device__ __forceinline__ void add_bias_regs(float* d, const u32* b) {
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
        const float b0 = lo_of<T>(b[j]), b1 = hi_of<T>(b[j]);
        d[j * 4] += b0, d[j * 4 + 1] += b1, d[j * 4 + 2] += b0, d[j * 4 + 3] += b1;
    }
}

// The residual tile in the ring (p.prefetch bit 3): the producer loads it by TMA into the ring
// slots that follow the tile's k-steps, in boxes of 64 rows x 64 columns (8 KB, the 128-byte
// swizzle); box rb * BN / 64 + cb (row block rb, column block cb) lies in slot box / per at
// offset (box % per) * 8 KB, per = STAGE_BYTES / 8 KB. The epilogue reads it from there instead
// of from global memory.
#define CV_RBOX (64 * 64 * 2)
template <int BN, int STAGES, int STAGE_BYTES, bool ON, bool VEC = false> struct RingResidual {
    static const bool on = ON;    // whether the kernel form has this path at all
    static const bool vec = VEC;  // whether ring_out may store as 16-byte vectors (p.prefetch bit 7)
    // ring: the address of stage 0; stage0: the stage of the tile's first residual slot; tr:
    // the warp's first row within the tile (a multiple of 16). The addresses are computed at
    // each use: held across the epilogue's math they cost registers the larger tiles lack.
    u32 ring;
    int stage0, tr;
    const TmaMap* map_o;  // the output [M, K] in boxes of 64 columns x 16 rows (p.prefetch bit 5)
    // The address of row tr % 64 of box `box` (the warp's first row there).
    __device__ __forceinline__ u32 box_at(int box) const {
        constexpr int per = STAGE_BYTES / CV_RBOX;
        return ring + ((stage0 + box / per) % STAGES) * STAGE_BYTES + (box % per) * CV_RBOX + (tr % 64) * 128;
    }
    // This lane's pair of column group 8 q (columns 64 q + 2 (lane % 4), + 1 of the tile) in row
    // tr + lane / 4 (8 rows on: + 1024); group 8 q + jj is at this address ^ (jj << 4): rows are
    // 128-byte aligned, and the 128-byte swizzle XORs the 16-byte unit with the row's index mod
    // 8, lane / 4.
    __device__ __forceinline__ u32 pair_base(int q, int lane) const {
        return box_at((tr / 64) * (BN / 64) + q) + (lane / 4) * 128 + (lane / 4) * 16 + (lane % 4) * 4;
    }
    // Chunk h (columns 32 h + 8 (lane % 4) of the tile) of rows a (tr + lane / 4) and b (8 rows
    // on): the 16-byte piece (h % 2) * 4 + lane % 4 of the 128-byte row of column block h / 2,
    // swizzled with the row's index mod 8 (lane / 4 for both: the rows are 16-aligned).
    __device__ __forceinline__ void chunk(int h, int lane, uint4& ra, uint4& rb) const {
        const u32 at = box_at((tr / 64) * (BN / 64) + h / 2) + (lane / 4) * 128 +
                       ((((h % 2) * 4 + lane % 4) ^ (lane / 4)) * 16);
        lds128(at, ra.x, ra.y, ra.z, ra.w);
        lds128(at + 8 * 128, rb.x, rb.y, rb.z, rb.w);
    }
};
;

// The lean epilogue's end with the residual in shared memory and p.prefetch bit 5 (ring_out):
// each lane adds beta times its fragment's residual pairs, read where they lie in the ring slots
// or the residual buffer (4-byte reads: the 8 rows of a read are 8 different swizzle rows, so its
// 32 lanes hit 32 banks), and writes the results over them; the warp then stores its 16 rows
// from there, as 16-byte vectors (p.prefetch bit 7, unclustered entries: 8 lanes per 128-byte
// row piece, the row's index mod 8 undoing the swizzle) or by TMA (lane 0: one box of 64
// columns x 16 rows per column block, then a wait until the stores have read the rows). Rows past
// M and columns past K are not written. No staging buffer: the fragment is the only layout
// change. The slots or the buffer go back to the producer after. On an H200 (ResNet-50 batch 32)
// the vector stores took 14.25 us against 14.51 by TMA on the 28x28 3x3 128 -> 128 block, 14.25
// against 14.57 on the 14x14 256 -> 1024 one (clustered entries spilled with them).
// The arithmetic: with relu and p.prefetch bit 16 (set where beta is exact in T), relu(acc +
// biases) is rounded to T (by the conversion, which applies relu) and beta * r + y computed on
// the pair with one rounding, as a graph that stores relu's output before the add rounds it: an
// fma on T x 2 in place of two f32 unpacks, a relu and an f32 fma per element, the epilogue's
// ALU work being what its time went to (13.87 us against 14.25 on the 3x3 block). A NaN stays a
// NaN through that relu (the f32 one makes it 0). Otherwise d + beta * r in f32, one rounding at
// the store (residual_chunk_out's arithmetic).
// PACKED: the packed arithmetic with relu (see above), else d + beta * r in f32. 32 columns (8
// reads) at a time.
template <typename T, int BN, bool PACKED, typename RING>
__device__ __forceinline__ void ring_math(const float* d, const ConvArgs& p, const RING& ring, int lane) {
    const float beta = p.epi.beta;
    const u32 beta2 = pack2<T>(beta, beta);
#pragma unroll
    for (int q = 0; q < BN / 64; ++q) {
        const u32 base = ring.pair_base(q, lane);
#pragma unroll
        for (int j0 = 0; j0 < 8; j0 += 4) {
            u32 r[8];
#pragma unroll
            for (int jj = 0; jj < 4; ++jj) {
                const u32 at = base ^ ((j0 + jj) << 4);
                r[2 * jj] = lds32(at), r[2 * jj + 1] = lds32(at + 8 * 128);
            }
#pragma unroll
            for (int jj = 0; jj < 4; ++jj) {
                const int j = q * 8 + j0 + jj;
                const u32 at = base ^ ((j0 + jj) << 4);
                if (!PACKED) {
                    sts32(at, pack2<T>(d[j * 4] + beta * lo_of<T>(r[2 * jj]), d[j * 4 + 1] + beta * hi_of<T>(r[2 * jj])));
                    sts32(at + 8 * 128, pack2<T>(d[j * 4 + 2] + beta * lo_of<T>(r[2 * jj + 1]),
                                                 d[j * 4 + 3] + beta * hi_of<T>(r[2 * jj + 1])));
                } else {
                    sts32(at, fma2<T>(r[2 * jj], beta2, pack2_relu<T>(d[j * 4], d[j * 4 + 1])));
                    sts32(at + 8 * 128,
                          fma2<T>(r[2 * jj + 1], beta2, pack2_relu<T>(d[j * 4 + 2], d[j * 4 + 3])));
                }
            }
        }
    }
}
template <typename T, int BN, typename RING>
__device__ __forceinline__ void ring_out(const float* d, const ConvArgs& p, const RING& ring, i64 row_w, int n0,
                                         int lane, bool packed) {
    if (packed) ring_math<T, BN, true>(d, p, ring, lane);
    else ring_math<T, BN, false>(d, p, ring, lane);
    if (RING::vec && (p.prefetch & 128)) {
        __syncwarp();  // every lane's results are in place
        // Lane l takes 16-byte unit g = l % G of rows i0 = l / G, + RP, ...: column block g / 8
        // (its box, wherever the slots put it), its unit g % 8 swizzled with the row's index mod 8
        // (box rows are 1024-byte aligned).
        constexpr int G = BN / 8, RP = 32 / G;
        const int g = lane % G, i0 = lane / G;
        const u32 a0 = ring.box_at((ring.tr / 64) * (BN / 64) + g / 8) + (g % 8) * 16;
        const bool col_in = n0 + 8 * g < p.k;
        const i64 left = p.m - row_w - i0;  // rows from i0 on that exist
        T* dst = (T*)p.out + (row_w + i0) * p.k + n0 + 8 * g;
#pragma unroll
        for (int t = 0; t < 16 / RP; ++t) {
            const int i = i0 + RP * t;
            u32 a, b, c, e;
            lds128((a0 + i * 128) ^ ((i % 8) << 4), a, b, c, e);
            if (col_in && RP * t < left) stg128(dst + (i64)(RP * t) * p.k, a, b, c, e);
        }
        return;
    }
    fence_proxy_async_smem();
    __syncwarp();
    if (lane == 0) {
        if (row_w < p.m)
#pragma unroll
            for (int q = 0; q < BN / 64; ++q)
                if (n0 + 64 * q < p.k)
                    tma_store_2d(ring.map_o, ring.box_at((ring.tr / 64) * (BN / 64) + q), n0 + 64 * q, (int)row_w);
        bulk_commit();
        bulk_wait_read0();
    }
}

// The stores with p.staged == 3: the residual is added on the way out instead of in the
// fragments, 32 columns at a time (residual_chunk_out), from the tile in the ring (p.prefetch
// bit 3, `ring`), from the rows preloaded in `res` (PRE) or loaded here a chunk ahead of the
// stores. Same arithmetic as add_residual (d += beta * r, one rounding at the store); the
// compiler may contract the multiply-add in one path only, so results agree to one unit in the
// last place (tests/test_conv2d_sm90.py).
template <typename T, int BN, bool PRE, bool RING_ONLY, typename RING>
__device__ __forceinline__ void store_vec_residual(const float* d, float* buf, const ConvArgs& p, i64 row_w, int n0,
                                                   int lane, const ResidualRows<T, BN>& res, const RING& ring) {
    static_assert(!RING_ONLY || RING::on, "a ring-only epilogue needs the ring");
    if (RING_ONLY || (RING::on && (p.prefetch & 8))) {
#pragma unroll
        for (int h = 0; h < BN / 32; ++h) {
            uint4 ra, rb;
            ring.chunk(h, lane, ra, rb);
            residual_chunk_out<T>(d, buf, p, row_w, n0, lane, h, ra, rb);
        }
        return;
    }
    if (PRE) {
#pragma unroll
        for (int h = 0; h < BN / 32; ++h) residual_chunk_out<T>(d, buf, p, row_w, n0, lane, h, res.a[h], res.b[h]);
        return;
    }
    uint4 na, nb;
    ResidualRows<T, BN>::load_chunk(p, row_w, n0, lane, 0, na, nb);
#pragma unroll
    for (int h = 0; h < BN / 32; ++h) {
        const uint4 ra = na, rb = nb;
        if (h + 1 < BN / 32) ResidualRows<T, BN>::load_chunk(p, row_w, n0, lane, h + 1, na, nb);
        residual_chunk_out<T>(d, buf, p, row_w, n0, lane, h, ra, rb);
    }
}


// The epilogue forms of a kernel entry (the launcher picks one per launch). The code of an
// epilogue runs once per tile with a cold instruction cache, and a short tile (one per block on
// most ResNet-50 layers) pays for every cache line of it: ncu on the 28x28 3x3 block (bias, relu,
// residual) showed "no instruction" stalls in half of its epilogue's samples in CV_FULL,
// whose code (every activation, clamp, split and store path) is 15 times the plain one.
//   CV_FULL: every option (split-K partials, any activation and clamp, the
//            residual from the ring, preloaded, or read from global memory).
//   CV_PLAIN: no epilogue: conversion and stores only.
//   CV_LEAN: the ResNet pattern only: the conv's bias and the epilogue's bias (either or both),
//            relu or no activation, no clamp, the residual absent or in the ring (p.prefetch
//            bit 3), unsplit, stored as 16-byte vectors (p.staged 2 or 3).
#define CV_FULL 0
#define CV_PLAIN 1
#define CV_LEAN 2

// The end of one consumer warp's 16 rows of a work unit: rows row_w..row_w + 15, columns
// n0..n0 + BN - 1, accumulators d in the m64nN layout: warp w of a warpgroup owns rows
// 16w..16w+15 of its 64; lane l holds rows l/4 and l/4+8, columns 8j + 2(l%4) and +1, for
// j = 0..N/8-1. A split unit stores its raw partial products to its workspace plane; any other
// runs the epilogue and stores the results. `staging`: the shared memory past the ring's
// barriers; `slot`: the warp's staging area (one per consumer warp). With p.staged == 3 the
// residual rows are in `res` (PRE: preloaded at the tile's start, see ResidualRows), or loaded
// a chunk at a time in store_vec_residual, or in the ring (p.prefetch bit 3, `ring`). EPI: the
// entry's epilogue form (above).
template <typename T, int BN, int EPI, bool PRE, typename RING>
__device__ __forceinline__ void tile_out(float* d, u8* staging, const ConvArgs& p, i64 row_w, int n0, int split,
                                         int slot, int lane, const ResidualRows<T, BN>& res, const RING& ring,
                                         const LeanBias<T, BN>& lb) {
    constexpr bool PLAIN = EPI == CV_PLAIN, FULL = EPI == CV_FULL;
    const i64 row0 = row_w + lane / 4;
    const int col0 = n0 + (lane % 4) * 2;
    // Column pair j (col0 + 8j, + 1) exists while 8j < cols; K is even, so both do.
    const int cols = p.k - col0;
    const bool has0 = row0 < p.m, has1 = row0 + 8 < p.m;
    if (FULL && p.splits > 1) {
        float* w0 = (float*)p.ws + (i64)split * p.m * p.k + row0 * p.k + col0;
        float* w1 = w0 + 8 * (i64)p.k;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
            if (has0 && j * 8 < cols) *(float2*)(w0 + j * 8) = make_float2(d[j * 4], d[j * 4 + 1]);
            if (has1 && j * 8 < cols) *(float2*)(w1 + j * 8) = make_float2(d[j * 4 + 2], d[j * 4 + 3]);
        }
        return;
    }
    float* buf = (float*)staging + slot * (16 * CV_SW);
    if (EPI == CV_LEAN && BN <= 128 && (p.prefetch & 64)) {
        if (p.bias) add_bias_regs<T, BN>(d, lb.c);
        if (p.epi.bias) add_bias_regs<T, BN>(d, lb.e);
    } else {
        if (!PLAIN && p.bias) add_bias<T, BN>(d, (const T*)p.bias + col0, cols);
        if (!PLAIN && p.epi.bias) add_bias<T, BN>(d, (const T*)p.epi.bias + col0, cols);
    }
    // The in-place end's packed arithmetic with relu (see ring_out; the launcher sets bit 16 only
    // with bit 5 and relu, where beta is exact in T).
    const bool packed = EPI == CV_LEAN && (p.prefetch & 1 << 16);
    if (EPI == CV_LEAN && p.epi.act == EPI_RELU && !packed) {
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) d[i] = epi_act(EPI_RELU, d[i]);
    }
    if (FULL && p.epi.act != EPI_NONE) act_all_1exp<BN / 2>(p.epi.act, d);
    if (FULL && p.epi.clamp) epi_clamp_all<BN / 2>(p.epi, d);
    const i64 offset = row0 * p.k + col0;
    if (EPI == CV_LEAN && (p.prefetch & 32)) {
        ring_out<T, BN>(d, p, ring, row_w, n0, lane, packed);
        return;
    }
    if (!PLAIN && p.staged == 3) {
        store_vec_residual<T, BN, PRE, EPI == CV_LEAN>(d, buf, p, row_w, n0, lane, res, ring);
        return;
    }
    if (FULL && p.epi.residual) {
        const u32* r0 = (const u32*)((const T*)p.epi.residual + offset);
        const u32* r1 = (const u32*)((const T*)p.epi.residual + offset + 8 * (i64)p.k);
        add_residual<T, BN>(d, r0, r1, has0, has1, cols, p.epi.beta);
    }
    if (EPI == CV_LEAN || p.staged == 2) {
        store_vec_staged<T, BN>(d, staging, p, row_w, n0, slot, lane);
        return;
    }
    u32* o0 = (u32*)((T*)p.out + offset);
    u32* o1 = (u32*)((T*)p.out + offset + 8 * (i64)p.k);
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
        if (has0 && j * 8 < cols) o0[j * 4] = pack2<T>(d[j * 4], d[j * 4 + 1]);
        if (has1 && j * 8 < cols) o1[j * 4] = pack2<T>(d[j * 4 + 2], d[j * 4 + 3]);
    }
}

// Asks L2 for one consumer warp's 16 rows (from row_w) of a tile's residual, one 128-byte line
// of 64 columns per lane and step, so that the epilogue's loads, issued a few at a time, hit L2
// instead of each waiting on DRAM.
template <typename T, int BN>
__device__ __forceinline__ void prefetch_residual_rows(const ConvArgs& p, i64 row_w, int n0, int lane) {
#pragma unroll
    for (int i = lane; i < 16 * (BN / 64); i += 32) {
        const i64 row = row_w + i / (BN / 64);
        const int col = n0 + (i % (BN / 64)) * 64;
        if (row < p.m && col < p.k) prefetch_l2((const T*)p.epi.residual + row * p.k + col);
    }
}
