#line 1 "sampling_math.cuh"
// sampling_math.cuh: what the sampling family's kernels share (sources.rs joins cluster.cuh,
// this file, sampling_reduce.cuh, sampling.cu and penalties.cu): the block shape, and float
// arithmetic that gives the results of crates/runtime/src/cpu/sampling/math.rs bit for bit.

#define THREADS 1024
#define WARPS (THREADS / 32)
#define FULL_MASK 0xffffffffu
#define NONE 0xffffffffu
#define NEG_INF (__int_as_float(0xff800000))

// ---- the exact arithmetic of crates/runtime/src/cpu/sampling/math.rs ------------------------

#define SQRT2 0x3fb504f3u
#define LN2_HI 0x3f317200u
#define LN2_LO 0x35bfbe8eu
#define INV_LN2 0x3fb8aa3bu
#define BELOW_ONE 0x3f7fffffu
#define GOLDEN 0x9e3779b97f4a7c15ull
#define GUMBEL_BOUND 17.f  // math.rs: above every gumbel() value

__device__ __forceinline__ float fadd(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float fsub(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ float fmul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float cf(u32 bits) { return __uint_as_float(bits); }

__device__ __forceinline__ float canon(float v) { return isnan(v) ? NEG_INF : (v == 0.f ? 0.f : v); }

__device__ __forceinline__ u32 key_of(float v) {
    const u32 b = __float_as_uint(v);
    return (b >> 31) ? ~b : (b | 0x80000000u);
}

__device__ float ln_f32(float x) {
    if (isnan(x) || x < 0.f) return __int_as_float(0x7fc00000);
    if (x == 0.f) return NEG_INF;
    if (isinf(x)) return x;
    int e = 0;
    if (x < cf(0x00800000u)) {
        x = fmul(x, 16777216.f);
        e = -24;
    }
    const u32 bits = __float_as_uint(x);
    e += (int)(bits >> 23) - 127;
    float m = cf((bits & 0x007fffffu) | 0x3f800000u);
    if (m > cf(SQRT2)) {
        m = fmul(m, 0.5f);
        e += 1;
    }
    const float s = __fdiv_rn(fsub(m, 1.f), fadd(m, 1.f));
    const float s2 = fmul(s, s);
    float p = fmul(s2, cf(0x3e3a2e8cu));
    p = fmul(s2, fadd(cf(0x3e638e39u), p));
    p = fmul(s2, fadd(cf(0x3e924925u), p));
    p = fmul(s2, fadd(cf(0x3ecccccdu), p));
    p = fmul(s2, fadd(cf(0x3f2aaaabu), p));
    const float ln_m = fadd(fadd(s, s), fmul(s, p));
    const float ef = __int2float_rn(e);
    return fadd(fmul(ef, cf(LN2_HI)), fadd(fmul(ef, cf(LN2_LO)), ln_m));
}

__device__ __forceinline__ float exp_neg(float d) {
    if (!(d >= -32.f)) return 0.f;
    const float k = floorf(fadd(fmul(d, cf(INV_LN2)), 0.5f));
    const float r = fsub(fsub(d, fmul(k, cf(LN2_HI))), fmul(k, cf(LN2_LO)));
    float p = fmul(r, cf(0x39500d01u));
    p = fmul(r, fadd(cf(0x3ab60b61u), p));
    p = fmul(r, fadd(cf(0x3c088889u), p));
    p = fmul(r, fadd(cf(0x3d2aaaabu), p));
    p = fmul(r, fadd(cf(0x3e2aaaabu), p));
    p = fmul(r, fadd(cf(0x3f000000u), p));
    p = fmul(r, fadd(1.f, p));
    p = fadd(1.f, p);
    return fmul(p, cf((u32)(__float2int_rz(k) + 127) << 23));
}

// exp(d) in units of 2^-40, truncated.
__device__ __forceinline__ u64 weight(float d) { return (u64)fmul(exp_neg(d), 1099511627776.f); }

__device__ __forceinline__ u64 splitmix64(u64 x) {
    u64 z = x + GOLDEN;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

__device__ __forceinline__ float gumbel(u64 seed, u64 i) {
    const u64 h = splitmix64(seed ^ ((i + 1) * GOLDEN));
    const float j = __ull2float_rn(h >> 40);
    const float u = fminf(fmul(fadd(j, 0.5f), 5.9604644775390625e-8f), cf(BELOW_ONE));
    return -ln_f32(-ln_f32(u));
}
