//! The one data mover of the layout kernels: an N-d copy between two strided views of raw
//! elements (any dtype: only the element size matters), split over the rayon pool when large,
//! and a parallel fill with one element's bit pattern. Dims contiguous on both sides are
//! merged first, so plain copies are single memcpys; a transposing walk (the source's inner
//! dim strided, another dim contiguous) goes tile by tile to stay in cache.

use rayon::prelude::*;

/// Below this many bytes a copy or fill runs on the calling thread.
const PAR_BYTES: usize = 1 << 16;

/// Raw element addresses that may cross threads: every chunk of a copy touches its own
/// destination elements, so sharing the pointers is sound.
#[derive(Clone, Copy)]
struct Ptrs {
    src: *const u8,
    dst: *mut u8,
}
unsafe impl Send for Ptrs {}
unsafe impl Sync for Ptrs {}

/// A strided view's geometry, in elements: `shape` walked in row-major order.
#[derive(Clone, Debug, PartialEq)]
pub struct View {
    pub shape: Vec<usize>,
    pub strides: Vec<isize>,
}

impl View {
    /// The row-major (contiguous) layout of `shape`.
    #[cfg(test)]
    pub fn contiguous(shape: &[usize]) -> View {
        View { shape: shape.to_vec(), strides: contiguous_strides(shape) }
    }
}

/// Row-major strides of `shape`, in elements.
pub fn contiguous_strides(shape: &[usize]) -> Vec<isize> {
    let mut strides = vec![0isize; shape.len()];
    let mut acc = 1isize;
    for (s, d) in strides.iter_mut().zip(shape).rev() {
        *s = acc;
        acc = acc.saturating_mul((*d).max(1) as isize);
    }
    strides
}

/// Drops extent-1 dims and merges neighbours that are contiguous with each other on both
/// sides, so the walk has as few levels (and as long inner runs) as possible.
fn coalesce(shape: &[usize], a: &[isize], b: &[isize]) -> (Vec<usize>, Vec<isize>, Vec<isize>) {
    let mut s: Vec<usize> = Vec::with_capacity(shape.len());
    let mut sa: Vec<isize> = Vec::with_capacity(shape.len());
    let mut sb: Vec<isize> = Vec::with_capacity(shape.len());
    for ((&d, &x), &y) in shape.iter().zip(a).zip(b) {
        if d == 1 {
            continue;
        }
        match (s.last_mut(), sa.last_mut(), sb.last_mut()) {
            (Some(pd), Some(px), Some(py)) if *px == x * d as isize && *py == y * d as isize => {
                *pd *= d;
                *px = x;
                *py = y;
            }
            _ => {
                s.push(d);
                sa.push(x);
                sb.push(y);
            }
        }
    }
    (s, sa, sb)
}

/// Copies `n` elements of width `T` from stride `sa` to stride `sb` (in elements).
///
/// # Safety
/// Every address reached must be valid for the access.
unsafe fn run_typed<T: Copy>(src: *const u8, sa: isize, dst: *mut u8, sb: isize, n: usize) {
    let (src, dst) = (src.cast::<T>(), dst.cast::<T>());
    for j in 0..n as isize {
        unsafe { dst.offset(j * sb).write_unaligned(src.offset(j * sa).read_unaligned()) };
    }
}

/// One inner run of `n` elements.
///
/// # Safety
/// As for [`copy`].
unsafe fn run(src: *const u8, sa: isize, dst: *mut u8, sb: isize, n: usize, elem: usize) {
    unsafe {
        if sa == 1 && sb == 1 {
            std::ptr::copy_nonoverlapping(src, dst, n * elem);
            return;
        }
        match elem {
            1 => run_typed::<u8>(src, sa, dst, sb, n),
            2 => run_typed::<u16>(src, sa, dst, sb, n),
            4 => run_typed::<u32>(src, sa, dst, sb, n),
            8 => run_typed::<u64>(src, sa, dst, sb, n),
            _ => {
                let e = elem as isize;
                for j in 0..n as isize {
                    std::ptr::copy_nonoverlapping(src.offset(j * sa * e), dst.offset(j * sb * e), elem);
                }
            }
        }
    }
}

