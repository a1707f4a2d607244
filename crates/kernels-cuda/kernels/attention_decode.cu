#line 1 "attention_decode.cu"
// attention_decode.cu: paged_attention's decode form (after attention.cu, whose AttnArgs it
// takes), for rows whose key row is whole 16-byte pieces for at most a warp (lpk lanes, a power
// of two) and kv heads serving at most DEC_MAXG query heads. One block per (query row, kv head,
// split); the kv head's G query heads share every key and value load (GQA). This file holds
// what both of its kernels share (where a block works, how its warps' results become the
// output or a share, the merge of shares) and the CUDA-core kernel, which runs f32 and the
// 16-bit rows of 8 dims; f16/bf16 rows of 16 dims or more take the tensor-core kernel of
// attention_decode_mma.cu.
//
// A decode step is a chain of memory round trips, so the kernels are built around how few of
// them lie on their path and how many bytes each one has in flight:
//   - the sequence of the row, its length and the query come in one round trip (every thread
//     looks at a few sequences at once instead of a binary search of dependent loads);
//   - the splits of a sequence come from its actual length, read on the device: the host fixes
//     the grid (lookup-table width and batch, so a CUDA graph keeps its shapes), each block
//     works out how many splits its sequence really needs (whole steps of keys each) and the
//     blocks past them leave at once, so short sequences take one split and write the output
//     directly; longer ones merge through tickets (the last split to finish merges, reading
//     every split's (max, sum) in one round trip and every split's values in a second).
// In the CUDA-core kernel, the page ids of a split come into shared memory in one round trip
// per DEC_WINDOW pages, and every lane group (lpk lanes, one 16-byte piece of a key row each)
// loads U keys AND their U values at once (values do not depend on the scores), then scores
// them, and keeps its own online softmax: no barrier in the key loop, warps run free.
// The f32 kernels for rows of up to 16 lanes (64 dims) run blocks of 512 threads (256 at 8
// heads per kv head, for registers) whose lane groups load a quarter (a half) of the keys the
// 128-thread blocks of the 16-bit ones do: the same keys per step and bytes in flight per block,
// but four warps per scheduler, each with a quarter of the instruction chain (at decode's short
// splits the kernel is bound by that chain's latency, not by memory). The softmax runs in base 2
// with the scale (and log2 e) folded into the query; its maxima go back to natural units for the
// merge, which the tensor-core kernel shares.
// Without ticket counters (first use inside a capture) every split writes a share, empty ones
// an empty share, and attention_combine merges them. Out-of-range page ids or lengths do not
// fault: keys on a bad page, or past the lookup table, are skipped.

#define DEC_THREADS 128  // the 16-bit kernels' and the tensor-core kernel's blocks
#define DEC_WARPS (DEC_THREADS / 32)
#define DEC_THREADS_F32 512  // the f32 kernels' blocks; launch/attention_decode.rs: block_threads
#define DEC_MAXG 8
#define DEC_MAX_SPLITS 64  // launch/attention_decode.rs: MAX_SPLITS
#define DEC_WINDOW 512     // page ids staged in shared memory at a time

struct DecodeArgs {
    AttnArgs a;
    // f32 scratch when splits > 1: the shares' values [tokens, q_heads, splits, dim], then
    // their (max, sum) [tokens, q_heads, splits, 2].
    u64 partial;
    u64 counters;  // u32 per (row, kv head), zero between launches: the merge's tickets (0: none)
    i64 splits;
    i32 lpk, group;
    // Read the row offsets, cache lengths and lookup table before griddepcontrol.wait: no kernel
    // of the program writes them, and the stream's previous kernel is one of the program (the
    // engine's passes/mark_early_index.rs); the tensor-core kernel also copies keys below the
    // cached length then (stored by earlier steps; a step stores at the cached length and past)
    i32 early;
    // Whole steps of keys a split takes at least (the tensor-core kernel at one query row of up
    // to 64 dims: 2, so that each warp of a whole split walks two tiles; launch/attention_decode.rs
    // MMA_MIN_STEPS): shorter sequences use fewer of the plan's splits.
    i32 min_steps;
};

