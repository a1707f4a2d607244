//! The chain matcher shared by the epilogue passes: after a producer (a matmul, a conv2d),
//! `add bias -> activation -> clamp -> add [beta *] residual`, each part optional, every
//! intermediate read only by the next step; `fuse_chains` replaces each chain it finds, with its
//! producer, by the step the pass builds from it. The same chain is kept as an elementwise group
//! (`Chain::tail`) for the host path.

use std::collections::HashMap;

use max_graph::ops::{Op, OpKind};
use max_graph::types::DeviceKind;
use max_graph::{DType, Dim, Type, ValueId};

use crate::engine::program::{Body, Fused, Operand, Step, StepKind};

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

/// The other operand of a binary op of `kind` consuming `v`, if the step is one.
fn partner(step: &Step, kind: OpKind, v: ValueId) -> Option<ValueId> {
    let StepKind::Op(op) = &step.kind else { return None };
    if op.kind != kind || step.inputs.len() != 2 || step.outputs.len() != 1 {
        return None;
    }
    match (step.inputs[0] == v, step.inputs[1] == v) {
        (true, false) => Some(step.inputs[1]),
        (false, true) => Some(step.inputs[0]),
        _ => None,
    }
}

/// The value of a one-element float constant (any shape of ones), when `v` is one.
fn scalar_constant(body: &Body, producer: &HashMap<ValueId, usize>, types: &[Type], v: ValueId) -> Option<f64> {
    let t = tensor(types, v)?;
    if !t.shape.iter().all(|d| *d == Dim::stat(1)) {
        return None;
    }
    let StepKind::Op(op) = &body.steps[*producer.get(&v)?].kind else { return None };
    if op.kind != OpKind::Constant {
        return None;
    }
    let Some(max_graph::Attr::Data(d)) = op.attrs.get("data") else { return None };
    let bytes = |n: usize| d.get(..n);
    let value = match t.dtype {
        DType::Float32 => f32::from_le_bytes(bytes(4)?.try_into().ok()?) as f64,
        DType::Float16 => half::f16::from_le_bytes(bytes(2)?.try_into().ok()?).to_f64(),
        DType::BFloat16 => half::bf16::from_le_bytes(bytes(2)?.try_into().ok()?).to_f64(),
        _ => return None,
    };
    (d.len() == t.dtype.size_in_bytes()).then_some(value)
}

/// What may follow the bias and activation besides a plain residual add.
#[derive(Clone, Copy, Debug)]
pub(super) struct Allowed {
    /// `max`/`min` with scalar constants after the activation, folded into one clamp.
    pub clamp: bool,
    /// A residual scaled by a scalar constant (`residual * beta` or `beta * residual`).
    pub beta: bool,
}

/// An epilogue chain found after a producer: `add bias -> activation -> clamp -> add
/// [beta *] residual`, each part optional, every intermediate read only by the next step.
#[derive(Debug)]
pub(super) struct Chain {
    /// Steps absorbed into the fused step.
    pub members: Vec<usize>,
    /// Values the epilogue reads, after the producer's own inputs.
    pub inputs: Vec<ValueId>,
    /// The epilogue as an elementwise group over `[product, inputs...]` (the host path).
    pub tail: Fused,
    pub result: ValueId,
    /// Positions in `inputs`.
    pub bias: Option<usize>,
    pub act: Option<Op>,
    /// `[lo, hi]` (lo <= hi): the min/max steps as one `min(max(v, lo), hi)`.
    pub clamp: Option<(f64, f64)>,
    pub residual: Option<usize>,
    pub beta: Option<f64>,
}

