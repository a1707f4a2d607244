//! slice_tensor on a GPU: the indices build a strided view of the input on the host (exactly as
//! cpu/layout/slice.rs does, with its messages), then one strided copy gathers it. Scalar index
//! tensors are read to the host (one element each).

use max_graph::Dim;

use super::{Gpu, graph_err, host_ints, number};
use crate::Result;
use crate::operands::Kernel;
use crate::strided::{View, contiguous_strides};

const INDEX: i64 = 0;
const SLICE: i64 = 1;
const NEW_AXIS: i64 = 2;
const ELLIPSIS: i64 = 3;
const TENSOR_INDEX: i64 = 4;
const SIZED_SLICE: i64 = 5;

const HAS_START: i64 = 1;
const HAS_STOP: i64 = 2;
const TENSOR_START: i64 = 4;
const TENSOR_STOP: i64 = 8;

struct Walk<'k, 'a> {
    k: &'k Kernel<'a>,
    /// The next index tensor among the inputs.
    next: usize,
}

impl Walk<'_, '_> {
    /// The value of the next index tensor (a scalar of an integer dtype).
    fn tensor(&mut self) -> Result<i64> {
        let t = self
            .k
            .input(self.next)
            .map_err(|_| self.k.err("indices: the indices use more index tensors than were given"))?;
        self.next += 1;
        match host_ints(self.k, t, "indices")?.as_slice() {
            [v] => Ok(*v),
            other => Err(self.k.err(format!("indices: an index tensor must hold one value, got {}", other.len()))),
        }
    }

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

pub(super) fn slice_tensor(g: &Gpu) -> Result<()> {
    let k = &g.k;
    let x = k.input(0)?;
    let out = k.out_like(0, x)?;
    let ctx = k.ctx();
    let kinds = k.ints("kinds")?;
    let starts = ctx.dims("starts").map_err(graph_err)?;
    let stops = ctx.dims("stops").map_err(graph_err)?;
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
    let mut w = Walk { k, next: 1 };
    let mut v = View { shape: Vec::with_capacity(x.rank() + n), strides: Vec::with_capacity(x.rank() + n) };
    let mut offset = 0isize;
    let mut axis = 0;
    for i in 0..n {
        match kinds[i] {
            INDEX | TENSOR_INDEX => {
                let raw = if kinds[i] == INDEX { number(k, &starts[i])? } else { w.tensor()? };
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
                        Ok(Some(number(k, d)?))
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
    g.place(x, &v, offset, out, 0, &contiguous_strides(&v.shape))
}
