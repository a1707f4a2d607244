//! The engine's program IR: a graph lowered for execution, as the reachable ops in order
//! (`Step`s in nested `Body`s), some of them fused — elementwise groups, and matmuls and
//! convolutions with their epilogues. The passes that build and rewrite it are in `passes/`;
//! everything here is independent of input shapes (plan.rs adds the shapes).

use max_graph::ops::{Family, Op, OpKind};
use max_graph::{Type, ValueId};

pub use crate::shared::{Fused, Operand};

#[derive(Clone, Debug, PartialEq)]
pub enum StepKind {
    Op(Op),
    Fused(Fused),
    /// A matmul with its bias/activation/residual epilogue (see passes/fuse_matmul_epilogue.rs).
    Gemm(GemmEpilogue),
    /// A conv2d with its bias/activation/clamp/scaled-residual epilogue (see
    /// passes/fuse_conv_epilogue.rs).
    Conv(ConvEpilogue),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub kind: StepKind,
    pub inputs: Vec<ValueId>,
    pub outputs: Vec<ValueId>,
    /// Bodies of control-flow ops (cond: then, else; while_loop: predicate, body).
    pub bodies: Vec<Body>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Body {
    pub args: Vec<ValueId>,
    pub steps: Vec<Step>,
    pub results: Vec<ValueId>,
}

#[derive(Clone, Debug)]
pub struct Program {
    /// Type of every value id (ids are those of the source graph).
    pub types: Vec<Type>,
    pub body: Body,
}

impl Step {
    pub fn name(&self) -> String {
        match &self.kind {
            StepKind::Op(op) => op.kind.name().to_string(),
            StepKind::Fused(f) => {
                let names: Vec<&str> = f.nodes.iter().map(|(op, _, _)| op.kind.name()).collect();
                format!("fused[{}]", names.join("+"))
            }
            StepKind::Gemm(g) => g.name(),
            StepKind::Conv(c) => c.name(),
        }
    }
}

/// Ops that may join a fused elementwise group.
pub fn fusible(kind: OpKind) -> bool {
    kind.family() == Family::Elementwise || kind == OpKind::Cast
}

/// Ops that must run even when nothing reads their results, and that are never merged.
pub(crate) fn has_effects(kind: OpKind) -> bool {
    matches!(
        kind,
        OpKind::Print
            | OpKind::BufferStore
            | OpKind::BufferStoreSlice
            | OpKind::BufferLoad
            | OpKind::ChainCreate
            | OpKind::KvCacheStore
            | OpKind::PagedAttention
    )
}

/// Outputs of a `Gemm` step after its products' for a folded rope + KV-cache store
/// (`GemmEpilogue::rope_store`): the store's chain and rope(q).
pub const ROPE_STORE_OUTPUTS: usize = 2;

/// The fused form of a matmul and the elementwise ops applied to its result. Step inputs are
/// `[a, b]` (`[a, W_1 .. W_n]` for siblings, `[a, W_gate, W_up]` when `gated`), then the bias if
/// `bias`, the residual if `residual`, and the norm weight if `norm`. Outputs are the results,
/// then the normalised `a` if `norm`, then the gate and up products if `gated`: those are
/// written only where the GPU cannot run the step as one kernel (and on the host).
#[derive(Clone, Debug, PartialEq)]
pub struct GemmEpilogue {
    pub bias: bool,
    /// The activation op (relu, gelu with its `approximate` attribute, silu or sigmoid).
    pub act: Option<Op>,
    pub residual: bool,
    /// The same epilogue as an elementwise group over `[product, bias?, residual?]`, for the
    /// host path (no nodes: the product is the result).
    pub tail: Fused,
    /// `b` is a rank-2 W [n, k] and the product is `a @ W^T`: the transpose (or permute) op that
    /// stood between W and the matmul, which the host path applies and the GPU kernels read
    /// through (passes/fuse_weight_transpose.rs).
    pub b_transpose: Option<Op>,
    /// The rms_norm op that made `a` (passes/fuse_norm_gemv.rs): the step reads that op's
    /// input in place of `a` and normalises it first.
    pub norm: Option<Op>,
    /// The GPU's one-launch GEMV applies `norm`'s scale after the products (rows longer than
    /// `fusion.norm_gemv_max_k`: gemv_nt.cu's `_postnorm`) rather than normalising `a` first.
    pub norm_post: bool,
    /// The gated MLP's product (passes/fuse_gated_gemv.rs): the result is this elementwise
    /// group over `[gate, up]`, gate = the epilogue over `a @ W_gate^T`, up = `a @ W_up^T`.
    pub gated: Option<Fused>,
    /// Every weight read as stored (`b_transpose`) is a constant or a layout view of one
    /// (passes/siblings.rs: `hoist_constants`): no kernel of the program writes it, so the GPU's
    /// GEMVs may read it before the kernel ahead of them has finished (launch/pdl.rs). False
    /// for a weight computed at run time, whose product then launches after its producer ends.
    /// The Hopper GEMM relies on it too (its first stages of B before the wait). A runner that
    /// copies a weight into a fresh buffer before the product must not pass it on.
    pub const_weights: bool,
    /// The decode step's rope + KV-cache store of the q, k and v this step's three sibling
    /// products make (passes/fuse_qkv_rope_store.rs): the kv_cache_store op with its folded
    /// ropes. The step's inputs end with the store's chain, blocks, slots, freqs_cis and
    /// positions, its outputs with the store's chain and rope(q); the products' own outputs are
    /// written only where the store runs apart.
    pub rope_store: Option<Op>,
}

impl GemmEpilogue {
    /// A product with this epilogue and nothing folded before or around it.
    pub fn new(bias: bool, act: Option<Op>, residual: bool, tail: Fused, b_transpose: Option<Op>) -> Self {
        GemmEpilogue {
            bias,
            act,
            residual,
            tail,
            b_transpose,
            norm: None,
            norm_post: false,
            gated: None,
            const_weights: false,
            rope_store: None,
        }
    }

