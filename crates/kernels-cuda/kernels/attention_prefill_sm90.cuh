#line 1 "attention_prefill_sm90.cuh"
// attention_prefill_sm90.cuh: the building blocks of attention_prefill_sm90.cu (whose header
// describes the kernel; it follows this file in the module): the kernels' parameter, the TMA
// and cp.async copies, the swizzled tile layout and its wgmma descriptors, wgmma with A from
// registers, the register fence, and the tile and stage counts.

#define FA_ROWS 128    // query rows per CTA (64 per consumer warpgroup)
#define FA_KEYS 128    // keys per tile

// The kernels' one parameter, a grid constant (the tensor maps are read where they lie).
struct alignas(64) PrefillArgs {
    TmaMap kv;   // the cache [slabs, page_size, kv_heads, D] (slab: page * 2 * layers + kv * layers +
                 // layer), boxes of 64 dims x 1 head x 64 tokens, 128-byte swizzle (TMA producer only)
    TmaMap q;    // Q [tokens, q_heads, D], boxes of 64 dims x 1 head x 64 rows, 128-byte swizzle
    AttnArgs a;  // attention_args.cuh
    i64 slots;   // tile slots per head: tokens / 128 + batch
    i32 tma;     // the producer loads with TMA (page_size % 64 == 0; 0: cp.async)
    i32 pad;
};

// One box of a 4-D tensor map (coordinates innermost first) into shared memory at `dst`, the
// bytes counted on `bar`.
__device__ __forceinline__ void fa_tma_4d(u32 dst, const TmaMap* map, u64* bar, int c0, int c1, int c2, int c3) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], [%2];\n"
        ::"r"(dst), "l"((u64)map), "r"(s_addr(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3) : "memory");
}
__device__ __forceinline__ void fa_tma_3d(u32 dst, const TmaMap* map, u64* bar, int c0, int c1, int c2) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];\n"
        ::"r"(dst), "l"((u64)map), "r"(s_addr(bar)), "r"(c0), "r"(c1), "r"(c2) : "memory");
}

__device__ __forceinline__ void fa_cp16(u32 dst, const void* src, bool valid) {
    const int n = valid ? 16 : 0;  // src-size 0 zero-fills the chunk
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n) : "memory");
}
__device__ __forceinline__ void fa_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void fa_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

// Byte offset of 16-byte chunk c of row r in a swizzled tile of R rows (see the top of
// attention_prefill_sm90.cu).
template <int R> __device__ __forceinline__ u32 fa_at(int r, int c) {
    return (u32)((c >> 3) * (R * 128) + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

// Descriptors of a 1024-byte aligned tile at shared address `addr`: K-major with the 128-byte
// swizzle (as sw128_desc), and N-major with 64-column groups FA_KEYS * 128 bytes apart.
__device__ __forceinline__ u64 fa_desc_k(u32 addr) {
    return ((u64)(addr & 0x3FFFF) >> 4) | ((u64)1 << 16) | ((u64)(1024 >> 4) << 32) | ((u64)1 << 62);
}
__device__ __forceinline__ u64 fa_desc_n(u32 addr) {
    return ((u64)(addr & 0x3FFFF) >> 4) | ((u64)((FA_KEYS * 128) >> 4) << 16) | ((u64)(1024 >> 4) << 32) |
           ((u64)1 << 62);
}

// Descriptor d advanced by n 16-byte units, computed where it is used (volatile: the compiler
// would otherwise keep every step's descriptor of the loop live in registers).
__device__ __forceinline__ u64 fa_desc_add(u64 d, u32 n) {
    u64 r;
    asm volatile("add.s64 %0, %1, %2;\n" : "=l"(r) : "l"(d), "l"((u64)n));
    return r;
}

// m64nNk16 with A from registers (4 registers of 16-bit pairs, the mma.sync A layout per warp)
// and an N-major B from shared memory (transpose bit set); accumulates into d (N / 2 floats).
#define FA_RS(SHAPE, REGS, OUTS, A0, A1, A2, A3, IB, IS, TYPES)                                           \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" IS ", 0;\n"                                          \
                 "wgmma.mma_async.sync.aligned." SHAPE ".f32." TYPES " " REGS ", {%" A0 ", %" A1 ", %" A2  \
                 ", %" A3 "}, %" IB ", p, 1, 1, 1;\n}\n"                                                   \
                 : OUTS                                                                                    \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d))
template <int N, bool BF16> struct WgmmaRS;
template <bool BF16> struct WgmmaRS<64, BF16> {
    static __device__ __forceinline__ void run(float* d, const u32* a, u64 desc_b, u32 scale_d) {
        if (BF16) FA_RS("m64n64k16", PW_REGS32, PW_OUTS32, "32", "33", "34", "35", "36", "37", "bf16.bf16");
        else FA_RS("m64n64k16", PW_REGS32, PW_OUTS32, "32", "33", "34", "35", "36", "37", "f16.f16");
    }
};
template <bool BF16> struct WgmmaRS<128, BF16> {
    static __device__ __forceinline__ void run(float* d, const u32* a, u64 desc_b, u32 scale_d) {
        if (BF16) FA_RS("m64n128k16", PW_REGS64, PW_OUTS64, "64", "65", "66", "67", "68", "69", "bf16.bf16");
        else FA_RS("m64n128k16", PW_REGS64, PW_OUTS64, "64", "65", "66", "67", "68", "69", "f16.f16");
    }
};

// Ties registers to this point of the instruction stream (CUTLASS's warpgroup_fence_operand):
// accumulators an asynchronous wgmma writes are neither read before its wait_group nor written
// before it is issued, whatever the compiler's scheduling.
template <int N> __device__ __forceinline__ void fa_fence_regs(float* r) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

// Whether the consumers overlap one tile's S = Q K^T and softmax with the previous tile's P V:
// not at D = 128 with softcap, where the tanh's registers on top of three live tiles of
// accumulators and fragments spilled.
template <int D, bool CAP> struct FaOverlap { static constexpr bool on = !(CAP && D == 128); };

// Tiles of key offsets the producer keeps (more than S: see the V step).
#define FA_ROWOFF 4

// Stages of the (K, V) ring: two at D = 128 (160 KiB of tiles with Q), three at D = 64.
template <int D> struct FaStages { static constexpr int S = D == 128 ? 2 : 3; };
