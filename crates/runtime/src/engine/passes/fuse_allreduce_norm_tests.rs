//! The allreduce + RMSNorm join (fuse_allreduce_norm.rs) on a tensor-parallel layer's shape:
//! what joins, what stays apart, and that the joined step's host path gives exactly what the
//! separate steps give.

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
    /// Device 1's norm has another epsilon.
    other_eps: bool,
    /// Device 1 has no norm after the allreduce.
    one_norm: bool,
}

/// Inputs x_i [rows, K] and a signal buffer on each device, and their allreduce.sum (one sum
/// per device).
fn summed(g: &mut Graph, devices: &[DeviceRef], dtype: DType, rows: i64) -> Vec<ValueId> {
    let xs: Vec<ValueId> = devices
        .iter()
        .map(|&d| g.add_input(Type::Tensor(TensorType::new(dtype, vec![Dim::stat(rows), Dim::stat(K)], d))))
        .collect();
    let sigs: Vec<ValueId> = devices
        .iter()
        .map(|&d| g.add_input(Type::Buffer(TensorType::new(DType::UInt8, vec![Dim::stat(1024)], d))))
        .collect();
    g.add_node(Op { kind: OpKind::AllreduceSum, attrs: Attrs::new() }, [xs, sigs].concat()).unwrap()
}

/// x_i [ROWS, K] on each device summed by allreduce.sum; every sum normalised (its own weight);
/// the sums and the normalised sums are the outputs.
fn layer(devices: &[DeviceRef], dtype: DType, twist: Twist) -> Graph {
    let mut g = Graph::new("t");
    let sums = summed(&mut g, devices, dtype, ROWS);
    let mut outs = sums.clone();
    for (i, (&s, &d)) in sums.iter().zip(devices).enumerate() {
        if twist.one_norm && i == 1 {
            continue;
        }
        let gamma = constant(&mut g, dtype, &[K], 10 + i as u64, d);
        let eps = if twist.other_eps && i == 1 { 1e-6 } else { 1e-5 };
        let attrs = Attrs::new().with("epsilon", Attr::Float(eps)).with("multiply_before_cast", Attr::Bool(false));
        outs.push(g.add_node(Op { kind: OpKind::RmsNorm, attrs }, vec![s, gamma]).unwrap()[0]);
    }
    g.set_outputs(outs).unwrap();
    g
}

#[test]
fn the_norms_after_an_allreduce_join_it() {
    let _serial = serial();
    let gpus = [DeviceRef::gpu(0), DeviceRef::gpu(1)];
    let p = lower(&layer(&gpus, DType::BFloat16, Twist::default()));
    assert_eq!(names(&p), ["allreduce_sum"]);
    let s = p.body.steps.iter().find(|s| s.name() == "allreduce_sum").unwrap();
    // the two tensors, the two signal buffers, the two norm weights; the sums, then the norms
    assert_eq!((s.inputs.len(), s.outputs.len()), (6, 4));
    let StepKind::Op(op) = &s.kind else { panic!("not an op step") };
    let (norm, plain) = super::super::split_qnorm(op).unwrap();
    assert_eq!(norm.kind, OpKind::RmsNorm);
    assert_eq!(norm.attrs.get("epsilon"), Some(&Attr::Float(1e-5)));
    assert!(plain.attrs.0.is_empty());
    // four devices alike
    let four: Vec<DeviceRef> = (0..4).map(DeviceRef::gpu).collect();
    assert_eq!(names(&lower(&layer(&four, DType::Float32, Twist::default()))), ["allreduce_sum"]);
}

#[test]
fn norms_that_differ_or_are_missing_stay_apart() {
    let _serial = serial();
    let gpus = [DeviceRef::gpu(0), DeviceRef::gpu(1)];
    let other = Twist { other_eps: true, ..Twist::default() };
    assert_eq!(names(&lower(&layer(&gpus, DType::BFloat16, other))), ["allreduce_sum", "rms_norm", "rms_norm"]);
    let one = Twist { one_norm: true, ..Twist::default() };
    assert_eq!(names(&lower(&layer(&gpus, DType::BFloat16, one))), ["allreduce_sum", "rms_norm"]);
    let _off = max_tuning::scoped("fusion.allreduce_norm=0").unwrap();
    assert_eq!(
        names(&lower(&layer(&gpus, DType::BFloat16, Twist::default()))),
        ["allreduce_sum", "rms_norm", "rms_norm"]
    );
}

/// Each device's normalised sum read by a W^T product only (a decoder layer's next q/k/v).
fn layer_with_products(devices: &[DeviceRef]) -> Graph {
    let mut g = Graph::new("t");
    let dtype = DType::BFloat16;
    let sums = summed(&mut g, devices, dtype, 1);
    let mut outs = vec![];
    for (i, (&s, &d)) in sums.iter().zip(devices).enumerate() {
        let gamma = constant(&mut g, dtype, &[K], 10 + i as u64, d);
        let attrs = Attrs::new().with("epsilon", Attr::Float(1e-5));
        let n = g.add_node(Op { kind: OpKind::RmsNorm, attrs }, vec![s, gamma]).unwrap()[0];
        let w = constant(&mut g, dtype, &[16, K], 20 + i as u64, d);
        let t = Attrs::new().with("axis_1", Attr::Int(0)).with("axis_2", Attr::Int(1));
        let wt = g.add_node(Op { kind: OpKind::Transpose, attrs: t }, vec![w]).unwrap()[0];
        outs.push(g.add_node(Op { kind: OpKind::Matmul, attrs: Attrs::new() }, vec![n, wt]).unwrap()[0]);
    }
    g.set_outputs(outs).unwrap();
    g
}

#[test]
fn short_rows_fold_into_the_products_long_rows_join_the_allreduce() {
    let _serial = serial();
    let gpus = [DeviceRef::gpu(0), DeviceRef::gpu(1)];
    let folded = ["allreduce_sum", "gemm[rms_norm+matmul_wt]", "gemm[rms_norm+matmul_wt]"];
    assert_eq!(names(&lower(&layer_with_products(&gpus))), folded);
    // rows past fusion.norm_gemv_max_k: the products' fold would scale after the product; the
    // allreduce's join is kept for them
    let _long = max_tuning::scoped("fusion.norm_gemv_max_k=8").unwrap();
    assert_eq!(names(&lower(&layer_with_products(&gpus))), ["allreduce_sum", "gemm[matmul_wt]", "gemm[matmul_wt]"]);
    // without that join, they fold into the products too
    let _off = max_tuning::scoped("fusion.allreduce_norm=0").unwrap();
    assert_eq!(names(&lower(&layer_with_products(&gpus))), folded);
}

/// The joined step on the host (simulated devices) against the allreduce and norms run apart.
#[test]
fn the_joined_step_on_the_host_matches_the_steps_apart_exactly() {
    let _serial = serial();
    for dtype in [DType::BFloat16, DType::Float32] {
        let cpus = [DeviceRef::CPU, DeviceRef::CPU];
        let joined = lower(&layer(&cpus, dtype, Twist::default()));
        let apart = {
            let _off = max_tuning::scoped("fusion.allreduce_norm=0").unwrap();
            lower(&layer(&cpus, dtype, Twist::default()))
        };
        let a = run_all(&joined);
        let b = run_all(&apart);
        assert_eq!((names(&joined), names(&apart).len()), (vec!["allreduce_sum".to_string()], 3));
        assert_eq!(a.len(), 4);
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x, y, "{dtype:?}");
        }
    }
}
