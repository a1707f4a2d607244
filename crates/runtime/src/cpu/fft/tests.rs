//! The FFT core against direct O(n^2) sums in f64 (every Stockham radix, Bluestein lengths, the
//! even and odd real inverses with padded and truncated spectra), f32 accuracy on long rows,
//! and irfft through `run` on host buffers (axes, layouts, dtypes, errors).

use max_graph::DType;
use max_graph::attrs::{Attr, Attrs};
use max_graph::ops::{Op, OpKind};

use super::complex::Cx;
use super::irfft::{Irfft, Work};
use super::plan::{Fft, radix_of, smooth};
use super::run;
use crate::cpu::attention::{slice, slice_mut};
use crate::{Buffer, Device};

/// Deterministic values in [-1, 1).
fn noise(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 11) as f64 / (1u64 << 52) as f64 - 1.0
        })
        .collect()
}

fn cnoise(n: usize, seed: u64) -> Vec<Cx<f64>> {
    let v = noise(2 * n, seed);
    v.chunks(2).map(|c| Cx::new(c[0], c[1])).collect()
}

/// `sum_k x[k] e^(2 pi i jk / n)`, directly.
fn dft(x: &[Cx<f64>]) -> Vec<Cx<f64>> {
    let n = x.len() as u64;
    (0..n)
        .map(|j| x.iter().enumerate().fold(Cx::default(), |s, (k, v)| s + *v * Cx::cis_pi(2 * j * k as u64, n)))
        .collect()
}

/// numpy.fft.irfft's definition, unscaled, from the first `n / 2 + 1` values of `spec` (zeros
/// past its end).
fn irdft(spec: &[Cx<f64>], n: usize) -> Vec<f64> {
    let h = n / 2 + 1;
    let at = |k: usize| spec.get(k).copied().unwrap_or_default();
    (0..n)
        .map(|j| {
            let mut s = at(0).re;
            for k in 1..h {
                let w = Cx::cis_pi(2 * (j * k) as u64, n as u64);
                s += if 2 * k == n { at(k).re * w.re } else { 2.0 * (at(k) * w).re };
            }
            s
        })
        .collect()
}

fn max_abs(v: impl IntoIterator<Item = f64>) -> f64 {
    v.into_iter().fold(0.0, |m, x| m.max(x.abs()))
}

#[test]
fn radices_and_smooth_lengths() {
    assert_eq!([8, 6, 9, 25, 49, 11].map(radix_of), [Some(4), Some(2), Some(3), Some(5), Some(7), None]);
    assert!(smooth(1) && smooth(2 * 3 * 5 * 7 * 64) && smooth(343));
    assert!(!smooth(11) && !smooth(97) && !smooth(2 * 13));
}

#[test]
fn complex_transforms_match_the_direct_sum() {
    let lengths: Vec<usize> = (1..=40).chain([49, 64, 97, 100, 121, 128, 210, 243, 256, 343, 509, 1009]).collect();
    for n in lengths {
        let x = cnoise(n, n as u64);
        let want = dft(&x);
        let plan = Fft::<f64>::new(n);
        let mut data = x.clone();
        let mut scratch = vec![Cx::default(); plan.scratch_len()];
        plan.process(&mut data, &mut scratch);
        let err = max_abs(data.iter().zip(&want).map(|(a, b)| (*a - *b).re.hypot((*a - *b).im)));
        assert!(err < 1e-12 * (n as f64), "n={n}: error {err}");
    }
}

#[test]
fn real_inverse_matches_the_definition() {
    for n in (1..=34usize).chain([63, 64, 97, 98, 125, 194, 1009, 2018]) {
        let h = n / 2 + 1;
        // The spectrum given longer than used, exactly as used, and shorter (zero-padded).
        for m in [h + 3, h, h.div_ceil(2)] {
            let spec = cnoise(m, (n * 31 + m) as u64);
            let want = irdft(&spec, n);
            let plan = Irfft::<f64>::new(n);
            let mut padded: Vec<Cx<f64>> = spec.iter().copied().take(h).collect();
            padded.resize(h, Cx::default());
            let mut out = vec![0.0; n];
            plan.run(&padded, 1.0, &mut out, &mut Work::new());
            let err = max_abs(out.iter().zip(&want).map(|(a, b)| a - b));
            assert!(err < 1e-12 * n as f64, "n={n} m={m}: error {err}");
        }
    }
}

#[test]
fn f32_rows_are_accurate() {
    // Error relative to the result's scale, against the f64 transform of the same spectrum.
    for n in [4096, 4097, 10007 * 2, 65536, 3 * 5 * 7 * 128] {
        let h = n / 2 + 1;
        let spec = cnoise(h, n as u64);
        let mut want = vec![0.0; n];
        Irfft::<f64>::new(n).run(&spec, 1.0, &mut want, &mut Work::new());
        let spec32: Vec<Cx<f32>> = spec.iter().map(|c| Cx::new(c.re as f32, c.im as f32)).collect();
        let mut got = vec![0f32; n];
        Irfft::<f32>::new(n).run(&spec32, 1.0, &mut got, &mut Work::new());
        let rms = (want.iter().map(|v| v * v).sum::<f64>() / n as f64).sqrt();
        let err = max_abs(got.iter().zip(&want).map(|(a, b)| *a as f64 - b));
        assert!(err < 2e-6 * rms * (n as f64).log2(), "n={n}: error {err} at rms {rms}");
    }
}

