#line 1 "gemv_nt.cu"
// gemv_nt.cu: C = epilogue(A @ W^T) with W [N, K] as a linear layer stores it, for the few rows
// of a decode step (launch/gemv_nt.rs). skinny_rows.cuh is in front of it.
//
//
// skinny_nt_<T>_m<MR>_<vec|any>[_norm][_gated]: A [M, K] with M <= MR (1, 2 or 4), W [N, K],
// C [M, N], all row-major. A warp computes whole dot products: it owns R = MR consecutive rows
// of W, reads them from start to end in 16-byte lane vectors (512 bytes per row and step; 8 / R
// steps in flight, as two groups of 4 / R: a group is refilled as soon as its sums are taken,
// while the other stays in flight), takes the matching A vectors through L1 (every warp
// reads the same A; each vector serves the warp's R rows, so L1 carries no more bytes than the
// weights), and the lanes' sums meet by shuffles. Nothing is split over K, so there is no
// workspace and no second pass: for the small products of a decode step the time is latency,
// and the chain here is the launch, the round trips of the groups of steps and the store.
// `vec`: K % V == 0 and A, W 16-byte aligned (every vector is whole); `any`: element loads,
// zero past K.
//
// `_norm` folds the RMSNorm before a linear layer into its product: each warp first sums the
// squares of its A rows (A is a few KiB and stays in L1), then normalises every A vector as it
// takes it, rounding to T exactly as the rms_norm kernel stores its result. The lanes own the
// same 16-byte vectors as rms_norm_cached_warp's and add them in the same order, so with `vec`
// the product sees the very values the separate rms_norm would have written.
//
// Every variant may launch under programmatic dependent launch (launch/pdl.rs): a warp issues
// its first group of weight loads (the `_norm` variants: L2 prefetches of it), then waits for
// the previous kernel (pdl_wait), then lets the next one launch and reads A. The sums and
// their order are those of a plain launch.
//
// `_postnorm` folds the same RMSNorm for rows longer than a warp's first pass can afford
// (every warp of `_norm` sums the squares of A before its products): the lanes add the squares
// of the A vectors they take for the products, and the warp scales its sums by 1 / rms once
// they are whole, `(A / rms * g) @ W^T = (A * g) @ W^T / rms`. Nothing is rounded to T on the
// way, so it matches the separate rms_norm's values to rounding, not bit for bit (16-bit types).
//
// `_ks<KS>` (plain `vec` products of one row of A, 16-bit types): KS warps of a block share its
// rows, each summing a run of whole steps of K, and the rows' first warp adds the parts in order
// through shared memory: for products of few rows of long K (Llama-3.2-1B's down projection,
// 2,048 rows of 8,192), whose single warps per row leave the SMs with too few loads in flight.
//
// `_rope` (one row of A, `vec`, 16-bit types; segments q, k and v of heads x dim rows) folds the decode step's
// rope and KV-cache store into the products' store (passes/fuse_qkv_rope_store.rs, NtRope): a
// warp owns the two rows of one rotated pair (a neox rotation's dims j and j + rot / 2, an
// interleaved one's 2j and 2j + 1; dims past `rot` and v's rows in adjacent pairs), rounds both
// sums to T as the products would store them, and writes q's rotated into q_out, k's rotated and
// v's as they are into the paged cache at the token's slot, as attention.cu's rope_kv_store does.
//
// `_gated` is the gated MLP's first half, `act(A @ Wg^T) * (A @ Wu^T)` with Wg = w[0] and
// Wu = w[1] (one segment): a warp owns the same R rows of both weights, and the store rounds
// act(gate) and up to T before their product, as the separate gate, up and mul steps do.

#define NT_WARPS 4

// Up to NT_SEGS products of one A by different weights (a layer's q, k and v projections; its
// gate and up projections) run as one launch: segment s owns blocks [first[s], first[s + 1]).
#define NT_SEGS 4

// The rope + KV-cache store of `_rope` (NtArgs::rope): q_out [1, q rows]; the paged cache
// [pages, 2, layers, page_size, kv rows]; the token's slot and position (u32), the table freqs
// [npos, rot] of (cos, sin) pairs (f32 when freqs_f32, else T).
struct NtRope {
    u64 q_out, blocks, slots, freqs, pos;
    i64 npos, page_size, layers, pages, layer;
    i32 dim, rot, freqs_f32, interleaved;
};

