#line 1 "norm.cu"
// norm.cu: softmax and logsoftmax along one axis, layer_norm and rms_norm over the last dim. Inputs and
// outputs are contiguous; the input is seen as [outer, n, inner] around the axis (layer_norm:
// inner == 1). Everything computes in F (f32, or f64 for float64 and integer inputs) and stores
// with the cast rules, as crates/runtime/src/cpu/reduction/norm.rs does:
//   softmax    y = exp(x - M) / S,      logsoftmax y = (x - M) - log(S),
//   with M the row max (NaN propagating) and S = sum exp(x - M);
//   layer_norm y = (x - mean) * (1 / sqrt(var + eps)) * gamma + beta, var the mean squared
//   deviation from the mean.
//   rms_norm   y = x * (1 / sqrt(mean(x^2) + eps)) * (gamma + offset), the product in F and
//   rounded once (mbc), or x * inv rounded to T first and multiplied by the rounded weight.
//
// Rows (inner == 1) go to a group of G threads: a warp for rows of up to 1024 elements (8 rows
// per 256-thread block), the whole 1024-thread block otherwise.
//   *_cached: the row is 16-byte aligned, a whole number of 16-byte vectors, and fits in the
//     group's registers (NV vectors per thread): it is read once, the statistics are exact
//     two-pass ones over the registers, and the result is written from them.
//   *_rows: any row. One pass gathers the statistics per thread (softmax: the online running
//     max and rescaled sum; layer_norm: Welford's count, mean and M2), merged across the group
//     (Chan's formula for Welford); a second pass reads the row again and writes. The online
//     softmax skips -inf elements (they add exactly 0 once any finite max exists), which keeps
//     every inf/NaN case identical to the CPU's two-pass formula.
//   softmax_cols: inner > 1. A block takes up to 32 neighbouring lines (threads over inner:
//     coalesced) with 256 / lines threads along the axis for each: the online pass, a merge of
//     the threads' states in shared memory, then the write pass.
//
// Kernels exist for float16, bfloat16, float32 and float64 only. The other dtypes compute in
// one of those (float8: f32; integers and bool: f64, as the CPU does), so the host casts them
// to it, runs these kernels and casts the result back, which rounds exactly as converting F to
// the dtype in the kernel would (and keeps this family quick to compile).

struct NormArgs {
    u64 x, out, gamma, beta;  // gamma and beta: layer_norm only, [n]
    i64 outer, n, inner;
    double eps;
    i32 log;   // logsoftmax
    i32 tile;  // softmax_cols: lines per block
    double offset;  // rms_norm: added to gamma
    i32 mbc;        // rms_norm: multiply before the cast to T
    i32 pad;
};

__device__ __forceinline__ float exp_(float v) { return expf(v); }
__device__ __forceinline__ double exp_(double v) { return exp(v); }
__device__ __forceinline__ float log_(float v) { return logf(v); }
__device__ __forceinline__ double log_(double v) { return log(v); }
__device__ __forceinline__ float rsqrt_(float v) { return 1.0f / sqrtf(v); }
__device__ __forceinline__ double rsqrt_(double v) { return 1.0 / sqrt(v); }
template <typename F> __device__ __forceinline__ F neg_inf() {
    F lo, hi;
    extremes(lo, hi);
    return lo;
}
// max with NaN propagating.
template <typename F> __device__ __forceinline__ F max_nan(F a, F x) { return (x > a || isnan(x)) ? x : a; }
template <typename F> __device__ __forceinline__ F shfl0(F v) { return __shfl_sync(FULL_MASK, v, 0); }

