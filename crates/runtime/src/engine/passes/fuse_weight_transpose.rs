//! Linear layers read their weight as stored: `x @ transpose(W)` with W [n, k] (how checkpoints
//! hold a linear layer's weight) becomes one GEMM step that takes W itself and computes
//! `x @ W^T`, instead of a transpose (folded into a second, transposed copy of every weight at
//! load) followed by a product. The GPU kernels read W [n, k] directly: the decode GEMV as whole
//! rows of W, the Hopper GEMM as its K-major B operand. Only GPU-placed 16-bit products are
//! rewritten (where the Hopper GEMM takes W^T at any row count); the host path applies the
//! transpose first, so constant folding stays correct. A transpose with other uses stays.
//!
//! Each such step records whether its weight is a constant (`GemmEpilogue::const_weights`),
//! which lets the GEMVs read it ahead of the previous kernel's end.
//!
//! Sibling products then share a step ([`fuse_siblings`]): the products of one activation by
//! several constant weights with no epilogue (a layer's q, k and v projections; its gate and
//! up projections) become one step with the weights after the activation and one output per
//! weight, which the GPU runs as one launch (`max_kernels_cuda::launch::gemv_nt`) for decode's
//! few rows. The step takes the place of the first product, where every sibling's inputs
//! already exist (the activation is shared and the weights are constants).

use std::collections::HashMap;

use max_graph::ops::{Op, OpKind};
use max_graph::types::DeviceKind;
use max_graph::{Attr, DType, Type, ValueId};

use max_kernels_cuda::launch::gemv_nt::SEGS;

use crate::engine::program::{Body, GemmEpilogue, StepKind};
use crate::shared::Fused;

/// Whether `op` on a rank-2 input swaps its two axes.
fn swaps_axes(op: &Op) -> bool {
    let axis = |key: &str| match op.attrs.get(key) {
        Some(Attr::Int(v)) => Some(v.rem_euclid(2)),
        _ => None,
    };
    match op.kind {
        OpKind::Transpose => matches!((axis("axis_1"), axis("axis_2")), (Some(a), Some(b)) if a != b),
        OpKind::Permute => {
            matches!(op.attrs.get("dims"), Some(Attr::Ints(d)) if d.as_slice() == [1, 0] || d.as_slice() == [-1, -2])
        }
        _ => false,
    }
}

fn rank2(types: &[Type], v: ValueId) -> bool {
    matches!(&types[v], Type::Tensor(t) if t.rank() == 2)
}

/// Rewrites the products of `body` (top level) that read a transposed rank-2 value.
pub fn fuse(body: &mut Body, types: &[Type]) {
    // value -> (its transpose's input, the transpose op)
    let mut transposed: HashMap<ValueId, (ValueId, Op)> = HashMap::new();
    for step in &body.steps {
        if let StepKind::Op(op) = &step.kind
            && step.inputs.len() == 1
            && rank2(types, step.inputs[0])
            && swaps_axes(op)
        {
            transposed.insert(step.outputs[0], (step.inputs[0], op.clone()));
        }
    }
    if transposed.is_empty() {
        return;
    }
    for step in body.steps.iter_mut() {
        let Some(&out) = step.outputs.first() else { continue };
        let Type::Tensor(t) = &types[out] else { continue };
        if t.device.kind == DeviceKind::Cpu || !matches!(t.dtype, DType::BFloat16 | DType::Float16) {
            continue;
        }
        let Some((w, op)) = step.inputs.get(1).and_then(|b| transposed.get(b)).cloned() else { continue };
        match &mut step.kind {
            StepKind::Op(m) if m.kind == OpKind::Matmul && step.inputs.len() == 2 => {
                step.kind = StepKind::Gemm(GemmEpilogue::new(false, None, false, Fused { nodes: vec![] }, Some(op)));
            }
            StepKind::Gemm(g) if g.b_transpose.is_none() => g.b_transpose = Some(op),
            _ => continue,
        }
        step.inputs[1] = w;
    }
    super::dce(body);
    let constants = super::siblings::hoist_constants(body);
    for step in body.steps.iter_mut() {
        if let StepKind::Gemm(g) = &mut step.kind {
            g.const_weights = g.b_transpose.is_some() && constants.contains(&step.inputs[1]);
        }
    }
    fuse_siblings(body, &constants);
}

