//! The random ops through `run`, on host buffers: every dtype against the recipe of values.rs
//! written out directly, the clamp at the range's ends, seeds and streams, and the checks.

use half::{bf16, f16};
use max_graph::attrs::{Attr, Attrs};
use max_graph::ops::{Op, OpKind};
use max_graph::{DType, DeviceRef, Dim};

use super::{philox, run};
use crate::cpu::cast::{Canon, Elem, F8E4m3, F8E5m2};
use crate::{Buffer, Device};

fn op(kind: OpKind, dtype: DType, n: usize, extra: &[(&str, Attr)]) -> Op {
    let mut attrs = Attrs::new()
        .with("dtype", Attr::DType(dtype))
        .with("shape", Attr::Dims(vec![Dim::stat(n as i64)]))
        .with("device", Attr::Device(DeviceRef::CPU));
    for (k, v) in extra {
        attrs = attrs.with(k, v.clone());
    }
    Op { kind, attrs }
}

fn seed(value: u64, dtype: DType) -> Buffer {
    let b = Buffer::empty(dtype, &[], &Device::Cpu).unwrap();
    super::slice_mut::<u64>("test", &b).unwrap()[0] = value;
    b
}

fn draw<T: Copy>(op: &Op, seed_value: u64, n: usize) -> Vec<T> {
    let dtype = match &op.attrs.get("dtype") {
        Some(Attr::DType(d)) => *d,
        _ => unreachable!(),
    };
    let out = Buffer::empty(dtype, &[n as i64], &Device::Cpu).unwrap();
    run(op, &[seed(seed_value, DType::UInt64)], std::slice::from_ref(&out)).unwrap();
    super::slice::<T>("test", &out).unwrap().to_vec()
}

