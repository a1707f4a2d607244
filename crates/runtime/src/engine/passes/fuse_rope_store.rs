//! The rotary embedding of an attention layer's queries and keys and the store of its keys and
//! values into the paged cache become one step: `rope(q)`, `rope(k)` and
//! `kv_cache_store(blocks, rope(k), v, slots)` run as the store with the ropes folded in
//! (attribute `max_graph::ops::attention::STORE_ROPE`; inputs `[chain, blocks, k, v, slots, q,
//! freqs_cis, positions]`, results `[chain, rope(q)]`), which the GPU runs as one launch
//! (attention.cu's rope_kv_store) and the host as the three kernels in turn. Only GPU stores fuse,
//! of a rotated key read by nothing but the store, with a query rope of the same table,
//! positions, layout and dtype before it whose result nobody reads before the store; the step
//! keeps the store's place. Top level only.

use std::collections::HashMap;

use max_graph::attrs::Attr;
use max_graph::ops::OpKind;
use max_graph::ops::attention::STORE_ROPE;
use max_graph::{DeviceKind, TensorType, Type, ValueId};

use crate::engine::program::{Body, Step, StepKind};

fn tensor(types: &[Type], v: ValueId) -> Option<&TensorType> {
    match &types[v] {
        Type::Tensor(t) | Type::Buffer(t) => Some(t),
        Type::Chain => None,
    }
}

fn rope_of(step: &Step) -> Option<&max_graph::Op> {
    match &step.kind {
        StepKind::Op(op) if op.kind == OpKind::Rope && step.inputs.len() == 3 && step.outputs.len() == 1 => Some(op),
        _ => None,
    }
}

/// The top-level steps reading each value (a read inside a control-flow body counts for the
/// step that holds it).
pub(super) fn readers(body: &Body) -> HashMap<ValueId, Vec<usize>> {
    fn reads(b: &Body, out: &mut Vec<ValueId>) {
        for s in &b.steps {
            out.extend(&s.inputs);
            for inner in &s.bodies {
                reads(inner, out);
            }
        }
        out.extend(&b.results);
    }
    let mut map: HashMap<ValueId, Vec<usize>> = HashMap::new();
    for (i, s) in body.steps.iter().enumerate() {
        let mut vs = s.inputs.clone();
        for inner in &s.bodies {
            reads(inner, &mut vs);
        }
        for v in vs {
            map.entry(v).or_default().push(i);
        }
    }
    map
}

/// Fuses each eligible store of `body` with its ropes.
pub fn fuse(body: &mut Body, types: &[Type]) {
    let readers = readers(body);
    let producer = super::producers(body);
    let mut gone = vec![false; body.steps.len()];
    for s in 0..body.steps.len() {
        let store = &body.steps[s];
        let StepKind::Op(op) = &store.kind else { continue };
        if op.kind != OpKind::KvCacheStore || store.inputs.len() != 5 || op.attrs.get(STORE_ROPE).is_some() {
            continue;
        }
        let on_gpu = |v: ValueId| tensor(types, v).is_some_and(|t| t.device.kind == DeviceKind::Gpu);
        let k_rot = store.inputs[2];
        let Some(&rk) = producer.get(&k_rot) else { continue };
        let Some(rope) = rope_of(&body.steps[rk]) else { continue };
        let only_store = readers.get(&k_rot).is_some_and(|r| r == &[s]) && !body.results.contains(&k_rot);
        if gone[rk] || !only_store || !on_gpu(store.inputs[1]) {
            continue;
        }
        let table = &body.steps[rk].inputs[1..];
        let dtype = tensor(types, k_rot).map(|t| t.dtype);
        // q must be [tokens, heads, head_dim] like k (a decoupled rope of another width stays)
        let like_k = |v: ValueId| match (tensor(types, v), tensor(types, k_rot)) {
            (Some(q), Some(k)) => {
                q.rank() == 3 && k.rank() == 3 && q.shape[0] == k.shape[0] && q.shape[2] == k.shape[2]
            }
            _ => false,
        };
        // the nearest query rope before the store: same table, positions, layout and dtype
        let rq = (0..s).rev().find(|&j| {
            let step = &body.steps[j];
            j != rk
                && !gone[j]
                && rope_of(step).is_some_and(|o| o.attrs == rope.attrs)
                && &step.inputs[1..] == table
                && tensor(types, step.outputs[0]).map(|t| t.dtype) == dtype
                && like_k(step.outputs[0])
                && on_gpu(step.outputs[0])
                && readers.get(&step.outputs[0]).is_none_or(|r| r.iter().all(|&i| i > s))
        });
        let Some(rq) = rq else { continue };
        let Ok(params) = max_graph::ops::attention::RopeParams::from_attrs(&rope.attrs) else { continue };
        let (q, q_rot) = (body.steps[rq].inputs[0], body.steps[rq].outputs[0]);
        let k = body.steps[rk].inputs[0];
        let (freqs, positions) = (table[0], table[1]);
        let store = &mut body.steps[s];
        let StepKind::Op(op) = &mut store.kind else { continue };
        op.attrs.0.insert(STORE_ROPE.into(), Attr::Bool(params.interleaved));
        store.inputs[2] = k;
        store.inputs.extend([q, freqs, positions]);
        store.outputs.push(q_rot);
        gone[rk] = true;
        gone[rq] = true;
    }
    super::drop_marked(body, &gone);
}

