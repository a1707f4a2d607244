#line 1 "qgemm_sm90.cu"
// qgemm_sm90.cu: qmatmul for up to 64 lhs rows (9 and more, or from 4 for large weights:
// launch/qgemv_path.rs) over GGUF weights (Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K) on Hopper
// (sm_90a), decoding the quants in the GEMM's mainloop: out [m, n] = lhs [m, k] @ dequantize(w)^T
// (+ res), where the path before dequantized every weight matrix into a bf16 scratch (14 GB of
// writes and reads a decode step of an 8B model at 64 sequences) and ran the wgmma GEMM on it.
//
// The product is computed transposed, D = W L^T: the weights are the MMA's A operand, decoded
// into registers in the A fragment layout (lane (g, t) of warp w holds rows 16 w + g and + 8,
// k 2t, 2t + 1, 2t + 8, 2t + 9 of each 16-element step: mma.sync's m16n8k16 layout, which is
// also a warp's share of wgmma's m64nNk16 with A from registers), and the lhs rows are B
// (NL = 16, 32 or 64 of them, the fewest that hold m: K-major, 128-byte swizzled boxes of
// NL x 64 bf16 loaded by TMA). Up to NL = 32 each warp runs mma.sync over its 16 weight rows
// with B fragments by ldmatrix; at NL = 64 each warpgroup runs RS wgmma m64n64k16 over its 64.
// Rows of lhs past m and weight rows past n read as zeros and are never stored.
//
// Decode. A 32-element block's quants sit in 16 bytes, element i in the low nibble of byte i and
// element i + 16 in its high nibble; lane t's bytes 2t, 2t + 1, 2t + 8 and 2t + 9 (two aligned
// 16-bit loads) hold its elements of both 16-element steps of the block: low nibbles the first,
// high nibbles the second. Each nibble q becomes the float 128 + q by one byte permute (q as
// the mantissa bits under the exponent byte 0x43), and one fma gives the weight exactly as the
// dequantize kernels compute it in f32: Q4_0 (128 + q) d - 136 d = (q - 8) d (136 d is exact: an
// f16 scale times 2^7 + 2^3); Q4_1 (q d) + m from q = (128 + q) - 128. The weights are then
// rounded to bf16 in pairs, as dequant_rows_bf16_* rounds them, and the lhs is the bf16 the
// launcher rounds it to: the products are those of the dequantize + GEMM path, summed in another
// order.
// Q8_0's signed bytes become floats by the same permute under 2^23 (2^23 + (q ^ 128), less
// 2^23 + 128), then q d as the dequantize rounds it.
// The super-block encodings (one 256-element super-block a stage) decode each 32-element
// sub-block j the same way: Q4_K's pair j / 2 of sub-blocks shares 32 quant bytes (j even the
// low nibbles), lane t's bytes 2t, 2t + 1, 2t + 8, 2t + 9 of each 16-byte half; the weight is
// (q d sc) - dmin m, one fma of exact terms as the dequantize's mul and sub round it (Q5_K: q's
// fifth bit is bit j of the same lanes' qh bytes). Q6_K's
// 6-bit quants join a nibble of ql and two bits of qh per byte lane (masks, a shift, an or),
// one int8 scale a 16-element step: (128 + q) (d sc) - 160 (d sc) = (q - 32) d sc exactly.
// Q6_K's 210-byte super-blocks are not whole 16 bytes: chunk c is read as a 224-byte box from
// the 16 bytes at or below its start and begins (210 c) % 16 bytes into it.
//
// Block: 3 warpgroups, two blocks an SM (80 registers a thread, 2-4 stages within 113 KiB) up
// to NL = 32, one (3-4 stages, the consumers' registers raised to 232) at 64.
// Warpgroup 0 is the producer (one thread): for each 256-element chunk of K (one stage) it loads
// the lhs boxes (4 x 64 columns x NL rows) and, for each consumer, its 64 weight rows x the
// chunk's bytes (144 for Q4_0 and Q4_K, 160 for Q4_1, 176 for Q5_K, 272 for Q8_0, 224 for
// Q6_K's 210: a 2-D TMA box of the
// weights as bytes [n, row_bytes]; two boxes of 32 rows for the gated pair) onto the stage's
// full barrier.
// Warpgroups 1 and 2 each own 64 weight rows of the block's 128. mma.sync: per block of the
// chunk a warp decodes its two rows x 8 elements a lane, then loads the lhs fragments and runs
// the MMAs of both 16-element steps (the scoreboard overlaps the next block's decode with
// them). wgmma: per group of 4 blocks, decode, fence, two RS wgmmas a block, commit and wait
// (a decode defining the next group's registers while one is in flight makes ptxas serialize
// every wgmma); the other warpgroup's MMAs overlap a warpgroup's decode. A stage is released
// once every MMA that read it has retired.
//
// Segments (QgArgs: sibling products of one lhs, each its weights, output and blocks) and the
// gated pair (each block 64 rows of the gate's weights and the same rows of the up's, a warp's
// 16 MMA rows 8 of each, so a lane holds gate and up of the same outputs and stores
// silu(gate) * up, rounded as quant_common.cuh's qn_gated rounds it).
//
// Split-K (p.splits > 1): blockIdx.x = tile * splits + split; split s takes chunks [s * per,
// (s + 1) * per). Each writes its f32 partial tile (NL x 128, fragment order, 16-byte stores) to
// the workspace, fences and bumps the tile's ticket counter; the block that brings it to
// `splits` reads the parts back in order 0, 1, ... (deterministic), leaves the counter at zero
// and stores. The epilogue adds the residual (same type and layout as out) in f32 and rounds
// once to OT.

