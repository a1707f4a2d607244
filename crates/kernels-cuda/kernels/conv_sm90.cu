#line 1 "conv_sm90.cu"
// conv_sm90.cu: conv2d forward on Hopper (sm_90a) as an implicit GEMM on wgmma tensor cores fed
// by TMA, with the epilogue (the conv's bias, then prelude.cuh's: bias, activation, clamp,
// beta * residual) applied in registers.
//
// GEMM view: out[M, K] = A[M, R*S*C] x B[R*S*C, K], where M = N*P*Q output pixels (the rows of
// the NHWC output), K = output channels, A is the im2col matrix of the NHWC input (never
// materialised) and B the filter as the graph holds it, RSCF ([R, S, C, K]: row (r, s, c) holds
// the K output channels), so no filter transform is needed. The reduction runs tap by tap
// (r, s), and within a tap over C in 64-channel (128-byte) slices.
//
// A: one TMA load in im2col mode per (tile, r, s, channel slice) brings 128 consecutive output
//    pixels x 64 channels. The tensor map (launch/conv_sm90.rs) describes the input [N, H, W, C]
//    with the conv's stride as the traversal stride and a pixel bounding box from -pad to the
//    last window corner, so walking 128 pixels from the tile's first one follows the output's
//    row-major (n, p, q) order across rows and images; the instruction's im2col offsets
//    (s * dilation_w, r * dilation_h) move every pixel to tap (r, s). Padding, channels past C
//    and pixels past the last image are zero-filled by TMA. K-major, 128-byte swizzle.
// B: tiled TMA over the filter viewed as [R*S, C, K]: boxes of 64 channels (rows) x 64 output
//    channels (columns, 128 bytes) x 1 tap, BN / 64 of them side by side per k-step (boxes
//    wholly past K are not loaded; their stale columns only feed accumulators that are never
//    stored). Channels past C and output channels past K are zero-filled. This is the N-major
//    operand of wgmma (imm-trans-b = 1) with the 128-byte swizzle, exactly as gemm_sm90.cu reads
//    a row-major B: 64-column groups BK * 128 bytes apart, 8-row groups 1024 bytes apart.
//
// Block: 3 warpgroups (4 in the 192-row form). Warpgroup 0 is the producer (setmaxnreg.dec to
// 40; one thread issues the TMA loads into a ring of STAGES buffers guarded by full/empty
// mbarriers); warpgroups 1 and 2
// each compute 64 rows of the 128 x BN tile with m64nBNk16 wgmma into BN/2 f32 registers per
// thread (setmaxnreg.inc to 232). BN is 64, 128 or 256 (chosen per shape on the host). In the
// ping-pong form (BN <= 128, chosen by the host when every block has several tiles, or one long
// 64-wide one, which one warpgroup then computes alone) warpgroups 1
// and 2 instead take alternate tiles whole (two m64 wgmmas per k16 step, BN f32 registers per
// thread), so that one's epilogue overlaps the other's mainloop; a stage then has 4 readers.
// In the 256-row form (WIDE, BN <= 128, chosen by the host where bigger tiles cost less) a tile
// is 256 rows: each consumer warpgroup computes 128 of them as two m64 halves, and one TMA load
// brings the 256 rows of A. In the 192-row form (TRIO, BN = 128, chosen by the host where such
// tiles fill the grid's last wave) the block has three consumer warpgroups (512 threads; the
// consumers' registers raised to 152), each computing 64 rows as in the cooperative form.
// The grid is persistent: block b takes tiles b, b + gridDim.x, ... (column tile fastest, so
// the blocks running at once share activation rows in L2). The ring and its phase bits run on
// across tiles (producer and consumers walk the same (tile, k-step) sequence), so the producer
// loads the next tile while the consumers run the epilogue of the current one. A stage is
// handed back (empty barrier: lane 0 of every consumer warp that read it) only once the wgmmas
// that read it have completed (wgmma.wait_group), so a refill never overwrites data still being read.
// Shared memory is written only by TMA and read only by wgmma (both async proxy, ordered by the
// full barrier's complete_tx); nothing is written through the generic proxy, so no
// fence.proxy.async is needed. The epilogue (conv bias, bias, activation, clamp, beta * residual)
// runs in registers; the results leave through a per-warp shared-memory staging tile as 16-byte
// vectors (store_vec_staged; the staging area lies past the barriers, which the ring never
// touches) or, where the output is not 16-byte aligned, as pairs straight from the fragments.
// A 16-byte aligned residual is then added on the way out, read as 16-byte vectors
// (store_vec_residual, staged == 3) instead of as pairs in the fragments' scattered layout.
// Rows past M and columns past K are not stored.
//
// Split-K (args.splits > 1, chosen by the launcher for problems with few output tiles and long
// reductions): the work units are (tile, split) pairs, split fastest; split j of a tile reduces
// k-steps [j * ktiles / splits, (j + 1) * ktiles / splits) (never empty: splits <= ktiles) and
// stores its raw f32 accumulators to its own plane of the workspace [splits, M, K] (paired
// 8-byte stores, no atomics); conv_sm90_aux.cu's reduce kernel sums the planes in split order
// and applies the epilogue. The ring runs on across units exactly as across tiles.
//
// Residual prefetch (args.prefetch bits 0 and 1, unsplit convs with a 16-byte aligned residual that
// is not loaded into the ring, see below): when the producer starts a tile it asks for the tile's
// residual rows in L2 (cp.async.bulk.prefetch.tensor over a 2-D map of the residual [M, K], one
// 64-column x 128-row box per B box), so the epilogue's residual loads, issued in chunks of several
// column groups at once, hit L2 instead of waiting on DRAM. Where the residual is read as 16-byte
// vectors (staged == 3) and a consumer holds at most 64 accumulators a thread, each consumer warp
// loads its rows of the tile's residual into registers when it starts the tile (ResidualRows in
// conv_sm90.cuh), so the epilogue does not wait on them; otherwise, with args.prefetch bit 1
// (unsplit convs with a residual), each consumer warp asks for its own 16 rows when it starts the
// tile, one 128-byte line per lane, so those lines arrive during the mainloop whatever the
// producer's lead. The producer's prefetch is left out for residuals above half of L2 (it runs up
// to a ring ahead and evicted lines before their use). A prefetch only warms L2: it changes no
// result.
//
// Residual in the ring (args.prefetch bit 3, the launcher's default for unsplit convs whose
// residual is read as 16-byte vectors, staged == 3; the seed's C prefetch): after a tile's last
// k-step the producer takes the next RS ring slots and loads the tile's residual into them by TMA
// (map_r with 64 x 64 boxes, 8 KB each, packed STAGE_BYTES / 8 KB to a slot: RS = 1 for 128 x 64
// and 128 x 128 tiles, 2 for 192 x 128 and 128 x 256). The loads are issued while the consumers
// still run the tile's last STAGES - RS k-steps, so the residual is in shared memory when the
// epilogue starts; the consumers wait on the slots' full barriers after their mainloop, read their
// rows from there (RingResidual in conv_sm90.cuh) and hand the slots back after their stores, as
// they do k-step slots. The next tile's loads then start RS slots later. Not in the forms holding
// 128 accumulators a thread in two halves (ping-pong and 256-row tiles 128 wide: their epilogue
// spilled with it); the launcher never asks for it there.
//
// Residual buffer (args.prefetch bit 4, with bits 3 and 5; the lean entries, where shared memory
// has room): the tile's residual goes to a buffer of its own past the ring's barriers instead of
// to ring slots, so the next tile's k-steps no longer wait behind it for slots (the 14x14
// 256 -> 1024 ResNet block, three tiles a block: 14.2 against 14.4 us on an H100). Boxes lie 8 KB
// apart in box order, which is the ring's slot layout read from slot 0 (a stage is a whole number
// of boxes), so the epilogue is the ring's with its first slot moved there. Its own barriers: a
// full one per 64-row block (its TMA bytes: each consumer warpgroup waits for its own rows only)
// and an empty one (the consumer warps, once their TMA stores have read it). The producer loads
// it after the tile's last k-step, as it did the ring slots: loaded 2 to 13 k-steps earlier, it
// made the 28x28 3x3 block slower (15.9 -> 16.7-17.0 us on an H100), its mainloop being bound by
// L2 traffic, to which the residual's bytes then add.
//
// Results in place (args.prefetch bit 5, the launcher's default for the lean entries with the
// residual in the ring; conv_sm90.cuh's ring_out): each lane reads its fragment's residual pairs
// where they lie in the slots, writes its results over them in the same swizzled layout, and
// each warp stores its 16 rows from there: as 16-byte vectors (bit 7, the default without
// clusters), or lane 0 by TMA (a 2-D map of the output with 64 x 16 boxes), then waiting until
// the stores have read the slots before they go back to the producer. No staging buffer. With
// relu, bit 16 (the default) and beta exact in the element type, relu's output is rounded to it
// before beta * r is added on pairs (ring_out's packed arithmetic).
//
// Clusters of two (CL = 2: 192-row tiles, or 128 x 64 ping-pong tiles without an epilogue; unsplit,
// an even number of column tiles; the `_c2` entries): the CTAs of a cluster take the two column tiles of a
// pair of the same row tile, and each loads half of every k-step's A tile (96 or 64 rows, its
// own map with boxes of that many rows) multicast to both, so the activations cross L2 once per
// pair instead of once per column tile (cuDNN's kernel for the 28x28 1x1 512 -> 256 ResNet
// layer does the same: ncu showed it moving 76 MB through L2 against our 91). A stage's full
// barrier counts the whole A tile and this CTA's B boxes; its empty barrier counts the consumer
// warps of both CTAs (each producer writes into the peer's stage; in the ping-pong form the two
// CTAs' consumers c take the same units, the pair's tiles). The CTAs meet at a cluster barrier
// before the first load and before leaving.
//
// Short tiles (args.prefetch bits 8-15 nonzero: TM rows, a multiple of 16 below 128; plain
// ping-pong entries, unclustered, chosen by the launcher where every block has one unit): row
// tile mt covers rows mt * TM .. + TM - 1, so that more blocks share the rows and each loads
// fewer bytes per k-step. A's map has boxes of TM pixels; the stage keeps its 128-row layout,
// whose last 128 - TM rows are not loaded (stale): the MMAs still compute 128 rows, and the warps
// whose 16 rows lie past TM store nothing.
//
// Tiled A (args.tiled_a): a 1x1 conv with stride 1 and no padding reads x as the plain matrix
// [M, C]; map_a is then a tiled 2-D map with 64-channel x 128-row boxes and the same 128-byte
// swizzle, so the shared-memory tile is the same (rows past M are zero-filled).
//
// Requirements (checked by the launcher, which falls back otherwise): bf16/f16; C % 8 == 0 and
// K % 8 == 0 (16-byte TMA strides); 16-byte aligned input and filter, 4-byte aligned output,
// bias and residual (paired accesses); stride <= 8; padding and the bounding box within the
// im2col corner range [-128, 127]; dilated taps (r - 1) * dilation <= 255; extents below 2^31.

