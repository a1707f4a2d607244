//! Sibling qmatmuls: the products of one activation by several quantized weights of one
//! encoding (a layer's q, k and v projections; its gate and up projections) become one step
//! with the weights as its inputs after the activation and one output per weight, so the GPU
//! runs them as one launch (`max_kernels_cuda::launch::quant::qmatmul_siblings`). Only
//! GPU-placed products whose weights are constants join, at most `QV_SEGS` to a step, and a
//! product of another encoding (a mixed-type file's v projection) starts a new group; the step
//! takes the place of the first, where every sibling's inputs already exist (the activation is
//! shared and the weights are constants). Each product keeps its own output value.

use max_graph::ops::OpKind;
use max_graph::{DeviceKind, Type, ValueId};
use max_kernels_cuda::launch::quant::QV_SEGS;

use super::siblings;
use crate::engine::program::{Body, Step, StepKind};

/// Fuses the sibling qmatmuls of `body` (top level only).
pub fn fuse(body: &mut Body, types: &[Type]) {
    let constants = siblings::hoist_constants(body);
    let on_gpu = |v: ValueId| matches!(&types[v], Type::Tensor(t) if t.device.kind == DeviceKind::Gpu);
    let eligible = |s: &Step| {
        matches!(&s.kind, StepKind::Op(op) if op.kind == OpKind::QMatmul)
            && constants.contains(&s.inputs[1])
            && on_gpu(s.outputs[0])
    };
    // one encoding per launch: the head's attributes (its encoding) must match
    let same_encoding = |head: &Step, s: &Step| match (&head.kind, &s.kind) {
        (StepKind::Op(h), StepKind::Op(o)) => h.attrs == o.attrs,
        _ => false,
    };
    siblings::join(body, eligible, same_encoding, QV_SEGS);
}

#[cfg(test)]
mod tests {
    use max_graph::attrs::{Attr, Attrs};
    use max_graph::ops::Op;
    use max_graph::{DType, DeviceRef, Dim, TensorType};

    use super::*;
    use Step;

    fn tensor(kind: DeviceKind, dtype: DType) -> Type {
        let device = if kind == DeviceKind::Gpu { DeviceRef::gpu(0) } else { DeviceRef::CPU };
        Type::Tensor(TensorType { dtype, shape: vec![Dim::stat(1), Dim::stat(8)], device })
    }

    fn op(kind: OpKind, enc: &str) -> Op {
        let mut attrs = Attrs::new();
        if kind == OpKind::QMatmul {
            attrs.0.insert("encoding".into(), Attr::Str(enc.into()));
        }
        Op { kind, attrs }
    }

    fn step(kind: OpKind, enc: &str, inputs: Vec<ValueId>, output: ValueId) -> Step {
        Step { kind: StepKind::Op(op(kind, enc)), inputs, outputs: vec![output], bodies: vec![] }
    }

    /// %0 the activation; %1..%5 constant weights; products %6.. of kind `device`.
    fn body(device: DeviceKind, encs: &[&str]) -> (Body, Vec<Type>) {
        let mut types = vec![tensor(device, DType::Float32)];
        let mut steps = vec![];
        for i in 0..encs.len() {
            types.push(tensor(device, DType::UInt8));
            steps.push(step(OpKind::ConstantExternal, "", vec![], 1 + i));
        }
        for (i, enc) in encs.iter().enumerate() {
            types.push(tensor(device, DType::Float32));
            steps.push(step(OpKind::QMatmul, enc, vec![0, 1 + i], 1 + encs.len() + i));
        }
        (Body { args: vec![0], steps, results: (1 + encs.len()..1 + 2 * encs.len()).collect() }, types)
    }

    fn products(b: &Body) -> Vec<(Vec<ValueId>, Vec<ValueId>)> {
        b.steps
            .iter()
            .filter(|s| matches!(&s.kind, StepKind::Op(op) if op.kind == OpKind::QMatmul))
            .map(|s| (s.inputs.clone(), s.outputs.clone()))
            .collect()
    }

    #[test]
    fn consecutive_siblings_of_one_encoding_share_a_step_up_to_the_kernel_limit() {
        let (mut b, types) = body(DeviceKind::Gpu, &["q4_1", "q4_1", "q6_k", "q4_1", "q4_1", "q4_1"]);
        fuse(&mut b, &types);
        // the q6_k product closes the first group; the next three q4_1 products share a step
        assert_eq!(
            products(&b),
            vec![(vec![0, 1, 2], vec![7, 8]), (vec![0, 3], vec![9]), (vec![0, 4, 5, 6], vec![10, 11, 12])]
        );
        let (mut b, types) = body(DeviceKind::Gpu, &["q4_1"; 6]);
        fuse(&mut b, &types);
        assert_eq!(products(&b), vec![(vec![0, 1, 2, 3, 4], vec![7, 8, 9, 10]), (vec![0, 5, 6], vec![11, 12])]);
    }

    #[test]
    fn host_products_stay_apart() {
        let (mut b, types) = body(DeviceKind::Cpu, &["q4_1", "q4_1"]);
        fuse(&mut b, &types);
        assert_eq!(products(&b).len(), 2);
    }
}