struct NtArgs {
    u64 a;
    i64 m, k;
    i64 segs;
    u64 w[NT_SEGS], c[NT_SEGS];
    i64 n[NT_SEGS];
    i64 first[NT_SEGS + 1];
    Epilogue epi;
    u64 gamma;     // _norm: the norm weight [K]
    float eps;     // _norm: added to mean(x^2)
    float offset;  // _norm: added to every weight
    i32 mbc;       // _norm: the weight multiplies before the rounding to T (rms_norm's option)
    i32 pad;
    NtRope rope;   // _rope
};

// Pair t of a segment's rows (heads x dim): its rows a and b, the pair's frequency j, and
// whether it rotates (q's and k's pairs within the rotary dims; v's never).
__device__ __forceinline__ void nt_rope_pair(const NtRope& rp, int seg, i64 t, i64& a, i64& b, int& j, bool& rot) {
    const i64 half = rp.dim / 2, base = t / half * rp.dim;
    const int jj = (int)(t % half);
    if (rp.interleaved || 2 * jj >= rp.rot) {
        // adjacent rows: an interleaved pair, or (neox, dims past rot) two passed through
        const int first = rp.interleaved ? 2 * jj : rp.rot + 2 * (jj - rp.rot / 2);
        a = base + first;
        b = a + 1;
        rot = rp.interleaved && 2 * jj < rp.rot;
    } else {
        a = base + jj;
        b = a + rp.rot / 2;
        rot = true;
    }
    j = jj;
    rot = rot && seg < 2;
}

// What a pair's store needs besides its sums, read once the previous kernel is done and before
// the products: the pair's (cos, sin) at the token's position (`bad`: past the table) and the
// token's slot.
struct NtRopeAt {
    float c, s;
    u32 slot;
    int bad;
};

template <typename T> __device__ __forceinline__ NtRopeAt nt_rope_at(const NtRope& rp, int seg, int j, bool rot) {
    NtRopeAt at = {1.f, 0.f, 0u, 0};
    if (rot) {
        const u32 p = ((const u32*)rp.pos)[0];
        at.bad = (i64)p >= rp.npos;  // past the table: NaN, as rope_at
        if (!at.bad) {
            const i64 f = (i64)p * rp.rot + 2 * j;
            at.c = rp.freqs_f32 ? ((const float*)rp.freqs)[f] : to_f32(((const T*)rp.freqs)[f]);
            at.s = rp.freqs_f32 ? ((const float*)rp.freqs)[f + 1] : to_f32(((const T*)rp.freqs)[f + 1]);
        }
    }
    if (seg > 0) at.slot = ((const u32*)rp.slots)[0];
    return at;
}

// Rows a and b of segment seg (n rows) from the products' stored values x and y: q's into
// q_out, k's and v's into the cache at the token's slot (none past the cache's slots).
template <typename T>
__device__ __forceinline__ void nt_rope_store(const NtRope& rp, const NtRopeAt& at, bool rot, int seg, i64 a, i64 b,
                                              i64 n, float x, float y) {
    float oa = x, ob = y;
    if (rot) {
        rotate_pair(x, y, at.c, at.s, oa, ob);
        if (at.bad) oa = ob = nan32(false);
    }
    T* dst;
    if (seg == 0) {
        dst = (T*)rp.q_out;
    } else {
        const i64 slot = at.slot;
        if (slot >= rp.pages * rp.page_size) return;  // no page: not stored, as kv_cache_store
        const i64 page = slot / rp.page_size, off = slot % rp.page_size;
        dst = (T*)rp.blocks + ((page * 2 + (seg == 2)) * rp.layers + rp.layer) * rp.page_size * n + off * n;
    }
    dst[a] = FromF32<T>::go(oa);
    dst[b] = FromF32<T>::go(ob);
}

// V = 16 / sizeof(T) elements of A at [col, col + V) into 4 words, cached in L1 (re-read by
// every warp of the block), zero past K.
template <typename T, bool VEC>
__device__ __forceinline__ void load_a(u32* w, const T* row, i64 col, i64 k) {
    if constexpr (VEC) {
        const uint4 q = __ldg(reinterpret_cast<const uint4*>(row + col));
        w[0] = q.x, w[1] = q.y, w[2] = q.z, w[3] = q.w;
    } else {
        load_row<T, false>(w, row, col, k);
    }
}