// The tile's 128 (or 256) pixels x 64 channels of the input in im2col mode: coordinates
// (c, w, h, n) of the tile's first window corner, offsets (w, h) of the tap.
__device__ __forceinline__ void tma_im2col(void* dst, const TmaMap* map, u64* bar, int c, int w, int h, int n, u16 ow,
                                           u16 oh) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4, %5, %6}], [%2], {%7, %8};\n"
        ::"r"(s_addr(dst)), "l"((u64)map), "r"(s_addr(bar)), "r"(c), "r"(w), "r"(h), "r"(n), "h"(ow), "h"(oh)
        : "memory");
}
// The same load written to the same offset in both CTAs of a cluster of two, each CTA's barrier
// at `bar`'s offset receiving the bytes (and the tiled 2-D form of it).
__device__ __forceinline__ void tma_im2col_mc2(void* dst, const TmaMap* map, u64* bar, int c, int w, int h, int n,
                                               u16 ow, u16 oh) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes.multicast::cluster"
        " [%0], [%1, {%3, %4, %5, %6}], [%2], {%7, %8}, %9;\n"
        ::"r"(s_addr(dst)), "l"((u64)map), "r"(s_addr(bar)), "r"(c), "r"(w), "r"(h), "r"(n), "h"(ow), "h"(oh),
        "h"((u16)3)
        : "memory");
}
__device__ __forceinline__ void tma_load_2d_mc2(void* dst, const TmaMap* map, u64* bar, int c0, int c1) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
        " [%0], [%1, {%3, %4}], [%2], %5;\n"
        ::"r"(s_addr(dst)), "l"((u64)map), "r"(s_addr(bar)), "r"(c0), "r"(c1), "h"((u16)3)
        : "memory");
}

