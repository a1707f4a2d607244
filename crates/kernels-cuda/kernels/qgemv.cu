#line 1 "qgemv.cu"
// qgemv.cu: qmatmul for up to 8 lhs rows (qgemv_<enc>_m{1,2,4,8}), the memory-bound decode case:
// the quantized weights are read once and decoded in registers. The layouts and the CPU reference
// are those of quant.cu; launch/quant.rs picks this path for M <= 8.
//
// A block of 8 warps handles 16 weight rows (2 per warp) and walks K in chunks of 1024 elements
// through a ring of ST shared-memory stages (4 for M <= 2): each stage holds the lhs chunk
// ([MR, 1024] of the activation type T, f32 / bf16 / f16, lane runs Lhs<T>::LD elements apart,
// quant_common.cuh) and the
// chunk's bytes of each of the block's rows (whole blocks, cp.async). ST - 1 chunks are in flight
// while one is decoded, so a K = 4096 row is requested all at once: at M = 1 the kernel is
// bound by memory latency and bandwidth only if enough bytes are in flight, and with two stages
// it was not. Only the stages of K's chunks are ever touched, and the launch allocates only
// those (a K of 576 takes one: more blocks resident for a vocabulary projection).
//
// Lane l decodes elements 32l .. 32l+31 of the chunk (one 32-element block, or one sub-block of
// a 256-element super-block) of each of its rows. For Q4_0, Q4_1, Q8_0 and Q4_K it reads the
// quants as 32-bit words (aligned shared loads and funnel shifts, whatever the row's alignment)
// and turns each quant into a float with one byte permute (the quant becomes the low byte of
// 2^23's bit pattern) and one subtraction: three instructions per weight and lhs row with the
// fma, which keeps decode under the memory time. Q6_K joins its low-nibble and high-bit words
// into 6-bit quants first (a few word operations per four weights); Q5_K decodes byte by byte. Block scales
// are applied once per 16 or 32 elements (sum of lhs * q, times the scale, minus min times the
// sum of lhs), so the result equals lhs @ dequantize(w)^T up to f32 rounding, like the CPU's
// gemm; the summation order is fixed, so the result is deterministic. 16-bit lhs is read as
// f32 and the result rounded once to T as it is stored (kernel suffix _bf16 / _f16).
//
// A folded RMSNorm (QvSegs::norm): warp r first sums the squares of lhs row r, and each stage
// stores the lhs chunk normalised and rounded to T as the rms_norm kernel would have (plain
// loads instead of cp.async for the lhs; it is a few KiB and in L2). At f32 the warp's loads of
// 1024 elements of its row (8 vectors a lane) go out at once, with each thread's gamma of the
// first chunk beside them at 1-2 rows, so at K <= 1024 the first stage waits one round trip
// after griddepcontrol.wait.
//
// Gated (QvSegs::gated): the gated MLP's silu(x W_gate^T) * (x W_up^T) in one launch; each
// warp decodes one row of the gate weights and the same row of the up weights (its two rows)
// and the store rounds as the separate products and the fused silu * mul would
// (quant_common.cuh's qn_gated).
//
// A folded rope + KV-cache store (QvSegs::rope, quant_common.cuh's QRope; segments q, k, v): a
// warp's two rows are a rotated pair, stored rotated into q_out and the cache by lane 0.

#define QV_WARPS 8
#define QV_CW 2        // weight rows per warp
#define QV_ROWS (QV_WARPS * QV_CW)
#define QV_CHUNK 1024  // elements of K per step, 32 per lane

// SLOT leaves room for the misalignment offset (< 16) and for the word reads that run up to 3
// bytes past a block's end.
template <int E> struct Chunk {
    enum { BYTES = QV_CHUNK / Enc<E>::ELEMS * Enc<E>::BYTES, SLOT = (BYTES + 32 + 15) / 16 * 16 };
};

// One stage: the lhs chunk [MR][32 lanes][Lhs<T>::LD] T, then QV_ROWS weight slots. ST stages.
template <int E, int MR, typename T> struct Qv {
    enum {
        ST = MR <= 2 ? 4 : (MR == 4 ? 3 : 2),
        LHS = MR * 32 * Lhs<T>::LD * (int)sizeof(T),
        BUF = LHS + QV_ROWS * Chunk<E>::SLOT,
    };
};

