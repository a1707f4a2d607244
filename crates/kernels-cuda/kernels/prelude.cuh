// prelude.cuh: fixed-width integer names and exact element-type conversions shared by every
// kernel. It is prepended to each family's source before NVRTC sees it.
//
// NVRTC runs here without the CUDA toolkit headers (the wheel ships only libnvrtc), so the
// 16- and 8-bit float types are stored as raw bits and converted with PTX or integer code.
// Every conversion below matches crates/runtime/src/cpu/cast.rs bit for bit:
//   * float -> float goes through f64 (exact for every source), then rounds once to nearest-even;
//     narrow targets round through an f32 rounded-to-odd, which makes the double rounding exact;
//     int -> float rounds once too (the narrow targets through an f32 rounded to odd from the int).
//   * NaN becomes the target's canonical quiet NaN with the sign kept.
//   * float -> int truncates toward zero, saturates at the target's range, NaN -> 0.
//   * int -> int wraps (two's complement); anything -> bool is `x != 0` (NaN is true).
//   * float8_e4m3fn has no infinity: overflow and inf become NaN; float8_e5m2 overflows to inf.

typedef signed char i8;
typedef unsigned char u8;
typedef short i16;
typedef unsigned short u16;
typedef int i32;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;

// Raw-bit wrappers so overloads can tell the narrow float types apart.
struct f16 { u16 bits; };
struct bf16 { u16 bits; };
struct f8e4m3 { u8 bits; };
struct f8e5m2 { u8 bits; };

__device__ __forceinline__ u32 f32_bits(float x) { return __float_as_uint(x); }
__device__ __forceinline__ float bits_f32(u32 b) { return __uint_as_float(b); }

// f64 -> f32 rounded to odd: truncate, then set the last bit if anything was dropped.
// Rounding that result once more to a format of <= 22 significant bits is correctly rounded.
__device__ __forceinline__ float f64_to_f32_odd(double v) {
    float t = __double2float_rz(v);
    if (!isnan(v) && (double)t != v) t = bits_f32(f32_bits(t) | 1u);
    return t;
}

// An integer -> f32 rounded to odd, as f64_to_f32_odd (through f64 a 64-bit integer would be
// rounded twice before a narrow target's rounding).
__device__ __forceinline__ float i64_to_f32_odd(i64 x) {
    float t = __ll2float_rz(x);
    if ((i64)t != x) t = bits_f32(f32_bits(t) | 1u);
    return t;
}
__device__ __forceinline__ float u64_to_f32_odd(u64 x) {
    float t = __ull2float_rz(x);
    if ((u64)t != x) t = bits_f32(f32_bits(t) | 1u);
    return t;
}

// f32 -> a small float format (mbits mantissa bits, exponent bias `bias`), round to nearest even.
// Returns the magnitude bits; the caller adds the sign and handles NaN/inf/overflow.
__device__ __forceinline__ u32 round_f32_to_small(u32 abs, int mbits, int bias) {
    u32 exp = abs >> 23;
    if (exp == 0) return 0;  // f32 subnormals are far below every small format's range
    int e = (int)exp - 127 + bias;
    u32 full = (abs & 0x7FFFFFu) | 0x800000u;
    int shift = 23 - mbits;
    if (e < 1) { shift += 1 - e; e = 0; }
    if (shift > 31) return 0;
    u32 q = full >> shift;
    u32 rem = full & ((1u << shift) - 1u);
    u32 half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) q += 1;
    return e >= 1 ? ((u32)e << mbits) + q - (1u << mbits) : q;
}

