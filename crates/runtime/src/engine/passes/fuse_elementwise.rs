//! Elementwise fusion: each single-use elementwise producer is folded into its elementwise
//! consumer, so a tree of them becomes one `Fused` step (one pass over memory).

use std::collections::HashMap;

use max_graph::{Type, ValueId};

use crate::engine::program::{Body, Fused, Operand, Step, StepKind, fusible};

/// Folds each single-use elementwise producer into its elementwise consumer.
pub(super) fn fuse(body: &mut Body, types: &[Type], uses: &HashMap<ValueId, usize>) {
    for step in body.steps.iter_mut() {
        for b in step.bodies.iter_mut() {
            fuse(b, types, uses);
        }
    }
    let producer = super::producers(body);
    let mut absorbed = vec![false; body.steps.len()];
    let mut fused_steps: HashMap<usize, Step> = HashMap::new();
    // Walk consumers last to first so a whole tree lands in its root.
    for root in (0..body.steps.len()).rev() {
        if absorbed[root] {
            continue;
        }
        let StepKind::Op(op) = &body.steps[root].kind else {
            continue;
        };
        if !fusible(op.kind) {
            continue;
        }
        let mut group = Fused { nodes: Vec::new() };
        let mut inputs: Vec<ValueId> = Vec::new();
        let mut members = Vec::new();
        let operand =
            build(root, body, &producer, uses, types, &mut absorbed, &mut group, &mut inputs, &mut members, true);
        if members.len() < 2 {
            for m in members {
                absorbed[m] = false;
            }
            continue;
        }
        debug_assert_eq!(operand, Operand::Node(group.nodes.len() - 1));
        fused_steps.insert(
            root,
            Step { kind: StepKind::Fused(group), inputs, outputs: body.steps[root].outputs.clone(), bodies: vec![] },
        );
    }
    let old = std::mem::take(&mut body.steps);
    for (i, step) in old.into_iter().enumerate() {
        if let Some(f) = fused_steps.remove(&i) {
            body.steps.push(f);
        } else if !absorbed[i] {
            body.steps.push(step);
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn build(
    i: usize,
    body: &Body,
    producer: &HashMap<ValueId, usize>,
    uses: &HashMap<ValueId, usize>,
    types: &[Type],
    absorbed: &mut [bool],
    group: &mut Fused,
    inputs: &mut Vec<ValueId>,
    members: &mut Vec<usize>,
    is_root: bool,
) -> Operand {
    let step = &body.steps[i];
    let StepKind::Op(op) = &step.kind else { unreachable!("only ops are fused") };
    if !is_root {
        absorbed[i] = true;
    }
    members.push(i);
    let mut operands = Vec::with_capacity(step.inputs.len());
    for &v in &step.inputs {
        let inner = producer.get(&v).copied().filter(|&p| {
            !absorbed[p]
                && uses.get(&v) == Some(&1)
                && matches!(&body.steps[p].kind, StepKind::Op(o) if fusible(o.kind))
                && body.steps[p].outputs.len() == 1
                && !body.results.contains(&v)
        });
        let operand = match inner {
            Some(p) => build(p, body, producer, uses, types, absorbed, group, inputs, members, false),
            None => {
                let k = inputs.iter().position(|x| *x == v).unwrap_or_else(|| {
                    inputs.push(v);
                    inputs.len() - 1
                });
                Operand::Input(k)
            }
        };
        operands.push(operand);
    }
    group.nodes.push((op.clone(), operands, types[step.outputs[0]].clone()));
    Operand::Node(group.nodes.len() - 1)
}
