#line 1 "sm90_pipe.cuh"
// sm90_pipe.cuh: the Hopper (sm_90a) building blocks of the persistent GEMM (gemm_sm90p.cu),
// the conv2d kernel (conv_sm90.cu) and the wgmma attention prefill (attention_prefill_sm90.cu);
// sources.rs puts this file in front of each, after prelude.cuh and cluster.cuh (the cluster's
// rank, size and barrier): mbarriers (local and cluster-wide), TMA tile loads (plain and
// multicast to every CTA of a cluster) and L2 prefetches, shared-memory matrix descriptors for
// the 128-byte swizzle, m64nNk16 wgmma with N = 32, 64, 128 or 256, and 16-bit pairs.

#define P_BK 64

struct alignas(64) TmaMap { u64 data[16]; };

__device__ __forceinline__ u32 s_addr(const void* p) { return (u32)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void mbar_init(u64* bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(s_addr(bar)), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(u64* bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(s_addr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(u64* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(s_addr(bar)) : "memory");
}
// Arrive on the barrier at the same shared-memory offset in CTA `rank` of this cluster (this
// CTA included). The default .release.cta semantics, as CUTLASS's ClusterBarrier::arrive: the
// only accesses ordered by the empty barriers are wgmma's shared-memory reads, retired by
// wgmma.wait_group before the arrival, and the peer's TMA writes after its producer's wait.
// (.release.cluster made every arrival a cluster-scope fence, and the producer's
// .acquire.cluster wait another, on the critical path of every k-tile of a clustered launch.)
__device__ __forceinline__ void mbar_arrive_cluster(u64* bar, u32 rank) {
    asm volatile(
        "{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\n"
        "mbarrier.arrive.shared::cluster.b64 _, [ra];\n}\n" ::"r"(s_addr(bar)),
        "r"(rank)
        : "memory");
}
// Waits for the phase with this parity to complete. A wait longer than 20 s (%globaltimer, in
// ns) cannot be a slow GEMM stage, only a pipeline bug: it traps, so the launch fails with an
// error instead of hanging the process. SEM is "" (.acquire.cta) or a stronger semantics.
#define MBAR_WAIT(SEM)                                                                               \
    asm volatile(                                                                                    \
        "{\n.reg .pred p;\n.reg .u64 t0, t1;\n"                                                      \
        "mbarrier.try_wait.parity" SEM ".shared::cta.b64 p, [%0], %1;\n"                              \
        "@p bra WAIT_DONE;\n"                                                                     \
        "mov.u64 t0, %%globaltimer;\n"                                                                \
        "WAIT_LOOP:\n"                                                                                \
        "mbarrier.try_wait.parity" SEM ".shared::cta.b64 p, [%0], %1;\n"                              \
        "@p bra WAIT_DONE;\n"                                                                     \
        "mov.u64 t1, %%globaltimer;\n"                                                                \
        "sub.u64 t1, t1, t0;\n"                                                                       \
        "setp.lt.u64 p, t1, 20000000000;\n"                                                           \
        "@p bra WAIT_LOOP;\n"                                                                     \
        "trap;\n"                                                                                     \
        "WAIT_DONE:\n}\n" ::"r"(s_addr(bar)),                                                         \
        "r"(parity)                                                                                  \
        : "memory")
__device__ __forceinline__ void mbar_wait(u64* bar, u32 parity) { MBAR_WAIT(""); }
// The same wait without the time limit (the conv2d and one-tile-per-CTA GEMM pipelines).
__device__ __forceinline__ void mbar_wait_spin(u64* bar, u32 parity) {
    asm volatile(
        "{\n.reg .pred p;\nLAB_WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
        "@!p bra LAB_WAIT;\n}\n" ::"r"(s_addr(bar)), "r"(parity) : "memory");
}
// Named barrier `id` over `n` threads (0 is __syncthreads).
__device__ __forceinline__ void named_sync(u32 id, u32 n) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }
// Arrives at named barrier `id` (of `n` threads) without waiting.
__device__ __forceinline__ void named_arrive(u32 id, u32 n) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}

__device__ __forceinline__ void tma_load_3d(void* dst, const TmaMap* map, u64* bar, int c0, int c1, int c2) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];\n"
        ::"r"(s_addr(dst)), "l"((u64)map), "r"(s_addr(bar)), "r"(c0), "r"(c1), "r"(c2) : "memory");
}
__device__ __forceinline__ void tma_load_2d(void* dst, const TmaMap* map, u64* bar, int c0, int c1) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n"
        ::"r"(s_addr(dst)), "l"((u64)map), "r"(s_addr(bar)), "r"(c0), "r"(c1) : "memory");
}
// Asks L2 for the 128-byte line holding p (a hint: no result, no fault).
__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p)); }
// Fetches a tensor map (a kernel parameter) into the descriptor cache ahead of its first use.
__device__ __forceinline__ void tma_prefetch_desc(const TmaMap* map) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"((u64)map) : "memory");
}
// Asks for one box of a 2-D tensor map (columns c0.., rows c1..) in L2; nothing is written.
__device__ __forceinline__ void tma_prefetch_2d(const TmaMap* map, int c0, int c1) {
    asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, %2}];\n" ::"l"((u64)map), "r"(c0), "r"(c1)
                 : "memory");
}
// The same box written to the same offset in every CTA of `mask` (this one included), each
// CTA's barrier at `bar`'s offset receiving the bytes.
__device__ __forceinline__ void tma_load_3d_mc(void* dst, const TmaMap* map, u64* bar, int c0, int c1, int c2, u16 mask) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
        " [%0], [%1, {%3, %4, %5}], [%2], %6;\n"
        ::"r"(s_addr(dst)), "l"((u64)map), "r"(s_addr(bar)), "r"(c0), "r"(c1), "r"(c2), "h"(mask) : "memory");
}