// ---- decode: every float type to f32 (narrow types, exact) or f64 (all, exact) -------------
// NaNs are rebuilt from their sign bit: hardware conversions of NaN do not keep the sign.
__device__ __forceinline__ float nan32(bool negative) { return bits_f32(((u32)negative << 31) | 0x7FC00000u); }
__device__ __forceinline__ double nan64(bool negative) {
    return __longlong_as_double((long long)(((u64)negative << 63) | 0x7FF8000000000000ull));
}

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(f16 x) {
    if ((x.bits & 0x7FFFu) > 0x7C00u) return nan32(x.bits >> 15);
    float r;
    asm("cvt.f32.f16 %0, %1;" : "=f"(r) : "h"(x.bits));
    return r;
}
__device__ __forceinline__ float to_f32(bf16 x) { return bits_f32((u32)x.bits << 16); }
// A small float (sign, exponent with `bias`, mbits mantissa bits) that is finite.
__device__ __forceinline__ float small_to_f32(u32 b, int mbits, int bias) {
    u32 sign = (b >> 7) << 31;
    u32 mag = b & 0x7Fu;
    u32 e = mag >> mbits;
    u32 m = mag & ((1u << mbits) - 1u);
    if (e == 0) {  // subnormal: m * 2^(1 - bias - mbits), a normal f32 power of two
        float v = (float)m * bits_f32((u32)(127 + 1 - bias - mbits) << 23);
        return bits_f32(f32_bits(v) | sign);
    }
    return bits_f32(sign | ((e - bias + 127) << 23) | (m << (23 - mbits)));
}
__device__ __forceinline__ float to_f32(f8e4m3 x) {
    if ((x.bits & 0x7Fu) == 0x7Fu) return nan32(x.bits >> 7);
    return small_to_f32(x.bits, 3, 7);
}
__device__ __forceinline__ float to_f32(f8e5m2 x) {
    u32 mag = x.bits & 0x7Fu;
    if (mag > 0x7Cu) return nan32(x.bits >> 7);
    if (mag == 0x7Cu) return bits_f32(((u32)(x.bits >> 7) << 31) | 0x7F800000u);
    return small_to_f32(x.bits, 2, 15);
}

__device__ __forceinline__ double to_f64(double x) { return x; }
template <typename S> __device__ __forceinline__ double to_f64(S x) {
    float f = to_f32(x);
    return isnan(f) ? nan64(f32_bits(f) >> 31) : (double)f;
}

// ---- encode: f32 (or f64) to every float type -------------------------------------------------
template <typename T> struct FromF32;
template <> struct FromF32<float> {
    static __device__ __forceinline__ float go(float v) { return isnan(v) ? nan32(f32_bits(v) >> 31) : v; }
};
template <> struct FromF32<double> {
    static __device__ __forceinline__ double go(float v) { return isnan(v) ? nan64(f32_bits(v) >> 31) : (double)v; }
};
template <> struct FromF32<f16> {
    static __device__ __forceinline__ f16 go(float v) {
        if (isnan(v)) return f16{(u16)(((f32_bits(v) >> 31) << 15) | 0x7E00u)};
        u16 b;
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(b) : "f"(v));
        return f16{b};
    }
};
template <> struct FromF32<bf16> {
    static __device__ __forceinline__ bf16 go(float v) {
        u32 b = f32_bits(v);
        u32 s = b >> 31;
        if (isnan(v)) return bf16{(u16)((s << 15) | 0x7FC0u)};
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
        // One instruction on sm_80+; same nearest-even result as the integer path below.
        u16 h;
        asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(v));
        return bf16{h};
#endif
        u32 abs = b & 0x7FFFFFFFu;
        if (abs == 0x7F800000u) return bf16{(u16)(b >> 16)};
        // nearest-even on the 16 dropped bits; a carry into the exponent gives inf correctly
        u32 r = abs + 0x7FFFu + ((abs >> 16) & 1u);
        return bf16{(u16)((s << 15) | (r >> 16))};
    }
};
template <> struct FromF32<f8e4m3> {
    static __device__ __forceinline__ f8e4m3 go(float v) {
        u32 s = (f32_bits(v) >> 31) << 7;
        if (isnan(v) || isinf(v)) return f8e4m3{(u8)(s | 0x7Fu)};
        u32 m = round_f32_to_small(f32_bits(v) & 0x7FFFFFFFu, 3, 7);
        return f8e4m3{(u8)(s | (m > 0x7Eu ? 0x7Fu : m))};
    }
};
template <> struct FromF32<f8e5m2> {
    static __device__ __forceinline__ f8e5m2 go(float v) {
        u32 s = (f32_bits(v) >> 31) << 7;
        if (isnan(v)) return f8e5m2{(u8)(s | 0x7Eu)};
        if (isinf(v)) return f8e5m2{(u8)(s | 0x7Cu)};
        u32 m = round_f32_to_small(f32_bits(v) & 0x7FFFFFFFu, 2, 15);
        return f8e5m2{(u8)(s | (m >= 0x7Cu ? 0x7Cu : m))};
    }
};