// (float)v for 0 <= v < 2^23 with bit operations; `bias` is subtracted exactly.
__device__ __forceinline__ float small_float(u32 v, float bias) { return __int_as_float(0x4B000000u | v) - (8388608.f + bias); }

// The quant of element t (0..32) of sub-block sb of the block at b, as a float, with the
// encoding's offset applied (q - 8, signed q, q - 32); Q4_1, Q4_K, Q5_K give q >= 0.
template <int E> __device__ __forceinline__ float quant(const u8* b, int sb, int t);
template <> __device__ __forceinline__ float quant<ENC_Q4_0>(const u8* b, int, int t) {
    const u32 byte = b[2 + (t & 15)];
    return small_float(t < 16 ? byte & 0xF : byte >> 4, 8.f);
}
template <> __device__ __forceinline__ float quant<ENC_Q4_1>(const u8* b, int, int t) {
    const u32 byte = b[4 + (t & 15)];
    return small_float(t < 16 ? byte & 0xF : byte >> 4, 0.f);
}
template <> __device__ __forceinline__ float quant<ENC_Q8_0>(const u8* b, int, int t) {
    return small_float((u32)b[2 + t] ^ 0x80u, 128.f);
}
template <> __device__ __forceinline__ float quant<ENC_Q4_K>(const u8* b, int sb, int t) {
    return small_float((b[16 + 32 * (sb >> 1) + t] >> (4 * (sb & 1))) & 0xF, 0.f);
}
template <> __device__ __forceinline__ float quant<ENC_Q5_K>(const u8* b, int sb, int t) {
    const u32 lo = (b[48 + 32 * (sb >> 1) + t] >> (4 * (sb & 1))) & 0xF;
    return small_float(lo | (((b[16 + t] >> sb) & 1) << 4), 0.f);
}
template <> __device__ __forceinline__ float quant<ENC_Q6_K>(const u8* b, int sb, int t) {
    const int h = sb >> 2, p = sb & 3;
    const u32 nib = (b[64 * h + 32 * (p & 1) + t] >> (4 * (p >> 1))) & 0xF;
    const u32 hi = (b[128 + 32 * h + t] >> (2 * p)) & 3;
    return small_float(nib | (hi << 4), 32.f);
}

// The sub-block's contribution from s[h] = sum of lhs * quant and l[h] = sum of lhs over its
// halves h (elements 0..15, 16..31).
template <int E> __device__ __forceinline__ float combine(const u8* b, int sb, const float* s, const float* l) {
    if (E == ENC_Q4_0 || E == ENC_Q8_0) return f16_at(b, 0) * (s[0] + s[1]);
    if (E == ENC_Q4_1) return f16_at(b, 0) * (s[0] + s[1]) + f16_at(b, 2) * (l[0] + l[1]);
    if (E == ENC_Q4_K || E == ENC_Q5_K) {
        u32 sc, m;
        scale_min(sb, b + 4, sc, m);
        return (f16_at(b, 0) * (float)sc) * (s[0] + s[1]) - (f16_at(b, 2) * (float)m) * (l[0] + l[1]);
    }
    const float d = f16_at(b, 208);  // Q6_K: one scale per 16 elements
    return (d * (float)(i8)b[192 + 2 * sb]) * s[0] + (d * (float)(i8)b[192 + 2 * sb + 1]) * s[1];
}

// The bytes [from, to) of src (offsets) into dst, under 16 of them: cp.async of whole 8- or
// 4-byte words when both ends are so aligned (Q6_K's 840-byte chunks start and end on 8),
// else plain byte copies, whose loads the warp waits for.
__device__ __forceinline__ void stage_edge(const u8* __restrict__ src, u64 from, u64 to, u8* __restrict__ dst, int lane) {
    const u64 ends = ((u64)src + from) | ((u64)src + to);
    const int w = (ends & 7) == 0 ? 8 : (ends & 3) == 0 ? 4 : 1;
    if (w == 1) {
        for (u64 i = from + lane; i < to; i += 32) dst[i] = src[i];
        return;
    }
    for (u64 i = from + (u64)lane * w; i < to; i += 32 * (u64)w) {
        const u32 d = (u32)__cvta_generic_to_shared(dst + i);
        if (w == 8) asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(d), "l"(src + i));
        else asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(d), "l"(src + i));
    }
}

