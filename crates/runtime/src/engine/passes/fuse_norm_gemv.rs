//! The RMSNorm before a linear layer (a decoder layer's attention and MLP norms) folds into the
//! product that reads it: `matmul_wt(rms_norm(x, gamma), W..)` becomes one step that reads x and
//! gamma, which the GPU runs as one GEMV launch whose prologue normalises x's rows for decode's
//! few rows (`gemv_nt`'s norm kernels), and otherwise as the rms_norm kernel into the
//! normalised value (kept as the step's scratch output) and the product. Sibling products
//! (q, k and v) and gated ones (gate and up) fold alike. Only a normalised value read by
//! nothing but that product, of the same type as x, with a weight of x's dtype and last dim,
//! and rows of at most `fusion.norm_gemv_max_k` elements, folds; the step keeps the product's
//! place. Top level only.

use std::collections::HashMap;

use max_graph::Type;
use max_graph::ops::OpKind;
use max_graph::ops::reduction::RmsNormParams;

use crate::engine::program::{Body, StepKind};

/// Folds every eligible rms_norm into the product after it.
pub fn fuse(body: &mut Body, types: &[Type]) {
    let max_k = max_tuning::current().int(max_tuning::Knob::FusionNormGemvMaxK).unwrap_or(1024);
    let mut uses = HashMap::new();
    super::count_uses(body, &mut uses);
    let producer = super::producers(body);
    let mut gone = vec![false; body.steps.len()];
    for i in 0..body.steps.len() {
        let s = &body.steps[i];
        let StepKind::Gemm(g) = &s.kind else { continue };
        if g.b_transpose.is_none() || g.norm.is_some() || !s.bodies.is_empty() {
            continue;
        }
        let a = s.inputs[0];
        let Some(&p) = producer.get(&a) else { continue };
        let norm = &body.steps[p];
        let StepKind::Op(op) = &norm.kind else { continue };
        if op.kind != OpKind::RmsNorm || norm.inputs.len() != 2 || norm.outputs != [a] || gone[p] {
            continue;
        }
        if uses.get(&a) != Some(&1) || body.results.contains(&a) || RmsNormParams::from_attrs(&op.attrs).is_err() {
            continue;
        }
        let (x, gamma) = (norm.inputs[0], norm.inputs[1]);
        let (Type::Tensor(xt), Type::Tensor(gt)) = (&types[x], &types[gamma]) else { continue };
        let fits = types[x] == types[a] && gt.dtype == xt.dtype && gt.device == xt.device && gt.rank() == 1;
        let short = xt.shape.last().and_then(|d| d.as_static()).is_some_and(|k| k as usize <= max_k);
        if !fits || !short || xt.shape.last() != gt.shape.first() {
            continue;
        }
        let op = op.clone();
        let s = &mut body.steps[i];
        let StepKind::Gemm(g) = &mut s.kind else { continue };
        g.norm = Some(op);
        s.inputs[0] = x;
        s.inputs.push(gamma);
        // the normalised value sits before the gate and up scratch of a gated step
        let at = s.outputs.len() - g.scratch() + 1;
        s.outputs.insert(at, a);
        gone[p] = true;
    }
    super::drop_marked(body, &gone);
}

#[cfg(test)]
#[path = "fuse_norm_gemv_tests.rs"]
mod tests;
