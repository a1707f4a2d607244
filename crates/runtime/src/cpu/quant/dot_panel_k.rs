//! AVX-512 VNNI panel kernels for the K-quants (Q4_K, Q5_K, Q6_K), as dot_panel.rs does for
//! the 32-value blocks: 16 weight rows repacked per call, one per 32-bit lane. A packed
//! super-block holds 64 registers of quants (register r: values 4r..4r + 4 of every row,
//! unsigned: 4, 5 or 6 bits), then its scales per lane. Per activation row, each sub-block of
//! 32 (Q6_K: group of 16) values takes 8 (4) `vpdpbusd` and one multiply-add by its scale; the
//! mins (Q4_K/Q5_K) and Q6_K's offset of 32 are exact integer sums of products of 16-bit pairs
//! with the activation's sub-block sums (`vpdpwssd`).

use std::arch::x86_64::*;

use super::blocks::Encoding;
use super::dot_panel::{Kernels, ROWS, transpose};
use super::q8act::QAct;

const Q4K: u8 = 0;
const Q5K: u8 = 1;
const Q6K: u8 = 2;

const ENCODINGS: [Encoding; 3] = [Encoding::Q4K, Encoding::Q5K, Encoding::Q6K];

/// Registers of a packed Q4_K/Q5_K super-block: 64 quants, the 8 sub-block scales (f32), the
/// mins as 4 pairs of 16-bit integers, d and dmin (f32).
const REGS_K: usize = 78;
/// Registers of a packed Q6_K super-block: 64 quants, the 16 group scales (f32), the same as 8
/// pairs of 16-bit integers, d (f32).
const REGS_6: usize = 89;

/// The unsigned byte pairs (b0, b1) of each lane of `v` (b0, b1 its low bytes) as the 16-bit
/// pair (b0, b1), zero- or sign-extended.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,fma,f16c")]
fn byte_pair(v: __m512i, signed: bool) -> __m512i {
    if signed {
        let lo = _mm512_and_si512(_mm512_srai_epi32::<24>(_mm512_slli_epi32::<24>(v)), _mm512_set1_epi32(0xFFFF));
        let hi = _mm512_slli_epi32::<16>(_mm512_srai_epi32::<24>(_mm512_slli_epi32::<16>(v)));
        _mm512_or_si512(lo, hi)
    } else {
        let lo = _mm512_and_si512(v, _mm512_set1_epi32(0xFF));
        _mm512_or_si512(lo, _mm512_and_si512(_mm512_slli_epi32::<8>(v), _mm512_set1_epi32(0xFF_0000)))
    }
}

