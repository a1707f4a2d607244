//! The gated MLP's first half, `act(x @ W_gate^T) * (x @ W_up^T)`, becomes one step: the gate
//! product (with its activation epilogue) and the up product, both reading their weight as
//! stored (passes/fuse_weight_transpose.rs), and the mul that joins them. The GPU runs it as one
//! GEMV launch for decode's few rows (`gemv_nt`'s gated kernels), and otherwise as the two
//! products and the mul it replaces, into the gate and up values that stay as the step's
//! scratch outputs. Only a mul of exactly two such products of one activation, each read by
//! nothing else and all three of one type, fuses; the step takes the mul's place, where every
//! input exists. Top level only.

use std::collections::HashMap;

use max_graph::ops::OpKind;
use max_graph::{Type, ValueId};

use crate::engine::program::{Body, Fused, GemmEpilogue, Operand, Step, StepKind};

/// A single-result product reading its one weight as stored, with no bias, residual or fold.
fn plain_wt(step: &Step) -> Option<&GemmEpilogue> {
    let StepKind::Gemm(g) = &step.kind else { return None };
    let plain = g.b_transpose.is_some() && !g.bias && !g.residual && g.norm.is_none() && g.gated.is_none();
    (plain && step.inputs.len() == 2 && step.outputs.len() == 1).then_some(g)
}

/// Fuses every eligible gate/up/mul triple of `body`.
pub fn fuse(body: &mut Body, types: &[Type]) {
    let mut uses = HashMap::new();
    super::count_uses(body, &mut uses);
    let producer = super::producers(body);
    let mut gone = vec![false; body.steps.len()];
    for i in 0..body.steps.len() {
        let s = &body.steps[i];
        let StepKind::Op(op) = &s.kind else { continue };
        if op.kind != OpKind::Mul || s.inputs.len() != 2 || s.outputs.len() != 1 || !s.bodies.is_empty() {
            continue;
        }
        let out = s.outputs[0];
        let single = |v: ValueId| uses.get(&v) == Some(&1) && !body.results.contains(&v) && types[v] == types[out];
        let found = [(0, 1), (1, 0)].into_iter().find_map(|(gi, ui)| {
            let (gv, uv) = (s.inputs[gi], s.inputs[ui]);
            let (gp, up) = (*producer.get(&gv)?, *producer.get(&uv)?);
            if gp == up || gone[gp] || gone[up] || !single(gv) || !single(uv) {
                return None;
            }
            let (gate, upe) = (plain_wt(&body.steps[gp])?, plain_wt(&body.steps[up])?);
            let same_x = body.steps[gp].inputs[0] == body.steps[up].inputs[0];
            let (gw, uw) = (body.steps[gp].inputs[1], body.steps[up].inputs[1]);
            let ok = same_x && gate.act.is_some() && upe.act.is_none() && types[gw] == types[uw];
            ok.then_some((gi, gp, up))
        });
        let Some((gi, gp, up)) = found else { continue };
        let operands = if gi == 0 {
            vec![Operand::Input(0), Operand::Input(1)]
        } else {
            vec![Operand::Input(1), Operand::Input(0)]
        };
        let mut epi = plain_wt(&body.steps[gp]).cloned().unwrap_or_else(|| unreachable!());
        epi.gated = Some(Fused { nodes: vec![(op.clone(), operands, types[out].clone())] });
        let (g, u) = (&body.steps[gp], &body.steps[up]);
        let fused = Step {
            kind: StepKind::Gemm(epi),
            inputs: vec![g.inputs[0], g.inputs[1], u.inputs[1]],
            outputs: vec![out, g.outputs[0], u.outputs[0]],
            bodies: vec![],
        };
        body.steps[i] = fused;
        gone[gp] = true;
        gone[up] = true;
    }
    super::drop_marked(body, &gone);
}
