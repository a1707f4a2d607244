#line 1 "sampling.cu"
// sampling.cu: sample_tokens (crates/graph/src/ops/sampling.rs defines it;
// crates/runtime/src/cpu/sampling is the reference, and this kernel gives its results bit for
// bit); sampling_math.cuh and sampling_reduce.cuh come before it, penalties.cu after.
//
// One cluster of up to 8 CTAs of 1024 threads per row of logits [B, V] (f32),
// each CTA a slice of the row (sampling_reduce.cuh says how they agree), writing one
// int64 token. A greedy row (temperature <= 0 or NaN, or top_k == 1) is an argmax of the
// logits, and so is a row whose m (below) is not finite (a temperature so small that the
// quotients overflow). Otherwise, with z = canon(x / temperature) (NaN -> -inf, -0 -> +0) and
// m = max z:
//   1. the keep threshold, as an order-preserving u32 key of the values (key_of), is the
//      largest of: the k-th largest z for 1 < top_k < V (the largest key K with at least k
//      keys >= K); the key of m + ln(min_p) for min_p > 0; and for top_p < 1 the largest key
//      t whose kept values >= t hold top_p of the kept mass, the weights exp(z - m) summed in
//      40-bit fixed point (u64, exact in any order). Both are found a few bits a pass
//      (kary_select: 15 candidates counted, or 7 summed, in one pass over the row: 8 passes
//      for the 32 bits of the key, or 11). The key of m caps the threshold: the largest value
//      is always kept.
//   2. the token is the Gumbel-max pick: the lowest index of the largest z_i + g_i over the
//      kept values, g_i = -ln(-ln(u_i)) with u_i from splitmix64(seed ^ ((i + 1) * GOLDEN));
//      values more than GUMBEL_BOUND below m + g of m's index cannot win and draw no noise.
// No row is sorted. The first pass over a sampled row reads the logits (16-byte vectors in
// flight per thread: for_row) and keeps each CTA's slice of keys in shared memory when it fits
// (SampleArgs::cached), so the later passes neither read the row again nor divide, and the
// top-p total keeps the weights' exps there too; a slice too large for shared memory is
// streamed from global memory at every pass (sample_tokens_streamed). After a top-k or min-p
// threshold, top-p's passes walk a list of the few kept values instead (top_p_threshold).
// Host and device agree exactly because every float operation is one IEEE operation in the
// order of math.rs: the __f*_rn intrinsics keep NVRTC from contracting a * b + c into an FMA,
// and ln and exp are our own (math.rs), not the CUDA math library's.

// ---- sample_tokens ---------------------------------------------------------------------------

struct SampleArgs {
    u64 logits, temperature, top_k, top_p, min_p, seed, out;
    i64 batch, vocab;
    i64 slice;   // elements of a row per CTA of a cluster (a multiple of 4)
    i32 cached;  // what a CTA keeps of its slice of a sampled row: CACHE_KEYS | CACHE_EXPS
    i32 pad;
};

// In shared memory, for a sampled row: the keys of the CTA's slice, then (top-p rows) the
// exp(z - m) of its kept values.
#define CACHE_KEYS 1
#define CACHE_EXPS 2

// A row, the CTA's slice of it [lo, lo + len) and what of the slice shared memory keeps
// (`cached`: CACHE_KEYS, CACHE_EXPS): its keys at slice_keys[0, len), its exps after them
// (slice_exps; no pointers: registers are short).
struct Row {
    const float* x;
    u32 n;
    float temp;
    u32 lo, len;
    u32 cached;
};

extern __shared__ u32 slice_keys[];
__device__ __forceinline__ float* slice_exps(const Row& r) { return reinterpret_cast<float*>(slice_keys + r.len); }

__device__ __forceinline__ float z_of(const Row& r, float x) { return canon(__fdiv_rn(x, r.temp)); }
// The z of a key (key_of is a bijection; z has no NaN and no -0).
__device__ __forceinline__ float z_of_key(u32 key) { return __uint_as_float((key >> 31) ? (key & 0x7fffffffu) : ~key); }

