//! slice_tensor: numpy-style basic indexing. Integer indices, slices with any non-zero step,
//! `...`, new axes (None), negative indices, slice bounds that are dims (`x[:Dim("a") // 2]`),
//! scalar integer index tensors, and slices given with their result dim (`(slice, out_dim)`,
//! whose bounds may be scalar tensors).
//!
//! Following the docs' restriction, slice bounds must lie in `[-dim, dim]` for a positive step
//! and `[-dim - 1, dim - 1]` for a negative one, and integer indices in `[-dim, dim - 1]`;
//! violations are errors whenever they can be decided (always for static dims). A slice whose
//! bounds cross (`x[4:2]`) is empty, as in numpy.

use super::dim_err;
use crate::dim::Dim;
use crate::error::Result;
use crate::ops::{Ctx, one};
use crate::types::{TensorType, Type, shape_str};

// The `kinds` attribute: what each index is (the runtime's kernels read the same encoding).
pub const INDEX: i64 = 0;
pub const SLICE: i64 = 1;
pub const NEW_AXIS: i64 = 2;
pub const ELLIPSIS: i64 = 3;
pub const TENSOR_INDEX: i64 = 4;
pub const SIZED_SLICE: i64 = 5;

// The `bounds` attribute's bits: which bounds a slice has, and which are index tensors.
pub const HAS_START: i64 = 1;
pub const HAS_STOP: i64 = 2;
pub const TENSOR_START: i64 = 4;
pub const TENSOR_STOP: i64 = 8;

/// One slice entry, read from the attributes.
struct SliceSpec<'a> {
    start: Option<&'a Dim>,
    stop: Option<&'a Dim>,
    step: i64,
}

pub fn slice_tensor(ctx: &Ctx) -> Result<Vec<Type>> {
    let x = ctx.tensor(0)?;
    one(x.with_shape(sliced_shape(ctx, x, 1)?))
}

/// The shape `x[indices]` has, for slice_tensor and for ops that store into a slice (such as
/// buffer_store_slice). The index tensors are the op's inputs from `first` on.
///
/// attrs, one entry per index:
///   kinds: Ints — 0 integer index (its value in `starts`), 1 slice, 2 new axis (None),
///          3 ellipsis, 4 tensor index (the next index tensor), 5 sized slice: a slice whose
///          result dim is given in `out_dims`.
///   starts, stops: Dims — slice bounds (0 where absent or unused).
///   steps: Ints — slice steps (1 for entries that are not slices).
///   bounds: Ints — bit 0: start given, bit 1: stop given, bit 2: start is the next index
///          tensor, bit 3: stop is the next index tensor (bits 2 and 3 for sized slices only).
///   out_dims: Dims — the result dim of each sized slice (0 elsewhere).
/// Index tensors are scalar integer tensors, in the order the indices use them.
pub fn sliced_shape(ctx: &Ctx, x: &TensorType, first: usize) -> Result<Vec<Dim>> {
    let kinds = ctx.ints("kinds")?;
    let starts = ctx.dims("starts")?;
    let stops = ctx.dims("stops")?;
    let steps = ctx.ints("steps")?;
    let bounds = ctx.ints("bounds")?;
    let out_dims = ctx.dims("out_dims")?;
    let n = kinds.len();
    if [starts.len(), stops.len(), steps.len(), bounds.len(), out_dims.len()].iter().any(|&l| l != n) {
        return Err(ctx.value_err("indices", "malformed slice attributes: kinds, starts, stops, steps, bounds and out_dims must have one entry per index"));
    }
    let consumed = kinds.iter().filter(|k| matches!(**k, INDEX | SLICE | TENSOR_INDEX | SIZED_SLICE)).count();
    if kinds.iter().filter(|k| **k == ELLIPSIS).count() > 1 {
        return Err(ctx.value_err("indices", "at most one Ellipsis (...) is allowed"));
    }
    if consumed > x.rank() {
        return Err(ctx.value_err(
            "indices",
            format!("{consumed} indices for a tensor of rank {} ({})", x.rank(), shape_str(&x.shape)),
        ));
    }
    let mut next_input = first;
    let mut axis = 0;
    let mut out = Vec::with_capacity(x.rank() + n);
    for i in 0..n {
        let spec = SliceSpec {
            start: (bounds[i] & HAS_START != 0).then_some(&starts[i]),
            stop: (bounds[i] & HAS_STOP != 0).then_some(&stops[i]),
            step: steps[i],
        };
        match kinds[i] {
            INDEX => {
                check_index(ctx, &starts[i], &x.shape[axis], axis)?;
                axis += 1;
            }
            SLICE => {
                out.push(slice_len(ctx, &spec, &x.shape[axis], axis)?);
                axis += 1;
            }
            NEW_AXIS => out.push(Dim::stat(1)),
            ELLIPSIS => {
                let fill = x.rank() - consumed;
                out.extend_from_slice(&x.shape[axis..axis + fill]);
                axis += fill;
            }
            TENSOR_INDEX => {
                scalar_index(ctx, next_input)?;
                next_input += 1;
                axis += 1;
            }
            SIZED_SLICE => {
                let want = &out_dims[i];
                if want.as_static().is_some_and(|v| v < 0) {
                    return Err(ctx.value_err(
                        "indices",
                        format!("the result dim of a sized slice must be non-negative, got {want}"),
                    ));
                }
                let tensors = [TENSOR_START, TENSOR_STOP].iter().filter(|b| bounds[i] & **b != 0).count();
                for _ in 0..tensors {
                    scalar_index(ctx, next_input)?;
                    next_input += 1;
                }
                if tensors == 0 {
                    let len = slice_len(ctx, &spec, &x.shape[axis], axis)?;
                    if len.is_static() && want.is_static() && len != *want {
                        return Err(ctx.value_err(
                            "indices",
                            format!("the slice at axis {axis} has {len} elements, not the given {want}"),
                        ));
                    }
                } else if spec.step == 0 {
                    return Err(ctx.value_err("indices", format!("slice step cannot be zero (axis {axis})")));
                }
                out.push(want.clone());
                axis += 1;
            }
            k => {
                return Err(ctx.value_err("indices", format!("malformed slice attributes: unknown index kind {k}")));
            }
        }
    }
    if next_input != ctx.inputs.len() {
        let given = ctx.inputs.len().saturating_sub(first);
        return Err(
            ctx.value_err("indices", format!("the indices use {} tensors but {given} were given", next_input - first))
        );
    }
    out.extend_from_slice(&x.shape[axis..]);
    Ok(out)
}

