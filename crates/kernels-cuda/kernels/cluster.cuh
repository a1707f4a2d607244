#line 1 "cluster.cuh"
// cluster.cuh: the thread block cluster of the running CTA: its rank and size, its barriers and
// reads of another CTA's shared memory (DSMEM). sources.rs puts this file, after prelude.cuh, in
// front of the families that use clusters (the Hopper GEMMs, conv2d and attention through
// sm90_pipe.cuh, sampling, and the tensor-core quantized GEMV). Before sm_90 there are no
// clusters: a CTA is a cluster of one (rank 0, size 1, its barrier the block's, a read its own
// shared memory).

__device__ __forceinline__ u32 cluster_rank() {
#if __CUDA_ARCH__ >= 900
    u32 r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
#else
    return 0;
#endif
}
__device__ __forceinline__ u32 cluster_size() {
#if __CUDA_ARCH__ >= 900
    u32 r;
    asm volatile("mov.u32 %0, %%cluster_nctarank;\n" : "=r"(r));
    return r;
#else
    return 1;
#endif
}
// Every thread of every CTA of the cluster (threads that exited excepted) meets here.
__device__ __forceinline__ void cluster_sync() {
#if __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
#else
    __syncthreads();
#endif
}
// The same where every thread of each warp reaches it at once (the .aligned form). In both,
// shared-memory writes before it are visible to every CTA's reads after it.
__device__ __forceinline__ void cluster_sync_aligned() {
#if __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#else
    __syncthreads();
#endif
}
// `v` (this CTA's shared memory) as CTA `rank` of the cluster holds it.
__device__ __forceinline__ u64 cluster_ld_u64(const u64* v, u32 rank) {
#if __CUDA_ARCH__ >= 900
    u32 ra;
    u64 r;
    const u32 local = (u32)__cvta_generic_to_shared(v);
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(ra) : "r"(local), "r"(rank));
    asm volatile("ld.shared::cluster.u64 %0, [%1];\n" : "=l"(r) : "r"(ra) : "memory");
    return r;
#else
    return *v;
#endif
}
// The address of `p` (this CTA's shared memory) in CTA `rank`'s shared memory, for
// cluster_st_v4: the same offset in that CTA's window of the cluster's shared memory.
__device__ __forceinline__ u32 cluster_map(const void* p, u32 rank) {
#if __CUDA_ARCH__ >= 900
    u32 ra;
    const u32 local = (u32)__cvta_generic_to_shared(p);
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(ra) : "r"(local), "r"(rank));
    return ra;
#else
    return (u32)__cvta_generic_to_shared(p);
#endif
}
// A store to another CTA's shared memory (an address from cluster_map); visible to its threads
// after a cluster barrier (cluster_sync*).
__device__ __forceinline__ void cluster_st_v4(u32 addr, uint4 v) {
#if __CUDA_ARCH__ >= 900
    asm volatile("st.shared::cluster.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z),
                 "r"(v.w)
                 : "memory");
#else
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
#endif
}
// The two halves of cluster_sync_aligned, apart: every CTA arrives (here: it has started, so
// its shared memory may be written by the others after the matching wait), and waits.
__device__ __forceinline__ void cluster_arrive_relaxed_aligned() {
#if __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void cluster_wait_aligned() {
#if __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
#else
    __syncthreads();
#endif
}
