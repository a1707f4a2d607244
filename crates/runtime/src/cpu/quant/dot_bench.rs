//! qdot_bench (ignored; `cargo test --release -p max-runtime -- --ignored qdot_bench
//! --nocapture`): qmatmul on SmolLM2-135M's shapes, dequantize + gemm ("old") against the
//! integer kernels, in microseconds per call (best of repeated calls, weights in cache; for
//! M = 1 also "streamed", cycling through 64 MB of copies) and GB/s of weight bytes, on one
//! thread and on all cores; then the matrices of a whole decode step, one after the other.

use std::time::Instant;

use super::blocks::{Decode, Encoding};
use super::dot::{self, Path};
use super::dot_tests::{Rng, random_acts, random_weights};
use super::matmul_columns;
use super::q8act::QAct;

/// Best seconds per call of `f` over repetitions filling about `budget` seconds.
fn time(budget: f64, mut f: impl FnMut()) -> f64 {
    let t = Instant::now();
    f();
    let first = t.elapsed().as_secs_f64();
    let reps = ((budget / first.max(1e-7)) as usize).clamp(2, 2000);
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(first, f64::min)
}

#[test]
#[ignore = "timing, run with --ignored qdot_bench --nocapture"]
fn qdot_bench() {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    for threads in [1, cores] {
        bench_shapes(threads);
    }
    for threads in [1, cores] {
        bench_decode_step(threads);
    }
}

/// The SmolLM2 shapes on a pool of `threads`.
fn bench_shapes(threads: usize) {
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("a thread pool");
    let best = dot::best_path();
    let mut paths = vec![best];
    if best > Path::Avx2 {
        paths.push(Path::Avx2);
    }
    println!("{threads} threads; integer paths {paths:?}");
    let shapes: &[(Encoding, usize, usize, &str)] = &[
        (Encoding::Q4_1, 576, 576, "attn q/o"),
        (Encoding::Q4_1, 192, 576, "attn k/v"),
        (Encoding::Q4_1, 1536, 576, "mlp gate/up"),
        (Encoding::Q4_1, 576, 1536, "mlp down"),
        (Encoding::Q8_0, 49152, 576, "lm head"),
        (Encoding::Q8_0, 1536, 576, "mlp gate/up"),
        (Encoding::Q4_0, 1536, 576, "mlp gate/up"),
        (Encoding::Q4K, 576, 1536, "mlp down"),
        (Encoding::Q5K, 576, 1536, "mlp down"),
        (Encoding::Q6K, 576, 1536, "mlp down"),
    ];
    let mut rng = Rng(7);
    println!(
        "{:<5} {:>6} {:>5} {:>4} {:>12} | {:>10} {:>7} | new us, GB/s, x old (per path)",
        "enc", "n", "k", "m", "", "old us", "GB/s"
    );
    for &(enc, n, k, what) in shapes {
        let w = random_weights(enc, n, k, &mut rng);
        let row_bytes = w.len() / n;
        for m in [1, 4, 16, 128, 512] {
            let a = random_acts(m, k, &mut rng);
            let mut out = vec![0f32; m * n];
            let budget = 0.3;
            let old = pool.install(|| {
                time(budget, || {
                    matmul_columns(&a, m, k, n, &mut out, |j, row| {
                        enc.decode_blocks(&w[j * row_bytes..(j + 1) * row_bytes], row)
                    })
                })
            });
            let gb = |s: f64| w.len() as f64 / s / 1e9;
            let mut line = format!(
                "{:<5} {n:>6} {k:>5} {m:>4} {what:>12} | {:>10.1} {:>7.2} |",
                format!("{enc:?}"),
                old * 1e6,
                gb(old)
            );
            for &p in &paths {
                let new =
                    pool.install(|| time(budget, || dot::qmatmul(p, enc, &a, m, k, &w, n, row_bytes, &mut out, None)));
                line += &format!(" {:?} {:.1} {:.2} {:.2}x;", p, new * 1e6, gb(new), old / new);
            }
            if m == 1 {
                // Weights out of L2, as in a decode step reading every matrix once: copies of
                // them, 64 MB in all, called in turn.
                let copies: Vec<Vec<u8>> = (0..(64usize << 20).div_ceil(w.len())).map(|_| w.clone()).collect();
                let t = pool.install(|| {
                    time(budget, || {
                        for c in &copies {
                            dot::qmatmul(best, enc, &a, m, k, c, n, row_bytes, &mut out, None);
                        }
                    })
                }) / copies.len() as f64;
                line += &format!(" streamed {:.1} {:.2};", t * 1e6, gb(t));
            }
            let (block, sub) = dot::act_blocks(enc);
            let tq = pool.install(|| time(0.05, || drop(std::hint::black_box(QAct::new(&a, m, k, block, sub)))));
            line += &format!(" quantize {:.1}", tq * 1e6);
            println!("{line}");
        }
    }
}

/// The matrices of one SmolLM2-135M Q4_1 decode step: 30 layers of q, k, v, o, gate, up, down
/// (Q4_1), then the tied output matrix (Q8_0), about 96 MB of weights.
pub(super) fn decode_step_shapes() -> Vec<(Encoding, usize, usize)> {
    let layer = [(576, 576), (192, 576), (192, 576), (576, 576), (1536, 576), (1536, 576), (576, 1536)];
    let mut v: Vec<(Encoding, usize, usize)> =
        (0..30).flat_map(|_| layer.iter().map(|&(n, k)| (Encoding::Q4_1, n, k))).collect();
    v.push((Encoding::Q8_0, 49152, 576));
    v
}

/// All matrices of a decode step (`decode_step_shapes`) in turn, one activation row each.
fn bench_decode_step(threads: usize) {
    let mut rng = Rng(9);
    type Matrix = (Encoding, usize, usize, Vec<u8>, Vec<f32>);
    let mats: Vec<Matrix> = decode_step_shapes()
        .into_iter()
        .map(|(enc, n, k)| (enc, n, k, random_weights(enc, n, k, &mut rng), random_acts(1, k, &mut rng)))
        .collect();
    let bytes: usize = mats.iter().map(|m| m.3.len()).sum();
    let mut out = vec![0f32; 49152];
    let best = dot::best_path();
    {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("a thread pool");
        let step = |old: bool, out: &mut [f32]| {
            for (enc, n, k, w, a) in &mats {
                let (n, k, rb) = (*n, *k, w.len() / *n);
                if old {
                    matmul_columns(a, 1, k, n, &mut out[..n], |j, row| {
                        enc.decode_blocks(&w[j * rb..(j + 1) * rb], row)
                    });
                } else {
                    dot::qmatmul(best, *enc, a, 1, k, w, n, rb, &mut out[..n], None);
                }
            }
        };
        let old = pool.install(|| time(2.0, || step(true, &mut out)));
        let new = pool.install(|| time(2.0, || step(false, &mut out)));
        println!(
            "decode step, {} matrices, {:.1} MB, {threads} threads: old {:.0} us ({:.2} GB/s), {best:?} {:.0} us ({:.2} GB/s), {:.2}x",
            mats.len(),
            bytes as f64 / 1e6,
            old * 1e6,
            bytes as f64 / old / 1e9,
            new * 1e6,
            bytes as f64 / new / 1e9,
            old / new
        );
    }
}
