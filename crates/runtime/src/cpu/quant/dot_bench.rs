//! qdot_bench (ignored; `cargo test --release -p max-runtime -- --ignored qdot_bench
//! --nocapture`): qmatmul on SmolLM2-135M's shapes, dequantize + gemm against the integer
//! kernels, in microseconds per call and GB/s of weight bytes, on a pool of all cores.

use std::time::Instant;

use super::blocks::Encoding;
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

/// Pool size (None: one thread per core).
const THREADS: Option<usize> = Some(1);

/// Times only this encoding when set (while tuning one).
const ONLY: Option<Encoding> = None;

#[test]
#[ignore = "timing, run with --ignored qdot_bench --nocapture"]
fn qdot_bench() {
    let threads = THREADS.unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
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
        "{:<5} {:>6} {:>5} {:>4} {:>12} | {:>10} {:>7} | {}",
        "enc", "n", "k", "m", "", "old us", "GB/s", "new us, GB/s, x old (per path)"
    );
    for &(enc, n, k, what) in shapes.iter().filter(|s| ONLY.is_none_or(|e| e == s.0)) {
        let w = random_weights(enc, n, k, &mut rng);
        let row_bytes = w.len() / n;
        for m in bench_ms() {
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
                let new = pool.install(|| time(budget, || dot::qmatmul(p, enc, &a, m, k, &w, n, row_bytes, &mut out)));
                line += &format!(" {:?} {:.1} {:.2} {:.2}x;", p, new * 1e6, gb(new), old / new);
            }
            let (block, sub) = dot::act_blocks(enc);
            let tq = pool.install(|| time(0.05, || drop(std::hint::black_box(QAct::new(&a, m, k, block, sub)))));
            line += &format!(" quantize {:.1}", tq * 1e6);
            println!("{line}");
        }
    }
}

/// The M values timed.
fn bench_ms() -> Vec<usize> {
    vec![1, 4, 16, 128, 512]
}