template <typename T> __device__ __forceinline__ float round_to(float v) { return to_f32(FromF32<T>::go(v)); }

// 1 / sqrt(mean(A[m]^2) + eps) of each of the `rows` rows of A, in every lane: the sum of
// squares in rms_norm_cached_warp's order (per lane, its vectors in turn; then a butterfly).
template <typename T, int MR, bool VEC>
__device__ __forceinline__ void inv_rms(float (&inv)[MR], const NtArgs& p, const T* A, int rows, int lane) {
    constexpr int V = 16 / sizeof(T);
#pragma unroll
    for (int m = 0; m < MR; ++m) {
        float s = 0.f;
        if (m < rows) {
            for (i64 col = lane * V; col < p.k; col += 32 * V) {
                u32 aw[4];
                float a[V];
                load_a<T, VEC>(aw, A + m * p.k, col, p.k);
                Unpack<T>::go(aw, a);
#pragma unroll
                for (int v = 0; v < V; ++v) s += a[v] * a[v];
            }
        }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
        s = __shfl_sync(0xffffffffu, s, 0);
        inv[m] = 1.0f / sqrtf(s / (float)p.k + p.eps);
    }
}

// The first group of steps of a warp's rows of W (those at `base`, zero for the rows past N),
// or, with EARLY, the same loads kept ahead of the griddepcontrol.wait that follows them.
// Rows are k apart; columns from `end` on read as zero.
template <typename T, int R, int RW, int U, bool VEC, bool EARLY>
__device__ __forceinline__ void load_w(u32 (&raw)[U][RW][4], const T* W, const T* W2, i64 base, i64 k, i64 end,
                                       int wrows) {
    constexpr i64 STEP = 32 * (16 / sizeof(T));
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
        for (int r = 0; r < RW; ++r) {
            if (r % R < wrows) {
                const T* row = r < R ? W + r * k : W2 + (r - R) * k;
                load_row<T, VEC, EARLY>(raw[u][r], row, base + u * STEP, end);
            } else {
#pragma unroll
                for (int i = 0; i < 4; ++i) raw[u][r][i] = 0;
            }
        }
}

// The same group's lines into L2 only (no registers held): the `_norm` variants' early reads,
// whose sums of squares after the wait would otherwise keep the group's registers live (spills).
template <typename T, int R, int RW, int U>
__device__ __forceinline__ void prefetch_w(const T* W, const T* W2, i64 base, i64 k, int wrows) {
    constexpr i64 STEP = 32 * (16 / sizeof(T));
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
        for (int r = 0; r < RW; ++r) {
            const T* row = r < R ? W + r * k : W2 + (r - R) * k;
            if (r % R < wrows && base + u * STEP < k)
                asm volatile("prefetch.global.L2 [%0];" ::"l"(row + base + u * STEP) : "memory");
        }
}

