//! The kernel families: one `.cu` file each, embedded at build time. Every family is compiled as
//! one NVRTC program with `prelude.cuh` in front of it.

/// Shared types and dtype conversions, prepended to every family.
pub const PRELUDE: &str = include_str!("../kernels/prelude.cuh");

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Family {
    pub name: &'static str,
    pub source: &'static str,
}

pub const CAST: Family = Family { name: "cast", source: include_str!("../kernels/cast.cu") };
pub const FILL: Family = Family { name: "fill", source: include_str!("../kernels/fill.cu") };
pub const COPY_STRIDED: Family = Family { name: "copy_strided", source: include_str!("../kernels/copy_strided.cu") };

/// Batched matmul on mma.sync tensor cores (kernels/mma_sync.cuh in front).
pub const MATMUL: Family = Family {
    name: "matmul",
    source: concat!(include_str!("../kernels/mma_sync.cuh"), include_str!("../kernels/matmul.cu")),
};
pub const LAYOUT: Family = Family { name: "layout", source: include_str!("../kernels/layout.cu") };
pub const INDEXING: Family = Family { name: "indexing", source: include_str!("../kernels/indexing.cu") };

/// The persistent, clustered, split-K Hopper GEMM (sm90_pipe.cuh, its scheduler and its epilogue
/// in front), one family per 16-bit type so that only the kernels in use are compiled.
pub const GEMM_SM90P_BF16: Family = Family {
    name: "gemm_sm90p_bf16",
    source: concat!(
        "#define GP_BF16 1\n",
        include_str!("../kernels/cluster.cuh"),
        include_str!("../kernels/sm90_pipe.cuh"),
        include_str!("../kernels/gemm_sm90p_sched.cuh"),
        include_str!("../kernels/gemm_sm90p_epi.cuh"),
        include_str!("../kernels/gemm_sm90p.cu")
    ),
};
pub const GEMM_SM90P_F16: Family = Family {
    name: "gemm_sm90p_f16",
    source: concat!(
        include_str!("../kernels/cluster.cuh"),
        include_str!("../kernels/sm90_pipe.cuh"),
        include_str!("../kernels/gemm_sm90p_sched.cuh"),
        include_str!("../kernels/gemm_sm90p_epi.cuh"),
        include_str!("../kernels/gemm_sm90p.cu")
    ),
};

/// conv2d forward on Hopper: implicit GEMM with TMA im2col loads and wgmma (sm_90a only), one
/// family per element type and form (the ping-pong and 256-row entries apart; see the end of
/// kernels/conv_sm90.cu), so that a process compiles only the kernels it runs.
macro_rules! conv_sm90_source {
    ($defines:literal) => {
        concat!(
            $defines,
            include_str!("../kernels/cluster.cuh"),
            include_str!("../kernels/sm90_pipe.cuh"),
            include_str!("../kernels/conv_sm90.cuh"),
            include_str!("../kernels/conv_sm90.cu")
        )
    };
}
pub const CONV_SM90_BF16: Family = Family { name: "conv_sm90_bf16", source: conv_sm90_source!("#define CV_BF16 1\n") };
pub const CONV_SM90_F16: Family = Family { name: "conv_sm90_f16", source: conv_sm90_source!("") };
pub const CONV_SM90_PP_BF16: Family =
    Family { name: "conv_sm90_pp_bf16", source: conv_sm90_source!("#define CV_BF16 1\n#define CV_PP 1\n") };
pub const CONV_SM90_PP_F16: Family =
    Family { name: "conv_sm90_pp_f16", source: conv_sm90_source!("#define CV_PP 1\n") };
/// The Hopper conv2d's helpers (plain CUDA): channel padding and the split-K reduction.
pub const CONV_SM90_AUX: Family = Family { name: "conv_sm90_aux", source: include_str!("../kernels/conv_sm90_aux.cu") };

