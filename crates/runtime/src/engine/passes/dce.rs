//! Dead code elimination: steps whose results nothing needs go; side-effecting ops stay.

use std::collections::HashSet;

use max_graph::ValueId;

use crate::engine::program::{Body, StepKind, has_effects};

/// Removes steps whose results nothing needs (side-effecting ops always stay).
pub(crate) fn dce(body: &mut Body) {
    for step in body.steps.iter_mut() {
        for inner in step.bodies.iter_mut() {
            dce(inner);
        }
    }
    let mut needed: HashSet<ValueId> = body.results.iter().copied().collect();
    let mut keep = vec![false; body.steps.len()];
    for (i, step) in body.steps.iter().enumerate().rev() {
        // (a product with a KV-cache store folded in stores as the store did)
        let effects = match &step.kind {
            StepKind::Op(op) => has_effects(op.kind) || op.attrs.0.contains_key(super::ROPE_STORE),
            StepKind::Gemm(g) => g.rope_store.is_some(),
            _ => false,
        };
        if effects || step.outputs.iter().any(|v| needed.contains(v)) {
            keep[i] = true;
            needed.extend(step.inputs.iter().copied());
            free_uses(&step.bodies, &mut needed);
        }
    }
    let mut it = keep.into_iter();
    body.steps.retain(|_| it.next().unwrap_or(true));
}

/// Values used inside bodies (including ones defined outside them).
pub(crate) fn free_uses(bodies: &[Body], needed: &mut HashSet<ValueId>) {
    for body in bodies {
        for step in &body.steps {
            needed.extend(step.inputs.iter().copied());
            free_uses(&step.bodies, needed);
        }
        needed.extend(body.results.iter().copied());
    }
}
