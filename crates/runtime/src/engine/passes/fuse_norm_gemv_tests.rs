//! The norm and gated GEMV passes (fuse_norm_gemv.rs, fuse_gated_gemv.rs) on a decoder layer's
//! shape: what folds on the GPU, what stays apart, and that the folded steps' host path gives
//! exactly what the unfused graph gives.

use std::collections::HashMap;
use std::sync::Arc;

use max_graph::attrs::{Attr, Attrs};
use max_graph::graph::Graph;
use max_graph::ops::Op;
use max_graph::{DType, DeviceRef, Dim, TensorType, ValueId};

use super::super::test_util::{constant, names, serial};
use super::*;
use crate::engine::exec::run_host_kernel;
use crate::engine::passes::lower;
use crate::engine::program::Program;
use crate::{Buffer, Device};

const K: i64 = 40;

fn op(kind: OpKind) -> Op {
    Op { kind, attrs: Attrs::new() }
}

fn node(g: &mut Graph, o: Op, inputs: Vec<ValueId>) -> ValueId {
    g.add_node(o, inputs).unwrap()[0]
}

fn rms_norm(g: &mut Graph, x: ValueId, seed: u64, device: DeviceRef, dtype: DType) -> ValueId {
    let gamma = constant(g, dtype, &[K], seed, device);
    let attrs = Attrs::new().with("epsilon", Attr::Float(1e-5)).with("multiply_before_cast", Attr::Bool(true));
    node(g, Op { kind: OpKind::RmsNorm, attrs }, vec![x, gamma])
}

/// x @ W^T for a constant W [n, K].
fn linear(g: &mut Graph, x: ValueId, n: i64, seed: u64, device: DeviceRef, dtype: DType) -> ValueId {
    let w = constant(g, dtype, &[n, K], seed, device);
    let attrs = Attrs::new().with("axis_1", Attr::Int(0)).with("axis_2", Attr::Int(1));
    let wt = node(g, Op { kind: OpKind::Transpose, attrs }, vec![w]);
    node(g, op(OpKind::Matmul), vec![x, wt])
}

/// What to break in the layer.
#[derive(Clone, Copy, Default)]
struct Twist {
    /// The attention norm's result is also a graph output.
    norm_out: bool,
    /// The gate product is read a second time.
    gate_twice: bool,
}

/// q, k, v of rms_norm(x), and h + down(silu(gate(n)) * up(n)) for n = rms_norm(h); x, h [3, K].
fn layer(device: DeviceRef, dtype: DType, twist: Twist) -> Graph {
    let mut g = Graph::new("t");
    let ty = Type::Tensor(TensorType::new(dtype, vec![Dim::stat(3), Dim::stat(K)], device));
    let (x, h) = (g.add_input(ty.clone()), g.add_input(ty));
    let n1 = rms_norm(&mut g, x, 1, device, dtype);
    let mut outs: Vec<ValueId> =
        [(24, 2), (8, 3), (8, 4)].iter().map(|&(n, s)| linear(&mut g, n1, n, s, device, dtype)).collect();
    let n2 = rms_norm(&mut g, h, 5, device, dtype);
    let gate = linear(&mut g, n2, 16, 6, device, dtype);
    let gate = node(&mut g, op(OpKind::Silu), vec![gate]);
    let up = linear(&mut g, n2, 16, 7, device, dtype);
    let m = node(&mut g, op(OpKind::Mul), vec![up, gate]);
    let m = if twist.gate_twice { node(&mut g, op(OpKind::Add), vec![m, gate]) } else { m };
    let w = constant(&mut g, dtype, &[K, 16], 8, device);
    let attrs = Attrs::new().with("axis_1", Attr::Int(0)).with("axis_2", Attr::Int(1));
    let wt = node(&mut g, Op { kind: OpKind::Transpose, attrs }, vec![w]);
    let d = node(&mut g, op(OpKind::Matmul), vec![m, wt]);
    outs.push(node(&mut g, op(OpKind::Add), vec![d, h]));
    if twist.norm_out {
        outs.push(n1);
    }
    g.set_outputs(outs).unwrap();
    g
}

