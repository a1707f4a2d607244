// fused_helpers.cuh: functions the generated fused elementwise kernels call (src/fused.rs puts
// this file in front of each generated source, after prelude.cuh).
template <typename T> __device__ __forceinline__ T relu_(T x) { return x > (T)0 ? x : (x != x ? x : (T)0); }
__device__ __forceinline__ float sigmoid_(float x) { return x >= 0.f ? 1.f / (1.f + expf(-x)) : expf(x) / (1.f + expf(x)); }
__device__ __forceinline__ double sigmoid_(double x) { return x >= 0.0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x)); }
// 1 + erf(z) as erfc(-z): no cancellation for negative x (gelu(-3) in f32 was 2e-5 off).
__device__ __forceinline__ float gelu_erf_(float x) { return 0.5f * x * erfcf(x * -0.70710678118654752f); }
__device__ __forceinline__ double gelu_erf_(double x) { return 0.5 * x * erfc(x * -0.70710678118654752); }
// A value rounded to f16 / bf16 and widened back (one conversion each way).
__device__ __forceinline__ float round_f16_(float v) {
    u16 h;
    float r;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
    asm("cvt.f32.f16 %0, %1;" : "=f"(r) : "h"(h));
    return r;
}
__device__ __forceinline__ float round_bf16_(float v) {
#if __CUDA_ARCH__ >= 800
    u16 h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(v));
    return __uint_as_float((u32)h << 16);
#else
    return to_f32(FromF32<bf16>::go(v));