fn range(low: f64, high: f64) -> [(&'static str, Attr); 2] {
    [("low", Attr::Float(low)), ("high", Attr::Float(high))]
}

#[test]
fn uniform_f32_follows_the_recipe() {
    let n = 70_001; // past PAR_MIN, not a multiple of the block or chunk
    let (s, lo, hi) = (0x0123_4567_89ab_cdef, -3.0f64, 5.5f64);
    let got = draw::<f32>(&op(OpKind::RandomUniform, DType::Float32, n, &range(lo, hi)), s, n);
    for (i, &v) in got.iter().enumerate() {
        let w = philox::block(s, 0, (i / 4) as u64)[i % 4];
        let u = (w >> 8) as f32 / 16_777_216.0;
        let want = (lo as f32 + (hi - lo) as f32 * u).min(5.5f32.next_down());
        assert_eq!(v.to_bits(), want.to_bits(), "element {i}");
    }
}

#[test]
fn uniform_f64_follows_the_recipe() {
    let n = 1001;
    let got = draw::<f64>(&op(OpKind::RandomUniform, DType::Float64, n, &range(0.0, 1.0)), 7, n);
    for (i, &v) in got.iter().enumerate() {
        let w = philox::block(7, 0, (i / 2) as u64);
        let m = ((w[2 * (i % 2)] as u64) << 21) | (w[2 * (i % 2) + 1] >> 11) as u64;
        assert_eq!(v, m as f64 / (1u64 << 53) as f64, "element {i}");
    }
}

#[test]
fn narrow_dtypes_are_the_f32_values_rounded() {
    let n = 4099;
    let args = range(-1.0, 1.0);
    let f = draw::<f32>(&op(OpKind::RandomUniform, DType::Float32, n, &args), 99, n);
    let h = draw::<f16>(&op(OpKind::RandomUniform, DType::Float16, n, &args), 99, n);
    let b = draw::<bf16>(&op(OpKind::RandomUniform, DType::BFloat16, n, &args), 99, n);
    for i in 0..n {
        // Below the top, rounding to nearest-even of the f32 value; at the top, clamped.
        assert_eq!(h[i], f16::from_f32(f[i]).min(f16::from_f32(1.0 - 2f32.powi(-11))), "{i}");
        assert_eq!(b[i], bf16::from_f32(f[i]).min(bf16::from_f32(1.0 - 2f32.powi(-8))), "{i}");
        assert!(h[i].to_f32() < 1.0 && b[i].to_f32() < 1.0 && h[i].to_f32() >= -1.0 && b[i].to_f32() >= -1.0);
    }
    let e4 = draw::<F8E4m3>(&op(OpKind::RandomUniform, DType::Float8E4m3fn, n, &args), 99, n);
    let e5 = draw::<F8E5m2>(&op(OpKind::RandomUniform, DType::Float8E5m2, n, &args), 99, n);
    for i in 0..n {
        assert_eq!(e4[i], F8E4m3::from_canon(Canon::F(f[i].min(0.9375) as f64)), "{i}");
        assert_eq!(e5[i], F8E5m2::from_canon(Canon::F(f[i].min(0.875) as f64)), "{i}");
    }
    let g = draw::<f32>(&op(OpKind::RandomNormal, DType::Float32, n, &[]), 5, n);
    let gh = draw::<bf16>(&op(OpKind::RandomNormal, DType::BFloat16, n, &[]), 5, n);
    for i in 0..n {
        assert_eq!(gh[i], bf16::from_f32(g[i]), "{i}");
    }
}

#[test]
fn values_reaching_the_top_of_the_range_are_clamped_below_it() {
    // In bfloat16 a quarter of [0, 1)'s values round up to 1 unless clamped.
    let n = 1 << 12;
    let v = draw::<bf16>(&op(OpKind::RandomUniform, DType::BFloat16, n, &range(0.0, 1.0)), 3, n);
    let top = bf16::from_f32(1.0 - 2f32.powi(-8));
    assert!(v.iter().all(|x| x.to_f32() < 1.0));
    assert!(v.iter().filter(|x| **x == top).count() > n / 200);
}

#[test]
fn normal_values_follow_box_muller() {
    let n = 4096;
    let v = draw::<f64>(
        &op(OpKind::RandomNormal, DType::Float64, n, &[("mean", Attr::Float(2.0)), ("std", Attr::Float(0.5))]),
        11,
        n,
    );
    for (j, pair) in v.chunks(2).enumerate() {
        let w = philox::block(11, 0, j as u64);
        let m = |k: usize| ((w[2 * k] as u64) << 21) | (w[2 * k + 1] >> 11) as u64;
        let u1 = (m(0) + 1) as f64 / (1u64 << 53) as f64;
        let u2 = m(1) as f64 / (1u64 << 53) as f64;
        let r = (-2.0 * u1.ln()).sqrt();
        let t = 2.0 * std::f64::consts::PI * u2;
        for (got, z) in pair.iter().zip([r * t.cos(), r * t.sin()]) {
            assert!((got - (2.0 + 0.5 * z)).abs() < 1e-13, "{j}: {got} vs {}", 2.0 + 0.5 * z);
        }
    }
    let f = draw::<f32>(&op(OpKind::RandomNormal, DType::Float32, 1 << 16, &[]), 1, 1 << 16);
    let mean = f.iter().map(|&x| x as f64).sum::<f64>() / f.len() as f64;
    let var = f.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / f.len() as f64;
    assert!(mean.abs() < 0.02 && (var - 1.0).abs() < 0.02, "{mean} {var}");
}

#[test]
fn seeds_and_streams_change_the_values_and_int64_seeds_are_their_bits() {
    let n = 64;
    let a = draw::<f32>(&op(OpKind::RandomUniform, DType::Float32, n, &[]), 1, n);
    assert_ne!(a, draw::<f32>(&op(OpKind::RandomUniform, DType::Float32, n, &[]), 2, n));
    assert_ne!(a, draw::<f32>(&op(OpKind::RandomUniform, DType::Float32, n, &[("stream", Attr::Int(1))]), 1, n));
    assert_eq!(a, draw::<f32>(&op(OpKind::RandomUniform, DType::Float32, n, &[]), 1, n));
    let o = op(OpKind::RandomUniform, DType::Float32, n, &[]);
    let out = Buffer::empty(DType::Float32, &[n as i64], &Device::Cpu).unwrap();
    run(&o, &[seed(1, DType::Int64)], std::slice::from_ref(&out)).unwrap();
    assert_eq!(super::slice::<f32>("test", &out).unwrap(), a.as_slice());
}

#[test]
fn bad_operands_are_errors() {
    let o = op(OpKind::RandomUniform, DType::Float32, 4, &[]);
    let out = Buffer::empty(DType::Float16, &[4], &Device::Cpu).unwrap();
    let e = run(&o, &[seed(1, DType::Int64)], std::slice::from_ref(&out)).unwrap_err().to_string();
    assert!(e.contains("random_uniform: the output is float16"), "{e}");
    let out = Buffer::empty(DType::Float32, &[4], &Device::Cpu).unwrap();
    let bad_seed = Buffer::empty(DType::Int32, &[], &Device::Cpu).unwrap();
    let e = run(&o, &[bad_seed], std::slice::from_ref(&out)).unwrap_err().to_string();
    assert!(e.contains("random_uniform: seed: must hold one int64 or uint64 value"), "{e}");
    let bad = op(OpKind::RandomNormal, DType::Float32, 4, &[("std", Attr::Float(-1.0))]);
    let e = run(&bad, &[seed(1, DType::Int64)], std::slice::from_ref(&out)).unwrap_err().to_string();
    assert!(e.starts_with("random_normal: std: must be positive"), "{e}");
    let empty = Buffer::empty(DType::Float32, &[0], &Device::Cpu).unwrap();
    run(&op(OpKind::RandomUniform, DType::Float32, 0, &[]), &[seed(1, DType::Int64)], &[empty]).unwrap();
}