#define DEC_LOG2E 1.4426950408889634f
#define DEC_LN2 0.6931471805599453f

__device__ __forceinline__ float dec_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
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

// The shares of one (row, kv head) merged into the output: out = sum_s w_s acc_s with
// w_s = e^(m_s - M) / sum_s' l_s' e^(m_s' - M). One round trip for every (m, l), one for every
// value (all of a thread's loads issued before any is used). Reads through L2 (other blocks
// wrote the shares).
template <typename T, int NT>
__device__ __forceinline__ void merge_shares(const DecodeArgs& da, i64 i, i64 h0, i64 shares, float* wts) {
    const AttnArgs& a = da.a;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, group = da.group;
    const i64 S = da.splits, dim = a.dim;
    const float* acc = (const float*)da.partial;
    const float* ml = acc + a.tokens * a.q_heads * S * dim;
    for (int g = warp; g < group; g += NT / 32) {
        const i64 row = (i * a.q_heads + h0 + g) * S;
        float m[DEC_MAX_SPLITS / 32], l[DEC_MAX_SPLITS / 32];
        float big = NEG_INF;
#pragma unroll
        for (int k = 0; k < DEC_MAX_SPLITS / 32; ++k) {
            const i64 s = lane + 32 * k;
            m[k] = s < shares ? __ldcg(ml + (row + s) * 2) : NEG_INF;
            l[k] = s < shares ? __ldcg(ml + (row + s) * 2 + 1) : 0.f;
            big = fmaxf(big, m[k]);
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) big = fmaxf(big, __shfl_xor_sync(FULL_MASK, big, o));
        const float base = big == NEG_INF ? 0.f : big;
        float sum = 0.f;
#pragma unroll
        for (int k = 0; k < DEC_MAX_SPLITS / 32; ++k) {
            m[k] = __expf(m[k] - base);  // 0 for an empty share
            sum += l[k] * m[k];
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(FULL_MASK, sum, o);
        const float inv = sum > 0.f ? 1.f / sum : 0.f;
#pragma unroll
        for (int k = 0; k < DEC_MAX_SPLITS / 32; ++k)
            if (lane + 32 * k < shares) wts[g * DEC_MAX_SPLITS + lane + 32 * k] = m[k] * inv;
    }
    __syncthreads();
    const int quads = (int)dim / 4;  // dim is a multiple of 4 (whole 16-byte pieces of T)
    for (int o = threadIdx.x; o < group * quads; o += NT) {
        const int g = o / quads, q4 = o - g * quads;
        const float4* src = reinterpret_cast<const float4*>(acc + (i * a.q_heads + h0 + g) * S * dim) + q4;
        float sum[4] = {0.f, 0.f, 0.f, 0.f};
        for (int s0 = 0; s0 < shares; s0 += 8) {
            float4 v[8];
#pragma unroll
            for (int u = 0; u < 8; ++u)
                v[u] = s0 + u < shares ? __ldcg(src + (s0 + u) * quads) : make_float4(0, 0, 0, 0);
#pragma unroll
            for (int u = 0; u < 8; ++u) {
                // A weight of 0 (an empty share, whose values may never have been written) adds
                // nothing, not 0 x garbage.
                const float w = s0 + u < shares ? wts[g * DEC_MAX_SPLITS + s0 + u] : 0.f;
                sum[0] += w > 0.f ? w * v[u].x : 0.f;
                sum[1] += w > 0.f ? w * v[u].y : 0.f;
                sum[2] += w > 0.f ? w * v[u].z : 0.f;
                sum[3] += w > 0.f ? w * v[u].w : 0.f;
            }
        }
        T* out = (T*)a.out + (i * a.q_heads + h0 + g) * dim + q4 * 4;
#pragma unroll
        for (int e = 0; e < 4; ++e) out[e] = convert<T>(sum[e]);
    }
}

// Where a block of the decode form works: its (row, kv head, split), its sequence and the keys
// [kb, ke) of its split.
struct DecSplit {
    i64 i, h0, s, pair, b, kb, ke, active;
    i64 cached;  // keys of the sequence stored before this launch's rows: below it, no store of the step
    bool tickets, direct;
};

// The block's split, for splits of whole `step`s of keys; false when the split is past the ones
// the sequence uses (`active`; split 0 is always used, even by a sequence of no keys). The
// block then leaves: with tickets at once, without waiting for the previous kernel (the merge
// counts the used splits only; every (row, kv head)'s split 0 waits, so the grid still lets the
// next kernel launch only after a wait, and its completion implies the previous grid's);
// without tickets attention_combine reads every share, so it leaves an empty one first,
// decode_unused_split, after griddepcontrol.wait. Every thread of the block (NT of them) calls
// it (it has a barrier). Its loads bypass L1 (with DecodeArgs::early they may come before the
// wait).
template <int NT> __device__ __forceinline__ bool decode_split(const DecodeArgs& da, i64 step, DecSplit& sp) {
    const AttnArgs& a = da.a;
    __shared__ i64 seq[4];  // b, offsets[b], q_len, cached
    const i64 S = da.splits;
    // 32-bit index arithmetic: the grid, the splits and the keys of a table are below 2^31
    // (launch/attention_decode.rs), and a 64-bit division is a ~80-instruction call.
    {
        const u32 s32 = (u32)S, kv = (u32)a.kv_heads, pair = blockIdx.x / s32, row = pair / kv;
        sp.s = blockIdx.x - pair * s32;
        sp.pair = pair;
        sp.i = row;
        sp.h0 = (i64)(pair - row * kv) * da.group;
    }
    const i64 i = sp.i;
    // The sequence of row i: the last b with offsets[b] <= i (0 if none). Thread t looks at
    // sequences t, t + 128, ...; exactly one of them matches when the offsets rise.
    {
        const u32* offsets = (const u32*)a.offsets;
        const u32* lengths = (const u32*)a.lengths;
        for (i64 t = threadIdx.x; t < a.batch; t += NT) {
            const i64 o0 = __ldcg(offsets + t), o1 = t + 1 < a.batch ? (i64)__ldcg(offsets + t + 1) : -1;
            const i64 end = __ldcg(offsets + a.batch);
            const i64 len = __ldcg(lengths + t);
            const bool starts = t == 0 || o0 <= i;
            const bool ends = t + 1 == a.batch || o1 > i;
            if (starts && ends) {
                seq[0] = t;
                seq[1] = o0;
                seq[2] = (t + 1 < a.batch ? o1 : end) - o0;
                seq[3] = len;
            }
        }
    }
    __syncthreads();
    const i64 cached = seq[3], total = cached + seq[2], pos = cached + (i - seq[1]);
    sp.b = seq[0];
    sp.cached = cached;
    i64 lo = 0, hi = pos + 1 < total ? pos + 1 : total;
    if (a.mask == 1) lo = pos + 1 - a.window > 0 ? pos + 1 - a.window : 0;
    if (a.mask == 2) hi = total;
    const i64 table_keys = a.width * a.page_size;
    if (hi > table_keys) hi = table_keys;  // keys past the lookup table have no page
    if (lo > hi) lo = hi;
    // This sequence's splits: whole steps of keys each, as few as the length needs.
    const u32 n = (u32)(hi - lo), s32 = (u32)S, st = (u32)step;
    const u32 per = max(((n + s32 - 1) / s32 + st - 1) / st, (u32)da.min_steps) * st;
    sp.active = n == 0 ? 1 : (n + per - 1) / per;
    sp.tickets = S > 1 && da.counters != 0;
    sp.direct = S == 1 || (sp.tickets && sp.active == 1);
    if (sp.s >= sp.active) return false;
    sp.kb = lo + sp.s * per;
    sp.ke = sp.kb + per < hi ? sp.kb + per : hi;
    return true;
}

// griddepcontrol.wait, then launch_dependents (the kernels start waiting for the previous
// kernel's completion and memory here; the next kernel may launch from here).
__device__ __forceinline__ void decode_wait() {
    pdl_wait();  // (prelude.cuh: nothing before sm_90, which has no programmatic launches)
    pdl_launch_dependents();
}

// What a block of an unused split does before it leaves (decode_split false): with tickets
// nothing, at once (see decode_split; when such blocks waited first, they held their SM's
// shared memory until the previous kernel was done); without tickets it leaves an empty share,
// which attention_combine reads, after griddepcontrol.wait (`waited`: already done).
template <int NT>
__device__ __forceinline__ void decode_unused_split(const DecodeArgs& da, const DecSplit& sp, bool waited) {
    if (sp.tickets) return;
    if (!waited) decode_wait();
    const AttnArgs& a = da.a;
    float* part_ml = (float*)da.partial + a.tokens * a.q_heads * da.splits * a.dim;
    for (int g = threadIdx.x; g < da.group; g += NT) {
        const i64 at = ((sp.i * a.q_heads + sp.h0 + g) * da.splits + sp.s) * 2;
        part_ml[at] = NEG_INF;
        part_ml[at + 1] = 0.f;
    }
}

// The warps' partial results red [NT / 32][G][2 + dim] (max, sum, values per head, G >= the
// call's group) merged into the output, or into the split's share; then the last split of the
// (row, kv head) to finish (a ticket taken after a fence) merges the shares and puts the ticket
// back to zero. The caller has written red and passed a barrier.
template <typename T, int NT>
__device__ __forceinline__ void decode_finish(const DecodeArgs& da, const DecSplit& sp, const float* red, int G) {
    const AttnArgs& a = da.a;
    __shared__ float wts[DEC_MAXG * DEC_MAX_SPLITS];
    __shared__ u32 ticket;
    const i64 S = da.splits, i = sp.i;
    const int dim = (int)a.dim, stride = 2 + dim;
    float* part_acc = (float*)da.partial;
    float* part_ml = part_acc + a.tokens * a.q_heads * S * a.dim;
    for (int idx = threadIdx.x; idx < da.group * dim; idx += NT) {
        const int g = idx / dim, d = idx - g * dim;
        float big = NEG_INF;
#pragma unroll
        for (int w = 0; w < NT / 32; ++w) big = fmaxf(big, red[(w * G + g) * stride]);
        const float base = big == NEG_INF ? 0.f : big;
        float sum = 0.f, o = 0.f;
#pragma unroll
        for (int w = 0; w < NT / 32; ++w) {
            const float* r = red + (w * G + g) * stride;
            const float f = __expf(r[0] - base);
            sum += r[1] * f;
            o += r[2 + d] * f;
        }
        const i64 h = sp.h0 + g;
        if (sp.direct) {
            ((T*)a.out)[(i * a.q_heads + h) * dim + d] = convert<T>(sum > 0.f ? o / sum : 0.f);
        } else {
            const i64 share = (i * a.q_heads + h) * S + sp.s;
            part_acc[share * dim + d] = o;
            if (d == 0) {
                part_ml[share * 2] = big;
                part_ml[share * 2 + 1] = sum;
            }
        }
    }
    if (sp.direct || !sp.tickets) return;
    __threadfence();
    __syncthreads();
    u32* counter = reinterpret_cast<u32*>(da.counters) + sp.pair;
    if (threadIdx.x == 0) ticket = atomicAdd(counter, 1u);
    __syncthreads();
    if (ticket != (u32)(sp.active - 1)) return;
    __threadfence();
    merge_shares<T, NT>(da, i, sp.h0, sp.active, wts);
    if (threadIdx.x == 0) *counter = 0u;
}

// The V partial sums x[0 .. V) of each lane (V a power of two up to 32) summed over the warp's
// 32 lanes, every lane getting all V sums: a reduce-scatter (at level L, lanes whose bit L is
// set keep the upper half of their values and add the partner's upper half, the others the
// lower; V - 1 shuffles in all), the remaining levels on the one value left, then an
// all-gather (V shuffles), where a plain butterfly takes 5 V. Sum j ends in the lanes whose
// low log2(V) bits are j's bits reversed.
template <int N> struct DecRs {
    static __device__ __forceinline__ void run(float* x, int lane, int level) {
        const bool up = (lane >> level) & 1;
#pragma unroll
        for (int i = 0; i < N / 2; ++i) {
            const float keep = up ? x[i + N / 2] : x[i];
            const float send = up ? x[i] : x[i + N / 2];
            x[i] = keep + __shfl_xor_sync(FULL_MASK, send, 1 << level);
        }
        DecRs<N / 2>::run(x, lane, level + 1);
    }
};
template <> struct DecRs<1> {
    static __device__ __forceinline__ void run(float* x, int, int level) {
#pragma unroll
        for (int l = level; l < 5; ++l) x[0] += __shfl_xor_sync(FULL_MASK, x[0], 1 << l);
    }
};
__host__ __device__ constexpr int dec_brev(int j, int bits) {
    int r = 0;
    for (int b = 0; b < bits; ++b) r |= ((j >> b) & 1) << (bits - 1 - b);
    return r;
}
template <int V> __device__ __forceinline__ void dec_warp_sums(float (&x)[V], int lane) {
    constexpr int BITS = V >= 32 ? 5 : V >= 16 ? 4 : V >= 8 ? 3 : V >= 4 ? 2 : V >= 2 ? 1 : 0;
    static_assert(V == 1 << BITS, "V is a power of two up to 32");
    float r[V];
#pragma unroll
    for (int j = 0; j < V; ++j) r[j] = x[j];
    DecRs<V>::run(r, lane, 0);
#pragma unroll
    for (int j = 0; j < V; ++j) x[j] = __shfl_sync(FULL_MASK, r[0], dec_brev(j, BITS));
}

// G: the kernel's query heads per kv head (a power of two >= the call's group); U: keys (and
// values) a lane group loads at once; NT: threads of the block. WIDE: a key row is the whole
// warp (lpk 32; G U a power of two): the scores' sums over it by dec_warp_sums.
template <typename T, int G, int U, int NT, bool WIDE = false>
__device__ __forceinline__ void paged_decode(const DecodeArgs& da) {
    constexpr int VE = 16 / sizeof(T);
    const AttnArgs& a = da.a;
    extern __shared__ __align__(16) float red[];  // [NT / 32][G][2 + dim]: the warps' (m, l, acc)
    __shared__ u32 pid[DEC_WINDOW];

    const int lpk = da.lpk, group = da.group;
    const int ngroups = NT / lpk, gi = threadIdx.x / lpk, sub = threadIdx.x % lpk;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const i64 dim = a.dim;
    const u32 pair = blockIdx.x / (u32)da.splits, row = pair / (u32)a.kv_heads;  // (see decode_split)
    const i64 kvh = pair - row * (u32)a.kv_heads, i = row, h0 = kvh * group;
    // Scores come out in base 2 and scaled (the softcap, when there is one, needs them in
    // natural units: it applies log2 e itself).
    const bool capped = a.softcap > 0.f;
    const float qmul = capped ? a.scale : a.scale * DEC_LOG2E;
    const float inv_cap = capped ? 1.f / a.softcap : 0.f, cap_log2e = a.softcap * DEC_LOG2E;

    // Launched under programmatic serialization: nothing the previous kernel may write (the
    // query, the cache) is read before decode_wait. With DecodeArgs::early the split and the
    // first window of page ids come before it.
    const bool early = da.early != 0;
    if (!early) decode_wait();

    // The query pieces of this lane, for the group's heads (in flight with the search; with
    // DecodeArgs::early after it, once the wait is over).
    float qf[G][VE];
    auto load_q = [&]() {
#pragma unroll
        for (int g = 0; g < G; ++g) {
            uint4 raw = make_uint4(0, 0, 0, 0);
            if (g < group)
                raw = __ldg(reinterpret_cast<const uint4*>((const T*)a.q + (i * a.q_heads + h0 + g) * dim) + sub);
            unpack16<T>(raw, qf[g]);
        }
    };
    if (!early) load_q();
    const int step = ngroups * U;
    DecSplit sp;
    if (!decode_split<NT>(da, step, sp)) {
        decode_unused_split<NT>(da, sp, !early);
        return;
    }
    const i64 b = sp.b, kb = sp.kb, ke = sp.ke, ps = a.page_size;

    const u64 rowlen = (u64)a.kv_heads * dim;
    const u64 page_elems = (u64)ps * rowlen;  // one layer's keys of a page
    const u64 page_stride = 2 * (u64)a.layers * page_elems;
    const T* cache = (const T*)a.blocks + (u64)a.layer * page_elems + (u64)kvh * dim + (u64)sub * VE;
    const u64 value_off = (u64)a.layers * page_elems;  // keys -> values of one page
    const u32* table = (const u32*)a.table + b * a.width;
    const u32 pages = a.pages < (i64)0xffffffff ? (u32)a.pages : 0xffffffffu;
    // Within a window of DEC_WINDOW pages, key offsets fit in 32 bits (page sizes below 2^22:
    // launch/attention_decode.rs).
    const u32 ps32 = (u32)ps;
    const bool pow2 = (ps & (ps - 1)) == 0;
    const int shift = __ffsll(ps) - 1;

    float m[G], l[G], acc[G][VE];
#pragma unroll
    for (int g = 0; g < G; ++g) {
        m[g] = NEG_INF;
        l[g] = 0.f;
#pragma unroll
        for (int e = 0; e < VE; ++e) acc[g][e] = 0.f;
    }
    // The page ids of the window of keys from w0 into pid (every thread calls it: barriers).
    auto stage_window = [&](i64 w0) {
        const i64 p0 = (u32)w0 / ps32;
        const i64 w1 = (p0 + DEC_WINDOW) * ps < ke ? (p0 + DEC_WINDOW) * ps : ke;
        const int np = (int)((u32)(w1 - 1) / ps32 - p0 + 1);
        __syncthreads();  // the previous window's page ids are no longer read
#pragma unroll 4
        for (int t = threadIdx.x; t < np; t += NT) pid[t] = __ldcg(table + p0 + t);
        __syncthreads();
    };
    if (early) {
        if (kb < ke) stage_window(kb);  // (as the loop: no page id read for a split of no keys)
        decode_wait();
        load_q();
    }
#pragma unroll
    for (int g = 0; g < G; ++g)
#pragma unroll
        for (int e = 0; e < VE; ++e) qf[g][e] *= qmul;
    for (i64 w0 = kb; w0 < ke;) {
        const i64 p0 = (u32)w0 / ps32;
        const i64 w1 = (p0 + DEC_WINDOW) * ps < ke ? (p0 + DEC_WINDOW) * ps : ke;
        if (!early || w0 != kb) stage_window(w0);
        // keys of this window relative to its first page's first key
        const u32 rel0 = (u32)(w0 - p0 * ps), rel1 = (u32)(w1 - p0 * ps);
        for (u32 t0 = rel0; t0 < rel1; t0 += step) {
            uint4 kr[U], vr[U];
            u32 ok = 0;
            // The lane group's U keys t0 + gi + ngroups u. Where they share one page (pages of a
            // power of two keys, a split's steps aligned to them: the usual case), one lookup
            // and address serve all U, each the one before plus ngroups rows; else each key
            // finds its own page.
            const u32 first = t0 + gi, last = first + ngroups * (U - 1);
            if (pow2 && last < rel1 && (first >> shift) == (last >> shift)) {
                const u32 page = pid[first >> shift];
                const bool good = page < pages;
                const T* at = cache + (good ? page * page_stride + (u64)(first & (ps32 - 1)) * rowlen : 0);
                const u64 next = (u64)ngroups * rowlen;
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    const uint4* kp = reinterpret_cast<const uint4*>(at + u * next);
                    const uint4* vp = reinterpret_cast<const uint4*>(at + u * next + value_off);
                    kr[u] = good ? __ldg(kp) : make_uint4(0, 0, 0, 0);
                    vr[u] = good ? __ldg(vp) : make_uint4(0, 0, 0, 0);
                }
                ok = good ? (1u << U) - 1 : 0u;
            } else {
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    kr[u] = make_uint4(0, 0, 0, 0);
                    vr[u] = make_uint4(0, 0, 0, 0);
                    const u32 rel = first + ngroups * u;
                    if (rel < rel1) {
                        const u32 pw = pow2 ? rel >> shift : rel / ps32;
                        const u32 slot = rel - pw * ps32;
                        const u32 page = pid[pw];
                        if (page < pages) {
                            const T* at = cache + page * page_stride + (u64)slot * rowlen;
                            kr[u] = __ldg(reinterpret_cast<const uint4*>(at));
                            vr[u] = __ldg(reinterpret_cast<const uint4*>(at + value_off));
                            ok |= 1u << u;
                        }
                    }
                }
            }
            // Scores: this lane's piece of each dot, summed over the group's lpk lanes.
            float sc[G][U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                float kf[VE];
                unpack16<T>(kr[u], kf);
#pragma unroll
                for (int g = 0; g < G; ++g) {
                    float d = 0.f;
#pragma unroll
                    for (int e = 0; e < VE; ++e) d += qf[g][e] * kf[e];
                    sc[g][u] = d;
                }
            }
            if constexpr (WIDE) {
                dec_warp_sums<G * U>(*reinterpret_cast<float(*)[G * U]>(&sc[0][0]), lane);
            } else {
                for (int o = 1; o < lpk; o <<= 1)
#pragma unroll
                    for (int g = 0; g < G; ++g)
#pragma unroll
                        for (int u = 0; u < U; ++u) sc[g][u] += __shfl_xor_sync(FULL_MASK, sc[g][u], o);
            }
            // The softcap in one block the kernel skips with one branch (not a branch around each
            // score: a taken branch per score costs an instruction fetch each, in code a warp
            // runs once), then the online softmax of the lane group (base 2), then p x v.
            if (capped) {
#pragma unroll
                for (int g = 0; g < G; ++g)
#pragma unroll
                    for (int u = 0; u < U; ++u) sc[g][u] = cap_log2e * tanhf(sc[g][u] * inv_cap);
            }
#pragma unroll
            for (int g = 0; g < G; ++g) {
                float mx = NEG_INF;
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    sc[g][u] = (ok >> u) & 1u ? sc[g][u] : NEG_INF;
                    mx = fmaxf(mx, sc[g][u]);
                }
                const float mn = fmaxf(m[g], mx), base = mn == NEG_INF ? 0.f : mn;
                const float r = dec_exp2(m[g] - base);
                m[g] = mn;
                l[g] *= r;
#pragma unroll
                for (int e = 0; e < VE; ++e) acc[g][e] *= r;
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    sc[g][u] = dec_exp2(sc[g][u] - base);
                    l[g] += sc[g][u];
                }
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                float vf[VE];
                unpack16<T>(vr[u], vf);
#pragma unroll
                for (int g = 0; g < G; ++g)
#pragma unroll
                    for (int e = 0; e < VE; ++e) acc[g][e] += sc[g][u] * vf[e];
            }
        }
        w0 = w1;
    }
    // The lane groups of a warp merged (lanes holding the same dims), then the warps through
    // shared memory.
    for (int o = lpk; o < 32; o <<= 1) {
#pragma unroll
        for (int g = 0; g < G; ++g) {
            const float mo = __shfl_xor_sync(FULL_MASK, m[g], o), lo2 = __shfl_xor_sync(FULL_MASK, l[g], o);
            const float mn = fmaxf(m[g], mo), base = mn == NEG_INF ? 0.f : mn;
            const float f1 = dec_exp2(m[g] - base), f2 = dec_exp2(mo - base);
            m[g] = mn;
            l[g] = l[g] * f1 + lo2 * f2;
#pragma unroll
            for (int e = 0; e < VE; ++e) acc[g][e] = acc[g][e] * f1 + __shfl_xor_sync(FULL_MASK, acc[g][e], o) * f2;
        }
    }
    if (lane < lpk) {
#pragma unroll
        for (int g = 0; g < G; ++g) {
            float* r = red + (warp * G + g) * (2 + dim);
            if (sub == 0) {
                r[0] = m[g] * DEC_LN2;  // natural units, as decode_finish and the merge take them
                r[1] = l[g];
            }
#pragma unroll
            for (int e = 0; e < VE; ++e) r[2 + sub * VE + e] = acc[g][e];
        }
    }
    __syncthreads();
    decode_finish<T, NT>(da, sp, red, G);
}

