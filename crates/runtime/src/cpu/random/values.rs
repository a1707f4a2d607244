//! The values of a random op's Philox blocks: the recipe, to the bit, that the host
//! (here), the device (kernels/random.cu) and a numpy reimplementation (tests/test_random.py)
//! follow. With `seed` the seed tensor's 64 bits, `stream` the op's attribute and the
//! [`Recipe`] of its parameters (crates/graph/src/ops/random.rs):
//!
//! 1. Block `j` is `philox4x32_10(counter = (j, j >> 32, stream, stream >> 32) as u32 words,
//!    key = (seed, seed >> 32) as u32 words)`, four words w0..w3 (philox.rs).
//! 2. float32, float16, bfloat16 and the float8 types (arithmetic in f32): block `j` gives
//!    elements 4j..4j+3.
//!    - uniform: element 4j + l has `u = (w_l >> 8) * 2^-24` (exact, in [0, 1)) and value
//!      `offset + scale * u`, one f32 product and one f32 sum rounded to nearest-even (never
//!      fused), clamped to `[min, max]`, then rounded to the dtype (nearest-even). Bit-exact on
//!      every device.
//!    - normal (Box-Muller): the pair (w0, w1) gives elements 4j and 4j+1, (w2, w3) elements
//!      4j+2 and 4j+3: `u1 = ((w_even >> 8) + 1) * 2^-24` in (0, 1], `u2 = (w_odd >> 8) * 2^-24`
//!      in [0, 1), `r = sqrt(-2 ln u1)`, `z = r cos(2 pi u2)` for the first element and
//!      `r sin(2 pi u2)` for the second, z rounded to f32, then `offset + scale * z` as above
//!      (no clamp). z is within a few ulps of the exact value on each device (the host
//!      evaluates it in f64, CUDA with logf, sqrtf and sincospif), so normal values agree
//!      across devices to a few ulps, not to the bit.
//! 3. float64 (arithmetic in f64): block `j` gives elements 2j and 2j+1 from 53-bit integers
//!    `m0 = (w0 << 21) | (w1 >> 11)` and `m1 = (w2 << 21) | (w3 >> 11)`.
//!    - uniform: element 2j + l has `u = m_l * 2^-53`, then as in 2 in f64.
//!    - normal: `u1 = (m0 + 1) * 2^-53`, `u2 = m1 * 2^-53`; element 2j takes `r cos(2 pi u2)`,
//!      element 2j+1 `r sin(2 pi u2)`, then `offset + scale * z` in f64.
//!
//! Every element's value depends on its index only through its block and lane, so any split of
//! the work gives the same tensor.

use max_graph::ops::random::Recipe;

use super::philox;

const TWO_POW_M24: f32 = 1.0 / 16_777_216.0;
const TWO_POW_M53: f64 = 1.0 / 9_007_199_254_740_992.0;

/// Uniform in [0, 1) from a word's top 24 bits.
#[inline]
pub fn unit24(w: u32) -> f32 {
    (w >> 8) as f32 * TWO_POW_M24
}

/// The 53-bit integer of two words (the first word's 32 bits above the second's top 21).
#[inline]
pub fn bits53(hi: u32, lo: u32) -> u64 {
    ((hi as u64) << 21) | (lo >> 11) as u64
}

/// (sin(pi x), cos(pi x)) for x in [0, 2]. x is reduced exactly to r in [-1/4, 1/4] around a
/// multiple of 1/2, so only the rounding of pi * r and the library's sin and cos of it (each
/// within an ulp) enter: the result is within a few ulps even where the value is near zero.
pub fn sincospi(x: f64) -> (f64, f64) {
    let n = (2.0 * x).round();
    let r = x - 0.5 * n; // exact (Sterbenz)
    let (s, c) = (std::f64::consts::PI * r).sin_cos();
    match n as i64 & 3 {
        0 => (s, c),
        1 => (c, -s),
        2 => (-s, -c),
        _ => (-c, s),
    }
}

/// The standard normal pair of Box-Muller from u1 in (0, 1] and u2 in [0, 1), in f64.
#[inline]
fn box_muller(u1: f64, u2: f64) -> (f64, f64) {
    let r = (-2.0 * u1.ln()).sqrt();
    let (s, c) = sincospi(2.0 * u2);
    (r * c, r * s)
}

/// The four f32 values of block `j` (before rounding to the output dtype).
#[inline]
pub fn narrow_block(r: &Recipe, seed: u64, stream: u64, j: u64) -> [f32; 4] {
    let w = philox::block(seed, stream, j);
    let (offset, scale) = (r.offset as f32, r.scale as f32);
    if r.normal {
        let mut v = [0f32; 4];
        for p in 0..2 {
            let u1 = ((w[2 * p] >> 8) + 1) as f32 * TWO_POW_M24;
            let (a, b) = box_muller(u1 as f64, unit24(w[2 * p + 1]) as f64);
            v[2 * p] = offset + scale * a as f32;
            v[2 * p + 1] = offset + scale * b as f32;
        }
        v
    } else {
        let (lo, hi) = (r.min as f32, r.max as f32);
        w.map(|wl| (offset + scale * unit24(wl)).max(lo).min(hi))
    }
}

/// The two f64 values of block `j`.
#[inline]
pub fn wide_block(r: &Recipe, seed: u64, stream: u64, j: u64) -> [f64; 2] {
    let w = philox::block(seed, stream, j);
    let (m0, m1) = (bits53(w[0], w[1]), bits53(w[2], w[3]));
    if r.normal {
        let (a, b) = box_muller((m0 + 1) as f64 * TWO_POW_M53, m1 as f64 * TWO_POW_M53);
        [r.offset + r.scale * a, r.offset + r.scale * b]
    } else {
        [m0, m1].map(|m| (r.offset + r.scale * (m as f64 * TWO_POW_M53)).max(r.min).min(r.max))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sincospi_is_accurate_at_every_quadrant() {
        for i in 0..=4096 {
            let x = i as f64 / 2048.0;
            let (s, c) = sincospi(x);
            // Exact values at the multiples of 1/2.
            match i % 1024 {
                0 => {
                    let k = i / 1024;
                    let (ws, wc) = [(0.0, 1.0), (1.0, 0.0), (0.0, -1.0), (-1.0, 0.0)][k % 4];
                    assert_eq!((s.abs(), c.abs()), (f64::abs(ws), f64::abs(wc)), "{x}");
                    assert!(s * ws >= 0.0 && c * wc >= 0.0, "{x}: {s} {c}");
                }
                _ => {
                    let (ws, wc) = (std::f64::consts::PI * x).sin_cos();
                    assert!((s - ws).abs() < 1e-15 && (c - wc).abs() < 1e-15, "{x}");
                }
            }
        }
        // Near a zero of sin the reduction keeps the relative accuracy.
        let x = 1.0 - 2f64.powi(-40);
        let (s, _) = sincospi(x);
        let want = std::f64::consts::PI * 2f64.powi(-40);
        assert!(((s - want) / want).abs() < 1e-15, "{s} {want}");
    }

    #[test]
    fn the_unit_values_cover_their_ranges() {
        assert_eq!(unit24(0), 0.0);
        assert_eq!(unit24(u32::MAX), 1.0 - TWO_POW_M24);
        assert_eq!(unit24(0x0000_00ff), 0.0);
        assert_eq!(bits53(u32::MAX, u32::MAX), (1 << 53) - 1);
        assert_eq!(bits53(1, 1 << 11), (1 << 21) | 1);
    }
}
