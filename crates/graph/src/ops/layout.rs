//! Layout ops: the ones that move, view, join, split or repeat elements without computing new
//! values. This file holds the single-input reshapes and views (reshape, flatten, squeeze,
//! unsqueeze, transpose, permute, broadcast_to, as_interleaved_complex, band_part, transfer_to);
//! `layout/combine.rs` the ops that join, split, pad or repeat tensors, and `layout/slice.rs`
//! numpy-style slicing.
//!
//! Output dims are computed with the Dim algebra, so symbolic and algebraic dims flow through
//! (`reshape([batch, 3], [-1])` gives `batch * 3`). Where the docs leave an error type open, the
//! reference implementation's type is used.

use super::{Ctx, OpKind, one};
use crate::dim::Dim;
use crate::error::{GraphError, Result};
use crate::types::{TensorType, Type, shape_str};

mod combine;
pub mod slice;

pub fn infer(ctx: &Ctx) -> Result<Vec<Type>> {
    use OpKind::*;
    match ctx.kind {
        Reshape => reshape(ctx),
        Flatten => flatten(ctx),
        Squeeze => squeeze(ctx),
        Unsqueeze => unsqueeze(ctx),
        Transpose => transpose(ctx),
        Permute => permute(ctx),
        BroadcastTo => broadcast_to(ctx),
        AsInterleavedComplex => as_interleaved_complex(ctx),
        BandPart => band_part(ctx),
        TransferTo => {
            // attrs: device: Device, where the result lives.
            ctx.expect_inputs(1)?;
            let x = ctx.tensor(0)?;
            one(TensorType { device: ctx.device("device")?, ..x.clone() })
        }
        Concat => combine::concat(ctx),
        Stack => combine::stack(ctx),
        Split => combine::split(ctx),
        Tile => combine::tile(ctx),
        Pad => combine::pad(ctx),
        RepeatInterleave => combine::repeat_interleave(ctx),
        Slice => slice::slice_tensor(ctx),
        _ => Err(ctx.value_err("op", "not a layout op")),
    }
}

/// Dim arithmetic failures (overflow, division by zero) reworded as errors of `arg`.
fn dim_err<'a>(ctx: &'a Ctx, arg: &'a str) -> impl Fn(GraphError) -> GraphError + 'a {
    move |e| ctx.value_err(arg, e.to_string())
}

/// The number of elements of `shape`, as a canonical dim.
fn product(ctx: &Ctx, arg: &str, shape: &[Dim]) -> Result<Dim> {
    shape.iter().try_fold(Dim::stat(1), |acc, d| acc.mul(d)).map_err(dim_err(ctx, arg))
}

fn reshape(ctx: &Ctx) -> Result<Vec<Type>> {
    // attrs: shape: Dims, the target shape; a static -1 marks the one dim to infer.
    ctx.expect_inputs(1)?;
    let x = ctx.tensor(0)?;
    let target = ctx.dims("shape")?;
    let mut infer_at = None;
    for (i, d) in target.iter().enumerate() {
        match d.as_static() {
            Some(-1) if infer_at.is_some() => {
                return Err(
                    ctx.value_err("shape", format!("at most one -1 dimension is allowed, got {}", shape_str(target)))
                );
            }
            Some(-1) => infer_at = Some(i),
            Some(n) if n < 0 => {
                return Err(ctx.value_err(
                    "shape",
                    format!("dimensions must be non-negative (or -1 to infer one), got {}", shape_str(target)),
                ));
            }
            _ => {}
        }
    }
    let total = product(ctx, "shape", &x.shape)?;
    let mut out = target.to_vec();
    if let Some(k) = infer_at {
        let others: Vec<Dim> = target.iter().enumerate().filter(|(i, _)| *i != k).map(|(_, d)| d.clone()).collect();
        let known = product(ctx, "shape", &others)?;
        if known.as_static() == Some(0) {
            return Err(ctx.value_err(
                "shape",
                format!("cannot infer the -1 dimension of {} when another dimension is 0", shape_str(target)),
            ));
        }
        out[k] = total.floordiv(&known).map_err(dim_err(ctx, "shape"))?;
    }
    let count = product(ctx, "shape", &out)?;
    if count != total {
        return Err(ctx.value_err(
            "shape",
            format!(
                "input and output number of elements must match: {} has {total} elements, {} has {count} (insert a rebind if they are equal at run time)",
                shape_str(&x.shape),
                shape_str(&out)
            ),
        ));
    }
    one(x.with_shape(out))
}

