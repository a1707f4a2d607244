use max_graph::attrs::Attrs;
use max_graph::ops::attention::KvStoreParams;
use max_graph::{DType, DeviceRef, Dim, TensorType};

use super::*;

fn ty(gpu: bool, dtype: DType, shape: &[i64]) -> TensorType {
    let device = if gpu { DeviceRef::gpu(0) } else { DeviceRef::CPU };
    TensorType { dtype, shape: shape.iter().map(|&d| Dim::stat(d)).collect(), device }
}

fn step(kind: OpKind, attrs: Attrs, inputs: Vec<ValueId>, outputs: Vec<ValueId>) -> Step {
    Step { kind: StepKind::Op(Op { kind, attrs }), inputs, outputs, bodies: vec![] }
}

/// What may differ from the layer the models stage.
#[derive(Clone, Copy, Default)]
struct Case {
    cpu: bool,
    neox: bool,
    /// the products in the order v, q, k
    shuffled: bool,
    /// a folded norm on the products
    norm: bool,
    /// k's view read by another step too
    k_read_twice: bool,
    /// v made by a product of its own (the siblings' third output, %21, is something else)
    v_apart: bool,
    /// the k product's output (not its view) read by another step too
    k_product_read: bool,
}

/// %0 x, %1..%3 W_q, W_k, W_v, %4 gamma, %5 blocks, %6 slots, %7 freqs, %8 positions; the
/// products %9..%11 (q, k, v; %12 the normalised x with a norm), their views %13..%15, the chain
/// %16, the store's chain %17 and rope(q) %18, a reader %19 of rope(q) and with
/// `k_read_twice` %20 of k's view (`k_product_read`: of the k product).
fn case(c: Case) -> (Body, Vec<Type>) {
    let (gpu, f32) = (!c.cpu, DType::Float32);
    let mut types = vec![Type::Tensor(ty(gpu, f32, &[1, 64]))];
    types.extend((0..3).map(|_| Type::Tensor(ty(gpu, DType::UInt8, &[64, 36]))));
    types.push(Type::Tensor(ty(gpu, f32, &[64])));
    types.push(Type::Buffer(ty(gpu, f32, &[4, 2, 1, 16, 2, 8])));
    types.extend([Type::Tensor(ty(gpu, DType::UInt32, &[1])), Type::Tensor(ty(gpu, f32, &[32, 8]))]);
    types.push(Type::Tensor(ty(gpu, DType::UInt32, &[1])));
    types.extend([32, 16, 16].map(|n| Type::Tensor(ty(gpu, f32, &[1, n]))));
    types.push(Type::Tensor(ty(gpu, f32, &[1, 64])));
    types.extend([4, 2, 2].map(|h| Type::Tensor(ty(gpu, f32, &[1, h, 8]))));
    types.extend([Type::Chain, Type::Chain, Type::Tensor(ty(gpu, f32, &[1, 4, 8]))]);
    types.extend([Type::Tensor(ty(gpu, f32, &[1, 4, 8])), Type::Tensor(ty(gpu, f32, &[1, 2, 8]))]);
    types.push(Type::Tensor(ty(gpu, f32, &[1, 16])));

    let mut qattrs = Attrs::new().with("encoding", Attr::Str("q4_0".into()));
    if c.norm {
        qattrs = qattrs.with(super::super::NORM, Attr::Bool(true)).with("rms_norm.epsilon", Attr::Float(1e-5));
    }
    let order: Vec<usize> = if c.shuffled { vec![2, 0, 1] } else { vec![0, 1, 2] };
    let mut inputs = vec![0];
    inputs.extend(order.iter().map(|&i| 1 + i));
    let product = |i: usize| if c.v_apart && i == 2 { 21 } else { 9 + i };
    let mut outputs: Vec<ValueId> = order.iter().map(|&i| product(i)).collect();
    if c.norm {
        inputs.push(4);
        outputs.push(12);
    }
    let reshape = |from, to| step(OpKind::Reshape, Attrs::new(), vec![from], vec![to]);
    let store_attrs = Attrs::new().with("layer", Attr::Int(0)).with(STORE_ROPE, Attr::Bool(!c.neox));
    let mut steps = vec![
        step(OpKind::QMatmul, qattrs, inputs, outputs),
        reshape(9, 13),
        reshape(10, 14),
        reshape(11, 15),
        step(OpKind::ChainCreate, Attrs::new(), vec![], vec![16]),
        step(OpKind::KvCacheStore, store_attrs, vec![16, 5, 14, 15, 6, 13, 7, 8], vec![17, 18]),
        step(OpKind::Exp, Attrs::new(), vec![18], vec![19]),
    ];
    if c.v_apart {
        steps.insert(1, step(OpKind::QMatmul, Attrs::new(), vec![0, 3], vec![11]));
    }
    let mut results = vec![17, 19];
    if c.k_read_twice || c.k_product_read {
        steps.push(step(OpKind::Exp, Attrs::new(), vec![if c.k_read_twice { 14 } else { 10 }], vec![20]));
        results.push(20);
    }
    (Body { args: (0..9).collect(), steps, results }, types)
}

/// The folded step's inputs and outputs: weights and products in the order q, k, v whatever the
/// sibling step's order, the norm's (with one), then the store's.
fn folded_io(norm: bool) -> (Vec<ValueId>, Vec<ValueId>) {
    let (mut ins, mut outs) = (vec![0, 1, 2, 3], vec![9, 10, 11]);
    if norm {
        ins.push(4);
        outs.push(12);
    }
    ins.extend([16, 5, 6, 7, 8]);
    outs.extend([17, 18]);
    (ins, outs)
}

