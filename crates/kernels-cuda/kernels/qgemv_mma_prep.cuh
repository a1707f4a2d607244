#line 1 "qgemv_mma_prep.cuh"
// qgemv_mma_prep.cuh: the lhs side of qgemv_mma.cu (which follows it in the family's source):
// the per-unit terms, the fixed-point B fragments every CTA prepares before its first tile, and
// their sharing between the CTAs of a cluster.

#define QM_WARPS 8  // warps of a block (launch/qgemv_mma.rs: QM_WARPS)

// Shared memory: the lhs fragments [units][MR][3 columns][4 lanes][2 words] (96 bytes per unit
// and row), the per-unit terms [units][MR] (QmMeta), 128 zero bytes (the fragments of unused
// columns), then, 128-byte aligned, per warp QmSegs::stages stages, their mbarriers and the group sums.
struct QmMeta {
    float s;   // 2^e
    int x;     // sum of x'
    float xf;  // 2^e * sum of x'
    int xh;    // sum of x' over the unit's elements 0..15
};

// 2^n for -126 <= n <= 127.
__device__ __forceinline__ float qm_pow2(int n) { return __int_as_float((n + 127) << 23); }

// The run of whole units [u0, u1) of K's `units` that this CTA of its cluster prepares.
__device__ __forceinline__ int2 qm_units(int units) {
    const int csize = (int)cluster_size(), per = (units + csize - 1) / csize;
    const int u0 = min(units, (int)cluster_rank() * per);
    return make_int2(u0, min(units, u0 + per));
}

