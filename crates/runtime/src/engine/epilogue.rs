//! Matmul epilogue fusion: `residual + act(matmul(a, b) + bias)` — the linear layers of every
//! transformer and MLP — becomes one step whose GEMM applies the bias, the activation and the
//! residual add while its accumulators are still in registers, instead of writing the product
//! and reading it back up to three times. Only GPU-placed matmuls fuse (the GPU GEMMs take the
//! epilogue); the host path runs the same step as a matmul followed by the epilogue's
//! elementwise group, so constant folding and host execution stay correct.

use std::collections::HashMap;

use max_graph::ops::{Op, OpKind};
use max_graph::types::DeviceKind;
use max_graph::{DType, Dim, Type, ValueId};

use super::program::{Body, Fused, Operand, Step, StepKind};

/// The fused form of a matmul and the elementwise ops applied to its result. Step inputs are
/// `[a, b]`, then the bias if `bias`, then the residual if `residual`.
#[derive(Clone, Debug, PartialEq)]
pub struct GemmEpilogue {
    pub bias: bool,
    /// The activation op (relu, gelu with its `approximate` attribute, silu or sigmoid).
    pub act: Option<Op>,
    pub residual: bool,
    /// The same epilogue as an elementwise group over `[product, bias?, residual?]`, for the
    /// host path.
    pub tail: Fused,
}

impl GemmEpilogue {
    pub fn name(&self) -> String {
        let mut parts = vec!["matmul".to_string()];
        if self.bias {
            parts.push("bias".into());
        }
        if let Some(op) = &self.act {
            parts.push(op.kind.name().into());
        }
        if self.residual {
            parts.push("residual".into());
        }
        format!("gemm[{}]", parts.join("+"))
    }
}

fn tensor(types: &[Type], v: ValueId) -> Option<&max_graph::TensorType> {
    match &types[v] {
        Type::Tensor(t) => Some(t),
        _ => None,
    }
}

fn is_activation(op: &Op) -> bool {
    match op.kind {
        OpKind::Relu | OpKind::Silu | OpKind::Sigmoid => true,
        OpKind::Gelu => match op.attrs.get("approximate") {
            None => true,
            Some(max_graph::Attr::Str(s)) => matches!(s.as_str(), "none" | "tanh" | "quick"),
            Some(_) => false,
        },
        _ => false,
    }
}

/// The other operand of a binary `add` consuming `v`, if the step is one.
fn add_partner(step: &Step, v: ValueId) -> Option<ValueId> {
    let StepKind::Op(op) = &step.kind else { return None };
    if op.kind != OpKind::Add || step.inputs.len() != 2 || step.outputs.len() != 1 {
        return None;
    }
    match (step.inputs[0] == v, step.inputs[1] == v) {
        (true, false) => Some(step.inputs[1]),
        (false, true) => Some(step.inputs[0]),
        _ => None,
    }
}

/// Fuses every eligible matmul chain of `body` (not inside control-flow bodies: those run
/// through the same executor but are rarely hot). `uses` counts each value's readers.
pub fn fuse(body: &mut Body, types: &[Type], uses: &HashMap<ValueId, usize>) {
    let consumer: HashMap<ValueId, usize> =
        body.steps.iter().enumerate().flat_map(|(i, s)| s.inputs.iter().map(move |v| (*v, i))).collect();
    let mut removed = vec![false; body.steps.len()];
    let mut replaced: HashMap<usize, Step> = HashMap::new();
    for i in 0..body.steps.len() {
        let StepKind::Op(op) = &body.steps[i].kind else { continue };
        if op.kind != OpKind::Matmul || removed[i] {
            continue;
        }
        let mm = &body.steps[i];
        let Some(out) = tensor(types, mm.outputs[0]) else { continue };
        let gpu = out.device.kind != DeviceKind::Cpu;
        if !gpu || !matches!(out.dtype, DType::BFloat16 | DType::Float16 | DType::Float32) || out.shape.is_empty() {
            continue;
        }
        let n = out.shape[out.shape.len() - 1].clone();
        // Follows the chain while each link is the only reader of the previous value.
        let single = |v: ValueId| -> Option<usize> {
            if uses.get(&v) != Some(&1) || body.results.contains(&v) {
                return None;
            }
            consumer.get(&v).copied().filter(|&c| !removed[c])
        };
        let same_type = |v: ValueId| tensor(types, v) == Some(out);
        let mut cur = mm.outputs[0];
        let mut members = vec![];
        let mut inputs = vec![mm.inputs[0], mm.inputs[1]];
        let mut tail = Fused { nodes: vec![] };
        let mut last = Operand::Input(0);
        let (mut bias, mut act, mut residual) = (false, None, false);
        let add_node = |tail: &mut Fused, lhs: Operand, rhs: Operand, ty: &Type| {
            tail.nodes.push((Op { kind: OpKind::Add, attrs: Default::default() }, vec![lhs, rhs], ty.clone()));
            Operand::Node(tail.nodes.len() - 1)
        };
        // 1. bias: a vector of the product's dtype broadcast along its last axis
        if let Some(c) = single(cur) {
            if let Some(b) = add_partner(&body.steps[c], cur) {
                let bt = tensor(types, b);
                let is_bias = bt.is_some_and(|t| {
                    t.dtype == out.dtype
                        && t.device == out.device
                        && !t.shape.is_empty()
                        && t.shape.len() <= out.shape.len()
                        && t.shape[t.shape.len() - 1] == n
                        && t.shape[..t.shape.len() - 1].iter().all(|d| *d == Dim::stat(1))
                });
                if is_bias && same_type(body.steps[c].outputs[0]) {
                    bias = true;
                    inputs.push(b);
                    last = add_node(&mut tail, last, Operand::Input(1), &types[body.steps[c].outputs[0]]);
                    members.push(c);
                    cur = body.steps[c].outputs[0];
                }
            }
        }
        // 2. activation
        if let Some(c) = single(cur) {
            let s = &body.steps[c];
            if let StepKind::Op(a) = &s.kind {
                if is_activation(a) && s.inputs == [cur] && same_type(s.outputs[0]) {
                    act = Some(a.clone());
                    tail.nodes.push((a.clone(), vec![last], types[s.outputs[0]].clone()));
                    last = Operand::Node(tail.nodes.len() - 1);
                    members.push(c);
                    cur = s.outputs[0];
                }
            }
        }
        // 3. residual: a tensor of exactly the product's type
        if let Some(c) = single(cur) {
            if let Some(r) = add_partner(&body.steps[c], cur) {
                if same_type(r) && same_type(body.steps[c].outputs[0]) {
                    residual = true;
                    inputs.push(r);
                    let k = inputs.len() - 2;
                    add_node(&mut tail, last, Operand::Input(k), &types[body.steps[c].outputs[0]]);
                    members.push(c);
                    cur = body.steps[c].outputs[0];
                }
            }
        }
        if members.is_empty() {
            continue;
        }
        let epi = GemmEpilogue { bias, act, residual, tail };
        let step = Step { kind: StepKind::Gemm(epi), inputs, outputs: vec![cur], bodies: vec![] };
        // The fused step runs where the last member ran: every input is ready by then.
        let at = *members.last().unwrap_or(&i);
        removed[i] = true;
        for m in &members {
            removed[*m] = true;
        }
        replaced.insert(at, step);
    }
    let old = std::mem::take(&mut body.steps);
    for (i, step) in old.into_iter().enumerate() {
        if let Some(s) = replaced.remove(&i) {
            body.steps.push(s);
        } else if !removed[i] {
            body.steps.push(step);
        }
    }
}

