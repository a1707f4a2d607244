//! qmatmul through 8-bit activations (llama.cpp's technique): each f32 lhs row is quantized
//! once per call (q8act.rs), then every output is a sum of integer block dot products of a
//! weight row with an activation row, scaled in f32. Column chunks run in parallel.
//!
//! The kernels, picked at run time: with AVX-512 VNNI, panels of 16 weight rows repacked one
//! row per lane (dot_panel.rs, dot_panel_k.rs; Q6_K at M <= 2 row tiles, dot_avx512.rs); with
//! AVX2 (dot_avx2.rs) or in portable scalar code (dot_scalar.rs), tiles of up to 4 weight rows
//! by 4 activation rows sharing their loaded and unpacked blocks. All compute the same
//! integers and differ only in the order of their f32 sums.
//!
//! Accuracy: against exact arithmetic on the dequantized weights, the only error beyond f32
//! rounding is the activations' quantization, at most half a step `d = max|x_b| / 127` per
//! value, so `|out - exact| <= sum_b max|x_b| / 254 * sum_{i in b} |w_i|` over the blocks `b`
//! of the row (32 values for Q4_0/Q4_1/Q8_0, 256 for the K-quants), plus f32 rounding.

#[cfg(test)]
use std::sync::atomic::{AtomicUsize, Ordering};

use rayon::prelude::*;

use super::blocks::Encoding;
use super::dot_scalar;
use super::q8act::QAct;
#[cfg(target_arch = "x86_64")]
use super::{dot_avx2, dot_avx512, dot_panel};

/// Dot products of `W` weight rows (`row_bytes` apart from the start of `w`) with the `R`
/// activation rows of `a` from `r0`, into `out[x * 4 + i]` (activation row `x`, weight row `i`).
///
/// Safety: the CPU has the extensions of the tile's path. The tiles check that `w` holds the
/// `W` rows and `a` the `R` rows, and that `row_bytes` are the blocks of `a.k` values.
pub type TileFn = unsafe fn(w: &[u8], row_bytes: usize, a: &QAct, r0: usize, out: &mut [f32; 16]);

/// The kernels' instruction sets, widest last.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Path {
    Scalar = 0,
    Avx2 = 1,
    Avx512Vnni = 2,
}

/// Calls on each path (slot 3: the AVX-512 panels, slot 2 its row tiles), for the tests to
/// check that every kernel runs.
#[cfg(test)]
pub static TAKEN: [AtomicUsize; 4] = [const { AtomicUsize::new(0) }; 4];

/// The widest path this CPU runs.
pub fn best_path() -> Path {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        if has!("avx512f")
            && has!("avx512bw")
            && has!("avx512vl")
            && has!("avx512vnni")
            && has!("avx512vbmi")
            && has!("fma")
            && has!("f16c")
        {
            return Path::Avx512Vnni;
        }
        if has!("avx2") && has!("fma") && has!("f16c") {
            return Path::Avx2;
        }
    }
    Path::Scalar
}

/// The row tiles of `enc` on `path` (AVX-512's own for the K-quants, else AVX2's):
/// `[W = 4, W = 1][R - 1]`.
fn tiles(enc: Encoding, path: Path) -> [[TileFn; 4]; 2] {
    match path {
        #[cfg(target_arch = "x86_64")]
        Path::Avx512Vnni if kquant(enc) => dot_avx512::tiles(enc),
        #[cfg(target_arch = "x86_64")]
        Path::Avx2 | Path::Avx512Vnni => dot_avx2::tiles(enc),
        _ => dot_scalar::tiles(enc),
    }
}

/// Activation layout of `enc`: (values per scale, values per sum).
pub fn act_blocks(enc: Encoding) -> (usize, usize) {
    match enc {
        Encoding::Q4_0 | Encoding::Q4_1 | Encoding::Q8_0 => (32, 32),
        Encoding::Q4K | Encoding::Q5K => (256, 32),
        Encoding::Q6K => (256, 16),
    }
}

/// Whether the integer kernels are the faster way to multiply `m` rows by `enc` weights on
/// `path`, rather than dequantizing to f32 and gemm. Measured with qdot_bench on a Xeon with
/// AVX-512 (SmolLM2-135M's shapes): the AVX-512 panels win at every M (2x to 3x at M = 512);
/// the AVX2 tiles win up to M = 16 and lose from 32 on (Q4_0/Q4_1/Q8_0), win up to 64 and
/// lose from 128 on (K-quants); the scalar tiles win only for one row of 32-value blocks.
/// Rows of `row_bytes` must also fit the panels' 32-bit gather offsets (16 rows of them).
pub fn preferred(enc: Encoding, m: usize, row_bytes: usize, path: Path) -> bool {
    if row_bytes >= i32::MAX as usize / 16 {
        return false;
    }
    match path {
        Path::Avx512Vnni => true,
        Path::Avx2 => m < if kquant(enc) { 96 } else { 24 },
        Path::Scalar => m == 1 && !kquant(enc),
    }
}