// Warp `warp`'s share of the lhs fragments: per iteration four (unit, row) pairs, lanes 8i..8i+7
// the i-th, lane q of them elements 4q..4q+3 (one 16-byte load). Fragment register 0 of lane t
// of a column holds elements 4t..4t+3, register 1 elements 16+4t..19+4t: the four quants of
// one piece are one 32-bit store.
// Only the pairs of this CTA's units (qm_units), or every unit where CL is false (a kernel never
// launched in clusters).
template <int MR, typename T, bool CL>
__device__ __forceinline__ void qm_prep(const T* __restrict__ lhs, int k, int m, u8* frag, QmMeta* meta, int warp,
                                        int lane, const QNorm& nm, const float* inv) {
    const int q = lane % 8;
    const int2 us = CL ? qm_units(k / 32) : make_int2(0, k / 32);
    const int p0 = us.x * MR, pairs = us.y * MR;
    const T* __restrict__ gamma = (const T*)nm.gamma;
    // Four iterations' loads are issued before any is used.
    for (int b0 = p0 + 4 * warp; b0 < pairs; b0 += 16 * QM_WARPS) {
        float xv[4][4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int pr = b0 + 4 * QM_WARPS * i + lane / 8;
            const int u = pr / MR, r = pr % MR;
            if (pr < pairs && (MR <= 2 || r < m)) {  // rows from m on (MR = 4 at m = 3): zero fragments
                ld4(lhs + (i64)r * k + 32 * u + 4 * q, xv[i]);
            } else {
                xv[i][0] = xv[i][1] = xv[i][2] = xv[i][3] = 0.f;
            }
        }
        if (gamma) {
            // The folded RMSNorm: each element as the rms_norm kernel would have stored it.
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int pr = b0 + 4 * QM_WARPS * i + lane / 8;
                if (pr < pairs && (MR <= 2 || pr % MR < m)) {
                    float g[4];
                    ld4(gamma + 32 * (pr / MR) + 4 * q, g);
                    const float iv = inv[pr % MR];
#pragma unroll
                    for (int j = 0; j < 4; ++j) xv[i][j] = qn_apply<T>(xv[i][j], iv, g[j], nm);
                }
            }
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int pr = b0 + 4 * QM_WARPS * i + lane / 8;
            const bool ok = pr < pairs;
            const float4 x = make_float4(xv[i][0], xv[i][1], xv[i][2], xv[i][3]);
            // Largest |x| of the unit, inf when it holds an inf or NaN.
            auto mag = [](float v) { return fabsf(v) <= 3.40282347e38f ? fabsf(v) : __int_as_float(0x7F800000); };
            float amax = fmaxf(fmaxf(mag(x.x), mag(x.y)), fmaxf(mag(x.z), mag(x.w)));
#pragma unroll
            for (int off = 4; off > 0; off /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, off));
            int xq[4] = {0, 0, 0, 0};
            float s = 1.f;
            if (amax == __int_as_float(0x7F800000)) {
                s = __int_as_float(0x7FC00000);  // the unit's products are NaN
            } else if (amax > 0.f) {
                // amax in [2^E, 2^(E+1)); x' = x * 2^(20 - E), scaled in two exact steps (a
                // power of two may be out of f32's range, each half is not).
                const u32 ab = __float_as_uint(amax);
                const int big = ab >= 0x00800000u ? (int)(ab >> 23) - 127 : ilogbf(amax);
                const int a = (20 - big) / 2, b = 20 - big - a;
                const float fa = qm_pow2(a), fb = qm_pow2(b);
                const float xs[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
                for (int j = 0; j < 4; ++j) xq[j] = min(__float2int_rn(xs[j] * fa * fb), (1 << 21) - 1);
                s = qm_pow2(-a) * qm_pow2(-b);
            }
            int half = xq[0] + xq[1] + xq[2] + xq[3];
#pragma unroll
            for (int off = 2; off > 0; off /= 2) half += __shfl_xor_sync(0xFFFFFFFFu, half, off);
            const int sum = half + __shfl_xor_sync(0xFFFFFFFFu, half, 4);
            if (ok) {
                u32 hi = 0, mid = 0, lo = 0;
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    hi |= ((u32)(xq[j] >> 14) & 0xFFu) << (8 * j);
                    mid |= ((u32)(xq[j] >> 7) & 0x7Fu) << (8 * j);
                    lo |= ((u32)xq[j] & 0x7Fu) << (8 * j);
                }
                u32* f = (u32*)(frag + pr * 96 + (q % 4) * 8 + (q / 4) * 4);
                f[0] = hi;
                f[8] = mid;
                f[16] = lo;
                if (q == 0) {
                    QmMeta mt;
                    mt.s = s;
                    mt.x = sum;
                    mt.xf = (float)sum * s;
                    mt.xh = half;  // lane q = 0: elements 0..15
                    meta[pr] = mt;
                }
            }
        }
    }
}

// Launched in clusters: this CTA's run of prepared units (qm_units) copied into the shared
// memory of the cluster's other CTAs, after every CTA has started (the arrival at the kernel's
// start), then the cluster's barrier: every CTA's fragments are in place, and none is written
// after it. Every thread of the block calls it, after the block's barrier that follows qm_prep.
template <int MR> __device__ __forceinline__ void qm_share(const u8* frag, const QmMeta* meta, int units, int tid) {
    cluster_wait_aligned();
    const int csize = (int)cluster_size(), crank = (int)cluster_rank();
    const int2 us = qm_units(units);
    const int fv = (us.y - us.x) * MR * 96 / 16, mv = (us.y - us.x) * MR;  // 16-byte vectors
    const uint4* fsrc = (const uint4*)(frag + us.x * MR * 96);
    const uint4* msrc = (const uint4*)(meta + us.x * MR);
#pragma unroll 1
    for (int v = tid; v < fv + mv; v += QM_WARPS * 32) {
        const uint4* src = v < fv ? fsrc + v : msrc + (v - fv);
        const uint4 x = *src;
#pragma unroll 1
        for (int r = 1; r < csize; ++r) {
            const int to = crank + r < csize ? crank + r : crank + r - csize;
            cluster_st_v4(cluster_map(src, (u32)to), x);
        }
    }
    cluster_sync_aligned();
}