#define QG_BK 256  // K elements per stage: 8 blocks of 32, or one super-block
#define QG_ROWS 64  // weight rows per consumer warpgroup (wgmma's M)

// A chunk's bytes in a weight row and the 16 bytes its box starts at or below: chunk c of a
// row begins (c * CHUNK) % 16 bytes into its box (0 but for Q6_K's 210-byte super-blocks).
template <int E> struct QgChunk {
    enum {
        BYTES = QG_BK / Enc<E>::ELEMS * Enc<E>::BYTES,
        // (chunks start on multiples of ALIGN bytes: at most 16 - ALIGN bytes into their box)
        ALIGN = BYTES % 16 == 0 ? 16 : BYTES % 8 == 0 ? 8 : BYTES % 4 == 0 ? 4 : 2,
        SLOT = (BYTES + 16 - ALIGN + 15) / 16 * 16,  // the box (Q6_K: 224)
    };
};

// A box of weight rows from byte x (a multiple of 16) of each: boxes wider than TMA's 256
// elements (Q8_0's 272 bytes) through a 3-D map of the same bytes, [n][row_bytes / 16][16].
template <int E> __device__ __forceinline__ void qg_load_w(void* dst, const TmaMap* map, u64* bar, int x, int row) {
    if constexpr (QgChunk<E>::SLOT > 256) tma_load_3d(dst, map, bar, 0, x / 16, row);
    else tma_load_2d(dst, map, bar, x, row);
}

// NL: lhs rows of the tile (wgmma's N: 16, 32 or 64, the fewest that hold m).
template <int E, int NL> struct Qg {
    enum {
        SLOT = QgChunk<E>::SLOT,  // a weight row's bytes in a stage
        BOX = NL * 128,  // one swizzled lhs box: NL rows x 64 bf16
        LHS = 4 * BOX,
        RAW = 2 * QG_ROWS * SLOT,
        STAGE = (LHS + RAW + 1023) / 1024 * 1024,
        // NL 16 and 32: as many stages as let two blocks share an SM (113 KiB each with the
        // alignment slack and barriers), at most 4; NL 64 (one block an SM: its 32 accumulators
        // and the split-K sums do not fit 80 registers; nor do Q5_K's decode and NL 32's 16),
        // as many as fit 227 KiB, at most 4
        BLOCKS = NL == 64 || (NL == 32 && E == ENC_Q5_K) ? 1 : 2,
        FIT = ((BLOCKS == 1 ? 227 : 113) * 1024 - 1152) / STAGE,
        STAGES = FIT > 4 ? 4 : FIT,
    };
};