/// Copies the elements `[start, end)` (row-major positions in `shape`) of the walk.
///
/// # Safety
/// As for [`copy`].
unsafe fn copy_range(p: Ptrs, shape: &[usize], sa: &[isize], sb: &[isize], elem: usize, start: usize, end: usize) {
    let rank = shape.len();
    let inner = shape[rank - 1];
    let mut index = vec![0usize; rank];
    let mut rest = start;
    for d in (0..rank).rev() {
        index[d] = rest % shape[d];
        rest /= shape[d];
    }
    let e = elem as isize;
    let mut pos = start;
    while pos < end {
        let (mut oa, mut ob) = (0isize, 0isize);
        for d in 0..rank {
            oa += index[d] as isize * sa[d];
            ob += index[d] as isize * sb[d];
        }
        let n = (inner - index[rank - 1]).min(end - pos);
        unsafe { run(p.src.offset(oa * e), sa[rank - 1], p.dst.offset(ob * e), sb[rank - 1], n, elem) };
        pos += n;
        index[rank - 1] += n;
        let mut d = rank - 1;
        while d > 0 && index[d] == shape[d] {
            index[d] = 0;
            index[d - 1] += 1;
            d -= 1;
        }
    }
}

/// Copies the view `src_view` at `src` into the view `dst_view` at `dst` (same shape), element
/// by element in row-major order of that shape. Strides are in elements and may be negative
/// or 0 on the source side (reversals, broadcasts).
///
/// # Safety
/// Every element either view reaches must be valid memory (readable at `src`, writable at
/// `dst`), the destination view must not reach one element twice, and the two must not
/// overlap.
pub unsafe fn copy(src: *const u8, src_view: &View, dst: *mut u8, dst_strides: &[isize], elem: usize) {
    let n: usize = src_view.shape.iter().product();
    if n == 0 {
        return;
    }
    let (shape, sa, sb) = coalesce(&src_view.shape, &src_view.strides, dst_strides);
    if shape.is_empty() {
        unsafe { std::ptr::copy_nonoverlapping(src, dst, elem) };
        return;
    }
    let p = Ptrs { src, dst };
    if let Some(q) = transposing(&shape, &sa, &sb) {
        unsafe { copy_tiled(p, &shape, &sa, &sb, elem, q) };
        return;
    }
    let threads = rayon::current_num_threads();
    if threads <= 1 || n * elem <= PAR_BYTES {
        unsafe { copy_range(p, &shape, &sa, &sb, elem, 0, n) };
        return;
    }
    let per = (PAR_BYTES / elem).max(1);
    let chunks = (n / per).clamp(1, threads * 4);
    let size = n.div_ceil(chunks);
    (0..chunks).into_par_iter().for_each(|c| {
        let (a, b) = (c * size, ((c + 1) * size).min(n));
        // SAFETY: chunks cover disjoint destination elements; validity is the caller's.
        unsafe { copy_range(p, &shape, &sa, &sb, elem, a, b) };
    });
}

/// Side of the square tiles of a transposing copy, in elements.
const TILE: usize = 32;

/// For a walk whose inner dim is strided in the source while another dim `q` is contiguous
/// there (a transpose), `q`: walking [q, last] tiles keeps both sides in cache.
fn transposing(shape: &[usize], sa: &[isize], sb: &[isize]) -> Option<usize> {
    let last = shape.len().checked_sub(1)?;
    if sa[last].abs() == 1 || sb[last].abs() != 1 || shape[last] < TILE / 4 {
        return None;
    }
    (0..last).rev().find(|&q| sa[q].abs() == 1 && shape[q] >= TILE / 4)
}

