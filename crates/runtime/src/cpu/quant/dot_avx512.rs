//! Row tiles of the K-quants for x86-64 with AVX-512 VNNI (see dot.rs): weight rows as they
//! are, 64 values of a super-block per register, so nothing is repacked. The panels
//! (dot_panel_k.rs) are faster but for Q6_K at one or two activation rows, where repacking its
//! 6-bit values costs more than these tiles' unpacking (measured by qdot_bench).
//!
//! Weights are the unsigned operand of `vpmaddubsw`, activations the signed one; the 6- or
//! 8-bit scales apply in 16-bit lanes (`vpdpwssd`), so a super-block's sum stays an exact
//! integer, and Q6_K's offset of 32 comes back out through the activations' sums.

use std::arch::x86_64::*;

use super::blocks::Encoding;
use super::dot::{TileFn, k_scale_mins};
use super::q8act::QAct;

const Q4K: u8 = 3;
const Q5K: u8 = 4;
const Q6K: u8 = 5;

/// Q4_K/Q5_K: bytes whose even positions pick scale 2c for 16-bit lanes 0..16 and 2c + 1 for
/// lanes 16..32 (the odd bytes are zeroed by the mask).
const fn ksc_idx(c: usize) -> [u8; 64] {
    let mut t = [0u8; 64];
    let mut i = 0;
    while i < 64 {
        t[i] = (2 * c + i / 32) as u8;
        i += 1;
    }
    t
}

/// Q6_K: 16-bit lane `l` of 64 values `c` picks the scale of group `4c + l / 8`.
const fn q6sc_idx(c: usize) -> [u16; 32] {
    let mut t = [0u16; 32];
    let mut i = 0;
    while i < 32 {
        t[i] = (4 * c + i / 8) as u16;
        i += 1;
    }
    t
}

static KSC: [[u8; 64]; 4] = [ksc_idx(0), ksc_idx(1), ksc_idx(2), ksc_idx(3)];
static Q6SC: [[u16; 32]; 4] = [q6sc_idx(0), q6sc_idx(1), q6sc_idx(2), q6sc_idx(3)];

/// Checks what every tile relies on: `w` holds `W` rows of `row_bytes`, the blocks of `a.k`
/// values of `enc`, and `a` holds rows `r0..r0 + R`.
fn check(enc: Encoding, w: &[u8], row_bytes: usize, a: &QAct, r0: usize, wr: usize, rr: usize) {
    let (elems, bytes) = enc.block();
    assert!(a.k.is_multiple_of(elems) && row_bytes == a.k / elems * bytes, "qmatmul tile: rows do not match");
    assert!(w.len() >= wr * row_bytes && (r0 + rr) * a.k <= a.qs.len(), "qmatmul tile: out of bounds");
}

unsafe fn load512<T>(p: *const T) -> __m512i {
    // SAFETY: the caller's pointer holds 64 readable bytes.
    unsafe { _mm512_loadu_si512(p.cast()) }
}