// body(j, x[j]) for this thread's elements of the row, with loads in flight: a pass over a row is
// bound by the SM's load rate, not by one L2 round trip per element. A row that starts on a
// 16-byte boundary is read in 16-byte vectors (vector v holds elements 4v..4v+3; this thread's
// are v = threadIdx.x, + THREADS, ...), ROW_AHEAD of them in flight, and its last n % 4
// elements one by one; another row element by element (j = threadIdx.x, + THREADS, ...),
// 4 * ROW_AHEAD in flight. Every pass below is order-independent across threads and within
// one (exact sums and counts, ties broken by index).
#define ROW_AHEAD 8
template <class Body> __device__ __forceinline__ void for_row(const float* x, u32 n, Body body) {
    if ((reinterpret_cast<u64>(x) & 15) != 0) {
        constexpr int AHEAD = 4 * ROW_AHEAD;
        u32 j = threadIdx.x;
        for (; j + (AHEAD - 1) * THREADS < n; j += AHEAD * THREADS) {
            float v[AHEAD];
#pragma unroll
            for (int u = 0; u < AHEAD; ++u) v[u] = __ldg(x + j + u * THREADS);
#pragma unroll
            for (int u = 0; u < AHEAD; ++u) body(j + u * THREADS, v[u]);
        }
        for (; j < n; j += THREADS) body(j, __ldg(x + j));
        return;
    }
    const float4* x4 = reinterpret_cast<const float4*>(x);
    const u32 n4 = n / 4;
    u32 j = threadIdx.x;
    for (; j + (ROW_AHEAD - 1) * THREADS < n4; j += ROW_AHEAD * THREADS) {
        float4 v[ROW_AHEAD];
#pragma unroll
        for (int u = 0; u < ROW_AHEAD; ++u) v[u] = __ldg(x4 + j + u * THREADS);
#pragma unroll
        for (int u = 0; u < ROW_AHEAD; ++u) {
            const u32 e = 4 * (j + u * THREADS);
            body(e, v[u].x);
            body(e + 1, v[u].y);
            body(e + 2, v[u].z);
            body(e + 3, v[u].w);
        }
    }
    for (; j < n4; j += THREADS) {
        const float4 v = __ldg(x4 + j);
        body(4 * j, v.x);
        body(4 * j + 1, v.y);
        body(4 * j + 2, v.z);
        body(4 * j + 3, v.w);
    }
    for (u32 e = 4 * n4 + threadIdx.x; e < n; e += THREADS) body(e, __ldg(x + e));
}

// body(j, x[j]) over this thread's elements of the CTA's slice (j the index in the row).
template <class Body> __device__ __forceinline__ void for_slice(const Row& r, Body body) {
    for_row(r.x + r.lo, r.len, [&](u32 j, float v) { body(r.lo + j, v); });
}

// body(j, key of z_j) over this thread's elements of the CTA's slice: from shared memory when
// the slice's keys are kept there, else from the logits.
template <class Body> __device__ __forceinline__ void for_keys(const Row& r, Body body) {
    if (r.cached & CACHE_KEYS) {
#pragma unroll 4
        for (u32 j = threadIdx.x; j < r.len; j += THREADS) body(r.lo + j, slice_keys[j]);
    } else {
        for_slice(r, [&](u32 j, float x) { body(j, key_of(z_of(r, x))); });
    }
}

// Top-p's list of kept (key, exp) pairs of a CTA (top_p_threshold), kept_n of them; or top-k's
// list of the keys still in play (kary_select), in the same room.
#define LIST_PAIRS 4096
#define LIST_KEYS (2 * LIST_PAIRS)
__shared__ float2 kept_list[LIST_PAIRS];
__shared__ u32 kept_n;
#define kept_keys reinterpret_cast<u32*>(kept_list)