/// One [rows of q, all of last] band of a tiled copy, in elements of width `T`.
///
/// # Safety
/// As for [`copy`].
#[allow(clippy::too_many_arguments)]
unsafe fn band_typed<T: Copy>(
    src: *const u8,
    dst: *mut u8,
    rows: std::ops::Range<usize>,
    cols: usize,
    (aq, al): (isize, isize),
    (bq, bl): (isize, isize),
) {
    let (src, dst) = (src.cast::<T>(), dst.cast::<T>());
    for j0 in (0..cols).step_by(TILE) {
        let j1 = (j0 + TILE).min(cols);
        for i in rows.clone() {
            let (si, di) = (i as isize * aq, i as isize * bq);
            for j in j0..j1 {
                let j = j as isize;
                unsafe { dst.offset(di + j * bl).write_unaligned(src.offset(si + j * al).read_unaligned()) };
            }
        }
    }
}

/// The copy walked as tiles of the dims `q` and last, for every index of the other dims;
/// bands of TILE rows of `q` are the units of parallel work.
///
/// # Safety
/// As for [`copy`].
unsafe fn copy_tiled(p: Ptrs, shape: &[usize], sa: &[isize], sb: &[isize], elem: usize, q: usize) {
    let last = shape.len() - 1;
    let outer: Vec<usize> = (0..last).filter(|&d| d != q).collect();
    let count: usize = outer.iter().map(|&d| shape[d]).product();
    let bands = shape[q].div_ceil(TILE);
    let e = elem as isize;
    let item = |w: usize| {
        let p: Ptrs = p; // the whole struct (Send + Sync), not its raw fields
        let (mut o, band) = (w / bands, w % bands);
        let (mut oa, mut ob) = (0isize, 0isize);
        for &d in outer.iter().rev() {
            let i = (o % shape[d]) as isize;
            o /= shape[d];
            oa += i * sa[d];
            ob += i * sb[d];
        }
        let rows = band * TILE..((band + 1) * TILE).min(shape[q]);
        let (s, t) = (p.src.wrapping_offset(oa * e), p.dst.wrapping_offset(ob * e));
        let geo = ((sa[q], sa[last]), (sb[q], sb[last]));
        let cols = shape[last];
        // SAFETY: every (row, col) of the band is an element of both views.
        unsafe {
            match elem {
                1 => band_typed::<u8>(s, t, rows, cols, geo.0, geo.1),
                2 => band_typed::<u16>(s, t, rows, cols, geo.0, geo.1),
                4 => band_typed::<u32>(s, t, rows, cols, geo.0, geo.1),
                8 => band_typed::<u64>(s, t, rows, cols, geo.0, geo.1),
                _ => {
                    for i in rows {
                        for j in 0..cols {
                            let (i, j) = (i as isize, j as isize);
                            std::ptr::copy_nonoverlapping(
                                s.offset((i * geo.0.0 + j * geo.0.1) * e),
                                t.offset((i * geo.1.0 + j * geo.1.1) * e),
                                elem,
                            );
                        }
                    }
                }
            }
        }
    };
    let n = count * shape[q] * shape[last];
    if rayon::current_num_threads() <= 1 || n * elem <= PAR_BYTES {
        (0..count * bands).for_each(item);
    } else {
        (0..count * bands).into_par_iter().for_each(item);
    }
}

/// Writes `pattern` (one element's bytes) into `n` contiguous elements at `dst`.
///
/// # Safety
/// `dst` must hold `n * pattern.len()` writable bytes.
pub unsafe fn fill(dst: *mut u8, pattern: &[u8], n: usize) {
    let elem = pattern.len();
    if n == 0 || elem == 0 {
        return;
    }
    // SAFETY: forwarded to the caller.
    let out = unsafe { std::slice::from_raw_parts_mut(dst, n * elem) };
    let all_same = pattern.iter().all(|b| *b == pattern[0]);
    let fill_chunk = |c: &mut [u8]| {
        if all_same {
            c.fill(pattern[0]);
        } else {
            for e in c.chunks_exact_mut(elem) {
                e.copy_from_slice(pattern);
            }
        }
    };
    if rayon::current_num_threads() <= 1 || out.len() <= PAR_BYTES {
        fill_chunk(out);
    } else {
        out.par_chunks_mut(PAR_BYTES / elem * elem).for_each(fill_chunk);
    }
}
