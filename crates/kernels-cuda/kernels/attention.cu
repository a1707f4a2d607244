#line 1 "attention.cu"
// attention.cu: rope, kv_cache_store and paged_attention (crates/graph/src/ops/attention.rs
// defines them; crates/runtime/src/cpu/attention is the reference). Activations and the cache
// are f32, f16 or bf16 (T); everything computes in f32.
//
// The cache is [pages, 2, layers, page_size, kv_heads, head_dim]; keys of (page, layer) start at
// ((page * 2 + 0) * layers + layer) * page_size * kv_heads * head_dim, values one layer-block on.
//
// Rope and the store are one thread per output element. Attention has two forms: the split
// form below (GQA groups sharing each key load, keys split across blocks and combined), taken
// whenever a key row is 16-byte chunks for at most a warp and a kv head serves at most 8 query
// heads; otherwise the general form, one block per (query row, query head) whose warps take
// every eighth chunk of 32 visible keys (a lane per key for the scores, an online softmax, then
// a lane per dim for the values) and merge their partial results at the end. Index tensors come
// from the engine's own KV-cache bookkeeping; out-of-range positions or pages do
// not fault: rope writes NaN, the store skips the token, attention skips the key.

#define FULL_MASK 0xffffffffu
#define NEG_INF (-__int_as_float(0x7f800000))

struct RopeArgs {
    u64 x, out, freqs, pos;
    i64 tokens, heads, dim, rot, npos;
    i32 interleaved, freqs_f32;
};

