//! Tests of the integer qmatmul (dot.rs): every SIMD path against the scalar one, the scalar one
//! against float64 sums over the dequantized weights (with the quantized activations: f32
//! rounding only; with the exact ones: within the documented bound), the activation quantizer,
//! and the qdot_bench timing (ignored; `--ignored qdot_bench --nocapture`).

use half::f16;

use super::blocks::{Decode, Encoding};
use super::dot::{self, Path, TAKEN};
use super::q8act::QAct;

pub(super) struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Roughly standard normal.
    pub fn normal(&mut self) -> f64 {
        (0..12).map(|_| self.unit()).sum::<f64>() - 6.0
    }
}

pub(super) const ALL: [Encoding; 6] =
    [Encoding::Q4_0, Encoding::Q4_1, Encoding::Q8_0, Encoding::Q4K, Encoding::Q5K, Encoding::Q6K];

/// `n` rows of `k` values of random valid blocks: random quant bytes, finite f16 scales of a
/// plausible size (signed where ggml's quantizers make them so).
pub(super) fn random_weights(enc: Encoding, n: usize, k: usize, rng: &mut Rng) -> Vec<u8> {
    let (elems, bytes) = enc.block();
    let mut w: Vec<u8> = (0..n * k / elems * bytes).map(|_| rng.next() as u8).collect();
    for b in w.chunks_exact_mut(bytes) {
        let mut half = |at: usize, signed: bool, rng: &mut Rng| {
            let sign = if signed && rng.next() % 2 == 1 { -1.0 } else { 1.0 };
            let v = sign * (0.25 + rng.unit()) / 64.0;
            b[at..at + 2].copy_from_slice(&f16::from_f64(v).to_le_bytes());
        };
        match enc {
            Encoding::Q4_0 | Encoding::Q8_0 => half(0, true, rng),
            Encoding::Q4_1 => {
                half(0, false, rng);
                half(2, true, rng);
            }
            Encoding::Q4K | Encoding::Q5K => {
                half(0, false, rng);
                half(2, false, rng);
            }
            Encoding::Q6K => half(208, true, rng),
        }
    }
    w
}

/// `[m, k]` roughly normal activations with a few large outliers, as in LLM hidden states.
pub(super) fn random_acts(m: usize, k: usize, rng: &mut Rng) -> Vec<f32> {
    (0..m * k).map(|_| (rng.normal() * if rng.next() % 64 == 0 { 8.0 } else { 1.0 }) as f32).collect()
}

fn dequantize(enc: Encoding, w: &[u8], k: usize) -> Vec<f32> {
    let mut out = vec![0f32; w.len() / enc.block().1 * enc.block().0];
    enc.decode_blocks(w, &mut out);
    debug_assert_eq!(out.len() % k, 0);
    out
}

/// |min term| of each weight (Q4_1's m, the K-quants' dmin * m; 0 elsewhere): the f32 rounding
/// of the integer path is relative to |scale part| + |min part|, not to their difference.
fn min_parts(enc: Encoding, w: &[u8], k: usize) -> Vec<f32> {
    let mut w = w.to_vec();
    match enc {
        Encoding::Q4_1 | Encoding::Q4K | Encoding::Q5K => {
            for b in w.chunks_exact_mut(enc.block().1) {
                b[..2].fill(0);
            }
            dequantize(enc, &w, k).iter().map(|v| v.abs()).collect()
        }
        _ => vec![0.0; w.len() / enc.block().1 * enc.block().0],
    }
}

fn paths() -> Vec<Path> {
    [Path::Scalar, Path::Avx2, Path::Avx512Vnni].into_iter().filter(|&p| p <= dot::best_path()).collect()
}

fn run(path: Path, enc: Encoding, a: &[f32], m: usize, k: usize, w: &[u8], n: usize) -> Vec<f32> {
    let mut out = vec![f32::NAN; m * n];
    dot::qmatmul(path, enc, a, m, k, w, n, w.len() / n, &mut out, None);
    out
}

/// (m, k, n) cases of `enc`: every m with k and n cycling through multiples of the block
/// (576 and 1536 among them) and odd and even n.
fn cases(enc: Encoding) -> Vec<(usize, usize, usize)> {
    let ks: &[usize] = if enc.block().0 == 32 { &[32, 96, 576, 1536] } else { &[256, 768, 1536, 2304] };
    let ns = [1, 6, 13, 67, 64];
    let mut v = vec![];
    for (t, m) in [1, 2, 3, 7, 16, 33, 128].into_iter().enumerate() {
        for (u, &k) in ks.iter().enumerate() {
            v.push((m, k, ns[(t + u) % ns.len()]));
        }
    }
    v
}

