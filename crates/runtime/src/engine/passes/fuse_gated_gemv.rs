//! The gated MLP's first half, `act(x @ W_gate^T) * (x @ W_up^T)`, becomes one step: the gate
//! product (with its activation epilogue) and the up product, both reading their weight as
//! stored (passes/fuse_weight_transpose.rs), and the mul that joins them. The GPU runs it as one
//! GEMV launch for decode's few rows (`gemv_nt`'s gated kernels), on Hopper as one launch of the
//! wgmma GEMM at more rows (gemm_sm90p.cu's `_gt` kernels: an activation of the gate at most),
//! and otherwise as the two products and the mul it replaces, into the gate and up values that
//! stay as the step's scratch outputs. Only a mul of exactly two such products of one activation, each read by
//! nothing else and all three of one type, fuses; the step takes the mul's place, where every
//! input exists. Top level only.
//!
//! A quantized MLP's gate and up products, joined into one qmatmul step
//! (fuse_sibling_qmatmul.rs), and the fused `silu(gate) * up` after them fold alike: the
//! qmatmul step carries the attribute [`GATED`] (the activation's name), its inputs are
//! `[x, W_gate, W_up]` and its outputs the product, then the gate and up values (scratch that
//! only the unfused path writes). The GPU's GEMV kernels store silu(gate) * up at 1-2 rows
//! (max_kernels_cuda::launch::quant::fold_path), otherwise the two products and the fused
//! elementwise step run as before. The step keeps the products' place.

use std::collections::HashMap;

use max_graph::attrs::Attr;
use max_graph::ops::{Op, OpKind};
use max_graph::{DeviceKind, Type, ValueId};

use crate::engine::program::{Body, Fused, GemmEpilogue, Operand, Step, StepKind};

/// A single-result product reading its one weight as stored, with no bias, residual or fold.
fn plain_wt(step: &Step) -> Option<&GemmEpilogue> {
    let StepKind::Gemm(g) = &step.kind else { return None };
    let plain = g.b_transpose.is_some() && !g.bias && !g.residual && g.norm.is_none() && g.gated.is_none();
    (plain && step.inputs.len() == 2 && step.outputs.len() == 1).then_some(g)
}

/// The attribute of a qmatmul step that stores `act(gate) * up` (its value: the activation).
pub const GATED: &str = "gated";

/// The activation of a gated qmatmul step's `op`, and the product's own op, or None.
pub fn split_qgated(op: &Op) -> Option<(OpKind, Op)> {
    let act = match op.attrs.get(GATED)? {
        Attr::Str(s) if s == "silu" => OpKind::Silu,
        _ => return None,
    };
    let mut product = op.clone();
    product.attrs.0.remove(GATED);
    Some((act, product))
}

/// `act(gate) * up` over inputs `[gate, up]` as the fused elementwise group a gated qmatmul
/// step replaced (every node of `dtype` and `shape`).
pub fn gated_group(act: OpKind, dtype: max_graph::DType, shape: &[usize]) -> Fused {
    let dims = shape.iter().map(|&d| max_graph::Dim::stat(d as i64)).collect();
    let ty = Type::Tensor(max_graph::TensorType::new(dtype, dims, max_graph::DeviceRef::CPU));
    let node = |kind, operands| (Op { kind, attrs: max_graph::attrs::Attrs::new() }, operands, ty.clone());
    Fused {
        nodes: vec![node(act, vec![Operand::Input(0)]), node(OpKind::Mul, vec![Operand::Node(0), Operand::Input(1)])],
    }
}

/// Fuses every eligible gate/up/mul triple of `body`.
pub fn fuse(body: &mut Body, types: &[Type]) {
    if max_tuning::current().flag_or(max_tuning::Knob::FusionQuantized, true) {
        fuse_qmatmul_pairs(body, types);
    }
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
        epi.const_weights &= plain_wt(&body.steps[up]).is_some_and(|u| u.const_weights);
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

/// `silu(gate) * up` as a fused group of `f`: (the input that is the gate, the up input).
fn silu_times(f: &Fused) -> Option<(usize, usize)> {
    let [(act, a_ops, _), (mul, m_ops, _)] = &f.nodes[..] else { return None };
    let (&[Operand::Input(g)], OpKind::Silu, OpKind::Mul) = (&a_ops[..], act.kind, mul.kind) else { return None };
    let up = match m_ops[..] {
        [Operand::Node(0), Operand::Input(u)] | [Operand::Input(u), Operand::Node(0)] => u,
        _ => return None,
    };
    (g != up).then_some((g, up))
}

/// Folds each fused `silu(gate) * up` whose gate and up are the two products of one GPU
/// qmatmul step (siblings of a plain encoding, nothing else folded) into that step.
fn fuse_qmatmul_pairs(body: &mut Body, types: &[Type]) {
    let mut uses = HashMap::new();
    super::count_uses(body, &mut uses);
    let producer = super::producers(body);
    let mut gone = vec![false; body.steps.len()];
    for i in 0..body.steps.len() {
        let s = &body.steps[i];
        let StepKind::Fused(f) = &s.kind else { continue };
        if s.inputs.len() != 2 || s.outputs.len() != 1 {
            continue;
        }
        let Some((gi, ui)) = silu_times(f) else { continue };
        let (out, gate, up) = (s.outputs[0], s.inputs[gi], s.inputs[ui]);
        let Some(&p) = producer.get(&gate) else { continue };
        let q = &body.steps[p];
        let StepKind::Op(op) = &q.kind else { continue };
        let on_gpu = matches!(&types[out], Type::Tensor(t) if t.device.kind == DeviceKind::Gpu);
        let plain = op.kind == OpKind::QMatmul
            && !matches!(op.attrs.get("encoding"), Some(Attr::Str(e)) if e.eq_ignore_ascii_case("gptq"))
            && [super::RESIDUAL, super::NORM, GATED].iter().all(|a| !op.attrs.0.contains_key(*a));
        let single = |v: ValueId| uses.get(&v) == Some(&1) && !body.results.contains(&v) && types[v] == types[out];
        let pair = q.inputs.len() == 3 && q.outputs.len() == 2 && q.outputs.contains(&up) && q.bodies.is_empty();
        if !plain || !pair || !on_gpu || gone[p] || !single(gate) || !single(up) {
            continue;
        }
        let (wg, wu) = if q.outputs[0] == gate { (q.inputs[1], q.inputs[2]) } else { (q.inputs[2], q.inputs[1]) };
        let mut op = op.clone();
        op.attrs.0.insert(GATED.into(), Attr::Str("silu".into()));
        let x = q.inputs[0];
        body.steps[p] =
            Step { kind: StepKind::Op(op), inputs: vec![x, wg, wu], outputs: vec![out, gate, up], bodies: vec![] };
        gone[i] = true;
    }
    super::drop_marked(body, &gone);
}