// Stages of the ring per column tile width: (128 + BN) x 64 16-bit elements each (192 KB in
// all), within the 227 KB of shared memory a block may have. launch/conv_sm90.rs mirrors this.
// The 256-row form (WIDE) has 256 + BN rows a stage: 5 stages for BN = 64, 4 for 128 (200 and
// 192 KB).
// The 192-row form (TRIO, three consumer warpgroups) has 192 + BN rows a stage and 12 warps'
// staging buffers (30 KB): 4 stages for BN = 128 (160 KB).
template <int BN, int FORM> struct Ring {
    static const int stages = FORM >= 2 ? (BN == 128 ? 4 : 5) : BN == 256 ? 4 : BN == 128 ? 6 : 8;
};

// Hands a stage back: one arrival per consumer warp that read it (lane 0, once every lane has
// passed the wgmma.wait_group that retired the warp's MMAs reading it): 8 in all, or the 4 of
// one warpgroup in the ping-pong form, as gemm_sm90p.cu does (one per thread, 256, measured the
// same on an H200).
// In a cluster of two (CL = 2) the stage goes back to both CTAs' producers: each writes half of
// every stage's A tile into both CTAs.
template <int CL> __device__ __forceinline__ void release_stage(u64* empty, int lane) {
    __syncwarp();
    if (lane == 0) {
        if (CL == 1) mbar_arrive(empty);
        else
            for (u32 r = 0; r < (u32)CL; ++r) mbar_arrive_cluster(empty, r);
    }
}