#[test]
fn norms_and_the_gated_pair_fold_into_the_gpu_products_and_run_on_the_host() {
    let _serial = serial();
    let gpu = lower(&layer(DeviceRef::gpu(0), DType::BFloat16, Twist::default()));
    let expect = ["gemm[rms_norm+matmul_wt]", "gemm[rms_norm+matmul_wt+silu+gated]", "gemm[matmul_wt+residual]"];
    assert_eq!(names(&gpu), expect);
    // the q/k/v step: x, its three weights, the norm weight; three results, then the norm's value
    let qkv = gpu.body.steps.iter().find(|s| s.name() == expect[0]).unwrap();
    assert_eq!((qkv.inputs.len(), qkv.outputs.len()), (5, 4));
    let mlp = gpu.body.steps.iter().find(|s| s.name() == expect[1]).unwrap();
    assert_eq!((mlp.inputs.len(), mlp.outputs.len()), (4, 4));
    assert_eq!(post_flags(&gpu), [false, false]);
    // every weight is a constant: the folded steps keep the flag (the gated step: both weights)
    let consts: Vec<bool> = gpu
        .body
        .steps
        .iter()
        .filter_map(|s| if let StepKind::Gemm(g) = &s.kind { Some(g.const_weights) } else { None })
        .collect();
    assert_eq!(consts, [true, true, true]);
    host_path_matches_the_unfused_graph_exactly();
    // rows longer than fusion.norm_gemv_max_k fold with the scale after the products, unless
    // fusion.norm_gemv_post is off
    {
        let _long = max_tuning::scoped("fusion.norm_gemv_max_k=8").unwrap();
        let p = lower(&layer(DeviceRef::gpu(0), DType::BFloat16, Twist::default()));
        assert_eq!((names(&p), post_flags(&p)), (expect.map(String::from).to_vec(), vec![true, true]));
        let _off = max_tuning::scoped("fusion.norm_gemv_post=0").unwrap();
        let p = lower(&layer(DeviceRef::gpu(0), DType::BFloat16, Twist::default()));
        assert_eq!(names(&p)[..2], ["rms_norm", "gemm[matmul_wt]"]);
    }
    // products of more weight rows than fusion.norm_gemv_max_n keep the norm apart: q, k and
    // v (40 rows) here, not gate and up (32)
    {
        let _wide = max_tuning::scoped("fusion.norm_gemv_max_n=36").unwrap();
        let p = lower(&layer(DeviceRef::gpu(0), DType::BFloat16, Twist::default()));
        assert_eq!(names(&p), ["rms_norm", "gemm[matmul_wt]", expect[1], expect[2]]);
        let _limit = max_tuning::scoped("fusion.norm_gemv_max_n=40").unwrap();
        assert_eq!(names(&lower(&layer(DeviceRef::gpu(0), DType::BFloat16, Twist::default()))), expect);
    }
    // the knobs turn each fold off (here: a concurrent test would see the override)
    {
        let _off = max_tuning::scoped("fusion.norm_gemv=0").unwrap();
        let p = lower(&layer(DeviceRef::gpu(0), DType::BFloat16, Twist::default()));
        assert_eq!(
            names(&p),
            ["rms_norm", "gemm[matmul_wt]", "rms_norm", "gemm[matmul_wt+silu+gated]", "gemm[matmul_wt+residual]"]
        );
    }
    {
        let _off = max_tuning::scoped("fusion.gated_gemv=0").unwrap();
        let p = lower(&layer(DeviceRef::gpu(0), DType::BFloat16, Twist::default()));
        // the MLP norm has two readers then: it stays
        let mlp = ["rms_norm", "gemm[matmul_wt+silu]", "gemm[matmul_wt]", "mul", "gemm[matmul_wt+residual]"];
        assert_eq!(names(&p), [&["gemm[rms_norm+matmul_wt]"][..], &mlp].concat());
    }
}

/// `norm_post` of each step with a folded norm, in order.
fn post_flags(p: &Program) -> Vec<bool> {
    let gemm = |s: &crate::engine::program::Step| match &s.kind {
        StepKind::Gemm(g) if g.norm.is_some() => Some(g.norm_post),
        _ => None,
    };
    p.body.steps.iter().filter_map(gemm).collect()
}

