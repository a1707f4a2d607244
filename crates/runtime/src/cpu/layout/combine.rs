//! The host kernels of pad and repeat_interleave, over the plans checked in
//! `operands::layout` (which also holds concat, stack, split and tile for both backends): pad
//! fills the result with the pad value and copies the input into its interior; a per-row
//! repeat_interleave copies whole rows.

use std::borrow::Cow;

use rayon::prelude::*;

use super::layout::{Pad, Repeat, pad_plan, repeat_plan};
use super::strided::{self, contiguous_strides};
use super::{Copier, Kernel, elem, view};
use crate::{Buffer, Result};

pub(super) fn pad(k: &Kernel) -> Result<()> {
    let Pad { x, value, out, paddings } = pad_plan(k)?;
    let width = elem(x);
    let mut pattern = vec![0u8; width];
    // SAFETY: `value` is a host buffer of one element of `width` bytes.
    unsafe { std::ptr::copy_nonoverlapping(value.addr() as *const u8, pattern.as_mut_ptr(), width) };
    // SAFETY: the output is a contiguous host buffer of num_elements elements.
    unsafe { strided::fill(out.addr() as *mut u8, &pattern, out.num_elements()) };
    let dst = contiguous_strides(out.shape());
    let off: usize = paddings.chunks(2).zip(&dst).map(|(p, s)| p[0] as usize * *s as usize).sum();
    k.place(x, &view(x), 0, out, off, &dst)
}

pub(super) fn repeat_interleave(k: &Kernel) -> Result<()> {
    match repeat_plan(k)? {
        (x, out, Repeat::View(r)) => k.gather(x, &r, out),
        (x, out, Repeat::Rows { outer, d, inner, counts }) => {
            let src = contiguous(x)?;
            gather_rows(&src, out, outer, d, inner * elem(x), &counts)
        }
    }
}

/// `x`'s elements in row-major order: its own memory when contiguous, else a packed copy.
fn contiguous(x: &Buffer) -> Result<Cow<'_, [u8]>> {
    let bytes = x.num_elements() * elem(x);
    if bytes == 0 {
        return Ok(Cow::Owned(Vec::new()));
    }
    if x.is_contiguous() {
        // SAFETY: a contiguous host buffer's elements are `bytes` bytes from its address, alive
        // as long as `x`.
        return Ok(Cow::Borrowed(unsafe { std::slice::from_raw_parts(x.addr() as *const u8, bytes) }));
    }
    let mut packed = vec![0u8; bytes];
    let dst = contiguous_strides(x.shape());
    // SAFETY: the view of `x` is valid memory; `packed` holds its elements.
    unsafe { strided::copy(x.addr() as *const u8, &view(x), packed.as_mut_ptr(), &dst, elem(x)) };
    Ok(Cow::Owned(packed))
}

/// The result of repeating the rows of `src` ([outer, d] rows of `row` bytes): output row
/// (o, p) is input row (o, j) for the j whose counts cover position p along the axis.
fn gather_rows(src: &[u8], out: &Buffer, outer: usize, d: usize, row: usize, counts: &[i64]) -> Result<()> {
    let which: Vec<usize> = counts.iter().enumerate().flat_map(|(j, &n)| std::iter::repeat_n(j, n as usize)).collect();
    let total = which.len();
    let bytes = outer * total * row;
    if bytes == 0 {
        return Ok(());
    }
    // SAFETY: the output is a contiguous host buffer of outer * total rows (checked by the
    // caller against its shape), not overlapping the input.
    let dst = unsafe { std::slice::from_raw_parts_mut(out.addr() as *mut u8, bytes) };
    let copy_row = |(r, to): (usize, &mut [u8])| {
        let (o, p) = (r / total, r % total);
        let from = (o * d + which[p]) * row;
        to.copy_from_slice(&src[from..from + row]);
    };
    if bytes > 1 << 16 && rayon::current_num_threads() > 1 {
        let min = (4096 / row).max(1);
        dst.par_chunks_mut(row).enumerate().with_min_len(min).for_each(copy_row);
    } else {
        dst.chunks_mut(row).enumerate().for_each(copy_row);
    }
    Ok(())
}