template <typename T> __device__ __forceinline__ void rope(const RopeArgs& a) {
    const i64 total = a.tokens * a.heads * a.dim;
    for (i64 e = (i64)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (i64)gridDim.x * blockDim.x) {
        const i64 k = e % a.dim, row = e / a.dim, t = row / a.heads;
        const T* x = (const T*)a.x + row * a.dim;
        T* out = (T*)a.out + e;
        if (k >= a.rot) {
            *out = x[k];
            continue;
        }
        const u32 p = ((const u32*)a.pos)[t];
        if ((i64)p >= a.npos) {
            *out = convert<T>(nan32(false));
            continue;
        }
        const i64 half = a.rot / 2;
        // The pair (ia, ib) this dim belongs to, and the pair's index j.
        i64 j, ia, ib;
        if (a.interleaved) {
            j = k / 2;
            ia = 2 * j;
            ib = ia + 1;
        } else {
            j = k < half ? k : k - half;
            ia = j;
            ib = j + half;
        }
        float c, s;
        if (a.freqs_f32) {
            const float* f = (const float*)a.freqs + (i64)p * a.rot + 2 * j;
            c = f[0];
            s = f[1];
        } else {
            const T* f = (const T*)a.freqs + (i64)p * a.rot + 2 * j;
            c = to_f32(f[0]);
            s = to_f32(f[1]);
        }
        const float xa = to_f32(x[ia]), xb = to_f32(x[ib]);
        *out = convert<T>(k == ia ? xa * c - xb * s : xb * c + xa * s);
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

struct AttnArgs {
    u64 q, blocks, offsets, lengths, table, out;
    i64 tokens, batch, width, q_heads, kv_heads, dim, page_size, layers, pages, layer, window;
    float scale, softcap;
    i32 mask;  // 0 causal, 1 sliding window, 2 none
    i32 pad;
};

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

// ---- paged_attention, the split form ------------------------------------------------------
// One block per (query row, kv head, split of the keys). The G = q_heads / kv_heads query heads
// that read one kv head share every key and value load (GQA). The block walks its split in
// chunks of CHUNK keys (one per thread), in three phases separated by barriers, each issuing
// all of its loads before using any (a decode step is a chain of memory round trips, so the
// number of round trips is what costs):
//   1. scores: thread t takes key t of the chunk whole (its page id, then every 16-byte piece
//      of the row at once) and dots it with the G queries (f32, shared memory);
//   2. probabilities: one warp per head takes the chunk's maximum, rescales the running sum
//      (online softmax across chunks) and turns the scores into e^(s - m);
//   3. values: LPK lanes hold one value row, 16 bytes each (LPK = dim * sizeof(T) / 16, a power
//      of two up to 32); the block's 128 / LPK lane groups share the chunk's keys, each loading
//      all of its rows before adding p * v for the G heads.
// The warps' sums meet in shared memory at the end. With one split the block writes the
// normalised output; otherwise (m, l, acc) go to `partial` and the last split of each (row,
// kv head) to finish merges them (attention_combine when there are no ticket counters). The host picks the splits from the lookup table's width (the
// most keys a sequence can hold), not from the cached lengths, which stay on the device: splits
// past a sequence's keys find nothing and record an empty share. Key positions are u32 (the
// engine's lengths and slots are u32).

#define SPLIT_THREADS 128
#define SPLIT_WARPS (SPLIT_THREADS / 32)
#define CHUNK SPLIT_THREADS
#define MAXG 8
#define KEY_PIECES 16  // 16-byte pieces of a key row loaded at once in phase 1
#define VALUE_ROWS 16  // value rows a lane loads at once in phase 3

struct SplitArgs {
    AttnArgs a;
    u64 partial;   // f32 [tokens, q_heads, splits, 2 + dim] when splits > 1
    u64 counters;  // u32 per (row, kv head), zero between launches: the merge's tickets (0: none)
    i64 splits, keys_per_split;
    i32 lpk, group;
};

// The splits' partial softmaxes of one (row, head) merged: sum_s acc_s e^(m_s - M) / sum_s l_s
// e^(m_s - M) for output dim d. Reads through L2 (other blocks wrote the partials).
__device__ __forceinline__ float merge_splits(const float* part, i64 splits, i64 dim, i64 d) {
    float big = NEG_INF;
    for (i64 s = 0; s < splits; ++s) big = fmaxf(big, __ldcg(part + s * (2 + dim)));
    float l = 0.f, o = 0.f;
    for (i64 s = 0; s < splits; ++s) {
        const float m = __ldcg(part + s * (2 + dim));
        if (m != NEG_INF) {
            const float w = __expf(m - big);
            l += __ldcg(part + s * (2 + dim) + 1) * w;
            o += __ldcg(part + s * (2 + dim) + 2 + d) * w;
        }
    }
    return l > 0.f ? o * (1.f / l) : 0.f;
}

template <typename T> __device__ __forceinline__ void unpack16(const uint4& u, float* f) {
    constexpr int VE = 16 / sizeof(T);
    union {
        uint4 u;
        T t[VE];
    } pk;
    pk.u = u;
#pragma unroll
    for (int e = 0; e < VE; ++e) f[e] = to_f32(pk.t[e]);
}

template <typename T> __device__ __forceinline__ void paged_attention_split(const SplitArgs& sa) {
    constexpr int VE = 16 / sizeof(T);
    const AttnArgs& a = sa.a;
    extern __shared__ __align__(16) float smem[];
    const int G = sa.group, lpk = sa.lpk;
    const u32 dim = (u32)a.dim, ps = (u32)a.page_size, pieces = dim / VE;
    float* qs = smem;                          // [G][dim] the queries
    float* sc = qs + G * dim;                  // [G][CHUNK] scores, then probabilities
    float* m_run = sc + G * CHUNK;             // [G] running max
    float* l_run = m_run + MAXG;               // [G] running sum
    float* rs = l_run + MAXG;                  // [G] this chunk's rescale of the accumulators
    float* red = rs + MAXG;                    // [SPLIT_WARPS][G][dim] the warps' accumulators
    u64* rowat = reinterpret_cast<u64*>(red + SPLIT_WARPS * G * dim + (G * dim) % 2);  // [CHUNK] key rows

    const i64 s = blockIdx.x % sa.splits, rest = blockIdx.x / sa.splits;
    const i64 kvh = rest % a.kv_heads, i = rest / a.kv_heads;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int grp = threadIdx.x / lpk, sub = threadIdx.x % lpk, groups = SPLIT_THREADS / lpk;

    const u32* offsets = (const u32*)a.offsets;
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
    const i64 kb = lo > s * sa.keys_per_split ? lo : s * sa.keys_per_split;
    const i64 ke = hi < (s + 1) * sa.keys_per_split ? hi : (s + 1) * sa.keys_per_split;
    const u32 k_begin = (u32)kb, k_end = ke > kb ? (u32)ke : (u32)kb;

    const u64 row = (u64)a.kv_heads * dim;
    const u64 page_elems = (u64)ps * row;                // one layer's keys of a page
    const u64 page_stride = 2 * (u64)a.layers * page_elems;
    const u64 layer_off = (u64)a.layer * page_elems + (u64)kvh * dim;
    const u64 value_off = (u64)a.layers * page_elems;    // keys -> values of one page
    const u32* table = (const u32*)a.table + b * a.width;
    const T* cache = (const T*)a.blocks;
    const i64 h0 = kvh * G;  // first query head of the group

    for (u32 idx = threadIdx.x; idx < (u32)G * dim; idx += SPLIT_THREADS)
        qs[idx] = to_f32(((const T*)a.q)[(i * a.q_heads + h0) * a.dim + idx]);
    if (threadIdx.x < MAXG) {
        m_run[threadIdx.x] = NEG_INF;
        l_run[threadIdx.x] = 0.f;
    }
    float acc[MAXG][VE];
#pragma unroll
    for (int g = 0; g < MAXG; ++g)
#pragma unroll
        for (int e = 0; e < VE; ++e) acc[g][e] = 0.f;
    __syncthreads();

    for (u32 c0 = k_begin; c0 < k_end; c0 += CHUNK) {
        // 1. Scores: key c0 + t, whole, for thread t.
        {
            const u32 j = c0 + threadIdx.x;
            bool valid = j < k_end;
            const T* krow = cache;
            if (valid) {
                const u32 page = table[j / ps];
                valid = page < (u64)a.pages;
                krow = cache + page * page_stride + layer_off + (u64)(j % ps) * row;
            }
            rowat[threadIdx.x] = valid ? (u64)(krow - cache) : ~0ull;  // phase 3 reads the values there
            float dot[MAXG];
#pragma unroll
            for (int g = 0; g < MAXG; ++g) dot[g] = 0.f;
            if (valid) {
                for (u32 c = 0; c < pieces; c += KEY_PIECES) {
                    uint4 raw[KEY_PIECES];
#pragma unroll
                    for (int u = 0; u < KEY_PIECES; ++u)
                        if (c + u < pieces) raw[u] = __ldg(reinterpret_cast<const uint4*>(krow) + c + u);
#pragma unroll
                    for (int u = 0; u < KEY_PIECES; ++u) {
                        if (c + u >= pieces) break;
                        float kf[VE];
                        unpack16<T>(raw[u], kf);
#pragma unroll
                        for (int g = 0; g < MAXG; ++g) {
                            if (g >= G) break;
                            const float* qg = qs + g * dim + (c + u) * VE;
#pragma unroll
                            for (int e = 0; e < VE; ++e) dot[g] += qg[e] * kf[e];
                        }
                    }
                }
            }
#pragma unroll
            for (int g = 0; g < MAXG; ++g) {
                if (g >= G) break;
                float v = dot[g] * a.scale;
                if (a.softcap > 0.f) v = a.softcap * tanhf(v / a.softcap);
                sc[g * CHUNK + threadIdx.x] = valid ? v : NEG_INF;
            }
        }
        __syncthreads();
        // 2. Probabilities under the running max, one warp per head.
        for (int g = warp; g < G; g += SPLIT_WARPS) {
            float cm = NEG_INF;
            for (int t = lane; t < CHUNK; t += 32) cm = fmaxf(cm, sc[g * CHUNK + t]);
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) cm = fmaxf(cm, __shfl_xor_sync(FULL_MASK, cm, o));
            const float m_old = m_run[g];
            const float m_new = fmaxf(m_old, cm);
            float ps_sum = 0.f;
            for (int t = lane; t < CHUNK; t += 32) {
                const float v = sc[g * CHUNK + t];
                const float p = v == NEG_INF ? 0.f : __expf(v - m_new);
                sc[g * CHUNK + t] = p;
                ps_sum += p;
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) ps_sum += __shfl_xor_sync(FULL_MASK, ps_sum, o);
            if (lane == 0) {
                const float r = m_old == NEG_INF ? 0.f : __expf(m_old - m_new);
                rs[g] = r;
                l_run[g] = l_run[g] * r + ps_sum;
                m_run[g] = m_new;
            }
        }
        __syncthreads();
        // 3. Values: this lane group's keys of the chunk, every row loaded before any is used.
#pragma unroll
        for (int g = 0; g < MAXG; ++g) {
            const float r = g < G ? rs[g] : 0.f;
#pragma unroll
            for (int e = 0; e < VE; ++e) acc[g][e] *= r;
        }
        for (int k0 = grp; k0 < CHUNK; k0 += groups * VALUE_ROWS) {
            uint4 raw[VALUE_ROWS];
#pragma unroll
            for (int u = 0; u < VALUE_ROWS; ++u) {
                const int kk = k0 + u * groups;
                const u64 at = kk < CHUNK ? rowat[kk] : ~0ull;
                raw[u] = at == ~0ull ? make_uint4(0, 0, 0, 0)
                                     : __ldg(reinterpret_cast<const uint4*>(cache + at + value_off) + sub);
            }
#pragma unroll
            for (int u = 0; u < VALUE_ROWS; ++u) {
                const int kk = k0 + u * groups;
                if (kk >= CHUNK || c0 + kk >= k_end) break;
                float vf[VE];
                unpack16<T>(raw[u], vf);
#pragma unroll
                for (int g = 0; g < MAXG; ++g) {
                    if (g >= G) break;
                    const float p = sc[g * CHUNK + kk];
#pragma unroll
                    for (int e = 0; e < VE; ++e) acc[g][e] += p * vf[e];
                }
            }
        }
        __syncthreads();
    }
    // Sum the lane groups: lanes of a warp holding the same dims, then the warps.
    for (int o = lpk; o < 32; o <<= 1) {
#pragma unroll
        for (int g = 0; g < MAXG; ++g)
#pragma unroll
            for (int e = 0; e < VE; ++e) acc[g][e] += __shfl_xor_sync(FULL_MASK, acc[g][e], o);
    }
    if (lane < lpk) {
#pragma unroll
        for (int g = 0; g < MAXG; ++g) {
            if (g >= G) break;
#pragma unroll
            for (int e = 0; e < VE; ++e) red[(warp * G + g) * dim + sub * VE + e] = acc[g][e];
        }
    }
    __syncthreads();
    for (u32 idx = threadIdx.x; idx < (u32)G * dim; idx += SPLIT_THREADS) {
        const u32 g = idx / dim, d = idx % dim;
        float o = 0.f;
#pragma unroll
        for (int w = 0; w < SPLIT_WARPS; ++w) o += red[(w * G + g) * dim + d];
        const i64 h = h0 + g;
        if (sa.splits == 1) {
            const float l = l_run[g];
            ((T*)a.out)[(i * a.q_heads + h) * a.dim + d] = convert<T>(l > 0.f ? o / l : 0.f);
        } else {
            float* part = (float*)sa.partial + ((i * a.q_heads + h) * sa.splits + s) * (2 + a.dim);
            part[2 + d] = o;
            if (d == 0) {
                part[0] = m_run[g];
                part[1] = l_run[g];
            }
        }
    }
    if (sa.splits == 1 || !sa.counters) return;
    // The last split of this (row, kv head) to finish merges all of them (a ticket taken after
    // a fence) and puts the ticket back to zero; attention_combine does it when there are no
    // tickets.
    __shared__ u32 ticket;
    __threadfence();
    __syncthreads();
    u32* counter = reinterpret_cast<u32*>(sa.counters) + rest;
    if (threadIdx.x == 0) ticket = atomicAdd(counter, 1u);
    __syncthreads();
    if (ticket != (u32)(sa.splits - 1)) return;
    __threadfence();
    // merge_splits' arithmetic, with its serial chains of loads taken apart: every split's
    // (m, l) of the group read at once into shared memory, the weights e^(m_s - M) and 1 / L
    // summed in split order by one thread per head, then each output adds its splits' values
    // with the loads in flight together.
    const i64 stride = 2 + a.dim;
    const float* base = (const float*)sa.partial + (i * a.q_heads + h0) * sa.splits * stride;
    float* e = sc;                 // [G][splits]: e^(m_s - M), or -1 for a split with no key
    float* ls = sc + G * sa.splits;  // [G][splits]: l_s
    float* inv = rs;               // [G]: 1 / L
    for (u32 t = threadIdx.x; t < (u32)(G * sa.splits); t += SPLIT_THREADS) {
        e[t] = __ldcg(base + t * stride);
        ls[t] = __ldcg(base + t * stride + 1);
    }
    __syncthreads();
    if (threadIdx.x < G) {
        float* em = e + threadIdx.x * sa.splits;
        const float* lm = ls + threadIdx.x * sa.splits;
        float big = NEG_INF;
        for (i64 t = 0; t < sa.splits; ++t) big = fmaxf(big, em[t]);
        float l = 0.f;
        for (i64 t = 0; t < sa.splits; ++t) {
            if (em[t] != NEG_INF) {
                const float w = __expf(em[t] - big);
                l += lm[t] * w;
                em[t] = w;
            } else {
                em[t] = -1.f;
            }
        }
        inv[threadIdx.x] = l > 0.f ? 1.f / l : 0.f;
    }
    __syncthreads();
    for (u32 idx = threadIdx.x; idx < (u32)G * dim; idx += SPLIT_THREADS) {
        const u32 g = idx / dim, d = idx % dim;
        const float* em = e + g * sa.splits;
        const float* acc_at = base + g * sa.splits * stride + 2 + d;
        float o = 0.f;
#pragma unroll 8
        for (i64 t = 0; t < sa.splits; ++t) {
            const float w = em[t];
            if (w >= 0.f) o += __ldcg(acc_at + t * stride) * w;
        }
        ((T*)a.out)[(i * a.q_heads + h0 + g) * a.dim + d] = convert<T>(o * inv[g]);
    }
    if (threadIdx.x == 0) *counter = 0u;
}

struct CombineArgs {
    u64 partial, out;
    i64 tasks, splits, dim;
};

// out[task] = the splits' partial softmaxes merged: sum_s acc_s * e^(m_s - M) / sum_s l_s * e^(m_s - M).
template <typename T> __device__ __forceinline__ void attention_combine(const CombineArgs& c) {
    const i64 task = blockIdx.x;
    if (task >= c.tasks) return;
    const float* part = (const float*)c.partial + task * c.splits * (2 + c.dim);
    for (i64 d = threadIdx.x; d < c.dim; d += blockDim.x)
        ((T*)c.out)[task * c.dim + d] = convert<T>(merge_splits(part, c.splits, c.dim, d));
}

#define ATTENTION(NAME, T)                                                                               \
    extern "C" __global__ void __launch_bounds__(256) rope_##NAME(RopeArgs a) { rope<T>(a); }            \
    extern "C" __global__ void __launch_bounds__(256) kv_cache_store_##NAME(StoreArgs a) {                 \
        kv_cache_store<T>(a);                                                                            \
    }                                                                                                    \
    extern "C" __global__ void __launch_bounds__(256, 1) paged_attention_##NAME(AttnArgs a) {              \
        paged_attention<T>(a);                                                                           \
    }                                                                                                    \
    extern "C" __global__ void __launch_bounds__(SPLIT_THREADS) paged_attention_split_##NAME(SplitArgs a) { \
        paged_attention_split<T>(a);                                                                     \
    }                                                                                                    \
    extern "C" __global__ void __launch_bounds__(128) attention_combine_##NAME(CombineArgs c) {            \
        attention_combine<T>(c);                                                                         \
    }

ATTENTION(f32, float)
ATTENTION(f16, f16)
ATTENTION(bf16, bf16)