// The tile of work unit `unit` for the CTA of rank `rank` in a cluster of CL: unit u is the
// pair (row tile u / (n_tiles / CL), column tiles CL * (u % (n_tiles / CL)) + 0 .. CL - 1).
template <int CL> __device__ __forceinline__ int unit_tile(int unit, int n_tiles, int rank) {
    const int pairs = n_tiles / CL, mt = unit / pairs;
    return mt * n_tiles + CL * (unit - mt * pairs) + rank;
}

// The residual buffer's load for one tile (p.prefetch bit 4, the producer's thread): once the
// consumers have handed back the previous tile's (empty barrier, parity `ph`), its boxes of 64
// rows x 64 columns in box order, row block major, each row block's on a full barrier of its own
// (full[rb]: consumer warpgroup rb's rows), so the first warpgroups start their epilogue while the
// last boxes arrive. Boxes wholly past M or K are not loaded.
template <int BM, int BN>
__device__ __forceinline__ void load_residual_buf(u8* buf, u64* full, u64* empty, u32 ph, const TmaMap* map_r,
                                                  const ConvArgs& p, int n0, i64 m0) {
    mbar_wait_spin(empty, ph ^ 1);
    const int cols = min(BN / 64, (p.k - n0 + 63) / 64);
    for (int rb = 0; rb < BM / 64; ++rb) {
        const i64 row = m0 + 64 * rb;
        const int n = row < p.m ? cols : 0;
        mbar_expect_tx(&full[rb], n * CV_RBOX);
        for (int cb = 0; cb < n; ++cb)
            tma_load_2d(buf + (rb * (BN / 64) + cb) * CV_RBOX, map_r, &full[rb], n0 + 64 * cb, (int)row);
    }
}