/// Small-M GEMM (decode shapes): split-K SIMT and mma.sync kernels plus the split reduction.
/// The skinny products (kernels/skinny_rows.cuh in front of each): A @ B for few rows, and the
/// W^T products of a decode step.
pub const GEMM_SKINNY: Family = Family {
    name: "gemm_skinny",
    source: concat!(
        include_str!("../kernels/skinny_rows.cuh"),
        include_str!("../kernels/mma_sync.cuh"),
        include_str!("../kernels/gemm_skinny.cu")
    ),
};
pub const GEMV_NT: Family = Family {
    name: "gemv_nt",
    source: concat!(include_str!("../kernels/skinny_rows.cuh"), include_str!("../kernels/gemv_nt.cu")),
};
/// W^T products of 2-16 rows streaming the weights into mma.sync (16-bit types).
pub const GEMV_MMA: Family = Family {
    name: "gemv_mma",
    source: concat!(
        include_str!("../kernels/skinny_rows.cuh"),
        include_str!("../kernels/mma_sync.cuh"),
        include_str!("../kernels/gemv_mma.cu")
    ),
};
/// allreduce.sum of small tensors over the GPUs of a process through their signal buffers.
pub const ALLREDUCE_P2P: Family = Family { name: "allreduce_p2p", source: include_str!("../kernels/allreduce_p2p.cu") };
/// conv2d/conv3d (im2col, direct), conv2d_transpose (col2im, direct).
pub const CONV: Family = Family {
    name: "conv",
    source: concat!(include_str!("../kernels/work_types.cuh"), include_str!("../kernels/conv.cu")),
};
/// max_pool2d, avg_pool2d, fold.
pub const POOL: Family = Family {
    name: "pool",
    source: concat!(include_str!("../kernels/work_types.cuh"), include_str!("../kernels/pool.cu")),
};
/// dequantize and large-M qmatmul of the GGUF block encodings, GPTQ (kernels/quant_common.cuh in
/// front, as for QGEMV).
pub const QUANT: Family = Family {
    name: "quant",
    source: concat!(include_str!("../kernels/quant_common.cuh"), include_str!("../kernels/quant.cu")),
};
/// qmatmul with 1 to 8 lhs rows over 4-bit weights (one row of Q6_K) on integer tensor cores
/// (sm_90), in clusters that share the lhs preparation (cluster.cuh, qgemv_mma_prep.cuh and
/// qgemv_mma_unit.cuh in front); one row of short Q8_0 rows a tile at a time (qgemv_mma_tile.cu).
pub const QGEMV_MMA: Family = Family {
    name: "qgemv_mma",
    source: concat!(
        include_str!("../kernels/cluster.cuh"),
        include_str!("../kernels/quant_common.cuh"),
        include_str!("../kernels/qgemv_mma_prep.cuh"),
        include_str!("../kernels/qgemv_mma_unit.cuh"),
        include_str!("../kernels/qgemv_mma.cu"),
        include_str!("../kernels/qgemv_mma_tile.cu")
    ),
};
/// qmatmul with up to 64 lhs rows over GGUF weights on Hopper (sm_90a): the quants decoded
/// into the MMA's register A operand (mma.sync, or wgmma at 64 rows) in the GEMM's mainloop
/// (sm90_pipe.cuh and the encodings in front). One family per encoding (`QG_NAME`, `QG_E`), as
/// for QGEMV: a model compiles the encodings it has.
macro_rules! qgemm_family {
    ($enc:ident, $e:ident) => {
        Family {
            name: concat!("qgemm_sm90_", stringify!($enc)),
            source: concat!(
                "#define QG_NAME ",
                stringify!($enc),
                "\n#define QG_E ",
                stringify!($e),
                "\n",
                include_str!("../kernels/cluster.cuh"),
                include_str!("../kernels/sm90_pipe.cuh"),
                include_str!("../kernels/quant_common.cuh"),
                include_str!("../kernels/qgemm_sm90.cu")
            ),
        }
    };
}
pub const QGEMM_SM90: [Family; 6] = [
    qgemm_family!(q4_0, ENC_Q4_0),
    qgemm_family!(q4_1, ENC_Q4_1),
    qgemm_family!(q8_0, ENC_Q8_0),
    qgemm_family!(q4_k, ENC_Q4_K),
    qgemm_family!(q5_k, ENC_Q5_K),
    qgemm_family!(q6_k, ENC_Q6_K),
];

