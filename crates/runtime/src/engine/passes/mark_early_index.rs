//! Marks the paged attentions whose index inputs a kernel may read before it waits for the
//! previous kernel of its stream (attribute `max_graph::ops::attention::EARLY_INDEX`). A kernel
//! launched under programmatic stream serialization starts while the stream's previous kernel
//! drains, so it must wait before reading anything that kernel may write; the decode attention
//! reads the row offsets, the cache lengths and the lookup table first, in two dependent round
//! trips, and can take them before the wait when (1) all three are immutable program inputs,
//! which no kernel of the program writes, and (2) a kernel of the program runs before it (its
//! query comes from one, through views at most), so the previous kernel of the stream is not
//! one of an earlier execution that may have written them. GPU attentions at the top level only.
//! With the mark, the tensor-core decode kernel also copies keys below a sequence's cached
//! length before its wait: they were stored by earlier steps, and a step's store writes its own
//! rows' positions, at the cached length and past it (the paged cache's contract: new tokens
//! are appended).
//!
//! A fused rope + KV-cache store right before such an attention (on the same cache) is marked
//! too (`max_graph::ops::attention::EARLY_NEXT`) when the kernel before the store is one of the
//! program that does not touch the cache: the store then lets the attention launch before it
//! waits itself, so the attention's early reads overlap the product ahead of the store. That
//! puts the attention's reads beside two unfinished kernels, the store (writing positions at
//! and past the cached length) and the one before it (not touching the cache); every other
//! kernel lets its successor launch only after its own wait, so all earlier ones are done.
//! q/k/v products with that store folded in (passes/fuse_qkv_rope_store.rs) are marked alike
//! (`kv_cache_store.early_next`, or the early_next of a `Gemm` step's `rope_store`): where
//! their store runs as a launch of its own after the products (more tokens than the folding
//! kernels take), the kernels before it are the step's own products; where it is folded, the
//! product lets the attention launch only after its own wait, as above.

use std::collections::{HashMap, HashSet};

use max_graph::attrs::Attr;
use max_graph::ops::attention::{EARLY_INDEX, EARLY_NEXT, STORE_ROPE};
use max_graph::ops::{Family, OpKind};
use max_graph::{DeviceKind, Type, ValueId};

use crate::engine::program::{Body, Step, StepKind};

/// Whether running `step` on the GPU launches a kernel (views and host-side work do not).
fn launches(step: &Step) -> bool {
    match &step.kind {
        StepKind::Fused(_) | StepKind::Gemm(_) | StepKind::Conv(_) => true,
        StepKind::Op(op) => {
            step.bodies.is_empty()
                && matches!(
                    op.kind.family(),
                    Family::Elementwise
                        | Family::Reduction
                        | Family::Linalg
                        | Family::Conv
                        | Family::Quant
                        | Family::Attention
                        | Family::Sampling
                )
        }
    }
}

/// Marks every eligible paged attention of `body`.
pub fn mark(body: &mut Body, types: &[Type]) {
    let producer = super::producers(body);
    let fixed: HashSet<ValueId> = body.args.iter().copied().filter(|&v| matches!(types[v], Type::Tensor(_))).collect();
    let mut marks = Vec::new();
    for (s, step) in body.steps.iter().enumerate() {
        let StepKind::Op(op) = &step.kind else { continue };
        if op.kind != OpKind::PagedAttention || step.inputs.len() != 6 {
            continue;
        }
        let on_gpu =
            matches!(&types[step.inputs[1]], Type::Tensor(t) | Type::Buffer(t) if t.device.kind == DeviceKind::Gpu);
        if on_gpu
            && step.inputs[3..6].iter().all(|v| fixed.contains(v))
            && after_kernel(body, &producer, step.inputs[1], s)
        {
            marks.push(s);
        }
    }
    let stores: Vec<usize> = marks.iter().filter_map(|&s| store_before(body, types, s)).collect();
    for s in marks {
        if let StepKind::Op(op) = &mut body.steps[s].kind {
            op.attrs.0.insert(EARLY_INDEX.into(), Attr::Bool(true));
        }
    }
    for s in stores {
        match &mut body.steps[s].kind {
            StepKind::Op(op) => {
                // (a store folded into quantized q/k/v products keeps its attributes under a prefix)
                let key = match op.attrs.0.contains_key(super::ROPE_STORE) {
                    true => format!("kv_cache_store.{EARLY_NEXT}"),
                    false => EARLY_NEXT.to_string(),
                };
                op.attrs.0.insert(key, Attr::Bool(true));
            }
            StepKind::Gemm(g) => {
                if let Some(op) = &mut g.rope_store {
                    op.attrs.0.insert(EARLY_NEXT.into(), Attr::Bool(true));
                }
            }
            _ => {}
        }
    }
}

