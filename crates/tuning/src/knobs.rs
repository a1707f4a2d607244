//! Every setting and tuning knob, declared once: name, environment variable (user settings
//! only), type, default ("" = chosen per problem) and what it does. `docs/configuration.md`
//! lists the same table (a test keeps the two in step).

/// What values an entry takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// On or off.
    Flag,
    /// An integer in `min..=max` that is a multiple of `step`.
    Int { min: usize, max: usize, step: usize },
    /// One of these integers.
    OneOf(&'static [usize]),
    /// One of these words (a flag word picks "on" or "off" where they are among them).
    Choice(&'static [&'static str]),
    /// Free text (paths).
    Text,
}

/// One entry of the registry.
#[derive(Clone, Copy, Debug)]
pub struct Decl {
    pub knob: Knob,
    pub name: &'static str,
    /// The user setting's own environment variable; tuning knobs have none (`MAX_TUNING`).
    pub env: Option<&'static str>,
    pub kind: Kind,
    /// The default in the entry's text form; empty when the launcher decides per problem.
    pub default: &'static str,
    pub doc: &'static str,
}

const ANY: usize = usize::MAX;
const fn count(min: usize) -> Kind {
    Kind::Int { min, max: ANY, step: 1 }
}

macro_rules! declare {
    ($( $(#[doc = $doc:literal])+ $id:ident: $name:literal, $env:expr, $kind:expr, $default:literal; )*) => {
        /// An entry of the registry (the index of its declaration in [`DECLS`]).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(usize)]
        pub enum Knob {
            $( $(#[doc = $doc])+ $id, )*
        }

        /// The declarations, in [`Knob`] order.
        pub static DECLS: &[Decl] = &[
            $( Decl {
                knob: Knob::$id,
                name: $name,
                env: $env,
                kind: $kind,
                default: $default,
                doc: concat!($($doc),+),
            }, )*
        ];
    };
}

impl Knob {
    pub fn decl(self) -> &'static Decl {
        &DECLS[self as usize]
    }

    pub fn by_name(name: &str) -> Option<Knob> {
        DECLS.iter().find(|d| d.name == name).map(|d| d.knob)
    }
}

declare! {
    // ---- user settings -------------------------------------------------------------------
    /// Where compiled kernels are cached (default `$XDG_CACHE_HOME/max-engine/kernels`, else
    /// `~/.cache/max-engine/kernels`).
    KernelCacheDir: "kernel_cache_dir", Some("MAX_KERNEL_CACHE_DIR"), Kind::Text, "";
    /// The libnvrtc shared library to load (default: found on the loader path, in the
    /// `nvidia-cuda-nvrtc` wheel or under CUDA_HOME).
    NvrtcLibrary: "nvrtc_library", Some("MAX_NVRTC_LIBRARY"), Kind::Text, "";
    /// CUDA graph capture of GPU plans: `on` where it pays (small inputs and results), `always`
    /// for every eligible plan, `off` never.
    CudaGraphs: "cuda_graphs", Some("MAX_CUDA_GRAPHS"), Kind::Choice(&["on", "always", "off"]), "on";
    /// Megabytes of host memory kept for reusing results (0 turns recycling off).
    HostPoolMb: "host_pool_mb", Some("MAX_HOST_POOL_MB"), count(0), "256";
    /// Hides the progress bar drawn while weights load or move to a device.
    NoProgress: "no_progress", Some("MAX_NO_PROGRESS"), Kind::Flag, "0";
    /// Prints each execution plan (steps, fused groups, memory) on stderr as it is built.
    PrintPlan: "print_plan", Some("MAX_PRINT_PLAN"), Kind::Flag, "0";

    // ---- the engine ----------------------------------------------------------------------
    /// Fuses elementwise tails (bias, activation, residual) into the matmul and conv before them.
    FusionEpilogue: "fusion.epilogue", None, Kind::Flag, "1";
    /// Fused elementwise groups load two 16-byte vectors per thread step (default: for 16-bit
    /// data with at most two streamed inputs).
    FusionVec2: "fusion.vec2", None, Kind::Flag, "";
    /// Joins the gated MLP's gate and up products (W read as stored, or a quantized gate/up
    /// pair with silu) and their mul into one step: one GEMV launch for 1-4 rows (quantized:
    /// 1-2) on the GPU.
    FusionGatedGemv: "fusion.gated_gemv", None, Kind::Flag, "1";
    /// Folds an RMSNorm into the product (W read as stored, or a quantized one) it feeds: one
    /// GEMV launch for 1-4 rows (quantized: 1-2) on the GPU.
    FusionNormGemv: "fusion.norm_gemv", None, Kind::Flag, "1";
    /// Joins the residual add and the RMSNorm after a tensor-parallel allreduce (a decoder
    /// layer's after its attention or MLP) to the allreduce: one launch per GPU where the
    /// peer-to-peer allreduce takes them (`collective.p2p`), else the allreduce, the add and
    /// the norm.
    FusionAllreduceNorm: "fusion.allreduce_norm", None, Kind::Flag, "1";
    /// The RMSNorm and gated-MLP folds also take quantized products (qgemv, qgemv_mma).
    FusionQuantized: "fusion.quantized", None, Kind::Flag, "1";
    /// The longest row (K) whose RMSNorm folds into the product: every warp of the folded GEMV
    /// recomputes the row's sum of squares, which pays at SmolLM2's 576 and costs decode time
    /// from 2048 on (H200, batch 1: Llama-3.2-1B's decode 15% slower folded).
    /// Quantized products: the limit holds for qgemv.cu (every block of 16 weight rows
    /// recomputes it), not for the tensor-core GEMV (a persistent grid: once per block).
    FusionNormGemvMaxK: "fusion.norm_gemv_max_k", None, count(1), "1024";
    /// The RMSNorms of longer 16-bit rows fold too, the one-launch GEMV applying their scale
    /// after the products (one pass over the row, not bit for bit the rms_norm kernel's values).
    FusionNormGemvPost: "fusion.norm_gemv_post", None, Kind::Flag, "1";
    /// The most weight rows (output columns, all of a launch's products together) a product
    /// may have for an RMSNorm to fold into it: every warp of a folded GEMV reads the norm's
    /// weight and the row beside its own weight rows, which a vocabulary projection's
    /// 100,000-odd rows pay more for than one separate norm launch costs.
    FusionNormGemvMaxN: "fusion.norm_gemv_max_n", None, count(1), "65536";
    /// Folds the ropes of an attention layer's q and k into its KV-cache store: one launch on
    /// the GPU.
    FusionRopeStore: "fusion.rope_store", None, Kind::Flag, "1";
    /// Folds a layer's fused rope + KV-cache store into the store of its q/k/v products: one
    /// launch on the GPU at 1-2 tokens of quantized products (interleaved ropes), at one token
    /// of 16-bit products read as stored (either rotation).
    FusionQkvRopeStore: "fusion.qkv_rope_store", None, Kind::Flag, "1";
    /// Fills recycled host blocks with NaN-like bytes before reuse (finds reads of stale data).
    HostPoolPoison: "host_pool.poison", None, Kind::Flag, "0";
    /// The libnccl shared library the GPU collectives load (default: found on the loader path,
    /// in the `nvidia-nccl-cu13` wheel or under CUDA_HOME).
    NcclLibrary: "nccl.library", None, Kind::Text, "";
    /// Seconds a GPU collective may take before its communicator is aborted and the op fails.
    NcclTimeoutS: "nccl.timeout_s", None, count(1), "120";
    /// allreduce.sum over GPUs that may access each other's memory runs as
    /// kernels/allreduce_p2p.cu instead of NCCL: up to 1 MiB pushes into the signal buffers and
    /// a local sum (H200 pair: 3.3 us against NCCL's 6.9 at 8 KiB, 9.5 against 14.1 at 1 MiB),
    /// past it (2 to 4 GPUs) reads of the peers' tensors.
    CollectiveP2p: "collective.p2p", None, Kind::Flag, "1";

    // ---- conv2d on Hopper (docs/kernels/conv2d.md) ----------------------------------------
    /// The Hopper implicit-GEMM conv2d (off: the im2col + GEMM path).
    ConvSm90: "conv.sm90", None, Kind::Flag, "1";
    /// Column-tile width.
    ConvBn: "conv.bn", None, Kind::OneOf(&[64, 128, 256]), "";
    /// Rows per tile: 256 (tiles up to 128 wide, unsplit), 192 over three consumer warpgroups
    /// (128 wide, unsplit) or 128.
    ConvBm: "conv.bm", None, Kind::OneOf(&[128, 192, 256]), "";
    /// Rows per plain 128 x 64 ping-pong tile (unclustered); 128: full tiles.
    ConvTm: "conv.tm", None, Kind::Int { min: 16, max: 128, step: 16 }, "";
    /// At most this many persistent blocks (default one per SM).
    ConvGrid: "conv.grid", None, count(1), "";
    /// Splits of the reduction (split-K); 1 never splits.
    ConvSplitk: "conv.splitk", None, count(1), "";
    /// CTAs per cluster (2: pairs sharing each k-step's A tile by multicast).
    ConvCluster: "conv.cluster", None, Kind::OneOf(&[1, 2]), "";
    /// Consumer warpgroups take alternate tiles (on) or share every tile (off); 128-row tiles.
    ConvPingpong: "conv.pingpong", None, Kind::Flag, "";
    /// The entry compiled for the lean epilogue (biases, relu, the residual in the ring) where
    /// it applies.
    ConvLean: "conv.lean", None, Kind::Flag, "1";
    /// Launch under programmatic stream serialization (the grid may start while the previous
    /// kernel drains).
    ConvPdl: "conv.pdl", None, Kind::Flag, "1";
    /// Results stored as 16-byte vectors staged through shared memory.
    ConvVec: "conv.vec", None, Kind::Flag, "1";
    /// A 16-byte aligned residual read as 16-byte vectors on the way out.
    ConvResVec: "conv.res_vec", None, Kind::Flag, "1";
    /// The residual tile loaded into the ring by TMA after each tile's k-steps, where the tile
    /// form allows it.
    ConvResRing: "conv.res_ring", None, Kind::Flag, "1";
    /// The lean epilogue's residual in a shared-memory buffer of its own.
    ConvResBuf: "conv.res_buf", None, Kind::Flag, "1";
    /// The fused residual prefetched into L2 while the tile's mainloop runs.
    ConvPrefetch: "conv.prefetch", None, Kind::Flag, "1";
    /// Each warp prefetches its residual rows at the start of a tile.
    ConvLinePrefetch: "conv.line_prefetch", None, Kind::Flag, "1";
    /// The lean epilogue loads its biases when a warp starts a tile (off: after the mainloop).
    ConvEarlyBias: "conv.early_bias", None, Kind::Flag, "1";
    /// The lean epilogue writes its results over the residual's slots and stores them from there.
    ConvTmaOut: "conv.tma_out", None, Kind::Flag, "1";
    /// Those in-place results stored by TMA instead of as 16-byte vectors (clusters always do).
    ConvStoreTma: "conv.store_tma", None, Kind::Flag, "0";
    /// With relu and the residual in its slots, the lean epilogue adds it on pairs of the element
    /// type (off: in f32).
    ConvPacked: "conv.packed", None, Kind::Flag, "1";
    /// How far padded convs fold the filter into the channels: 0 not at all, 1 the columns,
    /// 2 the rows too.
    ConvFold: "conv.fold", None, Kind::Int { min: 0, max: 2, step: 1 }, "2";
    /// 1x1 convs with stride 1 and no padding read x through a tiled [M, C] map.
    ConvTiledA: "conv.tiled_a", None, Kind::Flag, "1";

    // ---- GEMM on Hopper (docs/kernels/gemm.md) --------------------------------------------
    /// Column-tile width.
    GemmBn: "gemm.bn", None, Kind::OneOf(&[64, 128, 256]), "";
    /// Row-tile height: 64 (both consumer warpgroups on the same rows, splitting the columns;
    /// by default for at most 64 rows per batch) or 128.
    GemmBm: "gemm.bm", None, Kind::OneOf(&[64, 128]), "";
    /// CTAs per cluster along M (sharing B).
    GemmCluster: "gemm.cluster", None, Kind::OneOf(&[1, 2]), "";
    /// CTAs per cluster along N (sharing A).
    GemmClusterN: "gemm.cluster_n", None, Kind::OneOf(&[1, 2]), "";
    /// Splits of the reduction.
    GemmSplitk: "gemm.splitk", None, count(1), "";
    /// A persistent grid (on) or one CTA per tile (off).
    GemmPersistent: "gemm.persistent", None, Kind::Flag, "";
    /// At most this many CTAs on a persistent grid.
    GemmGrid: "gemm.grid", None, count(1), "";
    /// Cluster row units per raster group.
    GemmGroupM: "gemm.group_m", None, count(1), "";
    /// A last, partial wave may be split (stream-K).
    GemmTail: "gemm.tail", None, Kind::Flag, "";
    /// The epilogue: staged through shared memory, or stored from the fragments.
    GemmEpilogue: "gemm.epilogue", None, Kind::Choice(&["staged", "direct"]), "";
    /// Rows from which 16-bit products take the Hopper kernel (fewer: mma.sync); unset, 9 rows,
    /// and below 128 rows only B whose rows TMA can read as given; 1 sends every shape there.
    GemmMinM: "gemm.min_m", None, count(1), "";
    /// B transposed into a scratch copy even where TMA could read it as it is.
    GemmTranspose: "gemm.transpose", None, Kind::Flag, "0";
    /// The Hopper GEMM's 16-bit-output kernels launch under programmatic stream serialization:
    /// the grid sets up (barriers, descriptors) while the previous kernel drains and waits
    /// before its first load (of A: constant weights may come first, `gemm.early_weights`).
    GemmPdl: "gemm.pdl", None, Kind::Flag, "1";
    /// Under `gemm.pdl`, a product whose B is a constant (a layer's weight) loads its first
    /// stages of B before it waits for the previous kernel; A and everything else after.
    GemmEarlyWeights: "gemm.early_weights", None, Kind::Flag, "1";
    /// Rows up to which 16-bit skinny products take the SIMT kernel rather than mma.sync.
    GemmSkinnySimtM: "gemm.skinny_simt_m", None, Kind::Int { min: 0, max: 16, step: 1 }, "";
    /// Rows from which 16-bit W^T products of up to 16 rows stream the weights into mma.sync
    /// (gemv_mma.cu) rather than take gemv_nt.cu (up to 4 rows) or the GEMMs; 17 turns it off.
    GemvMmaMinRows: "gemv_mma.min_rows", None, Kind::Int { min: 1, max: 17, step: 1 }, "2";
    /// Warps sharing a tile of 16 weight rows in gemv_mma.cu, each taking every n-th chunk of K.
    GemvMmaParts: "gemv_mma.parts", None, Kind::OneOf(&[1, 2, 4, 8]), "";
    /// Warps sharing a weight row in gemv_nt.cu's one-row plain products, each summing a run of
    /// K (unset: 2 or 4 where a warp per row fills at most half a wave of resident blocks).
    GemvNtSplitK: "gemv_nt.split_k", None, Kind::OneOf(&[1, 2, 4]), "";

    // ---- launches ------------------------------------------------------------------------
    /// Launches under programmatic stream serialization for every kernel that waits for its
    /// predecessor (crates/kernels-cuda/src/launch/pdl.rs lists them: the decode step's GEMVs,
    /// norms, rope/store and attention, the quantized GEMVs, conv_sm90, the Hopper GEMM); off: none
    /// does. conv.pdl, gemm.pdl, qgemv.pdl and attention.pdl turn it off for their families only.
    LaunchPdl: "launch.pdl", None, Kind::Flag, "1";
    /// The kernels' preferred shared-memory carveout: `shared`, every kernel asks for all of the
    /// SM's unified memory that shared memory may take (the rest L1); `one_row`, only the
    /// one-row GEMVs (the `_m1` kernels) and the launches for one row of the decode attention
    /// and of the two-GPU allreduce with its norm (a decode step at one sequence); `driver`, as
    /// the driver picks per kernel. An SM holds blocks of kernels with one carveout at a time,
    /// so under `driver` a kernel that starts early under PDL finds no room beside a
    /// predecessor that asked for another. Where a kernel asks for the shared
    /// memory, those that keep their reuse in L1 (the tensor-core GEMVs of 2-16 rows, the
    /// CUDA-core GEMVs of more than 4 waves of blocks: vocabulary projections) ask for all of
    /// the L1 at their launches instead.
    LaunchSmemCarveout: "launch.smem_carveout", None, Kind::Choice(&["one_row", "shared", "driver"]), "one_row";

    // ---- attention ---------------------------------------------------------------------------
    /// The tensor-core prefill kernels (attention_prefill.cu, and attention_prefill_sm90.cu on
    /// sm_90) for paged attention over prompts: 16-bit, and f32 with Q, K and V rounded to bf16
    /// by attention_prefill.cu's `_f32` kernels (off: the decode kernels run every call).
    AttentionPrefill: "attention.prefill", None, Kind::Flag, "1";
    /// f32 prompts that may read bf16 (`f32_as_bf16`, as for the decode kernel above) take the
    /// tensor-core prefill kernel, Q, K and V rounded to bf16 as it stages them (about 2^-8 of
    /// each value: the precision quantized models' prompt products already have; 4.5x SmolLM2
    /// Q4_1's 2,048-token prefill on an H200); off, the f32 decode kernels attend every query
    /// row in f32.
    AttentionPrefillF32: "attention.prefill_f32", None, Kind::Flag, "1";
    /// On sm_90, the wgmma prefill kernel (attention_prefill_sm90.cu) for the calls it is
    /// compiled for (off: attention_prefill.cu's mma.sync kernel).
    AttentionPrefillWgmma: "attention.prefill_wgmma", None, Kind::Flag, "1";
    /// The wgmma prefill kernel's consumer warpgroups take turns at the tensor cores
    /// (FlashAttention-3's ping-pong; not with softcap).
    AttentionPrefillPingpong: "attention.prefill_pingpong", None, Kind::Flag, "0";
    /// The wgmma prefill kernel's producer loads K and V tiles by TMA where the cache's pages
    /// hold a multiple of 64 keys (off, or other page sizes: cp.async per 16 bytes).
    AttentionPrefillTma: "attention.prefill_tma", None, Kind::Flag, "1";
    /// Query rows per sequence (tokens / batch) from which paged attention takes the prefill
    /// kernel.
    AttentionPrefillRows: "attention.prefill_rows", None, count(1), "8";

    // ---- quantized GEMV ------------------------------------------------------------------
    /// The tensor-core GEMVs (qgemv_mma.cu) for 1-8 rows of Q4_0/Q4_1/Q4_K, one of Q6_K, and one
    /// row of short Q8_0 rows (qgemv_mma_tile.cu) (unset: for weights of 3072 x 2048 elements
    /// and more; 1: whatever their size).
    QgemvMma: "qgemv.mma", None, Kind::Flag, "";
    /// The streaming GEMV (qgemv_stream.cu) on sm_90 (off: qgemv.cu's general kernel; unset: not
    /// for 1-2 rows of fewer than 3072 x 2048 weights). Rows not on 16 bytes (whole 4-byte words)
    /// take it for single products of at least that many weights only.
    QgemvStream: "qgemv.stream", None, Kind::Flag, "";
    /// Warps sharing one tile of the tensor-core GEMV.
    QgemvSplit: "qgemv.split", None, Kind::OneOf(&[1, 2, 4, 8]), "";
    /// Weight stages in flight per warp of the tensor-core GEMV (unset: 3 at one lhs row, else 2,
    /// or more where they cost no block per SM, as at long K); the Q8_0 tile kernel's are whole
    /// tiles of 16 rows, 1 (unset) or 2.
    QgemvStages: "qgemv.stages", None, Kind::OneOf(&[1, 2, 3, 4]), "";
    /// CTAs per thread block cluster of the tensor-core GEMV, which share the lhs preparation
    /// (each prepares half into both CTAs' shared memory; unset: 2 where K times the rows is
    /// 12288 or more, else 1; Q4_K's 1-2-row kernels never).
    QgemvCluster: "qgemv.cluster", None, Kind::OneOf(&[1, 2]), "";
    /// At most this many blocks for the streaming and tensor-core GEMVs.
    QgemvGrid: "qgemv.grid", None, count(1), "";
    /// The quantized GEMVs (tensor-core and CUDA-core) launch under programmatic stream serialization.
    QgemvPdl: "qgemv.pdl", None, Kind::Flag, "1";
    /// The quantized GEMVs copy their first stages of constant weights (no kernel of the
    /// program writes them) before they wait for the previous kernel; the lhs is read after the
    /// wait. Needs `qgemv.pdl`.
    QgemvEarlyWeights: "qgemv.early_weights", None, Kind::Flag, "1";

    // ---- attention -----------------------------------------------------------------------
    /// Splits of each (row, kv head) in paged_attention's decode form (each sequence uses as
    /// many as its length needs); unset, the plan's own number (one wave of blocks, at most 32).
    AttentionSplits: "attention.splits", None, Kind::Int { min: 1, max: 64, step: 1 }, "";
    /// paged_attention's decode form launches under programmatic stream serialization.
    AttentionPdl: "attention.pdl", None, Kind::Flag, "1";
    /// f32 attention that may read bf16 (`f32_as_bf16`: quantized GGUF models, f32 activations on
    /// the GPU) of head dims 16 to 128 takes the tensor-core decode kernel, the query, keys and
    /// values rounded to bf16 as it reads them (off: the CUDA-core f32 kernels).
    AttentionDecodeF32Mma: "attention.decode_f32_mma", None, Kind::Flag, "1";
    /// qmatmul on more than 8 rows on sm_90: bf16 weights and the wgmma GEMM (off: f32 SIMT).
    QmatmulWgmma: "qmatmul.wgmma", None, Kind::Flag, "1";
    /// qmatmul on 9 to 64 rows (from `qmatmul.qgemm_min_rows`) of GGUF weights (rows of whole 16
    /// bytes) on sm_90: the GEMM that decodes the quants in its mainloop (off: the bf16
    /// dequantize + wgmma GEMM, and the GEMVs below 9 rows); unset, 9-32 rows, or 4-8 and 33-64
    /// rows of at least 1536 x 1536 weights.
    QmatmulQgemm: "qmatmul.qgemm", None, Kind::Flag, "";
    /// The fewest lhs rows qmatmul runs on qgemm_sm90.cu (where `qmatmul.qgemm` takes them; from
    /// 9 rows on it takes them whatever this says); fewer keep the GEMV kernels. Unset, 4 (below
    /// 9 rows only weights of at least 1536 x 1536).
    QmatmulQgemmMinRows: "qmatmul.qgemm_min_rows", None, Kind::Int { min: 1, max: 9, step: 1 }, "";

    // ---- numerics ------------------------------------------------------------------------
    /// Batch-invariant results on the GPU: each row of a product, an attention call or a norm
    /// gets the same bits whatever other rows share its batch (a served request gives the
    /// tokens it gives alone). Quantized products run qgemv in groups of 8 rows, 16-bit W^T
    /// products gemv_nt in groups of 4, paged attention the decode kernel unsplit, and the
    /// quantized norm and gated folds are off (docs/kernels/batch_invariance.md).
    NumericsBatchInvariant: "numerics.batch_invariant", None, Kind::Flag, "0";
}