template <typename F> struct Max {
    F v;
    __device__ __forceinline__ void merge(const Max& o) { v = isnan(v) ? v : max_nan(v, o.v); }
    __device__ __forceinline__ Max shfl(int m) const { return Max{shfl_xor(v, m)}; }
    __device__ __forceinline__ Max bcast() const { return Max{shfl0(v)}; }
};
template <typename F> struct Sum {
    F v;
    __device__ __forceinline__ void merge(const Sum& o) { v += o.v; }
    __device__ __forceinline__ Sum shfl(int m) const { return Sum{shfl_xor(v, m)}; }
    __device__ __forceinline__ Sum bcast() const { return Sum{shfl0(v)}; }
};
// exp(m_old - m_new) without the NaN of inf - inf when the max did not move.
template <typename F> __device__ __forceinline__ F rescale(F m_old, F m_new) {
    return m_old == m_new ? (F)1 : exp_(m_old - m_new);
}
template <typename F> struct Online {
    F m, s;  // running max, sum of exp(x - m) over the elements other than -inf
    __device__ __forceinline__ void init() {
        m = neg_inf<F>();
        s = 0;
    }
    __device__ __forceinline__ void add(F x) {
        if (x == neg_inf<F>()) return;
        F m2 = max_nan(m, x);
        s = s * rescale(m, m2) + exp_(x - m2);
        m = m2;
    }
    __device__ __forceinline__ void merge(const Online& o) {
        F m2 = isnan(m) ? m : max_nan(m, o.m);
        s = s * rescale(m, m2) + o.s * rescale(o.m, m2);
        m = m2;
    }
    __device__ __forceinline__ Online shfl(int k) const { return Online{shfl_xor(m, k), shfl_xor(s, k)}; }
    __device__ __forceinline__ Online bcast() const { return Online{shfl0(m), shfl0(s)}; }
};
template <typename F> struct Welford {
    F n, mean, m2;
    __device__ __forceinline__ void init() { n = mean = m2 = 0; }
    __device__ __forceinline__ void add(F x) {
        n += 1;
        F d = x - mean;
        mean += d / n;
        m2 += d * (x - mean);
    }
    __device__ __forceinline__ void merge(const Welford& o) {
        if (o.n == 0) return;
        if (n == 0) {
            *this = o;
            return;
        }
        F t = n + o.n, d = o.mean - mean;
        mean += d * (o.n / t);
        m2 += o.m2 + d * d * (n * o.n / t);
        n = t;
    }
    __device__ __forceinline__ Welford shfl(int k) const {
        return Welford{shfl_xor(n, k), shfl_xor(mean, k), shfl_xor(m2, k)};
    }
    __device__ __forceinline__ Welford bcast() const { return Welford{shfl0(n), shfl0(mean), shfl0(m2)}; }
};

// The merge of `acc` over the G threads of a group, returned to all of them (the same value in
// every thread: lane 0's after the butterfly, then one fixed-order pass over the warps).
template <int G, typename Acc> __device__ __forceinline__ Acc group_all(Acc acc, Acc* sm) {
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) acc.merge(acc.shfl(m));
    acc = acc.bcast();
    if (G > 32) {
        if (threadIdx.x % 32 == 0) sm[threadIdx.x / 32] = acc;
        __syncthreads();
        acc = sm[0];
        for (int w = 1; w < G / 32; ++w) acc.merge(sm[w]);
        __syncthreads();  // sm is reused by the next reduction
    }
    return acc;
}

// out[j] = f(in[j], j) for the elements of a row that `lane` owns, 16-byte vectors where the two
// rows share their alignment (see walk_row).
template <typename T, typename Fn>
__device__ __forceinline__ void map_row(const T* in, T* out, i64 n, int lane, int g, Fn f) {
    constexpr int V = 16 / sizeof(T);
    if ((((u64)in ^ (u64)out) & 15u) != 0) {
        for (i64 j = lane; j < n; j += g) out[j] = f(in[j], j);
        return;
    }
    i64 head = (i64)((16u - (u32)((u64)in & 15u)) & 15u) / (i64)sizeof(T);
    if (head > n) head = n;
    if (lane < head) out[lane] = f(in[lane], (i64)lane);
    const i64 nv = (n - head) / V;
    const uint4* vin = reinterpret_cast<const uint4*>(in + head);
    uint4* vout = reinterpret_cast<uint4*>(out + head);
    for (i64 c = lane; c < nv; c += g) {
        union {
            uint4 u;
            T t[V];
        } pi, po;
        pi.u = __ldg(vin + c);
#pragma unroll
        for (int k = 0; k < V; ++k) po.t[k] = f(pi.t[k], head + c * V + k);
        vout[c] = po.u;
    }
    for (i64 j = head + nv * V + lane; j < n; j += g) out[j] = f(in[j], j);
}

