//! The layout kernels that join, split, pad or repeat: concat, stack, split, tile, pad and
//! repeat_interleave. Each is one or more strided copies between views of the inputs and the
//! outputs; the sizes come from the buffers (the planned shapes), cross-checked with each other.

use std::borrow::Cow;

use rayon::prelude::*;

use super::strided::{self, View, contiguous_strides};
use super::{Kernel, elem, read_ints, view};
use crate::{Buffer, Result};

/// Every input has the dtype of the first.
fn same_dtype(k: &Kernel) -> Result<()> {
    let first = k.input(0)?.dtype();
    for (i, b) in k.inputs.iter().enumerate().skip(1) {
        if b.dtype() != first {
            return Err(k.err(format!("input {i} is {} but input 0 is {first}", b.dtype())));
        }
    }
    Ok(())
}

pub(super) fn concat(k: &Kernel) -> Result<()> {
    same_dtype(k)?;
    let out = k.out_like(0, k.input(0)?)?;
    let rank = out.rank();
    let axis = k.axis("axis", k.int("axis")?, rank)?;
    let dst = contiguous_strides(out.shape());
    let mut at = 0usize;
    for (i, x) in k.inputs.iter().enumerate() {
        let fits =
            x.rank() == rank && x.shape().iter().zip(out.shape()).enumerate().all(|(d, (a, b))| d == axis || a == b);
        if !fits {
            return Err(k.err(format!(
                "input {i} of shape {:?} does not match the result {:?} off axis {axis}",
                x.shape(),
                out.shape()
            )));
        }
        if at + x.shape()[axis] > out.shape()[axis] {
            return Err(k.shape_err(x.shape(), out.shape()));
        }
        k.place(x, &view(x), 0, out, at * dst[axis] as usize, &dst)?;
        at += x.shape()[axis];
    }
    if at != out.shape()[axis] {
        return Err(
            k.err(format!("the inputs add up to {at} along axis {axis} but the result has {}", out.shape()[axis]))
        );
    }
    Ok(())
}

pub(super) fn stack(k: &Kernel) -> Result<()> {
    same_dtype(k)?;
    let out = k.out_like(0, k.input(0)?)?;
    let axis = k.axis("axis", k.int("axis")?, out.rank())?;
    let mut each = out.shape().to_vec();
    each.remove(axis);
    if out.shape()[axis] != k.inputs.len() {
        return Err(k.err(format!(
            "{} inputs stacked into a result with {} entries along axis {axis}",
            k.inputs.len(),
            out.shape()[axis]
        )));
    }
    let all = contiguous_strides(out.shape());
    let mut dst = all.clone();
    dst.remove(axis);
    for (i, x) in k.inputs.iter().enumerate() {
        if x.shape() != each {
            return Err(k.shape_err(x.shape(), &each));
        }
        k.place(x, &view(x), 0, out, i * all[axis] as usize, &dst)?;
    }
    Ok(())
}

pub(super) fn split(k: &Kernel) -> Result<()> {
    let x = k.input(0)?;
    let rank = x.rank();
    let axis = k.axis("axis", k.int("axis")?, rank)?;
    let v = view(x);
    let mut at = 0usize;
    for i in 0..k.outputs.len() {
        let out = k.out_like(i, x)?;
        let fits =
            out.rank() == rank && out.shape().iter().zip(x.shape()).enumerate().all(|(d, (a, b))| d == axis || a == b);
        if !fits || at + out.shape()[axis] > x.shape()[axis] {
            return Err(k.err(format!(
                "result {i} of shape {:?} does not fit the rest of the input {:?} along axis {axis}",
                out.shape(),
                x.shape()
            )));
        }
        let part = View { shape: out.shape().to_vec(), strides: v.strides.clone() };
        let off = at as isize * v.strides[axis];
        k.place(x, &part, off, out, 0, &contiguous_strides(out.shape()))?;
        at += out.shape()[axis];
    }
    if at != x.shape()[axis] {
        return Err(
            k.err(format!("the results add up to {at} along axis {axis} but the input has {}", x.shape()[axis]))
        );
    }
    Ok(())
}