// Copies bytes [0, len) at src into slot + (src % 16), so that 16-byte aligned global vectors
// land on 16-byte aligned shared addresses: cp.async for the aligned middle, and for the
// unaligned head and tail where they are whole words (stage_edge); only rows or chunks that do
// not start or end on 16 bytes have a head or tail.
__device__ __forceinline__ void stage_bytes(const u8* __restrict__ src, i64 len, u8* __restrict__ slot, int lane) {
    const u64 a = (u64)src, end = a + (u64)len;
    u8* dst = slot + (a & 15);
    u64 va = (a + 15) & ~15ull;
    if (va > end) va = end;
    u64 vb = end & ~15ull;
    if (vb < va) vb = va;
    if (va > a) stage_edge(src, 0, va - a, dst, lane);
    for (u64 i = lane; i < (vb - va) / 16; i += 32) cp_async16(dst + (va - a) + 16 * i, src + (va - a) + 16 * i, true);
    if (end > vb) stage_edge(src, vb - a, end - a, dst, lane);
}

// Where the lane's 32 quants sit and how they are packed, for the encodings decoded by words.
// SPLIT: 16 bytes, element t < 16 in the low nibble of byte t, t >= 16 in the high nibble of
// byte t - 16 (Q4_0, Q4_1). Otherwise 32 bytes, element t in byte t (Q8_0, signed), or in the
// nibble 4 * (sb & 1) of byte t (Q4_K).
template <int E> struct Words {
    enum { FAST = 0, NW = 1, SPLIT = 0 };
};
template <> struct Words<ENC_Q4_0> { enum { FAST = 1, NW = 4, SPLIT = 1 }; };
template <> struct Words<ENC_Q4_1> { enum { FAST = 1, NW = 4, SPLIT = 1 }; };
template <> struct Words<ENC_Q8_0> { enum { FAST = 1, NW = 8, SPLIT = 0 }; };
template <> struct Words<ENC_Q4_K> { enum { FAST = 1, NW = 8, SPLIT = 0 }; };
// Q6_K: element t's low 4 bits in nibble 4 * (p >> 1) of byte t of the quarter's ql run, its
// high 2 bits at bit 2 * p of byte t of the half's qh run (p = sb % 4): two word runs joined
// into 6-bit quants, one per byte.
template <> struct Words<ENC_Q6_K> { enum { FAST = 1, NW = 8, SPLIT = 0 }; };

template <int E> __device__ __forceinline__ int quant_offset(int sb) {
    if (E == ENC_Q6_K) return 64 * (sb >> 2) + 32 * (sb & 1);
    return E == ENC_Q4_0 ? 2 : E == ENC_Q4_1 ? 4 : E == ENC_Q8_0 ? 2 : 16 + 32 * (sb >> 1);
}
template <int E> __device__ __forceinline__ float quant_bias() {
    return E == ENC_Q4_0 ? 8.f : E == ENC_Q8_0 ? 128.f : E == ENC_Q6_K ? 32.f : 0.f;
}

// NW little-endian words from the shared-memory bytes at p (any alignment): aligned loads
// (pointer arithmetic on p keeps them shared-memory loads) joined by funnel shifts.
template <int NW> __device__ __forceinline__ void load_words(const u8* p, u32 (&wd)[NW]) {
    const int mis = (int)((u64)p & 3);
    const u32* b = (const u32*)(p - mis);
    const u32 sh = 8u * (u32)mis;
    u32 prev = b[0];
#pragma unroll
    for (int i = 0; i < NW; ++i) {
        const u32 next = b[i + 1];
        wd[i] = __funnelshift_r(prev, next, sh);
        prev = next;
    }
}

// Byte j (0..3) of v as a float, minus bias: v's byte under 2^23's exponent (`magic` holds
// 0x4B000000; a kernel argument, so that the permute's selector, not the magic, is its immediate
// and no selector has to be moved into a register first), then one subtraction.
__device__ __forceinline__ float byte_float(u32 v, u32 magic, int j, float bias) {
    return __int_as_float(__byte_perm(v, magic, 0x7440u | (u32)j)) - (8388608.f + bias);
}

