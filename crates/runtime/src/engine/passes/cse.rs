//! Common subexpression elimination: steps that apply the same op with the same attributes to
//! the same inputs are merged (ops with effects and control flow never are).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use max_graph::ValueId;
use max_graph::attrs::Attr;
use max_graph::ops::{Op, OpKind};

use crate::engine::program::{Body, StepKind, has_effects};

fn op_key(op: &Op, inputs: &[ValueId]) -> Option<String> {
    if has_effects(op.kind) || matches!(op.kind, OpKind::Cond | OpKind::WhileLoop | OpKind::Call) {
        return None;
    }
    let mut key = format!("{}{inputs:?}", op.kind.name());
    for (k, v) in &op.attrs.0 {
        match v {
            Attr::Data(d) => {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                d.hash(&mut h);
                key.push_str(&format!("|{k}=data:{}:{:x}", d.len(), h.finish()));
            }
            other => key.push_str(&format!("|{k}={other:?}")),
        }
    }
    Some(key)
}

/// Merges steps that apply the same op with the same attributes to the same inputs. `seen`
/// is scoped: a body may reuse a result of the blocks around it, never the other way round.
pub(super) fn cse(body: &mut Body, seen: &mut HashMap<String, Vec<ValueId>>, rename: &mut HashMap<ValueId, ValueId>) {
    let resolve = |v: &mut ValueId, rename: &HashMap<ValueId, ValueId>| {
        if let Some(r) = rename.get(v) {
            *v = *r;
        }
    };
    let mut kept = Vec::with_capacity(body.steps.len());
    for mut step in body.steps.drain(..) {
        for v in step.inputs.iter_mut() {
            resolve(v, rename);
        }
        for inner in step.bodies.iter_mut() {
            cse(inner, &mut seen.clone(), rename);
        }
        let key = match &step.kind {
            StepKind::Op(op) if step.bodies.is_empty() => op_key(op, &step.inputs),
            _ => None,
        };
        if let Some(k) = key {
            if let Some(prev) = seen.get(&k) {
                for (a, b) in step.outputs.iter().zip(prev) {
                    rename.insert(*a, *b);
                }
                continue;
            }
            seen.insert(k, step.outputs.clone());
        }
        kept.push(step);
    }
    body.steps = kept;
    for v in body.results.iter_mut() {
        resolve(v, rename);
    }
}
