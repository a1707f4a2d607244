#line 1 "attention.cu"
// attention.cu: rope, kv_cache_store and paged_attention (crates/graph/src/ops/attention.rs
// defines them; crates/runtime/src/cpu/attention is the reference). Activations and the cache
// are f32, f16 or bf16 (T); everything computes in f32.
//
// The cache is [pages, 2, layers, page_size, kv_heads, head_dim]; keys of (page, layer) start at
// ((page * 2 + 0) * layers + layer) * page_size * kv_heads * head_dim, values one layer-block on.
//
// Rope and the store are one thread per output element (rope_kv_store: both in one launch, one
// thread per 16-byte piece where the rows allow it).
// Attention has two forms: the decode form (its own family, attention_decode.cu: GQA groups
// sharing each key load, keys split across blocks by the sequences' actual lengths), taken
// whenever a key row is 16-byte pieces for at most a warp and a kv head serves at most 8 query
// heads; otherwise the general form below, one block per
// (query row, query head) whose warps take every eighth chunk of 32 visible keys (a lane per key
// for the scores, an online softmax, then a lane per dim for the values) and merge their
// partial results at the end. Index tensors come from the engine's own KV-cache bookkeeping;
// out-of-range positions or pages do not fault: rope writes NaN, the store skips the token,
// attention skips the key.

struct RopeArgs {
    u64 x, out, freqs, pos;
    i64 tokens, heads, dim, rot, npos;
    i32 interleaved, freqs_f32;
};

// Dim k of the head row x rotated to position p (rot: the rotary dims; k past them passes
// through; a position past the table's npos rows gives NaN).
template <typename T>
__device__ __forceinline__ T rope_at(const T* x, i64 k, u32 p, i64 rot, i64 npos, bool interleaved, const void* freqs,
                                     bool freqs_f32) {
    if (k >= rot) return x[k];
    if ((i64)p >= npos) return convert<T>(nan32(false));
    const i64 half = rot / 2;
    // The pair (ia, ib) this dim belongs to, and the pair's index j.
    i64 j, ia, ib;
    if (interleaved) {
        j = k / 2;
        ia = 2 * j;
        ib = ia + 1;
    } else {
        j = k < half ? k : k - half;
        ia = j;
        ib = j + half;
    }
    float c, s;
    if (freqs_f32) {
        const float* f = (const float*)freqs + (i64)p * rot + 2 * j;
        c = f[0];
        s = f[1];
    } else {
        const T* f = (const T*)freqs + (i64)p * rot + 2 * j;
        c = to_f32(f[0]);
        s = to_f32(f[1]);
    }
    float oa, ob;
    rotate_pair(to_f32(x[ia]), to_f32(x[ib]), c, s, oa, ob);
    return convert<T>(k == ia ? oa : ob);
}

template <typename T> __device__ __forceinline__ void rope(const RopeArgs& a) {
    const i64 total = a.tokens * a.heads * a.dim;
    for (i64 e = (i64)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (i64)gridDim.x * blockDim.x) {
        const i64 k = e % a.dim, row = e / a.dim, t = row / a.heads;
        const u32 p = ((const u32*)a.pos)[t];
        ((T*)a.out)[e] = rope_at<T>((const T*)a.x + row * a.dim, k, p, a.rot, a.npos, a.interleaved, (const void*)a.freqs,
                                    a.freqs_f32);
    }
}

struct StoreArgs {
    u64 blocks, k, v, slots;
    i64 tokens, row, page_size, layers, pages, layer;
};

template <typename T> __device__ __forceinline__ void kv_cache_store(const StoreArgs& a) {
    const i64 total = a.tokens * a.row;
    for (i64 e = (i64)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (i64)gridDim.x * blockDim.x) {
        const i64 t = e / a.row, c = e % a.row;
        const i64 slot = ((const u32*)a.slots)[t];
        if (slot >= a.pages * a.page_size) continue;
        const i64 page = slot / a.page_size, off = slot % a.page_size;
        const i64 base = ((page * 2) * a.layers + a.layer) * a.page_size * a.row + off * a.row + c;
        T* cache = (T*)a.blocks;
        cache[base] = ((const T*)a.k)[e];
        cache[base + a.layers * a.page_size * a.row] = ((const T*)a.v)[e];
    }
}

