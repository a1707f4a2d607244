//! The layout ops written once for both backends. A backend supplies one primitive, a strided
//! copy of a view of an input into a block of an output (`Copier::place`), and a reader of
//! small integer tensors; everything else (attribute reading, shape checks, the views that
//! express transpose, permute, broadcast_to, concat, stack, split, tile and slice_tensor) is
//! here, with the same messages on the host and the GPU. The ops with kernels of their own
//! (band_part, pad, repeat_interleave with a tensor of counts) get their checked plan here.
//!
//! Shapes come from the buffers: outputs are allocated with their planned shapes, so symbolic
//! attributes (reshape targets, split sizes, tile counts) are already resolved there.

use super::{Kernel, view};
use crate::strided::{View, contiguous_strides};
use crate::{Buffer, Result};

mod combine;
mod slice;

pub(crate) use combine::{Pad, Repeat, concat, pad_plan, repeat_counts, repeat_plan, split, stack, tile};
pub(crate) use slice::slice_tensor;

/// What a backend supplies to the layout ops.
pub(crate) trait Copier<'a> {
    /// The op call, for its attributes, buffers and errors.
    fn kernel(&self) -> &Kernel<'a>;

    /// The values of a (small) integer tensor, read on the host.
    fn ints(&self, b: &Buffer, what: &str) -> Result<Vec<i64>>;

    /// Copies the view `v` of `x` (its element 0 `x_off` elements from x's) into `out`, at
    /// `out_off` elements with the non-negative strides `dst`; the destination range is checked
    /// against the output's size (`check_block`).
    fn place(&self, x: &Buffer, v: &View, x_off: isize, out: &Buffer, out_off: usize, dst: &[isize]) -> Result<()>;

    /// Copies the view `v` of `x` into the whole (contiguous) output `out`.
    fn gather(&self, x: &Buffer, v: &View, out: &Buffer) -> Result<()> {
        let n: usize = v.shape.iter().product();
        if n != out.num_elements() {
            return Err(self.kernel().shape_err(&v.shape, out.shape()));
        }
        self.place(x, v, 0, out, 0, &contiguous_strides(&v.shape))
    }
}

/// Whether a block of shape `v.shape` written at `out_off` with strides `dst` has anything to
/// copy; an error when it does not fit `out` or `source_ok` (the source side's own check) fails.
pub(crate) fn check_block(
    k: &Kernel,
    v: &View,
    out: &Buffer,
    out_off: usize,
    dst: &[isize],
    source_ok: impl FnOnce() -> bool,
) -> Result<bool> {
    if v.shape.contains(&0) {
        return Ok(false);
    }
    let reach = v.shape.iter().zip(dst).map(|(&d, &s)| (d - 1) * s.max(0) as usize).sum::<usize>();
    if dst.len() != v.shape.len() || dst.iter().any(|s| *s < 0) || out_off + reach >= out.num_elements() || !source_ok()
    {
        return Err(k.err(format!(
            "a block of shape {:?} does not fit the result of shape {:?}",
            v.shape,
            out.shape()
        )));
    }
    Ok(true)
}

/// The ops whose result is the input's elements in row-major order, reshaped.
pub(crate) fn row_major<'a>(c: &impl Copier<'a>) -> Result<()> {
    let k = c.kernel();
    let x = k.input(0)?;
    let out = k.out_like(0, x)?;
    if x.num_elements() != out.num_elements() {
        return Err(k.shape_err(x.shape(), out.shape()));
    }
    c.gather(x, &view(x), out)
}

/// The input view with its axes in the order `perm` (output axis i is input axis perm[i]).
fn permuted<'a>(c: &impl Copier<'a>, perm: &[usize]) -> Result<()> {
    let k = c.kernel();
    let x = k.input(0)?;
    let out = k.out_like(0, x)?;
    let v = view(x);
    let p = View {
        shape: perm.iter().map(|&a| v.shape[a]).collect(),
        strides: perm.iter().map(|&a| v.strides[a]).collect(),
    };
    if p.shape != out.shape() {
        return Err(k.shape_err(&p.shape, out.shape()));
    }
    c.gather(x, &p, out)
}

