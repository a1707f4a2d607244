//! A decode step's attention is bound by its own instruction chain and leaves DRAM idle, while
//! the products right after it (the output projection, the MLP's gate and up) only stream
//! weights. With `attention.prefetch_mib` set, each GPU paged_attention step takes as extra
//! inputs, after its own ([`PAGED_INPUTS`]), the weights of the next products on its device:
//! 16-bit products' constant weights and qmatmuls' raw blocks, at most three, from at most the
//! next two products before the next attention, within the budget. The decode kernel asks them
//! into L2 once its own loads are issued (gpu/attention.rs, attention_decode.cu's
//! `dec_prefetch_next`); the GPU asks for the first `budget` bytes of them in order. Only
//! weights that already exist at the attention step are taken. Top level only; nothing else
//! reads the extra inputs.

use std::collections::HashMap;

use max_graph::ops::OpKind;
use max_graph::{DType, DeviceKind, DeviceRef, Type, ValueId};

use crate::engine::program::{Body, Step, StepKind};

/// paged_attention's own inputs (the chain, q, the cache, offsets, lengths, the table).
pub const PAGED_INPUTS: usize = 6;

/// Most weights one attention step takes.
const MOST: usize = 3;
/// Most products after an attention step whose weights it takes.
const PRODUCTS: usize = 2;

/// Bytes of `v` when it is a GPU tensor of static shape on `device`.
fn bytes_on(types: &[Type], v: ValueId, device: DeviceRef) -> Option<usize> {
    let Type::Tensor(t) = &types[v] else { return None };
    if t.device != device {
        return None;
    }
    let elems = t.shape.iter().try_fold(1usize, |n, d| Some(n * usize::try_from(d.as_static()?).ok()?))?;
    Some(elems * t.dtype.size_in_bytes())
}

/// How many inputs after the activation a product step reads as weights, and whether it is a
/// quantized one: a 16-bit product of constant weights read as stored (its siblings, a gated
/// pair), or a qmatmul (siblings: one weight per result; a gated pair: two); None otherwise.
fn weights_of(step: &Step) -> Option<(usize, bool)> {
    let (weights, quantized) = match &step.kind {
        StepKind::Gemm(g) if g.const_weights => (g.weights(step.outputs.len().saturating_sub(g.scratch())), false),
        StepKind::Op(op) if op.kind == OpKind::QMatmul => {
            let gated = op.attrs.get(super::fuse_gated_gemv::GATED).is_some();
            (if gated { 2 } else { step.outputs.len() }, true)
        }
        _ => return None,
    };
    let weights = weights.min(step.inputs.len().saturating_sub(1));
    (weights > 0).then_some((weights, quantized))
}

/// Gives each GPU paged_attention step of `body` the weights of the products after it, up to
/// `budget` bytes.
pub fn fuse(body: &mut Body, types: &[Type], budget: usize) {
    if budget == 0 {
        return;
    }
    let made: HashMap<ValueId, usize> =
        body.steps.iter().enumerate().flat_map(|(i, s)| s.outputs.iter().map(move |v| (*v, i))).collect();
    for i in 0..body.steps.len() {
        let step = &body.steps[i];
        let is_attention = matches!(&step.kind, StepKind::Op(op) if op.kind == OpKind::PagedAttention);
        if !is_attention || step.inputs.len() != PAGED_INPUTS {
            continue;
        }
        let device = match step.outputs.first().map(|&v| &types[v]) {
            Some(Type::Tensor(t)) if t.device.kind == DeviceKind::Gpu => t.device,
            _ => continue,
        };
        let mut taken: Vec<ValueId> = vec![];
        let mut total = 0usize;
        let mut products = 0;
        for later in &body.steps[i + 1..] {
            if matches!(&later.kind, StepKind::Op(op) if op.kind == OpKind::PagedAttention) {
                break;
            }
            let Some((weights, quantized)) = weights_of(later) else { continue };
            for &w in &later.inputs[1..=weights] {
                let exists = made.get(&w).is_none_or(|&at| at < i);
                // a quantized product's weights are its raw uint8 blocks
                let raw = !quantized || matches!(&types[w], Type::Tensor(t) if t.dtype == DType::UInt8);
                let room = taken.len() < MOST && total < budget;
                if let Some(bytes) = bytes_on(types, w, device).filter(|_| room && exists && raw && !taken.contains(&w))
                {
                    taken.push(w);
                    total += bytes;
                }
            }
            products += 1;
            if products == PRODUCTS || taken.len() == MOST || total >= budget {
                break;
            }
        }
        body.steps[i].inputs.extend(taken);
    }
}

#[cfg(test)]
mod tests {
    use max_graph::attrs::Attrs;
    use max_graph::ops::Op;
    use max_graph::{Dim, TensorType};

    use super::*;
    use crate::engine::program::GemmEpilogue;
    use crate::shared::Fused;