#[test]
fn shared_values_host_and_f32_products_stay_apart() {
    let _serial = serial();
    let gpu = DeviceRef::gpu(0);
    let twice = Twist { norm_out: true, gate_twice: true };
    let p = lower(&layer(gpu, DType::BFloat16, twice));
    // a norm that is also a result stays; a gate read twice keeps its pair apart, so the MLP
    // norm has two readers and stays as well
    let got = names(&p);
    assert_eq!(&got[..5], ["rms_norm", "gemm[matmul_wt]", "rms_norm", "gemm[matmul_wt+silu]", "gemm[matmul_wt]"]);
    assert!(!got.iter().any(|n| n.contains("gated") || n.contains("rms_norm+")), "{got:?}");
    // host products and f32 products (not read as stored on the GPU) keep every step
    let _long = max_tuning::scoped("fusion.norm_gemv_max_k=8").unwrap(); // (long rows alike)
    for (device, dtype) in [(DeviceRef::CPU, DType::BFloat16), (gpu, DType::Float32)] {
        let got = names(&lower(&layer(device, dtype, Twist::default())));
        assert_eq!(got.iter().filter(|n| *n == "rms_norm").count(), 2, "{got:?}");
        assert!(!got.iter().any(|n| n.contains("gated")), "{got:?}");
    }
}

/// Runs a lowered program on the host, step by step, from `inputs`; the results. Constants
/// are bound first, as the executor binds them at load (joined siblings read later ones).
fn run_on_host(p: &Program, graph: &Graph, inputs: &[Buffer]) -> Vec<Buffer> {
    let mut env: HashMap<ValueId, Buffer> = graph.inputs().iter().copied().zip(inputs.iter().cloned()).collect();
    let alloc = |v: ValueId| {
        let Type::Tensor(t) = &p.types[v] else { panic!() };
        let shape: Vec<i64> = t.shape.iter().map(|d| d.as_static().unwrap()).collect();
        Buffer::empty(t.dtype, &shape, &Device::Cpu).unwrap()
    };
    let is_constant =
        |s: &crate::engine::program::Step| matches!(&s.kind, StepKind::Op(o) if o.kind == OpKind::Constant);
    for step in p.body.steps.iter().filter(|s| is_constant(s)) {
        let StepKind::Op(o) = &step.kind else { unreachable!() };
        let Some(Attr::Data(d)) = o.attrs.get("data") else { panic!() };
        let buf = alloc(step.outputs[0]);
        // SAFETY: the buffer holds exactly the constant's bytes.
        unsafe { std::ptr::copy_nonoverlapping(d.as_ptr(), buf.addr() as *mut u8, d.len()) };
        env.insert(step.outputs[0], buf);
    }
    for step in p.body.steps.iter().filter(|s| !is_constant(s)) {
        let bufs: Vec<Buffer> = step.outputs.iter().map(|&v| alloc(v)).collect();
        let ins: Vec<Buffer> = step.inputs.iter().map(|v| env[v].clone()).collect();
        run_host_kernel(&p.types, step, &ins, &bufs).unwrap();
        env.extend(step.outputs.iter().copied().zip(bufs));
    }
    p.body.results.iter().map(|v| env[v].clone()).collect()
}

fn bytes(b: &Buffer) -> Vec<u8> {
    // SAFETY: a contiguous host buffer of nbytes.
    unsafe { std::slice::from_raw_parts(b.addr() as *const u8, b.nbytes()) }.to_vec()
}

/// The folded steps' host path gives exactly what the unfused graph gives.
fn host_path_matches_the_unfused_graph_exactly() {
    let (gpu, cpu) = (
        layer(DeviceRef::gpu(0), DType::BFloat16, Twist::default()),
        layer(DeviceRef::CPU, DType::BFloat16, Twist::default()),
    );
    let (fused, plain) = (lower(&gpu), lower(&cpu));
    assert!(names(&fused).iter().any(|n| n.contains("gated")));
    let inputs: Vec<Buffer> = [11u64, 12]
        .iter()
        .map(|&seed| {
            let b = Buffer::empty(DType::BFloat16, &[3, K], &Device::Cpu).unwrap();
            let mut s = seed;
            for i in 0..b.num_elements() {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let v = ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 4.0;
                // SAFETY: element i of the fresh host buffer.
                unsafe { *(b.addr() as *mut u16).add(i) = half::bf16::from_f32(v).to_bits() };
            }
            b
        })
        .collect();
    let (a, b) = (run_on_host(&fused, &gpu, &inputs), run_on_host(&plain, &cpu, &inputs));
    assert_eq!(a.len(), 4);
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x.shape(), y.shape());
        assert_eq!(bytes(x), bytes(y));
    }
    // and the values are not all zero: the test would pass on an empty product otherwise
    assert!(bytes(&a[3]).iter().any(|&v| v != 0));
}