template <typename T> union Pack {
    uint4 u;
    T t[16 / sizeof(T)];
};

// ---- softmax ------------------------------------------------------------------------------

template <typename T, int G, int NV> __device__ __forceinline__ void softmax_cached(const NormArgs& a) {
    typedef typename Work<T>::F F;
    constexpr int V = 16 / sizeof(T);
    __shared__ Max<F> smax[32];
    __shared__ Sum<F> ssum[32];
    const int groups = blockDim.x / G, lane = threadIdx.x % G;
    const i64 nv = a.n / V;
    for (i64 row = (i64)blockIdx.x * groups + threadIdx.x / G; row < a.outer; row += (i64)gridDim.x * groups) {
        const uint4* in = reinterpret_cast<const uint4*>((const T*)a.x + row * a.n);
        uint4* out = reinterpret_cast<uint4*>((T*)a.out + row * a.n);
        Pack<T> r[NV];
        Max<F> m{neg_inf<F>()};
#pragma unroll
        for (int k = 0; k < NV; ++k) {
            if (lane + k * G < nv) {
                r[k].u = __ldg(in + lane + k * G);
#pragma unroll
                for (int e = 0; e < V; ++e) m.v = max_nan(m.v, convert<F>(r[k].t[e]));
            }
        }
        const F mx = group_all<G>(m, smax).v;
        Sum<F> s{0};
#pragma unroll
        for (int k = 0; k < NV; ++k) {
            if (lane + k * G < nv) {
#pragma unroll
                for (int e = 0; e < V; ++e) s.v += exp_(convert<F>(r[k].t[e]) - mx);
            }
        }
        const F sum = group_all<G>(s, ssum).v;
        const F ls = log_(sum);
#pragma unroll
        for (int k = 0; k < NV; ++k) {
            if (lane + k * G < nv) {
#pragma unroll
                for (int e = 0; e < V; ++e) {
                    F z = convert<F>(r[k].t[e]) - mx;
                    r[k].t[e] = convert<T>(a.log ? z - ls : exp_(z) / sum);
                }
                out[lane + k * G] = r[k].u;
            }
        }
    }
}

template <typename T, int G> __device__ __forceinline__ void softmax_rows(const NormArgs& a) {
    typedef typename Work<T>::F F;
    __shared__ Online<F> sm[32];
    const int groups = blockDim.x / G, lane = threadIdx.x % G;
    for (i64 row = (i64)blockIdx.x * groups + threadIdx.x / G; row < a.outer; row += (i64)gridDim.x * groups) {
        const T* in = (const T*)a.x + row * a.n;
        Online<F> acc;
        acc.init();
        walk_row(in, a.n, lane, G, [&](T v, i64) { acc.add(convert<F>(v)); });
        acc = group_all<G>(acc, sm);
        const F mx = acc.m, sum = acc.s, ls = log_(acc.s);
        const bool lg = a.log != 0;
        map_row(in, (T*)a.out + row * a.n, a.n, lane, G, [&](T v, i64) {
            F z = convert<F>(v) - mx;
            return convert<T>(lg ? z - ls : exp_(z) / sum);
        });
    }
}

// A block covers `tx` neighbouring lines (tx = a.tile, a power of two <= 32); its 256 / tx
// threads per line stride along the axis, their online states merge in a fixed shared-memory
// tree, and the same threads then write their elements.
template <typename T> __device__ __forceinline__ void softmax_cols(const NormArgs& a) {
    typedef typename Work<T>::F F;
    __shared__ Online<F> part[256];
    const int tw = a.tile, tx = threadIdx.x % tw, ty = threadIdx.x / tw, ny = blockDim.x / tw;
    const i64 tiles = (a.inner + tw - 1) / tw;
    for (i64 t = blockIdx.x; t < a.outer * tiles; t += gridDim.x) {  // uniform per block
        const i64 o = t / tiles, i = (t % tiles) * tw + tx;
        const bool live = i < a.inner;
        const T* in = (const T*)a.x + o * a.n * a.inner + i;
        T* out = (T*)a.out + o * a.n * a.inner + i;
        Online<F> acc;
        acc.init();
        if (live)
            for (i64 j = ty; j < a.n; j += ny) acc.add(convert<F>(in[j * a.inner]));
        part[threadIdx.x] = acc;
        __syncthreads();
        for (int s = ny / 2; s > 0; s >>= 1) {
            if (ty < s) {
                acc.merge(part[threadIdx.x + s * tw]);
                part[threadIdx.x] = acc;
            }
            __syncthreads();
        }
        const Online<F> line = part[tx];
        __syncthreads();  // part is reused by the next task
        const F mx = line.m, sum = line.s, ls = log_(line.s);
        if (live)
            for (i64 j = ty; j < a.n; j += ny) {
                const F z = convert<F>(in[j * a.inner]) - mx;
                out[j * a.inner] = convert<T>(a.log ? z - ls : exp_(z) / sum);
            }
    }
}