/// A scalar integer tensor used as an index or a bound.
fn scalar_index(ctx: &Ctx, i: usize) -> Result<()> {
    let t = ctx.tensor(i)?;
    if !t.dtype.is_integral() {
        return Err(ctx.type_err(&ctx.arg(i), format!("an index tensor must have an integer dtype, got {}", t.dtype)));
    }
    if t.rank() != 0 {
        return Err(
            ctx.value_err(&ctx.arg(i), format!("an index tensor must be a scalar, got shape {}", shape_str(&t.shape)))
        );
    }
    Ok(())
}

/// `raw` counted from the end when it is a negative number.
fn absolute(ctx: &Ctx, raw: &Dim, dim: &Dim) -> Result<Dim> {
    match raw.as_static() {
        Some(v) if v < 0 => dim.add(raw).map_err(dim_err(ctx, "indices")),
        _ => Ok(raw.clone()),
    }
}

/// Whether `lo <= v <= hi` is known to be false.
fn surely_outside(v: &Dim, lo: &Dim, hi: &Dim) -> Result<bool> {
    let below = v.sub(lo)?.as_static().is_some_and(|d| d < 0);
    let above = hi.sub(v)?.as_static().is_some_and(|d| d < 0);
    Ok(below || above)
}

fn check_index(ctx: &Ctx, raw: &Dim, dim: &Dim, axis: usize) -> Result<()> {
    let at = absolute(ctx, raw, dim)?;
    let last = dim.sub(&Dim::stat(1)).map_err(dim_err(ctx, "indices"))?;
    if surely_outside(&at, &Dim::stat(0), &last).map_err(dim_err(ctx, "indices"))? {
        return Err(ctx.value_err("indices", format!("index {raw} is out of range for dimension {dim} at axis {axis}")));
    }
    Ok(())
}

/// The number of elements a slice selects from a dim.
fn slice_len(ctx: &Ctx, s: &SliceSpec, dim: &Dim, axis: usize) -> Result<Dim> {
    let err = dim_err(ctx, "indices");
    if s.step == 0 {
        return Err(ctx.value_err("indices", format!("slice step cannot be zero (axis {axis})")));
    }
    let one = Dim::stat(1);
    // Positions a bound may take, after counting negative ones from the end: 0..=dim going
    // forward, and -1..=dim-1 going backward (where -1 is "before the first element").
    let (lo, hi) = if s.step > 0 { (Dim::stat(0), dim.clone()) } else { (Dim::stat(-1), dim.sub(&one).map_err(&err)?) };
    let mut ends = Vec::with_capacity(2);
    for (bound, default) in [
        (s.start, if s.step > 0 { lo.clone() } else { hi.clone() }),
        (s.stop, if s.step > 0 { hi.clone() } else { lo.clone() }),
    ] {
        let at = match bound {
            None => default,
            Some(raw) => {
                let at = absolute(ctx, raw, dim)?;
                if surely_outside(&at, &lo, &hi).map_err(&err)? {
                    let range = if s.step > 0 { "[-dim, dim]" } else { "[-dim - 1, dim - 1]" };
                    return Err(ctx.value_err(
                        "indices",
                        format!("slice bound {raw} is out of range for dimension {dim} at axis {axis} (bounds must lie in {range} for step {})", s.step),
                    ));
                }
                at
            }
        };
        ends.push(at);
    }
    let (start, stop) = (&ends[0], &ends[1]);
    let stride = Dim::stat(s.step.abs());
    let span = if s.step > 0 { stop.sub(start) } else { start.sub(stop) }.map_err(&err)?;
    let len = span.add(&stride).and_then(|d| d.sub(&one)).and_then(|d| d.floordiv(&stride)).map_err(&err)?;
    Ok(if len.as_static().is_some_and(|v| v < 0) { Dim::stat(0) } else { len })
}

#[cfg(test)]
mod tests;
