//! The integer qmatmul tiles for x86-64 with AVX2, FMA and F16C (see dot.rs): 32 values per
//! register, products summed by `vpmaddubsw` (unsigned weights times signed activations, at most
//! 2 * 63 * 127 per 16-bit lane, so nothing saturates) and `vpmaddwd` (by ones, or by the
//! K-quants' 16-bit scales). Q8_0's signed weights go through their magnitude, the sign moved
//! onto the activation; Q4_0's and Q6_K's offsets come back out through the activation sums.

use std::arch::x86_64::*;

use super::blocks::Encoding;
use super::dot::{TileFn, k_scale_mins};
use super::q8act::QAct;

const Q4_0: u8 = 0;
const Q4_1: u8 = 1;
const Q8_0: u8 = 2;
const Q4K: u8 = 3;
const Q5K: u8 = 4;
const Q6K: u8 = 5;

/// Checks what every tile relies on: `w` holds `W` rows of `row_bytes`, the blocks of `a.k`
/// values of `enc`, and `a` holds rows `r0..r0 + R`.
fn check(enc: Encoding, w: &[u8], row_bytes: usize, a: &QAct, r0: usize, wr: usize, rr: usize) {
    let (elems, bytes) = enc.block();
    assert!(a.k.is_multiple_of(elems) && row_bytes == a.k / elems * bytes, "qmatmul tile: rows do not match");
    assert!(w.len() >= wr * row_bytes && (r0 + rr) * a.k <= a.qs.len(), "qmatmul tile: out of bounds");
}

#[target_feature(enable = "avx2,fma,f16c")]
fn f16_to_f32(bits: u16) -> f32 {
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
}

#[target_feature(enable = "avx2,fma,f16c")]
fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

/// Q4_0, Q4_1 and Q8_0: one 32-value block at a time.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn b32<const E: u8, const W: usize, const R: usize>(
    w: &[u8],
    row_bytes: usize,
    a: &QAct,
    r0: usize,
    out: &mut [f32; 16],
) {
    let enc = [Encoding::Q4_0, Encoding::Q4_1, Encoding::Q8_0][E as usize];
    check(enc, w, row_bytes, a, r0, W, R);
    let size = enc.block().1;
    let nb = a.k / 32;
    let (low4, ones) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi16(1));
    let mut acc = [[_mm256_setzero_ps(); W]; R];
    for b in 0..nb {
        let mut wq = [_mm256_setzero_si256(); W];
        let mut wd = [0f32; W];
        let mut wm = [0f32; W];
        for i in 0..W {
            // SAFETY: check() proved that row i of w holds nb blocks of `size` bytes.
            unsafe {
                let base = w.as_ptr().add(i * row_bytes + b * size);
                wd[i] = f16_to_f32(base.cast::<u16>().read_unaligned());
                wq[i] = if E == Q8_0 {
                    _mm256_loadu_si256(base.add(2).cast())
                } else {
                    let off = if E == Q4_1 { 4 } else { 2 };
                    let q = _mm_loadu_si128(base.add(off).cast());
                    let q = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(q), _mm_srli_epi16::<4>(q));
                    _mm256_and_si256(q, low4)
                };
                if E == Q4_1 {
                    wm[i] = f16_to_f32(base.add(2).cast::<u16>().read_unaligned());
                }
            }
        }
        for (x, acc) in acc.iter_mut().enumerate() {
            let blk = (r0 + x) * nb + b;
            // SAFETY: check() proved that activation row r0 + x holds nb blocks.
            let (aq, da, s) =
                unsafe { (_mm256_loadu_si256(a.qs.as_ptr().add(blk * 32).cast()), a.d[blk], a.sums[blk]) };
            // Each of the block's 8 lanes carries an eighth of Q4_0's offset term.
            let corr = _mm256_set1_epi32(if E == Q4_0 { -s } else { 0 });
            for i in 0..W {
                let p = if E == Q8_0 {
                    _mm256_maddubs_epi16(_mm256_abs_epi8(wq[i]), _mm256_sign_epi8(aq, wq[i]))
                } else {
                    _mm256_maddubs_epi16(wq[i], aq)
                };
                let dot = _mm256_add_epi32(_mm256_madd_epi16(p, ones), corr);
                acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(wd[i] * da), acc[i]);
                if E == Q4_1 {
                    acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(wm[i]), _mm256_set1_ps(da * s as f32 * 0.125), acc[i]);
                }
            }
        }
    }
    for x in 0..R {
        for i in 0..W {
            out[x * 4 + i] = hsum(acc[x][i]);
        }
    }
}

