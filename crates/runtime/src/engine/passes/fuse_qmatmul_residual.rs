//! A residual add after a quantized product (`h + qmatmul(x, W)`, the output and down
//! projections of a quantized decoder layer) becomes the product's own work: the qmatmul step
//! takes the residual as a third input (attribute `residual`) and the GPU's GEMV kernels add it
//! as they store their results, instead of a separate elementwise pass over the output. Only
//! GPU-placed f32, bf16 or f16 products whose result feeds nothing but the add, and residuals
//! of exactly the result's type (no broadcasting), fuse; the fused step takes the add's place,
//! where the residual and the product's inputs all exist. The host runs such a step as the
//! product then the add (engine/host_dispatch.rs), which is what the GPU computes in f32: one
//! rounding each. In 16 bits the GPU adds the residual to the f32 product and rounds the sum
//! once (the separate steps would round the product first).

use std::collections::HashMap;

use max_graph::attrs::Attr;
use max_graph::ops::OpKind;
use max_graph::{DType, DeviceKind, Type, ValueId};

use crate::engine::program::{Body, StepKind};

/// The attribute a fused qmatmul step carries.
pub const RESIDUAL: &str = "residual";

/// Fuses every eligible add into its qmatmul (top level only).
pub fn fuse(body: &mut Body, types: &[Type], uses: &HashMap<ValueId, usize>) {
    let gpu_f32 = |v: ValueId| {
        matches!(&types[v], Type::Tensor(t) if t.device.kind == DeviceKind::Gpu
            && matches!(t.dtype, DType::Float32 | DType::BFloat16 | DType::Float16))
    };
    // The single qmatmul producing each value.
    let mut producer: HashMap<ValueId, usize> = HashMap::new();
    for (i, s) in body.steps.iter().enumerate() {
        if let StepKind::Op(op) = &s.kind {
            let single = s.inputs.len() == 2 && s.outputs.len() == 1 && s.bodies.is_empty();
            if op.kind == OpKind::QMatmul && single && !op.attrs.0.contains_key(RESIDUAL) {
                producer.insert(s.outputs[0], i);
            }
        }
    }
    let mut gone = vec![false; body.steps.len()];
    for i in 0..body.steps.len() {
        let s = &body.steps[i];
        let StepKind::Op(op) = &s.kind else { continue };
        if op.kind != OpKind::Add || s.inputs.len() != 2 || s.outputs.len() != 1 || !s.bodies.is_empty() {
            continue;
        }
        let out = s.outputs[0];
        let pick = [(s.inputs[0], s.inputs[1]), (s.inputs[1], s.inputs[0])].into_iter().find(|&(p, r)| {
            producer.get(&p).is_some_and(|&q| !gone[q] && q < i)
                && uses.get(&p) == Some(&1)
                && p != r
                && gpu_f32(p)
                && types[r] == types[p]
                && types[out] == types[p]
        });
        let Some((p, r)) = pick else { continue };
        let q = producer[&p];
        let mut fused = body.steps[q].clone();
        if let StepKind::Op(op) = &mut fused.kind {
            op.attrs.0.insert(RESIDUAL.into(), Attr::Bool(true));
        }
        fused.inputs.push(r);
        fused.outputs = vec![out];
        body.steps[i] = fused;
        gone[q] = true;
    }
    super::drop_marked(body, &gone);
}

#[cfg(test)]
mod tests {
    use max_graph::attrs::Attrs;
    use max_graph::ops::Op;
    use max_graph::{DeviceRef, Dim, TensorType};

    use super::*;
    use crate::engine::program::Step;

    fn tensor(gpu: bool, dtype: DType, rows: &str) -> Type {
        let device = if gpu { DeviceRef::gpu(0) } else { DeviceRef::CPU };
        Type::Tensor(TensorType { dtype, shape: vec![Dim::sym(rows).unwrap(), Dim::stat(8)], device })
    }

    fn step(kind: OpKind, inputs: Vec<ValueId>, output: ValueId) -> Step {
        let mut attrs = Attrs::new();
        if kind == OpKind::QMatmul {
            attrs.0.insert("encoding".into(), Attr::Str("q4_1".into()));
        }
        Step { kind: StepKind::Op(Op { kind, attrs }), inputs, outputs: vec![output], bodies: vec![] }
    }

    /// %0 x, %1 weights, %2 residual, %3 = qmatmul(%0, %1), %4 = add(%2, %3) [, %5 = relu(%3)].
    fn case(gpu: bool, residual: Type, more_uses: bool) -> (Body, Vec<Type>, HashMap<ValueId, usize>) {
        let t = tensor(gpu, DType::Float32, "t");
        let types = vec![t.clone(), tensor(gpu, DType::UInt8, "n"), residual, t.clone(), t.clone(), t];
        let mut steps = vec![step(OpKind::QMatmul, vec![0, 1], 3), step(OpKind::Add, vec![2, 3], 4)];
        if more_uses {
            steps.push(step(OpKind::Relu, vec![3], 5));
        }
        let body = Body { args: vec![0, 1, 2], steps, results: vec![4] };
        let mut uses = HashMap::new();
        for s in &body.steps {
            for v in &s.inputs {
                *uses.entry(*v).or_insert(0) += 1;
            }
        }
        (body, types, uses)
    }

    fn kinds(b: &Body) -> Vec<(OpKind, Vec<ValueId>, bool)> {
        b.steps
            .iter()
            .map(|s| match &s.kind {
                StepKind::Op(op) => (op.kind, s.inputs.clone(), op.attrs.0.contains_key(RESIDUAL)),
                _ => unreachable!(),
            })
            .collect()
    }

    #[test]
    fn the_add_joins_its_gpu_product() {
        let (mut b, types, uses) = case(true, tensor(true, DType::Float32, "t"), false);
        fuse(&mut b, &types, &uses);
        assert_eq!(kinds(&b), vec![(OpKind::QMatmul, vec![0, 1, 2], true)]);
        assert_eq!(b.steps[0].outputs, vec![4]);
    }

    #[test]
    fn host_products_other_uses_and_broadcasts_stay_apart() {
        for (gpu, residual, more) in [
            (false, tensor(false, DType::Float32, "t"), false),
            (true, tensor(true, DType::Float32, "t"), true),
            (true, tensor(true, DType::Float32, "one"), false),
        ] {
            let (mut b, types, uses) = case(gpu, residual, more);
            let before = kinds(&b);
            fuse(&mut b, &types, &uses);
            assert_eq!(kinds(&b), before);
        }
    }
}
