//! A complex number over the real working types (f32, f64): just the arithmetic the FFT needs.

use std::ops::{Add, Mul, Sub};

use crate::cpu::reduction::work::Float;

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Cx<F> {
    pub re: F,
    pub im: F,
}

impl<F: Float> Cx<F> {
    #[inline]
    pub fn new(re: F, im: F) -> Cx<F> {
        Cx { re, im }
    }

    /// `e^(i * pi * t)` for a turn `t` given exactly as `num / den` (`num` may be any size; it
    /// is reduced modulo `2 * den` first, so the angle handed to sin/cos stays small).
    pub fn cis_pi(num: u64, den: u64) -> Cx<F> {
        let r = (num % (2 * den)) as f64 / den as f64;
        let (s, c) = (std::f64::consts::PI * r).sin_cos();
        Cx::new(F::from_f64(c), F::from_f64(s))
    }

    #[inline]
    pub fn conj(self) -> Cx<F> {
        Cx::new(self.re, -self.im)
    }

    /// `self * i`.
    #[inline]
    pub fn times_i(self) -> Cx<F> {
        Cx::new(-self.im, self.re)
    }

    #[inline]
    pub fn scale(self, s: F) -> Cx<F> {
        Cx::new(self.re * s, self.im * s)
    }
}

impl<F: Float> Add for Cx<F> {
    type Output = Cx<F>;
    #[inline]
    fn add(self, o: Cx<F>) -> Cx<F> {
        Cx::new(self.re + o.re, self.im + o.im)
    }
}

impl<F: Float> Sub for Cx<F> {
    type Output = Cx<F>;
    #[inline]
    fn sub(self, o: Cx<F>) -> Cx<F> {
        Cx::new(self.re - o.re, self.im - o.im)
    }
}

impl<F: Float> Mul for Cx<F> {
    type Output = Cx<F>;
    #[inline]
    fn mul(self, o: Cx<F>) -> Cx<F> {
        Cx::new(self.re * o.re - self.im * o.im, self.re * o.im + self.im * o.re)
    }
}