fn kinds(b: &Body) -> Vec<OpKind> {
    b.steps
        .iter()
        .map(|s| match &s.kind {
            StepKind::Op(op) => op.kind,
            _ => unreachable!(),
        })
        .collect()
}

#[test]
fn the_store_folds_into_the_products_in_its_place() {
    for (shuffled, norm) in [(false, false), (true, false), (false, true), (true, true)] {
        let (mut b, types) = case(Case { shuffled, norm, ..Case::default() });
        fuse(&mut b, &types);
        assert_eq!(kinds(&b), [OpKind::ChainCreate, OpKind::QMatmul, OpKind::Exp], "shuffled {shuffled} norm {norm}");
        let s = &b.steps[1];
        let (ins, outs) = folded_io(norm);
        assert_eq!((&s.inputs, &s.outputs), (&ins, &outs), "shuffled {shuffled} norm {norm}");
        let StepKind::Op(op) = &s.kind else { unreachable!() };
        let (store, product) = split_rope_store(op).unwrap();
        let p = KvStoreParams::from_attrs(&store.attrs).unwrap();
        assert_eq!((p.layer, p.rope.map(|r| r.interleaved)), (0, Some(true)));
        assert_eq!(product.attrs.get("encoding"), Some(&Attr::Str("q4_0".into())));
        assert_eq!(product.attrs.0.contains_key(super::super::NORM), norm);
        assert!(!product.attrs.0.contains_key(ROPE_STORE));
    }
}

#[test]
fn host_steps_halves_rotations_shared_values_and_split_products_stay_apart() {
    let cases = [
        Case { cpu: true, ..Case::default() },
        Case { neox: true, ..Case::default() },
        Case { k_read_twice: true, ..Case::default() },
        Case { k_product_read: true, ..Case::default() },
        Case { v_apart: true, ..Case::default() },
    ];
    for (i, c) in cases.into_iter().enumerate() {
        let (mut b, types) = case(c);
        let before = kinds(&b);
        fuse(&mut b, &types);
        assert_eq!(kinds(&b), before, "case {i}");
        assert!(b.steps.iter().all(|s| matches!(&s.kind, StepKind::Op(op) if split_rope_store(op).is_none())));
    }
}

/// `case(c)` with its q/k/v products as 16-bit products read as stored (a `Gemm` step, `edit`
/// applied to its epilogue) instead of a qmatmul step.
fn gemm_case(c: Case, edit: impl Fn(&mut GemmEpilogue)) -> (Body, Vec<Type>) {
    let (mut b, types) = case(c);
    let p = b.steps.iter().position(|s| s.inputs.len() >= 4).unwrap();
    let transpose = Op { kind: OpKind::Transpose, attrs: Attrs::new() };
    let mut g = GemmEpilogue::new(false, None, false, crate::engine::program::Fused { nodes: vec![] }, Some(transpose));
    if c.norm {
        g.norm = Some(Op { kind: OpKind::RmsNorm, attrs: Attrs::new().with("epsilon", Attr::Float(1e-5)) });
    }
    edit(&mut g);
    b.steps[p].kind = StepKind::Gemm(g);
    (b, types)
}

fn gemm_store(b: &Body) -> Option<&Op> {
    b.steps.iter().find_map(|s| match &s.kind {
        StepKind::Gemm(g) => g.rope_store.as_ref(),
        _ => None,
    })
}

#[test]
fn a_store_of_either_rotation_folds_into_products_read_as_stored() {
    for (neox, norm, shuffled) in [(true, false, false), (false, false, true), (true, true, true), (false, true, false)]
    {
        let (mut b, types) = gemm_case(Case { neox, norm, shuffled, ..Case::default() }, |_| {});
        fuse(&mut b, &types);
        assert_eq!(b.steps.len(), 3, "neox {neox} norm {norm}");
        let s = &b.steps[1];
        let (ins, outs) = folded_io(norm);
        assert_eq!((&s.inputs, &s.outputs), (&ins, &outs), "neox {neox} norm {norm}");
        let p = KvStoreParams::from_attrs(&gemm_store(&b).unwrap().attrs).unwrap();
        assert_eq!(p.rope.map(|r| r.interleaved), Some(!neox));
        let StepKind::Gemm(g) = &s.kind else { unreachable!() };
        assert_eq!(g.norm.is_some(), norm);
    }
}

#[test]
fn products_with_an_epilogue_or_not_read_as_stored_keep_their_store() {
    let edits: [fn(&mut GemmEpilogue); 4] = [
        |g| g.bias = true,
        |g| g.residual = true,
        |g| g.act = Some(Op { kind: OpKind::Silu, attrs: Attrs::new() }),
        |g| g.b_transpose = None,
    ];
    for (i, edit) in edits.into_iter().enumerate() {
        let (mut b, types) = gemm_case(Case { neox: true, ..Case::default() }, edit);
        fuse(&mut b, &types);
        assert!(gemm_store(&b).is_none() && b.steps.len() == 7, "edit {i}");
    }
    for c in [Case { cpu: true, ..Case::default() }, Case { k_read_twice: true, ..Case::default() }] {
        let (mut b, types) = gemm_case(c, |_| {});
        fuse(&mut b, &types);
        assert!(gemm_store(&b).is_none());
    }
}
