#line 1 "qgemv_mma_unit.cuh"
// qgemv_mma_unit.cuh: the per-unit arithmetic of qgemv_mma.cu (which follows it in the family's
// source; its header explains the fixed point and the pairs of units): the integer mma, the
// quants' words of a row slot, a unit's join of its columns, and Q6_K's one-row stage.

#define QM_CHUNK 256  // K elements per stage: 8 units of 32 (one Q4_K super-block)
#define QM_UNITS (QM_CHUNK / 32)

// D = A (16 x 32 of AT, row) * B (32 x 8 s8, col), s32 (mma_<AT>s8), and D += A * B
// (mma_<AT>s8_acc): A u8 for the 4-bit and 6-bit quants, s8 for Q8_0's (qgemv_mma_tile.cu).
#define QM_MMA(AT)                                                                                                \
    __device__ __forceinline__ void mma_##AT##s8(int (&d)[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {   \
        asm("mma.sync.aligned.m16n8k32.row.col.s32." #AT ".s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, " \
            "{%10, %10, %10, %10};\n"                                                                            \
            : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])                                                      \
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(0));                                      \
    }                                                                                                             \
    __device__ __forceinline__ void mma_##AT##s8_acc(int (&d)[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0,       \
                                                     u32 b1) {                                                   \
        asm("mma.sync.aligned.m16n8k32.row.col.s32." #AT ".s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, " \
            "{%0, %1, %2, %3};\n"                                                                                \
            : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])                                                      \
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));                                              \
    }
QM_MMA(u8)
QM_MMA(s8)

__device__ __forceinline__ float qm_h2f(u32 bits) {
    float r;
    asm("cvt.f32.f16 %0, %1;\n" : "=f"(r) : "h"((u16)bits));
    return r;
}
__device__ __forceinline__ float qm_f16(const u8* p) { return qm_h2f(*(const u16*)p); }
// Byte j of v as a float: the byte under 2^23's exponent (one permute), minus 2^23.
__device__ __forceinline__ float qm_byte(u32 v, int j) {
    return __int_as_float(__byte_perm(v, 0x4B000000u, 0x7440u | (u32)j)) - 8388608.f;
}

// The 4 quant bytes of lane t in unit j of a row slot (Q4_0's 18-byte blocks leave even units'
// quants 2-byte aligned).
template <int E> __device__ __forceinline__ u32 qm_word(const u8* row, int j, int t) {
    if (E == ENC_Q4_0) {
        const u8* p = row + 18 * j + 2 + 4 * t;
        if (j % 2) return *(const u32*)p;
        return (u32)*(const u16*)p | ((u32)*(const u16*)(p + 2) << 16);
    }
    return *(const u32*)(row + 20 * j + 4 + 4 * t);
}

// One unit's sums for the lane's rows g (i[0]) and g + 8 (i[1]): the lane's two columns joined
// (weights m0, m1) plus `xk` (Q4_0's -8 * sum(x'), or 0), as floats times 2^e.
__device__ __forceinline__ void qm_join(const int (&c)[4], int m0, int m1, int xk, float s, float (&v)[2]) {
    v[0] = (float)(c[0] * m0 + c[1] * m1 + xk) * s;
    v[1] = (float)(c[2] * m0 + c[3] * m1 + xk) * s;
}

// The 32-bit word at p, 4-byte aligned or (ODD) 2 bytes past a word boundary.
template <bool ODD> __device__ __forceinline__ u32 qm_word6(const u8* p) {
    if (!ODD) return *(const u32*)p;
    return __funnelshift_r(*(const u32*)(p - 2), *(const u32*)(p + 2), 16);
}

// One Q6_K stage (a super-block of rows g and g + 8 at r0, r1) for one lhs row: see the header.
// Each half hh of the super-block (units 4 hh .. 4 hh + 3) has the same lane words: the low
// nibbles of units p and p + 2 share a word (bits 0-3 and 4-7), the high bits of its four units
// a word (bits 2 p), the scales of two units a word. They are read once per half (12 quant
// words and 4 scale words per row, against 40 reads per row when each unit read its own): the
// kernel was bound by shared-memory reads (an H200, 128256 x 4096: 87% of L1's throughput).
template <bool ODD>
__device__ __forceinline__ void q6_stage(const u8* r0, const u8* r1, const u8* frag, const u8* zero, const QmMeta* meta,
                                         int u0, int g, int t, int m0, int m1, float (&acc)[2]) {
    const int bp = g % 4;
    const u8* bs = bp < 3 ? frag + bp * 32 + t * 8 : zero;
    const int bstr = bp < 3 ? 96 : 0, th = t / 2;
    float aq[2] = {0.f, 0.f};
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
        // Row h's words of this half: low nibbles at 64 hh + 32 pb + 16 e + 4 t (pb = p & 1),
        // high bits at 128 + 32 hh + 16 e + 4 t, the scales of units 4 hh + 2 i, + 1 at
        // 192 + 8 hh + 4 i.
        u32 lo[2][2][2], hi[2][2], sw[2][2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const u8* row = h ? r1 : r0;
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                hi[h][e] = qm_word6<ODD>(row + 128 + 32 * hh + 16 * e + 4 * t);
#pragma unroll
                for (int pb = 0; pb < 2; ++pb) lo[h][pb][e] = qm_word6<ODD>(row + 64 * hh + 32 * pb + 16 * e + 4 * t);
            }
#pragma unroll
            for (int i = 0; i < 2; ++i) sw[h][i] = qm_word6<ODD>(row + 192 + 8 * hh + 4 * i);
        }
#pragma unroll
        for (int p = 0; p < 4; ++p) {
            const int u = u0 + 4 * hh + p, sn = 4 * (p >> 1), sh = 2 * p;
            u32 a[4];  // rows g, g + 8: elements 4t.. (a[0], a[1]) and 16 + 4t.. (a[2], a[3])
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int e = 0; e < 2; ++e)
                    a[2 * e + h] = ((lo[h][p & 1][e] >> sn) & 0x0F0F0F0Fu) | (((hi[h][e] >> sh) & 0x03030303u) << 4);
            uint2 b = *(const uint2*)(bs + u * bstr);
            if (g < 4) b.y = 0u;
            else b.x = 0u;
            const QmMeta mt = meta[u];
            int c[4];
            mma_u8s8(c, a[0], a[1], a[2], a[3], b.x, b.y);
            const int xk = t % 2 ? 0 : -32 * (th ? mt.x - mt.xh : mt.xh);
            float v[2];
            qm_join(c, m0, m1, xk, mt.s, v);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                // the half's int8 scale: byte 2 j + th of the 16 at 192 (j = 4 hh + p)
                const int sc = (int)(i8)(u8)(sw[h][p >> 1] >> (8 * (2 * (p & 1) + th)));
                aq[h] = fmaf(v[h], (float)sc, aq[h]);
            }
        }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) acc[h] = fmaf(qm_f16((h ? r1 : r0) + 208), aq[h], acc[h]);
}
