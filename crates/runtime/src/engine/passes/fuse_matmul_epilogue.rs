//! Matmul epilogue fusion: `residual + act(matmul(a, b) + bias)` — the linear layers of every
//! transformer and MLP — becomes one step whose GEMM applies the bias, the activation and the
//! residual add while its accumulators are still in registers, instead of writing the product
//! and reading it back up to three times. Only GPU-placed matmuls fuse (the GPU GEMMs take the
//! epilogue); the host path runs the same step as a matmul followed by the epilogue's
//! elementwise group, so constant folding and host execution stay correct.

use std::collections::HashMap;

use max_graph::ops::OpKind;
use max_graph::{Type, ValueId};

use super::epilogue_chain::{Allowed, fuse_chains};
use crate::engine::program::{Body, GemmEpilogue, Step, StepKind};

/// Fuses every eligible matmul chain of `body` (bias, activation, residual).
pub fn fuse(body: &mut Body, types: &[Type], uses: &HashMap<ValueId, usize>) {
    let allowed = Allowed { clamp: false, beta: false };
    fuse_chains(body, types, uses, allowed, |mm, c| {
        let StepKind::Op(op) = &mm.kind else { return None };
        if op.kind != OpKind::Matmul || mm.inputs.len() != 2 {
            return None;
        }
        let mut inputs = mm.inputs.clone();
        inputs.extend(&c.inputs);
        let epi = GemmEpilogue::new(c.bias.is_some(), c.act, c.residual.is_some(), c.tail, None);
        Some(Step { kind: StepKind::Gemm(epi), inputs, outputs: vec![c.result], bodies: vec![] })
    });
}

#[cfg(test)]
mod tests {
    use max_graph::attrs::{Attr, Attrs};
    use max_graph::graph::Graph;
    use max_graph::ops::Op;
    use max_graph::{DType, DeviceRef, Dim, TensorType};

    use super::*;
    use crate::engine::passes::lower;

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
        let x = input(&mut g, &[8, 16], device);
        let w = input(&mut g, &[16, 16], device);
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
        let x = input(&mut g, &[16, 16], gpu);
        let w = input(&mut g, &[16, 16], gpu);
        let row = input(&mut g, &[1, 16], gpu);
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