// ---- through `run` ---------------------------------------------------------------------------

fn op(axis: i64, n: Option<i64>, norm: &str, complex: bool) -> Op {
    let attrs = Attrs::new()
        .with("axis", Attr::Int(axis))
        .with("n", n.map_or(Attr::None, Attr::Int))
        .with("normalization", Attr::Str(norm.into()))
        .with("input_is_complex", Attr::Bool(complex));
    Op { kind: OpKind::Irfft, attrs }
}

fn buf<T: Copy>(dtype: DType, shape: &[usize], data: &[T]) -> Buffer {
    let b = Buffer::empty(dtype, &shape.iter().map(|&d| d as i64).collect::<Vec<_>>(), &Device::Cpu).unwrap();
    slice_mut::<T>("test", &b).unwrap().copy_from_slice(data);
    b
}

fn empty(dtype: DType, shape: &[usize]) -> Buffer {
    Buffer::empty(dtype, &shape.iter().map(|&d| d as i64).collect::<Vec<_>>(), &Device::Cpu).unwrap()
}

#[test]
fn run_transforms_a_middle_axis_of_a_complex_input() {
    // [2, m=5, 3, 2] complex along axis 1, n = 7 (truncates to 4 frequencies), ortho.
    let (outer, m, inner, n) = (2, 5, 3, 7);
    let data = noise(outer * m * inner * 2, 7);
    let x = buf(DType::Float64, &[outer, m, inner, 2], &data);
    let out = empty(DType::Float64, &[outer, n, inner]);
    run(&op(1, Some(n as i64), "ortho", true), &[x], std::slice::from_ref(&out)).unwrap();
    let got = slice::<f64>("test", &out).unwrap();
    for o in 0..outer {
        for i in 0..inner {
            let spec: Vec<Cx<f64>> = (0..m)
                .map(|k| {
                    let at = ((o * m + k) * inner + i) * 2;
                    Cx::new(data[at], data[at + 1])
                })
                .collect();
            let want = irdft(&spec, n);
            for j in 0..n {
                let g = got[(o * n + j) * inner + i];
                assert!((g - want[j] / (n as f64).sqrt()).abs() < 1e-12, "o={o} i={i} j={j}");
            }
        }
    }
}

#[test]
fn run_scales_and_rounds_narrow_dtypes() {
    // A real f32 row padded to n = 12 (backward), and the same row in bfloat16 (forward).
    let data: Vec<f32> = noise(4, 3).iter().map(|v| *v as f32).collect();
    let spec: Vec<Cx<f64>> = data.iter().map(|v| Cx::new(*v as f64, 0.0)).collect();
    let want = irdft(&spec, 12);
    let out = empty(DType::Float32, &[12]);
    run(&op(0, Some(12), "backward", false), &[buf(DType::Float32, &[4], &data)], std::slice::from_ref(&out)).unwrap();
    for (g, w) in slice::<f32>("test", &out).unwrap().iter().zip(&want) {
        assert!((*g as f64 - w / 12.0).abs() < 1e-6);
    }
    let bf: Vec<half::bf16> = data.iter().map(|v| half::bf16::from_f32(*v)).collect();
    let spec: Vec<Cx<f64>> = bf.iter().map(|v| Cx::new(v.to_f64(), 0.0)).collect();
    let want = irdft(&spec, 6);
    let out = empty(DType::BFloat16, &[6]);
    run(&op(-1, None, "forward", false), &[buf(DType::BFloat16, &[4], &bf)], std::slice::from_ref(&out)).unwrap();
    for (g, w) in slice::<half::bf16>("test", &out).unwrap().iter().zip(&want) {
        assert_eq!(*g, half::bf16::from_f32(*w as f32), "want {w}");
    }
}

#[test]
fn run_rejects_what_the_graph_would() {
    let x = buf(DType::Float32, &[4], &[0f32; 4]);
    let bad_out = empty(DType::Float32, &[5]);
    let e = run(&op(0, None, "backward", false), std::slice::from_ref(&x), &[bad_out]).unwrap_err().to_string();
    assert!(e.contains("irfft: the result is float32 [5], expected float32 [6]"), "{e}");
    let e = run(&op(0, None, "backward", true), std::slice::from_ref(&x), &[empty(DType::Float32, &[6])])
        .unwrap_err()
        .to_string();
    assert!(e.contains("irfft: input_tensor: a complex input must be [..., 2]"), "{e}");
    let ints = buf(DType::Int32, &[4], &[0i32; 4]);
    let e = run(&op(0, None, "backward", false), &[ints], &[empty(DType::Int32, &[6])]).unwrap_err().to_string();
    assert!(e.contains("must be float32, float64, float16 or bfloat16"), "{e}");
    let e = run(&op(0, Some(0), "backward", false), &[x], &[empty(DType::Float32, &[6])]).unwrap_err().to_string();
    assert!(e.contains("n: the output length must be positive"), "{e}");
}