#endif
}
// The approximate reciprocal and 2^x without the range fix-ups of __fdividef and __expf: the
// arguments below stay normal (a reciprocal of at least 1) or may flush to zero harmlessly
// (2^x below 2^-126 multiplies a result that is then at most 2^-126 x, below bf16's and f16's
// resolution of gelu there).
__device__ __forceinline__ float rcp_approx_(float x) {
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}
__device__ __forceinline__ float ex2_approx_(float x) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}
// gelu for 16-bit results through erfc (Numerical Recipes' Chebyshev fit, relative error below
// 1.2e-7 for every argument): 0.5 x erfc(-x / sqrt 2) has no cancellation in the negative tail,
// and costs one fast reciprocal, one fast exp and nine FMAs instead of libdevice's branchy erff.
__device__ __forceinline__ float gelu_erf16_(float x) {
    const float z = fabsf(x) * 0.70710678118654752f;
    const float t = rcp_approx_(fmaf(0.5f, z, 1.f));
    float p = 0.17087277f;
    p = fmaf(p, t, -0.82215223f);
    p = fmaf(p, t, 1.48851587f);
    p = fmaf(p, t, -1.13520398f);
    p = fmaf(p, t, 0.27886807f);
    p = fmaf(p, t, -0.18628806f);
    p = fmaf(p, t, 0.09678418f);
    p = fmaf(p, t, 0.37409196f);
    p = fmaf(p, t, 1.00002368f);
    p = fmaf(p, t, -1.26551223f);
    const float q = t * ex2_approx_((p - z * z) * 1.4426950408889634f);  // erfc(|x| / sqrt 2)
    return 0.5f * x * (x >= 0.f ? 2.f - q : q);
}
__device__ __forceinline__ float gelu_tanh_(float x) { return 0.5f * x * (1.f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x))); }
__device__ __forceinline__ double gelu_tanh_(double x) { return 0.5 * x * (1.0 + tanh(0.79788456080286536 * (x + 0.044715 * x * x * x))); }
__device__ __forceinline__ float floor_div_(float a, float b) { return floorf(a / b); }
__device__ __forceinline__ double floor_div_(double a, double b) { return floor(a / b); }
__device__ __forceinline__ float py_mod_(float a, float b) { float r = fmodf(a, b); return (r != 0.f && ((r < 0.f) != (b < 0.f))) ? r + b : r; }
__device__ __forceinline__ double py_mod_(double a, double b) { double r = fmod(a, b); return (r != 0.0 && ((r < 0.0) != (b < 0.0))) ? r + b : r; }
__device__ __forceinline__ float fmax_nan_(float a, float b) { return (a != a || b != b) ? __int_as_float(0x7fc00000) : fmaxf(a, b); }
__device__ __forceinline__ double fmax_nan_(double a, double b) { return (a != a || b != b) ? __longlong_as_double(0x7ff8000000000000ll) : fmax(a, b); }
__device__ __forceinline__ float fmin_nan_(float a, float b) { return (a != a || b != b) ? __int_as_float(0x7fc00000) : fminf(a, b); }
__device__ __forceinline__ double fmin_nan_(double a, double b) { return (a != a || b != b) ? __longlong_as_double(0x7ff8000000000000ll) : fmin(a, b); }
__device__ __forceinline__ long long idiv_floor_(long long a, long long b) { if (b == 0) return 0; long long q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }
__device__ __forceinline__ long long imod_py_(long long a, long long b) { if (b == 0) return 0; long long r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
__device__ __forceinline__ unsigned long long udiv_(unsigned long long a, unsigned long long b) { return b == 0 ? 0 : a / b; }
__device__ __forceinline__ unsigned long long umod_(unsigned long long a, unsigned long long b) { return b == 0 ? 0 : a % b; }
__device__ __forceinline__ long long ipow_(long long b, long long e) {
    if (e < 0) return b == 1 ? 1 : (b == -1 ? ((e % 2 == 0) ? 1 : -1) : 0);
    unsigned long long acc = 1, base = (unsigned long long)b;
    while (e > 0) { if (e & 1) acc *= base; base *= base; e >>= 1; }
    return (long long)acc;
}
__device__ __forceinline__ unsigned long long upow_(unsigned long long b, unsigned long long e) {
    unsigned long long acc = 1;
    while (e > 0) { if (e & 1) acc *= b; b *= b; e >>= 1; }
    return acc;
}
// The vector loops' f16 fast paths (src/fused.rs): a 16-byte (or narrower) pack of f16 is
// checked for NaNs a 32-bit word (two halves) at a time, (h & 0x7FFF) > 0x7C00 being bit 15 of
// (h & 0x7FFF) + 0x3FF (no carry crosses into the upper half); a NaN-free pack decodes with one
// conversion per element, and results free of NaNs encode with one conversion per pair. The
// per-element to_f32 / FromF32 (which keep a NaN's sign) serve the packs that hold a NaN.
template <int N> __device__ __forceinline__ bool f16_pack_has_nan(const f16 (&v)[N]) {
    static_assert(N % 2 == 0, "f16 packs hold pairs");
    // (The pack is 4-byte aligned at least: alignas(sizeof(T) * VEC) with VEC >= 2.)
    const u32* w = reinterpret_cast<const u32*>(v);
    u32 any = 0;
#pragma unroll
    for (int i = 0; i < N / 2; ++i) any |= (w[i] & 0x7FFF7FFFu) + 0x03FF03FFu;
    return (any & 0x80008000u) != 0;
}
__device__ __forceinline__ float f16_to_f32_finite(f16 x) {
    float r;
    asm("cvt.f32.f16 %0, %1;" : "=f"(r) : "h"(x.bits));
    return r;
}
template <int N> __device__ __forceinline__ void f16_pack_from_f32(const float (&r)[N], f16 (&v)[N]) {
    static_assert(N % 2 == 0, "f16 packs hold pairs");
    bool nan = false;
#pragma unroll
    for (int i = 0; i < N; ++i) nan |= isnan(r[i]);
    if (nan) {
#pragma unroll
        for (int i = 0; i < N; ++i) v[i] = FromF32<f16>::go(r[i]);
        return;
    }
    u32* w = reinterpret_cast<u32*>(v);
#pragma unroll
    for (int i = 0; i < N / 2; ++i)
        asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(w[i]) : "f"(r[2 * i + 1]), "f"(r[2 * i]));
}
