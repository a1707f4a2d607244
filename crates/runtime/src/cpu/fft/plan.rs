//! Complex inverse DFTs of any length, `y[j] = sum_k x[k] e^(+2 pi i j k / N)` (unscaled), in
//! O(N log N):
//!
//! - lengths whose prime factors are 2, 3, 5 and 7: a Stockham autosort FFT, one pass per
//!   factor (radix 4 while 4 divides what is left, then 2, 3, 5, 7), ping-ponging between the
//!   data and a scratch buffer, so no bit-reversal pass is needed;
//! - every other length: Bluestein's chirp-z algorithm, which writes the DFT as a convolution
//!   with the chirp `c[k] = e^(+i pi k^2 / N)` and does the convolution with power-of-two FFTs
//!   of length `L >= 2N - 1`.
//!
//! Twiddles and chirps are computed in f64 from exact integer angles and rounded once to the
//! working type, so f32 transforms are as accurate as f32 arithmetic allows. kernels/fft.cu
//! does the same steps in the same order.

use super::complex::Cx;
use crate::cpu::reduction::work::Float;

/// The radix of the next Stockham pass when `rem` points are left to combine, None when `rem`
/// has a prime factor above 7.
pub fn radix_of(rem: usize) -> Option<usize> {
    [4, 2, 3, 5, 7].into_iter().find(|r| rem.is_multiple_of(*r))
}

/// Whether a length is a product of 2, 3, 5 and 7 (the Stockham passes take it directly).
pub fn smooth(mut n: usize) -> bool {
    while n > 1 {
        match radix_of(n) {
            Some(r) => n /= r,
            None => return false,
        }
    }
    true
}

/// One Stockham pass: `radix`-point DFTs over inputs `n / radix` apart, `span` the product of
/// the earlier radices; `twiddles[k * (radix - 1) + r - 1]` is `e^(2 pi i k r / (span * radix))`.
struct Pass<F> {
    radix: usize,
    span: usize,
    twiddles: Vec<Cx<F>>,
}

enum Kind<F> {
    Stockham(Vec<Pass<F>>),
    Bluestein {
        /// `c[k] = e^(i pi k^2 / n)` for `k < n`.
        chirp: Vec<Cx<F>>,
        /// The DFT of the conjugate chirp laid out circularly over `l` points, divided by `l`.
        kernel: Vec<Cx<F>>,
        inner: Box<Fft<F>>,
    },
}

/// A planned inverse DFT of one length; `process` may run from many threads at once.
pub struct Fft<F> {
    n: usize,
    kind: Kind<F>,
    /// The `radix`-th roots of unity `e^(2 pi i q / radix)` for radix 3, 5 and 7, by radix.
    roots: [Vec<Cx<F>>; 3],
}

fn roots<F: Float>(r: usize) -> Vec<Cx<F>> {
    (0..r as u64).map(|q| Cx::cis_pi(2 * q, r as u64)).collect()
}

impl<F: Float> Fft<F> {
    pub fn new(n: usize) -> Fft<F> {
        let roots = [roots(3), roots(5), roots(7)];
        if smooth(n) {
            return Fft { n, kind: Kind::Stockham(passes(n)), roots };
        }
        let l = (2 * n - 1).next_power_of_two();
        let chirp: Vec<Cx<F>> = (0..n as u64).map(|k| Cx::cis_pi(k * k, n as u64)).collect();
        let mut b = vec![Cx::default(); l];
        for (d, c) in chirp.iter().enumerate() {
            b[d] = c.conj();
            if d > 0 {
                b[l - d] = c.conj();
            }
        }
        let inner = Box::new(Fft::new(l));
        let mut scratch = vec![Cx::default(); l];
        inner.forward(&mut b, &mut scratch);
        let inv_l = F::from_f64(1.0 / l as f64);
        let kernel = b.iter().map(|v| v.scale(inv_l)).collect();
        Fft { n, kind: Kind::Bluestein { chirp, kernel, inner }, roots }
    }

    pub fn len(&self) -> usize {
        self.n
    }