/// Repacks weight rows `j0..j0 + rows` (`rows <= 16`; missing lanes get zero scales) of `w`,
/// `nsb` super-blocks each, into `pack`.
///
/// Safety: the CPU has AVX-512 F/BW/VL and F16C.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,fma,f16c")]
unsafe fn repack<const E: u8>(w: &[u8], row_bytes: usize, j0: usize, rows: usize, nsb: usize, pack: &mut [__m512i]) {
    let enc = ENCODINGS[E as usize];
    let (size, regs) = (enc.block().1, if E == Q6K { REGS_6 } else { REGS_K });
    assert!(rows <= ROWS && w.len() >= (j0 + rows) * row_bytes && row_bytes == nsb * size && pack.len() >= nsb * regs);
    assert!(row_bytes < (i32::MAX as usize) / ROWS, "qmatmul: rows too long for the panel kernels");
    let mask: __mmask16 = ((1u32 << rows) - 1) as u16;
    let idx = _mm512_mullo_epi32(
        _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
        _mm512_set1_epi32(row_bytes as i32),
    );
    let z = _mm512_setzero_si512();
    let (nib, low2, bit) = (_mm512_set1_epi8(0x0F), _mm512_set1_epi8(0x03), _mm512_set1_epi8(0x01));
    for b in 0..nsb {
        // SAFETY: lanes i < rows read 4 bytes at offsets below `size` of super-block b of row
        // j0 + i, inside w; masked-off lanes read nothing.
        let gather = |off: usize| unsafe {
            let base = w.as_ptr().add(j0 * row_bytes + b * size + off);
            _mm512_mask_i32gather_epi32::<1>(z, mask, idx, base.cast())
        };
        // Dwords t = 0..8 of 32 bytes at `off` of every row.
        let dwords = |off: usize| -> [__m512i; 8] {
            if rows == ROWS {
                // SAFETY: all 16 rows are in w; the 32 bytes are inside super-block b.
                let (lo, hi) = unsafe {
                    let p = w.as_ptr().add(j0 * row_bytes + b * size + off);
                    (transpose(p, row_bytes), transpose(p.add(16), row_bytes))
                };
                std::array::from_fn(|t| if t < 4 { lo[t] } else { hi[t - 4] })
            } else {
                std::array::from_fn(|t| gather(off + 4 * t))
            }
        };
        let p = &mut pack[b * regs..(b + 1) * regs];
        if E == Q6K {
            for h in 0..2 {
                let (ql0, ql1, qh) = (dwords(64 * h), dwords(64 * h + 32), dwords(128 + 32 * h));
                for q in 0..4 {
                    for t in 0..8 {
                        let ql = if q % 2 == 0 { ql0[t] } else { ql1[t] };
                        let lo = if q < 2 { ql } else { _mm512_srli_epi32::<4>(ql) };
                        let hi = _mm512_and_si512(_mm512_srlv_epi32(qh[t], _mm512_set1_epi32(2 * q as i32)), low2);
                        p[32 * h + 8 * q + t] = _mm512_or_si512(_mm512_and_si512(lo, nib), _mm512_slli_epi32::<4>(hi));
                    }
                }
            }
            let sc: [__m512i; 4] = std::array::from_fn(|i| gather(192 + 4 * i));
            for g in 0..16 {
                let v = _mm512_sllv_epi32(sc[g / 4], _mm512_set1_epi32(24 - 8 * (g % 4) as i32));
                p[64 + g] = _mm512_castps_si512(_mm512_cvtepi32_ps(_mm512_srai_epi32::<24>(v)));
            }
            for t in 0..8 {
                let v = if t % 2 == 1 { _mm512_srli_epi32::<16>(sc[t / 2]) } else { sc[t / 2] };
                p[80 + t] = byte_pair(v, true);
            }
            // d is the f16 at 208, the top half of the dword at 206.
            p[88] = _mm512_castps_si512(_mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32::<16>(gather(206)))));
        } else {
            let off = if E == Q5K { 48 } else { 16 };
            let qh = if E == Q5K { dwords(16) } else { [z; 8] };
            for c in 0..4 {
                let qs = dwords(off + 32 * c);
                for t in 0..8 {
                    for (half, j) in [(0, 2 * c), (1, 2 * c + 1)] {
                        let q = if half == 0 { qs[t] } else { _mm512_srli_epi32::<4>(qs[t]) };
                        let mut q = _mm512_and_si512(q, nib);
                        if E == Q5K {
                            let hb = _mm512_and_si512(_mm512_srlv_epi32(qh[t], _mm512_set1_epi32(j as i32)), bit);
                            q = _mm512_or_si512(q, _mm512_slli_epi32::<4>(hb));
                        }
                        p[8 * j + t] = q;
                    }
                }
            }
            // As dot::k_scale_mins, lane by lane: the 12 bytes of scales and mins.
            let (w0, w1, w2) = (gather(4), gather(8), gather(12));
            let (low6, low4, top2) =
                (_mm512_set1_epi32(0x3F3F_3F3F), _mm512_set1_epi32(0x0F0F_0F0F), _mm512_set1_epi32(0x0303_0303));
            let sc_lo = _mm512_and_si512(w0, low6);
            let mn_lo = _mm512_and_si512(w1, low6);
            let sc_hi = _mm512_or_si512(
                _mm512_and_si512(w2, low4),
                _mm512_slli_epi32::<4>(_mm512_and_si512(_mm512_srli_epi32::<6>(w0), top2)),
            );
            let mn_hi = _mm512_or_si512(
                _mm512_and_si512(_mm512_srli_epi32::<4>(w2), low4),
                _mm512_slli_epi32::<4>(_mm512_and_si512(_mm512_srli_epi32::<6>(w1), top2)),
            );
            for j in 0..8 {
                let v = if j < 4 { sc_lo } else { sc_hi };
                let v = _mm512_and_si512(
                    _mm512_srlv_epi32(v, _mm512_set1_epi32(8 * (j % 4) as i32)),
                    _mm512_set1_epi32(0xFF),
                );
                p[64 + j] = _mm512_castps_si512(_mm512_cvtepi32_ps(v));
            }
            for t in 0..4 {
                let v = if t < 2 { mn_lo } else { mn_hi };
                let v = if t % 2 == 1 { _mm512_srli_epi32::<16>(v) } else { v };
                p[72 + t] = byte_pair(v, false);
            }
            let head = gather(0);
            p[76] = _mm512_castps_si512(_mm512_cvtph_ps(_mm512_cvtepi32_epi16(head)));
            p[77] = _mm512_castps_si512(_mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32::<16>(head))));
        }
    }
}