fn flatten(ctx: &Ctx) -> Result<Vec<Type>> {
    // attrs: start_dim: Int, end_dim: Int (inclusive; negative counts from the end). A scalar
    // flattens like a rank-1 tensor of one element.
    ctx.expect_inputs(1)?;
    let x = ctx.tensor(0)?;
    let shape: Vec<Dim> = if x.rank() == 0 { vec![Dim::stat(1)] } else { x.shape.clone() };
    let start = ctx.axis("start_dim", ctx.int("start_dim")?, shape.len())?;
    let end = ctx.axis("end_dim", ctx.int("end_dim")?, shape.len())?;
    if start > end {
        return Err(ctx.value_err(
            "start_dim",
            format!("start_dim ({start}) comes after end_dim ({end}) for shape {}", shape_str(&x.shape)),
        ));
    }
    let mut out = shape[..start].to_vec();
    out.push(product(ctx, "x", &shape[start..=end])?);
    out.extend_from_slice(&shape[end + 1..]);
    one(x.with_shape(out))
}

fn squeeze(ctx: &Ctx) -> Result<Vec<Type>> {
    // attrs: axis: Int, the dim to remove; it must be a static 1.
    ctx.expect_inputs(1)?;
    let x = ctx.tensor(0)?;
    let axis = ctx.axis("axis", ctx.int("axis")?, x.rank())?;
    if x.shape[axis].as_static() != Some(1) {
        return Err(ctx.value_err(
            "axis",
            format!(
                "the squeezed dimension must be 1, got {} at axis {axis} of {}",
                x.shape[axis],
                shape_str(&x.shape)
            ),
        ));
    }
    let mut out = x.shape.clone();
    out.remove(axis);
    one(x.with_shape(out))
}

fn unsqueeze(ctx: &Ctx) -> Result<Vec<Type>> {
    // attrs: axis: Int, where the new 1 goes, in -(rank + 1)..=rank.
    ctx.expect_inputs(1)?;
    let x = ctx.tensor(0)?;
    let raw = ctx.int("axis")?;
    let r = x.rank() as i64;
    if raw < -(r + 1) || raw > r {
        // A ValueError, as the reference raises for this op.
        return Err(
            ctx.value_err("axis", format!("axis {raw} is out of range for rank {r} (expected {}..={r})", -(r + 1)))
        );
    }
    let axis = if raw < 0 { raw + r + 1 } else { raw } as usize;
    let mut out = x.shape.clone();
    out.insert(axis, Dim::stat(1));
    one(x.with_shape(out))
}

fn transpose(ctx: &Ctx) -> Result<Vec<Type>> {
    // attrs: axis_1: Int, axis_2: Int. A scalar accepts the axes 0 and -1 and stays as it is.
    ctx.expect_inputs(1)?;
    let x = ctx.tensor(0)?;
    let rank = x.rank().max(1);
    let a = ctx.axis("axis_1", ctx.int("axis_1")?, rank)?;
    let b = ctx.axis("axis_2", ctx.int("axis_2")?, rank)?;
    let mut out = x.shape.clone();
    if x.rank() > 0 {
        out.swap(a, b);
    }
    one(x.with_shape(out))
}

fn permute(ctx: &Ctx) -> Result<Vec<Type>> {
    // attrs: dims: Ints, the input axis each output axis takes (negative counts from the end).
    ctx.expect_inputs(1)?;
    let x = ctx.tensor(0)?;
    let dims = ctx.ints("dims")?;
    if dims.len() != x.rank() {
        return Err(
            ctx.value_err("dims", format!("{dims:?} has {} entries but the input has rank {}", dims.len(), x.rank()))
        );
    }
    let mut seen = vec![false; x.rank()];
    let mut out = Vec::with_capacity(x.rank());
    for &d in dims {
        let a = ctx.axis("dims", d, x.rank())?;
        if seen[a] {
            return Err(ctx.value_err("dims", format!("{dims:?} names axis {a} twice")));
        }
        seen[a] = true;
        out.push(x.shape[a].clone());
    }
    one(x.with_shape(out))
}