// EPI (conv_sm90.cuh): CV_PLAIN where the launch has no epilogue (no bias, activation, clamp or
// residual), no split-K, so the tile's end is only the conversion and the
// stores; CV_LEAN where it has the ResNet pattern only (biases, relu, the residual in the ring);
// CV_FULL otherwise. A short tile (one per block on most ResNet layers) runs its epilogue once
// with a cold instruction cache; in the general kernel that path jumps across the code of every
// epilogue option, and the misses cost more than the stores (ncu: "no instruction" stalls at
// each jump).
// PP (ping-pong, BN <= 128): the two consumer warpgroups take alternate work units of the block,
// each computing all 128 rows of its unit (two m64 wgmmas per k16 step, 2 x BN / 2 accumulators),
// so one warpgroup's epilogue runs while the other's MMAs do. Without it (cooperative) both
// take every unit, 64 rows each. The producer's loads are the same either way.
// CL (1 or 2, the launch's cluster size; 2 with 192-row tiles and 128 x 64 ping-pong ones only):
// the two CTAs of a cluster take the two column tiles of a pair (2j, 2j + 1) of the same row
// tile, and each loads half of every k-step's A tile multicast to both, so the activations
// cross L2 once per pair (see the header).
template <typename T, bool BF16, int BN, int EPI, int FORM, int CL>
__device__ __forceinline__ void conv_sm90(const TmaMap* map_a, const TmaMap* map_b, const TmaMap* map_r,
                                          const TmaMap* map_o, const ConvArgs& p) {
    // FORM 0: cooperative, 1: ping-pong (PP), 2: tiles of 256 rows (WIDE), 3: tiles of 192 rows
    // over three consumer warpgroups (TRIO; see the header).
    constexpr bool PP = FORM == 1, WIDE = FORM == 2, TRIO = FORM == 3;
    constexpr bool PLAIN = EPI == CV_PLAIN, FULL = EPI == CV_FULL;
    constexpr int CONSUMERS = TRIO ? 3 : 2;
    constexpr int BM = WIDE ? 2 * CV_BM : TRIO ? 3 * 64 : CV_BM;
    constexpr int A_BYTES = BM * CV_BK * 2;
    constexpr int STAGES = Ring<BN, FORM>::stages;
    constexpr int STAGE_BYTES = A_BYTES + (BN / 64) * CV_B_BOX_BYTES;
    extern __shared__ u8 raw_smem[];
    // Stage buffers start on a 1024-byte boundary (the swizzle pattern repeats every 1024 bytes).
    u8* smem = (u8*)(((u64)raw_smem + 1023) & ~(u64)1023);
    u64* full = (u64*)(smem + STAGES * STAGE_BYTES);
    u64* empty = full + STAGES;
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
    const int ktiles = p.taps * p.c_tiles;
    static_assert(CL == 1 || TRIO || PP && BN == 64, "clusters of two with 192-row or ping-pong 64-wide tiles only");
    // Clustered: work units are pairs of column tiles (unsplit, n_tiles even), cluster
    // blockIdx.x / 2 taking units blockIdx.x / 2, + gridDim.x / 2, ...; the rank within the
    // cluster is blockIdx.x % 2 (clusters are consecutive blocks of the 1-D grid).
    const int units = p.tiles * p.splits / CL;
    const int rank = CL > 1 ? (int)(blockIdx.x % CL) : 0;
    // The residual tile in the ring (p.prefetch bit 3): RS slots after each tile's k-steps, PER
    // 64 x 64 boxes a slot. Not with 128 accumulators a thread in two halves (ping-pong and
    // 256-row tiles 128 wide), whose epilogue then spilled (the launcher never asks for it there).
    constexpr int PER = STAGE_BYTES / CV_RBOX, RBOXES = (BM / 64) * (BN / 64), RS = (RBOXES + PER - 1) / PER;
    constexpr bool RING_OK = !PLAIN && !((PP || WIDE) && BN == 128);
    const bool rring = RING_OK && (p.prefetch & 8);
    static_assert(STAGE_BYTES % CV_RBOX == 0 && RS <= STAGES, "a slot holds whole residual boxes");
    // The residual's own buffer (p.prefetch bit 4, lean entries only): RBOXES boxes, 1024 bytes
    // past the ring (room for the ring's barriers), its barriers just before it.
    // With the TMA stores only (bit 5): the staging buffer of the other stores overlaps it.
    const bool rbuf = EPI == CV_LEAN && RING_OK && rring && (p.prefetch & 48) == 48;
    u8* resbuf = smem + STAGES * STAGE_BYTES + 1024;
    u64* rempty = (u64*)resbuf - 1 - BM / 64;
    u64* rfull = rempty + 1;  // one a row block of 64 rows
    // Rows per tile: BM, or fewer (a multiple of 16, args.prefetch bits 8-15) for plain ping-pong
    // tiles, so that more, shorter tiles fill the grid; the A tile's last BM - TM rows are then
    // never loaded and their accumulators never stored.
    const int TM = PP && PLAIN && CL == 1 && (p.prefetch >> 8) ? (p.prefetch >> 8) & 255 : BM;
    if (threadIdx.x == 0) {
        tma_prefetch_desc(map_a);
        tma_prefetch_desc(map_b);
        if (p.prefetch & 9) tma_prefetch_desc(map_r);
        if (p.prefetch & 32) tma_prefetch_desc(map_o);
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], PP ? 4 * CL : 4 * CONSUMERS * CL);
        }
        if (rbuf) {
            for (int rb = 0; rb < BM / 64; ++rb) mbar_init(&rfull[rb], 1);
            mbar_init(rempty, 4 * CONSUMERS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    // The peer's barriers are initialised before anything is multicast or arrived on them.
    if (CL > 1) cluster_sync();
    else __syncthreads();
    if (p.prefetch & 4) {
        // Launched under programmatic stream serialization (unless MAX_CONV_SM90_PDL=0), the
        // grid may start while the stream's previous kernel drains: nothing in global memory is
        // read or written before this wait (the setup above touches shared memory and the kernel's
        // parameters only). The next such grid may then launch; its blocks start on the SMs
        // this grid's blocks leave.
        asm volatile("griddepcontrol.wait;\n" ::: "memory");
        asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
    }
    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        if (tid == 0) {
            int stage = 0;
            u32 phase = 0, rphase = 0;
            for (int unit = blockIdx.x / CL; unit < units; unit += gridDim.x / CL) {
                const int tile = CL > 1 ? unit_tile<CL>(unit, p.n_tiles, rank) : unit / p.splits;
                const int split = CL > 1 ? 0 : unit - tile * p.splits;
                const int k0 = (int)((i64)split * ktiles / p.splits), k1 = (int)((i64)(split + 1) * ktiles / p.splits);
                const int mt = tile / p.n_tiles, n0 = (tile - mt * p.n_tiles) * BN;
                // B boxes holding at least one output channel below K.
                const int boxes = min(BN / 64, (p.k - n0 + 63) / 64);
                const u32 bytes = TM * CV_BK * 2 + boxes * CV_B_BOX_BYTES;
                // The tile's first output pixel (image, row, column) and its window corner; in a
                // cluster, those of this CTA's half of the A tile.
                const i64 m0 = (i64)mt * TM, mh = m0 + rank * (BM / CL);
                const int img = (int)(mh / p.pq);
                const int rem = (int)(mh - (i64)img * p.pq);
                const int oy = rem / p.q, ox = rem - (rem / p.q) * p.q;
                const int h0 = oy * p.sh - p.ph, w0 = ox * p.sw - p.pw;
                if (FULL && (p.prefetch & 1))
                    for (int j = 0; j < boxes; ++j) {
                        tma_prefetch_2d(map_r, n0 + 64 * j, (int)m0);
                        if (BM > 128) tma_prefetch_2d(map_r, n0 + 64 * j, (int)m0 + 128);
                    }
                // The k-step's tap t = (r, s) and channel slice ct, advanced by counting: this one
                // thread issues every load of the block, and per-step divisions made it the
                // pipeline's bottleneck on short tiles (consumers waited on full stages while it
                // never waited on an empty one).
                int t = k0 / p.c_tiles, ct = k0 - t * p.c_tiles;
                int r = t / p.s, s = t - r * p.s;
                int ow = s * p.dw, oh = r * p.dh;
                for (int kt = k0; kt < k1; ++kt) {
                    mbar_wait_spin(&empty[stage], phase ^ 1);
                    u8* sa = smem + stage * STAGE_BYTES;
                    mbar_expect_tx(&full[stage], bytes);
                    if (CL > 1) {
                        u8* half = sa + rank * (A_BYTES / CL);
                        if (p.tiled_a) tma_load_2d_mc2(half, map_a, &full[stage], ct * CV_BK, (int)mh);
                        else tma_im2col_mc2(half, map_a, &full[stage], ct * CV_BK, w0, h0, img, (u16)ow, (u16)oh);
                    } else if (p.tiled_a) {
                        tma_load_2d(sa, map_a, &full[stage], ct * CV_BK, (int)m0);
                    } else {
                        tma_im2col(sa, map_a, &full[stage], ct * CV_BK, w0, h0, img, (u16)ow, (u16)oh);
                    }
                    for (int j = 0; j < boxes; ++j)
                        tma_load_3d(sa + A_BYTES + j * CV_B_BOX_BYTES, map_b, &full[stage], n0 + 64 * j, ct * CV_BK, t);
                    if (++stage == STAGES) stage = 0, phase ^= 1;
                    if (++ct == p.c_tiles) {
                        ct = 0, ++t, ++s, ow += p.dw;
                        if (s == p.s) s = 0, ow = 0, ++r, oh += p.dh;
                    }
                }
                // The tile's residual into its buffer or the next RS slots (boxes wholly past M or
                // K are not loaded: the epilogue stores nothing there).
                if (rbuf) {
                    load_residual_buf<BM, BN>(resbuf, rfull, rempty, rphase, map_r, p, n0, m0);
                    rphase ^= 1;
                } else if (rring) {
                    for (int j = 0; j < RS; ++j) {
                        mbar_wait_spin(&empty[stage], phase ^ 1);
                        u8* sr = smem + stage * STAGE_BYTES;
                        u32 rbytes = 0;
                        for (int i = j * PER; i < min(RBOXES, (j + 1) * PER); ++i)
                            if (n0 + 64 * (i % (BN / 64)) < p.k && m0 + 64 * (i / (BN / 64)) < p.m) rbytes += CV_RBOX;
                        mbar_expect_tx(&full[stage], rbytes);
                        for (int i = j * PER; i < min(RBOXES, (j + 1) * PER); ++i) {
                            const int col = n0 + 64 * (i % (BN / 64));
                            const i64 row = m0 + 64 * (i / (BN / 64));
                            if (col < p.k && row < p.m)
                                tma_load_2d(sr + (i - j * PER) * CV_RBOX, map_r, &full[stage], col, (int)row);
                        }
                        if (++stage == STAGES) stage = 0, phase ^= 1;
                    }
                }
            }
        }
        // No CTA of a cluster leaves while its peer may still write into it or arrive on it.
        if (CL > 1) cluster_sync();
        return;
    }
    // Three consumer warpgroups: 40 + 3 x 152 of the 4 x 128 registers a thread the launch holds
    // (without the increase ptxas spilled the epilogue of the 192-row form).
    if (TRIO) asm volatile("setmaxnreg.inc.sync.aligned.u32 152;\n");
    else asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    // Cooperative (and TRIO, c = 0..2): consumer c takes rows 64c..64c+63 of every unit.
    // Ping-pong: consumer c takes the block's units c, c + 2, ... whole (rows 0..63 into d[0],
    // 64..127 into d[1]). WIDE: consumer c takes rows 128c..128c+127 of every unit (d[0] and
    // d[1] 64 rows each).
    const int c = wg - 1;
    constexpr int HALVES = PP || WIDE ? 2 : 1;
    constexpr bool PRE = Preload<BN, HALVES, TRIO ? 128 : 168>::on;
    const int warp = tid / 32, lane = tid % 32;
    u8* staging = (u8*)(empty + STAGES);
    float d[HALVES][BN / 2];
#pragma unroll
    for (int h = 0; h < HALVES; ++h)
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) d[h][i] = 0.f;
    int stage = 0;
    u32 phase = 0;
    int local = 0;  // the unit's index among this block's
    for (int unit = blockIdx.x / CL; unit < units; unit += gridDim.x / CL, ++local) {
        const int tile = CL > 1 ? unit_tile<CL>(unit, p.n_tiles, rank) : unit / p.splits;
        const int split = CL > 1 ? 0 : unit - tile * p.splits;
        const int k0 = (int)((i64)split * ktiles / p.splits), k1 = (int)((i64)(split + 1) * ktiles / p.splits);
        if (PP && (local & 1) != c) {
            // The other consumer's unit: its k-steps pass this one's place in the ring by.
            const int n = stage + (k1 - k0) + (rring ? RS : 0);
            phase ^= (u32)(n / STAGES) & 1u;
            stage = n % STAGES;
            continue;
        }
        const int mt = tile / p.n_tiles, n0 = (tile - mt * p.n_tiles) * BN;
        const i64 row_w = (i64)mt * TM + (PP ? 0 : WIDE ? c * 128 : c * 64) + warp * 16;  // this warp's first row
        ResidualRows<T, BN> res[HALVES];
        LeanBias<T, BN> lb;
        if (EPI == CV_LEAN && BN <= 128 && (p.prefetch & 64)) lb.load(p, n0 + (lane % 4) * 2);
        if (FULL && PRE && p.staged == 3 && !rring) {
#pragma unroll
            for (int h = 0; h < HALVES; ++h) res[h].load(p, row_w + 64 * h, n0, lane);
        } else if (FULL && (p.prefetch & 2)) {
#pragma unroll
            for (int h = 0; h < HALVES; ++h) prefetch_residual_rows<T, BN>(p, row_w + 64 * h, n0, lane);
        }
        // Ping-pong: the mainloops run one at a time in unit order (named barrier 1 + c: this
        // consumer's turn; the other arrives there when its mainloop is done). Waiting on a
        // full barrier is then never two phases ahead of it: a consumer that ran ahead past
        // the other's k-steps would see a parity it wants in a phase not yet its own.
        if (PP && local > 0) named_sync(1 + c, 256);
        int prev = 0;
        for (int kt = k0; kt < k1; ++kt) {
            mbar_wait_spin(&full[stage], phase);
            const u8* sa = smem + stage * STAGE_BYTES + (PP ? 0 : WIDE ? c * (128 * 128) : c * (64 * 128));
            const u8* sb = smem + stage * STAGE_BYTES + A_BYTES;
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < CV_BK / 16; ++kk)
#pragma unroll
                for (int h = 0; h < HALVES; ++h)
                    Wgmma<BN, BF16, true>::run(d[h], sw128_desc(sa + h * (64 * 128)) + 2 * kk,
                                               sw128_desc_nmajor(sb) + kk * (2048 >> 4), (kt > k0 || kk > 0) ? 1u : 0u);
            wgmma_commit();
            // Keep this k-step's MMAs in flight; once the previous step's have finished, its
            // stage can be refilled.
            wgmma_wait1();
            if (kt > k0) release_stage<CL>(&empty[prev], lane);
            prev = stage;
            if (++stage == STAGES) stage = 0, phase ^= 1;
        }
        wgmma_wait0();
        release_stage<CL>(&empty[prev], lane);
        if (PP && unit + (int)gridDim.x / CL < units) named_arrive(2 - c, 256);  // the other's turn
        const int rstage = stage;
        if (rbuf) {
            mbar_wait_spin(&rfull[c], (u32)local & 1u);  // this warpgroup's rows (the lean forms: 64c..)
        } else if (rring) {
            for (int j = 0; j < RS; ++j) {
                mbar_wait_spin(&full[stage], phase);
                if (++stage == STAGES) stage = 0, phase ^= 1;
            }
        }
