//! The conv2d epilogue pass: what fuses, what does not, and that the fused step's host path
//! gives exactly what the unfused graph gives.

use std::collections::HashMap;

use max_graph::attrs::{Attr, Attrs};
use max_graph::graph::Graph;
use max_graph::ops::Op;
use max_graph::{DType, DeviceRef, Dim, TensorType, Type, ValueId};

use super::super::test_util::{constant_of as constant, names};
use super::*;
use crate::engine::exec::run_host_kernel;
use crate::engine::passes::lower;
use crate::engine::program::Program;
use crate::{Buffer, Device};

fn op(kind: OpKind) -> Op {
    Op { kind, attrs: Attrs::new() }
}

fn ty(dtype: DType, shape: &[i64], device: DeviceRef) -> Type {
    Type::Tensor(TensorType::new(dtype, shape.iter().map(|&d| Dim::stat(d)).collect(), device))
}

fn node(g: &mut Graph, kind: OpKind, inputs: Vec<ValueId>) -> ValueId {
    g.add_node(op(kind), inputs).unwrap()[0]
}

/// conv2d(x [2, 9, 7, 5], w [3, 3, 5, 12]) + b -> relu -> max(., -0.5) -> min(., 2) ->
/// + residual * 0.5, on `device`, in `dtype`.
fn block(device: DeviceRef, dtype: DType) -> Graph {
    let mut g = Graph::new("t");
    let x = g.add_input(ty(dtype, &[2, 9, 7, 5], device));
    let w = g.add_input(ty(dtype, &[3, 3, 5, 12], device));
    let b = g.add_input(ty(dtype, &[12], device));
    let r = g.add_input(ty(dtype, &[2, 7, 5, 12], device));
    let y = node(&mut g, OpKind::Conv2d, vec![x, w]);
    let y = node(&mut g, OpKind::Add, vec![y, b]);
    let y = node(&mut g, OpKind::Relu, vec![y]);
    let lo = constant(&mut g, dtype, &[], &[-0.5], device);
    let y = node(&mut g, OpKind::Maximum, vec![y, lo]);
    let hi = constant(&mut g, dtype, &[], &[2.0], device);
    let y = node(&mut g, OpKind::Minimum, vec![hi, y]);
    let beta = constant(&mut g, dtype, &[], &[0.5], device);
    let r = node(&mut g, OpKind::Mul, vec![r, beta]);
    let y = node(&mut g, OpKind::Add, vec![r, y]);
    g.set_outputs(vec![y]).unwrap();
    g
}

#[test]
fn bias_activation_clamp_and_scaled_residual_fuse_on_the_gpu_only() {
    let p = lower(&block(DeviceRef::gpu(0), DType::BFloat16));
    assert_eq!(names(&p), vec!["conv[conv2d+bias+relu+clamp+residual*0.5]"]);
    let step = p.body.steps.iter().find(|s| matches!(s.kind, StepKind::Conv(_))).unwrap();
    let StepKind::Conv(c) = &step.kind else { unreachable!() };
    assert_eq!((c.head, c.bias, c.residual, c.beta, c.clamp), (2, Some(2), Some(5), Some(0.5), Some((-0.5, 2.0))));
    // x, w, bias, the two clamp constants, the residual, beta
    assert_eq!(step.inputs.len(), 7);
    let tail: Vec<&str> = c.tail.nodes.iter().map(|(op, _, _)| op.kind.name()).collect();
    assert_eq!(tail, vec!["add", "relu", "max", "min", "mul", "add"]);
    let p = lower(&block(DeviceRef::CPU, DType::BFloat16));
    assert_eq!(names(&p), vec!["conv2d", "fused[mul+add+relu+max+min+add]"]);
    // f64 convolutions keep their separate steps (the GEMM epilogue is 16/32-bit only)
    let p = lower(&block(DeviceRef::gpu(0), DType::Float64));
    assert_eq!(names(&p), vec!["conv2d", "fused[mul+add+relu+max+min+add]"]);
}