// ---- layer_norm ---------------------------------------------------------------------------

template <typename T, int G, int NV> __device__ __forceinline__ void layer_norm_cached(const NormArgs& a) {
    typedef typename Work<T>::F F;
    constexpr int V = 16 / sizeof(T);
    __shared__ Sum<F> sm[32];
    const int groups = blockDim.x / G, lane = threadIdx.x % G;
    const i64 nv = a.n / V;
    const F count = (F)a.n, eps = (F)a.eps;
    const uint4* gamma = reinterpret_cast<const uint4*>(a.gamma);
    const uint4* beta = reinterpret_cast<const uint4*>(a.beta);
    for (i64 row = (i64)blockIdx.x * groups + threadIdx.x / G; row < a.outer; row += (i64)gridDim.x * groups) {
        const uint4* in = reinterpret_cast<const uint4*>((const T*)a.x + row * a.n);
        uint4* out = reinterpret_cast<uint4*>((T*)a.out + row * a.n);
        Pack<T> r[NV];
        Sum<F> s{0};
#pragma unroll
        for (int k = 0; k < NV; ++k) {
            if (lane + k * G < nv) {
                r[k].u = __ldg(in + lane + k * G);
#pragma unroll
                for (int e = 0; e < V; ++e) s.v += convert<F>(r[k].t[e]);
            }
        }
        const F mean = group_all<G>(s, sm).v / count;
        Sum<F> q{0};
#pragma unroll
        for (int k = 0; k < NV; ++k) {
            if (lane + k * G < nv) {
#pragma unroll
                for (int e = 0; e < V; ++e) {
                    F d = convert<F>(r[k].t[e]) - mean;
                    q.v += d * d;
                }
            }
        }
        const F inv = rsqrt_(group_all<G>(q, sm).v / count + eps);
#pragma unroll
        for (int k = 0; k < NV; ++k) {
            const i64 c = lane + k * G;
            if (c < nv) {
                Pack<T> gm, bt;
                gm.u = __ldg(gamma + c);
                bt.u = __ldg(beta + c);
#pragma unroll
                for (int e = 0; e < V; ++e) {
                    F y = (convert<F>(r[k].t[e]) - mean) * inv * convert<F>(gm.t[e]) + convert<F>(bt.t[e]);
                    r[k].t[e] = convert<T>(y);
                }
                out[c] = r[k].u;
            }
        }
    }
}

template <typename T, int G> __device__ __forceinline__ void layer_norm_rows(const NormArgs& a) {
    typedef typename Work<T>::F F;
    __shared__ Welford<F> sm[32];
    const int groups = blockDim.x / G, lane = threadIdx.x % G;
    const T* gamma = (const T*)a.gamma;
    const T* beta = (const T*)a.beta;
    const F count = (F)a.n, eps = (F)a.eps;
    for (i64 row = (i64)blockIdx.x * groups + threadIdx.x / G; row < a.outer; row += (i64)gridDim.x * groups) {
        const T* in = (const T*)a.x + row * a.n;
        Welford<F> acc;
        acc.init();
        walk_row(in, a.n, lane, G, [&](T v, i64) { acc.add(convert<F>(v)); });
        acc = group_all<G>(acc, sm);
        const F mean = acc.mean, inv = rsqrt_(acc.m2 / count + eps);
        map_row(in, (T*)a.out + row * a.n, a.n, lane, G, [&](T v, i64 j) {
            return convert<T>((convert<F>(v) - mean) * inv * convert<F>(gamma[j]) + convert<F>(beta[j]));
        });
    }
}