// body(key, w) over this thread's elements of the CTA's slice, w = weight(z - m): the list's
// pairs (LIST), or the exps from shared memory when kept there (CACHE_EXPS: top_p_threshold
// wrote them), else computed.
template <class Body> __device__ __forceinline__ void for_weights(const Row& r, float m, bool list, Body body) {
    if (list) {
        for (u32 j = threadIdx.x; j < kept_n; j += THREADS) {
            const float2 p = kept_list[j];
            body(__float_as_uint(p.x), (u64)fmul(p.y, 1099511627776.f));
        }
    } else if (r.cached & CACHE_EXPS) {
        const float* exps = slice_exps(r);
#pragma unroll 4
        for (u32 j = threadIdx.x; j < r.len; j += THREADS) body(slice_keys[j], (u64)fmul(exps[j], 1099511627776.f));
    } else {
        for_keys(r, [&](u32, u32 key) { body(key, weight(fsub(z_of_key(key), m))); });
    }
}

// The largest key K for which f(K), the count (WEIGHTED false) or the weight exp(z - m) of the
// values with key >= max(K, floor), meets `ok` (true for f of every key up to some point, and
// for f(0)). A search of Sel::BITS bits a pass, most significant first: with the bits found so
// far in t (ok(f(t)) holds), the candidates are c_j = t + j * 2^shift, and a value with
// key >= t counts toward c_1 .. c_d, d = (key - t) >> shift (at most the last candidate);
// each thread keeps its sums in registers (no shared atomics, whose bins a row's values crowd
// into), block and cluster reductions join them, and t moves to the largest c_j whose sum
// meets `ok`. The same key as a bisection, in 8 passes (counts, 4 bits) or 11 (weights, 3 bits:
// seven u64 sums a thread) instead of 32. Counts: once at most LIST_KEYS of the row's values
// are at or above t, each CTA lists their keys and the later passes count the list. Weights:
// `list` says top_p_threshold listed the kept (key, exp) pairs, which the passes walk.
template <bool WEIGHTED> struct Sel {
    enum { BITS = WEIGHTED ? 3 : 4, CANDS = (1 << BITS) - 1 };
};
#define SEL_MAX_CANDS 15

// One pass's sums per candidate, acc[j] for the values with d >= j + 1, joined over the warp,
// the block (warp 0) and the cluster into tot[0..CANDS).
template <bool WEIGHTED, typename Acc>
__device__ __forceinline__ void select_sums(Acc (&acc)[WEIGHTED ? 8 : 16], u64* sh, u64* tot, Xchg& x) {
    constexpr int CANDS = Sel<WEIGHTED>::CANDS;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if constexpr (WEIGHTED) {
#pragma unroll
        for (int j = 0; j < CANDS; ++j) {
            u64 v = acc[j];
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
            if (lane == 0) sh[j * WARPS + warp] = v;
        }
    } else {
        const u32 part = warp_sum16(acc);
        if (lane % 2 == 0 && lane / 2 < CANDS) sh[(lane / 2) * WARPS + warp] = part;
    }
    __syncthreads();
    u64 mine = 0;
    if (warp == 0) {
        // (a block's counts are below 2^24: u32)
        if constexpr (WEIGHTED) {
            u64 v[8];
#pragma unroll
            for (int j = 0; j < 8; ++j) v[j] = j < CANDS ? sh[j * WARPS + lane] : 0ull;
            mine = __shfl_sync(FULL_MASK, warp_sum8(v), 4 * (lane % 8));  // lane j: candidate j's sum
        } else {
            u32 v[16];
#pragma unroll
            for (int j = 0; j < 16; ++j) v[j] = j < CANDS ? (u32)sh[j * WARPS + lane] : 0u;
            mine = __shfl_sync(FULL_MASK, warp_sum16(v), 2 * (lane % 16));
        }
    }
    cluster_add(mine, CANDS, tot, x);
}