// AttnArgs: attention_args.cuh (shared with attention_prefill.cu).

// The most head dims a lane holds (head_dim <= 32 * MAXV).
#define MAXV 8
// Warps of a paged_attention block: one block per (query row, query head); its warps split the
// visible keys (flash-decoding inside the block) and merge their partial softmaxes at the end.
#define ATT_WARPS 8

// Dot product of the query (f32, shared memory) with one key row of T, 16 bytes at a time when
// the row is 16-byte aligned.
template <typename T> __device__ __forceinline__ float key_dot(const float* q, const T* k, i64 dim) {
    constexpr int V = 16 / sizeof(T);
    float dot = 0.f;
    if (dim % V == 0 && ((u64)k & 15u) == 0) {
        const uint4* kv = reinterpret_cast<const uint4*>(k);
        for (i64 c = 0; c < dim / V; ++c) {
            union {
                uint4 u;
                T t[V];
            } pk;
            pk.u = __ldg(kv + c);
#pragma unroll
            for (int e = 0; e < V; ++e) dot += q[c * V + e] * to_f32(pk.t[e]);
        }
    } else {
        for (i64 d = 0; d < dim; ++d) dot += q[d] * to_f32(k[d]);
    }
    return dot;
}

template <typename T> __device__ __forceinline__ void paged_attention(const AttnArgs& a) {
    // Shared memory: the query row [dim], then per warp its max, sum and partial output [dim].
    extern __shared__ float smem[];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    const i64 task = blockIdx.x;
    if (task >= a.tokens * a.q_heads) return;  // uniform per block
    const i64 i = task / a.q_heads, h = task % a.q_heads;
    const u32* offsets = (const u32*)a.offsets;
    // The sequence of row i: the last b with offsets[b] <= i.
    i64 lo_b = 0, hi_b = a.batch - 1;
    while (lo_b < hi_b) {
        const i64 mid = (lo_b + hi_b + 1) / 2;
        if ((i64)offsets[mid] <= i) lo_b = mid; else hi_b = mid - 1;
    }
    const i64 b = lo_b;
    const i64 q_len = (i64)offsets[b + 1] - (i64)offsets[b];
    const i64 cached = ((const u32*)a.lengths)[b];
    const i64 total = cached + q_len, pos = cached + (i - (i64)offsets[b]);
    i64 lo = 0, hi = pos + 1 < total ? pos + 1 : total;
    if (a.mask == 1) lo = pos + 1 - a.window > 0 ? pos + 1 - a.window : 0;
    if (a.mask == 2) hi = total;
    const i64 g = h / (a.q_heads / a.kv_heads);
    const i64 row = a.kv_heads * a.dim;
    const i64 layer_stride = a.layers * a.page_size * row;  // keys -> values of one page
    const u32* table = (const u32*)a.table + b * a.width;
    const T* cache = (const T*)a.blocks;

    float* q = smem;
    float* wm = smem + a.dim;             // [warps] running max
    float* wl = wm + warps;               // [warps] running sum
    float* wacc = wl + warps;             // [warps][dim] partial outputs
    for (i64 d = threadIdx.x; d < a.dim; d += blockDim.x)
        q[d] = to_f32(((const T*)a.q)[(i * a.q_heads + h) * a.dim + d]);
    __syncthreads();

    float m = NEG_INF, l = 0.f, acc[MAXV];
#pragma unroll
    for (int v = 0; v < MAXV; ++v) acc[v] = 0.f;
    for (i64 j0 = lo + (i64)warp * 32; j0 < hi; j0 += (i64)warps * 32) {
        const i64 j = j0 + lane;
        float s = NEG_INF;
        i64 key_at = -1;
        if (j < hi) {
            const i64 page = table[j / a.page_size];
            if (page < a.pages) {
                key_at = ((page * 2) * a.layers + a.layer) * a.page_size * row + (j % a.page_size) * row + g * a.dim;
                s = key_dot(q, cache + key_at, a.dim) * a.scale;
                if (a.softcap > 0.f) s = a.softcap * tanhf(s / a.softcap);
            }
        }
        float cm = s;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) cm = fmaxf(cm, __shfl_xor_sync(FULL_MASK, cm, o));
        if (cm == NEG_INF) continue;  // no visible key in this chunk
        const float m2 = fmaxf(m, cm);
        const float rescale = m == NEG_INF ? 0.f : __expf(m - m2);
        const float p = s == NEG_INF ? 0.f : __expf(s - m2);
        float ps = p;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) ps += __shfl_xor_sync(FULL_MASK, ps, o);
        l = l * rescale + ps;
        m = m2;