pub(super) fn tile(k: &Kernel) -> Result<()> {
    // The result, row-major, is the view [r0, d0, r1, d1, ...] of the input with stride 0 on
    // the repeat axes. The counts are the planned result's dims over the input's (the attribute
    // `repeats` may be symbolic; the plan has evaluated it into the result's shape).
    let x = k.input(0)?;
    let out = k.out_like(0, x)?;
    if out.rank() != x.rank() {
        return Err(k.shape_err(x.shape(), out.shape()));
    }
    let v = view(x);
    let mut t = View { shape: Vec::with_capacity(2 * x.rank()), strides: Vec::with_capacity(2 * x.rank()) };
    for (i, (&d, &o)) in x.shape().iter().zip(out.shape()).enumerate() {
        // An empty input dim gives an empty result whatever the count.
        let r = o.checked_div(d).unwrap_or(usize::from(o == 0));
        if r == 0 || d * r != o {
            return Err(k.err(format!(
                "the result's shape {:?} is not a tiling of the input's {:?}",
                out.shape(),
                x.shape()
            )));
        }
        t.shape.extend([r, d]);
        t.strides.extend([0, v.strides[i]]);
    }
    k.gather(x, &t, out)
}

pub(super) fn pad(k: &Kernel) -> Result<()> {
    let x = k.input(0)?;
    let value = k.input(1)?;
    let out = k.out_like(0, x)?;
    if value.dtype() != x.dtype() || value.num_elements() != 1 {
        return Err(k.err(format!(
            "the pad value must be one {} element, got {} of shape {:?}",
            x.dtype(),
            value.dtype(),
            value.shape()
        )));
    }
    let paddings = k.ints("paddings")?;
    let ok = paddings.len() == 2 * x.rank()
        && out.rank() == x.rank()
        && paddings.iter().all(|p| *p >= 0)
        && x.shape()
            .iter()
            .zip(out.shape())
            .zip(paddings.chunks(2))
            .all(|((&d, &o), p)| d as u128 + p[0] as u128 + p[1] as u128 == o as u128);
    if !ok {
        return Err(k.err(format!(
            "paddings {paddings:?} of an input of shape {:?} do not give the result's {:?}",
            x.shape(),
            out.shape()
        )));
    }
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
    let x = k.input(0)?;
    let out = k.out_like(0, x)?;
    let v = view(x);
    // The input as [.., d, ..] with the repeated axis at `axis` (None: flattened).
    let (shape, axis) = match k.opt_int("axis")? {
        Some(a) => (v.shape.clone(), k.axis("axis", a, x.rank())?),
        None => (vec![x.num_elements()], 0),
    };
    let mut want = shape.clone();
    match k.inputs.get(1) {
        None => {
            let n = k.int("repeats")?;
            if n <= 0 {
                return Err(k.err(format!("repeats must be positive, got {n}")));
            }
            want[axis] = shape[axis].saturating_mul(n as usize);
            if want != out.shape() {
                return Err(k.shape_err(&want, out.shape()));
            }
            // Row-major order of the input's view with a stride-0 axis of n after `axis` (after
            // the last axis when flattening).
            let at = match k.opt_int("axis")? {
                Some(_) => axis + 1,
                None => x.rank(),
            };
            let mut r = v.clone();
            r.shape.insert(at, n as usize);
            r.strides.insert(at, 0);
            k.gather(x, &r, out)
        }
        Some(counts) => {
            let d = shape[axis];
            let mut c = read_ints(k, counts, "repeats")?;
            if c.len() == 1 {
                c = vec![c[0]; d];
            }
            if c.len() != d {
                return Err(
                    k.err(format!("repeats has {} counts for a dimension of size {d} (expected 1 or {d})", c.len()))
                );
            }
            if let Some(bad) = c.iter().find(|n| **n < 0) {
                return Err(k.err(format!("repeats must be non-negative, got {bad}")));
            }
            let total = c.iter().try_fold(0usize, |acc, n| acc.checked_add(*n as usize));
            want[axis] = total.unwrap_or(usize::MAX);
            if want != out.shape() {
                return Err(k.err(format!(
                    "the repeats add up to {} along axis {axis}, but the result was declared with out_dim {}",
                    want[axis],
                    out.shape().get(axis).copied().unwrap_or(0)
                )));
            }
            let outer: usize = shape[..axis].iter().product();
            let inner: usize = shape[axis + 1..].iter().product();
            let src = contiguous(x)?;
            gather_rows(&src, out, outer, d, inner * elem(x), &c)
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