#pragma unroll
        for (int h = 0; h < HALVES; ++h) {
            const int tr = (int)(row_w - (i64)mt * TM) + 64 * h;  // the warp's first row within the tile
            if (PP && PLAIN && tr >= TM) continue;  // rows of the next short tile
            // The residual buffer is the ring's layout from slot 0 (see the header).
            const RingResidual<BN, STAGES, STAGE_BYTES, RING_OK, CL == 1> ring = {
                rbuf ? s_addr(resbuf) : s_addr(smem), rbuf ? 0 : rstage, tr, map_o};
            tile_out<T, BN, EPI, PRE>(d[h], staging, p, row_w + 64 * h, n0, split, c * 4 + warp, lane, res[h], ring, lb);
        }
        if (rring) {
            // The residual's slots go back to the producer, whose TMA (the async proxy) refills
            // them: order this warp's shared-memory reads of them before its arrival.
            fence_proxy_async_smem();
            if (rbuf) release_stage<1>(rempty, lane);
            else
                for (int j = 0; j < RS; ++j) release_stage<CL>(&empty[(rstage + j) % STAGES], lane);
        }
    }
    if (CL > 1) cluster_sync();
}

#define CONV_ENTRY(NAME, T, BF16, BN, EPI, FORM, CL)                                                     \
    extern "C" __global__ void __launch_bounds__(FORM == 3 ? 512 : 384, 1)                               \
        NAME(const __grid_constant__ TmaMap map_a, const __grid_constant__ TmaMap map_b,                 \
             const __grid_constant__ TmaMap map_r, const __grid_constant__ TmaMap map_o, ConvArgs p) {    \
        CONV_BODY(T, BF16, BN, EPI, FORM, CL)                                                         \
    }