// Descriptor of a K-major tile with the 128-byte swizzle: rows of 128 bytes, 8-row groups 1024
// bytes apart (stride byte offset); the leading byte offset is unused in this layout. The tile
// base is 1024-byte aligned; the k-th 16-element slice starts 32 bytes further (+2).
__device__ __forceinline__ u64 sw128_desc(const void* p) {
    u64 addr = s_addr(p);
    return ((addr & 0x3FFFF) >> 4) | ((u64)1 << 16) | ((u64)(1024 >> 4) << 32) | ((u64)1 << 62);
}
// Descriptor of an N-major B tile, written by TMA as 64-column (128-byte) swizzled boxes of
// P_BK rows: 64-column groups P_BK * 128 bytes apart (leading byte offset), 8-row groups 1024
// bytes apart (stride byte offset); the k-th 16-row slice starts 2048 bytes further.
__device__ __forceinline__ u64 sw128_desc_nmajor(const void* p) {
    u64 addr = s_addr(p);
    return ((addr & 0x3FFFF) >> 4) | ((u64)((P_BK * 128) >> 4) << 16) | ((u64)(1024 >> 4) << 32) | ((u64)1 << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait1() { asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory"); }

#define PW_REGS16 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define PW_OUTS16 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define PW_REGS32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define PW_OUTS32 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define PW_REGS64 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define PW_OUTS64 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define PW_REGS128 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"
#define PW_OUTS128 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])

// m64nNk16 with f32 accumulators d (N / 2 per thread), A K-major (imm-trans-a = 0), B K-major
// (TB 0) or N-major (TB 1) from shared memory, imm-scale-a/b = 1, scale-d from a predicate (0 on
// a tile's first MMA). IA is the argument index of desc_a (the number of accumulators).
#define PW_MMA(SHAPE, REGS, OUTS, IA, IB, IS, TYPES, TB)                                                     \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" IS ", 0;\n"                                        \
                 "wgmma.mma_async.sync.aligned." SHAPE ".f32." TYPES " " REGS ", %" IA ", %" IB ", p, 1, 1, 0, " #TB \
                 ";\n}\n"                                                                                 \
                 : OUTS                                                                                   \
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d))

// One m64nNk16 for each type (BF16) and B layout (TB), as the immediates the instruction needs;
// R is the accumulator count per thread (PW_REGS<R> / PW_OUTS<R>, pasted here so that their
// commas reach PW_MMA as one argument).
#define PW_MMA_ANY(SHAPE, R, IA, IB, IS)                                                   \
    if (BF16) {                                                                            \
        if (TB) PW_MMA(SHAPE, PW_REGS##R, PW_OUTS##R, IA, IB, IS, "bf16.bf16", 1);         \
        else PW_MMA(SHAPE, PW_REGS##R, PW_OUTS##R, IA, IB, IS, "bf16.bf16", 0);            \
    } else {                                                                               \
        if (TB) PW_MMA(SHAPE, PW_REGS##R, PW_OUTS##R, IA, IB, IS, "f16.f16", 1);           \
        else PW_MMA(SHAPE, PW_REGS##R, PW_OUTS##R, IA, IB, IS, "f16.f16", 0);              \
    }

template <int BN, bool BF16, bool TB> struct Wgmma;
template <bool BF16, bool TB> struct Wgmma<32, BF16, TB> {
    static __device__ __forceinline__ void run(float* d, u64 desc_a, u64 desc_b, u32 scale_d) {
        PW_MMA_ANY("m64n32k16", 16, "16", "17", "18")
    }
};
template <bool BF16, bool TB> struct Wgmma<64, BF16, TB> {
    static __device__ __forceinline__ void run(float* d, u64 desc_a, u64 desc_b, u32 scale_d) {
        PW_MMA_ANY("m64n64k16", 32, "32", "33", "34")
    }
};
template <bool BF16, bool TB> struct Wgmma<128, BF16, TB> {
    static __device__ __forceinline__ void run(float* d, u64 desc_a, u64 desc_b, u32 scale_d) {
        PW_MMA_ANY("m64n128k16", 64, "64", "65", "66")
    }
};
template <bool BF16, bool TB> struct Wgmma<256, BF16, TB> {
    static __device__ __forceinline__ void run(float* d, u64 desc_a, u64 desc_b, u32 scale_d) {
        PW_MMA_ANY("m64n256k16", 128, "128", "129", "130")
    }
};

// 16-bit pairs packed into / unpacked from one 32-bit word (lower address in the low half).
// Packing is one conversion instruction per pair, rounding to nearest even as FromF32 does; a
// NaN becomes the type's canonical NaN (FromF32 keeps its sign, which for a sum of products
// means nothing, at a compare and a select per element of every epilogue).
template <typename T> __device__ __forceinline__ u32 pack2(float a, float b);
template <> __device__ __forceinline__ u32 pack2<bf16>(float a, float b) {
    u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(b), "f"(a));
    return r;
}
template <> __device__ __forceinline__ u32 pack2<f16>(float a, float b) {
    u32 r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(b), "f"(a));
    return r;
}
// The pair (a, b) rounded to T by a conversion that applies relu (a NaN stays a NaN).
template <typename T> __device__ __forceinline__ u32 pack2_relu(float a, float b);
template <> __device__ __forceinline__ u32 pack2_relu<bf16>(float a, float b) {
    u32 r;
    asm("cvt.rn.relu.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(b), "f"(a));
    return r;
}
template <> __device__ __forceinline__ u32 pack2_relu<f16>(float a, float b) {
    u32 r;
    asm("cvt.rn.relu.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(b), "f"(a));
    return r;
}
// a * b + c on pairs of T, one rounding.
template <typename T> __device__ __forceinline__ u32 fma2(u32 a, u32 b, u32 c);
template <> __device__ __forceinline__ u32 fma2<bf16>(u32 a, u32 b, u32 c) {
    u32 r;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
}
template <> __device__ __forceinline__ u32 fma2<f16>(u32 a, u32 b, u32 c) {
    u32 r;
    asm("fma.rn.f16x2 %0, %1, %2, %3;\n" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
}
template <typename T> __device__ __forceinline__ float lo_of(u32 v) { return to_f32(T{(u16)(v & 0xFFFFu)}); }
template <typename T> __device__ __forceinline__ float hi_of(u32 v) { return to_f32(T{(u16)(v >> 16)}); }

// Split-K partials: 16-byte stores and loads that bypass L1 (the reducing CTA reads what
// other CTAs wrote, after a fence and an atomic).
__device__ __forceinline__ void st_cg4(float* p, float a, float b, float c, float d) {
    asm volatile("st.global.cg.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
}
__device__ __forceinline__ void ld_cg4_add(const float* p, float& a, float& b, float& c, float& d) {
    float x, y, z, w;
    asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];\n" : "=f"(x), "=f"(y), "=f"(z), "=f"(w) : "l"(p) : "memory");
    a += x, b += y, c += z, d += w;
}

// A consumer warp's 16-row staging tile for coalesced epilogue stores (gemm_sm90p_epi.cuh's
// store_tile_staged, conv_sm90.cu's store_vec_staged): rows of 64 16-bit columns (128 bytes)
// STG_STRIDE = 144 bytes apart, so fragment writes and 16-byte row reads are bank-conflict free.
#define STG_STRIDE 144
#define STG_WARP_BYTES (16 * STG_STRIDE)

// Orders this warp's shared-memory accesses (the asm below is volatile, never moved across it).
__device__ __forceinline__ void warp_sync() { asm volatile("bar.warp.sync 0xffffffff;\n" ::: "memory"); }
// The memory clobbers keep NVVM from moving the residual loads across the staging stores (ptxas
// may still hoist them: global loads and shared stores cannot alias).
__device__ __forceinline__ void sts32(u32 a, u32 v) {
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(a), "r"(v) : "memory");
}
__device__ __forceinline__ void lds128(u32 a, u32& x, u32& y, u32& z, u32& w) {
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n" : "=r"(x), "=r"(y), "=r"(z), "=r"(w) : "r"(a) : "memory");
}
__device__ __forceinline__ u32 lds32(u32 a) {
    u32 v;
    asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(a) : "memory");
    return v;
}
// Makes this thread's shared-memory writes visible to the async proxy (TMA) that reads them next.
__device__ __forceinline__ void fence_proxy_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Stores one box of a 2-D tensor map (columns c0.., rows c1..) from shared memory at `src`; rows
// and columns past the tensor's extents are not written. Completion is tracked by bulk groups.
__device__ __forceinline__ void tma_store_2d(const TmaMap* map, u32 src, int c0, int c1) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"((u64)map),
                 "r"(src), "r"(c0), "r"(c1)
                 : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Waits until this thread's committed bulk stores have read their shared-memory sources.
__device__ __forceinline__ void bulk_wait_read0() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
__device__ __forceinline__ void stg128(void* p, u32 x, u32 y, u32 z, u32 w) {
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "r"(x), "r"(y), "r"(z), "r"(w) : "memory");
}