/// Joins the epilogue-free products of one activation by constant weights read as stored, up
/// to [`SEGS`] to a step (top level only).
fn fuse_siblings(body: &mut Body, constants: &std::collections::HashSet<ValueId>) {
    let eligible = |s: &crate::engine::program::Step| {
        matches!(&s.kind, StepKind::Gemm(g) if g.b_transpose.is_some() && !g.bias && !g.residual && g.act.is_none())
            && constants.contains(&s.inputs[1])
    };
    super::siblings::join(body, eligible, |_, _| true, SEGS);
}

#[cfg(test)]
mod tests {
    use max_graph::attrs::{Attr, Attrs};
    use max_graph::graph::Graph;
    use max_graph::{DeviceRef, Dim, TensorType};

    use super::*;
    use crate::engine::passes::lower;

    fn input(g: &mut Graph, shape: &[i64], dtype: DType, device: DeviceRef) -> ValueId {
        let shape = shape.iter().map(|&d| Dim::stat(d)).collect();
        g.add_input(Type::Tensor(TensorType::new(dtype, shape, device)))
    }

    fn transpose(a: i64, b: i64) -> Op {
        Op { kind: OpKind::Transpose, attrs: Attrs::new().with("axis_1", Attr::Int(a)).with("axis_2", Attr::Int(b)) }
    }

    /// x @ W.T (+ bias) for x [4, 16], W [8, 16]: the step names and whether W is read directly.
    fn linear(dtype: DType, device: DeviceRef, op: Op, bias: bool, extra_use: bool) -> (Vec<String>, bool) {
        let mut g = Graph::new("t");
        let x = input(&mut g, &[4, 16], dtype, device);
        let w = input(&mut g, &[8, 16], dtype, device);
        let wt = g.add_node(op, vec![w]).unwrap()[0];
        let mut y = g.add_node(Op { kind: OpKind::Matmul, attrs: Attrs::new() }, vec![x, wt]).unwrap()[0];
        if bias {
            let b = input(&mut g, &[8], dtype, device);
            y = g.add_node(Op { kind: OpKind::Add, attrs: Attrs::new() }, vec![y, b]).unwrap()[0];
        }
        let outs = if extra_use { vec![y, wt] } else { vec![y] };
        g.set_outputs(outs).unwrap();
        let p = lower(&g);
        let reads_w = p.body.steps.iter().any(|s| matches!(s.kind, StepKind::Gemm(_)) && s.inputs[1] == w);
        (p.body.steps.iter().map(|s| s.name()).collect(), reads_w)
    }

    #[test]
    fn gpu_16bit_products_read_the_weight_as_stored() {
        let gpu = DeviceRef::gpu(0);
        assert_eq!(linear(DType::BFloat16, gpu, transpose(0, 1), false, false), (vec!["gemm[matmul_wt]".into()], true));
        assert_eq!(
            linear(DType::Float16, gpu, transpose(-1, -2), true, false),
            (vec!["gemm[matmul_wt+bias]".into()], true)
        );
        let permute = Op { kind: OpKind::Permute, attrs: Attrs::new().with("dims", Attr::Ints(vec![1, 0])) };
        assert_eq!(linear(DType::BFloat16, gpu, permute, false, false).0, vec!["gemm[matmul_wt]"]);
    }

    #[test]
    fn sibling_products_of_constant_weights_share_a_step() {
        let gpu = DeviceRef::gpu(0);
        let mut g = Graph::new("t");
        let x = input(&mut g, &[1, 16], DType::BFloat16, gpu);
        let mut outs = vec![];
        for (i, rows) in [8, 4, 4, 6, 6].into_iter().enumerate() {
            // distinct values: CSE would merge equal constants
            let data = Attr::Data(std::sync::Arc::new(vec![i as u8; rows * 16 * 2]));
            let attrs = Attrs::new()
                .with("dtype", Attr::DType(DType::BFloat16))
                .with("shape", Attr::Dims(vec![Dim::stat(rows as i64), Dim::stat(16)]))
                .with("device", Attr::Device(gpu))
                .with("data", data);
            let w = g.add_node(Op { kind: OpKind::Constant, attrs }, vec![]).unwrap()[0];
            let wt = g.add_node(transpose(0, 1), vec![w]).unwrap()[0];
            outs.push(g.add_node(Op { kind: OpKind::Matmul, attrs: Attrs::new() }, vec![x, wt]).unwrap()[0]);
        }
        g.set_outputs(outs.clone()).unwrap();
        let p = lower(&g);
        let gemms: Vec<&Vec<ValueId>> =
            p.body.steps.iter().filter(|s| matches!(s.kind, StepKind::Gemm(_))).map(|s| &s.outputs).collect();
        // at most SEGS weights to a launch
        assert_eq!(gemms, vec![&outs[..4].to_vec(), &outs[4..].to_vec()]);
    }