__device__ __forceinline__ bool sign_of(double v) { return (__double_as_longlong(v) >> 63) != 0; }

// f64 -> any float type: one correct rounding (narrow targets through an f32 rounded to odd).
template <typename T> struct FromF64 {
    static __device__ __forceinline__ T go(double v) {
        if (isnan(v)) return FromF32<T>::go(nan32(sign_of(v)));
        return FromF32<T>::go(f64_to_f32_odd(v));
    }
};
template <> struct FromF64<double> {
    static __device__ __forceinline__ double go(double v) { return isnan(v) ? nan64(sign_of(v)) : v; }
};
template <> struct FromF64<float> {
    static __device__ __forceinline__ float go(double v) { return isnan(v) ? nan32(sign_of(v)) : __double2float_rn(v); }
};

// ---- the conversion every kernel uses: convert<Dst>(src) -----------------------------------
template <typename T> struct Kind { static const int value = 0; };  // 0 float, 1 signed, 2 unsigned, 3 bool
template <> struct Kind<i8> { static const int value = 1; };
template <> struct Kind<i16> { static const int value = 1; };
template <> struct Kind<i32> { static const int value = 1; };
template <> struct Kind<i64> { static const int value = 1; };
template <> struct Kind<u8> { static const int value = 2; };
template <> struct Kind<u16> { static const int value = 2; };
template <> struct Kind<u32> { static const int value = 2; };
template <> struct Kind<u64> { static const int value = 2; };
template <> struct Kind<bool> { static const int value = 3; };

template <typename T> struct IntRange;
template <> struct IntRange<i8> { static __device__ double lo() { return -128.0; } static __device__ double hi() { return 127.0; } };
template <> struct IntRange<i16> { static __device__ double lo() { return -32768.0; } static __device__ double hi() { return 32767.0; } };
template <> struct IntRange<i32> { static __device__ double lo() { return -2147483648.0; } static __device__ double hi() { return 2147483647.0; } };
template <> struct IntRange<i64> { static __device__ double lo() { return -9223372036854775808.0; } static __device__ double hi() { return 9223372036854775808.0; } };
template <> struct IntRange<u8> { static __device__ double lo() { return 0.0; } static __device__ double hi() { return 255.0; } };
template <> struct IntRange<u16> { static __device__ double lo() { return 0.0; } static __device__ double hi() { return 65535.0; } };
template <> struct IntRange<u32> { static __device__ double lo() { return 0.0; } static __device__ double hi() { return 4294967295.0; } };
template <> struct IntRange<u64> { static __device__ double lo() { return 0.0; } static __device__ double hi() { return 18446744073709551616.0; } };

// float -> int with saturation (hi() of the 64-bit types is 2^63 / 2^64, not representable in
// the target, so it is treated as "at or above the top").
template <typename D> __device__ __forceinline__ D float_to_int(double v) {
    if (isnan(v)) return (D)0;
    if (v <= IntRange<D>::lo()) return (D)IntRange<D>::lo();
    if (v >= IntRange<D>::hi()) {
        if (sizeof(D) == 8) return Kind<D>::value == 1 ? (D)0x7FFFFFFFFFFFFFFFll : (D)0xFFFFFFFFFFFFFFFFull;
        return (D)IntRange<D>::hi();
    }
    return Kind<D>::value == 1 ? (D)(i64)trunc(v) : (D)(u64)trunc(v);
}