// One chunk's contribution for the lane: its 32 elements (one 32-element block, or sub-block sb
// of a 256-element super-block) of each of the warp's CW rows, whose bytes start at bb[c],
// against the staged lhs at lr (the lane's run of each of the MR rows, 32 * Lhs<T>::LD elements
// apart), added to acc.
template <int E, int MR, int CW, typename T>
__device__ __forceinline__ void chunk_dot(const T* lr, const u8* const (&bb)[CW], int sb, u32 magic,
                                          float (&acc)[CW][MR]) {
    typedef Words<E> WD;
    float s[CW][MR][2], l[MR][2];
#pragma unroll
    for (int r = 0; r < MR; ++r) {
        l[r][0] = l[r][1] = 0.f;
#pragma unroll
        for (int c = 0; c < CW; ++c) s[c][r][0] = s[c][r][1] = 0.f;
    }
    if (WD::FAST) {
        u32 wd[CW][WD::NW];
#pragma unroll
        for (int c = 0; c < CW; ++c) {
            load_words<WD::NW>(bb[c] + quant_offset<E>(sb), wd[c]);
            if (E == ENC_Q6_K) {
                u32 hw[WD::NW];
                load_words<WD::NW>(bb[c] + 128 + 32 * (sb >> 2), hw);
                const int p = sb & 3;
#pragma unroll
                for (int i = 0; i < WD::NW; ++i)
                    wd[c][i] = ((wd[c][i] >> (4 * (p >> 1))) & 0x0F0F0F0Fu) | (((hw[i] >> (2 * p)) & 0x03030303u) << 4);
            }
#pragma unroll
            for (int i = 0; i < WD::NW; ++i) {
                if (E == ENC_Q8_0) wd[c][i] ^= 0x80808080u;
                if (E == ENC_Q4_K) wd[c][i] >>= 4 * (sb & 1);
            }
        }
        // Word i holds elements 4i .. 4i+3 (and, SPLIT, 16+4i .. 16+4i+3 in its high nibbles).
#pragma unroll
        for (int i = 0; i < WD::NW; ++i) {
#pragma unroll
            for (int half = 0; half < (WD::SPLIT ? 2 : 1); ++half) {
                const int t0 = 4 * i + 16 * half, h = t0 / 16;
                float x[MR][4];
#pragma unroll
                for (int r = 0; r < MR; ++r) ld4(lr + r * 32 * Lhs<T>::LD + t0, x[r]);
                u32 q4[CW];
#pragma unroll
                for (int c = 0; c < CW; ++c) {
                    const u32 v = WD::SPLIT ? (half ? wd[c][i] >> 4 : wd[c][i]) : wd[c][i];
                    q4[c] = E == ENC_Q8_0 || E == ENC_Q6_K ? v : v & 0x0F0F0F0Fu;
                }
#pragma unroll
                for (int j = 0; j < 4; ++j) {
#pragma unroll
                    for (int r = 0; r < MR; ++r) l[r][h] += x[r][j];
#pragma unroll
                    for (int c = 0; c < CW; ++c) {
                        const float q = byte_float(q4[c], magic, j, quant_bias<E>());
#pragma unroll
                        for (int r = 0; r < MR; ++r) s[c][r][h] = fmaf(x[r][j], q, s[c][r][h]);
                    }
                }
            }
        }
    } else {
#pragma unroll
        for (int t4 = 0; t4 < 8; ++t4) {
            float x[MR][4];
#pragma unroll
            for (int r = 0; r < MR; ++r) ld4(lr + r * 32 * Lhs<T>::LD + 4 * t4, x[r]);
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const int t = 4 * t4 + u, h = t / 16;
#pragma unroll
                for (int r = 0; r < MR; ++r) l[r][h] += x[r][u];
#pragma unroll
                for (int c = 0; c < CW; ++c) {
                    const float q = quant<E>(bb[c], sb, t);
#pragma unroll
                    for (int r = 0; r < MR; ++r) s[c][r][h] = fmaf(x[r][u], q, s[c][r][h]);
                }
            }
        }
    }
#pragma unroll
    for (int c = 0; c < CW; ++c)
