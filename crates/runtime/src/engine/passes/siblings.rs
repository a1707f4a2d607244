//! Sibling products: steps that multiply one activation (their first input) by different
//! constant weights join the first of them, which takes every sibling's weight as a further
//! input and produces every sibling's output, so the GPU runs them as one launch. The joined
//! step keeps the first one's place, where every sibling's inputs already exist (the activation
//! is shared and the weights are constants). Used by fuse_sibling_qmatmul and
//! fuse_weight_transpose; top level only.
//!
//! A weight may also be derived from constants through layout ops alone (a tensor-parallel
//! piece: a slice of the whole weight moved to its device, staged where the layer first uses
//! it). [`hoist_constants`] moves such steps to the top first: they read nothing computed at run time
//! (and are folded when the model loads, but for a slice of a device weight too large to fold or
//! a transfer that fails there: mark_const_weights.rs), so every sibling's weight exists at the
//! first product.

use std::collections::{HashMap, HashSet};

use max_graph::ValueId;
use max_graph::ops::OpKind;

use crate::engine::program::{Body, Step, StepKind};

/// Ops that only cut, view or move their input, and that the model's load folds at any size
/// for constant inputs (so a hoisted one never holds arena memory from the top of the body; a
/// transpose or cast of a large host weight may stay a step, so those do not move).
fn layout_only(kind: OpKind) -> bool {
    matches!(
        kind,
        OpKind::TransferTo | OpKind::Slice | OpKind::Reshape | OpKind::Rebind | OpKind::Squeeze | OpKind::Unsqueeze
    )
}

/// The values `body`'s constant steps make, and those derived from them alone by layout ops;
/// the steps making them move to the top of `body` (in their order), ahead of everything
/// computed at run time.
pub(super) fn hoist_constants(body: &mut Body) -> HashSet<ValueId> {
    let mut known = HashSet::new();
    let mut hoisted = Vec::new();
    let mut rest = Vec::new();
    for step in std::mem::take(&mut body.steps) {
        let constant = step.bodies.is_empty()
            && match &step.kind {
                StepKind::Op(op) if matches!(op.kind, OpKind::Constant | OpKind::ConstantExternal) => true,
                StepKind::Op(op) => {
                    layout_only(op.kind) && !step.inputs.is_empty() && step.inputs.iter().all(|v| known.contains(v))
                }
                _ => false,
            };
        if constant {
            known.extend(step.outputs.iter().copied());
            hoisted.push(step);
        } else {
            rest.push(step);
        }
    }
    hoisted.extend(rest);
    body.steps = hoisted;
    known
}

/// Joins each `eligible` step (inputs `[activation, weight]`, one output) into the open group
/// of its activation when `fits(head, step)` and the group has fewer than `max` outputs;
/// otherwise it opens a new group.
pub(super) fn join(body: &mut Body, eligible: impl Fn(&Step) -> bool, fits: impl Fn(&Step, &Step) -> bool, max: usize) {
    let mut open: HashMap<ValueId, usize> = HashMap::new();
    let mut joined = vec![false; body.steps.len()];
    for i in 0..body.steps.len() {
        let s = &body.steps[i];
        if s.inputs.len() != 2 || s.outputs.len() != 1 || !s.bodies.is_empty() || !eligible(s) {
            continue;
        }
        let lhs = s.inputs[0];
        match open.get(&lhs).copied().filter(|&g| body.steps[g].outputs.len() < max && fits(&body.steps[g], s)) {
            Some(g) => {
                let (w, out) = (s.inputs[1], s.outputs[0]);
                body.steps[g].inputs.push(w);
                body.steps[g].outputs.push(out);
                joined[i] = true;
            }
            None => {
                open.insert(lhs, i);
            }
        }
    }
    super::drop_marked(body, &joined);
}
