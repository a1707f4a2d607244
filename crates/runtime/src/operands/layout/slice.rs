//! slice_tensor, for both backends: numpy basic indexing as a strided view of the input, gathered
//! into the result. The indices are the graph's `SliceSpec`; here every bound is a number:
//! static dims, symbolic ones the engine has evaluated, and scalar index tensors read now (on
//! the host). As at staging, integer indices must lie in `[-dim, dim - 1]`, and slice bounds in
//! `[-dim, dim]` (step > 0) or `[-dim - 1, dim - 1]` (step < 0); a value outside is an error
//! naming the op, the axis and the value.

use max_graph::Dim;
use max_graph::ops::layout::slice::{Bound, Index, SliceSpec, slice_spec};

use super::super::{Kernel, graph_err};
use super::Copier;
use crate::strided::{View, contiguous_strides};
use crate::{Buffer, Result};

/// Walks the indices, building the view they select.
struct Walk<'k, 'a, C: Copier<'a>> {
    c: &'k C,
    k: &'k Kernel<'a>,
    /// The next index tensor among the inputs.
    next: usize,
}

impl<'a, C: Copier<'a>> Walk<'_, 'a, C> {
    /// The value of the next index tensor (a scalar of an integer dtype).
    fn tensor(&mut self) -> Result<i64> {
        let t: &Buffer = self
            .k
            .input(self.next)
            .map_err(|_| self.k.err("indices: the indices use more index tensors than were given"))?;
        self.next += 1;
        match self.c.ints(t, "indices")?.as_slice() {
            [v] => Ok(*v),
            other => Err(self.k.err(format!("indices: an index tensor must hold one value, got {}", other.len()))),
        }
    }

    /// A dim attribute as a number.
    fn number(&self, d: &Dim) -> Result<i64> {
        d.as_static().ok_or_else(|| self.k.err(format!("indices: the bound {d} is not known at run time")))
    }

    /// The element an integer index selects along an axis of `dim` elements.
    fn index(&self, raw: i64, dim: usize, axis: usize) -> Result<i64> {
        let d = dim as i64;
        let at = if raw < 0 { raw + d } else { raw };
        if at < 0 || at >= d {
            return Err(self.k.err(format!("indices: index {raw} is out of range for dimension {dim} at axis {axis}")));
        }
        Ok(at)
    }

    /// (first element, count) of a slice with optional bounds.
    fn slice(&self, start: Option<i64>, stop: Option<i64>, step: i64, dim: usize, axis: usize) -> Result<(i64, usize)> {
        if step == 0 {
            return Err(self.k.err(format!("indices: slice step cannot be zero (axis {axis})")));
        }
        let d = dim as i64;
        let (lo, hi) = if step > 0 { (0, d) } else { (-1, d - 1) };
        let mut ends = [0i64; 2];
        let defaults = if step > 0 { [lo, hi] } else { [hi, lo] };
        for ((end, bound), default) in ends.iter_mut().zip([start, stop]).zip(defaults) {
            *end = match bound {
                None => default,
                Some(raw) => {
                    let at = if raw < 0 { raw + d } else { raw };
                    if at < lo || at > hi {
                        let range = if step > 0 { "[-dim, dim]" } else { "[-dim - 1, dim - 1]" };
                        return Err(self.k.err(format!(
                            "indices: slice bound {raw} is out of range for dimension {dim} at axis {axis} (bounds must lie in {range} for step {step})"
                        )));
                    }
                    at
                }
            };
        }
        let [first, last] = ends;
        let span = if step > 0 { last - first } else { first - last };
        // ceil(span / |step|), without overflow for steps near the int64 range
        let count = if span <= 0 { 0 } else { ((span - 1) as u64 / step.unsigned_abs() + 1) as i64 };
        Ok((first, count as usize))
    }
}

pub(crate) fn slice_tensor<'a>(c: &impl Copier<'a>) -> Result<()> {
    let k = c.kernel();
    let x = k.input(0)?;
    let out = k.out_like(0, x)?;
    let SliceSpec { indices, consumed } = slice_spec(k.op).map_err(graph_err)?;
    let (shape, strides) = (x.shape(), x.strides());
    if consumed > x.rank() {
        return Err(k.err(format!("indices: {consumed} indices for a tensor of rank {}", x.rank())));
    }
    let mut w = Walk { c, k, next: 1 };
    let n = indices.len();
    let mut v = View { shape: Vec::with_capacity(x.rank() + n), strides: Vec::with_capacity(x.rank() + n) };
    let mut offset = 0isize;
    let mut axis = 0;
    for index in &indices {
        match index {
            Index::At(_) | Index::Tensor => {
                let raw = if let Index::At(d) = index { w.number(d)? } else { w.tensor()? };
                let at = w.index(raw, shape[axis], axis)?;
                offset += at as isize * strides[axis];
                axis += 1;
            }
            Index::Slice(s) => {
                let mut end = |b: &Option<Bound>| -> Result<Option<i64>> {
                    match b {
                        Some(Bound::Tensor) => Ok(Some(w.tensor()?)),
                        Some(Bound::Dim(d)) => Ok(Some(w.number(d)?)),
                        None => Ok(None),
                    }
                };
                let start = end(&s.start)?;
                let stop = end(&s.stop)?;
                let (first, count) = w.slice(start, stop, s.step, shape[axis], axis)?;
                if count > 0 {
                    offset += first as isize * strides[axis];
                }
                v.shape.push(count);
                // (one element or none: any stride; a step near the int64 range would overflow)
                v.strides.push(if count > 1 { strides[axis] * s.step as isize } else { 0 });
                axis += 1;
            }
            Index::NewAxis => {
                v.shape.push(1);
                v.strides.push(0);
            }
            Index::Ellipsis => {
                let fill = x.rank() - consumed;
                v.shape.extend_from_slice(&shape[axis..axis + fill]);
                v.strides.extend_from_slice(&strides[axis..axis + fill]);
                axis += fill;
            }
        }
    }
    if w.next != k.inputs.len() {
        return Err(k.err(format!(
            "indices: the indices use {} index tensors but {} were given",
            w.next - 1,
            k.inputs.len() - 1
        )));
    }
    v.shape.extend_from_slice(&shape[axis..]);
    v.strides.extend_from_slice(&strides[axis..]);
    if v.shape != out.shape() {
        return Err(k.err(format!(
            "indices: the indices select shape {:?} but the result was declared as {:?} (check the out_dim of sized slices)",
            v.shape,
            out.shape()
        )));
    }
    if v.shape.contains(&0) {
        return Ok(());
    }
    c.place(x, &v, offset, out, 0, &contiguous_strides(&v.shape))
}
