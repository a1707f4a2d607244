//! The sampling ops through `run`, on host buffers: shapes, dtypes and range checks, and the
//! penalties against a direct computation.

use max_graph::DType;
use max_graph::attrs::Attrs;
use max_graph::ops::{Op, OpKind};

use super::run;
use crate::{Buffer, Device};

fn buf<T: Copy>(dtype: DType, shape: &[usize], data: &[T]) -> Buffer {
    let b = Buffer::empty(dtype, &shape.iter().map(|&d| d as i64).collect::<Vec<_>>(), &Device::Cpu).unwrap();
    super::slice_mut::<T>("test", &b).unwrap().copy_from_slice(data);
    b
}

fn op(kind: OpKind) -> Op {
    Op { kind, attrs: Attrs::new() }
}

/// A small deterministic pseudo-random sequence in [-4, 4).
fn noise(n: usize, seed: u64) -> Vec<f32> {
    (0..n)
        .map(|i| (super::math::splitmix64(seed * 1_000_003 + i as u64) >> 40) as f32 / (1 << 21) as f32 - 4.0)
        .collect()
}

fn sample(logits: &[f32], vocab: usize, t: &[f32], k: &[i64], p: &[f32], mp: &[f32], s: &[u64]) -> Vec<i64> {
    let b = t.len();
    let out = Buffer::empty(DType::Int64, &[b as i64], &Device::Cpu).unwrap();
    let inputs = [
        buf(DType::Float32, &[b, vocab], logits),
        buf(DType::Float32, &[b], t),
        buf(DType::Int64, &[b], k),
        buf(DType::Float32, &[b], p),
        buf(DType::Float32, &[b], mp),
        buf(DType::UInt64, &[b], s),
    ];
    run(&op(OpKind::SampleTokens), &inputs, std::slice::from_ref(&out)).unwrap();
    super::slice::<i64>("test", &out).unwrap().to_vec()
}

#[test]
fn rows_of_one_batch_follow_their_own_parameters() {
    let vocab = 1000;
    let x = noise(4 * vocab, 1);
    let t = [0.0, 0.8, 1.0, 1.5];
    let k = [0, 1, 5, 0];
    let p = [1.0, 1.0, 1.0, 0.3];
    let mp = [0.0, 0.0, 0.0, 0.0];
    let s = [1, 2, 3, 4];
    let got = sample(&x, vocab, &t, &k, &p, &mp, &s);
    let argmax = |r: &[f32]| r.iter().enumerate().fold((0, f32::MIN), |a, (i, &v)| if v > a.1 { (i, v) } else { a }).0;
    assert_eq!(got[0] as usize, argmax(&x[..vocab]));
    assert_eq!(got[1] as usize, argmax(&x[vocab..2 * vocab]));
    let row2 = &x[2 * vocab..3 * vocab];
    let mut sorted: Vec<f32> = row2.to_vec();
    sorted.sort_by(|a, b| b.total_cmp(a));
    assert!(row2[got[2] as usize] >= sorted[4]);
    // A row alone gives the same token as in the batch.
    for b in 0..4 {
        let one = sample(&x[b * vocab..][..vocab], vocab, &t[b..=b], &k[b..=b], &p[b..=b], &mp[b..=b], &s[b..=b]);
        assert_eq!(one[0], got[b], "row {b}");
    }
}

#[test]
fn the_same_seed_gives_the_same_token_and_seeds_differ() {
    let vocab = 5000;
    let x = noise(vocab, 2);
    let one = |seed: u64| sample(&x, vocab, &[1.0], &[0], &[1.0], &[0.0], &[seed])[0];
    assert_eq!(one(42), one(42));
    let distinct: std::collections::BTreeSet<i64> = (0..20).map(one).collect();
    assert!(distinct.len() > 10, "{distinct:?}");
}

