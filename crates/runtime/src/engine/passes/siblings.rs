//! Sibling products: steps that multiply one activation (their first input) by different
//! constant weights join the first of them, which takes every sibling's weight as a further
//! input and produces every sibling's output, so the GPU runs them as one launch. The joined
//! step keeps the first one's place, where every sibling's inputs already exist (the activation
//! is shared and the weights are constants). Used by fuse_sibling_qmatmul and
//! fuse_weight_transpose; top level only.

use std::collections::{HashMap, HashSet};

use max_graph::ValueId;
use max_graph::ops::OpKind;

use crate::engine::program::{Body, Step, StepKind};

/// The values `body`'s constant steps make.
pub(super) fn constants(body: &Body) -> HashSet<ValueId> {
    body.steps
        .iter()
        .filter(
            |s| matches!(&s.kind, StepKind::Op(op) if matches!(op.kind, OpKind::Constant | OpKind::ConstantExternal)),
        )
        .flat_map(|s| s.outputs.iter().copied())
        .collect()
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
    let mut i = 0;
    body.steps.retain(|_| {
        let keep = !joined[i];
        i += 1;
        keep
    });
}