template <bool WEIGHTED, class Ok>
__device__ u32 kary_select(const Row& r, float m, u32 floor, Ok ok, u64* sh, Xchg& x, bool list = false) {
    constexpr int BITS = Sel<WEIGHTED>::BITS, CANDS = Sel<WEIGHTED>::CANDS;
    __shared__ u64 tot[SEL_MAX_CANDS];
    u32 t = 0;
    u64 n_ge = r.n;  // counts: the row's values with key >= t (floor is 0 there)
    for (int hi = 32; hi > 0; hi -= BITS) {
        const int shift = hi > BITS ? hi - BITS : 0;
        const u32 last = (1u << (hi - shift)) - 1;  // the largest candidate index this pass
        if constexpr (WEIGHTED) {
            u64 acc[8];  // acc[j]: the weight of the values with d >= j + 1 (acc[7]: 0)
#pragma unroll
            for (int j = 0; j < 8; ++j) acc[j] = 0;
            for_weights(r, m, list, [&](u32 key, u64 w) {
                if (key >= t && key >= floor) {
                    const u32 d = min((key - t) >> shift, last);
#pragma unroll
                    for (int j = 0; j < CANDS; ++j) acc[j] += (u32)(j + 1) <= d ? w : 0ull;
                }
            });
            select_sums<true>(acc, sh, tot, x);
        } else {
            // Counts by d in 16-bit fields, four a word (a thread counts fewer than 2^16
            // values: rows are shorter than 2^24, blocks 2^10 threads).
            u64 bins[4] = {0, 0, 0, 0};
            const auto count = [&](u32 key) {
                if (key >= t && key >= floor) {
                    const u32 d = min((key - t) >> shift, last);
                    const u64 one = 1ull << (16 * (d & 3));
#pragma unroll
                    for (int q = 0; q < 4; ++q) bins[q] += (d >> 2) == (u32)q ? one : 0ull;
                }
            };
            if (list) {
                for (u32 j = threadIdx.x; j < kept_n; j += THREADS) count(kept_keys[j]);
            } else {
                for_keys(r, [&](u32, u32 key) { count(key); });
            }
            u32 acc[16];  // acc[j]: the count of the values with d >= j + 1 (acc[15]: 0)
            u32 run = 0;
            acc[15] = 0;
#pragma unroll
            for (int j = CANDS - 1; j >= 0; --j) {
                const int d = j + 1;
                run += (u32)(bins[d >> 2] >> (16 * (d & 3))) & 0xffffu;
                acc[j] = run;
            }
            select_sums<false>(acc, sh, tot, x);
        }
        u32 pick = 0;
        for (u32 j = 1; j <= last; ++j)
            if (ok(tot[j - 1])) pick = j;
        t += pick << shift;
        if constexpr (!WEIGHTED) n_ge = pick ? tot[pick - 1] : n_ge;
        __syncthreads();  // sh and tot are free for the next pass
        if constexpr (!WEIGHTED) {
            // Few values left at or above t (the whole cluster's, so no CTA's overflow): the
            // later passes count the list of their keys instead of the slice.
            if (!list && shift > 0 && n_ge <= LIST_KEYS) {
                if (threadIdx.x == 0) kept_n = 0;
                __syncthreads();
                for_keys(r, [&](u32, u32 key) {
                    if (key >= t) kept_keys[atomicAdd(&kept_n, 1u)] = key;
                });
                __syncthreads();
                list = true;
            }
        }
    }
    return t;
}

// The key of the k-th largest z (1 < k < n): the largest K with at least k keys >= K.
__device__ u32 kth_largest(const Row& r, u64 k, u64* sh, Xchg& x) {
    return kary_select<false>(r, 0.f, 0u, [&](u64 c) { return c >= k; }, sh, x);
}