template <typename D, int DK, typename S, int SK> struct Convert;
// float source
// Every float type but f64 is exact in f32, so those convert through f32 (one rounding, fast);
// f64 sources take the f64 path.
template <typename D, typename S> struct Convert<D, 0, S, 0> { static __device__ D go(S x) { return FromF32<D>::go(to_f32(x)); } };
template <typename D> struct Convert<D, 0, double, 0> { static __device__ D go(double x) { return FromF64<D>::go(x); } };
template <typename D, typename S> struct Convert<D, 1, S, 0> { static __device__ D go(S x) { return float_to_int<D>(to_f64(x)); } };
template <typename D, typename S> struct Convert<D, 2, S, 0> { static __device__ D go(S x) { return float_to_int<D>(to_f64(x)); } };
template <typename D, typename S> struct Convert<D, 3, S, 0> { static __device__ D go(S x) { return to_f64(x) != 0.0; } };
// signed / unsigned / bool source
// (the narrow targets: through an f32 rounded to odd from the integer)
template <typename D, typename S, int SK> struct IntToFloat {
    static __device__ D go(S x) {
        return FromF32<D>::go(SK == 1 ? i64_to_f32_odd((i64)x) : u64_to_f32_odd((u64)x));
    }
};
template <typename S, int SK> struct IntToFloat<double, S, SK> {
    static __device__ double go(S x) { return SK == 1 ? (double)(i64)x : (double)(u64)x; }
};
template <typename S, int SK> struct IntToFloat<float, S, SK> {
    static __device__ float go(S x) { return SK == 1 ? (float)(i64)x : (float)(u64)x; }
};
template <typename D, typename S> struct Convert<D, 0, S, 1> { static __device__ D go(S x) { return IntToFloat<D, S, 1>::go(x); } };
template <typename D, typename S> struct Convert<D, 0, S, 2> { static __device__ D go(S x) { return IntToFloat<D, S, 2>::go(x); } };
template <typename D, typename S> struct Convert<D, 0, S, 3> { static __device__ D go(S x) { return IntToFloat<D, u8, 2>::go((u8)x); } };
template <typename D, int DK, typename S> struct Convert<D, DK, S, 1> { static __device__ D go(S x) { return DK == 3 ? (D)(x != 0) : (D)(i64)x; } };
template <typename D, int DK, typename S> struct Convert<D, DK, S, 2> { static __device__ D go(S x) { return DK == 3 ? (D)(x != 0) : (D)(u64)x; } };
template <typename D, int DK, typename S> struct Convert<D, DK, S, 3> { static __device__ D go(S x) { return (D)(x ? 1 : 0); } };

template <typename D, typename S> __device__ __forceinline__ D convert(S x) {
    return Convert<D, Kind<D>::value, S, Kind<S>::value>::go(x);
}

// One rope pair (xa, xb) rotated by (c, s), with the same rounding wherever a rope is computed
// (attention.cu's rope kernels, the q/k/v products' folded rope in quant_common.cuh): the fused
// and unfused forms agree bit for bit.
__device__ __forceinline__ void rotate_pair(float xa, float xb, float c, float s, float& oa, float& ob) {
    oa = __fmaf_rn(xa, c, -__fmul_rn(xb, s));
    ob = __fmaf_rn(xb, c, __fmul_rn(xa, s));
}