/// The launching step before step `s` (over views and chain creations, which launch nothing),
/// if the steps between are such and that step launches a GPU kernel.
fn kernel_before(body: &Body, types: &[Type], s: usize) -> Option<usize> {
    let mut p = s;
    while p > 0 {
        p -= 1;
        let step = &body.steps[p];
        let chain = matches!(&step.kind, StepKind::Op(op) if op.kind == OpKind::ChainCreate);
        if crate::engine::plan::is_view(step) || chain {
            continue;
        }
        let on_gpu = step
            .outputs
            .iter()
            .any(|&v| matches!(&types[v], Type::Tensor(t) | Type::Buffer(t) if t.device.kind == DeviceKind::Gpu));
        return (launches(step) && on_gpu).then_some(p);
    }
    None
}

/// The fused rope + store that attention `s` may let launch it early: the kernel right before
/// `s`, a kv_cache_store with its rope folded in over the attention's cache, whose own previous
/// kernel is one of the program that does not take the cache as an input; or q/k/v products
/// with that store folded in (passes/fuse_qkv_rope_store.rs), where it runs as a launch of its
/// own after theirs (more than two tokens): the kernels before it are the step's own products.
fn store_before(body: &Body, types: &[Type], s: usize) -> Option<usize> {
    let blocks = body.steps[s].inputs[2];
    let p = kernel_before(body, types, s)?;
    let store = &body.steps[p];
    let n = store.inputs.len();
    let folded = match &store.kind {
        StepKind::Op(op) => op.attrs.0.contains_key(super::ROPE_STORE),
        StepKind::Gemm(g) => g.rope_store.is_some(),
        _ => return None,
    };
    if folded {
        return (n >= 5 && store.inputs[n - 4] == blocks).then_some(p);
    }
    let StepKind::Op(op) = &store.kind else { return None };
    if op.kind != OpKind::KvCacheStore || op.attrs.get(STORE_ROPE).is_none() || store.inputs.get(1) != Some(&blocks) {
        return None;
    }
    let pp = kernel_before(body, types, p)?;
    (!body.steps[pp].inputs.contains(&blocks)).then_some(p)
}

/// Whether `v`, an input of step `s`, comes from a kernel-launching step before `s`, through
/// views (plan.rs's `is_view`: the same memory, another shape) at most.
fn after_kernel(body: &Body, producer: &HashMap<ValueId, usize>, mut v: ValueId, s: usize) -> bool {
    for _ in 0..8 {
        let Some(&p) = producer.get(&v) else { return false };
        let step = &body.steps[p];
        if p >= s {
            return false;
        }
        if launches(step) {
            return true;
        }
        if !crate::engine::plan::is_view(step) {
            return false;
        }
        v = step.inputs[0];
    }
    false
}

#[cfg(test)]
mod tests {
    use max_graph::attrs::Attrs;
    use max_graph::ops::Op;
    use max_graph::{DType, DeviceRef, Dim, TensorType};

    use super::*;

    fn ty(gpu: bool, dtype: DType, shape: &[i64]) -> TensorType {
        let device = if gpu { DeviceRef::gpu(0) } else { DeviceRef::CPU };
        TensorType { dtype, shape: shape.iter().map(|&d| Dim::stat(d)).collect(), device }
    }

