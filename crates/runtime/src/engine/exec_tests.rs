//! The host path of a `Gemm` step with a folded rope + KV-cache store (GemmEpilogue::rope_store,
//! which the GPU pass makes): the products and the store, against a direct f64 computation.

use max_graph::DType;
use max_graph::attrs::{Attr, Attrs};
use max_graph::ops::attention::STORE_ROPE;
use max_graph::ops::{Op, OpKind};

use super::*;
use crate::cpu::attention::slice;
use crate::cpu::attention::tests::{buf, noise};
use crate::engine::program::{Fused, GemmEpilogue, Step, StepKind};

#[test]
fn a_folded_rope_store_runs_on_the_host_as_the_products_then_the_store() {
    // one token; q 2 heads, k and v 1 head of 4 dims (neox: pairs (0, 2), (1, 3)); K = 8
    let (hq, hkv, d, k, pages, layers, ps, npos) = (2usize, 1usize, 4usize, 8usize, 3usize, 2usize, 2usize, 5usize);
    let (pos, slot, layer) = (3usize, 4usize, 1usize);
    let x = noise(k, 1);
    let ws = [noise(hq * d * k, 2), noise(hkv * d * k, 3), noise(hkv * d * k, 4)];
    let freqs = noise(npos * d, 5);
    let cache = noise(pages * 2 * layers * ps * hkv * d, 6);
    let transpose =
        Op { kind: OpKind::Transpose, attrs: Attrs::new().with("axis_1", Attr::Int(0)).with("axis_2", Attr::Int(1)) };
    let store_attrs = Attrs::new().with("layer", Attr::Int(layer as i64)).with(STORE_ROPE, Attr::Bool(false));
    let mut g = GemmEpilogue::new(false, None, false, Fused { nodes: vec![] }, Some(transpose));
    g.rope_store = Some(Op { kind: OpKind::KvCacheStore, attrs: store_attrs });
    let step = Step { kind: StepKind::Gemm(g), inputs: vec![], outputs: vec![], bodies: vec![] };
    let chain = || Buffer::empty(DType::Bool, &[0], &Device::Cpu).unwrap();
    let blocks = buf::<f32>(DType::Float32, &[pages, 2, layers, ps, hkv, d], &cache);
    let inputs = [
        buf::<f32>(DType::Float32, &[1, k], &x),
        buf::<f32>(DType::Float32, &[hq * d, k], &ws[0]),
        buf::<f32>(DType::Float32, &[hkv * d, k], &ws[1]),
        buf::<f32>(DType::Float32, &[hkv * d, k], &ws[2]),
        chain(),
        blocks.clone(),
        buf::<u32>(DType::UInt32, &[1], &[slot as u32]),
        buf::<f32>(DType::Float32, &[npos, d], &freqs),
        buf::<u32>(DType::UInt32, &[1], &[pos as u32]),
    ];
    let out = |shape: &[i64]| Buffer::empty(DType::Float32, shape, &Device::Cpu).unwrap();
    let (hqd, hkvd) = ((hq * d) as i64, (hkv * d) as i64);
    let outputs = [out(&[1, hqd]), out(&[1, hkvd]), out(&[1, hkvd]), chain(), out(&[1, hq as i64, d as i64])];
    run_host_kernel(&[], &step, &inputs, &outputs).unwrap();

    // f64: the products, q and k rotated in halves at `pos`, k and v at the slot of `layer`
    let dot = |w: &[f32], r: usize| (0..k).map(|c| x[c] as f64 * w[r * k + c] as f64).sum::<f64>();
    let rope = |w: &[f32], heads: usize| -> Vec<f64> {
        let mut y: Vec<f64> = (0..heads * d).map(|r| dot(w, r)).collect();
        for h in 0..heads {
            for j in 0..d / 2 {
                let (c, s) = (freqs[pos * d + 2 * j] as f64, freqs[pos * d + 2 * j + 1] as f64);
                let (a, b) = (y[h * d + j], y[h * d + j + d / 2]);
                (y[h * d + j], y[h * d + j + d / 2]) = (a * c - b * s, b * c + a * s);
            }
        }
        y
    };
    let close = |got: &[f32], want: &[f64], what: &str| {
        for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
            assert!((g as f64 - w).abs() <= 1e-5 * (1.0 + w.abs()), "{what}[{i}]: {g} against {w}");
        }
    };
    close(slice::<f32>("q", &outputs[4]).unwrap(), &rope(&ws[0], hq), "rope(q)");
    let stored = slice::<f32>("cache", &blocks).unwrap();
    let at = |kv: usize| ((((slot / ps) * 2 + kv) * layers + layer) * ps + slot % ps) * hkv * d;
    close(&stored[at(0)..at(0) + hkv * d], &rope(&ws[1], hkv), "k");
    let v: Vec<f64> = (0..hkv * d).map(|r| dot(&ws[2], r)).collect();
    close(&stored[at(1)..at(1) + hkv * d], &v, "v");
    // nothing else of the cache changed
    let untouched = |i: usize| !(at(0)..at(0) + hkv * d).contains(&i) && !(at(1)..at(1) + hkv * d).contains(&i);
    assert!(stored.iter().zip(&cache).enumerate().all(|(i, (a, b))| !untouched(i) || a == b));
}