template <typename T, int MR, bool VEC, bool NORM, bool GATED, bool POST = false, int KS = 1, bool ROPE = false>
__device__ __forceinline__ void nt_kernel(const NtArgs& p) {
    static_assert(!POST || NORM, "_postnorm is a norm fold");
    static_assert(!ROPE || (MR == 1 && VEC && !GATED && KS == 1), "_rope: one row, plain or normed");
    static_assert(KS == 1 || (!NORM && !GATED && NT_WARPS % KS == 0), "_ks: plain products");
    constexpr bool PRE = NORM && !POST;  // the first pass over A (`_norm`)
    constexpr int V = 16 / sizeof(T);
    constexpr int R = MR;                   // rows of the result per warp
    constexpr int RW = GATED || ROPE ? 2 * R : R;  // rows of W per warp: the gate's, then the up's
                                                   // (_rope: a rotated pair's two)
    constexpr int U = 8 / RW;               // steps in flight: 8 vectors per lane
    constexpr bool TWO = U > 1 && VEC;      // two groups of U / 2 steps in turn (below)
    constexpr int H = TWO ? U / 2 : U;      // steps per group
    constexpr i64 STEP = 32 * V;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int s = 0;
    while (s + 1 < p.segs && (i64)blockIdx.x >= p.first[s + 1]) ++s;
    const i64 n = p.n[s];
    const i64 row0 = (((i64)blockIdx.x - p.first[s]) * (NT_WARPS / KS) + warp / KS) * R;
    // `_ks`: KS warps share the rows, part `warp % KS` taking K's whole steps [k0, k1).
    const i64 per = KS == 1 ? 0 : ((p.k + STEP - 1) / STEP + KS - 1) / KS * STEP;
    const i64 k0 = KS == 1 ? 0 : min(p.k, (warp % KS) * per);
    const i64 k1 = KS == 1 ? p.k : min(p.k, k0 + per);
    // _rope: the warp's pair of rows (pair index row0; rows past the segment's pairs: none)
    i64 ra = row0, rb = row0;
    int fj = 0;
    bool frot = false;
    if constexpr (ROPE) {
        if (row0 < n / 2) nt_rope_pair(p.rope, s, row0, ra, rb, fj, frot);
    }
    const T* W = reinterpret_cast<const T*>(p.w[s]) + ra * p.k;
    const T* W2 = GATED ? reinterpret_cast<const T*>(p.w[1]) + row0 * p.k
                        : (ROPE ? reinterpret_cast<const T*>(p.w[s]) + rb * p.k : W);
    const T* A = reinterpret_cast<const T*>(p.a);
    const T* gamma = reinterpret_cast<const T*>(p.gamma);
    const int rows = (int)min((i64)MR, p.m);
    const int wrows = (int)max((i64)0, min((i64)R, (ROPE ? n / 2 : n) - row0));  // 0: a warp past N
    // Programmatic dependent launch: a launch goes under PDL only when its weights are constants
    // (no earlier kernel writes them; launch/pdl.rs: launch_weights_early), so the first group
    // of steps is loaded before the wait, its DRAM latency hidden behind
    // the previous kernel's tail. A (the norm's sums of squares too), the epilogue's residual
    // and C only after it; every thread waits (a warp past N too) before it may return.
    // (The `_norm` variants only prefetch the group into L2, and load it after the norm's pass.)
    constexpr i64 G = H * STEP;  // columns of a group
    u32 raw[H][RW][4], nxt[H][RW][4];
    if constexpr (PRE) {
        // (f32 rows: no early prefetch; at m1 it made ptxas spill, and f32 weights are rare)
        if constexpr (sizeof(T) == 2) prefetch_w<T, R, RW, (TWO ? 2 : 1) * H>(W, W2, lane * V, p.k, wrows);
    } else {
        load_w<T, R, RW, H, VEC, true>(raw, W, W2, k0 + lane * V, p.k, k1, wrows);
        if constexpr (TWO) load_w<T, R, RW, H, VEC, true>(nxt, W, W2, k0 + lane * V + G, p.k, k1, wrows);
    }
    pdl_wait();
    pdl_launch_dependents();  // this grid's loads are issued: the next kernel may start its own
    // whole warps: no shuffle below misses a lane (`_ks`: the block's barrier below counts every
    // warp, so those past N add zeros instead)
    if (KS == 1 && wrows == 0) return;
    NtRopeAt rat{};
    if constexpr (ROPE) rat = nt_rope_at<T>(p.rope, s, fj, frot);
    float inv[MR];
    float sq[MR];  // _postnorm: the lane's share of each row's sum of squares
#pragma unroll
    for (int m = 0; m < MR; ++m) sq[m] = 0.f;
    if constexpr (PRE) {
        inv_rms<T, MR, VEC>(inv, p, A, rows, lane);
        load_w<T, R, RW, H, VEC, false>(raw, W, W2, lane * V, p.k, p.k, wrows);
        if constexpr (TWO) load_w<T, R, RW, H, VEC, false>(nxt, W, W2, lane * V + G, p.k, p.k, wrows);
    }
    float acc[MR][RW];
#pragma unroll
    for (int m = 0; m < MR; ++m)
#pragma unroll
        for (int r = 0; r < RW; ++r) acc[m][r] = 0.f;
    // One group of steps (its weights in w) at lane column `base` into the sums.
    auto group = [&](const u32 (&w)[H][RW][4], i64 base) {
#pragma unroll
        for (int u = 0; u < H; ++u) {
            const i64 col = base + u * STEP;
            if (col < (KS == 1 ? p.k : k1)) {
                float b[RW][V];
#pragma unroll
                for (int r = 0; r < RW; ++r) Unpack<T>::go(w[u][r], b[r]);
                float g[V];
                if constexpr (NORM) {
                    u32 gw[4];
                    load_a<T, VEC>(gw, gamma, col, p.k);
                    Unpack<T>::go(gw, g);
#pragma unroll
                    for (int v = 0; v < V; ++v) g[v] += p.offset;
                }
#pragma unroll
                for (int m = 0; m < MR; ++m) {
                    if (m < rows) {
                        u32 aw[4];
                        float a[V];
                        load_a<T, VEC>(aw, A + m * p.k, col, p.k);
                        Unpack<T>::go(aw, a);
                        if constexpr (POST) {
#pragma unroll
                            for (int v = 0; v < V; ++v) {
                                sq[m] = fmaf(a[v], a[v], sq[m]);
                                a[v] *= g[v];
                            }
                        } else if constexpr (NORM) {
#pragma unroll
                            for (int v = 0; v < V; ++v)
                                a[v] = p.mbc ? round_to<T>(a[v] * inv[m] * g[v])
                                             : round_to<T>(round_to<T>(a[v] * inv[m]) * round_to<T>(g[v]));
                        }
#pragma unroll
                        for (int r = 0; r < RW; ++r)
#pragma unroll
                            for (int v = 0; v < V; ++v) acc[m][r] = fmaf(a[v], b[r][v], acc[m][r]);
                    }
                }
            }
        }
    };
    // Two groups of H steps in turn, both in flight from the start: a group's refill goes out
    // as soon as its sums are taken, so the warp keeps the other one in flight while it adds
    // (the same sums in the same order as one group of U steps at a time). With U = 1 (RW = 8),
    // and for element loads (`any`, registers), one group of U steps, refilled after its sums.
    for (i64 base = k0 + lane * V; base < k1; base += (TWO ? 2 : 1) * G) {
        group(raw, base);
        if constexpr (TWO) {
            if (base + 2 * G < k1) load_w<T, R, RW, H, VEC, false>(raw, W, W2, base + 2 * G, p.k, k1, wrows);
            if (base + G >= k1) break;
            group(nxt, base + G);
            if (base + 3 * G < k1) load_w<T, R, RW, H, VEC, false>(nxt, W, W2, base + 3 * G, p.k, k1, wrows);
        } else {
            if (base + G < k1) load_w<T, R, RW, H, VEC, false>(raw, W, W2, base + G, p.k, k1, wrows);
        }
    }
#pragma unroll
    for (int m = 0; m < MR; ++m)
#pragma unroll
        for (int r = 0; r < RW; ++r)
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) acc[m][r] += __shfl_xor_sync(0xffffffffu, acc[m][r], off);
    if constexpr (KS > 1) {
        // The parts' sums added in part order by the rows' first warp.
        __shared__ float part[NT_WARPS][MR][R];
        if (lane == 0)
#pragma unroll
            for (int m = 0; m < MR; ++m)
#pragma unroll
                for (int r = 0; r < R; ++r) part[warp][m][r] = acc[m][r];
        __syncthreads();
        if (warp % KS != 0 || wrows == 0) return;
#pragma unroll
        for (int m = 0; m < MR; ++m)
#pragma unroll
            for (int r = 0; r < R; ++r) {
                float sum = part[warp][m][r];
#pragma unroll
                for (int q = 1; q < KS; ++q) sum += part[warp + q][m][r];
                acc[m][r] = sum;
            }
    }
    if constexpr (POST) {
#pragma unroll
        for (int m = 0; m < MR; ++m) {
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) sq[m] += __shfl_xor_sync(0xffffffffu, sq[m], off);
            const float scale = 1.0f / sqrtf(sq[m] / (float)p.k + p.eps);
#pragma unroll
            for (int r = 0; r < RW; ++r) acc[m][r] *= scale;
        }
    }
    if constexpr (ROPE) {
        // (identity epilogue: the products' stored values, rounded to T)
        if (lane == 0 && rows > 0)
            nt_rope_store<T>(p.rope, rat, frot, s, ra, rb, n, round_to<T>(epilogue<T>(p.epi, acc[0][0], ra, ra)),
                             round_to<T>(epilogue<T>(p.epi, acc[0][1], rb, rb)));
        return;
    }