// wgmma and setmaxnreg exist on sm_90a only; on any other target the entry points trap (the
// launcher never uses them there), so a wrong launch fails loudly instead of leaving `out` unset.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define CONV_BODY(T, BF16, BN, EPI, FORM, CL) conv_sm90<T, BF16, BN, EPI, FORM, CL>(&map_a, &map_b, &map_r, &map_o, p);
#else
#define CONV_BODY(T, BF16, BN, EPI, FORM, CL) asm volatile("trap;");
#endif
// sources.rs builds four families from this file, one per element type (CV_BF16 defined or
// not) and form (CV_PP: the ping-pong and 256-row entries), so that a process compiles only
// what it runs.
#if defined(CV_BF16)
#define CV_ENTRY_CL(NAME, BN, EPI, FORM, CL) CONV_ENTRY(conv_sm90_bf16_##NAME, bf16, true, BN, EPI, FORM, CL)
#else
#define CV_ENTRY_CL(NAME, BN, EPI, FORM, CL) CONV_ENTRY(conv_sm90_f16_##NAME, f16, false, BN, EPI, FORM, CL)
#endif
#define CV_ENTRY(NAME, BN, EPI, FORM) CV_ENTRY_CL(NAME, BN, EPI, FORM, 1)
#if defined(CV_PP)
CV_ENTRY(n64_pp, 64, CV_FULL, 1)
CV_ENTRY(n128_pp, 128, CV_FULL, 1)
CV_ENTRY(n64_pp_plain, 64, CV_PLAIN, 1)
CV_ENTRY_CL(n64_pp_plain_c2, 64, CV_PLAIN, 1, 2)
CV_ENTRY(n128_pp_plain, 128, CV_PLAIN, 1)
CV_ENTRY(n64_w, 64, CV_FULL, 2)
CV_ENTRY(n128_w, 128, CV_FULL, 2)
CV_ENTRY(n64_w_plain, 64, CV_PLAIN, 2)
CV_ENTRY(n128_w_plain, 128, CV_PLAIN, 2)
CV_ENTRY(n128_t, 128, CV_FULL, 3)
CV_ENTRY(n128_t_plain, 128, CV_PLAIN, 3)
CV_ENTRY(n128_t_lean, 128, CV_LEAN, 3)
CV_ENTRY_CL(n128_t_plain_c2, 128, CV_PLAIN, 3, 2)
CV_ENTRY_CL(n128_t_lean_c2, 128, CV_LEAN, 3, 2)
#else
CV_ENTRY(n64, 64, CV_FULL, 0)
CV_ENTRY(n128, 128, CV_FULL, 0)
CV_ENTRY(n256, 256, CV_FULL, 0)
CV_ENTRY(n64_plain, 64, CV_PLAIN, 0)
CV_ENTRY(n128_plain, 128, CV_PLAIN, 0)
CV_ENTRY(n256_plain, 256, CV_PLAIN, 0)
CV_ENTRY(n64_lean, 64, CV_LEAN, 0)
CV_ENTRY(n128_lean, 128, CV_LEAN, 0)
CV_ENTRY(n256_lean, 256, CV_LEAN, 0)
#endif