// Sibling products of one lhs (a layer's q/k/v, its gate and up) in one launch: segment s
// has its own weights (map s), output out[s] of n[s] columns and the blocks first[s] ..
// first[s + 1] - 1. Gated: one segment, map 0 the gate's weights and map 1 the up's, each block
// 64 rows of both (the same 64 output columns), out[0] = silu(gate product) * up product.
#define QG_SEGS 3
struct QgMaps {
    TmaMap m[QG_SEGS];
};
struct QgArgs {
    void* out[QG_SEGS];  // OT [m, n[s]]
    const void* res;  // OT [m, n[0]] (one segment), or null
    float* ws;  // split-K: f32 partial tiles [tiles][splits][256 x NL / 2]
    unsigned int* counters;  // split-K: one ticket counter per tile, zero at launch
    int n[QG_SEGS];
    int first[QG_SEGS + 1];
    int count;
    int m;
    int chunks;  // 256-element chunks of K
    int splits, per;  // K parts per tile and chunks per part
};

// The segment of block tile `tile`.
__device__ __forceinline__ int qg_seg(const QgArgs& p, int tile) {
    int s = 0;
#pragma unroll
    for (int i = 1; i < QG_SEGS; ++i) s += (i < p.count && tile >= p.first[i]) ? 1 : 0;
    return s;
}

// m64n64k16, A (4 registers of bf16 pairs) from registers, B K-major from shared memory, 32
// accumulators a thread.
__device__ __forceinline__ void qg_wgmma(float* d, const u32 (&a)[4], u64 desc_b) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " PW_REGS32
                 ", {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
                 : PW_OUTS32
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
}

// mma.m16n8k16 (bf16, f32 accumulators d[0..3]) and the 4 8x8 matrices of ldmatrix.x4 at the
// shared address `at` (of lane l: row l % 8 of matrix l / 8).
__device__ __forceinline__ void qg_mma(float* d, const u32 (&a)[4], u32 b0, u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void qg_ldsm4(u32 (&b)[4], u32 at) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])
                 : "r"(at));
}

// The float 128 + (byte j of v), for a byte below 128: the byte as mantissa bits 16..22 under
// the exponent byte 0x43 (one permute).
__device__ __forceinline__ float qg_128(u32 v, int j) {
    return __uint_as_float(__byte_perm(v, 0x43u, 0x4055u | (j << 8)));
}

__device__ __forceinline__ u32 qg_u16(const u8* p) { return *(const u16*)p; }

// The signed byte j of v as a float, exactly: 2^23 + (byte ^ 128) by one permute under the
// exponent byte 0x4B, less 2^23 + 128.
__device__ __forceinline__ float qg_s8(u32 v, int j) {
    return __uint_as_float(__byte_perm(v ^ 0x80808080u, 0x4B000000u, 0x7440u | j)) - 8388736.f;
}