// The top-p threshold over the values with key >= thr: the largest key t such that the weights
// of the kept values with key >= t sum to at least top_p times the kept total. 0xffffffff when
// top_p <= 0 (the caller caps it at the key of m). Where a threshold is set (top-k, min-p) the
// kept values are usually few: each CTA then lists its kept (key, exp) pairs (kept_list; in any
// order: the sums are exact), and the selection's passes walk that list instead of the whole
// slice. Otherwise (or when a CTA's kept values overflow the list) the passes read the slice's
// exps from shared memory where they fit (CACHE_EXPS), else compute them.
__device__ u32 top_p_threshold(const Row& r, float m, u32 thr, float top_p, u64* sh, Xchg& x) {
    __shared__ u64 total[1];
    const bool listed = thr > 0;
    u64 s = 0;
    if (!listed) {
        float* exps = (r.cached & CACHE_EXPS) ? slice_exps(r) : nullptr;
        for_keys(r, [&](u32 j, u32 key) {
            const float e = key >= thr ? exp_neg(fsub(z_of_key(key), m)) : 0.f;
            if (exps) exps[j - r.lo] = e;
            s += (u64)fmul(e, 1099511627776.f);
        });
    } else {
        if (threadIdx.x == 0) kept_n = 0;
        __syncthreads();
        const auto add = [&](u32 key) {
            if (key >= thr) {
                const float e = exp_neg(fsub(z_of_key(key), m));
                const u32 at = atomicAdd(&kept_n, 1u);
                if (at < LIST_PAIRS) kept_list[at] = make_float2(__uint_as_float(key), e);
                s += (u64)fmul(e, 1099511627776.f);
            }
        };
        // (plain loops, not for_keys: its unrolled logits pass with this body spills registers)
        if (r.cached & CACHE_KEYS) {
            for (u32 j = threadIdx.x; j < r.len; j += THREADS) add(slice_keys[j]);
        } else {
            const float* xs = r.x + r.lo;
            for (u32 j = threadIdx.x; j < r.len; j += THREADS) add(key_of(z_of(r, __ldg(xs + j))));
        }
    }
    s = block_sum(s, sh);  // (its barriers publish the exps, the list and its length too)
    const bool list = listed && kept_n <= LIST_PAIRS;
    if (listed && !list && (r.cached & CACHE_EXPS)) {
        float* exps = slice_exps(r);
        for (u32 j = threadIdx.x; j < r.len; j += THREADS) {
            const u32 key = slice_keys[j];
            exps[j] = key >= thr ? exp_neg(fsub(z_of_key(key), m)) : 0.f;
        }
        __syncthreads();
    }
    cluster_add(s, 1, total, x);
    const double target = __dmul_rn((double)top_p, __ull2double_rn(total[0]));
    const auto ok = [&](u64 w) { return __ull2double_rn(w) >= target; };
    return kary_select<true>(r, m, thr, ok, sh, x, list);
}

// The greedy pick of a row: the first index of its largest value (NaN as -inf).
__device__ u32 greedy_row(const Row& r, Best* bsh, Xchg& x) {
    Best best{NEG_INF, NONE};
    for_slice(r, [&](u32 j, float v) {
        v = isnan(v) ? NEG_INF : v;
        if (better(v, j, best)) best = Best{v, j};
    });
    best = cluster_best(block_best(best, bsh), bsh, x);
    return best.i == NONE ? 0 : best.i;
}

