//! Strided copies on the host, and the dimension merging the CUDA strided copy shares.

/// Merges dimensions that are contiguous with each other and drops extent-1 dimensions, so a
/// view is walked with as few nested loops as possible. Strides are in elements.
pub fn coalesce(shape: &[usize], strides: &[isize]) -> (Vec<usize>, Vec<isize>) {
    let mut out_shape: Vec<usize> = Vec::with_capacity(shape.len());
    let mut out_strides: Vec<isize> = Vec::with_capacity(shape.len());
    for (&d, &s) in shape.iter().zip(strides) {
        if d == 1 {
            continue;
        }
        match (out_shape.last_mut(), out_strides.last_mut()) {
            (Some(pd), Some(ps)) if *ps == s * d as isize => {
                *pd *= d;
                *ps = s;
            }
            _ => {
                out_shape.push(d);
                out_strides.push(s);
            }
        }
    }
    (out_shape, out_strides)
}

/// Copies the view at `src` (shape, element strides) into contiguous `dst`.
///
/// # Safety
/// `src` plus every offset the view reaches must be readable memory; `dst` must hold
/// `product(shape) * elem_bytes` writable bytes not overlapping the source.
pub unsafe fn gather(src: *const u8, dst: *mut u8, elem_bytes: usize, shape: &[usize], strides: &[isize]) {
    let (shape, strides) = coalesce(shape, strides);
    let n: usize = shape.iter().product();
    if n == 0 {
        return;
    }
    let rank = shape.len();
    if rank == 0 {
        unsafe { std::ptr::copy_nonoverlapping(src, dst, elem_bytes) };
        return;
    }
    // Innermost run: one memcpy when it is contiguous, else element by element.
    let inner = shape[rank - 1];
    let inner_stride = strides[rank - 1];
    let mut index = vec![0usize; rank - 1];
    let mut out = dst;
    let outer: usize = shape[..rank - 1].iter().product();
    for _ in 0..outer {
        let base: isize = index.iter().zip(&strides).map(|(i, s)| *i as isize * s).sum();
        unsafe {
            let row = src.offset(base * elem_bytes as isize);
            if inner_stride == 1 {
                std::ptr::copy_nonoverlapping(row, out, inner * elem_bytes);
            } else {
                for j in 0..inner {
                    let from = row.offset(j as isize * inner_stride * elem_bytes as isize);
                    std::ptr::copy_nonoverlapping(from, out.add(j * elem_bytes), elem_bytes);
                }
            }
            out = out.add(inner * elem_bytes);
        }
        for d in (0..rank - 1).rev() {
            index[d] += 1;
            if index[d] < shape[d] {
                break;
            }
            index[d] = 0;
        }
    }
}

/// Writes the same `elem_bytes`-wide pattern into every element of the view at `dst`.
///
/// # Safety
/// Every offset the view reaches from `dst` must be writable memory.
pub unsafe fn fill_strided(dst: *mut u8, pattern: &[u8], shape: &[usize], strides: &[isize]) {
    let (shape, strides) = coalesce(shape, strides);
    let n: usize = shape.iter().product();
    let elem = pattern.len() as isize;
    let mut index = vec![0usize; shape.len()];
    for _ in 0..n {
        let off: isize = index.iter().zip(&strides).map(|(i, s)| *i as isize * s).sum();
        unsafe { std::ptr::copy_nonoverlapping(pattern.as_ptr(), dst.offset(off * elem), pattern.len()) };
        for d in (0..shape.len()).rev() {
            index[d] += 1;
            if index[d] < shape[d] {
                break;
            }
            index[d] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coalesce_merges_contiguous_runs() {
        assert_eq!(coalesce(&[2, 3, 4], &[12, 4, 1]), (vec![24], vec![1]));
        assert_eq!(coalesce(&[2, 3, 4], &[24, 4, 1]), (vec![2, 12], vec![24, 1]));
        assert_eq!(coalesce(&[1, 5, 1], &[0, -2, 7]), (vec![5], vec![-2]));
    }

    #[test]
    fn gather_transposed_and_reversed() {
        let src: Vec<u32> = (0..12).collect();
        let mut dst = vec![0u32; 12];
        // transpose of a 3x4 matrix
        unsafe { gather(src.as_ptr().cast(), dst.as_mut_ptr().cast(), 4, &[4, 3], &[1, 4]) };
        assert_eq!(dst, vec![0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11]);
        // reversed rows: start at the last row, stride -4
        let last = unsafe { src.as_ptr().add(8) };
        unsafe { gather(last.cast(), dst.as_mut_ptr().cast(), 4, &[3, 4], &[-4, 1]) };
        assert_eq!(dst, vec![8, 9, 10, 11, 4, 5, 6, 7, 0, 1, 2, 3]);
    }

    #[test]
    fn fill_every_other() {
        let mut v = vec![0u16; 6];
        unsafe { fill_strided(v.as_mut_ptr().cast(), &7u16.to_le_bytes(), &[3], &[2]) };
        assert_eq!(v, vec![7, 0, 7, 0, 7, 0]);
    }
}