#pragma unroll
        for (int v = 0; v < MAXV; ++v) acc[v] *= rescale;
        const i64 n = hi - j0 < 32 ? hi - j0 : 32;
        for (int c = 0; c < n; ++c) {
            const float pc = __shfl_sync(FULL_MASK, p, c);
            const i64 at = __shfl_sync(FULL_MASK, key_at, c);
            if (pc == 0.f || at < 0) continue;
            const T* vrow = cache + at + layer_stride;
#pragma unroll
            for (int v = 0; v < MAXV; ++v) {
                const i64 d = lane + 32 * v;
                if (d < a.dim) acc[v] += pc * to_f32(vrow[d]);
            }
        }
    }
    // Merge the warps' partial softmaxes.
    if (lane == 0) {
        wm[warp] = m;
        wl[warp] = l;
    }
#pragma unroll
    for (int v = 0; v < MAXV; ++v) {
        const i64 d = lane + 32 * v;
        if (d < a.dim) wacc[warp * a.dim + d] = acc[v];
    }
    __syncthreads();
    float big = NEG_INF;
    for (int w = 0; w < warps; ++w) big = fmaxf(big, wm[w]);
    float total_l = 0.f;
    for (int w = 0; w < warps; ++w) total_l += wm[w] == NEG_INF ? 0.f : wl[w] * __expf(wm[w] - big);
    const float inv = total_l > 0.f ? 1.f / total_l : 0.f;
    T* out = (T*)a.out + (i * a.q_heads + h) * a.dim;
    for (i64 d = threadIdx.x; d < a.dim; d += blockDim.x) {
        float o = 0.f;
        for (int w = 0; w < warps; ++w)
            if (wm[w] != NEG_INF) o += wacc[w * a.dim + d] * __expf(wm[w] - big);
        out[d] = convert<T>(o * inv);
    }
}

// rope_kv_store: the decode step's rope of q and k and its store of k and v as one launch (the
// engine's pass fuse_rope_store): one thread per element of a token's [q | k | v] row; q's
// elements rotate into q_out, k's rotate into the cache, v's are copied into it, each exactly as
// rope and kv_cache_store do it.
struct RopeStoreArgs {
    u64 q, q_out, k, v, blocks, slots, freqs, pos;
    i64 tokens, q_heads, kv_heads, dim, rot, npos;
    i64 page_size, layers, pages, layer;
    i32 interleaved, freqs_f32;
    i32 vec;  // rope_kv_store_vec's layout holds (launch/attention.rs: vec_ok)
    // The next kernel may launch before this one waits (passes/mark_early_index.rs: it is the
    // decode attention over this cache, and the kernel before this one does not touch the cache)
    i32 early_next;
};

// griddepcontrol.wait, with the next kernel's launch allowed before it (early_next) or after.
__device__ __forceinline__ void rope_store_wait(const RopeStoreArgs& a) {
    if (a.early_next) pdl_launch_dependents();
    pdl_wait();
    if (!a.early_next) pdl_launch_dependents();
}

template <typename T> union Piece {
    uint4 u;
    T t[16 / sizeof(T)];
};

// n (cos, sin) values of freqs from element `at` as f32 (whole 16-byte pieces, 16-byte aligned).
template <typename T, int N> __device__ __forceinline__ void load_freqs(const void* freqs, bool f32, i64 at, float* f) {
    if (f32) {
#pragma unroll
        for (int i = 0; i < N / 4; ++i) {
            const float4 v = reinterpret_cast<const float4*>((const float*)freqs + at)[i];
            f[4 * i] = v.x;
            f[4 * i + 1] = v.y;
            f[4 * i + 2] = v.z;
            f[4 * i + 3] = v.w;
        }
    } else {
        constexpr int VE = 16 / sizeof(T);
#pragma unroll
        for (int i = 0; i < N / VE; ++i) {
            Piece<T> v;
            v.u = reinterpret_cast<const uint4*>((const T*)freqs + at)[i];
#pragma unroll
            for (int e = 0; e < VE; ++e) f[i * VE + e] = to_f32(v.t[e]);
        }
    }
}