// GEMM epilogue, shared by every matmul kernel so that a fused matmul means the same thing on
// every path: out[idx] = beta * residual[idx] + clamp(act(acc + bias[col])), each part optional
// (a zero pointer skips it; `clamp` is 0 unless the bounds apply), computed in f32 and rounded
// once to the output type. `idx` is the element's linear offset in the output (batch included),
// so the residual has the output's contiguous layout; the bias is one row of `n` values
// broadcast over every row. beta is 1 unless a scaled residual was fused (conv epilogues).
enum EpilogueAct { EPI_NONE = 0, EPI_RELU = 1, EPI_GELU = 2, EPI_GELU_TANH = 3, EPI_SILU = 4, EPI_SIGMOID = 5, EPI_GELU_QUICK = 6 };
struct Epilogue {
    u64 bias;
    u64 residual;
    int act;
    float beta;     // residual scale
    int clamp;      // nonzero: clamp to [lo, hi] after the activation (NaN stays NaN)
    float lo, hi;
    int pad;
};
__device__ __forceinline__ float epi_sigmoid(float x) { return x >= 0.f ? 1.f / (1.f + expf(-x)) : expf(x) / (1.f + expf(x)); }
__device__ __forceinline__ float epi_act(int act, float x) {
    switch (act) {
        case EPI_RELU: return x > 0.f ? x : 0.f;
        case EPI_GELU: return 0.5f * x * (1.f + erff(x * 0.70710678118654752f));
        case EPI_GELU_TANH: return 0.5f * x * (1.f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
        case EPI_SILU: return x * epi_sigmoid(x);
        case EPI_SIGMOID: return epi_sigmoid(x);
        case EPI_GELU_QUICK: return x * epi_sigmoid(1.702f * x);
        default: return x;
    }
}
// The activation over a whole register fragment, with the choice made once: per-element
// switching in a fully unrolled store loop spreads the code of every activation over the
// kernel's instruction stream, and fetching it costs more than the GEMM's epilogue itself.
template <int N> __device__ __forceinline__ void epi_act_all(int act, float* v) {
    switch (act) {
        case EPI_RELU:
#pragma unroll
            for (int i = 0; i < N; ++i) v[i] = epi_act(EPI_RELU, v[i]);
            break;
        case EPI_GELU:
#pragma unroll
            for (int i = 0; i < N; ++i) v[i] = epi_act(EPI_GELU, v[i]);
            break;
        case EPI_GELU_TANH:
#pragma unroll
            for (int i = 0; i < N; ++i) v[i] = epi_act(EPI_GELU_TANH, v[i]);
            break;
        case EPI_SILU:
#pragma unroll
            for (int i = 0; i < N; ++i) v[i] = epi_act(EPI_SILU, v[i]);
            break;
        case EPI_SIGMOID:
#pragma unroll
            for (int i = 0; i < N; ++i) v[i] = epi_act(EPI_SIGMOID, v[i]);
            break;
        case EPI_GELU_QUICK:
#pragma unroll
            for (int i = 0; i < N; ++i) v[i] = epi_act(EPI_GELU_QUICK, v[i]);
            break;
        default:
            break;
    }
}

// epi_act_all, except that the sigmoid family uses one exponential per element: the Hopper GEMM
// and conv2d epilogues (and the conv2d's split-K reduce, which must apply the same activation),
// where the two-exponential form does not fit next to 128 live accumulators (it spilled under
// the 168-register bound). The hardware's exponential (a few ulp, far below the 16-bit outputs'
// rounding) and a rounded reciprocal without the division's slow path: with expf and an IEEE
// division, a prefill's gate projection (2,048 x 14,336 outputs, an H200) took 397 us with SiLU
// in its epilogue against 320 without. (__fdividef instead of __frcp_rn made ptxas spill
// 150-220 bytes in the 256-column GEMM and conv kernels.)
__device__ __forceinline__ float sigmoid1(float x) {
    const float t = __expf(-fabsf(x));
    const float r = __frcp_rn(1.f + t);
    return x >= 0.f ? r : t * r;
}
template <int N> __device__ __forceinline__ void act_all_1exp(int act, float* v) {
    switch (act) {
        case EPI_SILU:
#pragma unroll
            for (int i = 0; i < N; ++i) v[i] = v[i] * sigmoid1(v[i]);
            break;
        case EPI_SIGMOID:
#pragma unroll
            for (int i = 0; i < N; ++i) v[i] = sigmoid1(v[i]);
            break;
        case EPI_GELU_QUICK:
#pragma unroll
            for (int i = 0; i < N; ++i) v[i] = v[i] * sigmoid1(1.702f * v[i]);
            break;
        default:
            epi_act_all<N>(act, v);
    }
}

// min(max(x, lo), hi) with the NaN propagation of the elementwise max/min ops.
__device__ __forceinline__ float epi_clamp(float x, float lo, float hi) { return x != x ? x : fminf(fmaxf(x, lo), hi); }
template <int N> __device__ __forceinline__ void epi_clamp_all(const Epilogue& e, float* v) {
    const float lo = e.lo, hi = e.hi;
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] = epi_clamp(v[i], lo, hi);
}
template <typename T> __device__ __forceinline__ float epilogue(const Epilogue& e, float acc, long long idx, long long col) {
    if (e.bias) acc += to_f32(reinterpret_cast<const T*>(e.bias)[col]);
    acc = epi_act(e.act, acc);
    if (e.clamp) acc = epi_clamp(acc, e.lo, e.hi);
    if (e.residual) acc += e.beta * to_f32(reinterpret_cast<const T*>(e.residual)[idx]);
    return acc;
}

