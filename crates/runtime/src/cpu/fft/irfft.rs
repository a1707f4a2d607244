//! The inverse real DFT of one row, from its `n / 2 + 1` non-negative frequencies `X` to `n`
//! real samples, `x[j] = X_0 + 2 Re sum_{0<k<n/2} X_k w^{jk} (+ X_{n/2} (-1)^j for even n)` with
//! `w = e^(2 pi i / n)`: numpy.fft.irfft, whose Hermitian extension ignores the imaginary parts
//! of `X_0` and (for even `n`) `X_{n/2}`.
//!
//! Even `n = 2M` takes one complex transform of length M: with `Y_k = X_k + conj(X_{M-k})` (the
//! spectrum of the even samples) and `Z_k = (X_k - conj(X_{M-k})) w^k` (of the odd ones), the
//! inverse DFT of `Y + iZ` holds `x[2t]` in its real parts and `x[2t+1]` in its imaginary
//! parts. Odd `n` takes the inverse DFT of the whole Hermitian spectrum (length n) and keeps
//! its real parts.

use super::complex::Cx;
use super::plan::Fft;
use crate::cpu::reduction::work::Float;

pub struct Irfft<F> {
    n: usize,
    fft: Fft<F>,
    /// `w^k` for `k < n / 2` (even n only).
    twiddles: Vec<Cx<F>>,
}

/// Per-thread buffers of [`Irfft::run`].
pub struct Work<F> {
    data: Vec<Cx<F>>,
    scratch: Vec<Cx<F>>,
}

impl<F: Float> Work<F> {
    pub fn new() -> Work<F> {
        Work { data: Vec::new(), scratch: Vec::new() }
    }
}

impl<F: Float> Irfft<F> {
    /// The transform to `n >= 1` samples.
    pub fn new(n: usize) -> Irfft<F> {
        let even = n.is_multiple_of(2);
        let len = if even { n / 2 } else { n };
        let twiddles = if even { (0..len as u64).map(|k| Cx::cis_pi(2 * k, n as u64)).collect() } else { Vec::new() };
        Irfft { n, fft: Fft::new(len), twiddles }
    }

    /// `out[..n]` = the samples of `spec` (exactly `n / 2 + 1` frequencies), times `scale`.
    pub fn run(&self, spec: &[Cx<F>], scale: F, out: &mut [F], work: &mut Work<F>) {
        let n = self.n;
        let len = self.fft.len();
        assert!(spec.len() == n / 2 + 1 && out.len() >= n);
        work.data.resize(len, Cx::default());
        work.scratch.resize(self.fft.scratch_len(), Cx::default());
        let zero = F::from_f64(0.0);
        // The frequencies the Hermitian extension reads as real.
        let x = |k: usize| if k == 0 || 2 * k == n { Cx::new(spec[k].re, zero) } else { spec[k] };
        let data = &mut work.data;
        if n.is_multiple_of(2) {
            for (k, d) in data.iter_mut().enumerate() {
                let (a, b) = (x(k), x(len - k).conj());
                *d = (a + b) + ((a - b) * self.twiddles[k]).times_i();
            }
        } else {
            let h = spec.len();
            for (k, d) in data.iter_mut().enumerate() {
                *d = if k < h { x(k) } else { x(n - k).conj() };
            }
        }
        self.fft.process(data, &mut work.scratch);
        if n.is_multiple_of(2) {
            for (t, z) in data.iter().enumerate() {
                out[2 * t] = z.re * scale;
                out[2 * t + 1] = z.im * scale;
            }
        } else {
            for (o, z) in out[..n].iter_mut().zip(data.iter()) {
                *o = z.re * scale;
            }
        }
    }
}