#[test]
fn sample_tokens_checks_its_inputs() {
    let x = noise(2 * 10, 3);
    let out = Buffer::empty(DType::Int64, &[2], &Device::Cpu).unwrap();
    let mut inputs = vec![
        buf(DType::Float32, &[2, 10], &x),
        buf(DType::Float32, &[2], &[1.0f32, 1.0]),
        buf(DType::Int64, &[2], &[0i64, 0]),
        buf(DType::Float32, &[2], &[1.0f32, 1.0]),
        buf(DType::Float32, &[2], &[0.0f32, 0.0]),
        buf(DType::UInt64, &[2], &[0u64, 0]),
    ];
    inputs[4] = buf(DType::Float32, &[3], &[0.0f32; 3]);
    let e = run(&op(OpKind::SampleTokens), &inputs, std::slice::from_ref(&out)).unwrap_err().to_string();
    assert!(e.contains("sample_tokens: min_p: holds 3 values for 2 rows"), "{e}");
    inputs[4] = buf(DType::Float32, &[2], &[0.0f32; 2]);
    inputs[5] = buf(DType::Int64, &[2], &[0i64; 2]);
    let e = run(&op(OpKind::SampleTokens), &inputs, std::slice::from_ref(&out)).unwrap_err().to_string();
    assert!(e.contains("sample_tokens: seed: must be uint64, got int64"), "{e}");
}

#[allow(clippy::too_many_arguments)]
fn penalties(
    logits: &[f32],
    vocab: usize,
    tokens: &[i64],
    offsets: &[u32],
    prompt: &[u32],
    f: &[f32],
    p: &[f32],
    r: &[f32],
) -> crate::Result<Vec<f32>> {
    let b = prompt.len();
    let out = Buffer::empty(DType::Float32, &[b as i64, vocab as i64], &Device::Cpu).unwrap();
    let inputs = [
        buf(DType::Float32, &[b, vocab], logits),
        buf(DType::Int64, &[tokens.len()], tokens),
        buf(DType::UInt32, &[offsets.len()], offsets),
        buf(DType::UInt32, &[b], prompt),
        buf(DType::Float32, &[b], f),
        buf(DType::Float32, &[b], p),
        buf(DType::Float32, &[b], r),
    ];
    run(&op(OpKind::ApplyPenalties), &inputs, std::slice::from_ref(&out))?;
    Ok(super::slice::<f32>("test", &out).unwrap().to_vec())
}

#[test]
fn penalties_change_each_history_id_once() {
    let vocab = 8;
    let x: Vec<f32> = vec![1.0, -1.0, 2.0, 0.0, 4.0, -3.0, 5.0, 6.0, 1.0, -1.0, 2.0, 0.0, 4.0, -3.0, 5.0, 6.0];
    // Row 0: prompt [1, 2], generated [2, 4, 2]; row 1: prompt [7], nothing generated.
    let tokens = [9i64, 1, 2, 2, 4, 2, 7];
    let offsets = [1u32, 6, 7];
    let out = penalties(&x, vocab, &tokens, &offsets, &[2, 1], &[0.5, 0.5], &[0.25, 0.25], &[2.0, 4.0]).unwrap();
    let mut want = x.clone();
    want[1] = -2.0; // prompt only: -1 times the repetition 2
    want[2] = 2.0 / 2.0 - (0.5 * 2.0 + 0.25); // prompt and generated twice
    want[4] = 4.0 / 2.0 - (0.5 + 0.25);
    want[8 + 7] = 6.0 / 4.0;
    assert_eq!(out, want);
}

#[test]
fn penalties_reject_bad_histories() {
    let x = vec![0.0f32; 8];
    let one = [1.0f32];
    let e = penalties(&x, 8, &[1, 8], &[0, 2], &[0], &one, &one, &one).unwrap_err().to_string();
    assert!(e.contains("apply_penalties: tokens: row 0 holds the token id 8, outside a vocabulary of 8"), "{e}");
    let e = penalties(&x, 8, &[1, -1], &[0, 2], &[0], &one, &one, &one).unwrap_err().to_string();
    assert!(e.contains("token id -1"), "{e}");
    let e = penalties(&x, 8, &[1, 2], &[0, 3], &[0], &one, &one, &one).unwrap_err().to_string();
    assert!(e.contains("apply_penalties: offsets: row 0 spans tokens 0..3"), "{e}");
    let e = penalties(&x, 8, &[1, 2], &[0, 2], &[3], &one, &one, &one).unwrap_err().to_string();
    assert!(e.contains("apply_penalties: prompt_lengths: row 0 has a prompt of 3 tokens in a history of 2"), "{e}");
    let e = penalties(&x, 8, &[1, 2], &[0, 1, 2], &[0], &one, &one, &one).unwrap_err().to_string();
    assert!(e.contains("apply_penalties: offsets: holds 3 values for 1 rows of logits (expected batch + 1)"), "{e}");
}
