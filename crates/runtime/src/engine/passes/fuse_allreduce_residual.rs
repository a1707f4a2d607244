//! The residual add after a tensor-parallel allreduce joins the allreduce: a decoder layer adds
//! the sum of its attention's (or MLP's) partial results to the residual stream every device
//! holds. `x_i + allreduce.sum(p..)[i]` on every device i becomes one allreduce step with the
//! attribute `residual` (RESIDUAL): its inputs are `[p.., signals.., x..]` and its outputs the
//! adds' results. The sum is rounded to the dtype before the add, as the separate steps round
//! it, so the joined step gives their very bits. The GPU adds x_i inside the peer-to-peer
//! allreduce's launch (engine/gpu/collective.rs), where every device reads its own x_i, instead
//! of one device adding it before the allreduce and the others waiting for it; otherwise it
//! runs the allreduce, then an add per device, as the CPU does. Only a step whose every sum is
//! read by nothing but one add of a value of the sum's type made before the allreduce joins.
//! Top level only; before the elementwise groups (which would take the adds) and the join of
//! the norm after it (fuse_allreduce_norm), which takes a joined step too.

use std::collections::HashMap;

use max_graph::attrs::{Attr, Attrs};
use max_graph::ops::{Op, OpKind};
use max_graph::{DType, DeviceRef, Dim, TensorType, Type, ValueId};

use super::{NORM, RESIDUAL};
use crate::engine::program::{Body, Fused, StepKind};

/// The op of an allreduce step with a joined residual, without the attribute; None for another
/// op.
pub fn split_residual(op: &Op) -> Option<Op> {
    if op.kind != OpKind::AllreduceSum || !matches!(op.attrs.get(RESIDUAL), Some(Attr::Bool(true))) {
        return None;
    }
    let mut plain = op.clone();
    plain.attrs.0.remove(RESIDUAL);
    Some(plain)
}

/// The add of a joined step that the collective's kernels did not take, as the elementwise group
/// over `[residual, sum]` with a result of `dtype` and `shape` (the host's and the GPU's
/// fallback: the allreduce's rounded sum, then this add, as the separate steps run).
pub fn residual_add(dtype: DType, shape: &[usize]) -> Fused {
    let dims = shape.iter().map(|&d| Dim::stat(d as i64)).collect();
    let ty = Type::Tensor(TensorType::new(dtype, dims, DeviceRef::CPU));
    Fused::single(&Op { kind: OpKind::Add, attrs: Attrs::new() }, &ty, 2)
}

/// Joins every eligible set of adds to the allreduce before them.
pub fn fuse(body: &mut Body, types: &[Type]) {
    let producer = super::producers(body);
    let mut uses = HashMap::new();
    super::count_uses(body, &mut uses);
    // the two-input add steps reading each value
    let mut adds_of: HashMap<ValueId, Vec<usize>> = HashMap::new();
    for (i, s) in body.steps.iter().enumerate() {
        if matches!(&s.kind, StepKind::Op(op) if op.kind == OpKind::Add)
            && s.inputs.len() == 2
            && s.outputs.len() == 1
            && s.bodies.is_empty()
        {
            for &v in &s.inputs {
                adds_of.entry(v).or_default().push(i);
            }
        }
    }
    let mut gone = vec![false; body.steps.len()];
    for i in 0..body.steps.len() {
        let s = &body.steps[i];
        let StepKind::Op(op) = &s.kind else { continue };
        let n = s.outputs.len();
        let joined = [RESIDUAL, NORM].iter().any(|a| op.attrs.0.contains_key(*a));
        if op.kind != OpKind::AllreduceSum || joined || n == 0 || s.inputs.len() != 2 * n || !s.bodies.is_empty() {
            continue;
        }
        // each sum's add and the residual it adds
        let pairs: Option<Vec<(usize, ValueId)>> = s
            .outputs
            .iter()
            .map(|&o| {
                let &[j] = adds_of.get(&o).map(Vec::as_slice)? else { return None };
                let add = &body.steps[j];
                let x = if add.inputs[0] == o { add.inputs[1] } else { add.inputs[0] };
                let early = producer.get(&x).is_none_or(|&p| p < i);
                let fits = x != o
                    && early
                    && !gone[j]
                    && uses.get(&o) == Some(&1)
                    && !body.results.contains(&o)
                    && types[x] == types[o]
                    && types[add.outputs[0]] == types[o]
                    && matches!(types[o], Type::Tensor(_));
                fits.then_some((j, x))
            })
            .collect();
        let Some(pairs) = pairs else { continue };
        let sums: Vec<ValueId> = pairs.iter().map(|&(j, _)| body.steps[j].outputs[0]).collect();
        let s = &mut body.steps[i];
        let StepKind::Op(op) = &mut s.kind else { continue };
        op.attrs.0.insert(RESIDUAL.into(), Attr::Bool(true));
        s.inputs.extend(pairs.iter().map(|&(_, x)| x));
        s.outputs = sums;
        for (j, _) in pairs {
            gone[j] = true;
        }
    }
    super::drop_marked(body, &gone);
}

#[cfg(test)]
#[path = "fuse_allreduce_residual_tests.rs"]
mod tests;
