#line 1 "skinny_rows.cuh"
// skinny_rows.cuh: reading 16-byte pieces of a row for the skinny products (gemm_skinny.cu
// reads rows of B, gemv_nt.cu rows of W): a streaming load and a row piece with zeros past
// the row's end (prelude.cuh's Unpack turns the pieces into floats).

// 16 bytes of one B row as 4 words, through the read-only path without L1 allocation (B is
// read once); the 256-byte L2 prefetch hint keeps DRAM bursts long.
// EARLY: the load is volatile, so the compiler keeps it ahead of a later griddepcontrol.wait
// (gemv_nt.cu issues its first weight loads before it) instead of sinking it to its use.
template <bool EARLY = false> __device__ __forceinline__ void ld_stream16(u32* w, const void* p) {
    if constexpr (EARLY) {
        asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
                     : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3]) : "l"(p));
    } else {
        asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
            : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3]) : "l"(p));
    }
}

// Columns [col, col + V) of one B row into 4 words, zero past N. VEC: one 16-byte load (the
// caller guarantees N % V == 0 and 16-byte alignment, so a vector is all in or all out).
// EARLY: see ld_stream16 (the element loads are plain C++ loads, which the compiler does not
// move across the wait's memory clobber).
template <typename T, bool VEC, bool EARLY = false>
__device__ __forceinline__ void load_row(u32* w, const T* row, i64 col, i64 n) {
    constexpr int V = 16 / sizeof(T);
    if constexpr (VEC) {
        if (col < n) {
            ld_stream16<EARLY>(w, row + col);
        } else {
#pragma unroll
            for (int i = 0; i < 4; ++i) w[i] = 0;
        }
    } else if constexpr (sizeof(T) == 4) {
#pragma unroll
        for (int v = 0; v < V; ++v) w[v] = col + v < n ? reinterpret_cast<const u32*>(row)[col + v] : 0u;
    } else {
        const u16* r16 = reinterpret_cast<const u16*>(row);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const u32 lo = col + 2 * i < n ? r16[col + 2 * i] : 0u;
            const u32 hi = col + 2 * i + 1 < n ? r16[col + 2 * i + 1] : 0u;
            w[i] = lo | (hi << 16);
        }
    }
}
