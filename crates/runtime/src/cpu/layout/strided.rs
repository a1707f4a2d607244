//! The one data mover of the layout kernels: an N-d copy between two strided views of raw
//! elements (any dtype: only the element size matters), split over the rayon pool when large,
//! and a parallel fill with one element's bit pattern.

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
    pub fn contiguous(shape: &[usize]) -> View {
        View {
            shape: shape.to_vec(),
            strides: contiguous_strides(shape),
        }
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
        unsafe {
            dst.offset(j * sb)
                .write_unaligned(src.offset(j * sa).read_unaligned())
        };
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
                    std::ptr::copy_nonoverlapping(
                        src.offset(j * sa * e),
                        dst.offset(j * sb * e),
                        elem,
                    );
                }
            }
        }
    }
}

/// Copies the elements `[start, end)` (row-major positions in `shape`) of the walk.
///
/// # Safety
/// As for [`copy`].
unsafe fn copy_range(
    p: Ptrs,
    shape: &[usize],
    sa: &[isize],
    sb: &[isize],
    elem: usize,
    start: usize,
    end: usize,
) {
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
        unsafe {
            run(
                p.src.offset(oa * e),
                sa[rank - 1],
                p.dst.offset(ob * e),
                sb[rank - 1],
                n,
                elem,
            )
        };
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
pub unsafe fn copy(
    src: *const u8,
    src_view: &View,
    dst: *mut u8,
    dst_strides: &[isize],
    elem: usize,
) {
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

/// Copies `n` contiguous elements.
///
/// # Safety
/// As for [`copy`].
pub unsafe fn copy_flat(src: *const u8, dst: *mut u8, n: usize, elem: usize) {
    unsafe { copy(src, &View::contiguous(&[n]), dst, &[1], elem) };
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
        out.par_chunks_mut(PAR_BYTES / elem * elem)
            .for_each(fill_chunk);
    }
}
