//! band_part: a copy of the input with everything outside (or, with `exclude`, inside) the
//! diagonal band of the last two axes set to zero. Element (m, n) is in the band when
//! `(num_lower is None or m - n <= num_lower) and (num_upper is None or n - m <= num_upper)`;
//! -1 also means the whole triangle. Zero is the all-zero bit pattern in every dtype.
//!
//! Staging rejects a count at or past a static dim; for a dim that was symbolic, a count past
//! it at run time just covers the whole triangle (the same result as None), as in MAX, where
//! the check is for statically known dims only.

use rayon::prelude::*;

use super::layout::{Band, band_plan};
use super::{Copier, Kernel, view};
use crate::Result;

pub(super) fn band_part(k: &Kernel) -> Result<()> {
    let Band { x, out, rows, cols, lower, upper, exclude } = band_plan(k)?;
    k.gather(x, &view(x), out)?;
    if out.num_elements() == 0 {
        return Ok(());
    }
    let width = super::elem(x);
    let row_bytes = cols * width;
    // SAFETY: the output is a contiguous host buffer of num_elements elements, written only here.
    let data = unsafe { std::slice::from_raw_parts_mut(out.addr() as *mut u8, out.num_elements() * width) };
    let zero_row = |(r, row): (usize, &mut [u8])| {
        let m = r % rows;
        let lo = lower.map_or(0, |l| m.saturating_sub(l)).min(cols);
        let hi = upper.map_or(cols, |u| (m + u + 1).min(cols));
        let hi = hi.max(lo);
        if exclude {
            row[lo * width..hi * width].fill(0);
        } else {
            row[..lo * width].fill(0);
            row[hi * width..].fill(0);
        }
    };
    if data.len() > 1 << 16 && rayon::current_num_threads() > 1 {
        data.par_chunks_mut(row_bytes).enumerate().with_min_len(64).for_each(zero_row);
    } else {
        data.chunks_mut(row_bytes).enumerate().for_each(zero_row);
    }
    Ok(())
}