// r.cached: what shared memory may keep of the slice.
__device__ u32 sample_row(const Row& r, i64 top_k, float top_p, float min_p, u64 seed, Best* bsh, u64* ssh, Xchg& x) {
    Best b{NEG_INF, NONE};
    for_slice(r, [&](u32 j, float v) {
        const float z = z_of(r, v);
        if (r.cached & CACHE_KEYS) slice_keys[j - r.lo] = key_of(z);
        if (better(z, j, b)) b = Best{z, j};
    });
    b = cluster_best(block_best(b, bsh), bsh, x);  // (its barriers publish the keys too)
    // A temperature so small that logits / temperature overflow (to +inf, or all to -inf), +inf
    // logits, or nothing above -inf: the greedy pick of the logits themselves, the limit as the
    // temperature goes to 0 (sample.rs; token 0 when nothing beats -inf). (b.v is the
    // cluster's: every thread takes the same branch.)
    if (!isfinite(b.v)) return greedy_row(r, bsh, x);
    const float m = b.v;
    const u32 first = b.i, top = key_of(m);
    u32 thr = 0;
    if (top_k > 1 && top_k < (i64)r.n) thr = kth_largest(r, (u64)top_k, ssh, x);
    if (min_p > 0.f) thr = max(thr, key_of(canon(fadd(m, ln_f32(min_p)))));
    thr = min(thr, top);
    if (top_p < 1.f) thr = min(max(thr, top_p_threshold(r, m, thr, top_p, ssh, x)), top);
    // The largest value's draw bounds the winner's from below: values more than GUMBEL_BOUND
    // under it cannot win, and their noise is skipped (math.rs: the same token, fewer draws).
    const float floor_s = fadd(m, gumbel(seed, first));
    b = Best{NEG_INF, NONE};
    for_keys(r, [&](u32 j, u32 key) {
        const float z = z_of_key(key);
        if (key >= thr && fadd(z, GUMBEL_BOUND) >= floor_s) {
            const float s = fadd(z, gumbel(seed, j));
            if (better(s, j, b)) b = Best{s, j};
        }
    });
    b = cluster_best(block_best(b, bsh), bsh, x);
    return b.i == NONE ? first : b.i;
}

// One cluster per row (rows cluster, + clusters, ...); dynamic shared memory: slice * 4 bytes
// for CACHE_KEYS, twice that with CACHE_EXPS. Two entries: sample_tokens for slices whose keys
// stay in shared memory (CACHE_KEYS), sample_tokens_streamed for slices read from the logits
// at every pass; each compiled without the other's paths (registers are short).
template <bool CACHED> __device__ __forceinline__ void sample_rows(const SampleArgs& a) {
    __shared__ Best bsh[WARPS + 1];
    __shared__ u64 ssh[SEL_MAX_CANDS * WARPS + 1];  // block_sum's WARPS + 1, kary_select's
    __shared__ u64 xb[2][XSLOTS];
    Xchg x{xb, 0u};
    // Launched under PDL after the product that writes the logits (launch/sampling.rs): nothing
    // is read before the wait.
    pdl_wait();
    pdl_launch_dependents();
    const u32 size = cluster_size(), rank = cluster_rank();
    const i64 clusters = gridDim.x / size;
    const u32 lo = (u32)min((i64)rank * a.slice, a.vocab), hi = (u32)min(lo + a.slice, a.vocab);
    for (i64 b = blockIdx.x / size; b < a.batch; b += clusters) {
        Row r{(const float*)a.logits + b * a.vocab, (u32)a.vocab, ((const float*)a.temperature)[b], lo, hi - lo,
              CACHED ? (u32)a.cached | CACHE_KEYS : 0u};
        const i64 top_k = ((const i64*)a.top_k)[b];
        u32 token;
        if (!(r.temp > 0.f) || top_k == 1) {
            token = greedy_row(r, bsh, x);
        } else {
            const float top_p = ((const float*)a.top_p)[b], min_p = ((const float*)a.min_p)[b];
            token = sample_row(r, top_k, top_p, min_p, ((const u64*)a.seed)[b], bsh, ssh, x);
        }
        if (rank == 0 && threadIdx.x == 0) ((i64*)a.out)[b] = token;
        __syncthreads();  // the keys of this row are read before the next row's are written
    }
    cluster_sync_aligned();  // no CTA leaves while another may still read its exchange buffers
}

extern "C" __global__ void __launch_bounds__(THREADS) sample_tokens(SampleArgs a) { sample_rows<true>(a); }
extern "C" __global__ void __launch_bounds__(THREADS) sample_tokens_streamed(SampleArgs a) { sample_rows<false>(a); }
