//! A graph lowered for execution: the reachable ops in order, with common subexpressions
//! merged and chains of elementwise ops grouped so each group runs as one pass over memory.
//! Everything here is independent of input shapes; plan.rs adds the shapes.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};

use max_graph::attrs::Attr;
use max_graph::graph::{BlockId, Graph};
use max_graph::ops::{Family, Op, OpKind};
use max_graph::{Type, ValueId};

pub use crate::shared::{Fused, Operand};

#[derive(Clone, Debug, PartialEq)]
pub enum StepKind {
    Op(Op),
    Fused(Fused),
    /// A matmul with its bias/activation/residual epilogue (see epilogue.rs).
    Gemm(super::epilogue::GemmEpilogue),
    /// A conv2d with its bias/activation/clamp/scaled-residual epilogue (see conv_epilogue.rs).
    Conv(super::conv_epilogue::ConvEpilogue),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub kind: StepKind,
    pub inputs: Vec<ValueId>,
    pub outputs: Vec<ValueId>,
    /// Bodies of control-flow ops (cond: then, else; while_loop: predicate, body).
    pub bodies: Vec<Body>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Body {
    pub args: Vec<ValueId>,
    pub steps: Vec<Step>,
    pub results: Vec<ValueId>,
}

#[derive(Clone, Debug)]
pub struct Program {
    /// Type of every value id (ids are those of the source graph).
    pub types: Vec<Type>,
    pub body: Body,
}

impl Step {
    pub fn name(&self) -> String {
        match &self.kind {
            StepKind::Op(op) => op.kind.name().to_string(),
            StepKind::Fused(f) => {
                let names: Vec<&str> = f.nodes.iter().map(|(op, _, _)| op.kind.name()).collect();
                format!("fused[{}]", names.join("+"))
            }
            StepKind::Gemm(g) => g.name(),
            StepKind::Conv(c) => c.name(),
        }
    }
}

/// Ops that may join a fused elementwise group.
pub fn fusible(kind: OpKind) -> bool {
    kind.family() == Family::Elementwise || kind == OpKind::Cast
}

fn has_effects(kind: OpKind) -> bool {
    matches!(
        kind,
        OpKind::Print
            | OpKind::BufferStore
            | OpKind::BufferStoreSlice
            | OpKind::BufferLoad
            | OpKind::ChainCreate
            | OpKind::KvCacheStore
            | OpKind::PagedAttention
    )
}

/// Lowers `graph`'s body: duplicates merged, dead code removed, elementwise chains fused.
pub fn lower(graph: &Graph) -> Program {
    let types: Vec<Type> = graph.values.iter().map(|v| v.ty.clone()).collect();
    let mut body = lower_block(graph, 0);
    cse(&mut body, &mut HashMap::new(), &mut HashMap::new());
    dce(&mut body);
    let mut uses = HashMap::new();
    count_uses(&body, &mut uses);
    if max_tuning::current().flag_or(max_tuning::Knob::FusionEpilogue, true) {
        super::epilogue::fuse(&mut body, &types, &uses);
        super::conv_epilogue::fuse(&mut body, &types, &uses);
    }
    fuse(&mut body, &types, &uses);
    Program { types, body }
}

fn lower_block(graph: &Graph, b: BlockId) -> Body {
    let block = &graph.blocks[b];
    let steps = block
        .nodes
        .iter()
        .map(|&n| {
            let node = &graph.nodes[n];
            Step {
                kind: StepKind::Op(node.op.clone()),
                inputs: node.inputs.clone(),
                outputs: node.outputs.clone(),
                bodies: node.blocks.iter().map(|&inner| lower_block(graph, inner)).collect(),
            }
        })
        .collect();
    Body { args: block.args.clone(), steps, results: block.results.clone().unwrap_or_default() }
}

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
fn cse(body: &mut Body, seen: &mut HashMap<String, Vec<ValueId>>, rename: &mut HashMap<ValueId, ValueId>) {
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
        let effects = matches!(&step.kind, StepKind::Op(op) if has_effects(op.kind));
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

fn count_uses(body: &Body, uses: &mut HashMap<ValueId, usize>) {
    for step in &body.steps {
        for v in &step.inputs {
            *uses.entry(*v).or_insert(0) += 1;
        }
        for b in &step.bodies {
            count_uses(b, uses);
        }
    }
    for v in &body.results {
        *uses.entry(*v).or_insert(0) += 1;
    }
}

/// Folds each single-use elementwise producer into its elementwise consumer.
fn fuse(body: &mut Body, types: &[Type], uses: &HashMap<ValueId, usize>) {
    for step in body.steps.iter_mut() {
        for b in step.bodies.iter_mut() {
            fuse(b, types, uses);
        }
    }
    let producer: HashMap<ValueId, usize> =
        body.steps.iter().enumerate().flat_map(|(i, s)| s.outputs.iter().map(move |v| (*v, i))).collect();
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

#[cfg(test)]
mod tests {
    use super::*;
    use max_graph::attrs::Attrs;
    use max_graph::{DType, DeviceRef, Dim, TensorType};

    fn op(kind: OpKind) -> Op {
        Op { kind, attrs: Attrs::new() }
    }

    fn graph() -> (Graph, ValueId) {
        let mut g = Graph::new("t");
        let x = g.add_input(Type::Tensor(TensorType::new(DType::Float32, vec![Dim::stat(4)], DeviceRef::CPU)));
        (g, x)
    }

    #[test]
    fn duplicates_merge_and_dead_code_goes() {
        let (mut g, x) = graph();
        let a = g.add_node(op(OpKind::Exp), vec![x]).unwrap()[0];
        let b = g.add_node(op(OpKind::Exp), vec![x]).unwrap()[0];
        let _unused = g.add_node(op(OpKind::Sin), vec![x]).unwrap();
        let c = g.add_node(op(OpKind::Add), vec![a, b]).unwrap()[0];
        g.set_outputs(vec![c]).unwrap();
        let p = lower(&g);
        let names: Vec<String> = p.body.steps.iter().map(|s| s.name()).collect();
        assert_eq!(names, vec!["exp", "add"]);
        assert_eq!(p.body.steps[1].inputs, vec![a, a]);
    }

    #[test]
    fn elementwise_chains_fuse_into_one_step() {
        let (mut g, x) = graph();
        let a = g.add_node(op(OpKind::Exp), vec![x]).unwrap()[0];
        let b = g.add_node(op(OpKind::Relu), vec![a]).unwrap()[0];
        let c = g.add_node(op(OpKind::Mul), vec![b, x]).unwrap()[0];
        let d = g.add_node(op(OpKind::Sigmoid), vec![c]).unwrap()[0];
        g.set_outputs(vec![d, a]).unwrap();
        let p = lower(&g);
        // `a` is a graph output, so it stays its own step; relu, mul and sigmoid fuse.
        let names: Vec<String> = p.body.steps.iter().map(|s| s.name()).collect();
        assert_eq!(names, vec!["exp", "fused[relu+mul+sigmoid]"]);
        let fused = &p.body.steps[1];
        assert_eq!(fused.inputs, vec![a, x]);
        assert_eq!(fused.outputs, vec![d]);
        let StepKind::Fused(f) = &fused.kind else { panic!() };
        assert_eq!(f.nodes[1].1, vec![Operand::Node(0), Operand::Input(1)]);
    }
}