// Every share of each (row, kv head) merged, one block per pair: the decode form's merge when
// there are no ticket counters (empty shares weigh 0).
template <typename T> __device__ __forceinline__ void attention_combine(const DecodeArgs& da) {
    __shared__ float wts[DEC_MAXG * DEC_MAX_SPLITS];
    pdl_wait();
    const i64 pair = blockIdx.x, kvh = pair % da.a.kv_heads, i = pair / da.a.kv_heads;
    merge_shares<T, DEC_THREADS>(da, i, kvh * da.group, da.splits, wts);
}

// U: keys (and values) in flight per lane group, fewer where the heads' queries and
// accumulators (2 x G x VE registers) leave less room, and as many fewer in the f32 kernels'
// blocks as they have more threads: launch/attention_decode.rs's block_plan says the same.
#define DECODE_GW(NAME, T, G, U, NT, MINB, WIDE)                                                             \
    extern "C" __global__ void __launch_bounds__(NT, MINB) paged_decode_##NAME##_g##G(DecodeArgs a) {       \
        paged_decode<T, G, U, NT, WIDE>(a);                                                                  \
    }
#define DECODE_G(NAME, T, G, U, NT, MINB) DECODE_GW(NAME, T, G, U, NT, MINB, false)
#define DECODE(NAME, T, U1, U4, U8, NT, NT8, MINB)                                                           \
    DECODE_G(NAME, T, 1, U1, NT, MINB)                                                                       \
    DECODE_G(NAME, T, 2, U1, NT, MINB)                                                                       \
    DECODE_G(NAME, T, 4, U4, NT, MINB)                                                                       \
    DECODE_G(NAME, T, 8, U8, NT8, MINB)                                                                      \
    extern "C" __global__ void __launch_bounds__(DEC_THREADS) attention_combine_##NAME(DecodeArgs a) {         \
        attention_combine<T>(a);                                                                             \
    }

// f32 at G = 8: 256 threads of 2 keys each (512 would leave 128 registers a thread, and spill).
DECODE(f32, float, 2, 2, 2, DEC_THREADS_F32, DEC_THREADS_F32 / 2, 1)
DECODE(f16, f16, 8, 6, 3, DEC_THREADS, DEC_THREADS, 2)
DECODE(bf16, bf16, 8, 6, 3, DEC_THREADS, DEC_THREADS, 2)
// f32 rows of a whole warp (128 dims): 128-thread blocks, as measured faster there (an H200,
// 8B-shaped Q4_0 decode at 512 tokens: 14.6 us a layer against 16.8 with 512 threads).
DECODE_GW(f32_wide, float, 1, 8, DEC_THREADS, 2, true)
DECODE_GW(f32_wide, float, 2, 8, DEC_THREADS, 2, true)
DECODE_GW(f32_wide, float, 4, 8, DEC_THREADS, 2, true)
DECODE_GW(f32_wide, float, 8, 4, DEC_THREADS, 2, true)
