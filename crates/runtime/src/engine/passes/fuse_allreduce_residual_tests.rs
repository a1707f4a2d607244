//! The allreduce + residual add join (fuse_allreduce_residual.rs) on a tensor-parallel layer's
//! shape: what joins (with the norm after it too), what stays apart, and that the joined step's
//! host path gives exactly what the separate steps give.

use max_graph::attrs::{Attr, Attrs};
use max_graph::graph::Graph;
use max_graph::ops::Op;
use max_graph::{DType, DeviceRef, Dim, TensorType};

use super::super::test_util::{constant, names, run_all, serial};
use super::*;
use crate::engine::passes::lower;

const K: i64 = 64;
const ROWS: i64 = 3;

/// What to vary in the layer.
#[derive(Clone, Copy, Default)]
struct Twist {
    /// Every sum normalised after the add.
    norm: bool,
    /// Device 1's sum is also an output (another reader).
    sum_read: bool,
    /// Device 1 adds a value made after the allreduce.
    late_residual: bool,
}

/// x_i and residual r_i [ROWS, K] and a signal buffer on each device; h_i = r_i + allreduce(x)[i]
/// (the add's operands in either order), then rms_norm(h_i) with `norm`.
fn layer(devices: &[DeviceRef], dtype: DType, twist: Twist) -> Graph {
    let mut g = Graph::new("t");
    let t = |d| Type::Tensor(TensorType::new(dtype, vec![Dim::stat(ROWS), Dim::stat(K)], d));
    let xs: Vec<ValueId> = devices.iter().map(|&d| g.add_input(t(d))).collect();
    let rs: Vec<ValueId> = devices.iter().map(|&d| g.add_input(t(d))).collect();
    let sigs: Vec<ValueId> = devices
        .iter()
        .map(|&d| g.add_input(Type::Buffer(TensorType::new(DType::UInt8, vec![Dim::stat(1024)], d))))
        .collect();
    let sums = g.add_node(Op { kind: OpKind::AllreduceSum, attrs: Attrs::new() }, [xs.clone(), sigs].concat()).unwrap();
    let mut outs = vec![];
    for (i, (&s, &d)) in sums.iter().zip(devices).enumerate() {
        let mut r = rs[i];
        if twist.late_residual && i == 1 {
            r = g.add_node(Op { kind: OpKind::Mul, attrs: Attrs::new() }, vec![r, s]).unwrap()[0];
        }
        let operands = if i % 2 == 0 { vec![r, s] } else { vec![s, r] };
        let h = g.add_node(Op { kind: OpKind::Add, attrs: Attrs::new() }, operands).unwrap()[0];
        outs.push(h);
        if twist.norm {
            let gamma = constant(&mut g, dtype, &[K], 10 + i as u64, d);
            let attrs = Attrs::new().with("epsilon", Attr::Float(1e-5)).with("multiply_before_cast", Attr::Bool(false));
            outs.push(g.add_node(Op { kind: OpKind::RmsNorm, attrs }, vec![h, gamma]).unwrap()[0]);
        }
        if twist.sum_read && i == 1 {
            outs.push(s);
        }
    }
    g.set_outputs(outs).unwrap();
    g
}

#[test]
fn the_adds_after_an_allreduce_join_it_and_the_norms_after_them() {
    let _serial = serial();
    let gpus = [DeviceRef::gpu(0), DeviceRef::gpu(1)];
    let p = lower(&layer(&gpus, DType::BFloat16, Twist::default()));
    assert_eq!(names(&p), ["allreduce_sum"]);
    let s = &p.body.steps[p.body.steps.iter().position(|s| s.name() == "allreduce_sum").unwrap()];
    // the two tensors, the two signal buffers, the two residuals; the two sums
    assert_eq!((s.inputs.len(), s.outputs.len()), (6, 2));
    let StepKind::Op(op) = &s.kind else { panic!("not an op step") };
    assert!(split_residual(op).is_some_and(|plain| plain.attrs.0.is_empty()));
    let p = lower(&layer(&gpus, DType::BFloat16, Twist { norm: true, ..Twist::default() }));
    assert_eq!(names(&p), ["allreduce_sum"]);
    let s = p.body.steps.iter().find(|s| s.name() == "allreduce_sum").unwrap();
    // ... and the two norm weights; the sums, then the norms
    assert_eq!((s.inputs.len(), s.outputs.len()), (8, 4));
    let StepKind::Op(op) = &s.kind else { panic!("not an op step") };
    let (_, plain) = super::super::split_qnorm(op).unwrap();
    assert!(split_residual(&plain).is_some());
}

#[test]
fn adds_of_a_sum_read_elsewhere_or_of_a_later_value_stay_apart() {
    let _serial = serial();
    let gpus = [DeviceRef::gpu(0), DeviceRef::gpu(1)];
    for twist in [Twist { sum_read: true, ..Twist::default() }, Twist { late_residual: true, ..Twist::default() }] {
        let p = lower(&layer(&gpus, DType::BFloat16, twist));
        let s = p.body.steps.iter().find(|s| s.name() == "allreduce_sum").unwrap();
        let StepKind::Op(op) = &s.kind else { panic!("not an op step") };
        assert!(split_residual(op).is_none());
        assert_eq!(s.inputs.len(), 4);
    }
    let _off = max_tuning::scoped("fusion.allreduce_norm=0").unwrap();
    let p = lower(&layer(&gpus, DType::BFloat16, Twist::default()));
    let s = p.body.steps.iter().find(|s| s.name() == "allreduce_sum").unwrap();
    assert_eq!(s.inputs.len(), 4);
}

/// The joined step on the host (simulated devices) against the allreduce, adds and norms apart.
#[test]
fn the_joined_step_on_the_host_matches_the_steps_apart_exactly() {
    let _serial = serial();
    for dtype in [DType::BFloat16, DType::Float32] {
        for norm in [false, true] {
            let cpus = [DeviceRef::CPU, DeviceRef::CPU];
            let twist = Twist { norm, ..Twist::default() };
            let joined = lower(&layer(&cpus, dtype, twist));
            let apart = {
                let _off = max_tuning::scoped("fusion.allreduce_norm=0").unwrap();
                lower(&layer(&cpus, dtype, twist))
            };
            assert_eq!(names(&joined), ["allreduce_sum"]);
            assert!(names(&apart).len() > 1);
            let (a, b) = (run_all(&joined), run_all(&apart));
            assert_eq!(a.len(), if norm { 4 } else { 2 });
            assert_eq!(a, b, "{dtype:?} norm={norm}");
        }
    }
}