// Lane t's weights of 32-element block j of a chunk whose row bytes start at s: w[0..3] k 2t,
// 2t + 1, 2t + 8, 2t + 9 of the block's first 16-element step, w[4..7] of its second.
template <int E> __device__ __forceinline__ void qg_weights(const u8* s, int j, int t, float (&w)[8]) {
    if constexpr (E == ENC_Q4_0 || E == ENC_Q4_1) {
        constexpr int QS = E == ENC_Q4_0 ? 2 : 4;  // quants after the f16 scale (and Q4_1's min)
        const u8* b = s + j * Enc<E>::BYTES;
        const u32 x = qg_u16(b + QS + 2 * t) | (qg_u16(b + QS + 8 + 2 * t) << 16);
        const u32 l = x & 0x0F0F0F0Fu, h = (x >> 4) & 0x0F0F0F0Fu;
        const float d = h2f(qg_u16(b));
        if (E == ENC_Q4_0) {
            const float c = -136.f * d;
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                w[i] = fmaf(qg_128(l, i), d, c);
                w[4 + i] = fmaf(qg_128(h, i), d, c);
            }
        } else {
            const float mn = h2f(qg_u16(b + 2));
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                w[i] = fmaf(qg_128(l, i) - 128.f, d, mn);
                w[4 + i] = fmaf(qg_128(h, i) - 128.f, d, mn);
            }
        }
    } else if constexpr (E == ENC_Q8_0) {
        const u8* b = s + j * Enc<E>::BYTES;
        const float d = h2f(qg_u16(b));
#pragma unroll
        for (int kk = 0; kk < 2; ++kk) {
            const u32 x = qg_u16(b + 2 + 16 * kk + 2 * t) | (qg_u16(b + 10 + 16 * kk + 2 * t) << 16);
#pragma unroll
            for (int i = 0; i < 4; ++i) w[4 * kk + i] = __fmul_rn(qg_s8(x, i), d);
        }
    } else if constexpr (E == ENC_Q4_K || E == ENC_Q5_K) {
        // d, dmin, 12 bytes of 6-bit scales and mins, (Q5_K: 32 bytes of fifth bits,) then 32
        // quant bytes per pair of blocks
        constexpr int QS = E == ENC_Q4_K ? 16 : 48;
        const u8* q = s + QS + 32 * (j / 2);
        const int sh = 4 * (j & 1);
        const u32 x0 = qg_u16(q + 2 * t) | (qg_u16(q + 8 + 2 * t) << 16);
        const u32 x1 = qg_u16(q + 16 + 2 * t) | (qg_u16(q + 24 + 2 * t) << 16);
        u32 l = (x0 >> sh) & 0x0F0F0F0Fu, h = (x1 >> sh) & 0x0F0F0F0Fu;
        if constexpr (E == ENC_Q5_K) {
            const u32 y0 = qg_u16(s + 16 + 2 * t) | (qg_u16(s + 24 + 2 * t) << 16);
            const u32 y1 = qg_u16(s + 32 + 2 * t) | (qg_u16(s + 40 + 2 * t) << 16);
            l |= ((y0 >> j) & 0x01010101u) << 4;
            h |= ((y1 >> j) & 0x01010101u) << 4;
        }
        u32 sc, m;
        scale_min(j, s + 4, sc, m);
        const float d1 = __fmul_rn(h2f(qg_u16(s)), (float)sc), m1 = __fmul_rn(h2f(qg_u16(s + 2)), (float)m);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            w[i] = fmaf(qg_128(l, i) - 128.f, d1, -m1);
            w[4 + i] = fmaf(qg_128(h, i) - 128.f, d1, -m1);
        }
    } else {
        static_assert(E == ENC_Q6_K, "Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K");
        // ql [128], qh [64], int8 scales [16], d: block j is quarter p of half hf
        const int hf = j / 4, p = j % 4;
        const u8* ql = s + 64 * hf + 32 * (p & 1);
        const u8* qh = s + 128 + 32 * hf;
        const float d = h2f(qg_u16(s + 208));
#pragma unroll
        for (int kk = 0; kk < 2; ++kk) {
            const u32 x = qg_u16(ql + 16 * kk + 2 * t) | (qg_u16(ql + 16 * kk + 8 + 2 * t) << 16);
            const u32 y = qg_u16(qh + 16 * kk + 2 * t) | (qg_u16(qh + 16 * kk + 8 + 2 * t) << 16);
            const u32 q = ((x >> (4 * (p >> 1))) & 0x0F0F0F0Fu) | (((y >> (2 * p)) & 0x03030303u) << 4);
            const float ds = __fmul_rn(d, (float)(i8)s[192 + 8 * hf + 2 * p + kk]), c = -160.f * ds;
#pragma unroll
            for (int i = 0; i < 4; ++i) w[4 * kk + i] = fmaf(qg_128(q, i), ds, c);
        }
    }
}

// Block j of rows g (s0) and g + 8 (s1) for lane t: the A fragments of its two 16-element steps.
template <int E>
__device__ __forceinline__ void qg_decode(const u8* s0, const u8* s1, int j, int t, u32 (&lo)[4], u32 (&hi)[4]) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float w[8];
        qg_weights<E>(r ? s1 : s0, j, t, w);
        // a0 / a1: k 2t, 2t + 1 of row g / g + 8; a2 / a3: k 2t + 8, 2t + 9
        lo[r] = pack2<bf16>(w[0], w[1]);
        lo[2 + r] = pack2<bf16>(w[2], w[3]);
        hi[r] = pack2<bf16>(w[4], w[5]);
        hi[2 + r] = pack2<bf16>(w[6], w[7]);
    }
}

// Element (col, row) of out [m, n] (lhs row col, weight row row), plus the residual's.
template <typename OT>
__device__ __forceinline__ void qg_store(OT* out, const OT* res, int m, int n, int col, int row, float v) {
    if (col >= m || row >= n) return;
    const i64 at = (i64)col * n + row;
    if (res) v += to_f32(res[at]);
    out[at] = FromF32<OT>::go(v);
}
template <>
__device__ __forceinline__ void qg_store<float>(float* out, const float* res, int m, int n, int col, int row, float v) {
    if (col >= m || row >= n) return;
    const i64 at = (i64)col * n + row;
    if (res) v += res[at];
    out[at] = v;
}

