//! The RMSNorm before a linear layer (a decoder layer's attention and MLP norms) folds into the
//! product that reads it: `matmul_wt(rms_norm(x, gamma), W..)` becomes one step that reads x and
//! gamma, which the GPU runs as one GEMV launch whose prologue normalises x's rows for decode's
//! few rows (`gemv_nt`'s norm kernels), and otherwise as the rms_norm kernel into the
//! normalised value (kept as the step's scratch output) and the product. Sibling products
//! (q, k and v) and gated ones (gate and up) fold alike. Only a normalised value read by
//! nothing but that product, of the same type as x, with a weight of x's dtype and last dim,
//! folds; the step keeps the product's place. Top level only. Rows of at most
//! `fusion.norm_gemv_max_k` elements are normalised first, as the rms_norm kernel rounds them;
//! longer 16-bit rows (with `fusion.norm_gemv_post`) have the scale applied after the products,
//! since a first pass over them costs every warp more than the separate norm launch saves
//! (except a norm of an allreduce's sum, which joins the allreduce: fuse_allreduce_norm,
//! unless `fusion.allreduce_norm` is off). Products of more than `fusion.norm_gemv_max_n` weight
//! rows (vocabulary projections) keep the norm apart.
//!
//! GPU-placed quantized products (a qmatmul step, siblings included, without a fused residual)
//! fold the same way: the op carries the attribute [`NORM`] and the norm's own attributes as
//! `rms_norm.<name>`, its inputs are `[x, W.., gamma]` and its outputs the products (a gated
//! pair's: the product, gate and up; fuse_gated_gemv.rs) then the normalised value. The GPU's GEMV kernels (qgemv_mma.cu, qgemv.cu) normalise x as they stage
//! it; where no kernel takes the problem (max_kernels_cuda::launch::quant::norm_path, which
//! also applies `fusion.norm_gemv_max_k` to qgemv.cu only) the step runs the norm into that
//! value, then the products. The row limit does not apply here: it is the launch's choice.

use std::collections::HashMap;

use max_graph::attrs::Attr;
use max_graph::ops::reduction::RmsNormParams;
use max_graph::ops::{Op, OpKind};
use max_graph::{DType, DeviceKind, Type};

use crate::engine::program::{Body, Step, StepKind};

/// The attribute of a qmatmul step with a folded rms_norm.
pub const NORM: &str = "rms_norm";

/// The rms_norm folded into a qmatmul step's `op` and the product's own op, or None.
pub fn split_qnorm(op: &Op) -> Option<(Op, Op)> {
    if !matches!(op.attrs.get(NORM), Some(Attr::Bool(true))) {
        return None;
    }
    let (norm, product) = super::split_prefixed(op, NORM, "rms_norm.");
    Some((Op { kind: OpKind::RmsNorm, attrs: norm }, Op { kind: op.kind, attrs: product }))
}

/// A qmatmul step the norm may fold into: GPU-placed, block-quantized, plain or siblings;
/// `quantized` is the `fusion.quantized` knob, read once per pass.
fn foldable_qmatmul(s: &Step, types: &[Type], quantized: bool) -> bool {
    let StepKind::Op(op) = &s.kind else { return false };
    let gptq = matches!(op.attrs.get("encoding"), Some(Attr::Str(e)) if e.eq_ignore_ascii_case("gptq"));
    let on_gpu = s.outputs.iter().all(|&v| matches!(&types[v], Type::Tensor(t) if t.device.kind == DeviceKind::Gpu));
    op.kind == OpKind::QMatmul
        && quantized
        && !gptq
        && !op.attrs.0.contains_key(super::RESIDUAL)
        && !op.attrs.0.contains_key(NORM)
        && s.inputs.len() >= 2
        && s.inputs.len() + usize::from(op.attrs.0.contains_key(super::GATED)) == s.outputs.len() + 1
        && s.bodies.is_empty()
        && on_gpu
}

/// Whether the product's weights (its inputs after the lhs, up to a bias or residual; rows
/// first) have at most `max_n` rows together (or rows not all known).
fn few_weight_rows(s: &Step, types: &[Type], max_n: usize) -> bool {
    let weights = match &s.kind {
        StepKind::Gemm(g) => g.step_weights(s.outputs.len()),
        _ => s.inputs.len() - 1, // (a foldable qmatmul: x then its weights)
    };
    let rows = s.inputs.iter().skip(1).take(weights).map(|&w| match &types[w] {
        Type::Tensor(t) => t.shape.first().and_then(|d| d.as_static()),
        _ => None,
    });
    rows.sum::<Option<i64>>().is_none_or(|n| usize::try_from(n).is_ok_and(|n| n <= max_n))
}

/// Folds every eligible rms_norm into the product after it.
pub fn fuse(body: &mut Body, types: &[Type]) {
    let tuning = max_tuning::current();
    let max_k = tuning.int(max_tuning::Knob::FusionNormGemvMaxK).unwrap_or(1024);
    let quantized = tuning.flag_or(max_tuning::Knob::FusionQuantized, true);
    let post = tuning.flag_or(max_tuning::Knob::FusionNormGemvPost, true);
    let joins_allreduce = tuning.flag_or(max_tuning::Knob::FusionAllreduceNorm, true);
    let max_n = tuning.int(max_tuning::Knob::FusionNormGemvMaxN).unwrap_or(65_536);
    let mut uses = HashMap::new();
    super::count_uses(body, &mut uses);
    let producer = super::producers(body);
    let mut gone = vec![false; body.steps.len()];
    for i in 0..body.steps.len() {
        let s = &body.steps[i];
        let quant = foldable_qmatmul(s, types, quantized);
        match &s.kind {
            StepKind::Gemm(g) if g.b_transpose.is_some() && g.norm.is_none() && s.bodies.is_empty() => {}
            _ if quant => {}
            _ => continue,
        }
        if !few_weight_rows(s, types, max_n) {
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
        // (a norm of an allreduce's sum is left to join the allreduce: fuse_allreduce_norm)
        let summed = joins_allreduce
            && producer
                .get(&x)
                .is_some_and(|&q| matches!(&body.steps[q].kind, StepKind::Op(o) if o.kind == OpKind::AllreduceSum));
        let long = post && !summed && matches!(xt.dtype, DType::BFloat16 | DType::Float16);
        if !fits || !(short || long || quant) || xt.shape.last() != gt.shape.first() {
            continue;
        }
        let op = op.clone();
        let s = &mut body.steps[i];
        if quant {
            let StepKind::Op(q) = &mut s.kind else { continue };
            q.attrs.0.insert(NORM.into(), Attr::Bool(true));
            for (key, v) in &op.attrs.0 {
                q.attrs.0.insert(format!("rms_norm.{key}"), v.clone());
            }
            s.inputs[0] = x;
            s.inputs.push(gamma);
            s.outputs.push(a);
            gone[p] = true;
            continue;
        }
        let StepKind::Gemm(g) = &mut s.kind else { continue };
        g.norm = Some(op);
        g.norm_post = !short;
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
