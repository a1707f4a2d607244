//! The attention kernels against a direct computation over contiguous keys and values.

use crate::Device;
use half::bf16;
use max_graph::DType;
use max_graph::attrs::{Attr, Attrs};
use max_graph::ops::{Op, OpKind};

use super::run;
use crate::Buffer;

/// A host buffer of `shape` holding `data` (shared with engine/exec_tests.rs).
pub(crate) fn buf<T: Copy>(dtype: DType, shape: &[usize], data: &[T]) -> Buffer {
    let b = Buffer::empty(dtype, &shape.iter().map(|&d| d as i64).collect::<Vec<_>>(), &Device::Cpu).unwrap();
    let dst = super::slice_mut::<T>("test", &b).unwrap();
    dst.copy_from_slice(data);
    b
}

fn chain() -> Buffer {
    Buffer::empty(DType::Bool, &[0], &Device::Cpu).unwrap()
}

/// A small deterministic pseudo-random sequence in [-1, 1).
pub(crate) fn noise(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

#[test]
fn stored_keys_are_attended_like_contiguous_ones() {
    // Two sequences: 3 cached + 2 new tokens, and 0 cached + 4 new; pages of 2 tokens.
    let (hq, hkv, d, ps, pages, layers) = (4, 2, 8, 2, 8, 2);
    let lens = [3u32, 0];
    let qlens = [2usize, 4];
    let tokens: usize = qlens.iter().sum();
    let table: Vec<u32> = vec![5, 1, 6, 0, 2, 3, 4, 7];
    let blocks =
        buf::<f32>(DType::Float32, &[pages, 2, layers, ps, hkv, d], &noise(pages * 2 * layers * ps * hkv * d, 1));
    // Every position of both sequences, written through kv_cache_store at layer 1.
    let full = [5usize, 4];
    let k_all = noise(9 * hkv * d, 2);
    let v_all = noise(9 * hkv * d, 3);
    let slot = |b: usize, j: usize| table[b * 4 + j / ps] * ps as u32 + (j % ps) as u32;
    let slots: Vec<u32> = (0..full[0]).map(|j| slot(0, j)).chain((0..full[1]).map(|j| slot(1, j))).collect();
    let store = Op { kind: OpKind::KvCacheStore, attrs: Attrs::new().with("layer", Attr::Int(1)) };
    let k = buf::<f32>(DType::Float32, &[9, hkv, d], &k_all);
    let v = buf::<f32>(DType::Float32, &[9, hkv, d], &v_all);
    let s = buf::<u32>(DType::UInt32, &[9], &slots);
    run(&store, &[chain(), blocks.clone(), k, v, s], &[chain()]).unwrap();

    let q_all = noise(tokens * hq * d, 4);
    let q = buf::<f32>(DType::Float32, &[tokens, hq, d], &q_all);
    let out = Buffer::empty(DType::Float32, &[tokens as i64, hq as i64, d as i64], &Device::Cpu).unwrap();
    let attn = Op {
        kind: OpKind::PagedAttention,
        attrs: Attrs::new()
            .with("layer", Attr::Int(1))
            .with("scale", Attr::Float(0.3))
            .with("mask", Attr::Str("causal".into())),
    };
    let offsets = buf::<u32>(DType::UInt32, &[3], &[0, 2, 6]);
    let lengths = buf::<u32>(DType::UInt32, &[2], &lens);
    let tab = buf::<u32>(DType::UInt32, &[2, 4], &table);
    run(&attn, &[chain(), q, blocks, offsets, lengths, tab], &[out.clone(), chain()]).unwrap();
    let got = super::slice::<f32>("test", &out).unwrap();

    let base = [0usize, 5];
    let mut row = 0;
    for b in 0..2 {
        for i in 0..qlens[b] {
            let pos = lens[b] as usize + i;
            for h in 0..hq {
                let g = h / (hq / hkv);
                let qv = &q_all[(row * hq + h) * d..][..d];
                let scores: Vec<f64> = (0..=pos)
                    .map(|j| {
                        let kv = &k_all[((base[b] + j) * hkv + g) * d..][..d];
                        0.3 * qv.iter().zip(kv).map(|(a, b)| (*a as f64) * (*b as f64)).sum::<f64>()
                    })
                    .collect();
                let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
                let z: f64 = e.iter().sum();
                for c in 0..d {
                    let want: f64 = (0..=pos).map(|j| e[j] / z * v_all[((base[b] + j) * hkv + g) * d + c] as f64).sum();
                    let have = got[(row * hq + h) * d + c] as f64;
                    assert!((want - have).abs() < 1e-5, "seq {b} row {i} head {h} dim {c}: {have} vs {want}");
                }
            }
            row += 1;
        }
    }
}

#[test]
fn bad_slots_and_pages_are_errors() {
    let blocks = buf::<bf16>(DType::BFloat16, &[2, 2, 1, 4, 1, 2], &[bf16::ZERO; 32]);
    let k = buf::<bf16>(DType::BFloat16, &[1, 1, 2], &[bf16::ONE; 2]);
    let store = Op { kind: OpKind::KvCacheStore, attrs: Attrs::new().with("layer", Attr::Int(0)) };
    let s = buf::<u32>(DType::UInt32, &[1], &[8]);
    let e = run(&store, &[chain(), blocks.clone(), k.clone(), k.clone(), s], &[chain()]).unwrap_err();
    assert!(e.to_string().contains("slot 8 is past"), "{e}");
    let attn = Op {
        kind: OpKind::PagedAttention,
        attrs: Attrs::new().with("layer", Attr::Int(0)).with("scale", Attr::Float(1.0)),
    };
    let q = buf::<bf16>(DType::BFloat16, &[1, 1, 2], &[bf16::ONE; 2]);
    let out = Buffer::empty(DType::BFloat16, &[1, 1, 2], &Device::Cpu).unwrap();
    let offsets = buf::<u32>(DType::UInt32, &[2], &[0, 1]);
    let lengths = buf::<u32>(DType::UInt32, &[1], &[4]);
    // a sequence longer than its table
    let tab = buf::<u32>(DType::UInt32, &[1, 1], &[0]);
    let e = run(&attn, &[chain(), q, blocks, offsets, lengths, tab], &[out, chain()]).unwrap_err();
    assert!(e.to_string().contains("more than its 1 pages"), "{e}");
}

#[test]
fn keys_of_pages_past_the_cache_are_left_out() {
    // one kv head of dim 2, pages of 4 tokens; keys are zero, so every present key weighs the
    // same and the result is the mean of the present values
    let mut cache = vec![0f32; 2 * 2 * 4 * 2];
    for t in 0..4 {
        for (page, base) in [(0usize, 1.0f32), (1, 10.0)] {
            let at = ((page * 2 + 1) * 4 + t) * 2; // values of `page`, token t
            cache[at] = base + t as f32;
            cache[at + 1] = -(base + t as f32);
        }
    }
    let blocks = buf::<f32>(DType::Float32, &[2, 2, 1, 4, 1, 2], &cache);
    let attn = Op {
        kind: OpKind::PagedAttention,
        attrs: Attrs::new().with("layer", Attr::Int(0)).with("scale", Attr::Float(1.0)),
    };
    let q = buf::<f32>(DType::Float32, &[1, 1, 2], &[1.0, 1.0]);
    let offsets = buf::<u32>(DType::UInt32, &[2], &[0, 1]);
    let lengths = buf::<u32>(DType::UInt32, &[1], &[7]);
    let mean = |table: [u32; 2]| {
        let out = Buffer::empty(DType::Float32, &[1, 1, 2], &Device::Cpu).unwrap();
        let tab = buf::<u32>(DType::UInt32, &[1, 2], &table);
        run(
            &attn,
            &[chain(), q.clone(), blocks.clone(), offsets.clone(), lengths.clone(), tab],
            &[out.clone(), chain()],
        )
        .unwrap();
        super::slice::<f32>("test", &out).unwrap().to_vec()
    };
    // both pages: keys 0..8 (1, 2, 3, 4, 10, 11, 12, 13)
    assert_eq!(mean([0, 1]), vec![7.0, -7.0]);
    // the second page past the cache: keys 0..4 only; the first: keys 4..8 only
    assert_eq!(mean([0, 9]), vec![2.5, -2.5]);
    assert_eq!(mean([u32::MAX, 1]), vec![11.5, -11.5]);
    // no page at all: a row with no visible key gets zeros
    assert_eq!(mean([2, u32::MAX]), vec![0.0, 0.0]);
}

#[test]
fn a_store_with_its_ropes_folded_in_equals_the_three_ops() {
    let (tokens, hq, hkv, d, rot, npos) = (3usize, 4, 2, 8, 6, 16);
    let cache_shape = [4usize, 2, 2, 4, 2, 8];
    let cache_len: usize = cache_shape.iter().product();
    let bf = |v: Vec<f32>| v.into_iter().map(bf16::from_f32).collect::<Vec<_>>();
    let q = buf(DType::BFloat16, &[tokens, hq, d], &bf(noise(tokens * hq * d, 7)));
    let k = buf(DType::BFloat16, &[tokens, hkv, d], &bf(noise(tokens * hkv * d, 8)));
    let v = buf(DType::BFloat16, &[tokens, hkv, d], &bf(noise(tokens * hkv * d, 9)));
    let freqs = buf::<f32>(DType::Float32, &[npos, rot], &noise(npos * rot, 10));
    let positions = buf::<u32>(DType::UInt32, &[tokens], &[3, 9, 15]);
    let slots = buf::<u32>(DType::UInt32, &[tokens], &[5, 0, 15]);
    let rope = Op { kind: OpKind::Rope, attrs: Attrs::new().with("interleaved", Attr::Bool(false)) };
    let store = Op { kind: OpKind::KvCacheStore, attrs: Attrs::new().with("layer", Attr::Int(1)) };
    let empty = |shape: &[usize]| {
        Buffer::empty(DType::BFloat16, &shape.iter().map(|&x| x as i64).collect::<Vec<_>>(), &Device::Cpu).unwrap()
    };
    let zeros = vec![bf16::from_f32(0.0); cache_len];
    let (blocks_a, blocks_b) = (buf(DType::BFloat16, &cache_shape, &zeros), buf(DType::BFloat16, &cache_shape, &zeros));
    let (q_a, q_b, k_a) = (empty(&[tokens, hq, d]), empty(&[tokens, hq, d]), empty(&[tokens, hkv, d]));
    run(&rope, &[q.clone(), freqs.clone(), positions.clone()], std::slice::from_ref(&q_a)).unwrap();
    run(&rope, &[k.clone(), freqs.clone(), positions.clone()], std::slice::from_ref(&k_a)).unwrap();
    run(&store, &[chain(), blocks_a.clone(), k_a, v.clone(), slots.clone()], &[chain()]).unwrap();
    let folded =
        Op { kind: OpKind::KvCacheStore, attrs: store.attrs.clone().with("rope_interleaved", Attr::Bool(false)) };
    run(&folded, &[chain(), blocks_b.clone(), k, v, slots, q, freqs, positions], &[chain(), q_b.clone()]).unwrap();
    let bits = |b: &Buffer| super::slice::<bf16>("test", b).unwrap().iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&q_a), bits(&q_b));
    assert_eq!(bits(&blocks_a), bits(&blocks_b));
    assert!(bits(&blocks_b).iter().any(|&x| x != 0));
}