/// Q4_K, Q5_K and Q6_K: 256-value super-blocks, 32 values at a time.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn kq<const E: u8, const W: usize, const R: usize>(
    w: &[u8],
    row_bytes: usize,
    a: &QAct,
    r0: usize,
    out: &mut [f32; 16],
) {
    let enc = [Encoding::Q4K, Encoding::Q5K, Encoding::Q6K][(E - Q4K) as usize];
    check(enc, w, row_bytes, a, r0, W, R);
    let size = enc.block().1;
    let (nsb, ns) = (a.k / 256, a.k / a.sub);
    let low4 = _mm256_set1_epi8(0x0F);
    let mut acc = [[_mm256_setzero_ps(); W]; R];
    for sb in 0..nsb {
        let blk = |i: usize| w[i * row_bytes + sb * size..].as_ptr();
        let mut wd = [0f32; W];
        let mut wmin = [0f32; W];
        let mut sc = [[0i16; 16]; W];
        let mut off = [_mm256_setzero_si256(); W];
        for i in 0..W {
            let b = blk(i);
            // SAFETY: check() proved that row i of w holds super-block sb.
            unsafe {
                if E == Q6K {
                    wd[i] = f16_to_f32(b.add(208).cast::<u16>().read_unaligned());
                    let s = _mm256_cvtepi8_epi16(_mm_loadu_si128(b.add(192).cast()));
                    _mm256_storeu_si256(sc[i].as_mut_ptr().cast(), s);
                    off[i] = _mm256_slli_epi16::<5>(s);
                } else {
                    wd[i] = f16_to_f32(b.cast::<u16>().read_unaligned());
                    wmin[i] = f16_to_f32(b.add(2).cast::<u16>().read_unaligned());
                    let (s, m) = k_scale_mins(b.add(4).cast::<[u8; 12]>().read_unaligned());
                    for j in 0..8 {
                        sc[i][j] = s[j] as i16;
                    }
                    off[i] = _mm256_castsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(i64::from_le_bytes(m))));
                }
            }
        }
        let mut iacc = [[_mm256_setzero_si256(); W]; R];
        for j in 0..8 {
            let mut wq = [_mm256_setzero_si256(); W];
            let mut scv = [_mm256_setzero_si256(); W];
            for i in 0..W {
                let b = blk(i);
                // SAFETY: check() proved that row i of w holds super-block sb.
                unsafe {
                    if E == Q6K {
                        // Quarter p of half h: groups 2j, 2j + 1.
                        let (h, p) = (j / 4, j % 4);
                        let ql = _mm256_loadu_si256(b.add(64 * h + 32 * (p % 2)).cast());
                        let ql = if p >= 2 { _mm256_srli_epi16::<4>(ql) } else { ql };
                        let qh = _mm256_loadu_si256(b.add(128 + 32 * h).cast());
                        let qh = match p {
                            0 => _mm256_slli_epi16::<4>(qh),
                            1 => _mm256_slli_epi16::<2>(qh),
                            2 => qh,
                            _ => _mm256_srli_epi16::<2>(qh),
                        };
                        wq[i] =
                            _mm256_or_si256(_mm256_and_si256(ql, low4), _mm256_and_si256(qh, _mm256_set1_epi8(0x30)));
                        scv[i] = _mm256_inserti128_si256::<1>(
                            _mm256_castsi128_si256(_mm_set1_epi16(sc[i][2 * j])),
                            _mm_set1_epi16(sc[i][2 * j + 1]),
                        );
                    } else {
                        let base = if E == Q5K { 48 } else { 16 };
                        let q = _mm256_loadu_si256(b.add(base + 32 * (j / 2)).cast());
                        let q = if j % 2 == 1 { _mm256_srli_epi16::<4>(q) } else { q };
                        let mut q = _mm256_and_si256(q, low4);
                        if E == Q5K {
                            let qh = _mm256_loadu_si256(b.add(16).cast());
                            let bit = _mm256_and_si256(
                                _mm256_srl_epi16(qh, _mm_cvtsi32_si128(j as i32)),
                                _mm256_set1_epi8(1),
                            );
                            q = _mm256_or_si256(q, _mm256_slli_epi16::<4>(bit));
                        }
                        wq[i] = q;
                        scv[i] = _mm256_set1_epi16(sc[i][j]);
                    }
                }
            }
            for (x, iacc) in iacc.iter_mut().enumerate() {
                // SAFETY: check() proved that activation row r0 + x holds super-block sb.
                let aq = unsafe { _mm256_loadu_si256(a.qs.as_ptr().add((r0 + x) * a.k + sb * 256 + 32 * j).cast()) };
                for i in 0..W {
                    let p = _mm256_maddubs_epi16(wq[i], aq);
                    iacc[i] = _mm256_add_epi32(iacc[i], _mm256_madd_epi16(p, scv[i]));
                }
            }
        }
        for (x, (acc, iacc)) in acc.iter_mut().zip(&iacc).enumerate() {
            let row = r0 + x;
            let da = a.d[row * nsb + sb];
            // SAFETY: check() proved that activation row r0 + x holds the sums of super-block sb.
            let sums = unsafe { a.sums.as_ptr().add(row * ns + sb * (256 / a.sub)) };
            for i in 0..W {
                let mut isum = iacc[i];
                // SAFETY: as above; the sums (at most 16 * 127 or 32 * 127) fit 16 bits.
                unsafe {
                    if E == Q6K {
                        let lo = _mm256_loadu_si256(sums.cast());
                        let hi = _mm256_loadu_si256(sums.add(8).cast());
                        let bs = _mm256_permute4x64_epi64::<0xD8>(_mm256_packs_epi32(lo, hi));
                        isum = _mm256_sub_epi32(isum, _mm256_madd_epi16(off[i], bs));
                    } else {
                        let bs = _mm_packs_epi32(_mm_loadu_si128(sums.cast()), _mm_loadu_si128(sums.add(4).cast()));
                        let mn = _mm_cvtepi32_ps(_mm_madd_epi16(_mm256_castsi256_si128(off[i]), bs));
                        acc[i] = _mm256_fmadd_ps(_mm256_zextps128_ps256(mn), _mm256_set1_ps(-wmin[i] * da), acc[i]);
                    }
                }
                acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(wd[i] * da), acc[i]);
            }
        }
    }
    for x in 0..R {
        for i in 0..W {
            out[x * 4 + i] = hsum(acc[x][i]);
        }
    }
}

/// The AVX2 tiles of `enc`: `[W = 4, W = 1][R - 1]`.
pub fn tiles(enc: Encoding) -> [[TileFn; 4]; 2] {
    macro_rules! table {
        ($f:ident, $e:ident) => {
            [
                [$f::<$e, 4, 1>, $f::<$e, 4, 2>, $f::<$e, 4, 3>, $f::<$e, 4, 4>],
                [$f::<$e, 1, 1>, $f::<$e, 1, 2>, $f::<$e, 1, 3>, $f::<$e, 1, 4>],
            ]
        };
    }
    match enc {
        Encoding::Q4_0 => table!(b32, Q4_0),
        Encoding::Q4_1 => table!(b32, Q4_1),
        Encoding::Q8_0 => table!(b32, Q8_0),
        Encoding::Q4K => table!(kq, Q4K),
        Encoding::Q5K => table!(kq, Q5K),
        Encoding::Q6K => table!(kq, Q6K),
    }
}