#pragma unroll
        for (int r = 0; r < MR; ++r) acc[c][r] += combine<E>(bb[c], sb, s[c][r], l[r]);
}

template <int E, int MR, typename T>
__device__ __forceinline__ void qgemv(const T* __restrict__ lhs, const u8* __restrict__ w, const u64* out_at,
                                      i64 m, i64 n, i64 k, i64 row_bytes, u32 magic, i64 blk, const QNorm& nm,
                                      i64 cstride, bool gated, const QRope& rope, int seg, bool early) {
    extern __shared__ __align__(16) u8 qv_smem[];
    __shared__ float qv_inv[MR];
    typedef Qv<E, MR, T> S;
    enum { LD = Lhs<T>::LD, VEC = Lhs<T>::VEC };
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    // Gated: the warp's two rows are row0 of the gate weights (c = 0) and of the up weights
    // (c = 1, cstride bytes on); else rows row0 and row0 + 1 (cstride = row_bytes).
    const i64 row0 = gated ? blk * QV_WARPS + warp : (blk * QV_WARPS + warp) * QV_CW;
    auto row_of = [&](int c) { return gated ? row0 : row0 + c; };
    const int sb = lane % (Enc<E>::ELEMS / 32);
    const bool lhs_aligned = ((u64)lhs & 15) == 0;  // k is a multiple of 32: every row then is
    const i64 chunks = (k + QV_CHUNK - 1) / QV_CHUNK;
    const u8* wrow = w + row0 * row_bytes;  // the warp's first row
    // Rows on 16-byte boundaries: each row's chunk is whole vectors (every chunk but Q6_K's is a
    // multiple of 16 bytes).
    const bool aligned = Chunk<E>::BYTES % 16 == 0 && row_bytes % 16 == 0 && (((u64)w | (u64)cstride) & 15) == 0;

    // A folded norm at 1-2 rows of f32: chunk 0's gamma elements of this thread, loaded after
    // the wait beside the inverse rms's loads (PRE), so that the first stage's normalising
    // waits only for its lhs, which those loads just brought into L1 (16-bit rows: registers
    // would spill).
    constexpr bool PRE = MR <= 2 && sizeof(T) == 4;
    float pre_g[VEC];

    // Issues the copies of chunk ch (if it exists) into stage ch % ST: its lhs (`lhs_on`) and its
    // weights (`w_on`); one cp.async group per thread either way, so group counting stays
    // uniform.
    auto stage = [&](i64 ch, bool lhs_on, bool w_on) {
        if (ch < chunks && lhs_on) {
            const int buf = (int)(ch % S::ST);
            T* ls = (T*)(qv_smem + buf * S::BUF);
            u8* slots = qv_smem + buf * S::BUF + S::LHS;
            const i64 k0 = ch * QV_CHUNK;
            const int kc = (int)min((i64)QV_CHUNK, k - k0);  // elements of this chunk
#pragma unroll
            for (int r = 0; r < MR; ++r) {
                // Elements t .. t + VEC - 1 of row r: one 16-byte vector (256 threads, 1024
                // elements: every thread for f32, half of them for 16-bit).
                const int t = VEC * (int)threadIdx.x;
                if (VEC * QV_WARPS * 32 > QV_CHUNK && t >= QV_CHUNK) continue;
                const bool ok = r < m && t < kc;
                T* d = ls + r * 32 * LD + (t / 32) * LD + t % 32;
                if (nm.gamma) {
                    // The folded RMSNorm (lhs and gamma 16-byte aligned): loaded, normalised
                    // and rounded as rms_norm stores it, then stored to the stage.
                    const float iv = qv_inv[r];
                    const T* gamma = (const T*)nm.gamma;
#pragma unroll
                    for (int h = 0; h < VEC / 4; ++h) {
                        float x[4] = {0.f, 0.f, 0.f, 0.f}, g[4] = {0.f, 0.f, 0.f, 0.f};
                        if (ok) {
                            ld4(lhs + r * k + k0 + t + 4 * h, x);
                            if (PRE && ch == 0) {
#pragma unroll
                                for (int j = 0; j < 4; ++j) g[j] = pre_g[4 * h + j];
                            } else {
                                ld4(gamma + k0 + t + 4 * h, g);
                            }
                        }
#pragma unroll
                        for (int j = 0; j < 4; ++j) d[4 * h + j] = FromF32<T>::go(ok ? qn_apply<T>(x[j], iv, g[j], nm) : 0.f);
                    }
                } else if (lhs_aligned) {
                    cp_async16(d, ok ? lhs + r * k + k0 + t : lhs, ok);
                } else {
#pragma unroll
                    for (int j = 0; j < VEC; ++j) d[j] = ok ? lhs[r * k + k0 + t + j] : FromF32<T>::go(0.f);
                }
            }
        }
        if (ch < chunks && w_on) {
            u8* slots = qv_smem + (int)(ch % S::ST) * S::BUF + S::LHS;
            const i64 b0 = ch * Chunk<E>::BYTES, blen = min((i64)Chunk<E>::BYTES, row_bytes - b0);
            u8* mine = slots + warp * QV_CW * Chunk<E>::SLOT;
            if (aligned) {
                // Whole 16-byte vectors at offset 0 of each slot; the warp's rows share the loop.
                const int V = Chunk<E>::BYTES / 16, nv = (int)(blen / 16);
                for (int v = lane; v < QV_CW * V; v += 32) {
                    const int c = v / V, o = v - c * V;
                    if (o < nv && row_of(c) < n) cp_async16(mine + c * Chunk<E>::SLOT + 16 * o, wrow + c * cstride + b0 + 16 * o, true);
                }
            } else {
#pragma unroll
                for (int c = 0; c < QV_CW; ++c)
                    if (row_of(c) < n) stage_bytes(wrow + c * cstride + b0, blen, mine + c * Chunk<E>::SLOT, lane);
            }
        }
        cp_async_commit();
    };

    float acc[QV_CW][MR];
#pragma unroll
    for (int c = 0; c < QV_CW; ++c)
#pragma unroll
        for (int r = 0; r < MR; ++r) acc[c][r] = 0.f;

    // Programmatic dependent launch (launch/pdl.rs). With `early` (the weights are constants: no
    // kernel of the program writes them) the first ST - 1 stages' weight copies go out before
    // the wait, their cp.async groups ahead of the stages' lhs groups, so only the lhs is read
    // once the previous kernel is done (at K <= 1024 the copies of every byte of the block's
    // weights are issued by then). Otherwise those bytes are only asked into L2 (a hint: L2 is where
    // every SM's stores land, so a weight an earlier kernel still writes is read right after the
    // wait all the same). Either way the kernel waits before it reads the lhs or stores.
    // The prologue's loops stay loops: each unrolled copy of `stage` is a few hundred
    // instructions, and a block at K <= 1024 runs its code once.
    if (early) {
#pragma unroll 1
        for (int s = 0; s < S::ST - 1; ++s) stage(s, false, true);
    } else {
        const i64 pre = min(row_bytes, (i64)(S::ST - 1) * Chunk<E>::BYTES);
#pragma unroll
        for (int c = 0; c < QV_CW; ++c)
            if (row_of(c) < n)
                for (i64 o = (i64)lane * 128; o < pre + 127; o += 32 * 128)
                    asm volatile("prefetch.global.L2 [%0];" ::"l"(wrow + c * cstride + min(o, pre - 1)) : "memory");
    }
    pdl_wait();
    pdl_launch_dependents();
    if (nm.gamma) {
        if (PRE) {
            // (zeros where the stage's `ok` is false: it does not read them there)
            const int t = VEC * (int)threadIdx.x;
            const bool in = !(VEC * QV_WARPS * 32 > QV_CHUNK && t >= QV_CHUNK) && t < k;
#pragma unroll
            for (int h = 0; h < VEC / 4; ++h) {
                float g[4] = {0.f, 0.f, 0.f, 0.f};
                if (in) ld4((const T*)nm.gamma + t + 4 * h, g);
#pragma unroll
                for (int j = 0; j < 4; ++j) pre_g[4 * h + j] = g[j];
            }
        }
        // The folded RMSNorm's inverse rms of each lhs row (warp r takes row r), before the
        // first stage normalises its lhs chunk.
        if (warp < m) {
            const float v = qn_inv_rms<T, sizeof(T) == 4 ? 8 : 2>(lhs + warp * k, (int)k, nm.eps, lane);
            if (lane == 0) qv_inv[warp] = v;
        }
        __syncthreads();
    }

#pragma unroll 1
    for (int s = 0; s < S::ST - 1; ++s) stage(s, true, !early);
    // A folded rope (QRope) at one row: what the store of the warp's pair needs comes in beside
    // the first stages' copies, into shared memory (at two rows, at the store: registers).
    __shared__ QRopeAt qv_rope[MR == 1 ? QV_WARPS : 1];
    if constexpr (MR == 1) {
        if (rope.on && lane == 0 && row0 < n) qv_rope[warp] = qrope_at<T>(rope, seg, 0, row0);
    }
    for (i64 ch = 0; ch < chunks; ++ch) {
        cp_async_wait<S::ST - 2>();  // chunk ch has landed (this thread's copies; `early`'s are older) ...
        __syncthreads();             // ... everyone's, and stage (ch - 1) % ST is no longer read
        stage(ch + S::ST - 1, true, true);
        const int buf = (int)(ch % S::ST);
        const i64 k0 = ch * QV_CHUNK, b0 = ch * Chunk<E>::BYTES;
        if (k0 + 32 * lane >= k) continue;
        const T* lr = (const T*)(qv_smem + buf * S::BUF) + lane * LD;
        const u8* slots = qv_smem + buf * S::BUF + S::LHS;
        const u8* bb[QV_CW];
#pragma unroll
        for (int c = 0; c < QV_CW; ++c)
            bb[c] = slots + (warp * QV_CW + c) * Chunk<E>::SLOT + ((u64)(wrow + c * cstride + b0) & 15) +
                    (lane * 32 / Enc<E>::ELEMS) * Enc<E>::BYTES;
        chunk_dot<E, MR, QV_CW, T>(lr, bb, sb, magic, acc);
    }
    cp_async_wait<0>();  // no copy may still target shared memory when the block exits
    // The output's and the residual's addresses wait in shared memory (written before the first
    // barrier): kept in registers through the loop they cost a spill in some variants.
    T* __restrict__ out = reinterpret_cast<T*>(out_at[0]);
    const T* __restrict__ res = reinterpret_cast<const T*>(out_at[1]);
    if (gated) {
#pragma unroll
        for (int r = 0; r < MR; ++r) {
            float v[QV_CW];
#pragma unroll
            for (int c = 0; c < QV_CW; ++c) {
                v[c] = acc[c][r];
#pragma unroll
                for (int off = 16; off > 0; off /= 2) v[c] += __shfl_xor_sync(0xFFFFFFFFu, v[c], off);
            }
            if (lane == 0 && r < m && row0 < n) out[r * n + row0] = FromF32<T>::go(qn_gated<T>(v[0], v[1]));
        }
        return;
    }
    if constexpr (MR <= 2) {
        if (rope.on) {
            // The warp's rows row0 (even) and row0 + 1 are a rotated pair (QRope); the segment
            // waits in shared memory with the addresses.
            const int sg = (int)out_at[2];
            __syncwarp();  // (qv_rope's entry is the warp's own)
#pragma unroll
            for (int r = 0; r < MR; ++r) {
                float v[QV_CW];
#pragma unroll
                for (int c = 0; c < QV_CW; ++c) {
                    v[c] = acc[c][r];
#pragma unroll
                    for (int off = 16; off > 0; off /= 2) v[c] += __shfl_xor_sync(0xFFFFFFFFu, v[c], off);
                }
                if (lane == 0 && r < m && row0 + 1 < n) {
                    const QRopeAt a = MR == 1 ? qv_rope[warp] : qrope_at<T>(rope, sg, r, row0);
                    qrope_store<T>(rope, a, sg, r, row0, n, v[0], v[1]);
                    qrope_store<T>(rope, a, sg, r, row0 + 1, n, v[1], v[0]);
                }
            }
            return;
        }
    }
#pragma unroll
    for (int c = 0; c < QV_CW; ++c)
#pragma unroll
        for (int r = 0; r < MR; ++r) {
            float v = acc[c][r];
#pragma unroll
            for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, off);
            if (lane == 0 && r < m && row0 + c < n)
                out[r * n + row0 + c] = FromF32<T>::go(res ? v + to_f32(res[r * n + row0 + c]) : v);
        }
}