// rope_kv_store when every head row is whole 16-byte pieces (VE elements) and so is each half of
// the rotary dims (each rotary dim, interleaved): one thread per piece of output, or per pair of
// pieces (j0.., j0 + rot/2..) a non-interleaved rotation joins, instead of one per element (a
// prefill's store moved 2-byte elements with two 64-bit divisions apiece). A token's pieces:
// q's heads, k's, then v's; a head's: its rotary ones, then those past `rot` (copied).
template <typename T> __device__ __forceinline__ void rope_kv_store_vec(const RopeStoreArgs& a) {
    constexpr int VE = 16 / sizeof(T);
    const u32 dim = (u32)a.dim, rot = (u32)a.rot;
    const u32 rot_items = a.interleaved ? rot / VE : rot / (2 * VE);
    const u32 per_head = rot_items + (dim - rot) / VE, per_v = dim / VE;
    const u32 qi = (u32)a.q_heads * per_head, ki = (u32)a.kv_heads * per_head;
    const u32 per_token = qi + ki + (u32)a.kv_heads * per_v;
    const i64 qw = a.q_heads * a.dim, kw = a.kv_heads * a.dim, total = a.tokens * per_token;
    // With early_next the attention after this store launches before the store waits: its
    // blocks are then resident, their first copies in flight, while the product ahead drains.
    rope_store_wait(a);
    for (i64 e = (i64)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (i64)gridDim.x * blockDim.x) {
        const i64 t = e / per_token;
        const u32 c = (u32)(e - t * per_token);
        const T* row;  // the head row read
        T* dst;        // the head row written
        u32 item;      // the piece within the head
        if (c < qi) {
            const u32 h = c / per_head;
            item = c - h * per_head;
            row = (const T*)a.q + t * qw + h * dim;
            dst = (T*)a.q_out + t * qw + h * dim;
        } else {
            const i64 slot = ((const u32*)a.slots)[t];
            if (slot >= a.pages * a.page_size) continue;
            const i64 page = slot / a.page_size, off = slot % a.page_size;
            T* keys = (T*)a.blocks + ((page * 2) * a.layers + a.layer) * a.page_size * kw + off * kw;
            if (c >= qi + ki) {
                const u32 at = (c - qi - ki) * VE;
                *reinterpret_cast<uint4*>(keys + a.layers * a.page_size * kw + at) =
                    *reinterpret_cast<const uint4*>((const T*)a.v + t * kw + at);
                continue;
            }
            const u32 h = (c - qi) / per_head;
            item = c - qi - h * per_head;
            row = (const T*)a.k + t * kw + h * dim;
            dst = keys + h * dim;
        }
        if (item >= rot_items) {
            const u32 at = rot + (item - rot_items) * VE;
            *reinterpret_cast<uint4*>(dst + at) = *reinterpret_cast<const uint4*>(row + at);
            continue;
        }
        const u32 p = ((const u32*)a.pos)[t];
        const bool bad = (i64)p >= a.npos;  // past the table: NaN, as rope_at
        const T nan = convert<T>(nan32(false));
        if (a.interleaved) {
            const u32 k0 = item * VE;  // pairs (k0 + 2m, k0 + 2m + 1), freqs entries k0..k0 + VE
            float f[VE] = {};
            if (!bad) load_freqs<T, VE>((const void*)a.freqs, a.freqs_f32, (i64)p * rot + k0, f);
            Piece<T> x, o;
            x.u = *reinterpret_cast<const uint4*>(row + k0);
#pragma unroll
            for (int m = 0; m < VE / 2; ++m) {
                float oa, ob;
                rotate_pair(to_f32(x.t[2 * m]), to_f32(x.t[2 * m + 1]), f[2 * m], f[2 * m + 1], oa, ob);
                o.t[2 * m] = bad ? nan : convert<T>(oa);
                o.t[2 * m + 1] = bad ? nan : convert<T>(ob);
            }
            *reinterpret_cast<uint4*>(dst + k0) = o.u;
        } else {
            const u32 j0 = item * VE, half = rot / 2;  // pairs (j0 + m, j0 + m + half)
            float f[2 * VE] = {};
            if (!bad) load_freqs<T, 2 * VE>((const void*)a.freqs, a.freqs_f32, (i64)p * rot + 2 * j0, f);
            Piece<T> xa, xb, oa, ob;
            xa.u = *reinterpret_cast<const uint4*>(row + j0);
            xb.u = *reinterpret_cast<const uint4*>(row + j0 + half);
#pragma unroll
            for (int m = 0; m < VE; ++m) {
                float ra, rb;
                rotate_pair(to_f32(xa.t[m]), to_f32(xb.t[m]), f[2 * m], f[2 * m + 1], ra, rb);
                oa.t[m] = bad ? nan : convert<T>(ra);
                ob.t[m] = bad ? nan : convert<T>(rb);
            }
            *reinterpret_cast<uint4*>(dst + j0) = oa.u;
            *reinterpret_cast<uint4*>(dst + j0 + half) = ob.u;
        }
    }
}