/// `out[(r0 + x) * n + j0 + i]` for the `R` activation rows from `r0` and the `cols` packed
/// weight rows `i` of `pack`.
///
/// Safety: the CPU has AVX-512 F/BW/VL, VNNI and F16C; `out` holds `[m, n]` values of which the
/// task running this owns columns `j0..j0 + cols`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn rows<const E: u8, const R: usize>(
    pack: &[__m512i],
    a: &QAct,
    r0: usize,
    out: *mut f32,
    n: usize,
    j0: usize,
    cols: usize,
) {
    let (nsb, ns, per) = (a.k / 256, a.k / a.sub, 256 / a.sub);
    let regs = if E == Q6K { REGS_6 } else { REGS_K };
    assert!(pack.len() >= nsb * regs && (r0 + R) * a.k <= a.qs.len() && cols <= ROWS);
    // Sub-blocks of 32 values (Q6_K: groups of 16) and their quant registers.
    let (groups, gregs) = if E == Q6K { (16, 4) } else { (8, 8) };
    let mut acc = [_mm512_setzero_ps(); R];
    for (b, p) in pack.chunks_exact(regs).take(nsb).enumerate() {
        let mut tmp = [_mm512_setzero_ps(); R];
        for g in 0..groups {
            let wq = &p[gregs * g..gregs * (g + 1)];
            let sc = _mm512_castsi512_ps(p[64 + g]);
            for (x, tmp) in tmp.iter_mut().enumerate() {
                // SAFETY: activation row r0 + x holds super-block b.
                let q = unsafe { a.qs.as_ptr().add((r0 + x) * a.k + 256 * b + 4 * gregs * g).cast::<i32>() };
                let mut dot = _mm512_setzero_si512();
                for (t, &wq) in wq.iter().enumerate() {
                    // SAFETY: as above, 4 bytes at 4t of the group.
                    dot = _mm512_dpbusd_epi32(dot, wq, _mm512_set1_epi32(unsafe { q.add(t).read_unaligned() }));
                }
                *tmp = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), sc, *tmp);
            }
        }
        for (x, (acc, tmp)) in acc.iter_mut().zip(tmp).enumerate() {
            let row = r0 + x;
            let da = a.d[row * nsb + b];
            let s = &a.sums[row * ns + per * b..row * ns + per * (b + 1)];
            let pair = |t: usize| _mm512_set1_epi32((s[2 * t] & 0xFFFF) | s[2 * t + 1] << 16);
            let mut iterm = _mm512_setzero_si512();
            if E == Q6K {
                for t in 0..8 {
                    iterm = _mm512_dpwssd_epi32(iterm, p[80 + t], pair(t));
                }
                let tmp = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iterm), _mm512_set1_ps(-32.0), tmp);
                *acc = _mm512_fmadd_ps(tmp, _mm512_mul_ps(_mm512_castsi512_ps(p[88]), _mm512_set1_ps(da)), *acc);
            } else {
                for t in 0..4 {
                    iterm = _mm512_dpwssd_epi32(iterm, p[72 + t], pair(t));
                }
                *acc = _mm512_fmadd_ps(tmp, _mm512_mul_ps(_mm512_castsi512_ps(p[76]), _mm512_set1_ps(da)), *acc);
                let dmin = _mm512_mul_ps(_mm512_castsi512_ps(p[77]), _mm512_set1_ps(-da));
                *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iterm), dmin, *acc);
            }
        }
    }
    let mask: __mmask16 = ((1u32 << cols) - 1) as u16;
    for (x, acc) in acc.iter().enumerate() {
        // SAFETY: the caller owns these columns of row r0 + x.
        unsafe { _mm512_mask_storeu_ps(out.add((r0 + x) * n + j0), mask, *acc) };
    }
}

fn table<const E: u8>() -> Kernels {
    Kernels {
        repack: repack::<E>,
        rows: [rows::<E, 1>, rows::<E, 2>, rows::<E, 4>, rows::<E, 8>],
        values: 256,
        regs: if E == Q6K { REGS_6 } else { REGS_K },
    }
}

/// The panel kernels of `enc`, a K-quant.
pub fn kernels(enc: Encoding) -> Kernels {
    match enc {
        Encoding::Q5K => table::<Q5K>(),
        Encoding::Q6K => table::<Q6K>(),
        _ => table::<Q4K>(),
    }
}
