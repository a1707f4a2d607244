//! Conv2d epilogue fusion: `lambda(conv2d(x, w)) + beta * residual`, where lambda is a bias add
//! (a [F] vector, or one broadcast as [1, 1, 1, F], over the NHWC result), an activation (relu,
//! gelu in its three forms, silu, sigmoid) and a clamp (`max`/`min` with scalar constants, in
//! any order and number: they compose into one `min(max(v, lo), hi)`), each optional and in
//! that order, and the residual has the result's type, scaled by an optional scalar constant
//! (`residual * beta` or `beta * residual`): the contract of MAX's
//! `conv2d_fprop_with_residual`, D = lambda(conv(A, B)) + beta * C. Staged as separate ops, the
//! chain becomes one step whose GEMM (the im2col path of gpu/conv.rs) applies it to its
//! accumulators, instead of writing the convolution and reading it back once per op.
//!
//! The chain matching is epilogue.rs's, shared with the matmul pass; the same rules hold: only
//! GPU-placed 16/32-bit float convolutions fuse, and only through intermediates nothing else
//! reads. Where the GEMM cannot apply the epilogue (grouped or depthwise convolutions, F not a
//! multiple of the tensor cores' 8, the direct kernel) and on the host (constant folding), the
//! step runs the convolution and then its `tail`, the chain as an elementwise group: the same
//! ops on the same values as the unfused graph.

use std::collections::HashMap;

use max_graph::ops::{Op, OpKind};
use max_graph::{Type, ValueId};

use super::epilogue::{Allowed, fuse_chains};
use super::program::{Body, Fused, Step, StepKind};

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

/// Fuses every eligible conv2d chain of `body` (see the module comment).
pub fn fuse(body: &mut Body, types: &[Type], uses: &HashMap<ValueId, usize>) {
    let allowed = Allowed { clamp: true, beta: true };
    fuse_chains(body, types, uses, allowed, |conv, c| {
        let StepKind::Op(op) = &conv.kind else { return None };
        if op.kind != OpKind::Conv2d || !(2..=3).contains(&conv.inputs.len()) {
            return None;
        }
        let head = conv.inputs.len();
        let mut inputs = conv.inputs.clone();
        inputs.extend(&c.inputs);
        let epi = ConvEpilogue {
            conv: op.clone(),
            head,
            bias: c.bias.map(|k| head + k),
            act: c.act,
            clamp: c.clamp,
            residual: c.residual.map(|k| head + k),
            beta: c.beta,
            tail: c.tail,
        };
        Some(Step { kind: StepKind::Conv(epi), inputs, outputs: vec![c.result], bodies: vec![] })
    });
}

#[cfg(test)]
#[path = "conv_epilogue_tests.rs"]
mod tests;