// ---- rms_norm -----------------------------------------------------------------------------

template <typename T, int G> __device__ __forceinline__ void rms_norm_rows(const NormArgs& a) {
    typedef typename Work<T>::F F;
    __shared__ Sum<F> sm[32];
    const int groups = blockDim.x / G, lane = threadIdx.x % G;
    const T* gamma = (const T*)a.gamma;
    const F count = (F)a.n, eps = (F)a.eps, offset = (F)a.offset;
    // May launch under PDL (launch/pdl.rs): x is the previous kernel's, so wait first.
    pdl_wait();
    pdl_launch_dependents();
    for (i64 row = (i64)blockIdx.x * groups + threadIdx.x / G; row < a.outer; row += (i64)gridDim.x * groups) {
        const T* in = (const T*)a.x + row * a.n;
        Sum<F> acc{0};
        walk_row(in, a.n, lane, G, [&](T v, i64) {
            const F f = convert<F>(v);
            acc.v += f * f;
        });
        const F inv = rsqrt_(group_all<G>(acc, sm).v / count + eps);
        const bool mbc = a.mbc != 0;
        map_row(in, (T*)a.out + row * a.n, a.n, lane, G, [&](T v, i64 j) {
            const F g = convert<F>(gamma[j]) + offset;
            if (mbc) return convert<T>(convert<F>(v) * inv * g);
            return convert<T>(convert<F>(convert<T>(convert<F>(v) * inv)) * convert<F>(convert<T>(g)));
        });
    }
}

// The register-cached form: each lane holds its NV 16-byte vectors of the row, so the row is
// read from memory once (the sum of squares, then the normalised values from registers). Same
// arithmetic as rms_norm_rows, element for element.
template <typename T, int G, int NV> __device__ __forceinline__ void rms_norm_cached(const NormArgs& a) {
    typedef typename Work<T>::F F;
    constexpr int V = 16 / sizeof(T);
    __shared__ Sum<F> sm[32];
    const int groups = blockDim.x / G, lane = threadIdx.x % G;
    const i64 nv = a.n / V;
    const F count = (F)a.n, eps = (F)a.eps, offset = (F)a.offset;
    const bool mbc = a.mbc != 0;
    const uint4* gamma = reinterpret_cast<const uint4*>(a.gamma);
    // May launch under PDL (launch/pdl.rs): x is the previous kernel's, so wait first.
    pdl_wait();
    pdl_launch_dependents();
    for (i64 row = (i64)blockIdx.x * groups + threadIdx.x / G; row < a.outer; row += (i64)gridDim.x * groups) {
        const uint4* in = reinterpret_cast<const uint4*>((const T*)a.x + row * a.n);
        uint4* out = reinterpret_cast<uint4*>((T*)a.out + row * a.n);
        Pack<T> r[NV], gm[NV];
#pragma unroll
        for (int k = 0; k < NV; ++k) {
            if (lane + k * G < nv) {
                r[k].u = __ldg(in + lane + k * G);
                gm[k].u = __ldg(gamma + lane + k * G);
            }
        }
        Sum<F> acc{0};
#pragma unroll
        for (int k = 0; k < NV; ++k) {
            if (lane + k * G < nv) {
#pragma unroll
                for (int e = 0; e < V; ++e) {
                    const F f = convert<F>(r[k].t[e]);
                    acc.v += f * f;
                }
            }
        }
        const F inv = rsqrt_(group_all<G>(acc, sm).v / count + eps);
#pragma unroll
        for (int k = 0; k < NV; ++k) {
            const i64 c = lane + k * G;
            if (c < nv) {
#pragma unroll
                for (int e = 0; e < V; ++e) {
                    const F v = convert<F>(r[k].t[e]), g = convert<F>(gm[k].t[e]) + offset;
                    r[k].t[e] = mbc ? convert<T>(v * inv * g)
                                    : convert<T>(convert<F>(convert<T>(v * inv)) * convert<F>(convert<T>(g)));
                }
                out[c] = r[k].u;
            }
        }
    }
}

// ---- entry points -------------------------------------------------------------------------

