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
//! The chain matching is epilogue_chain.rs's, shared with the matmul pass; the same rules hold: only
//! GPU-placed 16/32-bit float convolutions fuse, and only through intermediates nothing else
//! reads. Where the GEMM cannot apply the epilogue (grouped or depthwise convolutions, F not a
//! multiple of the tensor cores' 8, the direct kernel) and on the host (constant folding), the
//! step runs the convolution and then its `tail`, the chain as an elementwise group: the same
//! ops on the same values as the unfused graph.

use std::collections::HashMap;

use max_graph::ops::OpKind;
use max_graph::{Type, ValueId};

use super::epilogue_chain::{Allowed, fuse_chains};
use crate::engine::program::{Body, ConvEpilogue, Step, StepKind};

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
#[path = "fuse_conv_epilogue_tests.rs"]
mod tests;
