#line 1 "fft.cu"
// fft.cu: irfft, the inverse real FFT (crates/graph/src/ops/fft.rs defines it; the host kernel
// in crates/runtime/src/cpu/fft is the reference and takes the same steps).
//
// One block per row (an (outer, inner) pair around the axis; blocks stride over the rows). The
// row's n / 2 + 1 frequencies are read from global memory (strided by `inner`, real or
// interleaved complex, zeros past the input's m values) and turned into one complex sequence of
// length N, whose inverse DFT gives the samples:
//   * even n = 2N: z_k = (X_k + conj X_{N-k}) + i (X_k - conj X_{N-k}) e^(2 pi i k / n); the
//     inverse DFT of z holds x[2t] in its real and x[2t+1] in its imaginary parts;
//   * odd n = N: the whole Hermitian spectrum; the samples are the real parts.
// The DFT runs in a work area of two length-W complex buffers (ping-pong):
//   * N a product of 2, 3, 5 and 7: Stockham autosort passes of radix 4, 2, 3, 5, 7 (the radix
//     chosen from what is left to combine, as plan.rs chooses it), W = N;
//   * any other N: Bluestein's algorithm, y_j = c_j sum_k (z_k c_k) conj c_{j-k} with the chirp
//     c_k = e^(i pi k^2 / N), as a circular convolution of power-of-two length W = L >= 2N - 1:
//     a forward FFT, a product with the DFT of the conjugate chirp (`irfft_chirp` writes it
//     once per launch into `kernel`, divided by L), an inverse FFT.
// The work area is dynamic shared memory when it fits (the `smem` entries) and a slice of the
// global scratch per block otherwise (the `global` entries: same code, __syncthreads orders
// the block's global accesses as it does shared ones). Float16, bfloat16 and float32 compute
// in f32, float64 in f64; twiddles and chirps come from sincospi of exact integer ratios.

// Entries are declared __launch_bounds__(FFT_THREADS, 1): with a bare (512), ptxas holds the
// f64 entries to 64 registers and spills the radix-7 butterfly.
#define FFT_THREADS 512

template <typename S> struct Cx {
    S re, im;
};
template <typename S> __device__ __forceinline__ Cx<S> cx(S re, S im) { return Cx<S>{re, im}; }
template <typename S> __device__ __forceinline__ Cx<S> operator+(Cx<S> a, Cx<S> b) { return cx(a.re + b.re, a.im + b.im); }
template <typename S> __device__ __forceinline__ Cx<S> operator-(Cx<S> a, Cx<S> b) { return cx(a.re - b.re, a.im - b.im); }
template <typename S> __device__ __forceinline__ Cx<S> operator*(Cx<S> a, Cx<S> b) {
    return cx(a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re);
}
template <typename S> __device__ __forceinline__ Cx<S> conj(Cx<S> a) { return cx(a.re, -a.im); }
// a * i (sign 1) or a * -i (sign -1).
template <typename S> __device__ __forceinline__ Cx<S> rot(Cx<S> a, int sign) {
    return sign > 0 ? cx(-a.im, a.re) : cx(a.im, -a.re);
}

__device__ __forceinline__ void sin_cos_pi(float t, float* s, float* c) { sincospif(t, s, c); }
__device__ __forceinline__ void sin_cos_pi(double t, double* s, double* c) { sincospi(t, s, c); }

// e^(i pi num / den) for 0 <= num < 2 den.
template <typename S> __device__ __forceinline__ Cx<S> cis_pi(u64 num, u64 den) {
    S s, c;
    sin_cos_pi((S)num / (S)den, &s, &c);
    return cx(c, s);
}

// The chirp c_k = e^(i pi k^2 / N), k^2 reduced modulo 2N (k < N < 2^31: k^2 fits in 64 bits).
template <typename S> __device__ __forceinline__ Cx<S> chirp(u64 k, u64 n) { return cis_pi<S>(k * k % (2 * n), n); }