/// The qgemm_sm90 family of the encoding `enc` (`q4_0`, `q4_k`, ...: the kernel names' spelling).
pub fn qgemm(enc: &str) -> crate::Result<&'static Family> {
    let name = format!("qgemm_sm90_{enc}");
    QGEMM_SM90
        .iter()
        .find(|f| f.name == name)
        .ok_or_else(|| crate::Error::Unsupported(format!("no kernel family {name}")))
}
/// qmatmul with up to 8 lhs rows: decode in registers (GGUF block encodings; qgemv_stream.cu
/// for the word-decoded ones on sm_90). One family per encoding and activation type, named
/// `qgemv_<enc>_<f32|bf16|f16>` ([`qgemv`] finds it), so that a model compiles only the kernels
/// of its 1-3 encodings and its dtype: the 120 kernels in one module took minutes of NVRTC and
/// ptxas before a GGUF model's first token. The defines in front select what qgemv.cu and
/// qgemv_stream.cu instantiate; the kernel names are those of the single module.
macro_rules! qgemv_family {
    ($enc:ident, $e:ident, $t:ident, $ty:ident, $ts:literal) => {
        Family {
            name: concat!("qgemv_", stringify!($enc), "_", stringify!($ty)),
            source: concat!(
                "#define QV_NAME ",
                stringify!($enc),
                "\n#define QV_E ",
                stringify!($e),
                "\n#define QV_T ",
                stringify!($t),
                "\n#define QV_TS ",
                $ts,
                "\n",
                include_str!("../kernels/quant_common.cuh"),
                include_str!("../kernels/qgemv.cu"),
                include_str!("../kernels/qgemv_stream.cu")
            ),
        }
    };
}
macro_rules! qgemv_families {
    ($(($enc:ident, $e:ident)),*) => {
        [$(
            qgemv_family!($enc, $e, float, f32, ""),
            qgemv_family!($enc, $e, bf16, bf16, "_bf16"),
            qgemv_family!($enc, $e, f16, f16, "_f16"),
        )*]
    };
}
pub const QGEMV: [Family; 18] = qgemv_families!(
    (q4_0, ENC_Q4_0),
    (q4_1, ENC_Q4_1),
    (q8_0, ENC_Q8_0),
    (q4_k, ENC_Q4_K),
    (q5_k, ENC_Q5_K),
    (q6_k, ENC_Q6_K)
);

/// The qgemv family of the encoding `enc` (`q4_0`, `q4_k`, ...: the kernel names' spelling) and
/// the activation kernel suffix `act` (`""` for f32, `"_bf16"`, `"_f16"`).
pub fn qgemv(enc: &str, act: &str) -> crate::Result<&'static Family> {
    let ty = if act.is_empty() { "_f32" } else { act };
    let name = format!("qgemv_{enc}{ty}");
    QGEMV.iter().find(|f| f.name == name).ok_or_else(|| crate::Error::Unsupported(format!("no kernel family {name}")))
}

/// rope, kv_cache_store and the general form of paged_attention over the paged KV cache.
pub const ATTENTION: Family = Family {
    name: "attention",
    source: concat!(include_str!("../kernels/attention_args.cuh"), include_str!("../kernels/attention.cu")),
};
/// paged_attention's decode form: the CUDA-core kernel and the shared split/merge code
/// (attention_decode.cu), the tensor-core kernel for 16-bit caches and f32 ones read as bf16
/// (attention_decode_mma.cu).
pub const ATTENTION_DECODE: Family = Family {
    name: "attention_decode",
    source: concat!(
        include_str!("../kernels/attention_args.cuh"),
        include_str!("../kernels/attention_decode.cu"),
        include_str!("../kernels/attention_decode_mma.cu")
    ),
};
/// paged_attention of prefill-shaped batches on tensor cores (mma.sync, FlashAttention-2 style;
/// attention_prefill.cuh, shared with the Hopper kernel, in front).
pub const ATTENTION_PREFILL: Family = Family {
    name: "attention_prefill",
    source: concat!(
        include_str!("../kernels/attention_args.cuh"),
        include_str!("../kernels/attention_prefill.cuh"),
        include_str!("../kernels/attention_prefill.cu")
    ),
};
/// The same on Hopper with wgmma (FlashAttention-3 style; sm_90a only, sm90_pipe.cuh in front,
/// then the shared prefill code and the kernel's building blocks).
pub const ATTENTION_PREFILL_SM90: Family = Family {
    name: "attention_prefill_sm90",
    source: concat!(
        include_str!("../kernels/attention_args.cuh"),
        include_str!("../kernels/cluster.cuh"),
        include_str!("../kernels/sm90_pipe.cuh"),
        include_str!("../kernels/attention_prefill.cuh"),
        include_str!("../kernels/attention_prefill_sm90.cuh"),
        include_str!("../kernels/attention_prefill_sm90.cu")
    ),
};

