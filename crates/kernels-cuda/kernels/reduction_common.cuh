#line 1 "reduction_common.cuh"
// reduction_common.cuh: pieces shared by the reduction families (reduction.cu, norm.cu, scan.cu,
// sort.cu); sources.rs puts it in front of each of them, after prelude.cuh.
//
// Working types follow crates/runtime/src/cpu/reduction/work.rs, the reference behaviour:
//   W (sums, extremes, scans): f32 for f32 and the 16- and 8-bit floats, f64 for f64, i64 for
//     the signed integers, u64 for the unsigned ones and bool (integer sums wrap);
//   F (softmax, layer_norm): f32 for the floats but f64, f64 for f64 and every integer type.
// Values load exactly (convert<W>) and store with the cast rules (convert<T>).

#define FULL_MASK 0xffffffffu

template <typename T> struct Work { typedef float W; typedef float F; };
template <> struct Work<double> { typedef double W; typedef double F; };
#define INT_WORK(T, W_) template <> struct Work<T> { typedef W_ W; typedef double F; };
INT_WORK(i8, i64)
INT_WORK(i16, i64)
INT_WORK(i32, i64)
INT_WORK(i64, i64)
INT_WORK(u8, u64)
INT_WORK(u16, u64)
INT_WORK(u32, u64)
INT_WORK(u64, u64)
INT_WORK(bool, u64)

__device__ __forceinline__ bool is_nan(float v) { return isnan(v); }
__device__ __forceinline__ bool is_nan(double v) { return isnan(v); }
__device__ __forceinline__ bool is_nan(i64) { return false; }
__device__ __forceinline__ bool is_nan(u64) { return false; }

__device__ __forceinline__ i64 min64(i64 a, i64 b) { return a < b ? a : b; }

// The identities of max and min: -inf/+inf, or the integer type's range.
__device__ __forceinline__ void extremes(float& lo, float& hi) {
    lo = __int_as_float(0xff800000);
    hi = __int_as_float(0x7f800000);
}
__device__ __forceinline__ void extremes(double& lo, double& hi) {
    lo = __longlong_as_double((long long)0xfff0000000000000ull);
    hi = __longlong_as_double(0x7ff0000000000000ll);
}
__device__ __forceinline__ void extremes(i64& lo, i64& hi) {
    lo = (i64)0x8000000000000000ull;
    hi = 0x7fffffffffffffffll;
}
__device__ __forceinline__ void extremes(u64& lo, u64& hi) {
    lo = 0;
    hi = 0xffffffffffffffffull;
}

// Running sums: compensated (Neumaier, skipped once the sum is not finite, like the CPU's
// comp_add) for floats; wrapping for integers (through u64: signed overflow is undefined in C++).
__device__ __forceinline__ void comp_add(float& s, float& c, float x) {
    float t = s + x;
    if (isfinite(t)) c += fabsf(s) >= fabsf(x) ? (s - t) + x : (x - t) + s;
    s = t;
}
__device__ __forceinline__ void comp_add(double& s, double& c, double x) {
    double t = s + x;
    if (isfinite(t)) c += fabs(s) >= fabs(x) ? (s - t) + x : (x - t) + s;
    s = t;
}
__device__ __forceinline__ void comp_add(i64& s, i64&, i64 x) { s = (i64)((u64)s + (u64)x); }
__device__ __forceinline__ void comp_add(u64& s, u64&, u64 x) { s += x; }
__device__ __forceinline__ float total(float s, float c) { return s + c; }
__device__ __forceinline__ double total(double s, double c) { return s + c; }
__device__ __forceinline__ i64 total(i64 s, i64) { return s; }
__device__ __forceinline__ u64 total(u64 s, u64) { return s; }
// Plain wrapping addition (scans).
__device__ __forceinline__ float wadd(float a, float b) { return a + b; }
__device__ __forceinline__ double wadd(double a, double b) { return a + b; }
__device__ __forceinline__ i64 wadd(i64 a, i64 b) { return (i64)((u64)a + (u64)b); }
__device__ __forceinline__ u64 wadd(u64 a, u64 b) { return a + b; }

template <typename V> __device__ __forceinline__ V shfl_xor(V v, int m) { return __shfl_xor_sync(FULL_MASK, v, m); }

// Calls f(value, j) for the elements j of row[0, n) that thread `lane` of a group of `g`
// threads owns, in increasing j. The row is read in 16-byte vectors from its first 16-byte
// boundary (any row start works: the few elements before it and the tail are read singly), so
// consecutive lanes read consecutive 16-byte chunks. `row` is element-aligned (every buffer is)
// and g >= 16, so the head elements are one per lane.
template <typename T, typename Fn>
__device__ __forceinline__ void walk_row(const T* row, i64 n, int lane, int g, Fn f) {
    constexpr int V = 16 / sizeof(T);
    i64 head = (i64)((16u - (u32)((u64)row & 15u)) & 15u) / (i64)sizeof(T);
    if (head > n) head = n;
    if (lane < head) f(row[lane], (i64)lane);
    const i64 nv = (n - head) / V;
    const uint4* body = reinterpret_cast<const uint4*>(row + head);
    for (i64 c = lane; c < nv; c += g) {
        union {
            uint4 u;
            T t[V];
        } pk;
        pk.u = __ldg(body + c);
#pragma unroll
        for (int k = 0; k < V; ++k) f(pk.t[k], head + c * V + k);
    }
    for (i64 j = head + nv * V + lane; j < n; j += g) f(row[j], j);
}