// The byte-decoded encoding (Q5_K), Q6_K and every 4- and 8-row variant take a minimum-blocks
// hint of 1: without it ptxas squeezed the byte-decoded qgemv_q6_k_m1 into 40 registers
// (qgemv_q4_1_m4 into 80) and spilled; the others keep their lower register counts (and 4
// blocks per SM) without it.
//
// One launch serves up to QV_SEGS products of the same lhs by weights of the same encoding and
// K (a layer's q, k and v projections, or its gate and up): segment s owns blocks first[s] ..
// first[s + 1] - 1 and writes its own output, so siblings cost one launch instead of one each.
#define QV_SEGS 4
struct QvSegs {
    u64 w[QV_SEGS], out[QV_SEGS];
    u64 res[QV_SEGS];  // T [m, n] added to the product (a residual), or 0
    i64 n[QV_SEGS];
    i32 first[QV_SEGS];
    i32 count;
    i32 early;   // the first stages' weight copies before griddepcontrol.wait (constant weights)
    QNorm norm;  // the RMSNorm folded into the lhs (quant_common.cuh), or gamma 0
    // silu(w[0] product) * (w[1] product) into out[0] (one segment of n rows; a block per
    // QV_WARPS output rows, each warp a row of both weights), or 0
    i32 gated, pad2;
    QRope rope;  // segments q, k, v: the rope and the cache store in the products' store (rope.on)
};