/// Finds the chain after `body.steps[head]`, whose result `out` is a GPU tensor.
fn match_chain(
    body: &Body,
    types: &[Type],
    uses: &HashMap<ValueId, usize>,
    maps: (&HashMap<ValueId, usize>, &HashMap<ValueId, usize>),
    removed: &[bool],
    head: usize,
    allowed: Allowed,
) -> Option<Chain> {
    let (consumer, producer) = maps;
    let start = body.steps[head].outputs[0];
    let out = tensor(types, start)?;
    let n = out.shape.last()?.clone();
    let free = |v: ValueId| uses.get(&v) == Some(&1) && !body.results.contains(&v);
    // Follows the chain while each link is the only reader of the previous value.
    let single = |v: ValueId| -> Option<usize> {
        if !free(v) {
            return None;
        }
        consumer.get(&v).copied().filter(|&c| !removed[c])
    };
    let same_type = |v: ValueId| tensor(types, v) == Some(out);
    // A scalar constant of the output's dtype and device.
    let scalar = |v: ValueId| {
        let t = tensor(types, v)?;
        if t.dtype != out.dtype || t.device != out.device {
            return None;
        }
        scalar_constant(body, producer, types, v).filter(|x| x.is_finite())
    };
    let ty = types[start].clone();
    let mut c = Chain {
        members: vec![],
        inputs: vec![],
        tail: Fused { nodes: vec![] },
        result: start,
        bias: None,
        act: None,
        clamp: None,
        residual: None,
        beta: None,
    };
    let mut last = Operand::Input(0);
    let node = |c: &mut Chain, op: OpKind, operands: Vec<Operand>| {
        c.tail.nodes.push((Op { kind: op, attrs: Default::default() }, operands, ty.clone()));
        Operand::Node(c.tail.nodes.len() - 1)
    };
    let input = |c: &mut Chain, v: ValueId| {
        c.inputs.push(v);
        Operand::Input(c.inputs.len())
    };
    // 1. bias: a vector of the product's dtype broadcast along its last axis
    if let Some(s) = single(c.result)
        && let Some(b) = partner(&body.steps[s], OpKind::Add, c.result)
    {
        let is_bias = tensor(types, b).is_some_and(|t| {
            t.dtype == out.dtype
                && t.device == out.device
                && !t.shape.is_empty()
                && t.shape.len() <= out.shape.len()
                && t.shape[t.shape.len() - 1] == n
                && t.shape[..t.shape.len() - 1].iter().all(|d| *d == Dim::stat(1))
        });
        if is_bias && same_type(body.steps[s].outputs[0]) {
            c.bias = Some(c.inputs.len());
            let operand = input(&mut c, b);
            last = node(&mut c, OpKind::Add, vec![last, operand]);
            c.members.push(s);
            c.result = body.steps[s].outputs[0];
        }
    }
    // 2. activation
    if let Some(s) = single(c.result) {
        let step = &body.steps[s];
        if let StepKind::Op(a) = &step.kind
            && is_activation(a)
            && step.inputs == [c.result]
            && same_type(step.outputs[0])
        {
            c.act = Some(a.clone());
            c.tail.nodes.push((a.clone(), vec![last], ty.clone()));
            last = Operand::Node(c.tail.nodes.len() - 1);
            c.members.push(s);
            c.result = step.outputs[0];
        }
    }
    // 3. clamp: max(v, a) maps [lo, hi] to [max(lo, a), max(hi, a)], min(v, b) to
    // [min(lo, b), min(hi, b)], so any sequence of them is one clamp.
    if allowed.clamp {
        while let Some(s) = single(c.result) {
            let step = &body.steps[s];
            let found = [OpKind::Maximum, OpKind::Minimum].into_iter().find_map(|kind| {
                let k = partner(step, kind, c.result)?;
                Some((kind, k, scalar(k)?))
            });
            let Some((kind, k, value)) = found.filter(|_| same_type(step.outputs[0])) else { break };
            let (lo, hi) = c.clamp.unwrap_or((f64::NEG_INFINITY, f64::INFINITY));
            c.clamp = Some(if kind == OpKind::Maximum {
                (lo.max(value), hi.max(value))
            } else {
                (lo.min(value), hi.min(value))
            });
            let operand = input(&mut c, k);
            last = node(&mut c, kind, vec![last, operand]);
            c.members.push(s);
            c.result = step.outputs[0];
        }
    }
    // 4. residual: a tensor of exactly the product's type, or one times a scalar constant
    if let Some(s) = single(c.result)
        && let Some(r) = partner(&body.steps[s], OpKind::Add, c.result)
    {
        let scaled = producer.get(&r).copied().filter(|&p| allowed.beta && !removed[p] && free(r)).and_then(|p| {
            let m = &body.steps[p];
            let [x, y] = m.inputs[..] else { return None };
            let StepKind::Op(op) = &m.kind else { return None };
            if op.kind != OpKind::Mul || m.outputs.len() != 1 || !same_type(r) {
                return None;
            }
            match (scalar(x), scalar(y)) {
                (None, Some(b)) if same_type(x) => Some((p, x, y, b, false)),
                (Some(b), None) if same_type(y) => Some((p, y, x, b, true)),
                _ => None,
            }
        });
        if same_type(body.steps[s].outputs[0]) && (scaled.is_some() || same_type(r)) {
            let operand = match scaled {
                Some((p, res, k, beta, beta_first)) => {
                    c.residual = Some(c.inputs.len());
                    let ro = input(&mut c, res);
                    let ko = input(&mut c, k);
                    c.beta = Some(beta);
                    c.members.push(p);
                    node(&mut c, OpKind::Mul, if beta_first { vec![ko, ro] } else { vec![ro, ko] })
                }
                None => {
                    c.residual = Some(c.inputs.len());
                    input(&mut c, r)
                }
            };
            node(&mut c, OpKind::Add, vec![last, operand]);
            c.members.push(s);
            c.result = body.steps[s].outputs[0];
        }
    }
    (!c.members.is_empty()).then_some(c)
}

/// Fuses every step of `body` for which `head` builds a fused step from its epilogue chain
/// (not inside control-flow bodies: those run through the same executor but are rarely hot).
/// Only GPU-placed 16/32-bit float results take an epilogue. `uses` counts each value's
/// readers.
pub(super) fn fuse_chains(
    body: &mut Body,
    types: &[Type],
    uses: &HashMap<ValueId, usize>,
    allowed: Allowed,
    head: impl Fn(&Step, Chain) -> Option<Step>,
) {
    let consumer: HashMap<ValueId, usize> =
        body.steps.iter().enumerate().flat_map(|(i, s)| s.inputs.iter().map(move |v| (*v, i))).collect();
    let producer = super::producers(body);
    let mut removed = vec![false; body.steps.len()];
    let mut replaced: HashMap<usize, Step> = HashMap::new();
    for i in 0..body.steps.len() {
        if removed[i] || !matches!(body.steps[i].kind, StepKind::Op(_)) || body.steps[i].outputs.len() != 1 {
            continue;
        }
        let Some(out) = tensor(types, body.steps[i].outputs[0]) else { continue };
        let gpu = out.device.kind != DeviceKind::Cpu;
        if !gpu || !matches!(out.dtype, DType::BFloat16 | DType::Float16 | DType::Float32) || out.shape.is_empty() {
            continue;
        }
        let Some(chain) = match_chain(body, types, uses, (&consumer, &producer), &removed, i, allowed) else {
            continue;
        };
        let members = chain.members.clone();
        let Some(step) = head(&body.steps[i], chain) else { continue };
        // The fused step runs where the last member ran: every input is ready by then.
        let at = members.iter().copied().max().unwrap_or(i);
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