    fn step(kind: OpKind, inputs: Vec<ValueId>, outputs: Vec<ValueId>) -> Step {
        let attrs = if kind == OpKind::PagedAttention {
            Attrs::new().with("layer", Attr::Int(0)).with("scale", Attr::Float(0.5))
        } else {
            Attrs::new()
        };
        Step { kind: StepKind::Op(Op { kind, attrs }), inputs, outputs, bodies: vec![] }
    }

    /// Where the attention's query comes from.
    #[derive(Clone, Copy, Debug)]
    enum Q {
        /// x * x reshaped: a kernel through a view
        KernelView,
        /// x itself
        Input,
        /// x reshaped: a view of an input, no kernel
        InputView,
    }

    /// %0 chain, %1 x, %2 blocks, %3 offsets, %4 lengths, %5 table (program inputs);
    /// %6 x * x (a kernel), %7 %6 reshaped, %8 lengths + lengths, %9 offsets + offsets (kernels),
    /// %10 x reshaped (a view); the attention (the last step, result %11) of the query `q` over
    /// offsets %3 (%9 with `made` 3), lengths %4 (%8 with `made` 4) and the table %5.
    fn case(gpu: bool, q: Q, made: usize, table_buffer: bool) -> (Body, Vec<Type>) {
        let u = |n| Type::Tensor(ty(gpu, DType::UInt32, &[n]));
        let act = |shape: &[i64]| Type::Tensor(ty(gpu, DType::BFloat16, shape));
        let table = ty(gpu, DType::UInt32, &[1, 4]);
        let types = vec![
            Type::Chain,
            act(&[1, 4, 8]),
            Type::Buffer(ty(gpu, DType::BFloat16, &[4, 2, 1, 16, 2, 8])),
            u(2),
            u(1),
            if table_buffer { Type::Buffer(table) } else { Type::Tensor(table) },
            act(&[4, 8]),
            act(&[1, 4, 8]),
            u(1),
            u(2),
            act(&[1, 4, 8]),
            act(&[1, 4, 8]),
        ];
        let q = match q {
            Q::KernelView => 7,
            Q::Input => 1,
            Q::InputView => 10,
        };
        let offsets = if made == 3 { 9 } else { 3 };
        let lengths = if made == 4 { 8 } else { 4 };
        let steps = vec![
            step(OpKind::Mul, vec![1, 1], vec![6]),
            step(OpKind::Reshape, vec![6], vec![7]),
            step(OpKind::Add, vec![4, 4], vec![8]),
            step(OpKind::Add, vec![3, 3], vec![9]),
            step(OpKind::Reshape, vec![1], vec![10]),
            step(OpKind::PagedAttention, vec![0, q, 2, offsets, lengths, 5], vec![11]),
        ];
        (Body { args: vec![0, 1, 2, 3, 4, 5], steps, results: vec![11] }, types)
    }

    fn marked(body: &Body) -> bool {
        match &body.steps.last().unwrap().kind {
            StepKind::Op(op) => op.attrs.get(EARLY_INDEX).is_some(),
            _ => false,
        }
    }

    #[test]
    fn index_inputs_of_the_program_after_a_kernel_are_read_early() {
        let (mut body, types) = case(true, Q::KernelView, 0, false);
        mark(&mut body, &types);
        assert!(marked(&body));
        let StepKind::Op(op) = &body.steps.last().unwrap().kind else { unreachable!() };
        assert!(max_graph::ops::attention::AttentionParams::from_attrs(&op.attrs).unwrap().early_index);
    }