template <int E, int NL, typename OT, bool GT>
__device__ __forceinline__ void qgemm_sm90(const TmaMap* map_l, const QgMaps* maps, const QgArgs& p) {
    using G = Qg<E, NL>;
    constexpr int SLOT = G::SLOT, BOX = G::BOX, LHS = G::LHS, STAGE = G::STAGE, QG_STAGES = G::STAGES;
    static_assert(QG_STAGES >= 2, "two stages at least");
    constexpr int CHUNK = QgChunk<E>::BYTES;
    constexpr int NACC = NL / 2;  // accumulators a thread
    // wgmma (NL = 64): blocks decoded before their MMAs are issued (one wait per group)
    constexpr int QG_GROUP = 4;
    // mma.sync (m16n8k16, each warp its 16 weight rows) up to NL = 32; wgmma at 64
    constexpr bool MS = NL <= 32;
    static_assert(MS || NL == 64, "wgmma at 64 lhs rows");
    extern __shared__ u8 raw_smem[];
    // (offset from raw_smem, so that the compiler keeps to shared-memory loads)
    u8* smem = raw_smem + ((1024u - (s_addr(raw_smem) & 1023u)) & 1023u);
    u64* full = (u64*)(smem + QG_STAGES * STAGE);
    u64* empty = full + QG_STAGES;
    int* last_flag = (int*)(empty + QG_STAGES);
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
    const int tile = blockIdx.x / p.splits, split = blockIdx.x % p.splits;
    const int c0 = split * p.per, c1 = min(p.chunks, c0 + p.per);
    // The block's segment and its block within it (selected, not indexed: a dynamic index into
    // the parameters would copy them to local memory), computed where used.
    auto seg_of = [&]() { return qg_seg(p, tile); };
    auto local = [&](int seg) { return tile - (seg == 0 ? 0 : seg == 1 ? p.first[1] : p.first[2]); };
    if (threadIdx.x == 0) {
        for (int s = 0; s < QG_STAGES; ++s) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], 8);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    // One block an SM: the consumers take the producer's registers (their 32 accumulators).
    constexpr bool MOVE_REGS = G::BLOCKS == 1;
    if (wg == 0) {
        if (MOVE_REGS) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        if (tid == 0) {
            const int seg = seg_of(), lt = local(seg);
            const TmaMap* map_w = seg == 0 ? &maps->m[0] : seg == 1 ? &maps->m[1] : &maps->m[2];
            int stage = 0;
            u32 phase = 0;
            for (int c = c0; c < c1; ++c) {
                mbar_wait(&empty[stage], phase ^ 1);
                u8* sl = smem + stage * STAGE;
                mbar_expect_tx(&full[stage], LHS + 2 * QG_ROWS * SLOT);
#pragma unroll
                for (int b = 0; b < QG_BK / 64; ++b)
                    tma_load_2d(sl + b * BOX, map_l, &full[stage], c * QG_BK + 64 * b, 0);
                u8* sw = sl + LHS;
                const int x = c * CHUNK & ~15;  // the chunk's box
                if (GT) {
                    // consumer h: 32 rows of the gate, then the same rows of the up weights
#pragma unroll
                    for (int h = 0; h < 2; ++h)
#pragma unroll
                        for (int q = 0; q < 2; ++q)
                            qg_load_w<E>(sw + (2 * h + q) * (QG_ROWS / 2) * SLOT, &maps->m[q], &full[stage], x,
                                         lt * QG_ROWS + h * (QG_ROWS / 2));
                } else {
#pragma unroll
                    for (int h = 0; h < 2; ++h)
                        qg_load_w<E>(sw + h * QG_ROWS * SLOT, map_w, &full[stage], x, lt * 2 * QG_ROWS + h * QG_ROWS);
                }
                if (++stage == QG_STAGES) stage = 0, phase ^= 1;
            }
        }
        return;
    }
    if (MOVE_REGS) asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    const int cw = wg - 1;  // consumer warpgroup: weight rows cw * 64 .. of the block's 128
    const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    float d[NACC];
