#line 1 "work_types.cuh"
// work_types.cuh: the type a kernel accumulates each element type in (as the CPU's
// crates/runtime/src/cpu/reduction/work.rs: f32 for 8- and 16-bit floats and f32, f64 for f64,
// wrapping 64-bit integers for integers and bool), and its addition with one rounding per
// operation (no contraction into fma): what conv.cu and pool.cu share.

template <typename T> struct Work { typedef float W; };
template <> struct Work<double> { typedef double W; };
template <> struct Work<i8> { typedef i64 W; };
template <> struct Work<i16> { typedef i64 W; };
template <> struct Work<i32> { typedef i64 W; };
template <> struct Work<i64> { typedef i64 W; };
template <> struct Work<u8> { typedef u64 W; };
template <> struct Work<u16> { typedef u64 W; };
template <> struct Work<u32> { typedef u64 W; };
template <> struct Work<u64> { typedef u64 W; };
template <> struct Work<bool> { typedef u64 W; };

__device__ __forceinline__ float w_add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double w_add(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ i64 w_add(i64 a, i64 b) { return (i64)((u64)a + (u64)b); }
__device__ __forceinline__ u64 w_add(u64 a, u64 b) { return a + b; }
