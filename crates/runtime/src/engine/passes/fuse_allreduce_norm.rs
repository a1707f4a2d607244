//! The RMSNorm after a tensor-parallel allreduce joins the allreduce: a decoder layer sums its
//! attention's (or MLP's) partial results over the devices and every device then normalises
//! the sum for its next products. `rms_norm(allreduce.sum(x..)[i], gamma_i)` on every device i
//! becomes one allreduce step with the attribute `rms_norm` and the norm's own attributes as
//! `rms_norm.<name>`; its inputs are `[x.., signals.., gamma..]` (`[x.., signals.., residuals..,
//! gamma..]` for a step with a joined residual add) and its outputs the sums, then the
//! normalised sums. The GPU runs it as one launch per device where the peer-to-peer
//! allreduce takes it (engine/gpu/collective.rs), otherwise as the allreduce and one rms_norm
//! per device, as the CPU does. Only a step whose every sum feeds one such norm (all with the
//! same attributes, weights of the sum's dtype, device and last dim, made before the
//! allreduce) joins; the sums may have other readers. Top level only; after the folds of norms
//! into the products they feed (fuse_norm_gemv), which save more where they apply.

use std::collections::HashMap;

use max_graph::attrs::Attr;
use max_graph::ops::OpKind;
use max_graph::ops::reduction::RmsNormParams;
use max_graph::{Type, ValueId};

use crate::engine::program::{Body, StepKind};

// The attribute, as for a qmatmul step with a folded norm (split_qnorm takes both apart).
use super::NORM;

/// Joins every eligible set of norms to the allreduce before them.
pub fn fuse(body: &mut Body, types: &[Type]) {
    let producer = super::producers(body);
    // the rms_norm steps reading each value as their input
    let mut norms_of: HashMap<ValueId, Vec<usize>> = HashMap::new();
    for (i, s) in body.steps.iter().enumerate() {
        if let StepKind::Op(op) = &s.kind
            && op.kind == OpKind::RmsNorm
            && s.inputs.len() == 2
            && s.outputs.len() == 1
            && s.bodies.is_empty()
        {
            norms_of.entry(s.inputs[0]).or_default().push(i);
        }
    }
    let mut gone = vec![false; body.steps.len()];
    for i in 0..body.steps.len() {
        let s = &body.steps[i];
        let StepKind::Op(op) = &s.kind else { continue };
        let n = s.outputs.len();
        // (a step with a joined residual also takes the residuals: fuse_allreduce_residual)
        let per = if op.attrs.0.contains_key(super::RESIDUAL) { 3 } else { 2 };
        if op.kind != OpKind::AllreduceSum || op.attrs.0.contains_key(NORM) || n == 0 || s.inputs.len() != per * n {
            continue;
        }
        let norms: Option<Vec<usize>> = s
            .outputs
            .iter()
            .map(|o| match norms_of.get(o).map(Vec::as_slice) {
                Some(&[j]) if !gone[j] => Some(j),
                _ => None,
            })
            .collect();
        let Some(norms) = norms else { continue };
        let StepKind::Op(first) = &body.steps[norms[0]].kind else { continue };
        if RmsNormParams::from_attrs(&first.attrs).is_err() {
            continue;
        }
        let fits = s.outputs.iter().zip(&norms).all(|(&o, &j)| {
            let norm = &body.steps[j];
            let same = matches!(&norm.kind, StepKind::Op(op) if op.attrs == first.attrs);
            let gamma = norm.inputs[1];
            let early = producer.get(&gamma).is_none_or(|&p| p < i);
            let (Type::Tensor(x), Type::Tensor(g)) = (&types[o], &types[gamma]) else { return false };
            same && early
                && g.dtype == x.dtype
                && g.device == x.device
                && g.rank() == 1
                && x.shape.last() == g.shape.first()
                && types[o] == types[norm.outputs[0]]
        });
        if !fits {
            continue;
        }
        let first = first.clone();
        let gammas: Vec<ValueId> = norms.iter().map(|&j| body.steps[j].inputs[1]).collect();
        let normed: Vec<ValueId> = norms.iter().map(|&j| body.steps[j].outputs[0]).collect();
        let s = &mut body.steps[i];
        let StepKind::Op(op) = &mut s.kind else { continue };
        op.attrs.0.insert(NORM.into(), Attr::Bool(true));
        for (key, v) in &first.attrs.0 {
            op.attrs.0.insert(format!("rms_norm.{key}"), v.clone());
        }
        s.inputs.extend(gammas);
        s.outputs.extend(normed);
        for j in norms {
            gone[j] = true;
        }
    }
    super::drop_marked(body, &gone);
}

#[cfg(test)]
#[path = "fuse_allreduce_norm_tests.rs"]
mod tests;
