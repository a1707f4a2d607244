//! slice_tensor, for both backends: numpy basic indexing as a strided view of the input, gathered
//! into the result. The attribute encoding is the inference's
//! (`max_graph::ops::layout::slice::sliced_shape` documents it); here every bound is a number:
//! static dims, symbolic ones the engine has evaluated, and scalar index tensors read now (on
//! the host). As at staging, integer indices must lie in `[-dim, dim - 1]`, and slice bounds in
//! `[-dim, dim]` (step > 0) or `[-dim - 1, dim - 1]` (step < 0); a value outside is an error
//! naming the op, the axis and the value.

use max_graph::Dim;
use max_graph::ops::layout::slice::{
    ELLIPSIS, HAS_START, HAS_STOP, INDEX, NEW_AXIS, SIZED_SLICE, SLICE, TENSOR_INDEX, TENSOR_START, TENSOR_STOP,
};

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
        let s = step.abs();
        let count = if span <= 0 { 0 } else { (span + s - 1) / s };
        Ok((first, count as usize))
    }
}

pub(crate) fn slice_tensor<'a>(c: &impl Copier<'a>) -> Result<()> {
    let k = c.kernel();
    let x = k.input(0)?;
    let out = k.out_like(0, x)?;
    let ctx = k.ctx();
    let graph = graph_err;
    let kinds = k.ints("kinds")?;
    let starts = ctx.dims("starts").map_err(graph)?;
    let stops = ctx.dims("stops").map_err(graph)?;
    let steps = k.ints("steps")?;
    let bounds = k.ints("bounds")?;
    let n = kinds.len();
    if [starts.len(), stops.len(), steps.len(), bounds.len()].iter().any(|&l| l != n) {
        return Err(k.err("indices: malformed slice attributes (one entry per index expected)"));
    }
    let consumed = kinds.iter().filter(|k| matches!(**k, INDEX | SLICE | TENSOR_INDEX | SIZED_SLICE)).count();
    let (shape, strides) = (x.shape(), x.strides());
    if consumed > x.rank() || kinds.iter().filter(|k| **k == ELLIPSIS).count() > 1 {
        return Err(k.err(format!("indices: {consumed} indices for a tensor of rank {}", x.rank())));
    }
    let mut w = Walk { c, k, next: 1 };
    let mut v = View { shape: Vec::with_capacity(x.rank() + n), strides: Vec::with_capacity(x.rank() + n) };
    let mut offset = 0isize;
    let mut axis = 0;
    for i in 0..n {
        match kinds[i] {
            INDEX | TENSOR_INDEX => {
                let raw = if kinds[i] == INDEX { w.number(&starts[i])? } else { w.tensor()? };
                let at = w.index(raw, shape[axis], axis)?;
                offset += at as isize * strides[axis];
                axis += 1;
            }
            SLICE | SIZED_SLICE => {
                let b = bounds[i];
                let mut end = |given: i64, tensor: i64, d: &Dim| -> Result<Option<i64>> {
                    if kinds[i] == SIZED_SLICE && b & tensor != 0 {
                        Ok(Some(w.tensor()?))
                    } else if b & given != 0 {
                        Ok(Some(w.number(d)?))
                    } else {
                        Ok(None)
                    }
                };
                let start = end(HAS_START, TENSOR_START, &starts[i])?;
                let stop = end(HAS_STOP, TENSOR_STOP, &stops[i])?;
                let (first, count) = w.slice(start, stop, steps[i], shape[axis], axis)?;
                if count > 0 {
                    offset += first as isize * strides[axis];
                }
                v.shape.push(count);
                v.strides.push(strides[axis] * steps[i] as isize);
                axis += 1;
            }
            NEW_AXIS => {
                v.shape.push(1);
                v.strides.push(0);
            }
            ELLIPSIS => {
                let fill = x.rank() - consumed;
                v.shape.extend_from_slice(&shape[axis..axis + fill]);
                v.strides.extend_from_slice(&strides[axis..axis + fill]);
                axis += fill;
            }
            other => {
                return Err(k.err(format!("indices: malformed slice attributes: unknown index kind {other}")));
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
