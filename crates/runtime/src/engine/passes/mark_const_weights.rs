//! Once a model's constants are folded (`Model::load`), the products whose weights are all
//! fixed values of the model (loaded or folded at load, frozen, never written by a kernel of the
//! program) are marked, so their GEMVs may copy the weights before they wait for the previous
//! kernel: a qmatmul with [`CONST_WEIGHTS`] (read by engine/gpu/quant.rs as
//! `max_kernels_cuda::launch::quant::QFold::consts`), a W^T product by keeping
//! `GemmEpilogue::const_weights`. fuse_weight_transpose sets that one before folding, on values
//! derived from constants (its sibling joins need them); a step that derives one but stays in
//! the program (a slice of a device weight too large to fold, a transfer that failed at load)
//! writes it at every call, so the mark is dropped there. A qmatmul's weights are its uint8
//! inputs (a norm's weight, a residual and a folded store's cache inputs are of other types; an
//! 8-bit cache would only leave the step unmarked). Steps in nested bodies are left unmarked.

use max_graph::attrs::Attr;
use max_graph::ops::{Op, OpKind};
use max_graph::{DType, Type, ValueId};

use crate::engine::program::{Body, StepKind};

/// The attribute of a qmatmul step whose weights are fixed values of the model.
pub const CONST_WEIGHTS: &str = "const_weights";

/// Whether `op` (a qmatmul step's, or the product's op of one with folded steps) is marked
/// [`CONST_WEIGHTS`].
pub fn const_weights(op: &Op) -> bool {
    matches!(op.attrs.get(CONST_WEIGHTS), Some(Attr::Bool(true)))
}

/// Marks `body`'s products whose weights are all `fixed` and unmarks the others.
pub fn mark(body: &mut Body, types: &[Type], fixed: &dyn Fn(ValueId) -> bool) {
    for step in body.steps.iter_mut() {
        for inner in step.bodies.iter_mut() {
            mark(inner, types, &|_| false);
        }
        match &mut step.kind {
            StepKind::Gemm(g) if g.const_weights => {
                let weights = g.step_weights(step.outputs.len());
                g.const_weights = step.inputs.iter().skip(1).take(weights).all(|&v| fixed(v));
            }
            StepKind::Op(op) if op.kind == OpKind::QMatmul => {
                let bytes = |v: ValueId| matches!(&types[v], Type::Tensor(t) if t.dtype == DType::UInt8);
                let mut weights = step.inputs.iter().filter(|&&v| bytes(v)).peekable();
                if weights.peek().is_some() && weights.all(|&v| fixed(v)) {
                    op.attrs.0.insert(CONST_WEIGHTS.into(), Attr::Bool(true));
                } else {
                    op.attrs.0.remove(CONST_WEIGHTS);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use max_graph::attrs::{Attr, Attrs};
    use max_graph::ops::Op;
    use max_graph::{DeviceRef, Dim, TensorType};

    use super::*;
    use crate::engine::program::{GemmEpilogue, Step};
    use crate::shared::Fused;

    fn tensor(dtype: DType) -> Type {
        Type::Tensor(TensorType { dtype, shape: vec![Dim::stat(4), Dim::stat(8)], device: DeviceRef::gpu(0) })
    }

    /// A qmatmul step, marked (as a graph could hand one in) when `marked`.
    fn qmatmul(inputs: Vec<ValueId>, output: ValueId, marked: bool) -> Step {
        let mut attrs = Attrs::new();
        if marked {
            attrs.0.insert(CONST_WEIGHTS.into(), Attr::Bool(true));
        }
        Step { kind: StepKind::Op(Op { kind: OpKind::QMatmul, attrs }), inputs, outputs: vec![output], bodies: vec![] }
    }

    fn marked(s: &Step) -> bool {
        match &s.kind {
            StepKind::Gemm(g) => g.const_weights,
            StepKind::Op(op) => const_weights(op),
            _ => false,
        }
    }

    #[test]
    fn only_products_of_fixed_weights_are_marked() {
        // %0 f32 lhs, %1 %2 u8 weights (%2 computed at run time), %3 f32 residual, %4 %5 bf16
        // weights (%5 computed), outputs %6..
        let types = [DType::Float32, DType::UInt8, DType::UInt8, DType::Float32, DType::BFloat16, DType::BFloat16]
            .into_iter()
            .chain([DType::Float32; 6])
            .map(tensor)
            .collect::<Vec<_>>();
        let gemm = |w: ValueId, out: ValueId| {
            let mut g = GemmEpilogue::new(false, None, false, Fused { nodes: vec![] }, None);
            g.const_weights = true;
            Step { kind: StepKind::Gemm(g), inputs: vec![0, w], outputs: vec![out], bodies: vec![] }
        };
        let mut nested = Body { args: vec![], steps: vec![qmatmul(vec![0, 1], 11, true)], results: vec![11] };
        let mut body = Body {
            args: vec![0],
            steps: vec![
                qmatmul(vec![0, 1, 3], 6, false),
                qmatmul(vec![0, 1, 2], 7, true),
                gemm(4, 8),
                gemm(5, 9),
                Step { bodies: vec![std::mem::take(&mut nested)], ..qmatmul(vec![0, 1], 10, false) },
            ],
            results: vec![6, 7, 8, 9, 10],
        };
        let fixed = |v: ValueId| matches!(v, 1 | 4);
        mark(&mut body, &types, &fixed);
        // the residual (f32) is not a weight; a computed weight (%2 beside the fixed %1) leaves
        // a step unmarked, whatever it came with; nested steps: unmarked
        assert_eq!(body.steps.iter().map(marked).collect::<Vec<_>>(), [true, false, true, false, true]);
        assert!(!marked(&body.steps[4].bodies[0].steps[0]));
    }

    #[test]
    fn a_folded_stores_inputs_are_not_taken_for_weights() {
        // %0 x, %1 %2 %3 W_q W_k W_v, %4 the norm weight (all bf16), %5..%9 the store's chain,
        // blocks, slots, freqs_cis and positions (computed at run time); outputs q, k, v, the
        // normalised x, the store's chain and rope(q)
        let types = vec![tensor(DType::BFloat16); 16];
        let wt = Op { kind: OpKind::Transpose, attrs: Attrs::new() };
        let mut g = GemmEpilogue::new(false, None, false, Fused { nodes: vec![] }, Some(wt));
        g.norm = Some(Op { kind: OpKind::RmsNorm, attrs: Attrs::new() });
        g.rope_store = Some(Op { kind: OpKind::KvCacheStore, attrs: Attrs::new() });
        g.const_weights = true;
        let step =
            Step { kind: StepKind::Gemm(g), inputs: (0..10).collect(), outputs: (10..16).collect(), bodies: vec![] };
        let mut body = Body { args: vec![0], steps: vec![step], results: vec![10] };
        // (the norm weight not fixed: only the three weights are counted)
        mark(&mut body, &types, &|v| (1..=3).contains(&v));
        assert!(marked(&body.steps[0]));
        // W_v computed at run time unmarks it
        mark(&mut body, &types, &|v| (1..=2).contains(&v) || v == 4);
        assert!(!marked(&body.steps[0]));
    }
}
