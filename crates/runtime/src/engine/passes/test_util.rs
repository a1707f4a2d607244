//! What the passes' tests share: random constants, the step names of a lowered program, a
//! lowered program run on the host, and one lock for the tests that lower graphs under the process-wide tuning snapshot (some
//! override it for a scope; holding the lock, no test sees another's override).

use std::collections::HashMap;
use std::sync::Arc;

use max_graph::attrs::{Attr, Attrs};
use max_graph::graph::Graph;
use max_graph::ops::{Op, OpKind};
use max_graph::{DType, DeviceRef, Dim, Type, ValueId};

use crate::engine::exec::run_host_kernel;
use crate::engine::program::{Program, StepKind};
use crate::{Buffer, Device};

/// A constant of `shape` filled from `seed` (distinct seeds: CSE merges equal constants).
pub(super) fn constant(g: &mut Graph, dtype: DType, shape: &[i64], seed: u64, device: DeviceRef) -> ValueId {
    let n: i64 = shape.iter().product();
    let mut s = seed;
    let values: Vec<f32> = (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.5
        })
        .collect();
    constant_of(g, dtype, shape, &values, device)
}

/// A constant of `shape` holding `values` (rounded to `dtype`).
pub(super) fn constant_of(g: &mut Graph, dtype: DType, shape: &[i64], values: &[f32], device: DeviceRef) -> ValueId {
    let data: Vec<u8> = values
        .iter()
        .flat_map(|&v| match dtype {
            DType::BFloat16 => half::bf16::from_f32(v).to_le_bytes().to_vec(),
            DType::Float16 => half::f16::from_f32(v).to_le_bytes().to_vec(),
            DType::Float64 => (v as f64).to_le_bytes().to_vec(),
            _ => v.to_le_bytes().to_vec(),
        })
        .collect();
    let attrs = Attrs::new()
        .with("data", Attr::Data(Arc::new(data)))
        .with("dtype", Attr::DType(dtype))
        .with("shape", Attr::Dims(shape.iter().map(|&d| Dim::stat(d)).collect()))
        .with("device", Attr::Device(device));
    g.add_node(Op { kind: OpKind::Constant, attrs }, vec![]).unwrap()[0]
}

/// Step names without the constants.
pub(super) fn names(p: &Program) -> Vec<String> {
    p.body.steps.iter().map(|s| s.name()).filter(|n| n != "constant").collect()
}

pub(super) fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs a lowered program's steps on the host with inputs from fixed seeds; its results' bytes.
pub(super) fn run_all(p: &Program) -> Vec<Vec<u8>> {
    let mut env: HashMap<ValueId, Buffer> = HashMap::new();
    for (i, &arg) in p.body.args.iter().enumerate() {
        let t = match &p.types[arg] {
            Type::Tensor(t) | Type::Buffer(t) => t,
            Type::Chain => panic!("a chain argument"),
        };
        let shape: Vec<i64> = t.shape.iter().map(|d| d.as_static().unwrap()).collect();
        let b = Buffer::zeros(t.dtype, &shape, &Device::Cpu).unwrap();
        let mut s = 100 + i as u64;
        for j in 0..b.num_elements() {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let v = ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 4.0;
            // SAFETY: element j of the fresh host buffer of t.dtype.
            unsafe {
                match t.dtype {
                    DType::BFloat16 => *(b.addr() as *mut u16).add(j) = half::bf16::from_f32(v).to_bits(),
                    DType::Float32 => *(b.addr() as *mut f32).add(j) = v,
                    _ => {}
                }
            }
        }
        env.insert(arg, b);
    }
    for s in &p.body.steps {
        if let StepKind::Op(o) = &s.kind {
            if o.kind == OpKind::Constant {
                let Some(Attr::Data(d)) = o.attrs.get("data") else { panic!("a constant without data") };
                let t = p.types[s.outputs[0]].tensor().unwrap();
                let shape: Vec<i64> = t.shape.iter().map(|d| d.as_static().unwrap()).collect();
                let b = Buffer::empty(t.dtype, &shape, &Device::Cpu).unwrap();
                // SAFETY: the buffer holds exactly the constant's bytes.
                unsafe { std::ptr::copy_nonoverlapping(d.as_ptr(), b.addr() as *mut u8, d.len()) };
                env.insert(s.outputs[0], b);
                continue;
            }
        }
        let inputs: Vec<Buffer> = s.inputs.iter().map(|v| env[v].clone()).collect();
        let outputs: Vec<Buffer> = s
            .outputs
            .iter()
            .map(|&v| {
                let t = p.types[v].tensor().unwrap();
                let shape: Vec<i64> = t.shape.iter().map(|d| d.as_static().unwrap()).collect();
                Buffer::empty(t.dtype, &shape, &Device::Cpu).unwrap()
            })
            .collect();
        run_host_kernel(&p.types, s, &inputs, &outputs).unwrap();
        for (v, b) in s.outputs.iter().zip(outputs) {
            env.insert(*v, b);
        }
    }
    let out: Vec<Vec<u8>> = p
        .body
        .results
        .iter()
        .map(|v| {
            let b = &env[v];
            // SAFETY: the host buffer holds nbytes bytes.
            unsafe { std::slice::from_raw_parts(b.addr() as *const u8, b.nbytes()).to_vec() }
        })
        .collect();
    // the results are not all zero: a test would pass on empty results otherwise
    assert!(out.iter().all(|b| b.iter().any(|&x| x != 0)));
    out
}
