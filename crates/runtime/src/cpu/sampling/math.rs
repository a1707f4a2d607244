//! The arithmetic of sample_tokens, fixed to the bit so that the host, the device
//! (kernels/sampling_math.cuh mirrors every function here, operation for operation) and a numpy
//! reimplementation (tests/test_sampling_ops.py) compute the same values:
//!
//! - every float operation is one IEEE-754 f32 operation rounded to nearest-even (`+ - * /`,
//!   `floor`, conversions), in the order written: no fused multiply-adds (the CUDA twins use
//!   the `__f*_rn` intrinsics, which are never contracted) and no library `exp` or `log`,
//!   whose last bit differs between implementations; `ln` and `exp_neg` below are our own,
//!   within 2 ulp of the exact values;
//! - the top-p mass is summed in 40-bit fixed point (`weight`), exactly, in any order;
//! - thresholds are compared as order-preserving integer keys of the values.
//!
//! With these, a row's kept set and Gumbel scores do not depend on where or in which order they
//! are computed, and host and device pick the same token for the same inputs, always.

/// Bits of the f32 constants (written as bits so that every language reads the same value).
const SQRT2: u32 = 0x3fb5_04f3; // 1.4142135
const LN2_HI: u32 = 0x3f31_7200; // 0.693145751953125: 15 significant bits, so k * LN2_HI is exact
const LN2_LO: u32 = 0x35bf_be8e; // ln 2 - LN2_HI = 1.4286068e-6
const INV_LN2: u32 = 0x3fb8_aa3b; // 1 / ln 2
/// 2 / (2j + 1) for j = 1..=5: ln(m) = 2 atanh(s) = 2s + s * (2/3 s^2 + 2/5 s^4 + ...).
const LN_C: [u32; 5] = [0x3f2a_aaab, 0x3ecc_cccd, 0x3e92_4925, 0x3e63_8e39, 0x3e3a_2e8c];
/// 1 / j! for j = 2..=7 (the Taylor series of exp on |r| <= ln(2) / 2).
const EXP_C: [u32; 6] = [0x3f00_0000, 0x3e2a_aaab, 0x3d2a_aaab, 0x3c08_8889, 0x3ab6_0b61, 0x3950_0d01];
/// The largest f32 below 1.
const BELOW_ONE: u32 = 0x3f7f_ffff;

/// The top-p weights' fixed point: `exp(z - max)` in units of 2^-40.
pub const WEIGHT_BITS: i32 = 40;
/// The golden-ratio increment of splitmix64, also the per-index stride of the hash input.
pub const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

#[inline]
fn f(bits: u32) -> f32 {
    f32::from_bits(bits)
}

/// The value as thresholds see it: NaN is -inf, -0 is +0 (so that equal values have equal keys).
#[inline]
pub fn canon(v: f32) -> f32 {
    if v.is_nan() {
        f32::NEG_INFINITY
    } else if v == 0.0 {
        0.0
    } else {
        v
    }
}

/// An order-preserving key of a canonical value: `a < b` exactly when `key(a) < key(b)`.
#[inline]
pub fn key(v: f32) -> u32 {
    let b = v.to_bits();
    if b >> 31 != 0 { !b } else { b | 0x8000_0000 }
}

/// The natural logarithm: x = 2^e * m with m in (sqrt(1/2), sqrt(2)], ln(m) = 2 atanh(s) with
/// s = (m - 1) / (m + 1), |s| <= 0.1716, by its series to s^11; then e * ln 2 in two parts.
/// NaN and negative give NaN, 0 gives -inf, +inf gives +inf.
pub fn ln(x: f32) -> f32 {
    if x.is_nan() || x < 0.0 {
        return f32::NAN;
    }
    if x == 0.0 {
        return f32::NEG_INFINITY;
    }
    if x == f32::INFINITY {
        return x;
    }
    let (mut x, mut e) = (x, 0i32);
    if x < f32::MIN_POSITIVE {
        x *= 16_777_216.0; // 2^24: subnormals become normal, exactly
        e = -24;
    }
    let bits = x.to_bits();
    e += (bits >> 23) as i32 - 127;
    let mut m = f((bits & 0x007f_ffff) | 0x3f80_0000);
    if m > f(SQRT2) {
        m *= 0.5;
        e += 1;
    }
    let fm = m - 1.0; // exact: m is in [1/2, 2]
    let s = fm / (m + 1.0);
    let s2 = s * s;
    let c = LN_C.map(f);
    let p = s2 * (c[0] + s2 * (c[1] + s2 * (c[2] + s2 * (c[3] + s2 * c[4]))));
    let ln_m = (s + s) + s * p;
    let ef = e as f32;
    ef * f(LN2_HI) + (ef * f(LN2_LO) + ln_m)
}

/// e^d for d <= 0 (0 below -32, where it is under 2^-46 and every weight is 0, and for -inf):
/// d = k ln 2 + r with k = floor(d / ln 2 + 1/2), then 2^k times the Taylor series of e^r to r^7.
pub fn exp_neg(d: f32) -> f32 {
    if d.is_nan() || d < -32.0 {
        return 0.0;
    }
    let k = (d * f(INV_LN2) + 0.5).floor();
    let r = (d - k * f(LN2_HI)) - k * f(LN2_LO);
    let c = EXP_C.map(f);
    let p = 1.0 + r * (1.0 + r * (c[0] + r * (c[1] + r * (c[2] + r * (c[3] + r * (c[4] + r * c[5]))))));
    p * f(((k as i32 + 127) as u32) << 23)
}