/// Whether `enc` has 256-value super-blocks.
fn kquant(enc: Encoding) -> bool {
    matches!(enc, Encoding::Q4K | Encoding::Q5K | Encoding::Q6K)
}

/// A weight matrix repacked once for this CPU's kernels (see `prepack`): kept with weights that
/// never change, a loaded model's.
pub struct Prepacked {
    enc: Encoding,
    n: usize,
    row_bytes: usize,
    #[cfg(target_arch = "x86_64")]
    panels: dot_panel::Panels,
}

/// The `n` rows of `w` (`row_bytes` each) repacked for `path`'s kernels, when they have a
/// repacked form of the weights' own size (the AVX-512 panels of Q4_0, Q4_1 and Q8_0); None
/// otherwise.
pub fn prepack(path: Path, enc: Encoding, w: &[u8], n: usize, row_bytes: usize) -> Option<Prepacked> {
    assert!(path <= best_path() && w.len() == n * row_bytes, "prepack: operand sizes");
    #[cfg(target_arch = "x86_64")]
    if path == Path::Avx512Vnni && matches!(enc, Encoding::Q4_0 | Encoding::Q4_1 | Encoding::Q8_0) {
        let k = row_bytes / enc.block().1 * enc.block().0;
        // SAFETY: the CPU runs the AVX-512 VNNI path (asserted above).
        let panels = unsafe { dot_panel::Panels::new(&dot_panel::kernels(enc), w, row_bytes, n, k) }?;
        return Some(Prepacked { enc, n, row_bytes, panels });
    }
    let _ = (enc, w, n, row_bytes);
    None
}

/// `out[m, n] = a[m, k] @ dequantize(w)^T` for `w` the `n` rows of `row_bytes` bytes of `enc`
/// blocks (`k` values each), through 16-bit activations in two 8-bit planes, on `path` (at most
/// best_path()); `pre` is `w` as `prepack` made it, if the caller keeps it.
#[allow(clippy::too_many_arguments)]
pub fn qmatmul(
    path: Path,
    enc: Encoding,
    a: &[f32],
    m: usize,
    k: usize,
    w: &[u8],
    n: usize,
    row_bytes: usize,
    out: &mut [f32],
    pre: Option<&Prepacked>,
) {
    assert!(a.len() == m * k && w.len() == n * row_bytes && out.len() == m * n, "qmatmul: operand sizes");
    assert!(path <= best_path(), "qmatmul: this CPU cannot run the {path:?} kernels");
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        out.fill(0.0);
        return;
    }
    let (block, sub) = act_blocks(enc);
    // Each activation row as two 8-bit planes (the row and its residual; see QAct::two_planes),
    // run as two rows of the kernels and added at the end: 16-bit accuracy for one more dot
    // product per block, the weights still read once.
    let act = QAct::two_planes(a, m, k, block, sub);
    let (rows, mut planes) = (2 * m, vec![0f32; 2 * m * n]);
    let table = tiles(enc, path);
    #[cfg(target_arch = "x86_64")]
    let panels = if path == Path::Avx512Vnni && !(enc == Encoding::Q6K && rows <= 2) {
        Some(dot_panel::kernels(enc))
    } else {
        None
    };
    #[cfg(not(target_arch = "x86_64"))]
    let panels: Option<()> = None;
    #[cfg(target_arch = "x86_64")]
    let pre = pre.filter(|p| (p.enc, p.n, p.row_bytes) == (enc, n, row_bytes) && panels.is_some()).map(|p| &p.panels);
    #[cfg(not(target_arch = "x86_64"))]
    let _ = pre;
    #[cfg(test)]
    TAKEN[path as usize + usize::from(panels.is_some())].fetch_add(1, Ordering::Relaxed);
    let threads = rayon::current_num_threads().max(1);
    // Work in units of weight bytes read per activation row.
    let work = (n * row_bytes).saturating_mul(rows);
    // At least SERIAL_WORK per task (on many cores a small matrix takes a few of them, not all:
    // handing out a task costs more than its share of the reading); from the threads' count up,
    // a multiple of it, so that equal tasks keep them all busy to the end.
    let units = work / SERIAL_WORK;
    let tasks = if units <= 1 || threads == 1 {
        1
    } else if units < threads {
        units
    } else {
        threads * (units / threads).min(4)
    };
    let cols = n.div_ceil(tasks).next_multiple_of(if panels.is_some() { 16 } else { 4 });
    let tasks = n.div_ceil(cols);
    let dst = planes.as_mut_ptr() as usize;
    let body = |t: usize| {
        let (j0, j1) = (t * cols, ((t + 1) * cols).min(n));
        let dst = dst as *mut f32;
        // SAFETY: each task writes only columns j0..j1 of the [m, n] output, no other task's;
        // the CPU runs `path`.
        unsafe {
            #[cfg(target_arch = "x86_64")]
            if let Some(kern) = &panels {
                return dot_panel::columns(kern, w, row_bytes, &act, rows, n, j0, j1, dst, pre);
            }
            chunk(&table, w, row_bytes, &act, rows, n, j0, j1, dst)
        }
    };
    if tasks == 1 {
        body(0);
    } else {
        (0..tasks).into_par_iter().for_each(body);
    }
    for (r, o) in out.chunks_exact_mut(n).enumerate() {
        let (p0, p1) = (&planes[2 * r * n..(2 * r + 1) * n], &planes[(2 * r + 1) * n..(2 * r + 2) * n]);
        for ((o, &x), &y) in o.iter_mut().zip(p0).zip(p1) {
            *o = x + y;
        }
    }
}

