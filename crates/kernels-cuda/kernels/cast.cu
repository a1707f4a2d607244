// cast.cu: elementwise dtype conversion, out[i] = convert<Dst>(in[i]).
// Both buffers are contiguous; one thread per element in a grid-stride loop (the conversions are
// ALU-bound for the narrow float types, so wider vector loads would buy little here).
// Kernel names are cast_<src>_<dst> with the short dtype names of DType::short_name.

#define CAST(SN, ST, DN, DT)                                                                   \
    extern "C" __global__ void cast_##SN##_##DN(const ST* __restrict__ in, DT* __restrict__ out, \
                                                u64 n) {                                       \
        for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n;                        \
             i += (u64)gridDim.x * blockDim.x)                                                 \
            out[i] = convert<DT>(in[i]);                                                       \
    }

#define CAST_FROM(SN, ST)                                                                       \
    CAST(SN, ST, bool, bool) CAST(SN, ST, i8, i8) CAST(SN, ST, i16, i16) CAST(SN, ST, i32, i32)  \
    CAST(SN, ST, i64, i64) CAST(SN, ST, u8, u8) CAST(SN, ST, u16, u16) CAST(SN, ST, u32, u32)    \
    CAST(SN, ST, u64, u64) CAST(SN, ST, f16, f16) CAST(SN, ST, bf16, bf16)                       \
    CAST(SN, ST, f32, float) CAST(SN, ST, f64, double) CAST(SN, ST, f8e4m3fn, f8e4m3)            \
    CAST(SN, ST, f8e5m2, f8e5m2)

CAST_FROM(bool, bool)
CAST_FROM(i8, i8)
CAST_FROM(i16, i16)
CAST_FROM(i32, i32)
CAST_FROM(i64, i64)
CAST_FROM(u8, u8)
CAST_FROM(u16, u16)
CAST_FROM(u32, u32)
CAST_FROM(u64, u64)
CAST_FROM(f16, f16)
CAST_FROM(bf16, bf16)
CAST_FROM(f32, float)
CAST_FROM(f64, double)
CAST_FROM(f8e4m3fn, f8e4m3)
CAST_FROM(f8e5m2, f8e5m2)
