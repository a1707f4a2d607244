//! The layout ops that join, split, pad or repeat, for both backends: concat, stack, split and
//! tile as copies through the backend's `Copier`, and the checked plans of pad and
//! repeat_interleave (whose kernels differ per backend). The sizes come from the buffers (the
//! planned shapes), cross-checked with each other.

use super::super::{Kernel, view};
use super::Copier;
use crate::strided::{View, contiguous_strides};
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

pub(crate) fn concat<'a>(c: &impl Copier<'a>) -> Result<()> {
    let k = c.kernel();
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
        c.place(x, &view(x), 0, out, at * dst[axis] as usize, &dst)?;
        at += x.shape()[axis];
    }
    if at != out.shape()[axis] {
        return Err(
            k.err(format!("the inputs add up to {at} along axis {axis} but the result has {}", out.shape()[axis]))
        );
    }
    Ok(())
}

pub(crate) fn stack<'a>(c: &impl Copier<'a>) -> Result<()> {
    let k = c.kernel();
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
        c.place(x, &view(x), 0, out, i * all[axis] as usize, &dst)?;
    }
    Ok(())
}

pub(crate) fn split<'a>(c: &impl Copier<'a>) -> Result<()> {
    let k = c.kernel();
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
        c.place(x, &part, off, out, 0, &contiguous_strides(out.shape()))?;
        at += out.shape()[axis];
    }
    if at != x.shape()[axis] {
        return Err(
            k.err(format!("the results add up to {at} along axis {axis} but the input has {}", x.shape()[axis]))
        );
    }
    Ok(())
}

pub(crate) fn tile<'a>(c: &impl Copier<'a>) -> Result<()> {
    // The result, row-major, is the view [r0, d0, r1, d1, ...] of the input with stride 0 on
    // the repeat axes. The counts are the planned result's dims over the input's (the attribute
    // `repeats` may be symbolic; the plan has evaluated it into the result's shape).
    let k = c.kernel();
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
    c.gather(x, &t, out)
}

/// pad's checked operands: `out` is `x` with `paddings[2i]` elements before and
/// `paddings[2i + 1]` after it along axis i, all set to the one element of `value`.
pub(crate) struct Pad<'a> {
    pub x: &'a Buffer,
    pub value: &'a Buffer,
    pub out: &'a Buffer,
    pub paddings: &'a [i64],
}

pub(crate) fn pad_plan<'a>(k: &Kernel<'a>) -> Result<Pad<'a>> {
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
    Ok(Pad { x, value, out, paddings })
}

/// How repeat_interleave's result is made from its input.
pub(crate) enum Repeat {
    /// One count: the result is this view of the input, gathered.
    View(View),
    /// A count per row: the input as [outer, d, inner], whose output row (o, p) along the axis
    /// is input row (o, j) for the j whose counts cover position p.
    Rows { outer: usize, d: usize, inner: usize, counts: Vec<i64> },
}

/// The counts of a repeat_interleave with a tensor of counts over a dimension of `d` elements:
/// one per element (a single count stands for every element), checked, and their sum (None when
/// it overflows).
pub(crate) fn repeat_counts(k: &Kernel, mut counts: Vec<i64>, d: usize) -> Result<(Vec<i64>, Option<usize>)> {
    if counts.len() == 1 {
        counts = vec![counts[0]; d];
    }
    if counts.len() != d {
        return Err(
            k.err(format!("repeats has {} counts for a dimension of size {d} (expected 1 or {d})", counts.len()))
        );
    }
    if let Some(bad) = counts.iter().find(|n| **n < 0) {
        return Err(k.err(format!("repeats must be non-negative, got {bad}")));
    }
    let total = counts.iter().try_fold(0usize, |acc, n| acc.checked_add(*n as usize));
    Ok((counts, total))
}

/// repeat_interleave's input, result and checked plan.
pub(crate) fn repeat_plan<'a>(c: &impl Copier<'a>) -> Result<(&'a Buffer, &'a Buffer, Repeat)> {
    let k = c.kernel();
    let x = k.input(0)?;
    let out = k.out_like(0, x)?;
    let v = view(x);
    // The input as [.., d, ..] with the repeated axis at `axis` (None: flattened).
    let (shape, axis) = match k.opt_int("axis")? {
        Some(a) => (v.shape.clone(), k.axis("axis", a, x.rank())?),
        None => (vec![x.num_elements()], 0),
    };
    let mut want = shape.clone();
    let Some(counts) = k.inputs.get(1) else {
        let n = k.int("repeats")?;
        if n <= 0 {
            return Err(k.err(format!("repeats must be positive, got {n}")));
        }
        want[axis] = shape[axis].saturating_mul(n as usize);
        if want != out.shape() {
            return Err(k.shape_err(&want, out.shape()));
        }
        // Row-major order of the input's view with a stride-0 axis of n after `axis` (after the
        // last axis when flattening).
        let at = match k.opt_int("axis")? {
            Some(_) => axis + 1,
            None => x.rank(),
        };
        let mut r = v.clone();
        r.shape.insert(at, n as usize);
        r.strides.insert(at, 0);
        return Ok((x, out, Repeat::View(r)));
    };
    let d = shape[axis];
    let (counts, total) = repeat_counts(k, c.ints(counts, "repeats")?, d)?;
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
    Ok((x, out, Repeat::Rows { outer, d, inner, counts }))
}
