use super::*;
use crate::attrs::{Attr, Attrs};
use crate::error::GraphError;
use crate::ops::{Op, infer as infer_op};

fn t(dtype: DType, shape: &[i64], device: DeviceRef) -> Type {
    Type::Tensor(TensorType::new(dtype, shape.iter().map(|&n| Dim::stat(n)).collect(), device))
}

fn signal(device: DeviceRef) -> Type {
    Type::Buffer(TensorType::new(DType::UInt8, vec![Dim::stat(64)], device))
}

fn run(kind: OpKind, inputs: &[Type], axis: Option<i64>) -> Result<Vec<Type>> {
    let attrs = match axis {
        Some(a) => Attrs::new().with("axis", Attr::Int(a)),
        None => Attrs::new(),
    };
    infer_op(&Op { kind, attrs }, inputs)
}

fn gpus(n: i64) -> Vec<DeviceRef> {
    (0..n).map(DeviceRef::gpu).collect()
}

fn args(xs: Vec<Type>, devices: &[DeviceRef]) -> Vec<Type> {
    let mut v = xs;
    v.extend(devices.iter().map(|d| signal(*d)));
    v
}

fn message(r: Result<Vec<Type>>) -> String {
    match r {
        Err(GraphError::Value(m)) | Err(GraphError::Type(m)) | Err(GraphError::Index(m)) => m,
        other => panic!("expected an error, got {other:?}"),
    }
}

#[test]
fn allreduce_gives_one_result_per_device() {
    let devs = gpus(3);
    let xs = devs.iter().map(|d| t(DType::BFloat16, &[4, 8], *d)).collect();
    let out = run(OpKind::AllreduceSum, &args(xs, &devs), None).unwrap();
    assert_eq!(out.len(), 3);
    for (o, d) in out.iter().zip(&devs) {
        assert_eq!(*o, t(DType::BFloat16, &[4, 8], *d));
    }
}

#[test]
fn cpu_devices_may_repeat_but_gpus_may_not() {
    let cpu = [DeviceRef::CPU; 2];
    let xs = cpu.iter().map(|d| t(DType::Float32, &[3], *d)).collect();
    assert_eq!(run(OpKind::AllreduceSum, &args(xs, &cpu), None).unwrap().len(), 2);
    let twice = [DeviceRef::gpu(1), DeviceRef::gpu(1)];
    let xs = twice.iter().map(|d| t(DType::Float32, &[3], *d)).collect();
    assert!(message(run(OpKind::AllreduceSum, &args(xs, &twice), None)).contains("gpu:1 appears twice"));
    let mixed = [DeviceRef::CPU, DeviceRef::gpu(0)];
    let xs = mixed.iter().map(|d| t(DType::Float32, &[3], *d)).collect();
    assert!(message(run(OpKind::AllreduceSum, &args(xs, &mixed), None)).contains("all GPUs or all the CPU"));
}

#[test]
fn inputs_must_agree() {
    let devs = gpus(2);
    let xs = vec![t(DType::Float32, &[4], devs[0]), t(DType::Float16, &[4], devs[1])];
    assert!(message(run(OpKind::AllreduceSum, &args(xs, &devs), None)).contains("one dtype"));
    let xs = vec![t(DType::Float32, &[4], devs[0]), t(DType::Float32, &[5], devs[1])];
    assert!(message(run(OpKind::AllreduceSum, &args(xs, &devs), None)).contains("inputs[1] is [5]"));
    let xs = vec![t(DType::Bool, &[4], devs[0]), t(DType::Bool, &[4], devs[1])];
    assert!(message(run(OpKind::AllreduceSum, &args(xs, &devs), None)).contains("bool"));
}

#[test]
fn signal_buffers_match_the_inputs() {
    let devs = gpus(2);
    let xs: Vec<Type> = devs.iter().map(|d| t(DType::Float32, &[4], *d)).collect();
    let one_short = vec![xs[0].clone(), xs[1].clone(), signal(devs[0])];
    assert!(message(run(OpKind::AllreduceSum, &one_short, None)).contains("one signal buffer per device"));
    let swapped = args(xs.clone(), &[devs[1], devs[0]]);
    assert!(message(run(OpKind::AllreduceSum, &swapped, None)).contains("signal_buffers[0]"));
    let mut not_buffer = xs.clone();
    not_buffer.extend([t(DType::UInt8, &[64], devs[0]), signal(devs[1])]);
    assert!(message(run(OpKind::AllreduceSum, &not_buffer, None)).contains("uint8 buffer"));
}

#[test]
fn allgather_concatenates_along_the_axis() {
    let devs = gpus(2);
    let xs = vec![t(DType::Float32, &[2, 3], devs[0]), t(DType::Float32, &[2, 5], devs[1])];
    let out = run(OpKind::Allgather, &args(xs, &devs), Some(-1)).unwrap();
    assert_eq!(out, vec![t(DType::Float32, &[2, 8], devs[0]), t(DType::Float32, &[2, 8], devs[1])]);
    let xs = vec![t(DType::Float32, &[2, 3], devs[0]), t(DType::Float32, &[4, 5], devs[1])];
    assert!(message(run(OpKind::Allgather, &args(xs, &devs), Some(1))).contains("except along the gather axis"));
    let xs = vec![t(DType::Float32, &[2], devs[0]), t(DType::Float32, &[2], devs[1])];
    assert!(message(run(OpKind::Allgather, &args(xs, &devs), Some(1))).contains("out of range"));
}

#[test]
fn reducescatter_splits_the_sum() {
    let devs = gpus(2);
    let xs = devs.iter().map(|d| t(DType::Float32, &[6, 3], *d)).collect::<Vec<_>>();
    let out = run(OpKind::ReducescatterSum, &args(xs.clone(), &devs), Some(0)).unwrap();
    assert_eq!(out[1], t(DType::Float32, &[3, 3], devs[1]));
    assert!(message(run(OpKind::ReducescatterSum, &args(xs, &devs), Some(1))).contains("3 does not split into 2"));
}

#[test]
fn broadcast_reaches_every_signal_device() {
    let devs = gpus(3);
    let mut inputs = vec![t(DType::Int32, &[5], devs[1])];
    inputs.extend(devs.iter().map(|d| signal(*d)));
    let out = run(OpKind::DistributedBroadcast, &inputs, None).unwrap();
    assert_eq!(out, devs.iter().map(|d| t(DType::Int32, &[5], *d)).collect::<Vec<_>>());
    inputs[0] = t(DType::Int32, &[5], DeviceRef::gpu(7));
    assert!(message(run(OpKind::DistributedBroadcast, &inputs, None)).contains("gpu:7"));
    let lone = vec![t(DType::Int32, &[5], devs[0]), signal(devs[0])];
    assert!(message(run(OpKind::DistributedBroadcast, &lone, None)).contains("at least 2"));
}

#[test]
fn params_read_the_axis() {
    let op = Op { kind: OpKind::Allgather, attrs: Attrs::new().with("axis", Attr::Int(-1)) };
    let p = Params::of(&op, 6, 2).unwrap();
    assert_eq!(p, Params { op: Collective::Allgather, ranks: 3, axis: 1 });
    let op = Op { kind: OpKind::DistributedBroadcast, attrs: Attrs::new() };
    assert_eq!(Params::of(&op, 5, 1).unwrap().ranks, 4);
}
