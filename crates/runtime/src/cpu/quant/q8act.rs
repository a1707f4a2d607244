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
    #[cfg_attr(not(test), allow(dead_code))] // the benchmark and tests quantize one plane
    pub fn new(a: &[f32], rows: usize, k: usize, block: usize, sub: usize) -> QAct {
        debug_assert!(k.is_multiple_of(block) && block.is_multiple_of(sub) && a.len() == rows * k);
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

    /// The rows of `a` in two 8-bit planes: row `2r` is row `r` quantized as `new` does, row
    /// `2r + 1` what that leaves over (`x - d * q`, at most `d / 2` per value) quantized the same
    /// way. Since a product is linear in its activations, the products of the two planes add up
    /// to that of the row within `max|x| / 64516` per value (the residual's half step), against
    /// `max|x| / 254` for one plane: 16-bit activations from the 8-bit kernels.
    pub fn two_planes(a: &[f32], rows: usize, k: usize, block: usize, sub: usize) -> QAct {
        debug_assert!(k.is_multiple_of(block) && block.is_multiple_of(sub) && a.len() == rows * k);
        let (nb, ns) = (k / block, k / sub);
        let mut q = QAct {
            k,
            block,
            sub,
            qs: vec![0; 2 * rows * k],
            d: vec![0.0; 2 * rows * nb],
            sums: vec![0; 2 * rows * ns],
        };
        let one = |(((qs, d), s), x): (((&mut [i8], &mut [f32]), &mut [i32]), &[f32])| {
            let (q0, q1) = qs.split_at_mut(k);
            let (d0, d1) = d.split_at_mut(nb);
            let (s0, s1) = s.split_at_mut(ns);
            quantize_row(x, block, sub, q0, d0, s0);
            let rest: Vec<f32> =
                x.iter().zip(q0.iter()).enumerate().map(|(i, (&v, &c))| v - d0[i / block] * c as f32).collect();
            quantize_row(&rest, block, sub, q1, d1, s1);
        };
        let chunks = q.qs.chunks_mut(2 * k).zip(q.d.chunks_mut(2 * nb)).zip(q.sums.chunks_mut(2 * ns)).zip(a.chunks(k));
        if rows * k < 1 << 16 || rows == 1 {
            chunks.for_each(one);
        } else {
            q.qs.par_chunks_mut(2 * k)
                .zip(q.d.par_chunks_mut(2 * nb))
                .zip(q.sums.par_chunks_mut(2 * ns))
                .zip(a.par_chunks(k))
                .for_each(one);
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

/// One row: `x` of `k` values into `qs`, its block scales `d` and sub-block sums `sums`: with
/// AVX-512 intrinsics, else compiled for AVX2 where the CPU has it (the same results: the same
/// f32 operations, no fused ones).
fn quantize_row(x: &[f32], block: usize, sub: usize, qs: &mut [i8], d: &mut [f32], sums: &mut [i32]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        #[target_feature(enable = "avx2")]
        fn avx2(x: &[f32], block: usize, sub: usize, qs: &mut [i8], d: &mut [f32], sums: &mut [i32]) {
            body(x, block, sub, qs, d, sums)
        }
        if has!("avx512f") && has!("avx512bw") && has!("avx512vl") && block.is_multiple_of(16) && sub.is_multiple_of(16)
        {
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
/// The block's scale and inverse scale from its largest magnitude's bits (see `body`).
#[inline(always)]
fn scales(bits: u32) -> (f32, f32) {
    let amax = f32::from_bits(bits);
    let (finite, tiny) = (bits < 0x7F80_0000, amax < TINY);
    let id = if tiny || !finite { 0.0 } else { 127.0 / amax };
    let d = if !finite {
        f32::NAN
    } else if tiny {
        0.0
    } else {
        amax / 127.0
    };
    (d, id)
}

/// `body` in AVX-512 intrinsics, 16 values at a time (`block` and `sub` multiples of 16): the
/// conversion rounds to nearest even as `round_ties_even`, and takes NaN to i32::MIN, which
/// the clamp turns into -127 as `body`'s `max` does.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
fn avx512(x: &[f32], block: usize, sub: usize, qs: &mut [i8], d: &mut [f32], sums: &mut [i32]) {
    use std::arch::x86_64::*;
    let (lo, hi) = (_mm512_set1_epi32(-127), _mm512_set1_epi32(127));
    for ((xb, qb), db) in x.chunks_exact(block).zip(qs.chunks_exact_mut(block)).zip(d.iter_mut()) {
        let mut m = _mm512_setzero_si512();
        for c in xb.chunks_exact(16) {
            // SAFETY: c holds 16 f32 values.
            let v = unsafe { _mm512_loadu_si512(c.as_ptr().cast()) };
            m = _mm512_max_epu32(m, _mm512_and_si512(v, _mm512_set1_epi32(0x7FFF_FFFF)));
        }
        let (scale, id) = scales(_mm512_reduce_max_epu32(m));
        *db = scale;
        let id = _mm512_set1_ps(id);
        for (c, q) in xb.chunks_exact(16).zip(qb.chunks_exact_mut(16)) {
            // SAFETY: c holds 16 f32 values.
            let t = _mm512_mul_ps(unsafe { _mm512_loadu_ps(c.as_ptr()) }, id);
            let i = _mm512_cvt_roundps_epi32::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(t);
            let i = _mm512_min_epi32(_mm512_max_epi32(i, lo), hi);
            // SAFETY: q holds 16 bytes.
            unsafe { _mm_storeu_si128(q.as_mut_ptr().cast(), _mm512_cvtepi32_epi8(i)) };
        }
    }
    for (s, qb) in sums.iter_mut().zip(qs.chunks_exact(sub)) {
        let mut acc = _mm512_setzero_si512();
        for c in qb.chunks_exact(16) {
            // SAFETY: c holds 16 bytes.
            acc = _mm512_add_epi32(acc, _mm512_cvtepi8_epi32(unsafe { _mm_loadu_si128(c.as_ptr().cast()) }));
        }
        *s = _mm512_reduce_add_epi32(acc);
    }
}

/// The portable `quantize_row`, for the tests to compare.
#[cfg(test)]
pub fn quantize_row_portable(x: &[f32], block: usize, sub: usize, qs: &mut [i8], d: &mut [f32], sums: &mut [i32]) {
    body(x, block, sub, qs, d, sums)
}

#[inline(always)]
fn body(x: &[f32], block: usize, sub: usize, qs: &mut [i8], d: &mut [f32], sums: &mut [i32]) {
    for ((xb, qb), db) in x.chunks_exact(block).zip(qs.chunks_exact_mut(block)).zip(d.iter_mut()) {
        let (scale, id) = scales(xb.iter().fold(0u32, |m, v| m.max(v.to_bits() & 0x7FFF_FFFF)));
        *db = scale;
        for (q, &v) in qb.iter_mut().zip(xb) {
            // |v * id| <= 127 up to a rounding of 127 itself; max/min also turn NaN (v infinite
            // or NaN times 0) into -127, in a block whose scale is NaN anyway.
            #[allow(clippy::manual_clamp)] // clamp keeps NaN
            let t = (v * id).round_ties_even().max(-127.0).min(127.0);
            // SAFETY: t is an integer in -127..=127.
            *q = unsafe { t.to_int_unchecked::<i32>() } as i8;
        }
    }
    for (s, qb) in sums.iter_mut().zip(qs.chunks_exact(sub)) {
        *s = qb.iter().map(|&q| q as i32).sum();
    }
}