struct IrfftArgs {
    u64 x;       // input: [outer, m, inner] (times 2 when complex) of T
    u64 out;     // output: [outer, n, inner] of T
    u64 scratch; // global work areas, 2 * W complex of S per block (global entries only)
    u64 kernel;  // Bluestein: the DFT of the conjugate chirp over L points, divided by L
    i64 outer, m, inner, n;
    i64 used;    // min(m, n / 2 + 1): input values read along the axis
    i64 len;     // N, the complex transform's length
    i64 l;       // L, the Bluestein convolution's length (0: Stockham passes on N)
    double scale;
    i32 complex;
    i32 pad;
};

// ---- radix-R butterflies: the R-point DFT with e^(sign 2 pi i / R) ---------------------------

// cos and sin of 2 pi p / R for 0 < p <= R / 2 (R = 3, 5, 7).
template <int R> __device__ __forceinline__ double root_cos(int p);
template <int R> __device__ __forceinline__ double root_sin(int p);
template <> __device__ __forceinline__ double root_cos<3>(int) { return -0.5; }
template <> __device__ __forceinline__ double root_sin<3>(int) { return 0.86602540378443864676; }
template <> __device__ __forceinline__ double root_cos<5>(int p) { return p == 1 ? 0.30901699437494742410 : -0.80901699437494742410; }
template <> __device__ __forceinline__ double root_sin<5>(int p) { return p == 1 ? 0.95105651629515357212 : 0.58778525229247312917; }
template <> __device__ __forceinline__ double root_cos<7>(int p) {
    return p == 1 ? 0.62348980185873353053 : p == 2 ? -0.22252093395631440429 : -0.90096886790241912624;
}
template <> __device__ __forceinline__ double root_sin<7>(int p) {
    return p == 1 ? 0.78183148246802980871 : p == 2 ? 0.97492791218182360702 : 0.43388373911755812048;
}

template <typename S, int R> struct Butterfly {
    // Odd R: pairs v_t, v_{R-t} share the cosine and differ in the sine's sign.
    static __device__ __forceinline__ void go(Cx<S>* v, int sign) {
        const int H = (R - 1) / 2;
        Cx<S> a[H], b[H];
        Cx<S> v0 = v[0], sum = v[0];
#pragma unroll
        for (int t = 1; t <= H; ++t) {
            a[t - 1] = v[t] + v[R - t];
            b[t - 1] = v[t] - v[R - t];
            sum = sum + a[t - 1];
        }
#pragma unroll
        for (int q = 1; q <= H; ++q) {
            Cx<S> re = v0, im = cx((S)0, (S)0);
#pragma unroll
            for (int t = 1; t <= H; ++t) {
                const int p = (t * q) % R;
                const bool low = p <= H;
                const S c = (S)root_cos<R>(low ? p : R - p);
                const S s = low ? (S)root_sin<R>(p) : -(S)root_sin<R>(R - p);
                re = re + cx(a[t - 1].re * c, a[t - 1].im * c);
                im = im + cx(b[t - 1].re * s, b[t - 1].im * s);
            }
            const Cx<S> r = rot(im, sign);
            v[q] = re + r;
            v[R - q] = re - r;
        }
        v[0] = sum;
    }
};
template <typename S> struct Butterfly<S, 2> {
    static __device__ __forceinline__ void go(Cx<S>* v, int) {
        const Cx<S> a = v[0], b = v[1];
        v[0] = a + b;
        v[1] = a - b;
    }
};
template <typename S> struct Butterfly<S, 4> {
    static __device__ __forceinline__ void go(Cx<S>* v, int sign) {
        const Cx<S> t0 = v[0] + v[2], t1 = v[0] - v[2], t2 = v[1] + v[3], t3 = rot(v[1] - v[3], sign);
        v[0] = t0 + t2;
        v[1] = t1 + t3;
        v[2] = t0 - t2;
        v[3] = t1 - t3;
    }
};