    #[test]
    fn made_or_mutable_indices_a_first_kernel_or_the_host_are_not() {
        for (gpu, q, made, table_buffer) in [
            (true, Q::Input, 0, false),
            (true, Q::InputView, 0, false),
            (true, Q::KernelView, 3, false),
            (true, Q::KernelView, 4, false),
            (true, Q::KernelView, 0, true),
            (false, Q::KernelView, 0, false),
        ] {
            let (mut body, types) = case(gpu, q, made, table_buffer);
            mark(&mut body, &types);
            assert!(!marked(&body), "gpu {gpu} q {q:?} made {made} table buffer {table_buffer}");
        }
    }

    /// %0 chain, %1 x, %2 blocks, %3 offsets, %4 lengths, %5 table, %6 slots, %7 freqs,
    /// %8 positions (program inputs); `first` (the step before the store): x * x (a kernel), a
    /// plain store into the cache, or nothing (k, q and v are x); %9 its result, %10 the
    /// rotated store's chain, %11 rope(q), %12 the attention's result, %13 the first store's
    /// chain.
    fn store_case(first: Option<OpKind>, table_buffer: bool) -> (Body, Vec<Type>) {
        let u = |n| Type::Tensor(ty(true, DType::UInt32, &[n]));
        let act = Type::Tensor(ty(true, DType::BFloat16, &[1, 4, 8]));
        let table = ty(true, DType::UInt32, &[1, 4]);
        let types = vec![
            Type::Chain,
            act.clone(),
            Type::Buffer(ty(true, DType::BFloat16, &[4, 2, 1, 16, 4, 8])),
            u(2),
            u(1),
            if table_buffer { Type::Buffer(table) } else { Type::Tensor(table) },
            u(1),
            Type::Tensor(ty(true, DType::Float32, &[64, 8])),
            u(1),
            act.clone(),
            Type::Chain,
            act.clone(),
            act,
            Type::Chain,
        ];
        let with = |kind, attrs: Attrs, inputs, outputs| Step {
            kind: StepKind::Op(Op { kind, attrs: attrs.with("layer", Attr::Int(0)) }),
            inputs,
            outputs,
            bodies: vec![],
        };
        let mut steps = Vec::new();
        let (mut chain, mut x) = (0, 1);
        match first {
            Some(OpKind::Mul) => {
                steps.push(step(OpKind::Mul, vec![1, 1], vec![9]));
                x = 9;
            }
            Some(OpKind::KvCacheStore) => {
                steps.push(with(OpKind::KvCacheStore, Attrs::new(), vec![0, 2, 1, 1, 6], vec![13]));
                chain = 13;
            }
            _ => {}
        }
        let rope = Attrs::new().with(STORE_ROPE, Attr::Bool(false));
        steps.push(with(OpKind::KvCacheStore, rope, vec![chain, 2, x, x, 6, x, 7, 8], vec![10, 11]));
        steps.push(step(OpKind::PagedAttention, vec![10, 11, 2, 3, 4, 5], vec![12]));
        (Body { args: vec![0, 1, 2, 3, 4, 5, 6, 7, 8], steps, results: vec![12] }, types)
    }

    fn store_marked(body: &Body) -> bool {
        let store = &body.steps[body.steps.len() - 2];
        let StepKind::Op(op) = &store.kind else { return false };
        max_graph::ops::attention::KvStoreParams::from_attrs(&op.attrs).unwrap().early_next
    }

    #[test]
    fn a_rotated_store_after_a_kernel_that_leaves_the_cache_alone_launches_the_attention_early() {
        let (mut body, types) = store_case(Some(OpKind::Mul), false);
        mark(&mut body, &types);
        assert!(marked(&body) && store_marked(&body));
    }

    #[test]
    fn a_store_after_another_store_first_in_the_program_or_before_a_late_attention_does_not() {
        for (first, table_buffer, attention) in
            [(Some(OpKind::KvCacheStore), false, true), (None, false, true), (Some(OpKind::Mul), true, false)]
        {
            let (mut body, types) = store_case(first, table_buffer);
            mark(&mut body, &types);
            assert_eq!(marked(&body), attention, "first {first:?} table buffer {table_buffer}");
            assert!(!store_marked(&body), "first {first:?} table buffer {table_buffer}");
        }
    }
}