template <typename T> __device__ __forceinline__ void rope_kv_store(const RopeStoreArgs& a) {
    if (a.vec) {
        rope_kv_store_vec<T>(a);
        return;
    }
    const i64 qw = a.q_heads * a.dim, kw = a.kv_heads * a.dim, width = qw + 2 * kw;
    const i64 total = a.tokens * width;
    // May launch under PDL (launch/pdl.rs). Nothing useful is constant before the wait: the
    // freqs row a thread needs depends on its token's position, which an earlier step may
    // write, and the whole table (positions x rot) is far too big to prefetch.
    rope_store_wait(a);
    for (i64 e = (i64)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (i64)gridDim.x * blockDim.x) {
        const i64 t = e / width, c = e % width;
        const u32 p = ((const u32*)a.pos)[t];
        if (c < qw) {
            const T* row = (const T*)a.q + t * qw + (c / a.dim) * a.dim;
            ((T*)a.q_out)[t * qw + c] = rope_at<T>(row, c % a.dim, p, a.rot, a.npos, a.interleaved,
                                                   (const void*)a.freqs, a.freqs_f32);
            continue;
        }
        const i64 slot = ((const u32*)a.slots)[t];
        if (slot >= a.pages * a.page_size) continue;
        const i64 page = slot / a.page_size, off = slot % a.page_size;
        T* keys = (T*)a.blocks + ((page * 2) * a.layers + a.layer) * a.page_size * kw + off * kw;
        const i64 ck = c - qw;
        if (ck < kw) {
            const T* row = (const T*)a.k + t * kw + (ck / a.dim) * a.dim;
            keys[ck] = rope_at<T>(row, ck % a.dim, p, a.rot, a.npos, a.interleaved, (const void*)a.freqs, a.freqs_f32);
        } else {
            keys[a.layers * a.page_size * kw + ck - kw] = ((const T*)a.v)[t * kw + ck - kw];
        }
    }
}

#define ATTENTION(NAME, T)                                                                               \
    extern "C" __global__ void __launch_bounds__(256) rope_##NAME(RopeArgs a) { rope<T>(a); }            \
    extern "C" __global__ void __launch_bounds__(256) rope_kv_store_##NAME(RopeStoreArgs a) {            \
        rope_kv_store<T>(a);                                                                             \
    }                                                                                                    \
    extern "C" __global__ void __launch_bounds__(256) kv_cache_store_##NAME(StoreArgs a) {                 \
        kv_cache_store<T>(a);                                                                            \
    }                                                                                                    \
    extern "C" __global__ void __launch_bounds__(256, 1) paged_attention_##NAME(AttnArgs a) {              \
        paged_attention<T>(a);                                                                           \
    }

ATTENTION(f32, float)
ATTENTION(f16, f16)
ATTENTION(bf16, bf16)
