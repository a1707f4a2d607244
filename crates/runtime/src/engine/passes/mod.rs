//! The passes that lower a graph into the program IR (program.rs) and rewrite it, in the order
//! `lower` runs them: common subexpressions merged (`cse`), dead code removed (`dce`), matmul
//! and conv2d epilogues fused into their producers (`epilogue_chain` finds the chains), then
//! chains of elementwise ops grouped so each group runs as one pass over memory
//! (`fuse_elementwise`), and quantized products taking their residual add
//! (`fuse_qmatmul_residual`) or joined into one step per activation (`fuse_sibling_qmatmul`),
//! and on the GPU the gated MLP's gate, up and mul joined into one product
//! (`fuse_gated_gemv`), RMSNorms folded into the products they feed (`fuse_norm_gemv`) and
//! the ropes of q and k folded into the KV-cache store (`fuse_rope_store`) and that store into
//! the quantized q/k/v products (`fuse_qkv_rope_store`); the residual adds
//! after an allreduce join it first (`fuse_allreduce_residual`, before the epilogues), the
//! RMSNorms after it last (`fuse_allreduce_norm`). Once a model's constants are folded, the
//! paged attentions whose index inputs no kernel of the program writes are marked to read them
//! early (`mark_early_index`, which `Model::load` runs), and so are the products whose weights
//! are all fixed values of the model (`mark_const_weights`).
//! The IR does not depend on the passes.

use std::collections::HashMap;

use max_graph::graph::{BlockId, Graph};
use max_graph::{Type, ValueId};

use super::program::{Body, Program, Step, StepKind};

mod cse;
mod dce;
mod epilogue_chain;
mod fuse_allreduce_norm;
mod fuse_allreduce_residual;
mod fuse_conv_epilogue;
mod fuse_elementwise;
mod fuse_gated_gemv;
mod fuse_matmul_epilogue;
mod fuse_norm_gemv;
mod fuse_qkv_rope_store;
mod fuse_qmatmul_residual;
mod fuse_rope_store;
mod fuse_sibling_qmatmul;
mod fuse_weight_transpose;
mod mark_const_weights;
mod mark_early_index;
mod siblings;
#[cfg(test)]
mod test_util;

pub(crate) use fuse_allreduce_residual::{residual_add, split_residual};
pub(crate) use fuse_gated_gemv::{GATED, gated_group, split_qgated};
pub(crate) use fuse_norm_gemv::{NORM, split_qnorm};
pub use fuse_qkv_rope_store::ROPE_STORE;
pub(crate) use fuse_qkv_rope_store::split_rope_store;
pub(crate) use fuse_qmatmul_residual::RESIDUAL;
pub(crate) use mark_const_weights::const_weights;

pub(crate) use dce::{dce, free_uses};

/// Marks the paged attentions of `program` that may read their index inputs before waiting for
/// the previous kernel (see mark_early_index.rs). Run on the program as it will execute (after
/// constant folding, which removes steps: a kernel the mark relied on must still run).
pub fn mark_early_index(program: &mut Program) {
    mark_early_index::mark(&mut program.body, &program.types);
}

/// Marks `program`'s products whose weights are all `fixed` values of the model, so their GEMVs
/// may copy them before waiting for the previous kernel (see mark_const_weights.rs). Run on the
/// program as it will execute (after constant folding).
pub fn mark_const_weights(program: &mut Program, fixed: &dyn Fn(ValueId) -> bool) {
    mark_const_weights::mark(&mut program.body, &program.types, fixed);
}

/// Lowers `graph`'s body: duplicates merged, dead code removed, elementwise chains fused.
pub fn lower(graph: &Graph) -> Program {
    let types: Vec<Type> = graph.values.iter().map(|v| v.ty.clone()).collect();
    let mut body = lower_block(graph, 0);
    cse::cse(&mut body, &mut HashMap::new(), &mut HashMap::new());
    dce(&mut body);
    if max_tuning::current().flag_or(max_tuning::Knob::FusionAllreduceNorm, true) {
        fuse_allreduce_residual::fuse(&mut body, &types);
    }
    let mut uses = HashMap::new();
    count_uses(&body, &mut uses);
    if max_tuning::current().flag_or(max_tuning::Knob::FusionEpilogue, true) {
        fuse_matmul_epilogue::fuse(&mut body, &types, &uses);
        fuse_conv_epilogue::fuse(&mut body, &types, &uses);
        fuse_qmatmul_residual::fuse(&mut body, &types, &uses);
    }
    fuse_elementwise::fuse(&mut body, &types, &uses);
    fuse_weight_transpose::fuse(&mut body, &types);
    fuse_sibling_qmatmul::fuse(&mut body, &types);
    let tuning = max_tuning::current();
    if tuning.flag_or(max_tuning::Knob::FusionGatedGemv, true) {
        fuse_gated_gemv::fuse(&mut body, &types);
    }
    if tuning.flag_or(max_tuning::Knob::FusionNormGemv, true) {
        fuse_norm_gemv::fuse(&mut body, &types);
    }
    if tuning.flag_or(max_tuning::Knob::FusionAllreduceNorm, true) {
        fuse_allreduce_norm::fuse(&mut body, &types);
    }
    if tuning.flag_or(max_tuning::Knob::FusionRopeStore, true) {
        fuse_rope_store::fuse(&mut body, &types);
        if tuning.flag_or(max_tuning::Knob::FusionQkvRopeStore, true) {
            fuse_qkv_rope_store::fuse(&mut body, &types);
        }
    }
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

/// The step of `body` (top level) that makes each value.
/// The attributes of a step that carries a folded op's under `prefix` (`rms_norm.`,
/// `kv_cache_store.`) with `flag` marking the fold: (the folded op's, without the prefix; the
/// rest but `flag`), for the kernels that run the two apart.
fn split_prefixed(
    op: &max_graph::ops::Op,
    flag: &str,
    prefix: &str,
) -> (max_graph::attrs::Attrs, max_graph::attrs::Attrs) {
    let (mut folded, mut rest) = (max_graph::attrs::Attrs::new(), max_graph::attrs::Attrs::new());
    for (key, v) in &op.attrs.0 {
        match key.strip_prefix(prefix) {
            Some(name) => folded = folded.with(name, v.clone()),
            None if key == flag => {}
            None => rest = rest.with(key, v.clone()),
        }
    }
    (folded, rest)
}

fn producers(body: &Body) -> HashMap<ValueId, usize> {
    body.steps.iter().enumerate().flat_map(|(i, s)| s.outputs.iter().map(move |v| (*v, i))).collect()
}

/// Removes the steps of `body` whose index is marked in `gone`.
fn drop_marked(body: &mut Body, gone: &[bool]) {
    let mut i = 0;
    body.steps.retain(|_| {
        let keep = !gone[i];
        i += 1;
        keep
    });
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::program::{Operand, StepKind};
    use max_graph::attrs::Attrs;
    use max_graph::ops::{Op, OpKind};
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