#[cfg(test)]
mod tests {
    use max_graph::attrs::{Attr, Attrs};
    use max_graph::graph::Graph;
    use max_graph::{DeviceRef, TensorType};

    use super::*;
    use crate::engine::program::lower;

    fn op(kind: OpKind) -> Op {
        Op { kind, attrs: Attrs::new() }
    }

    fn input(g: &mut Graph, shape: &[i64], device: DeviceRef) -> ValueId {
        let shape = shape.iter().map(|&d| Dim::stat(d)).collect();
        g.add_input(Type::Tensor(TensorType::new(DType::BFloat16, shape, device)))
    }

    /// x @ w + b -> gelu(tanh) -> + x: one gemm step on the GPU, separate steps on the host.
    fn mlp_block(device: DeviceRef) -> Vec<String> {
        let mut g = Graph::new("t");
        let x = input(&mut g, &[8, 16], device.clone());
        let w = input(&mut g, &[16, 16], device.clone());
        let b = input(&mut g, &[16], device);
        let y = g.add_node(op(OpKind::Matmul), vec![x, w]).unwrap()[0];
        let y = g.add_node(op(OpKind::Add), vec![b, y]).unwrap()[0];
        let gelu = Op { kind: OpKind::Gelu, attrs: Attrs::new().with("approximate", Attr::Str("tanh".into())) };
        let y = g.add_node(gelu, vec![y]).unwrap()[0];
        let y = g.add_node(op(OpKind::Add), vec![y, x]).unwrap()[0];
        g.set_outputs(vec![y]).unwrap();
        lower(&g).body.steps.iter().map(|s| s.name()).collect()
    }

    #[test]
    fn bias_activation_and_residual_fuse_into_the_gemm_on_gpu() {
        assert_eq!(mlp_block(DeviceRef::gpu(0)), vec!["gemm[matmul+bias+gelu+residual]"]);
        assert_eq!(mlp_block(DeviceRef::CPU), vec!["matmul", "fused[add+gelu+add]"]);
    }

    #[test]
    fn a_product_read_twice_or_a_broadcast_residual_stays_unfused() {
        let gpu = DeviceRef::gpu(0);
        let mut g = Graph::new("t");
        let x = input(&mut g, &[16, 16], gpu.clone());
        let w = input(&mut g, &[16, 16], gpu.clone());
        let row = input(&mut g, &[1, 16], gpu.clone());
        let full = input(&mut g, &[4, 16, 16], gpu);
        let y = g.add_node(op(OpKind::Matmul), vec![x, w]).unwrap()[0];
        let twice = g.add_node(op(OpKind::Mul), vec![y, y]).unwrap()[0];
        let z = g.add_node(op(OpKind::Matmul), vec![w, w]).unwrap()[0];
        // [1, 16] is a bias (broadcast over rows); adding [4, 16, 16] changes the shape: no residual
        let z = g.add_node(op(OpKind::Add), vec![z, row]).unwrap()[0];
        let z = g.add_node(op(OpKind::Add), vec![z, full]).unwrap()[0];
        g.set_outputs(vec![twice, z]).unwrap();
        let steps: Vec<String> = lower(&g).body.steps.iter().map(|s| s.name()).collect();
        assert_eq!(steps, vec!["matmul", "mul", "gemm[matmul+bias]", "add"]);
    }
}