// One Stockham pass over `len` points: radix-R DFTs of inputs len / R apart, `span` the product
// of the earlier radices; the twiddle of input q of butterfly j is e^(sign 2 pi i k q / (span R))
// with k = j mod span.
template <typename S, int R>
__device__ __forceinline__ void pass(const Cx<S>* src, Cx<S>* dst, u32 len, u32 span, int sign) {
    const u32 stride = len / R;
    for (u32 j = threadIdx.x; j < stride; j += blockDim.x) {
        const u32 k = j % span;
        Cx<S> w = cis_pi<S>(2ull * k, (u64)span * R);
        if (sign < 0) w = conj(w);
        Cx<S> v[R];
        v[0] = src[j];
        Cx<S> wq = w;
#pragma unroll
        for (int q = 1; q < R; ++q) {
            v[q] = src[j + q * stride] * wq;
            wq = wq * w;
        }
        Butterfly<S, R>::go(v, sign);
        const u32 base = (j - k) * R + k;
#pragma unroll
        for (int q = 0; q < R; ++q) dst[base + q * span] = v[q];
    }
}

// The DFT (sign 1: inverse, -1: forward; unscaled) of a[0, len), len a product of 2, 3, 5 and
// 7, ping-ponging with b; returns the buffer that holds the result. Callers synchronise before.
template <typename S> __device__ __forceinline__ Cx<S>* stockham(Cx<S>* a, Cx<S>* b, u32 len, int sign) {
    for (u32 span = 1; span < len;) {
        const u32 rem = len / span;
        if (rem % 4 == 0) {
            pass<S, 4>(a, b, len, span, sign);
            span *= 4;
        } else if (rem % 2 == 0) {
            pass<S, 2>(a, b, len, span, sign);
            span *= 2;
        } else if (rem % 3 == 0) {
            pass<S, 3>(a, b, len, span, sign);
            span *= 3;
        } else if (rem % 5 == 0) {
            pass<S, 5>(a, b, len, span, sign);
            span *= 5;
        } else {
            pass<S, 7>(a, b, len, span, sign);
            span *= 7;
        }
        __syncthreads();
        Cx<S>* t = a;
        a = b;
        b = t;
    }
    return a;
}

// ---- irfft ------------------------------------------------------------------------------------

// Frequency k of the row whose first input element is `first` (k < used), as the Hermitian
// extension reads it: real at k = 0 and k = n / 2.
template <typename T, typename S>
__device__ __forceinline__ Cx<S> frequency(const IrfftArgs& a, const T* x, i64 first, i64 k) {
    if (k >= a.used) return cx((S)0, (S)0);
    const i64 at = first + k * a.inner;
    Cx<S> v = a.complex ? cx(convert<S>(x[2 * at]), convert<S>(x[2 * at + 1])) : cx(convert<S>(x[at]), (S)0);
    if (k == 0 || 2 * k == a.n) v.im = (S)0;
    return v;
}

// Element k of the length-N sequence whose inverse DFT gives the row's samples.
template <typename T, typename S>
__device__ __forceinline__ Cx<S> sequence(const IrfftArgs& a, const T* x, i64 first, i64 k) {
    const i64 n = a.n, len = a.len;
    if (n % 2 == 0) {
        const Cx<S> p = frequency<T, S>(a, x, first, k), q = conj(frequency<T, S>(a, x, first, len - k));
        return (p + q) + rot((p - q) * cis_pi<S>(2ull * k, (u64)n), 1);
    }
    return k <= n / 2 ? frequency<T, S>(a, x, first, k) : conj(frequency<T, S>(a, x, first, n - k));
}