#pragma unroll
    for (int m = 0; m < MR; ++m)
#pragma unroll
        for (int r = 0; r < R; ++r) {
            if (m < rows && r < wrows && lane == m * R + r) {
                const i64 row = row0 + r, idx = m * n + row;
                float v = epilogue<T>(p.epi, acc[m][r], idx, row);
                if constexpr (GATED) v = __fmul_rn(round_to<T>(v), round_to<T>(acc[m][R + r]));
                reinterpret_cast<T*>(p.c[s])[idx] = FromF32<T>::go(v);
            }
        }
}

#define NT_ENTRY(T, NAME, MR, SUFFIX, NORM, GATED, POST)                                                \
    extern "C" __global__ void __launch_bounds__(NT_WARPS * 32)                                         \
        skinny_nt_##NAME##_m##MR##_vec##SUFFIX(NtArgs p) {                                              \
        nt_kernel<T, MR, true, NORM, GATED, POST>(p);                                                   \
    }                                                                                                   \
    extern "C" __global__ void __launch_bounds__(NT_WARPS * 32)                                         \
        skinny_nt_##NAME##_m##MR##_any##SUFFIX(NtArgs p) {                                              \
        nt_kernel<T, MR, false, NORM, GATED, POST>(p);                                                  \
    }
// `_rope`: one row of a 16-bit type, vec, with the rope + KV-cache store (plain, _norm, _postnorm).
#define NT_ROPE(T, NAME, SUFFIX, NORM, POST)                                                            \
    extern "C" __global__ void __launch_bounds__(NT_WARPS * 32) skinny_nt_##NAME##_m1_vec##SUFFIX##_rope(NtArgs p) { \
        nt_kernel<T, 1, true, NORM, false, POST, 1, true>(p);                                           \
    }
