//! AVX-512 VNNI qmatmul panels (Q4_0, Q4_1, Q8_0 here, the K-quants in dot_panel_k.rs): 16
//! weight rows at a time are repacked so that 32-bit lane i of every register belongs to weight
//! row i. A block of 32 values then takes 8 `vpdpbusd` per activation row (each adding 4
//! products of all 16 rows, the activation's 4 bytes broadcast) and its whole sum lands in one
//! lane: the scales apply as one multiply-add per block for 16 outputs, with no horizontal
//! sums. The repacked panels keep the encoding's size (nibbles stay packed, the scales stay
//! f16), so a loaded model's weights are repacked once and kept (`Panels`); other weights are
//! repacked per call and panel, which still costs less than unpacking the rows block by block.
//! The integers are those of the other paths.

use std::arch::x86_64::*;

use super::blocks::Encoding;
use super::q8act::QAct;

/// Weight rows per panel: one per 32-bit lane.
pub const ROWS: usize = 16;

/// Registers per block of a packed panel: the quants (Q8_0: 8 registers, values 4j..4j + 4 of
/// every row in register j, offset by 128 to unsigned; Q4_0/Q4_1: 4 registers, values 4j..4j + 4
/// in the low nibbles of register j and 16 + 4j.. in the high ones), then the block heads (the
/// f16 scale in the low half of each lane, Q4_1's f16 min in the high half).
const fn regs(enc: Encoding) -> usize {
    match enc {
        Encoding::Q8_0 => 9,
        _ => 5,
    }
}

/// Repacks weight rows `j0..j0 + rows` (`rows <= 16`; missing lanes get zero scales) of `w`
/// into `pack` (`nb * REGS` registers).
///
/// Safety: the CPU has AVX-512 F/BW/VL and F16C; `w` holds rows `j0..j0 + rows` of
/// `row_bytes`, `nb` blocks of `enc` each.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,fma,f16c")]
unsafe fn repack<const E: u8>(w: &[u8], row_bytes: usize, j0: usize, rows: usize, nb: usize, pack: &mut [__m512i]) {
    let enc = ENCODINGS[E as usize];
    let (size, regs) = (enc.block().1, regs(enc));
    assert!(rows <= ROWS && w.len() >= (j0 + rows) * row_bytes && row_bytes == nb * size && pack.len() >= nb * regs);
    assert!(row_bytes < (i32::MAX as usize) / ROWS, "qmatmul: rows too long for the panel kernels");
    let mask: __mmask16 = ((1u32 << rows) - 1) as u16;
    let idx = _mm512_mullo_epi32(
        _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
        _mm512_set1_epi32(row_bytes as i32),
    );
    let z = _mm512_setzero_si512();
    for b in 0..nb {
        // SAFETY: lanes i < rows read 4 bytes at offsets below `size` of block b of row j0 + i,
        // inside w; masked-off lanes read nothing.
        let gather = |off: usize| unsafe {
            let base = w.as_ptr().add(j0 * row_bytes + b * size + off);
            _mm512_mask_i32gather_epi32::<1>(z, mask, idx, base.cast())
        };
        let p = &mut pack[b * regs..(b + 1) * regs];
        p[regs - 1] = gather(0);
        // The quants: 16 or 32 bytes from `off` of every row, as 4 or 8 dwords per lane.
        let off = match enc {
            Encoding::Q4_1 => 4,
            _ => 2,
        };
        let mut q = [z; 8];
        let halves = if enc == Encoding::Q8_0 { 2 } else { 1 };
        for h in 0..halves {
            let part: [__m512i; 4] = if rows == ROWS {
                // SAFETY: all 16 rows are in w; 16 bytes at off + 16h of block b are inside it.
                unsafe { transpose(w.as_ptr().add(j0 * row_bytes + b * size + off + 16 * h), row_bytes) }
            } else {
                std::array::from_fn(|t| gather(off + 16 * h + 4 * t))
            };
            q[4 * h..4 * h + 4].copy_from_slice(&part);
        }
        if enc == Encoding::Q8_0 {
            for j in 0..8 {
                p[j] = _mm512_xor_si512(q[j], _mm512_set1_epi8(-128));
            }
        } else {
            p[..4].copy_from_slice(&q[..4]);
        }
    }
}

