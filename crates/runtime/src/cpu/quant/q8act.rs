//! Activation rows quantized to 8 bits for the integer qmatmul kernels: each block of `block`
//! values (32 for Q4_0/Q4_1/Q8_0, 256 for the K-quants) gets one f32 scale `d = max|x| / 127`
//! and values `q = round_ties_even(x * 127 / max|x|)` in -127..=127, so `|x - d*q| <= d/2`;
//! the integer sums of q over every `sub` values (32, or 16 for Q6_K) ride along for the
//! kernels' offset and min terms. A block holding a NaN or an infinity gets a NaN scale, so the
//! dot products it enters are NaN; a block whose largest magnitude is below 2^-100 (where
//! 127 / max|x| could overflow) quantizes to zeros.

use rayon::prelude::*;

/// `rows` quantized rows of `k` values.
pub struct QAct {
    pub k: usize,
    pub block: usize,
    pub sub: usize,
    /// `[rows, k]`.
    pub qs: Vec<i8>,
    /// `[rows, k / block]` scales.
    pub d: Vec<f32>,
    /// `[rows, k / sub]` sums of `qs`.
    pub sums: Vec<i32>,
}

impl QAct {
    /// Quantizes the `rows` rows of `a` (`[rows, k]`); `k` must be a multiple of `block`, and
    /// `block` of `sub`.
    pub fn new(a: &[f32], rows: usize, k: usize, block: usize, sub: usize) -> QAct {
        debug_assert!(k % block == 0 && block % sub == 0 && a.len() == rows * k);
        let mut q = QAct {
            k,
            block,
            sub,
            qs: vec![0; rows * k],
            d: vec![0.0; rows * (k / block)],
            sums: vec![0; rows * (k / sub)],
        };
        let (nb, ns) = (k / block, k / sub);
        if rows * k < 1 << 16 || rows == 1 {
            for r in 0..rows {
                let (qs, d, s) =
                    (&mut q.qs[r * k..(r + 1) * k], &mut q.d[r * nb..(r + 1) * nb], &mut q.sums[r * ns..(r + 1) * ns]);
                quantize_row(&a[r * k..(r + 1) * k], block, sub, qs, d, s);
            }
        } else {
            q.qs.par_chunks_mut(k)
                .zip(q.d.par_chunks_mut(nb))
                .zip(q.sums.par_chunks_mut(ns))
                .zip(a.par_chunks(k))
                .for_each(|(((qs, d), s), x)| quantize_row(x, block, sub, qs, d, s));
        }
        q
    }

    pub fn qs_row(&self, r: usize) -> &[i8] {
        &self.qs[r * self.k..(r + 1) * self.k]
    }

    pub fn d_row(&self, r: usize) -> &[f32] {
        let nb = self.k / self.block;
        &self.d[r * nb..(r + 1) * nb]
    }

    pub fn sums_row(&self, r: usize) -> &[i32] {
        let ns = self.k / self.sub;
        &self.sums[r * ns..(r + 1) * ns]
    }
}

/// 2^-100: below it a block quantizes to zeros.
const TINY: f32 = 7.888_609e-31;

/// One row: `x` of `k` values into `qs`, its block scales `d` and sub-block sums `sums`,
/// compiled for AVX-512 or AVX2 where the CPU has them (the same results: no fused operations).
fn quantize_row(x: &[f32], block: usize, sub: usize, qs: &mut [i8], d: &mut [f32], sums: &mut [i32]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq")]
        fn avx512(x: &[f32], block: usize, sub: usize, qs: &mut [i8], d: &mut [f32], sums: &mut [i32]) {
            body(x, block, sub, qs, d, sums)
        }
        #[target_feature(enable = "avx2")]
        fn avx2(x: &[f32], block: usize, sub: usize, qs: &mut [i8], d: &mut [f32], sums: &mut [i32]) {
            body(x, block, sub, qs, d, sums)
        }
        if has!("avx512f") && has!("avx512bw") && has!("avx512vl") && has!("avx512dq") {
            // SAFETY: the CPU has these extensions.
            return unsafe { avx512(x, block, sub, qs, d, sums) };
        }
        if has!("avx2") {
            // SAFETY: the CPU has AVX2.
            return unsafe { avx2(x, block, sub, qs, d, sums) };
        }
    }
    body(x, block, sub, qs, d, sums)
}

/// Written so that it vectorises: the largest magnitude as the largest of the bit patterns
/// without sign (which order as the magnitudes do, infinities and NaNs above all finite ones),
/// and the clamped product cast without a saturating conversion.
#[inline(always)]
fn body(x: &[f32], block: usize, sub: usize, qs: &mut [i8], d: &mut [f32], sums: &mut [i32]) {
    for ((xb, qb), db) in x.chunks_exact(block).zip(qs.chunks_exact_mut(block)).zip(d.iter_mut()) {
        let bits = xb.iter().fold(0u32, |m, v| m.max(v.to_bits() & 0x7FFF_FFFF));
        let amax = f32::from_bits(bits);
        let (finite, tiny) = (bits < 0x7F80_0000, amax < TINY);
        let id = if tiny || !finite { 0.0 } else { 127.0 / amax };
        *db = if !finite {
            f32::NAN
        } else if tiny {
            0.0
        } else {
            amax / 127.0
        };
        for (q, &v) in qb.iter_mut().zip(xb) {
            // |v * id| <= 127 up to a rounding of 127 itself; max/min also turn NaN (v infinite
            // or NaN times 0) into -127, in a block whose scale is NaN anyway.
            let t = (v * id).round_ties_even().max(-127.0).min(127.0);
            // SAFETY: t is an integer in -127..=127.
            *q = unsafe { t.to_int_unchecked::<i32>() } as i8;
        }
    }
    for (s, qb) in sums.iter_mut().zip(qs.chunks_exact(sub)) {
        *s = qb.iter().map(|&q| q as i32).sum();
    }
}