// `_ks`: plain vec products whose rows are too few to fill the device, K split over KS warps.
#define NT_KS(T, NAME, MR, KS)                                                                          \
    extern "C" __global__ void __launch_bounds__(NT_WARPS * 32) skinny_nt_##NAME##_m##MR##_vec_ks##KS(NtArgs p) { \
        nt_kernel<T, MR, true, false, false, false, KS>(p);                                             \
    }
#define NT_VARIANTS(T, NAME, MR)                                                                        \
    NT_ENTRY(T, NAME, MR, , false, false, false)                                                        \
    NT_ENTRY(T, NAME, MR, _norm, true, false, false)                                                    \
    NT_ENTRY(T, NAME, MR, _gated, false, true, false)                                                   \
    NT_ENTRY(T, NAME, MR, _norm_gated, true, true, false)
// (_postnorm: the 16-bit types, whose decoders have long rows)
#define NT_POST(T, NAME, MR)                                                                            \
    NT_ENTRY(T, NAME, MR, _postnorm, true, false, true)                                                 \
    NT_ENTRY(T, NAME, MR, _postnorm_gated, true, true, true)
#define NT_ENTRIES(T, NAME) NT_VARIANTS(T, NAME, 1) NT_VARIANTS(T, NAME, 2) NT_VARIANTS(T, NAME, 4)
#define NT_POSTS(T, NAME) NT_POST(T, NAME, 1) NT_POST(T, NAME, 2) NT_POST(T, NAME, 4)
NT_ENTRIES(bf16, bf16)
NT_ENTRIES(f16, f16)
NT_ENTRIES(float, f32)
NT_POSTS(bf16, bf16)
NT_POSTS(f16, f16)
// (`_ks`: one row of the 16-bit types, where the runtime's plain products of few rows land)
NT_KS(bf16, bf16, 1, 2)
NT_KS(bf16, bf16, 1, 4)
NT_KS(f16, f16, 1, 2)
NT_KS(f16, f16, 1, 4)
NT_ROPE(bf16, bf16, , false, false)
NT_ROPE(bf16, bf16, _norm, true, false)
NT_ROPE(bf16, bf16, _postnorm, true, true)
NT_ROPE(f16, f16, , false, false)
NT_ROPE(f16, f16, _norm, true, false)
NT_ROPE(f16, f16, _postnorm, true, true)