/// Dword t (0..4) of the 16 bytes at `p + i * stride` in lane i of register t, for rows i in
/// 0..16: rows 4L..4L + 4 loaded into 128-bit lane L of four registers, then a 4x4 transpose of
/// dwords within each lane.
///
/// Safety: the CPU has AVX-512 F; the 16 rows of 16 bytes are readable.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,fma,f16c")]
pub unsafe fn transpose(p: *const u8, stride: usize) -> [__m512i; 4] {
    // SAFETY: the caller's rows.
    let row = |i: usize| unsafe { _mm_loadu_si128(p.add(i * stride).cast()) };
    let z: [__m512i; 4] = std::array::from_fn(|k| {
        let v = _mm512_castsi128_si512(row(k));
        let v = _mm512_mask_broadcast_i32x4(v, 0x00F0, row(4 + k));
        let v = _mm512_mask_broadcast_i32x4(v, 0x0F00, row(8 + k));
        _mm512_mask_broadcast_i32x4(v, 0xF000, row(12 + k))
    });
    let t0 = _mm512_unpacklo_epi32(z[0], z[1]);
    let t1 = _mm512_unpackhi_epi32(z[0], z[1]);
    let t2 = _mm512_unpacklo_epi32(z[2], z[3]);
    let t3 = _mm512_unpackhi_epi32(z[2], z[3]);
    [
        _mm512_unpacklo_epi64(t0, t2),
        _mm512_unpackhi_epi64(t0, t2),
        _mm512_unpacklo_epi64(t1, t3),
        _mm512_unpackhi_epi64(t1, t3),
    ]
}

/// `out[(r0 + x) * n + j0 + i]` for the `R` activation rows from `r0` and the `cols` packed
/// weight rows `i` of `pack`.
///
/// Safety: the CPU has AVX-512 F/BW/VL, VNNI and F16C; `pack` holds `a.k / 32` packed blocks;
/// `a` holds rows `r0..r0 + R`; `out` holds `[m, n]` values of which the task running this owns
/// columns `j0..j0 + cols` (`cols <= 16`).
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
    let nb = a.k / 32;
    let regs = regs(ENCODINGS[E as usize]);
    assert!(pack.len() >= nb * regs && (r0 + R) * a.k <= a.qs.len() && cols <= ROWS);
    let low4 = _mm512_set1_epi8(0x0F);
    let mut acc = [_mm512_setzero_ps(); R];
    for (b, p) in pack.chunks_exact(regs).take(nb).enumerate() {
        // The block PREFETCH_BLOCKS ahead (for a prepacked matrix, into the next panel: they
        // lie in order). A prefetch reads nothing architecturally, so past the end is harmless.
        for r in 0..regs {
            _mm_prefetch::<_MM_HINT_T0>(p.as_ptr().wrapping_add(PREFETCH_BLOCKS * regs + r).cast());
        }
        let wq: [__m512i; 8] = if E == 2 {
            std::array::from_fn(|j| p[j])
        } else {
            std::array::from_fn(|j| {
                if j < 4 {
                    _mm512_and_si512(p[j], low4)
                } else {
                    _mm512_and_si512(_mm512_srli_epi32::<4>(p[j - 4]), low4)
                }
            })
        };
        let head = p[regs - 1];
        let wd = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(head));
        let wm = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32::<16>(head)));
        for (x, acc) in acc.iter_mut().enumerate() {
            let blk = (r0 + x) * nb + b;
            // SAFETY: activation row r0 + x holds block b: 32 bytes, its scale and sum.
            let (q, d, s) = unsafe {
                (a.qs.as_ptr().add(blk * 32).cast::<i32>(), *a.d.get_unchecked(blk), *a.sums.get_unchecked(blk))
            };
            let mut dot = _mm512_set1_epi32(match E {
                0 => -8 * s,
                2 => -128 * s,
                _ => 0,
            });
            for (j, &wq) in wq.iter().enumerate() {
                // SAFETY: as above, 4 bytes at 4j.
                let v = unsafe { q.add(j).read_unaligned() };
                dot = _mm512_dpbusd_epi32(dot, wq, _mm512_set1_epi32(v));
            }
            *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(wd, _mm512_set1_ps(d)), *acc);
            if E == 1 {
                *acc = _mm512_fmadd_ps(wm, _mm512_set1_ps(d * s as f32), *acc);
            }
        }
    }
    let mask: __mmask16 = ((1u32 << cols) - 1) as u16;
    for (x, acc) in acc.iter().enumerate() {
        // SAFETY: the caller owns these columns of row r0 + x.
        unsafe { _mm512_mask_storeu_ps(out.add((r0 + x) * n + j0), mask, *acc) };
    }
}

/// How many blocks ahead `rows` asks for the weights.
const PREFETCH_BLOCKS: usize = 20;

const ENCODINGS: [Encoding; 3] = [Encoding::Q4_0, Encoding::Q4_1, Encoding::Q8_0];

/// Computes activation rows `r0..r0 + R` against a packed panel into `cols` output columns
/// from `j0` (see `rows`).
pub type RowsFn = unsafe fn(&[__m512i], &QAct, usize, *mut f32, usize, usize, usize);
/// Packs a panel (see `repack`).
pub type RepackFn = unsafe fn(&[u8], usize, usize, usize, usize, &mut [__m512i]);

/// An encoding's panel kernels: its repacking, its row kernels for R = 1, 2, 4, 8, and the
/// values and registers of a packed block.
pub struct Kernels {
    pub repack: RepackFn,
    pub rows: [RowsFn; 4],
    pub values: usize,
    pub regs: usize,
}