/// Per output: sum_i (|w_i| + |min part_i|) |a_i|, the scale of its f32 rounding.
fn magnitudes(deq: &[f32], mins: &[f32], a: &[f32], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut mag = vec![0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            mag[i * n + j] = (0..k)
                .map(|c| (deq[j * k + c].abs() as f64 + mins[j * k + c] as f64) * a[i * k + c].abs() as f64)
                .sum();
        }
    }
    mag
}

#[test]
fn simd_paths_match_scalar() {
    // The integer sums are the same; only the order of the f32 sums of scaled block results
    // differs (lanes, and per-lane products of scales), which moves a result by a few f32
    // roundings of its magnitude: far below 1e-5 of it.
    let mut rng = Rng(1);
    for enc in ALL {
        for (m, k, n) in cases(enc) {
            let w = random_weights(enc, n, k, &mut rng);
            let a = random_acts(m, k, &mut rng);
            let mag = magnitudes(&dequantize(enc, &w, k), &min_parts(enc, &w, k), &a, m, k, n);
            let want = run(Path::Scalar, enc, &a, m, k, &w, n);
            for path in paths().into_iter().skip(1) {
                let got = run(path, enc, &a, m, k, &w, n);
                for (e, ((g, w), mag)) in got.iter().zip(&want).zip(&mag).enumerate() {
                    let err = (*g as f64 - *w as f64).abs();
                    assert!(err <= 1e-5 * mag, "{enc:?} {path:?} m={m} k={k} n={n} [{e}]: {g} vs {w} (scale {mag})");
                }
            }
        }
    }
}

#[test]
fn scalar_matches_float64() {
    let mut rng = Rng(2);
    for enc in ALL {
        let (block, sub) = dot::act_blocks(enc);
        for (m, k, n) in cases(enc) {
            let w = random_weights(enc, n, k, &mut rng);
            let a = random_acts(m, k, &mut rng);
            let deq = dequantize(enc, &w, k);
            let mag = magnitudes(&deq, &min_parts(enc, &w, k), &a, m, k, n);
            let got = run(Path::Scalar, enc, &a, m, k, &w, n);
            let q = QAct::two_planes(&a, m, k, block, sub);
            for i in 0..m {
                let planes = [(q.qs_row(2 * i), q.d_row(2 * i)), (q.qs_row(2 * i + 1), q.d_row(2 * i + 1))];
                let x = &a[i * k..(i + 1) * k];
                let amax: Vec<f64> =
                    x.chunks(block).map(|b| b.iter().fold(0f64, |s, v| s.max(v.abs() as f64))).collect();
                for j in 0..n {
                    let wr = &deq[j * k..(j + 1) * k];
                    let g = got[i * n + j] as f64;
                    // With the quantized activations (both planes) the result is exact but for f32
                    // rounding.
                    let with_q: f64 = planes
                        .iter()
                        .map(|(qs, d)| (0..k).map(|c| wr[c] as f64 * d[c / block] as f64 * qs[c] as f64).sum::<f64>())
                        .sum();
                    let tol = 1e-5 * mag[i * n + j];
                    assert!((g - with_q).abs() <= tol, "{enc:?} m={m} k={k} n={n} ({i}, {j}): {g} vs {with_q}");
                    // With the exact ones, half a step of the residual plane per value at most.
                    let exact: f64 = (0..k).map(|c| wr[c] as f64 * x[c] as f64).sum();
                    let bound: f64 = wr
                        .chunks(block)
                        .zip(&amax)
                        .map(|(b, am)| am / 64516.0 * b.iter().map(|v| v.abs() as f64).sum::<f64>())
                        .sum();
                    assert!(
                        (g - exact).abs() <= bound + tol,
                        "{enc:?} m={m} k={k} n={n} ({i}, {j}): {g} vs {exact}, bound {bound}"
                    );
                }
            }
        }
    }
}

#[test]
fn activation_quantization() {
    let mut a = vec![0f32; 3 * 64];
    for (i, v) in a[..64].iter_mut().enumerate() {
        *v = i as f32 - 20.0;
    }
    a[64 + 5] = f32::NAN; // row 1, block 0
    a[64 + 40] = 1e-31; // row 1, block 1: below 2^-100, zeros
    a[128 + 33] = f32::INFINITY; // row 2, block 1
    a[128 + 2] = -2.5;
    let q = QAct::new(&a, 3, 64, 32, 16);
    assert_eq!(q.d_row(0), &[20.0 / 127.0, 43.0 / 127.0]);
    for (c, &v) in q.qs_row(0).iter().enumerate() {
        let d = q.d_row(0)[c / 32];
        assert!((a[c] - d * v as f32).abs() <= d / 2.0 * 1.000_001, "{c}");
    }
    assert_eq!(q.qs_row(0)[0], -127);
    assert_eq!(q.qs_row(0)[63], 127);
    assert_eq!(q.sums_row(0)[0], q.qs_row(0)[..16].iter().map(|&v| v as i32).sum::<i32>());
    assert!(q.d_row(1)[0].is_nan());
    assert_eq!((q.d_row(1)[1], q.qs_row(1)[40]), (0.0, 0));
    assert_eq!((q.d_row(2)[0], q.qs_row(2)[2]), (2.5 / 127.0, -127));
    assert!(q.d_row(2)[1].is_nan());
    // NaN in the activations reaches the result.
    let mut rng = Rng(3);
    for enc in ALL {
        let k = enc.block().0;
        let w = random_weights(enc, 5, k, &mut rng);
        let mut x = random_acts(2, k, &mut rng);
        x[k + 3] = f32::NAN;
        for path in paths() {
            let out = run(path, enc, &x, 2, k, &w, 5);
            assert!(out[..5].iter().all(|v| v.is_finite()) && out[5..].iter().all(|v| v.is_nan()), "{enc:?} {path:?}");
        }
    }
}