/// sample_tokens (temperature, top-k, top-p, min-p, Gumbel-max) and apply_penalties.
pub const SAMPLING: Family = Family {
    name: "sampling",
    source: concat!(
        include_str!("../kernels/cluster.cuh"),
        include_str!("../kernels/sampling_math.cuh"),
        include_str!("../kernels/sampling_reduce.cuh"),
        include_str!("../kernels/sampling.cu"),
        include_str!("../kernels/penalties.cu")
    ),
};

/// irfft (Stockham passes of radix 2 to 7, Bluestein's algorithm for other lengths).
pub const FFT: Family = Family { name: "fft", source: include_str!("../kernels/fft.cu") };

/// random_uniform and random_normal (Philox4x32-10, Box-Muller).
pub const RANDOM: Family = Family { name: "random", source: include_str!("../kernels/random.cu") };

/// The reduction families (kernels/reduction_common.cuh in front of each; every file starts
/// with its own `#line`, so compile errors name the right file and line).
pub const REDUCTION: Family = Family {
    name: "reduction",
    source: concat!(include_str!("../kernels/reduction_common.cuh"), include_str!("../kernels/reduction.cu")),
};
pub const NORM: Family = Family {
    name: "norm",
    source: concat!(include_str!("../kernels/reduction_common.cuh"), include_str!("../kernels/norm.cu")),
};
pub const SCAN: Family = Family {
    name: "scan",
    source: concat!(include_str!("../kernels/reduction_common.cuh"), include_str!("../kernels/scan.cu")),
};
pub const SORT: Family = Family {
    name: "sort",
    source: concat!(include_str!("../kernels/reduction_common.cuh"), include_str!("../kernels/sort.cu")),
};

/// Every family but the split ones (QGEMV, QGEMM_SM90), which [`ALL`] appends.
const SINGLE: &[Family] = &[
    CAST,
    FILL,
    COPY_STRIDED,
    MATMUL,
    GEMM_SM90P_BF16,
    GEMM_SM90P_F16,
    CONV_SM90_BF16,
    CONV_SM90_F16,
    CONV_SM90_PP_BF16,
    CONV_SM90_PP_F16,
    CONV_SM90_AUX,
    GEMM_SKINNY,
    GEMV_NT,
    GEMV_MMA,
    ALLREDUCE_P2P,
    LAYOUT,
    INDEXING,
    CONV,
    POOL,
    QUANT,
    QGEMV_MMA,
    REDUCTION,
    NORM,
    SCAN,
    SORT,
    ATTENTION,
    ATTENTION_DECODE,
    ATTENTION_PREFILL,
    ATTENTION_PREFILL_SM90,
    SAMPLING,
    FFT,
    RANDOM,
];

const SPLIT: [Family; QGEMV.len() + QGEMM_SM90.len()] = joined(&QGEMV, &QGEMM_SM90);
const ALL_FAMILIES: [Family; SINGLE.len() + SPLIT.len()] = joined(SINGLE, &SPLIT);

/// Every family, for ahead-of-time compile checks.
pub const ALL: &[Family] = &ALL_FAMILIES;

/// `a` then `b`, as one array of their total length `N` (a constant).
const fn joined<const N: usize>(a: &[Family], b: &[Family]) -> [Family; N] {
    assert!(a.len() + b.len() == N && N > 0);
    let mut out = [a[0]; N];
    let mut i = 0;
    while i < N {
        out[i] = if i < a.len() { a[i] } else { b[i - a.len()] };
        i += 1;
    }
    out
}

/// The families named in `only` (all of them for `None`), in `ALL`'s order; an unknown name is
/// an `Unsupported` error listing the known ones.
pub fn select(only: Option<&[String]>) -> crate::Result<Vec<&'static Family>> {
    let Some(names) = only else { return Ok(ALL.iter().collect()) };
    if let Some(bad) = names.iter().find(|n| !ALL.iter().any(|f| f.name == n.as_str())) {
        let known: Vec<&str> = ALL.iter().map(|f| f.name).collect();
        return Err(crate::Error::Unsupported(format!("unknown kernel family {bad:?}; known: {}", known.join(", "))));
    }
    Ok(ALL.iter().filter(|f| names.iter().any(|n| n == f.name)).collect())
}

impl Family {
    /// The exact text NVRTC compiles. The `#line` directive keeps error lines relative to the
    /// family's own file.
    pub fn full_source(&self) -> String {
        format!("{PRELUDE}\n#line 1 \"{}.cu\"\n{}", self.name, self.source)
    }
}