#define QV_BOUNDS(E, MR) __launch_bounds__(256, Words<E>::FAST && E != ENC_Q6_K && MR <= 2 ? 0 : 1)
#define QGEMV(NAME, E, MR, T, TS)                                                                          \
    extern "C" __global__ void QV_BOUNDS(E, MR)                                                           \
        qgemv_##NAME##_m##MR##TS(const T* lhs, QvSegs segs, i64 m, i64 k, i64 row_bytes, u32 magic) {      \
        u64 w = segs.w[0], out = segs.out[0], res = segs.res[0];                                          \
        i64 n = segs.n[0], first = 0;                                                                     \
        int seg = 0;                                                                                      \
        _Pragma("unroll") for (int s = 1; s < QV_SEGS; ++s) {                                             \
            if (s < segs.count && (i64)blockIdx.x >= segs.first[s]) {                                     \
                w = segs.w[s];                                                                            \
                out = segs.out[s];                                                                        \
                res = segs.res[s];                                                                        \
                n = segs.n[s];                                                                            \
                first = segs.first[s];                                                                    \
                seg = s;                                                                                  \
            }                                                                                             \
        }                                                                                                 \
        __shared__ u64 seg_out[3];                                                                        \
        if (threadIdx.x == 0) seg_out[0] = out, seg_out[1] = res, seg_out[2] = (u64)seg;                  \
        const bool gated = segs.gated != 0;                                                               \
        const i64 cstride = gated ? (i64)(segs.w[1] - segs.w[0]) : row_bytes;                             \
        qgemv<E, MR, T>(lhs, (const u8*)w, seg_out, m, n, k, row_bytes, magic, (i64)blockIdx.x - first,     \
                        segs.norm, cstride, gated, segs.rope, seg, segs.early != 0);                      \
    }
#define QGEMV_T(NAME, E, T, TS) QGEMV(NAME, E, 1, T, TS) QGEMV(NAME, E, 2, T, TS) QGEMV(NAME, E, 4, T, TS) QGEMV(NAME, E, 8, T, TS)
// One encoding and activation type per compile: sources.rs builds a family qgemv_<enc>_<type>
// per pair, defining in front QV_NAME (q4_0, ...), QV_E (ENC_Q4_0, ...), QV_T (float, bf16, f16)
// and QV_TS (the kernel suffix: none, _bf16, _f16), so that a model compiles only the kernels of
// its encodings and dtype (every pair in one module took minutes of NVRTC and ptxas).
#ifndef QV_E
#error "qgemv.cu needs QV_NAME, QV_E, QV_T and QV_TS (sources.rs defines them per family)"
#endif
QGEMV_T(QV_NAME, QV_E, QV_T, QV_TS)
