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
use crate::ops::{Ctx, Op, one};
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

/// A slice bound: a dim (a number, or symbolic until the engine binds it) or the next index
/// tensor.
#[derive(Clone, Debug, PartialEq)]
pub enum Bound {
    Dim(Dim),
    Tensor,
}

/// A slice entry: its bounds (None where absent), its step and, for a sized slice, its given
/// result dim.
#[derive(Clone, Debug, PartialEq)]
pub struct Slice {
    pub start: Option<Bound>,
    pub stop: Option<Bound>,
    pub step: i64,
    pub out_dim: Option<Dim>,
}

impl Slice {
    /// How many of its bounds are index tensors (known at run time only).
    pub fn tensor_bounds(&self) -> usize {
        [&self.start, &self.stop].iter().filter(|b| matches!(b, Some(Bound::Tensor))).count()
    }
}

/// One index of `x[indices]`.
#[derive(Clone, Debug, PartialEq)]
pub enum Index {
    /// An integer index.
    At(Dim),
    Slice(Slice),
    NewAxis,
    Ellipsis,
    /// The next index tensor, an integer index.
    Tensor,
}

/// slice_tensor's indices (and a store into a slice's), decoded from the attributes and checked
/// once; `sliced_shape` documents the encoding.
#[derive(Clone, Debug, PartialEq)]
pub struct SliceSpec {
    pub indices: Vec<Index>,
    /// The number of input axes the indices select from: all but new axes and the ellipsis.
    pub consumed: usize,
}

impl SliceSpec {
    pub fn parse(ctx: &Ctx) -> Result<SliceSpec> {
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
        if kinds.iter().filter(|k| **k == ELLIPSIS).count() > 1 {
            return Err(ctx.value_err("indices", "at most one Ellipsis (...) is allowed"));
        }
        let mut indices = Vec::with_capacity(n);
        for i in 0..n {
            let bound = |given: i64, tensor: i64, d: &Dim| {
                if kinds[i] == SIZED_SLICE && bounds[i] & tensor != 0 {
                    Some(Bound::Tensor)
                } else {
                    (bounds[i] & given != 0).then(|| Bound::Dim(d.clone()))
                }
            };
            indices.push(match kinds[i] {
                INDEX => Index::At(starts[i].clone()),
                SLICE | SIZED_SLICE => {
                    let out_dim = (kinds[i] == SIZED_SLICE).then(|| out_dims[i].clone());
                    if let Some(want) = out_dim.as_ref().filter(|d| d.as_static().is_some_and(|v| v < 0)) {
                        return Err(ctx.value_err(
                            "indices",
                            format!("the result dim of a sized slice must be non-negative, got {want}"),
                        ));
                    }
                    Index::Slice(Slice {
                        start: bound(HAS_START, TENSOR_START, &starts[i]),
                        stop: bound(HAS_STOP, TENSOR_STOP, &stops[i]),
                        step: steps[i],
                        out_dim,
                    })
                }
                NEW_AXIS => Index::NewAxis,
                ELLIPSIS => Index::Ellipsis,
                TENSOR_INDEX => Index::Tensor,
                k => {
                    return Err(ctx.value_err("indices", format!("malformed slice attributes: unknown index kind {k}")));
                }
            });
        }
        let consumed = indices.iter().filter(|i| !matches!(i, Index::NewAxis | Index::Ellipsis)).count();
        Ok(SliceSpec { indices, consumed })
    }
}

/// The indices of slice_tensor `op`.
pub fn slice_spec(op: &Op) -> Result<SliceSpec> {
    SliceSpec::parse(&Ctx::of_op(op))
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
    let SliceSpec { indices, consumed } = SliceSpec::parse(ctx)?;
    if consumed > x.rank() {
        return Err(ctx.value_err(
            "indices",
            format!("{consumed} indices for a tensor of rank {} ({})", x.rank(), shape_str(&x.shape)),
        ));
    }
    let mut next_input = first;
    let mut axis = 0;
    let mut out = Vec::with_capacity(x.rank() + indices.len());
    for index in &indices {
        match index {
            Index::At(raw) => {
                check_index(ctx, raw, &x.shape[axis], axis)?;
                axis += 1;
            }
            Index::Slice(s) => {
                match &s.out_dim {
                    None => out.push(slice_len(ctx, s, &x.shape[axis], axis)?),
                    Some(want) => {
                        let tensors = s.tensor_bounds();
                        for _ in 0..tensors {
                            scalar_index(ctx, next_input)?;
                            next_input += 1;
                        }
                        if tensors == 0 {
                            let len = slice_len(ctx, s, &x.shape[axis], axis)?;
                            if len.is_static() && want.is_static() && len != *want {
                                return Err(ctx.value_err(
                                    "indices",
                                    format!("the slice at axis {axis} has {len} elements, not the given {want}"),
                                ));
                            }
                        } else if s.step == 0 {
                            return Err(ctx.value_err("indices", format!("slice step cannot be zero (axis {axis})")));
                        }
                        out.push(want.clone());
                    }
                }
                axis += 1;
            }
            Index::NewAxis => out.push(Dim::stat(1)),
            Index::Ellipsis => {
                let fill = x.rank() - consumed;
                out.extend_from_slice(&x.shape[axis..axis + fill]);
                axis += fill;
            }
            Index::Tensor => {
                scalar_index(ctx, next_input)?;
                next_input += 1;
                axis += 1;
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
fn slice_len(ctx: &Ctx, s: &Slice, dim: &Dim, axis: usize) -> Result<Dim> {
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
        (&s.start, if s.step > 0 { lo.clone() } else { hi.clone() }),
        (&s.stop, if s.step > 0 { hi.clone() } else { lo.clone() }),
    ] {
        let at = match bound {
            None | Some(Bound::Tensor) => default,
            Some(Bound::Dim(raw)) => {
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
    // |step| (i64::MIN's as i64::MAX: a span is at most a dim, so both select its first element)
    let stride = Dim::stat(s.step.unsigned_abs().min(i64::MAX as u64) as i64);
    let span = if s.step > 0 { stop.sub(start) } else { start.sub(stop) }.map_err(&err)?;
    // ceil(span / stride): (span + stride - 1) // stride, or for steps past 2^32, where span +
    // stride may overflow (at once, or once a symbolic span is bound), (span - 1) // stride + 1
    let len = if s.step.unsigned_abs() <= 1 << 32 {
        span.add(&stride).and_then(|d| d.sub(&one)).and_then(|d| d.floordiv(&stride))
    } else {
        span.sub(&one).and_then(|d| d.floordiv(&stride)).and_then(|d| d.add(&one))
    }
    .map_err(&err)?;
    Ok(if len.as_static().is_some_and(|v| v < 0) { Dim::stat(0) } else { len })
}

#[cfg(test)]
mod tests;