#[test]
fn quantizer_versions_agree() {
    // The AVX-512 quantizer (where the CPU has it) against the portable one, bit for bit, with
    // ties, huge, tiny, infinite and NaN values among normal ones.
    let mut rng = Rng(5);
    let specials = [0.5f32, -2.5, 1e30, -1e-31, 3e-39, f32::INFINITY, f32::NAN, 0.0, -0.0, 127.5];
    for (block, sub) in [(32, 32), (256, 32), (256, 16)] {
        let k = 4 * block;
        let mut x = random_acts(1, k, &mut rng);
        for (i, v) in x.iter_mut().enumerate().skip(3).step_by(block / 2 + 1) {
            *v = specials[i % specials.len()];
        }
        x[..block].iter_mut().for_each(|v| *v *= 1e-33); // a block of tiny values
        let q = QAct::new(&x, 1, k, block, sub);
        let (mut qs, mut d, mut s) = (vec![0i8; k], vec![0f32; k / block], vec![0i32; k / sub]);
        super::q8act::quantize_row_portable(&x, block, sub, &mut qs, &mut d, &mut s);
        assert_eq!(q.qs, qs);
        assert_eq!(q.sums, s);
        assert!(q.d.iter().zip(&d).all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())));
    }
}

#[test]
fn every_path_runs() {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        if has!("avx512vnni") && has!("avx512vbmi") && has!("avx512bw") && has!("avx512vl") {
            assert_eq!(dot::best_path(), Path::Avx512Vnni);
        } else if has!("avx2") && has!("fma") && has!("f16c") {
            assert_eq!(dot::best_path(), Path::Avx2);
        }
    }
    let mut rng = Rng(4);
    let taken = |i: usize| TAKEN[i].load(std::sync::atomic::Ordering::Relaxed);
    let w = random_weights(Encoding::Q4K, 4, 256, &mut rng);
    let a = random_acts(1, 256, &mut rng);
    for path in paths() {
        // On AVX-512, Q4_K runs the panels (counted in slot 3) and Q6_K at M = 1 row tiles.
        let before = taken(path as usize);
        run(path, Encoding::Q6K, &a, 1, 256, &random_weights(Encoding::Q6K, 4, 256, &mut rng), 4);
        assert!(taken(path as usize) > before, "{path:?}");
    }
    if dot::best_path() == Path::Avx512Vnni {
        let before = taken(3);
        run(Path::Avx512Vnni, Encoding::Q4K, &a, 1, 256, &w, 4);
        assert!(taken(3) > before, "panels");
    }
    println!("qmatmul paths on this CPU: {:?}", paths());
}

#[test]
fn prepacked_weights_give_the_same_bits() {
    // Where a path keeps repacked weights (prepack), the results are those of repacking per call.
    let mut rng = Rng(7);
    for path in paths() {
        for enc in ALL {
            for (m, k, n) in cases(enc) {
                let w = random_weights(enc, n, k, &mut rng);
                let a = random_acts(m, k, &mut rng);
                let Some(pre) = dot::prepack(path, enc, &w, n, w.len() / n) else { continue };
                let mut out = vec![f32::NAN; m * n];
                dot::qmatmul(path, enc, &a, m, k, &w, n, w.len() / n, &mut out, Some(&pre));
                let want = run(path, enc, &a, m, k, &w, n);
                assert!(
                    out.iter().zip(&want).all(|(x, y)| x.to_bits() == y.to_bits()),
                    "{enc:?} {path:?} m={m} k={k} n={n}"
                );
                // A prepacked form of other weights is not used.
                let mut other = vec![f32::NAN; m * n];
                let half = dot::prepack(path, enc, &w[..w.len() / n * (n / 2)], n / 2, w.len() / n);
                dot::qmatmul(path, enc, &a, m, k, &w, n, w.len() / n, &mut other, half.as_ref());
                assert!(other.iter().zip(&want).all(|(x, y)| x.to_bits() == y.to_bits()), "{enc:?} other");
            }
        }
    }
}