fn broadcast_to(ctx: &Ctx) -> Result<Vec<Type>> {
    // Inputs: x, and optionally `shape` as a rank-1 integer tensor (read at run time).
    // attrs: shape: Dims, the target, when it is given as dims; out_dims: Dims, the result's
    // dims, when the target is a tensor.
    let x = ctx.tensor(0)?;
    let (key, target) = match ctx.inputs.len() {
        1 => ("shape", ctx.dims("shape")?),
        2 => {
            let s = ctx.tensor(1)?;
            if !s.dtype.is_integral() {
                return Err(
                    ctx.type_err("shape", format!("a tensor-valued shape must have an integer dtype, got {}", s.dtype))
                );
            }
            if s.rank() != 1 {
                return Err(ctx.value_err(
                    "shape",
                    format!("a tensor-valued shape must have rank 1, got {}", shape_str(&s.shape)),
                ));
            }
            let out = ctx
                .dims("out_dims")
                .map_err(|_| ctx.value_err("out_dims", "out_dims must be given with a tensor-valued shape"))?;
            if s.shape[0].as_static().is_some_and(|n| n != out.len() as i64) {
                return Err(ctx.value_err(
                    "out_dims",
                    format!("{} has {} dims but the shape tensor holds {}", shape_str(out), out.len(), s.shape[0]),
                ));
            }
            ("out_dims", out)
        }
        n => return Err(ctx.value_err("inputs", format!("expected 1 or 2 inputs, got {n}"))),
    };
    if let Some(d) = target.iter().find(|d| d.as_static().is_some_and(|n| n < 0)) {
        // A TypeError, as the reference raises: the result type itself would be invalid.
        return Err(
            ctx.type_err(key, format!("static dimensions must be non-negative, got {d} in {}", shape_str(target)))
        );
    }
    if target.len() < x.rank() {
        return Err(ctx.value_err(
            key,
            format!(
                "the target rank {} is less than the input's rank {} ({})",
                target.len(),
                x.rank(),
                shape_str(&x.shape)
            ),
        ));
    }
    let lead = target.len() - x.rank();
    for (i, d) in x.shape.iter().enumerate() {
        let t = &target[lead + i];
        if d != t && d.as_static() != Some(1) {
            return Err(ctx.value_err(
                key,
                format!(
                    "input dimension {i} ({d}) must be 1 or equal to target dimension {} ({t}) of {} (insert a rebind if they are equal at run time)",
                    lead + i,
                    shape_str(target)
                ),
            ));
        }
    }
    one(x.with_shape(target.to_vec()))
}

fn as_interleaved_complex(ctx: &Ctx) -> Result<Vec<Type>> {
    // No attrs. The last dim (pairs of real, imag) is halved and a dim of 2 is appended.
    ctx.expect_inputs(1)?;
    let x = ctx.tensor(0)?;
    let Some(last) = x.shape.last() else {
        return Err(ctx.value_err("x", "needs rank 1 or more: its last dimension holds (real, imag) pairs"));
    };
    let two = Dim::stat(2);
    let half = last.floordiv(&two).map_err(dim_err(ctx, "x"))?;
    if half.mul(&two).map_err(dim_err(ctx, "x"))? != *last {
        if last.is_static() {
            return Err(ctx.value_err("x", format!("the last dimension must be even, got {last}")));
        }
        return Err(
            ctx.type_err("x", format!("the last dimension must be static (or a known multiple of 2), got {last}"))
        );
    }
    let mut out = x.shape[..x.rank() - 1].to_vec();
    out.push(half);
    out.push(two);
    one(x.with_shape(out))
}

fn band_part(ctx: &Ctx) -> Result<Vec<Type>> {
    // attrs: num_lower: Int or None, num_upper: Int or None (-1 also means the whole triangle),
    // exclude: Bool. The shape and dtype are the input's.
    ctx.expect_inputs(1)?;
    let x = ctx.tensor(0)?;
    if x.rank() < 2 {
        return Err(ctx.value_err(
            "x",
            format!("needs rank 2 or more (the last two axes are the matrices), got {}", shape_str(&x.shape)),
        ));
    }
    let rows = &x.shape[x.rank() - 2];
    let cols = &x.shape[x.rank() - 1];
    for (key, bound) in [("num_lower", rows), ("num_upper", cols)] {
        if let Some(n) = ctx.opt_int(key)? {
            if n < -1 {
                return Err(
                    ctx.value_err(key, format!("must be non-negative (or None or -1 for the whole triangle), got {n}"))
                );
            }
            if bound.as_static().is_some_and(|b| n >= b) {
                return Err(ctx.value_err(key, format!("{n} is out of bounds for dimension size {bound}")));
            }
        }
    }
    ctx.boolean("exclude", false)?;
    one(x.clone())
}

#[cfg(test)]
mod tests;