    fn op(kind: OpKind) -> Op {
        Op { kind, attrs: Attrs::new() }
    }

    fn step(kind: StepKind, inputs: Vec<ValueId>, outputs: Vec<ValueId>) -> Step {
        Step { kind, inputs, outputs, bodies: vec![] }
    }

    fn product(consts: bool) -> StepKind {
        let mut g = GemmEpilogue::new(false, None, false, Fused { nodes: vec![] }, Some(op(OpKind::Transpose)));
        g.const_weights = consts;
        StepKind::Gemm(g)
    }

    /// Values 0..20: bf16 [rows, 1024] on `device` (value 19 on gpu:1); a layer's attention
    /// (inputs 0..6, output 6), its products (weights 10.., a weight made after it: 9) and the
    /// next attention.
    fn layer(rows: &[i64]) -> (Body, Vec<Type>) {
        let gpu = DeviceRef::gpu(0);
        let types: Vec<Type> = (0..20)
            .map(|v| {
                let dev = if v == 19 { DeviceRef::gpu(1) } else { gpu };
                let r = rows.get(v).copied().unwrap_or(1);
                Type::Tensor(TensorType::new(DType::BFloat16, vec![Dim::stat(r), Dim::stat(1024)], dev))
            })
            .collect();
        let attention = |first: ValueId, out| {
            step(StepKind::Op(op(OpKind::PagedAttention)), (first..first + 6).collect(), vec![out])
        };
        let body = Body {
            args: (0..6).collect(),
            steps: vec![
                attention(0, 6),
                step(StepKind::Op(op(OpKind::Add)), vec![6, 6], vec![9]),
                step(product(true), vec![9, 10], vec![7]), // the output projection
                step(product(false), vec![7, 9], vec![8]), // a weight computed at run time
                step(product(true), vec![8, 11, 12], vec![13, 17]), // siblings: gate and up
                step(product(true), vec![13, 14], vec![15]), // the third product: not taken
                attention(0, 16),
            ],
            results: vec![15, 16, 17],
        };
        (body, types)
    }

    #[test]
    fn the_next_products_weights_join_the_attention_step() {
        let rows = [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 4096, 8192, 8192, 1, 1024];
        let (mut body, types) = layer(&rows);
        fuse(&mut body, &types, 64 << 20);
        // the projection's weight, then the siblings' two; the run-time weight (9, made after
        // the attention) is not taken, nor anything of the third product
        assert_eq!(body.steps[0].inputs[PAGED_INPUTS..], [10, 11, 12]);
        assert_eq!(body.steps[6].inputs.len(), PAGED_INPUTS); // nothing after it
    }

    #[test]
    fn the_budget_and_the_knob_limit_it() {
        let rows = [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 4096, 8192, 8192, 1, 1024];
        let (mut body, types) = layer(&rows);
        // 8 MiB of the projection's weight fill a 2 MiB budget: nothing more
        fuse(&mut body, &types, 2 << 20);
        assert_eq!(body.steps[0].inputs[PAGED_INPUTS..], [10]);
        let (mut off, types) = layer(&rows);
        fuse(&mut off, &types, 0);
        assert!(off.steps.iter().all(|s| s.inputs.len() <= PAGED_INPUTS));
    }

    #[test]
    fn quantized_products_give_their_raw_blocks() {
        let gpu = DeviceRef::gpu(0);
        // 0..6 the attention's inputs, 6 its output; 7 raw Q4_0 blocks, 8 an f32 residual
        let t = |dtype, rows| Type::Tensor(TensorType::new(dtype, vec![Dim::stat(rows), Dim::stat(1152)], gpu));
        let mut types: Vec<Type> = (0..12).map(|_| t(DType::Float32, 1)).collect();
        types[7] = t(DType::UInt8, 4096);
        types[10] = t(DType::UInt8, 8192);
        let q = StepKind::Op(op(OpKind::QMatmul));
        let mut body = Body {
            args: (0..6).collect(),
            steps: vec![
                step(StepKind::Op(op(OpKind::PagedAttention)), (0..6).collect(), vec![6]),
                step(q.clone(), vec![6, 7, 8], vec![9]), // the projection with a residual
                step(q, vec![9, 10], vec![11]),
            ],
            results: vec![11],
        };
        fuse(&mut body, &types, 64 << 20);
        assert_eq!(body.steps[0].inputs[PAGED_INPUTS..], [7, 10]);
    }

    #[test]
    fn only_weights_on_the_attention_device() {
        let rows = [1; 20];
        let (mut body, types) = layer(&rows);
        body.steps[2].inputs[1] = 19; // the projection's weight on gpu:1
        fuse(&mut body, &types, 64 << 20);
        assert_eq!(body.steps[0].inputs[PAGED_INPUTS..], [11, 12]);
    }
}