    #[test]
    fn pieces_of_weights_staged_at_their_use_still_share_a_step() {
        // A tensor-parallel layer on gpu:1: each weight is a constant on gpu:0 moved over (and
        // transposed) right before its product, after the previous product.
        let (gpu0, gpu1) = (DeviceRef::gpu(0), DeviceRef::gpu(1));
        let mut g = Graph::new("t");
        let x = input(&mut g, &[1, 16], DType::BFloat16, gpu1);
        let mut outs = vec![];
        for (i, rows) in [8, 4, 4].into_iter().enumerate() {
            let attrs = Attrs::new()
                .with("dtype", Attr::DType(DType::BFloat16))
                .with("shape", Attr::Dims(vec![Dim::stat(rows as i64), Dim::stat(16)]))
                .with("device", Attr::Device(gpu0))
                .with("data", Attr::Data(std::sync::Arc::new(vec![i as u8; rows * 16 * 2])));
            let w = g.add_node(Op { kind: OpKind::Constant, attrs }, vec![]).unwrap()[0];
            let moved = Op { kind: OpKind::TransferTo, attrs: Attrs::new().with("device", Attr::Device(gpu1)) };
            let w = g.add_node(moved, vec![w]).unwrap()[0];
            let wt = g.add_node(transpose(0, 1), vec![w]).unwrap()[0];
            outs.push(g.add_node(Op { kind: OpKind::Matmul, attrs: Attrs::new() }, vec![x, wt]).unwrap()[0]);
        }
        g.set_outputs(outs.clone()).unwrap();
        let p = lower(&g);
        let gemms: Vec<&Vec<ValueId>> =
            p.body.steps.iter().filter(|s| matches!(s.kind, StepKind::Gemm(_))).map(|s| &s.outputs).collect();
        assert_eq!(gemms, vec![&outs]);
        // every weight's transfer runs before the joined product
        let at = |kind: &str| p.body.steps.iter().rposition(|s| s.name().starts_with(kind)).unwrap();
        assert!(at("transfer_to") < at("gemm"));
        // a moved constant is still a constant: the GEMV may read it under PDL
        assert!(p.body.steps.iter().any(|s| matches!(&s.kind, StepKind::Gemm(g) if g.const_weights)));
    }

    #[test]
    fn only_constant_weights_are_marked_constant() {
        // W an input of the graph, or a constant: the product's `const_weights`
        let gpu = DeviceRef::gpu(0);
        let flags = |constant: bool| {
            let mut g = Graph::new("t");
            let x = input(&mut g, &[2, 16], DType::BFloat16, gpu);
            let w = if constant {
                crate::engine::passes::test_util::constant(&mut g, DType::BFloat16, &[8, 16], 1, gpu)
            } else {
                input(&mut g, &[8, 16], DType::BFloat16, gpu)
            };
            let wt = g.add_node(transpose(0, 1), vec![w]).unwrap()[0];
            let y = g.add_node(Op { kind: OpKind::Matmul, attrs: Attrs::new() }, vec![x, wt]).unwrap()[0];
            g.set_outputs(vec![y]).unwrap();
            let p = lower(&g);
            let gemms: Vec<bool> = p
                .body
                .steps
                .iter()
                .filter_map(|s| match &s.kind {
                    StepKind::Gemm(g) => Some(g.const_weights),
                    _ => None,
                })
                .collect();
            gemms
        };
        assert_eq!(flags(true), vec![true]);
        assert_eq!(flags(false), vec![false]);
    }

    #[test]
    fn other_products_keep_the_transpose() {
        let gpu = DeviceRef::gpu(0);
        assert_eq!(
            linear(DType::BFloat16, DeviceRef::CPU, transpose(0, 1), false, false).0,
            vec!["transpose", "matmul"]
        );
        assert_eq!(linear(DType::Float32, gpu, transpose(0, 1), false, false).0, vec!["transpose", "matmul"]);
        // the transposed value is also a result: the transpose stays, the product still reads W
        assert_eq!(
            linear(DType::BFloat16, gpu, transpose(0, 1), false, true),
            (vec!["transpose".into(), "gemm[matmul_wt]".into()], true)
        );
        let identity = Op { kind: OpKind::Permute, attrs: Attrs::new().with("dims", Attr::Ints(vec![0, 1])) };
        assert!(!swaps_axes(&identity) && swaps_axes(&transpose(1, -2)) && !swaps_axes(&transpose(1, -1)));
    }
}