#pragma unroll
    for (int i = 0; i < NACC; ++i) d[i] = 0.f;
    int stage = 0;
    u32 phase = 0;
    for (int c = c0; c < c1; ++c) {
        mbar_wait(&full[stage], phase);
        const u8* sl = smem + stage * STAGE;
        // rows g and g + 8 of the warp's 16; gated, gate row and up row 8 warp + g
        const u8* sw = sl + LHS + cw * QG_ROWS * SLOT;
        const u8* r0 = sw + (GT ? 8 * warp + g : 16 * warp + g) * SLOT + (c * CHUNK & 15);
        const u8* r1 = r0 + (GT ? QG_ROWS / 2 : 8) * SLOT;
        if constexpr (MS) {
            // mma.sync: each block's two 16-element steps against the lhs fragments of every
            // pair of 8-row lhs tiles (ldmatrix from the swizzled boxes: 16-byte chunk c of
            // lhs row n at c ^ (n % 8)); the next block's decode overlaps these MMAs.
            const u32 lb = s_addr(sl);
            const int ln = ((lane >> 4) << 3) + (lane & 7), lc = (lane >> 3) & 1;
#pragma unroll
            for (int j = 0; j < QG_BK / 32; ++j) {
                u32 a[2][4];
                qg_decode<E>(r0, r1, j, t, a[0], a[1]);
#pragma unroll
                for (int kk = 0; kk < 2; ++kk) {
                    const int k16 = 2 * j + kk, ch = (k16 % 4) * 2 + lc;
#pragma unroll
                    for (int q = 0; q < NL / 16; ++q) {
                        const int n = 16 * q + ln;
                        u32 b[4];
                        qg_ldsm4(b, lb + (k16 / 4) * BOX + n * 128 + ((ch ^ (n & 7)) << 4));
                        qg_mma(&d[8 * q], a[kk], b[0], b[1]);
                        qg_mma(&d[8 * q + 4], a[kk], b[2], b[3]);
                    }
                }
            }
        } else {
#pragma unroll
            for (int j0 = 0; j0 < QG_BK / 32; j0 += QG_GROUP) {
                u32 a[QG_GROUP][2][4];
#pragma unroll
                for (int j = 0; j < QG_GROUP; ++j)
                    qg_decode<E>(r0, r1, j0 + j, t, a[j][0], a[j][1]);
                wgmma_fence();
#pragma unroll
                for (int j = 0; j < QG_GROUP; ++j) {
                    // block j0 + j: k 32 (j0 + j) .., in box (j0 + j) / 2 at 16-element steps
                    // 2 ((j0 + j) % 2) and + 1
                    const int b = j0 + j;
                    const u64 desc = sw128_desc(sl + (b / 2) * BOX) + 2 * (2 * (b % 2));
                    qg_wgmma(d, a[j][0], desc);
                    qg_wgmma(d, a[j][1], desc + 2);
                }
                wgmma_commit();
                // (Waiting here, not one group later: a decode defining the next group's
                // registers while one is in flight makes ptxas serialize every wgmma; the other
                // consumer warpgroup's MMAs overlap this one's decode.)
                wgmma_wait0();
            }
        }
        // Every MMA that read the stage has retired: hand it back to the producer.
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[stage]);
        if (++stage == QG_STAGES) stage = 0, phase ^= 1;
    }
    const int ctid = threadIdx.x - 128;  // 0..255 over both consumers
    if (p.splits > 1) {
        constexpr int TILE = 256 * NACC;  // f32 of a partial tile
        float* slot = p.ws + (i64)tile * p.splits * TILE;
        float* mine = slot + (i64)split * TILE + ctid * 4;
#pragma unroll
        for (int j = 0; j < NACC / 4; ++j) st_cg4(mine + j * 1024, d[4 * j], d[4 * j + 1], d[4 * j + 2], d[4 * j + 3]);
        __threadfence();
        named_sync(1, 256);
        if (ctid == 0) {
            unsigned int* counter = p.counters + tile;
            const bool last = atomicAdd(counter, 1u) == (unsigned int)(p.splits - 1);
            if (last) *counter = 0u;
            *last_flag = last;
        }
        named_sync(1, 256);
        if (!*last_flag) return;
        __threadfence();
#pragma unroll
        for (int i = 0; i < NACC; ++i) d[i] = 0.f;
        for (int s = 0; s < p.splits; ++s) {
            const float* part = slot + (i64)s * TILE + ctid * 4;
#pragma unroll
            for (int j = 0; j < NACC / 4; ++j)
                ld_cg4_add(part + j * 1024, d[4 * j], d[4 * j + 1], d[4 * j + 2], d[4 * j + 3]);
        }
    }
    // d[4 j + e]: weight row (e < 2 ? g : g + 8) of the warp's 16 (gated: the gate's and the
    // up's row 8 warp + g), lhs row 8 j + 2 t + e % 2
    const int seg = seg_of(), lt = local(seg);
    OT* out = (OT*)(seg == 0 ? p.out[0] : seg == 1 ? p.out[1] : p.out[2]);
    const OT* res = (const OT*)p.res;
    const int n = seg == 0 ? p.n[0] : seg == 1 ? p.n[1] : p.n[2];
    if (GT) {
        const int row = lt * QG_ROWS + cw * (QG_ROWS / 2) + 8 * warp + g;
#pragma unroll
        for (int j = 0; j < NACC / 4; ++j) {
            const int col = 8 * j + 2 * t;
            qg_store<OT>(out, nullptr, p.m, n, col, row, qn_gated<OT>(d[4 * j], d[4 * j + 2]));
            qg_store<OT>(out, nullptr, p.m, n, col + 1, row, qn_gated<OT>(d[4 * j + 1], d[4 * j + 3]));
        }
        return;
    }
    const int row = lt * 2 * QG_ROWS + cw * QG_ROWS + warp * 16 + g;