/// The top-p weight of a value `d = z - max(z)` below the row's largest: `exp(d)` in units of
/// 2^-40, truncated (1 << 40 for the largest; 0 below about -27.7). Sums of a row's weights are
/// exact in u64 for rows of up to 2^24 values.
#[inline]
pub fn weight(d: f32) -> u64 {
    (exp_neg(d) * (1u64 << WEIGHT_BITS) as f32) as u64
}

/// splitmix64's output for the state `x`: the state advanced by GOLDEN, then mixed.
#[inline]
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(GOLDEN);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Above every value of [`gumbel`] (at most 16.64): a value z with `z + GUMBEL_BOUND` below
/// another value's z + g cannot win a draw, and its own noise need not be computed.
pub const GUMBEL_BOUND: f32 = 17.0;

/// The Gumbel noise of index `i` of a row with seed `seed`: `-ln(-ln(u))` with u uniform in
/// (0, 1) from the top 24 bits of `splitmix64(seed ^ ((i + 1) * GOLDEN))`:
/// `u = (j + 1/2) * 2^-24` rounded to f32 (j = h >> 40), and the one u that rounds to 1 taken
/// as the largest f32 below 1. g is in [-2.86, 16.64].
#[inline]
pub fn gumbel(seed: u64, i: u64) -> f32 {
    let h = splitmix64(seed ^ i.wrapping_add(1).wrapping_mul(GOLDEN));
    let j = (h >> 40) as f32; // exact: 24 bits
    let u = ((j + 0.5) * (1.0 / 16_777_216.0)).min(f(BELOW_ONE));
    -ln(-ln(u))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ulps(a: f32, want: f64) -> f64 {
        let w = want as f32;
        let ulp = (f32::from_bits(w.abs().to_bits() + 1) - w.abs()) as f64;
        (a as f64 - want).abs() / ulp
    }

    #[test]
    fn ln_is_within_two_ulp() {
        let mut s = 1u64;
        let mut worst = 0f64;
        for _ in 0..200_000 {
            s = splitmix64(s);
            // Positive floats of every exponent, subnormals too.
            let x = f32::from_bits(((s >> 33) as u32) % 0x7f80_0000 + 1);
            worst = worst.max(ulps(ln(x), (x as f64).ln()));
        }
        for x in [1.0f32, 0.5, 2.0, f32::MIN_POSITIVE, 1e-45, f32::MAX, 0.99999994, 1.0000001] {
            worst = worst.max(ulps(ln(x), (x as f64).ln()));
        }
        assert!(worst <= 2.0, "{worst} ulp");
        assert_eq!(ln(1.0), 0.0);
        assert_eq!(ln(0.0), f32::NEG_INFINITY);
        assert_eq!(ln(f32::INFINITY), f32::INFINITY);
        assert!(ln(-1.0).is_nan() && ln(f32::NAN).is_nan());
    }

    #[test]
    fn exp_neg_is_within_two_ulp() {
        let mut worst = 0f64;
        for i in 0..=320_000 {
            let d = -(i as f32) * 1e-4;
            worst = worst.max(ulps(exp_neg(d), (d as f64).exp()));
        }
        assert!(worst <= 2.0, "{worst} ulp");
        assert_eq!(exp_neg(0.0), 1.0);
        assert_eq!(exp_neg(-32.5), 0.0);
        assert_eq!(exp_neg(f32::NEG_INFINITY), 0.0);
        assert_eq!(weight(0.0), 1 << 40);
        assert_eq!(weight(-28.0), 0);
    }

    #[test]
    fn keys_order_like_values() {
        let v = [f32::NEG_INFINITY, -3.5, -1e-40, 0.0, 1e-40, 2.0, f32::INFINITY];
        for w in v.windows(2) {
            assert!(key(w[0]) < key(w[1]), "{w:?}");
        }
        assert_eq!(key(canon(-0.0)), key(0.0));
        assert_eq!(canon(f32::NAN), f32::NEG_INFINITY);
    }

    #[test]
    fn gumbel_noise_is_finite_and_spread() {
        // The first outputs of splitmix64 from state 0, the published reference values.
        assert_eq!(splitmix64(0), 0xe220_a839_7b1d_cdaf);
        assert_eq!(splitmix64(GOLDEN), 0x6e78_9e6a_a1b9_65f4);
        let g: Vec<f32> = (0..100_000).map(|i| gumbel(7, i)).collect();
        assert!(g.iter().all(|v| v.is_finite() && *v > -2.9 && *v < 16.7));
        // The largest draw (u the largest f32 below 1) is under the bound.
        assert!(-ln(-ln(f(BELOW_ONE))) < 16.7 && 16.7 < GUMBEL_BOUND);
        // Gumbel(0, 1): mean is the Euler-Mascheroni constant, variance pi^2 / 6.
        let mean = g.iter().map(|&v| v as f64).sum::<f64>() / g.len() as f64;
        let var = g.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / g.len() as f64;
        assert!((mean - 0.5772).abs() < 0.02, "{mean}");
        assert!((var - 1.6449).abs() < 0.05, "{var}");
    }
}