/// Q4_K, Q5_K and Q6_K: 256-value super-blocks, 64 values at a time.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,fma,f16c")]
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
    // SAFETY (for every load below): check() proved that rows 0..W of w hold nsb super-blocks
    // of `size` bytes and activation rows r0..r0 + R nsb super-blocks of 256 values, scales and
    // 256 / a.sub sums; each load reads inside super-block sb; the index tables are 64 bytes.
    let (ksc, q6sc) = unsafe {
        (
            [load512(KSC[0].as_ptr()), load512(KSC[1].as_ptr()), load512(KSC[2].as_ptr()), load512(KSC[3].as_ptr())],
            [
                load512(Q6SC[0].as_ptr()),
                load512(Q6SC[1].as_ptr()),
                load512(Q6SC[2].as_ptr()),
                load512(Q6SC[3].as_ptr()),
            ],
        )
    };
    let low4 = _mm512_set1_epi8(0x0F);
    let mut acc = [[_mm512_setzero_ps(); W]; R];
    for sb in 0..nsb {
        let mut wd = [0f32; W];
        let mut wmin = [0f32; W];
        let mut sc64 = [0i64; W];
        let mut mins = [_mm_setzero_si128(); W];
        let mut sc16 = [_mm512_setzero_si512(); W];
        let mut sc32 = [_mm256_setzero_si256(); W];
        let blk = |i: usize| w[i * row_bytes + sb * size..].as_ptr();
        for i in 0..W {
            let b = blk(i);
            // SAFETY: see above.
            unsafe {
                if E == Q6K {
                    wd[i] = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(
                        b.add(208).cast::<u16>().read_unaligned() as i32
                    )));
                    let s = _mm256_cvtepi8_epi16(_mm_loadu_si128(b.add(192).cast()));
                    sc16[i] = _mm512_castsi256_si512(s);
                    sc32[i] = _mm256_slli_epi16::<5>(s);
                } else {
                    let h = _mm_cvtph_ps(_mm_cvtsi32_si128(b.cast::<u32>().read_unaligned() as i32));
                    wd[i] = _mm_cvtss_f32(h);
                    wmin[i] = _mm_cvtss_f32(_mm_movehdup_ps(h));
                    let (sc, mn) = k_scale_mins(b.add(4).cast::<[u8; 12]>().read_unaligned());
                    sc64[i] = i64::from_le_bytes(sc);
                    mins[i] = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(i64::from_le_bytes(mn)));
                }
            }
        }
        let mut iacc = [[_mm512_setzero_si512(); W]; R];
        for c in 0..4 {
            let mut wq = [_mm512_setzero_si512(); W];
            let mut scv = [_mm512_setzero_si512(); W];
            for i in 0..W {
                let b = blk(i);
                // SAFETY: see above.
                unsafe {
                    if E == Q6K {
                        // 64 values: quarters 2(c % 2) and 2(c % 2) + 1 of half c / 2.
                        let (h, upper) = (c / 2, c % 2 == 1);
                        let ql = load512(b.add(64 * h));
                        let qh = _mm256_loadu_si256(b.add(128 + 32 * h).cast());
                        let hz = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(qh), _mm256_srli_epi16::<2>(qh));
                        let (lo, hi) = if upper {
                            (_mm512_and_si512(_mm512_srli_epi16::<4>(ql), low4), hz)
                        } else {
                            (_mm512_and_si512(ql, low4), _mm512_slli_epi16::<4>(hz))
                        };
                        wq[i] = _mm512_or_si512(lo, _mm512_and_si512(hi, _mm512_set1_epi8(0x30)));
                        scv[i] = _mm512_permutexvar_epi16(q6sc[c], sc16[i]);
                    } else {
                        let off = if E == Q5K { 48 } else { 16 };
                        let q = _mm256_loadu_si256(b.add(off + 32 * c).cast());
                        let q = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(q), _mm256_srli_epi16::<4>(q));
                        let mut q = _mm512_and_si512(q, low4);
                        if E == Q5K {
                            // Bit j of qh[l] is the fifth bit of value l of sub-block j = 2c, 2c + 1.
                            let qh = _mm256_loadu_si256(b.add(16).cast());
                            let hb = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(qh), _mm256_srli_epi16::<1>(qh));
                            let hb = match c {
                                0 => _mm512_slli_epi16::<4>(hb),
                                1 => _mm512_slli_epi16::<2>(hb),
                                2 => hb,
                                _ => _mm512_srli_epi16::<2>(hb),
                            };
                            q = _mm512_or_si512(q, _mm512_and_si512(hb, _mm512_set1_epi8(0x10)));
                        }
                        wq[i] = q;
                        scv[i] =
                            _mm512_maskz_permutexvar_epi8(0x5555_5555_5555_5555, ksc[c], _mm512_set1_epi64(sc64[i]));
                    }
                }
            }
            for (x, iacc) in iacc.iter_mut().enumerate() {
                // SAFETY: see above.
                let aq = unsafe { load512(a.qs.as_ptr().add((r0 + x) * a.k + sb * 256 + 64 * c)) };
                for i in 0..W {
                    let p = _mm512_maddubs_epi16(wq[i], aq);
                    iacc[i] = _mm512_dpwssd_epi32(iacc[i], p, scv[i]);
                }
            }
        }
        for (x, (acc, iacc)) in acc.iter_mut().zip(&iacc).enumerate() {
            let row = r0 + x;
            // SAFETY: see above.
            let da = unsafe { *a.d.as_ptr().add(row * nsb + sb) };
            let sums = unsafe { a.sums.as_ptr().add(row * ns + sb * (256 / a.sub)) };
            for i in 0..W {
                let mut isum = iacc[i];
                if E == Q6K {
                    // SAFETY: see above (16 sums of 16).
                    let bs = unsafe { _mm512_cvtepi32_epi16(load512(sums)) };
                    isum = _mm512_sub_epi32(isum, _mm512_zextsi256_si512(_mm256_madd_epi16(sc32[i], bs)));
                } else {
                    // SAFETY: see above (8 sums of 32).
                    let bs = unsafe { _mm256_cvtepi32_epi16(_mm256_loadu_si256(sums.cast())) };
                    let mn = _mm_cvtepi32_ps(_mm_madd_epi16(mins[i], bs));
                    acc[i] = _mm512_fmadd_ps(_mm512_zextps128_ps512(mn), _mm512_set1_ps(-wmin[i] * da), acc[i]);
                }
                acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(wd[i] * da), acc[i]);
            }
        }
    }
    for x in 0..R {
        for i in 0..W {
            out[x * 4 + i] = _mm512_reduce_add_ps(acc[x][i]);
        }
    }
}

/// The AVX-512 VNNI tiles of `enc`, a K-quant: `[W = 4, W = 1][R - 1]`.
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
        Encoding::Q5K => table!(kq, Q5K),
        Encoding::Q6K => table!(kq, Q6K),
        // Not a K-quant: tiles that refuse (check() fails) rather than misread its blocks.
        _ => table!(kq, Q4K),
    }
}