template <typename T, typename S> __device__ void irfft_rows(const IrfftArgs& a, Cx<S>* work) {
    const T* x = (const T*)a.x;
    T* out = (T*)a.out;
    const Cx<S>* kernel = (const Cx<S>*)a.kernel;
    const i64 len = a.len, l = a.l, rows = a.outer * a.inner;
    const i64 w = l ? l : len;
    const S scale = (S)a.scale;
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const i64 o = r / a.inner, i = r % a.inner;
        const i64 first = o * a.m * a.inner + i;
        Cx<S>* buf = work;
        for (i64 k = threadIdx.x; k < w; k += blockDim.x) {
            Cx<S> v = cx((S)0, (S)0);
            if (k < len) {
                v = sequence<T, S>(a, x, first, k);
                if (l) v = v * chirp<S>(k, len);
            }
            buf[k] = v;
        }
        __syncthreads();
        if (!l) {
            buf = stockham<S>(work, work + w, (u32)len, 1);
        } else {
            buf = stockham<S>(work, work + w, (u32)l, -1);
            for (i64 k = threadIdx.x; k < l; k += blockDim.x) buf[k] = buf[k] * kernel[k];
            __syncthreads();
            buf = stockham<S>(buf, buf == work ? work + w : work, (u32)l, 1);
        }
        const i64 base = o * a.n * a.inner + i;
        for (i64 t = threadIdx.x; t < len; t += blockDim.x) {
            Cx<S> z = buf[t];
            if (l) z = z * chirp<S>(t, len);
            if (a.n % 2 == 0) {
                out[base + 2 * t * a.inner] = convert<T>(z.re * scale);
                out[base + (2 * t + 1) * a.inner] = convert<T>(z.im * scale);
            } else {
                out[base + t * a.inner] = convert<T>(z.re * scale);
            }
        }
        __syncthreads();
    }
}

// The Bluestein kernel, by one block: the forward DFT of conj(c) laid out circularly over L
// points, divided by L, into `kernel` (the scratch's first L values; the next L are the
// ping-pong buffer).
template <typename S> __device__ void chirp_kernel(const IrfftArgs& a) {
    Cx<S>* k0 = (Cx<S>*)a.kernel;
    const i64 len = a.len, l = a.l;
    for (i64 k = threadIdx.x; k < l; k += blockDim.x) {
        const i64 d = k < len ? k : (l - k < len ? l - k : -1);
        k0[k] = d >= 0 ? conj(chirp<S>(d, len)) : cx((S)0, (S)0);
    }
    __syncthreads();
    Cx<S>* res = stockham<S>(k0, k0 + l, (u32)l, -1);
    const S inv = (S)1 / (S)l;
    for (i64 k = threadIdx.x; k < l; k += blockDim.x) k0[k] = cx(res[k].re * inv, res[k].im * inv);
}

extern __shared__ __align__(16) unsigned char fft_smem[];

#define IRFFT_KERNELS(NAME, T, S)                                                                         \
    extern "C" __global__ void __launch_bounds__(FFT_THREADS, 1) irfft_smem_##NAME(IrfftArgs a) {           \
        irfft_rows<T, S>(a, (Cx<S>*)fft_smem);                                                            \
    }                                                                                                     \
    extern "C" __global__ void __launch_bounds__(FFT_THREADS, 1) irfft_global_##NAME(IrfftArgs a) {         \
        const i64 w = a.l ? a.l : a.len;                                                                  \
        irfft_rows<T, S>(a, (Cx<S>*)a.scratch + 2 * w * (i64)blockIdx.x);                                 \
    }

IRFFT_KERNELS(f32, float, float)
IRFFT_KERNELS(f16, f16, float)
IRFFT_KERNELS(bf16, bf16, float)
IRFFT_KERNELS(f64, double, double)

extern "C" __global__ void __launch_bounds__(FFT_THREADS, 1) irfft_chirp_f32(IrfftArgs a) { chirp_kernel<float>(a); }
extern "C" __global__ void __launch_bounds__(FFT_THREADS, 1) irfft_chirp_f64(IrfftArgs a) { chirp_kernel<double>(a); }