fn table<const E: u8>() -> Kernels {
    Kernels {
        repack: repack::<E>,
        rows: [rows::<E, 1>, rows::<E, 2>, rows::<E, 4>, rows::<E, 8>],
        values: 32,
        regs: regs(ENCODINGS[E as usize]),
    }
}

/// The panel kernels of `enc`.
pub fn kernels(enc: Encoding) -> Kernels {
    match enc {
        Encoding::Q4_0 => table::<0>(),
        Encoding::Q4_1 => table::<1>(),
        Encoding::Q8_0 => table::<2>(),
        Encoding::Q4K | Encoding::Q5K | Encoding::Q6K => super::dot_panel_k::kernels(enc),
    }
}

/// All the panels of a weight matrix, repacked once (for weights that do not change: a loaded
/// model's).
pub struct Panels {
    /// The registers, in anonymous memory (huge pages where the system gives them).
    map: memmap2::MmapMut,
    /// Registers per panel.
    per_panel: usize,
}

impl Panels {
    fn regs(&self) -> &[__m512i] {
        // SAFETY: the map holds `len / 64` registers' bytes, page-aligned, initialised (zeroed
        // by the kernel, then written by `new`).
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().cast(), self.map.len() / 64) }
    }
}

impl Panels {
    /// Repacks the `n` rows of `w` (`row_bytes` each, blocks of `kern`'s encoding); None when
    /// the memory cannot be had.
    ///
    /// Safety: the CPU has AVX-512 F/BW/VL, VNNI and F16C.
    pub unsafe fn new(kern: &Kernels, w: &[u8], row_bytes: usize, n: usize, k: usize) -> Option<Panels> {
        use rayon::prelude::*;
        let per_panel = k / kern.values * kern.regs;
        let count = n.div_ceil(ROWS) * per_panel;
        // Without the memory, the weights are repacked per call instead.
        let mut map = memmap2::MmapMut::map_anon((count * 64).max(1)).ok()?;
        crate::storage::huge_pages(&map);
        // SAFETY: the map is page-aligned and holds count registers' bytes (all-zero bits are a
        // valid __m512i).
        let regs = unsafe { std::slice::from_raw_parts_mut(map.as_mut_ptr().cast::<__m512i>(), count) };
        regs.par_chunks_mut(per_panel.max(1)).enumerate().for_each(|(i, pack)| {
            let j0 = i * ROWS;
            // SAFETY: the caller's CPU; rows j0.. of w, at most 16 of them.
            unsafe { (kern.repack)(w, row_bytes, j0, (n - j0).min(ROWS), k / kern.values, pack) };
        });
        Some(Panels { map, per_panel })
    }
}

/// Columns `j0..j1` of the `[m, n]` output at `out`: panel after panel, each repacked once (or
/// taken from `pre`, all of `w`'s panels) and run through all `m` activation rows, 8 at a time.
///
/// Safety: the CPU has AVX-512 F/BW/VL, VNNI and F16C; `w` holds `n` rows of `row_bytes`, the
/// blocks of `a.k` values of the kernels' encoding; `pre` (if given) its panels, `j0` then a
/// multiple of 16; `out` holds `m * n` values of which no other thread touches these columns.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub unsafe fn columns(
    kern: &Kernels,
    w: &[u8],
    row_bytes: usize,
    a: &QAct,
    m: usize,
    n: usize,
    j0: usize,
    j1: usize,
    out: *mut f32,
    pre: Option<&Panels>,
) {
    let nb = a.k / kern.values;
    let mut own = Vec::new();
    for p0 in (j0..j1).step_by(ROWS) {
        let cols = (j1 - p0).min(ROWS);
        let pack: &[__m512i] = if let Some(pre) = pre {
            debug_assert!(p0 % ROWS == 0 && pre.per_panel == nb * kern.regs);
            // Panels lie in order in memory: the hardware prefetchers follow them.
            let at = |p: usize| &pre.regs()[p / ROWS * pre.per_panel..];
            &at(p0)[..pre.per_panel]
        } else {
            // The next panel's rows (adjacent in memory) while this one is repacked and run.
            super::dot::prefetch(&w[(p0 + ROWS).min(j1) * row_bytes..(p0 + 2 * ROWS).min(j1) * row_bytes]);
            own.resize(nb * kern.regs, _mm512_setzero_si512());
            // SAFETY: the caller's CPU and rows.
            unsafe { (kern.repack)(w, row_bytes, p0, cols, nb, &mut own) };
            &own
        };
        let mut r = 0;
        while r < m {
            let (f, step) = match m - r {
                8.. => (kern.rows[3], 8),
                4..=7 => (kern.rows[2], 4),
                2..=3 => (kern.rows[1], 2),
                _ => (kern.rows[0], 1),
            };
            // SAFETY: the caller's CPU, output and columns; a holds rows r..r + step.
            unsafe { f(pack, a, r, out, n, p0, cols) };
            r += step;
        }
    }
}