#define NORM_GENERIC(NAME, T)                                                                             \
    extern "C" __global__ void __launch_bounds__(256, 1) softmax_rows_warp_##NAME(NormArgs a) {             \
        softmax_rows<T, 32>(a);                                                                           \
    }                                                                                                     \
    extern "C" __global__ void __launch_bounds__(1024, 1) softmax_rows_block_##NAME(NormArgs a) {           \
        softmax_rows<T, 1024>(a);                                                                         \
    }                                                                                                     \
    extern "C" __global__ void __launch_bounds__(256, 1) softmax_cols_##NAME(NormArgs a) { softmax_cols<T>(a); } \
    extern "C" __global__ void __launch_bounds__(256, 1) layer_norm_rows_warp_##NAME(NormArgs a) {          \
        layer_norm_rows<T, 32>(a);                                                                        \
    }                                                                                                     \
    extern "C" __global__ void __launch_bounds__(1024, 1) layer_norm_rows_block_##NAME(NormArgs a) {        \
        layer_norm_rows<T, 1024>(a);                                                                      \
    }                                                                                                     \
    extern "C" __global__ void __launch_bounds__(256, 1) rms_norm_rows_warp_##NAME(NormArgs a) {            \
        rms_norm_rows<T, 32>(a);                                                                          \
    }                                                                                                     \
    extern "C" __global__ void __launch_bounds__(1024, 1) rms_norm_rows_block_##NAME(NormArgs a) {          \
        rms_norm_rows<T, 1024>(a);                                                                        \
    }

// Register-cached variants: NV 16-byte vectors per thread, 8 for a warp per row (rows of up to
// 4 KiB), 4 for a 256-thread block (`mid`: rows of up to 16 KiB, several blocks an SM, so that
// a prefill's rows of 4,096 bf16 hide each other's memory latency) or a 1024-thread block (rows
// of up to 64 KiB).
#define NORM_CACHED(NAME, T)                                                                              \
    extern "C" __global__ void __launch_bounds__(256, 1) softmax_cached_warp_##NAME(NormArgs a) {           \
        softmax_cached<T, 32, 8>(a);                                                                      \
    }                                                                                                     \
    extern "C" __global__ void __launch_bounds__(1024, 1) softmax_cached_block_##NAME(NormArgs a) {         \
        softmax_cached<T, 1024, 4>(a);                                                                    \
    }                                                                                                     \
    extern "C" __global__ void __launch_bounds__(256, 1) layer_norm_cached_warp_##NAME(NormArgs a) {        \
        layer_norm_cached<T, 32, 8>(a);                                                                   \
    }                                                                                                     \
    extern "C" __global__ void __launch_bounds__(1024, 1) layer_norm_cached_block_##NAME(NormArgs a) {      \
        layer_norm_cached<T, 1024, 4>(a);                                                                 \
    }                                                                                                     \
    extern "C" __global__ void __launch_bounds__(256, 1) rms_norm_cached_warp_##NAME(NormArgs a) {          \
        rms_norm_cached<T, 32, 8>(a);                                                                     \
    }                                                                                                     \
    extern "C" __global__ void __launch_bounds__(1024, 1) rms_norm_cached_block_##NAME(NormArgs a) {        \
        rms_norm_cached<T, 1024, 4>(a);                                                                   \
    }                                                                                                     \
    extern "C" __global__ void __launch_bounds__(256) softmax_cached_mid_##NAME(NormArgs a) {               \
        softmax_cached<T, 256, 4>(a);                                                                     \
    }                                                                                                     \
    extern "C" __global__ void __launch_bounds__(256) layer_norm_cached_mid_##NAME(NormArgs a) {            \
        layer_norm_cached<T, 256, 4>(a);                                                                  \
    }                                                                                                     \
    extern "C" __global__ void __launch_bounds__(256) rms_norm_cached_mid_##NAME(NormArgs a) {              \
        rms_norm_cached<T, 256, 4>(a);                                                                    \
    }

NORM_GENERIC(f16, f16)
NORM_GENERIC(bf16, bf16)
NORM_GENERIC(f32, float)
NORM_GENERIC(f64, double)
NORM_CACHED(f16, f16)
NORM_CACHED(bf16, bf16)
NORM_CACHED(f32, float)
NORM_CACHED(f64, double)
