//! What the passes' tests share: random constants, the step names of a lowered program, and
//! one lock for the tests that lower graphs under the process-wide tuning snapshot (some
//! override it for a scope; holding the lock, no test sees another's override).

use std::sync::Arc;

use max_graph::attrs::{Attr, Attrs};
use max_graph::graph::Graph;
use max_graph::ops::{Op, OpKind};
use max_graph::{DType, DeviceRef, Dim, ValueId};

use crate::engine::program::Program;

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