#pragma unroll
    for (int j = 0; j < NACC / 4; ++j) {
        const int col = 8 * j + 2 * t;
        qg_store<OT>(out, res, p.m, n, col, row, d[4 * j]);
        qg_store<OT>(out, res, p.m, n, col + 1, row, d[4 * j + 1]);
        qg_store<OT>(out, res, p.m, n, col, row + 8, d[4 * j + 2]);
        qg_store<OT>(out, res, p.m, n, col + 1, row + 8, d[4 * j + 3]);
    }
}

// qgemm_sm90_<enc>_n<NL>[_gt]_<f32|bf16|f16>: NL lhs rows at most (16, 32, 64), the gated pair,
// the result's (and residual's) type; lhs is bf16. One family per encoding: QG_NAME (q4_0, ...)
// and QG_E (ENC_Q4_0, ...) are defined in front (sources.rs).
#define QGEMM_ENTRY(NAME, E, NL, OT, GT)                                                             \
    extern "C" __global__ void __launch_bounds__(384, Qg<E, NL>::BLOCKS)                            \
        NAME(const __grid_constant__ TmaMap map_l, const __grid_constant__ QgMaps maps, QgArgs p) {  \
        QGEMM_BODY(E, NL, OT, GT)                                                                    \
    }
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define QGEMM_BODY(E, NL, OT, GT) qgemm_sm90<E, NL, OT, GT>(&map_l, &maps, p);
#else
#define QGEMM_BODY(E, NL, OT, GT) asm volatile("trap;");
#endif
#define QGEMM_TYPES(ENC, E, NL)                                             \
    QGEMM_ENTRY(qgemm_sm90_##ENC##_n##NL##_f32, E, NL, float, false)         \
    QGEMM_ENTRY(qgemm_sm90_##ENC##_n##NL##_bf16, E, NL, bf16, false)         \
    QGEMM_ENTRY(qgemm_sm90_##ENC##_n##NL##_f16, E, NL, f16, false)           \
    QGEMM_ENTRY(qgemm_sm90_##ENC##_n##NL##_gt_f32, E, NL, float, true)       \
    QGEMM_ENTRY(qgemm_sm90_##ENC##_n##NL##_gt_bf16, E, NL, bf16, true)       \
    QGEMM_ENTRY(qgemm_sm90_##ENC##_n##NL##_gt_f16, E, NL, f16, true)
// (one more level, so that QG_NAME and QG_E expand before the pasting)
#define QGEMM_ENC(ENC, E) QGEMM_TYPES(ENC, E, 16) QGEMM_TYPES(ENC, E, 32) QGEMM_TYPES(ENC, E, 64)
#define QGEMM_ENC_(ENC, E) QGEMM_ENC(ENC, E)
QGEMM_ENC_(QG_NAME, QG_E)