#[test]
fn clamp_forms_compose_into_one_interval() {
    let gpu = DeviceRef::gpu(0);
    let chain = |ops: &[(OpKind, f32)]| {
        let mut g = Graph::new("t");
        let x = g.add_input(ty(DType::Float32, &[1, 4, 4, 3], gpu));
        let w = g.add_input(ty(DType::Float32, &[1, 1, 3, 8], gpu));
        let mut y = node(&mut g, OpKind::Conv2d, vec![x, w]);
        for &(kind, v) in ops {
            y = match kind {
                OpKind::Relu => node(&mut g, kind, vec![y]),
                _ => {
                    let k = constant(&mut g, DType::Float32, &[1], &[v], gpu);
                    node(&mut g, kind, vec![y, k])
                }
            };
        }
        g.set_outputs(vec![y]).unwrap();
        let p = lower(&g);
        let c = p.body.steps.iter().find_map(|s| match &s.kind {
            StepKind::Conv(c) => Some((c.name(), c.clamp)),
            _ => None,
        });
        (names(&p), c)
    };
    use OpKind::{Maximum as Max, Minimum as Min, Relu};
    let clamp = |lo: f64, hi: f64| Some(("conv[conv2d+clamp]".to_string(), Some((lo, hi))));
    assert_eq!(chain(&[(Max, 0.0), (Min, 6.0)]).1, clamp(0.0, 6.0));
    assert_eq!(chain(&[(Min, 6.0), (Max, 0.0)]).1, clamp(0.0, 6.0));
    assert_eq!(chain(&[(Max, 1.0)]).1, clamp(1.0, f64::INFINITY));
    // min then max with lo > hi is lo everywhere; max then min with lo > hi is hi everywhere
    assert_eq!(chain(&[(Min, 1.0), (Max, 3.0)]).1, clamp(3.0, 3.0));
    assert_eq!(chain(&[(Max, 3.0), (Min, 1.0)]).1, clamp(1.0, 1.0));
    // relu6 as staged by hand: the activation, then the clamp
    let relu6 = chain(&[(Relu, 0.0), (Min, 6.0)]);
    assert_eq!(relu6.1, Some(("conv[conv2d+relu+clamp]".to_string(), Some((f64::NEG_INFINITY, 6.0)))));
    // a clamp before the activation stops the chain there
    assert_eq!(chain(&[(Min, 6.0), (Relu, 0.0)]).0, vec!["conv[conv2d+clamp]", "relu"]);
}

#[test]
fn shared_intermediates_wrong_biases_and_tensor_scales_stay_unfused() {
    let gpu = DeviceRef::gpu(0);
    let dt = DType::BFloat16;
    let mut g = Graph::new("t");
    let x = g.add_input(ty(dt, &[1, 6, 6, 4], gpu));
    let r = g.add_input(ty(dt, &[1, 4, 4, 8], gpu));
    let s = g.add_input(ty(dt, &[], gpu));
    // distinct filters, or the convolutions would merge
    let [w, w1, w2, w3, w4] = [0; 5].map(|_| g.add_input(ty(dt, &[3, 3, 4, 8], gpu)));
    // 1. the conv result read twice: nothing fuses into it
    let a = node(&mut g, OpKind::Conv2d, vec![x, w]);
    let a2 = node(&mut g, OpKind::Relu, vec![a]);
    let a3 = node(&mut g, OpKind::Mul, vec![a, a2]);
    // 2. a [1, 4, 1, 8] addend is not a bias (it varies along H): not fused, and the chain ends
    let b = constant(&mut g, dt, &[1, 4, 1, 8], &[0.25; 32], gpu);
    let c = node(&mut g, OpKind::Conv2d, vec![x, w1]);
    let c = node(&mut g, OpKind::Add, vec![c, b]);
    let c = node(&mut g, OpKind::Relu, vec![c]);
    // 3. a per-channel scale is no beta: the scaled tensor is a plain residual
    let scale = constant(&mut g, dt, &[8], &[0.5; 8], gpu);
    let d = node(&mut g, OpKind::Conv2d, vec![x, w2]);
    let rs = node(&mut g, OpKind::Mul, vec![r, scale]);
    let d = node(&mut g, OpKind::Add, vec![d, rs]);
    // 4. a scalar scale that is a graph input is no constant: a plain residual again
    let e = node(&mut g, OpKind::Conv2d, vec![x, w3]);
    let rs2 = node(&mut g, OpKind::Mul, vec![s, r]);
    let e = node(&mut g, OpKind::Add, vec![rs2, e]);
    // 5. an intermediate that is also a graph output ends the chain before its reader
    let f = node(&mut g, OpKind::Conv2d, vec![x, w4]);
    let f = node(&mut g, OpKind::Sigmoid, vec![f]);
    let f2 = node(&mut g, OpKind::Add, vec![f, r]);
    g.set_outputs(vec![a3, c, d, e, f, f2]).unwrap();
    let steps = names(&lower(&g));
    assert_eq!(
        steps,
        vec![
            "conv2d",
            "fused[relu+mul]",
            "conv2d",
            "fused[add+relu]",
            "mul",
            "conv[conv2d+residual]",
            "mul",
            "conv[conv2d+residual]",
            "conv[conv2d+sigmoid]",
            "add"
        ]
    );
}