    /// Outputs after the results that only the unfused path writes (the normalised `a`, the
    /// gate and up products).
    pub fn scratch(&self) -> usize {
        usize::from(self.norm.is_some()) + 2 * usize::from(self.gated.is_some())
    }

    /// Weights after `a` in a step with `outputs` outputs in all: its results, then the
    /// [`scratch`](Self::scratch) outputs, then a folded store's ([`ROPE_STORE_OUTPUTS`]).
    pub fn step_weights(&self, outputs: usize) -> usize {
        let store = if self.rope_store.is_some() { ROPE_STORE_OUTPUTS } else { 0 };
        self.weights(outputs.saturating_sub(self.scratch() + store))
    }

    /// Weights after `a` in a step with `results` results.
    pub fn weights(&self, results: usize) -> usize {
        match (&self.gated, &self.b_transpose) {
            (Some(_), _) => 2,
            (None, Some(_)) => results,
            (None, None) => 1,
        }
    }

    pub fn name(&self) -> String {
        let mut parts = vec![];
        if self.norm.is_some() {
            parts.push("rms_norm".to_string());
        }
        parts.push(if self.b_transpose.is_some() { "matmul_wt" } else { "matmul" }.to_string());
        if self.bias {
            parts.push("bias".into());
        }
        if let Some(op) = &self.act {
            parts.push(op.kind.name().into());
        }
        if self.gated.is_some() {
            parts.push("gated".into());
        }
        if self.residual {
            parts.push("residual".into());
        }
        if self.rope_store.is_some() {
            parts.push("rope_store".into());
        }
        format!("gemm[{}]", parts.join("+"))
    }
}

/// A conv2d with its epilogue. Step inputs are the conv's own (`x`, `filter`, its optional
/// bias: `head` of them), then the values the epilogue reads: the bias at `bias`, the clamp
/// constants, the residual at `residual` and the beta constant after it when `beta` is set
/// (the GPU path reads the constants' values from here; the host path reads them as inputs).
#[derive(Clone, Debug, PartialEq)]
pub struct ConvEpilogue {
    /// The conv2d op with its attributes.
    pub conv: Op,
    pub head: usize,
    /// Step input positions.
    pub bias: Option<usize>,
    /// The activation op (relu, gelu with its `approximate` attribute, silu or sigmoid).
    pub act: Option<Op>,
    /// `[lo, hi]`, applied after the activation.
    pub clamp: Option<(f64, f64)>,
    pub residual: Option<usize>,
    /// The residual's scale; `None` is 1.
    pub beta: Option<f64>,
    /// The epilogue as an elementwise group over `[product, inputs[head..]...]`.
    pub tail: Fused,
}

impl ConvEpilogue {
    pub fn name(&self) -> String {
        let mut parts = vec![self.conv.kind.name().to_string()];
        if self.bias.is_some() {
            parts.push("bias".into());
        }
        if let Some(op) = &self.act {
            parts.push(op.kind.name().into());
        }
        if self.clamp.is_some() {
            parts.push("clamp".into());
        }
        match (self.residual, self.beta) {
            (Some(_), Some(b)) => parts.push(format!("residual*{b}")),
            (Some(_), None) => parts.push("residual".into()),
            _ => {}
        }
        format!("conv[{}]", parts.join("+"))
    }
}