    /// Scratch elements `process` needs beside the data.
    pub fn scratch_len(&self) -> usize {
        match &self.kind {
            Kind::Stockham(_) => self.n,
            Kind::Bluestein { inner, .. } => 2 * inner.n,
        }
    }

    /// The inverse DFT of `data[..n]`, in place; `scratch` holds at least `scratch_len()`.
    pub fn process(&self, data: &mut [Cx<F>], scratch: &mut [Cx<F>]) {
        let n = self.n;
        match &self.kind {
            Kind::Stockham(passes) => {
                let (mut src, mut dst) = (&mut data[..n], &mut scratch[..n]);
                for p in passes {
                    self.pass(p, src, dst);
                    std::mem::swap(&mut src, &mut dst);
                }
                if passes.len() % 2 == 1 {
                    data[..n].copy_from_slice(&scratch[..n]);
                }
            }
            Kind::Bluestein { chirp, kernel, inner } => {
                let l = inner.n;
                let (a, rest) = scratch.split_at_mut(l);
                for (k, v) in a.iter_mut().enumerate() {
                    *v = if k < n { data[k] * chirp[k] } else { Cx::default() };
                }
                inner.forward(a, rest);
                for (v, w) in a.iter_mut().zip(kernel) {
                    *v = *v * *w;
                }
                inner.process(a, rest);
                for (j, y) in data[..n].iter_mut().enumerate() {
                    *y = a[j] * chirp[j];
                }
            }
        }
    }

    /// The forward DFT (`e^(-2 pi i jk / N)`) as the conjugate of the inverse of the conjugate.
    fn forward(&self, data: &mut [Cx<F>], scratch: &mut [Cx<F>]) {
        data.iter_mut().for_each(|v| *v = v.conj());
        self.process(data, scratch);
        data.iter_mut().for_each(|v| *v = v.conj());
    }

    fn pass(&self, p: &Pass<F>, src: &[Cx<F>], dst: &mut [Cx<F>]) {
        let (r, span) = (p.radix, p.span);
        let stride = self.n / r;
        let mut v = [Cx::default(); 7];
        for j in 0..stride {
            let k = j % span;
            let tw = &p.twiddles[k * (r - 1)..(k + 1) * (r - 1)];
            v[0] = src[j];
            for q in 1..r {
                v[q] = src[j + q * stride] * tw[q - 1];
            }
            self.butterfly(&mut v[..r]);
            let base = (j - k) * r + k;
            for (q, x) in v[..r].iter().enumerate() {
                dst[base + q * span] = *x;
            }
        }
    }

    /// The `v.len()`-point inverse DFT of `v`, in place.
    #[inline]
    fn butterfly(&self, v: &mut [Cx<F>]) {
        match v.len() {
            2 => {
                let (a, b) = (v[0], v[1]);
                v[0] = a + b;
                v[1] = a - b;
            }
            4 => {
                let (t0, t1) = (v[0] + v[2], v[0] - v[2]);
                let (t2, t3) = (v[1] + v[3], (v[1] - v[3]).times_i());
                v[0] = t0 + t2;
                v[1] = t1 + t3;
                v[2] = t0 - t2;
                v[3] = t1 - t3;
            }
            r => {
                let w = &self.roots[match r {
                    3 => 0,
                    5 => 1,
                    _ => 2,
                }];
                let mut out = [Cx::default(); 7];
                for (q, o) in out[..r].iter_mut().enumerate() {
                    let mut s = v[0];
                    for (t, x) in v.iter().enumerate().skip(1) {
                        s = s + *x * w[(t * q) % r];
                    }
                    *o = s;
                }
                v.copy_from_slice(&out[..r]);
            }
        }
    }
}

fn passes<F: Float>(n: usize) -> Vec<Pass<F>> {
    let mut passes = Vec::new();
    let mut span = 1;
    while span < n {
        let Some(r) = radix_of(n / span) else { break };
        let den = (span * r) as u64;
        let twiddles = (0..span as u64).flat_map(|k| (1..r as u64).map(move |q| Cx::cis_pi(2 * k * q, den))).collect();
        passes.push(Pass { radix: r, span, twiddles });
        span *= r;
    }
    passes
}