#[test]
fn a_conv_with_its_own_bias_keeps_it_as_an_input() {
    let gpu = DeviceRef::gpu(0);
    let mut g = Graph::new("t");
    let x = g.add_input(ty(DType::Float16, &[1, 5, 5, 8], gpu));
    let w = g.add_input(ty(DType::Float16, &[1, 1, 8, 16], gpu));
    let cb = g.add_input(ty(DType::Float16, &[16], gpu));
    let b = g.add_input(ty(DType::Float16, &[1, 1, 1, 16], gpu));
    let y = node(&mut g, OpKind::Conv2d, vec![x, w, cb]);
    let y = node(&mut g, OpKind::Add, vec![b, y]);
    let gelu = Op { kind: OpKind::Gelu, attrs: Attrs::new().with("approximate", Attr::Str("quick".into())) };
    let y = g.add_node(gelu, vec![y]).unwrap()[0];
    g.set_outputs(vec![y]).unwrap();
    let p = lower(&g);
    assert_eq!(names(&p), vec!["conv[conv2d+bias+gelu]"]);
    let StepKind::Conv(c) = &p.body.steps[0].kind else { panic!() };
    assert_eq!((c.head, c.bias), (3, Some(3)));
    assert_eq!(p.body.steps[0].inputs, vec![x, w, cb, b]);
}

/// Runs a lowered program on the host, step by step, from `inputs`.
fn run_on_host(p: &Program, graph: &Graph, inputs: &[Buffer]) -> Buffer {
    let mut env: HashMap<ValueId, Buffer> = graph.inputs().iter().copied().zip(inputs.iter().cloned()).collect();
    for step in &p.body.steps {
        let out = step.outputs[0];
        let Type::Tensor(t) = &p.types[out] else { panic!() };
        let shape: Vec<i64> = t.shape.iter().map(|d| d.as_static().unwrap()).collect();
        let buf = Buffer::empty(t.dtype, &shape, &Device::Cpu).unwrap();
        if let StepKind::Op(o) = &step.kind {
            if o.kind == OpKind::Constant {
                let Some(Attr::Data(d)) = o.attrs.get("data") else { panic!() };
                // SAFETY: the buffer holds exactly the constant's bytes.
                unsafe { std::ptr::copy_nonoverlapping(d.as_ptr(), buf.addr() as *mut u8, d.len()) };
                env.insert(out, buf);
                continue;
            }
        }
        let ins: Vec<Buffer> = step.inputs.iter().map(|v| env[v].clone()).collect();
        run_host_kernel(&p.types, step, &ins, std::slice::from_ref(&buf)).unwrap();
        env.insert(out, buf);
    }
    env[&p.body.results[0]].clone()
}

fn random(dtype: DType, shape: &[i64], seed: &mut u64) -> Buffer {
    let b = Buffer::empty(dtype, shape, &Device::Cpu).unwrap();
    let n = b.num_elements();
    for i in 0..n {
        *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let v = ((*seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 4.0;
        // SAFETY: element i of the fresh host buffer.
        unsafe {
            match dtype {
                DType::BFloat16 => *(b.addr() as *mut u16).add(i) = half::bf16::from_f32(v).to_bits(),
                _ => *(b.addr() as *mut f32).add(i) = v,
            }
        }
    }
    b
}

fn bytes(b: &Buffer) -> Vec<u8> {
    // SAFETY: a contiguous host buffer of nbytes.
    unsafe { std::slice::from_raw_parts(b.addr() as *const u8, b.nbytes()) }.to_vec()
}

#[test]
fn the_host_path_of_the_fused_step_matches_the_unfused_graph_exactly() {
    for dtype in [DType::BFloat16, DType::Float32] {
        let (gpu, cpu) = (block(DeviceRef::gpu(0), dtype), block(DeviceRef::CPU, dtype));
        let (fused, plain) = (lower(&gpu), lower(&cpu));
        assert!(fused.body.steps.iter().any(|s| matches!(s.kind, StepKind::Conv(_))));
        let mut seed = 7;
        let inputs: Vec<Buffer> = [&[2i64, 9, 7, 5][..], &[3, 3, 5, 12], &[12], &[2, 7, 5, 12]]
            .iter()
            .map(|s| random(dtype, s, &mut seed))
            .collect();
        let (a, b) = (run_on_host(&fused, &gpu, &inputs), run_on_host(&plain, &cpu, &inputs));
        assert_eq!(a.shape(), &[2, 7, 5, 12]);
        assert_eq!(bytes(&a), bytes(&b), "{dtype}");
    }
}