#[cfg(test)]
mod tests {
    use max_graph::attrs::Attrs;
    use max_graph::ops::Op;
    use max_graph::{DType, DeviceRef, Dim};

    use super::*;

    fn ty(gpu: bool, dtype: DType, shape: &[i64]) -> TensorType {
        let device = if gpu { DeviceRef::gpu(0) } else { DeviceRef::CPU };
        TensorType { dtype, shape: shape.iter().map(|&d| Dim::stat(d)).collect(), device }
    }

    fn step(kind: OpKind, attrs: Attrs, inputs: Vec<ValueId>, outputs: Vec<ValueId>) -> Step {
        Step { kind: StepKind::Op(Op { kind, attrs }), inputs, outputs, bodies: vec![] }
    }

    /// %0 chain, %1 blocks, %2 q, %3 k, %4 v, %5 freqs, %6 positions, %7 slots; %8 rope(q),
    /// %9 rope(k), %10 the store's chain, %11 a reader of rope(q) (after the store, or before
    /// it with `q_read_early`), %12 rope(k) with other positions (%7) when `other_table`.
    fn case(gpu: bool, q_dtype: DType, q_read_early: bool, k_read_twice: bool) -> (Body, Vec<Type>) {
        let bf = DType::BFloat16;
        let types = vec![
            Type::Chain,
            Type::Buffer(ty(gpu, bf, &[4, 2, 1, 16, 2, 8])),
            Type::Tensor(ty(gpu, q_dtype, &[1, 4, 8])),
            Type::Tensor(ty(gpu, bf, &[1, 2, 8])),
            Type::Tensor(ty(gpu, bf, &[1, 2, 8])),
            Type::Tensor(ty(gpu, DType::Float32, &[32, 8])),
            Type::Tensor(ty(gpu, DType::UInt32, &[1])),
            Type::Tensor(ty(gpu, DType::UInt32, &[1])),
            Type::Tensor(ty(gpu, q_dtype, &[1, 4, 8])),
            Type::Tensor(ty(gpu, bf, &[1, 2, 8])),
            Type::Chain,
            Type::Tensor(ty(gpu, q_dtype, &[1, 4, 8])),
        ];
        let rope = || Attrs::new().with("interleaved", Attr::Bool(false));
        let reader = step(OpKind::Exp, Attrs::new(), vec![8], vec![11]);
        let mut steps = vec![
            step(OpKind::Rope, rope(), vec![2, 5, 6], vec![8]),
            step(OpKind::Rope, rope(), vec![3, 5, 6], vec![9]),
        ];
        if q_read_early {
            steps.push(reader.clone());
        }
        steps.push(step(OpKind::KvCacheStore, Attrs::new().with("layer", Attr::Int(0)), vec![0, 1, 9, 4, 7], vec![10]));
        if !q_read_early {
            steps.push(reader);
        }
        let mut results = vec![10, 11];
        if k_read_twice {
            results.push(9);
        }
        (Body { args: (0..8).collect(), steps, results }, types)
    }

    fn names(b: &Body) -> Vec<(OpKind, Vec<ValueId>, Vec<ValueId>)> {
        b.steps
            .iter()
            .map(|s| match &s.kind {
                StepKind::Op(op) => (op.kind, s.inputs.clone(), s.outputs.clone()),
                _ => unreachable!(),
            })
            .collect()
    }

    #[test]
    fn the_ropes_fold_into_the_gpu_store() {
        let (mut b, types) = case(true, DType::BFloat16, false, false);
        fuse(&mut b, &types);
        assert_eq!(
            names(&b),
            vec![(OpKind::KvCacheStore, vec![0, 1, 3, 4, 7, 2, 5, 6], vec![10, 8]), (OpKind::Exp, vec![8], vec![11])]
        );
        let StepKind::Op(op) = &b.steps[0].kind else { unreachable!() };
        let p = max_graph::ops::attention::KvStoreParams::from_attrs(&op.attrs).unwrap();
        assert_eq!((p.layer, p.rope.map(|r| r.interleaved)), (0, Some(false)));
    }

    #[test]
    fn host_stores_shared_keys_early_readers_and_other_dtypes_stay_apart() {
        for (gpu, q_dtype, early, twice) in [
            (false, DType::BFloat16, false, false),
            (true, DType::BFloat16, true, false),
            (true, DType::BFloat16, false, true),
            (true, DType::Float32, false, false),
        ] {
            let (mut b, types) = case(gpu, q_dtype, early, twice);
            let before = names(&b);
            fuse(&mut b, &types);
            assert_eq!(names(&b), before, "gpu {gpu} q {q_dtype} early {early} twice {twice}");
        }
    }
}