// Programmatic dependent launch (launch/pdl.rs). A kernel the launcher may start under
// programmatic stream serialization begins while the stream's previous kernel still drains, so
// every thread calls pdl_wait() before it reads anything an earlier kernel may write and
// before its first global store, and before any early return (the grid's completion must imply
// the previous grid's, for the kernel after it), except blocks that read and write nothing of
// the sort in a grid where other blocks always wait: the decode attention's splits without keys
// (attention_decode.cu, decode_split). Only what no unfinished kernel writes may be
// read before it: constants (weights, tables), and where the engine marks it, a program's
// immutable inputs and a decode attention's keys of earlier steps (passes/mark_early_index.rs).
// pdl_launch_dependents() lets the next kernel's grid start once every block of this one has
// called it (or exited); the next kernel still waits for this one's completion and memory, so
// it only moves the next kernel's launch and prologue earlier. Kernels call it after their
// wait, so that when a kernel starts every kernel two or more before it has finished; only
// rope_kv_store with early_next calls it first (the marking pass checks what that allows).
// Both are no-ops in a grid launched without the attribute, and compile to nothing before sm_90.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// 16 bytes of T elements packed in 4 words -> their V = 16 / sizeof(T) floats, in order.
template <typename T> struct Unpack;
template <> struct Unpack<float> {
    static __device__ __forceinline__ void go(const u32* w, float* f) {
#pragma unroll
        for (int i = 0; i < 4; ++i) f[i] = bits_f32(w[i]);
    }
};
template <> struct Unpack<bf16> {
    static __device__ __forceinline__ void go(const u32* w, float* f) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            f[2 * i] = bits_f32(w[i] << 16);
            f[2 * i + 1] = bits_f32(w[i] & 0xFFFF0000u);
        }
    }
};
template <> struct Unpack<f16> {
    // The hardware conversion is exact for every finite value and infinity; a NaN stays a NaN
    // (its sign does not matter inside a sum).
    static __device__ __forceinline__ void go(const u32* w, float* f) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            asm("{\n.reg .b16 lo, hi;\nmov.b32 {lo, hi}, %2;\ncvt.f32.f16 %0, lo;\ncvt.f32.f16 %1, hi;\n}"
                : "=f"(f[2 * i]), "=f"(f[2 * i + 1]) : "r"(w[i]));
        }
    }
};