/// K of the quantized layer: whole Q4_0 blocks.
const QK: i64 = 64;

/// A Q4_0 weight [n, QK] (scales 1/16, random quants) as a constant.
fn q4_0_weight(g: &mut Graph, n: i64, seed: u64, device: DeviceRef) -> ValueId {
    let mut s = seed;
    let data: Vec<u8> = (0..n * QK / 32)
        .flat_map(|_| {
            let mut block = half::f16::from_f32(0.0625).to_le_bytes().to_vec();
            block.extend((0..16).map(|_| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (s >> 56) as u8
            }));
            block
        })
        .collect();
    let attrs = Attrs::new()
        .with("data", Attr::Data(Arc::new(data)))
        .with("dtype", Attr::DType(DType::UInt8))
        .with("shape", Attr::Dims(vec![Dim::stat(n), Dim::stat(QK / 32 * 18)]))
        .with("device", Attr::Device(device));
    node(g, Op { kind: OpKind::Constant, attrs }, vec![])
}

fn qrms_norm(g: &mut Graph, x: ValueId, seed: u64, device: DeviceRef) -> ValueId {
    let gamma = constant(g, DType::Float32, &[QK], seed, device);
    let attrs = Attrs::new().with("epsilon", Attr::Float(1e-5)).with("multiply_before_cast", Attr::Bool(true));
    node(g, Op { kind: OpKind::RmsNorm, attrs }, vec![x, gamma])
}

fn qlinear(g: &mut Graph, x: ValueId, n: i64, seed: u64, device: DeviceRef) -> ValueId {
    let w = q4_0_weight(g, n, seed, device);
    let attrs = Attrs::new().with("encoding", Attr::Str("Q4_0".into()));
    node(g, Op { kind: OpKind::QMatmul, attrs }, vec![x, w])
}

/// A quantized layer's products of its norms: q, k, v of rms_norm(x) (siblings), a single
/// product of rms_norm(h), silu(gate) * up of rms_norm(y) and, with `shared`, the second norm
/// read twice; x, h, y [3, QK] f32.
fn qlayer(device: DeviceRef, shared: bool) -> Graph {
    let mut g = Graph::new("t");
    let ty = Type::Tensor(TensorType::new(DType::Float32, vec![Dim::stat(3), Dim::stat(QK)], device));
    let (x, h, y) = (g.add_input(ty.clone()), g.add_input(ty.clone()), g.add_input(ty));
    let n1 = qrms_norm(&mut g, x, 1, device);
    let mut outs: Vec<ValueId> =
        [(64, 2), (32, 3), (32, 4)].iter().map(|&(n, s)| qlinear(&mut g, n1, n, s, device)).collect();
    let n2 = qrms_norm(&mut g, h, 5, device);
    outs.push(qlinear(&mut g, n2, 32, 6, device));
    let n3 = qrms_norm(&mut g, y, 7, device);
    let gate = qlinear(&mut g, n3, 96, 8, device);
    let up = qlinear(&mut g, n3, 96, 9, device);
    let act = node(&mut g, op(OpKind::Silu), vec![gate]);
    outs.push(node(&mut g, op(OpKind::Mul), vec![act, up]));
    if shared {
        outs.push(n2);
    }
    g.set_outputs(outs).unwrap();
    g
}