pub(crate) fn transpose<'a>(c: &impl Copier<'a>) -> Result<()> {
    let k = c.kernel();
    let rank = k.input(0)?.rank();
    let a = k.axis("axis_1", k.int("axis_1")?, rank.max(1))?;
    let b = k.axis("axis_2", k.int("axis_2")?, rank.max(1))?;
    let mut perm: Vec<usize> = (0..rank).collect();
    if rank > 0 {
        perm.swap(a, b);
    }
    permuted(c, &perm)
}

pub(crate) fn permute<'a>(c: &impl Copier<'a>) -> Result<()> {
    let k = c.kernel();
    let rank = k.input(0)?.rank();
    let dims = k.ints("dims")?;
    if dims.len() != rank {
        return Err(k.err(format!("dims {dims:?} has {} entries for rank {rank}", dims.len())));
    }
    let mut seen = vec![false; rank];
    let mut perm = Vec::with_capacity(rank);
    for &d in dims {
        let a = k.axis("dims", d, rank)?;
        if std::mem::replace(&mut seen[a], true) {
            return Err(k.err(format!("dims {dims:?} names axis {a} twice")));
        }
        perm.push(a);
    }
    permuted(c, &perm)
}

pub(crate) fn broadcast_to<'a>(c: &impl Copier<'a>) -> Result<()> {
    let k = c.kernel();
    let x = k.input(0)?;
    let out = k.out_like(0, x)?;
    let target = out.shape();
    if let Some(s) = k.inputs.get(1) {
        // The shape tensor is read now; it must agree with the planned result.
        let given = c.ints(s, "shape")?;
        if given.len() != target.len() || given.iter().zip(target).any(|(g, t)| *g != *t as i64) {
            return Err(k.err(format!(
                "the shape tensor holds {given:?} but the result was declared with out_dims {target:?}"
            )));
        }
    }
    if target.len() < x.rank() {
        return Err(k.shape_err(x.shape(), target));
    }
    let lead = target.len() - x.rank();
    let v = view(x);
    let mut b = View { shape: target.to_vec(), strides: vec![0; target.len()] };
    for (i, (&d, &s)) in v.shape.iter().zip(&v.strides).enumerate() {
        let t = target[lead + i];
        if d == t {
            b.strides[lead + i] = s;
        } else if d != 1 {
            return Err(k.err(format!(
                "input dimension {i} ({d}) must be 1 or equal to target dimension {} ({t}) of {target:?}",
                lead + i
            )));
        }
    }
    c.gather(x, &b, out)
}

/// band_part's checked operands: element (m, n) of each [rows, cols] matrix is in the band when
/// `(lower is None or m - n <= lower) and (upper is None or n - m <= upper)`.
pub(crate) struct Band<'a> {
    pub x: &'a Buffer,
    pub out: &'a Buffer,
    pub rows: usize,
    pub cols: usize,
    pub lower: Option<usize>,
    pub upper: Option<usize>,
    /// Zero the band instead of what lies outside it.
    pub exclude: bool,
}

/// band_part's operands; `num_lower`/`num_upper` of None or -1 mean the whole triangle.
pub(crate) fn band_plan<'a>(k: &Kernel<'a>) -> Result<Band<'a>> {
    let x = k.input(0)?;
    let out = k.out_like(0, x)?;
    if out.shape() != x.shape() {
        return Err(k.shape_err(x.shape(), out.shape()));
    }
    let rank = x.rank();
    if rank < 2 {
        return Err(k.err(format!("needs rank 2 or more, got shape {:?}", x.shape())));
    }
    let (rows, cols) = (x.shape()[rank - 2], x.shape()[rank - 1]);
    let exclude = k.boolean("exclude", false)?;
    let mut bands = [None, None];
    for (slot, key) in bands.iter_mut().zip(["num_lower", "num_upper"]) {
        match k.opt_int(key)? {
            None | Some(-1) => {}
            Some(n) if n < -1 => {
                return Err(
                    k.err(format!("{key} must be non-negative (or None or -1 for the whole triangle), got {n}"))
                );
            }
            Some(n) => *slot = Some(n as usize),
        }
    }
    let [lower, upper] = bands;
    Ok(Band { x, out, rows, cols, lower, upper, exclude })
}
