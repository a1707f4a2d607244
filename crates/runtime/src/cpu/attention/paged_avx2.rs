//! The AVX2 inner loops of the CPU paged attention over a float32 cache (paged.rs holds the
//! portable ones and the plan): scores eight keys at a time, each key's eight partial sums kept
//! apart until one transposing reduction, and the weighted sum of the values with each head's
//! accumulators held in registers across a block of keys.

use std::arch::x86_64::*;

/// Keys per block of the weighted sum: their value rows stay in L1 across the heads.
const KEY_BLOCK: usize = 32;

/// `[q . k_0, ..., q . k_7]` over `d` values (a multiple of 8).
///
/// Safety: the CPU has AVX2 and FMA; `q` and every `k_t` hold `d` floats.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn dot8(q: *const f32, k: [*const f32; 8], d: usize) -> __m256 {
    let mut acc = [_mm256_setzero_ps(); 8];
    for c in (0..d).step_by(8) {
        // SAFETY: c + 8 <= d floats of q and of every key row.
        unsafe {
            let qv = _mm256_loadu_ps(q.add(c));
            for t in 0..8 {
                acc[t] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k[t].add(c)), acc[t]);
            }
        }
    }
    // Per 128-bit lane, [sum_0, sum_1, sum_2, sum_3] of its halves, then the lanes added.
    let s01 = _mm256_hadd_ps(acc[0], acc[1]);
    let s23 = _mm256_hadd_ps(acc[2], acc[3]);
    let s45 = _mm256_hadd_ps(acc[4], acc[5]);
    let s67 = _mm256_hadd_ps(acc[6], acc[7]);
    let s0123 = _mm256_hadd_ps(s01, s23);
    let s4567 = _mm256_hadd_ps(s45, s67);
    _mm256_add_ps(_mm256_permute2f128_ps::<0x20>(s0123, s4567), _mm256_permute2f128_ps::<0x31>(s0123, s4567))
}

/// Asks for the `bytes` bytes at `p`.
#[inline(always)]
fn prefetch(p: *const f32, bytes: usize) {
    for off in (0..bytes).step_by(64) {
        // SAFETY: a prefetch reads nothing architecturally.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast::<i8>().wrapping_add(off)) };
    }
}

/// `scores[h * keys + j] = scale * q_h . k_j` for the query heads `h` (`q`: `heads * d`) and
/// the key rows `rows[j]` (whole cache rows; head h reads kv head `h / group` of it).
///
/// Safety: the CPU has AVX2 and FMA; `d` is a multiple of 8; every row holds the kv heads'
/// `d` floats; `scores` holds `heads * rows.len()` floats.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn scores(
    q: &[f32],
    rows: &[*const f32],
    heads: usize,
    group: usize,
    d: usize,
    scale: f32,
    scores: &mut [f32],
) {
    let keys = rows.len();
    assert!(q.len() >= heads * d && scores.len() >= heads * keys && d.is_multiple_of(8));
    let row_bytes = heads.div_ceil(group) * d * 4;
    let sv = _mm256_set1_ps(scale);
    for blk in (0..keys).step_by(8) {
        let n = (keys - blk).min(8);
        for &r in rows.iter().skip(blk + 8).take(8) {
            prefetch(r, row_bytes);
        }
        for h in 0..heads {
            let off = h / group * d;
            let k: [*const f32; 8] = std::array::from_fn(|t| rows[blk + t.min(n - 1)].wrapping_add(off));
            // SAFETY: the caller's CPU and rows; q holds head h's d floats.
            let s = _mm256_mul_ps(unsafe { dot8(q.as_ptr().add(h * d), k, d) }, sv);
            let mut out = [0f32; 8];
            // SAFETY: out holds 8 floats.
            unsafe { _mm256_storeu_ps(out.as_mut_ptr(), s) };
            scores[h * keys + blk..][..n].copy_from_slice(&out[..n]);
        }
    }
}

/// `acc[h * d..] += sum_j w[h * keys + j] * v_j` for the query heads `h` and the value rows
/// `rows[j]` (head h reads kv head `h / group` of each).
///
/// Safety: as `scores`, with `w` of `heads * rows.len()` and `acc` of `heads * d` floats.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn weighted_sum(w: &[f32], rows: &[*const f32], heads: usize, group: usize, d: usize, acc: &mut [f32]) {
    let keys = rows.len();
    assert!(w.len() >= heads * keys && acc.len() >= heads * d && d.is_multiple_of(8));
    let row_bytes = heads.div_ceil(group) * d * 4;
    for kb in (0..keys).step_by(KEY_BLOCK) {
        let ke = (kb + KEY_BLOCK).min(keys);
        for &r in rows.iter().skip(ke).take(KEY_BLOCK) {
            prefetch(r, row_bytes);
        }
        for h in 0..heads {
            let (off, wh) = (h / group * d, &w[h * keys..(h + 1) * keys]);
            for c in (0..d).step_by(32) {
                let regs = ((d - c) / 8).min(4);
                let out = acc[h * d + c..].as_mut_ptr();
                // SAFETY: regs * 8 <= d - c floats of acc from h * d + c and of every value row
                // from off + c.
                unsafe {
                    let mut a: [__m256; 4] = std::array::from_fn(|r| {
                        if r < regs { _mm256_loadu_ps(out.add(8 * r)) } else { _mm256_setzero_ps() }
                    });
                    for j in kb..ke {
                        let (wv, v) = (_mm256_set1_ps(*wh.get_unchecked(j)), rows[j].add(off + c));
                        for (r, a) in a.iter_mut().enumerate().take(regs) {
                            *a = _mm256_fmadd_ps(wv, _mm256_loadu_ps(v.add(8 * r)), *a);
                        }
                    }
                    for (r, a) in a.iter().enumerate().take(regs) {
                        _mm256_storeu_ps(out.add(8 * r), *a);
                    }
                }
            }
        }
    }
}