/// (name, inputs, outputs, norm folded, gated) of each qmatmul step.
fn qsteps(p: &Program) -> Vec<(String, usize, usize, bool, bool)> {
    p.body
        .steps
        .iter()
        .filter_map(|s| match &s.kind {
            StepKind::Op(o) if o.kind == OpKind::QMatmul => {
                let gated = o.attrs.0.contains_key(crate::engine::passes::GATED);
                Some((s.name(), s.inputs.len(), s.outputs.len(), split_qnorm(o).is_some(), gated))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn norms_fold_into_gpu_qmatmuls_and_their_siblings() {
    let _serial = serial();
    // (the quantized folds on, whatever the default: fusion.quantized)
    let _on = max_tuning::scoped("fusion.quantized=1").unwrap();
    let gpu = lower(&qlayer(DeviceRef::gpu(0), false));
    assert!(!names(&gpu).contains(&"rms_norm".to_string()), "{:?}", names(&gpu));
    // q/k/v: x, three weights, the norm weight; three products and the normalised x; the MLP:
    // y, gate and up weights, the norm weight; the product, gate, up and the normalised y
    let q = qsteps(&gpu);
    let want = [(5, 4, true, false), (3, 2, true, false), (4, 4, true, true)];
    assert_eq!(q.iter().map(|s| (s.1, s.2, s.3, s.4)).collect::<Vec<_>>(), want);
    assert!(!names(&gpu).iter().any(|n| n.starts_with("fused")), "{:?}", names(&gpu));
    let step = gpu.body.steps.iter().find(|s| matches!(&s.kind, StepKind::Op(o) if o.kind == OpKind::QMatmul)).unwrap();
    let StepKind::Op(o) = &step.kind else { unreachable!() };
    let (norm, product) = split_qnorm(o).unwrap();
    assert_eq!(norm.kind, OpKind::RmsNorm);
    assert_eq!(norm.attrs.get("epsilon"), Some(&Attr::Float(1e-5)));
    assert_eq!(product.attrs.0.keys().collect::<Vec<_>>(), ["encoding"]);
    // the knob, a norm with a second reader, and host products keep the norms apart
    {
        let _off = max_tuning::scoped("fusion.norm_gemv=0").unwrap();
        let p = lower(&qlayer(DeviceRef::gpu(0), false));
        assert!(qsteps(&p).iter().all(|s| !s.3));
        assert!(qsteps(&p)[2].4);
    }
    {
        let _off = max_tuning::scoped("fusion.gated_gemv=0").unwrap();
        let p = lower(&qlayer(DeviceRef::gpu(0), false));
        // gate and up stay a sibling step (two products and the normalised y), the fused silu * mul after it
        assert_eq!(qsteps(&p).iter().map(|s| (s.2, s.3, s.4)).collect::<Vec<_>>()[2], (3, true, false));
        assert!(names(&p).iter().any(|n| n.starts_with("fused")), "{:?}", names(&p));
    }
    let shared = qsteps(&lower(&qlayer(DeviceRef::gpu(0), true)));
    assert_eq!(shared.iter().map(|s| s.3).collect::<Vec<_>>(), [true, false, true]);
    let host = qsteps(&lower(&qlayer(DeviceRef::CPU, false)));
    assert!(host.iter().all(|s| !s.3 && !s.4), "{host:?}");
    // products of more weight rows than fusion.norm_gemv_max_n keep the norm apart
    {
        let _wide = max_tuning::scoped("fusion.norm_gemv_max_n=1").unwrap();
        assert!(qsteps(&lower(&qlayer(DeviceRef::gpu(0), false))).iter().all(|s| !s.3));
    }
    // the row limit is the launch's for quantized products
    {
        let _short = max_tuning::scoped("fusion.norm_gemv_max_k=8").unwrap();
        assert!(qsteps(&lower(&qlayer(DeviceRef::gpu(0), false))).iter().all(|s| s.3));
    }
}

#[test]
fn folded_qmatmuls_run_on_the_host_as_the_unfused_graph() {
    let _serial = serial();
    // (the quantized folds on, whatever the default: fusion.quantized)
    let _on = max_tuning::scoped("fusion.quantized=1").unwrap();
    let (gpu, cpu) = (qlayer(DeviceRef::gpu(0), false), qlayer(DeviceRef::CPU, false));
    let (fused, plain) = (lower(&gpu), lower(&cpu));
    assert!(qsteps(&fused).iter().all(|s| s.3));
    assert!(qsteps(&fused).iter().any(|s| s.4));
    let inputs: Vec<Buffer> = [21u64, 22, 23]
        .iter()
        .map(|&seed| {
            let b = Buffer::empty(DType::Float32, &[3, QK], &Device::Cpu).unwrap();
            let mut s = seed;
            for i in 0..b.num_elements() {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                // SAFETY: element i of the fresh host buffer.
                unsafe { *(b.addr() as *mut f32).add(i) = ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 4.0 };
            }
            b
        })
        .collect();
    let (a, b) = (run_on_host(&fused, &gpu, &inputs), run_on_host(&plain, &cpu, &inputs));
    assert_eq!(a.len(), 5);
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(bytes(x), bytes(y));
    }
    assert!(bytes(&a[3]).iter().any(|&v| v != 0) && bytes(&a[4]).iter().any(|&v| v != 0));
}