/// Below this many weight bytes times activation rows a call runs on one thread.
const SERIAL_WORK: usize = 1 << 16;

/// Activation rows a chunk runs through each group of weight rows before the next.
const ROW_BLOCK: usize = 64;

/// Columns `j0..j1` of the `[m, n]` output at `dst`.
///
/// Safety: `dst` holds `m * n` values, of which no other thread touches these columns, and the
/// CPU runs the tiles of `table`.
#[allow(clippy::too_many_arguments)]
unsafe fn chunk(
    table: &[[TileFn; 4]; 2],
    w: &[u8],
    row_bytes: usize,
    a: &QAct,
    m: usize,
    n: usize,
    j0: usize,
    j1: usize,
    dst: *mut f32,
) {
    let mut o = [0f32; 16];
    for rb in (0..m).step_by(ROW_BLOCK) {
        let re = (rb + ROW_BLOCK).min(m);
        let mut j = j0;
        while j < j1 {
            let wr = if j + 4 <= j1 { 4 } else { 1 };
            let rows = &w[j * row_bytes..(j + wr) * row_bytes];
            if rb == 0 {
                prefetch(&w[(j + wr).min(j1) * row_bytes..(j + 2 * wr).min(j1) * row_bytes]);
            }
            let mut r = rb;
            while r < re {
                let rr = (re - r).min(4);
                let f = table[if wr == 4 { 0 } else { 1 }][rr - 1];
                // SAFETY: the caller's CPU runs these tiles; rows holds wr weight rows and a
                // holds rows r..r + rr.
                unsafe { f(rows, row_bytes, a, r, &mut o) };
                for x in 0..rr {
                    for i in 0..wr {
                        // SAFETY: (r + x, j + i) is inside [m, n] and in this chunk's columns.
                        unsafe { *dst.add((r + x) * n + j + i) = o[x * 4 + i] };
                    }
                }
                r += rr;
            }
            j += wr;
        }
    }
}

/// Asks for `bytes` in the L2 cache ahead of their use. A decode step reads every matrix once,
/// from L3 or memory, and the hardware's prefetchers pick up a matrix of short rows late:
/// prefetching the next 16 rows' bytes took one step of SmolLM2-135M's matrices (qdot_bench)
/// from 12.9 to 8.3 ms on one thread (into L1 it made matrices that fit L2 slower).
#[inline(always)]
pub fn prefetch(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    for at in (0..bytes.len()).step_by(64) {
        // SAFETY: a prefetch of an address inside `bytes` (SSE is part of x86-64).
        unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T1 }>(bytes.as_ptr().add(at).cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

/// The 6-bit scales and mins of the 8 sub-blocks of a Q4_K/Q5_K super-block from its 12
/// packed bytes (as blocks.rs's scale_min, four at a time in u32 lanes).
#[inline(always)]
pub fn k_scale_mins(s: [u8; 12]) -> ([u8; 8], [u8; 8]) {
    let word = |i: usize| u32::from_le_bytes([s[4 * i], s[4 * i + 1], s[4 * i + 2], s[4 * i + 3]]);
    let (w0, w1, w2) = (word(0), word(1), word(2));
    const LOW6: u32 = 0x3F3F_3F3F;
    const LOW4: u32 = 0x0F0F_0F0F;
    const TOP2: u32 = 0x0303_0303;
    let sc_hi = (w2 & LOW4) | (((w0 >> 6) & TOP2) << 4);
    let mn_hi = ((w2 >> 4) & LOW4) | (((w1 >> 6) & TOP2) << 4);
    let sc = (w0 & LOW6) as u64 | (sc_hi as u64) << 32;
    let mn = (w1 & LOW6) as u64 | (mn_hi as u64) << 32;
    (sc.to_le_bytes(), mn.to_le_bytes())
}
