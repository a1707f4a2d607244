//! Layout ops that join, split, pad or repeat tensors: concat, stack, split, tile, pad and
//! repeat_interleave.

use super::{dim_err, product};
use crate::dim::Dim;
use crate::error::Result;
use crate::ops::{Ctx, one};
use crate::types::{TensorType, Type, shape_str};

/// The variadic inputs of concat and stack: at least one tensor, one dtype, one device.
fn joined<'a>(ctx: &Ctx<'a>, what: &str) -> Result<Vec<&'a TensorType>> {
    if ctx.inputs.is_empty() {
        return Err(ctx.value_err(ctx.kind.arg_names()[0], format!("must provide at least one value to {what}")));
    }
    let ts = (0..ctx.inputs.len()).map(|i| ctx.tensor(i)).collect::<Result<Vec<_>>>()?;
    for (i, t) in ts.iter().enumerate().skip(1) {
        if t.dtype != ts[0].dtype {
            // A ValueError, as the reference raises for both ops.
            return Err(ctx.value_err(
                &ctx.arg(i),
                format!(
                    "all inputs must have the same dtype: {} is {}, {} is {}",
                    ctx.arg(i),
                    t.dtype,
                    ctx.arg(0),
                    ts[0].dtype
                ),
            ));
        }
    }
    let all: Vec<usize> = (0..ts.len()).collect();
    ctx.same_device(&all)?;
    Ok(ts)
}

pub fn concat(ctx: &Ctx) -> Result<Vec<Type>> {
    // Inputs: the tensors to join (variadic). attrs: axis: Int. The axis dim of the result is
    // the sum of the inputs' (symbolic sums allowed); the other dims must be equal.
    let ts = joined(ctx, "concat")?;
    let first = ts[0];
    for (i, t) in ts.iter().enumerate().skip(1) {
        if t.rank() != first.rank() {
            return Err(ctx.value_err(
                &ctx.arg(i),
                format!(
                    "all inputs must have the same rank: {} has rank {}, {} has rank {}",
                    ctx.arg(i),
                    t.rank(),
                    ctx.arg(0),
                    first.rank()
                ),
            ));
        }
    }
    let axis = ctx.axis("axis", ctx.int("axis")?, first.rank())?;
    let mut total = Dim::stat(0);
    for (i, t) in ts.iter().enumerate() {
        for (k, (a, b)) in t.shape.iter().zip(&first.shape).enumerate() {
            if k != axis && a != b {
                return Err(ctx.value_err(
                    &ctx.arg(i),
                    format!(
                        "inputs differ on non-concat axis {k}: {a} in {} and {b} in {} (insert a rebind if they are equal at run time)",
                        ctx.arg(i),
                        ctx.arg(0)
                    ),
                ));
            }
        }
        total = total.add(&t.shape[axis]).map_err(dim_err(ctx, "original_vals"))?;
    }
    let mut out = first.shape.clone();
    out[axis] = total;
    one(first.with_shape(out))
}

pub fn stack(ctx: &Ctx) -> Result<Vec<Type>> {
    // Inputs: the tensors to stack (variadic), all of one shape. attrs: axis: Int, where the
    // new axis goes, in -(rank + 1)..=rank.
    let ts = joined(ctx, "stack")?;
    let first = ts[0];
    for (i, t) in ts.iter().enumerate().skip(1) {
        if t.shape != first.shape {
            return Err(ctx.value_err(
                &ctx.arg(i),
                format!(
                    "all inputs must have the same shape: {} is {}, {} is {}",
                    ctx.arg(i),
                    shape_str(&t.shape),
                    ctx.arg(0),
                    shape_str(&first.shape)
                ),
            ));
        }
    }
    let axis = ctx.axis("axis", ctx.int("axis")?, first.rank() + 1)?;
    let mut out = first.shape.clone();
    out.insert(axis, Dim::stat(ts.len() as i64));
    one(first.with_shape(out))
}

pub fn split(ctx: &Ctx) -> Result<Vec<Type>> {
    // attrs: split_sizes: Dims, one per result (static or symbolic); axis: Int. The sizes must
    // add up to the axis dim (canonically, so [b - 1, 1] splits b).
    ctx.expect_inputs(1)?;
    let x = ctx.tensor(0)?;
    let sizes = ctx.dims("split_sizes")?;
    let axis = ctx.axis("axis", ctx.int("axis")?, x.rank())?;
    if let Some(bad) = sizes.iter().find(|d| d.as_static().is_some_and(|n| n < 0)) {
        return Err(
            ctx.value_err("split_sizes", format!("sizes must be non-negative, got {bad} in {}", shape_str(sizes)))
        );
    }
    let sum = sizes.iter().try_fold(Dim::stat(0), |acc, d| acc.add(d)).map_err(dim_err(ctx, "split_sizes"))?;
    if sum != x.shape[axis] {
        return Err(ctx.value_err(
            "split_sizes",
            format!(
                "sizes {} add up to {sum}, not to the dimension {} at axis {axis}",
                shape_str(sizes),
                x.shape[axis]
            ),
        ));
    }
    Ok(sizes
        .iter()
        .map(|s| {
            let mut out = x.shape.clone();
            out[axis] = s.clone();
            Type::Tensor(x.with_shape(out))
        })
        .collect())
}

pub fn tile(ctx: &Ctx) -> Result<Vec<Type>> {
    // attrs: repeats: Dims, one positive count per input dim (symbolic counts allowed).
    ctx.expect_inputs(1)?;
    let x = ctx.tensor(0)?;
    let repeats = ctx.dims("repeats")?;
    if repeats.len() != x.rank() {
        return Err(ctx.value_err(
            "repeats",
            format!("needs one entry per input dim: {} for shape {}", shape_str(repeats), shape_str(&x.shape)),
        ));
    }
    if let Some(bad) = repeats.iter().find(|d| d.as_static().is_some_and(|n| n <= 0)) {
        return Err(
            ctx.value_err("repeats", format!("repeats must all be positive, got {bad} in {}", shape_str(repeats)))
        );
    }
    let out = x.shape.iter().zip(repeats).map(|(d, r)| d.mul(r)).collect::<std::result::Result<Vec<_>, _>>();
    one(x.with_shape(out.map_err(dim_err(ctx, "repeats"))?))
}

pub fn pad(ctx: &Ctx) -> Result<Vec<Type>> {
    // Inputs: input, and value (a scalar of the input's dtype, the fill). attrs: paddings: Ints,
    // [before_0, after_0, before_1, after_1, ...], non-negative; mode: Str, only "constant".
    ctx.expect_inputs(2)?;
    let x = ctx.tensor(0)?;
    let value = ctx.tensor(1)?;
    let mode = ctx.string("mode")?;
    if mode != "constant" {
        return Err(ctx.value_err("mode", format!("only 'constant' padding is supported, got {mode:?}")));
    }
    let paddings = ctx.ints("paddings")?;
    if paddings.len() != 2 * x.rank() {
        return Err(ctx.value_err(
            "paddings",
            format!(
                "needs 2 values (before, after) per input dim, {} for shape {}, got {}",
                2 * x.rank(),
                shape_str(&x.shape),
                paddings.len()
            ),
        ));
    }
    if paddings.iter().any(|&p| p < 0) {
        return Err(ctx.value_err("paddings", format!("padding values must be non-negative, got {paddings:?}")));
    }
    if value.rank() != 0 {
        return Err(ctx.value_err("value", format!("must be a scalar, got shape {}", shape_str(&value.shape))));
    }
    if value.dtype != x.dtype {
        return Err(ctx.type_err("value", format!("must have the input's dtype {}, got {}", x.dtype, value.dtype)));
    }
    ctx.same_device(&[0, 1])?;
    let out = x
        .shape
        .iter()
        .zip(paddings.chunks(2))
        .map(|(d, p)| match p[0].checked_add(p[1]) {
            Some(both) => d.add(&Dim::stat(both)),
            None => Err(crate::dim::overflow()),
        })
        .collect::<std::result::Result<Vec<_>, _>>();
    one(x.with_shape(out.map_err(dim_err(ctx, "paddings"))?))
}

pub fn repeat_interleave(ctx: &Ctx) -> Result<Vec<Type>> {
    // Inputs: x, and optionally `repeats` as an integer tensor (a scalar, or one count per
    // element along the axis). attrs: repeats: Int, the count when it is a number; axis: Int or
    // None (None repeats the flattened input); out_dim: Dims of one dim, required with a tensor
    // count (the result's size along the axis is then data-dependent).
    let x = ctx.tensor(0)?;
    let (mut shape, axis) = match ctx.opt_int("axis")? {
        None => (vec![product(ctx, "x", &x.shape)?], 0),
        Some(a) => {
            let r = x.rank() as i64;
            if a < -r || a >= r {
                // A ValueError, as the docs of this op say.
                return Err(ctx.value_err("axis", format!("axis {a} is out of range for rank {r}")));
            }
            (x.shape.clone(), if a < 0 { a + r } else { a } as usize)
        }
    };
    let out_dim = match ctx.opt_dims("out_dim")? {
        None => None,
        Some([d]) if d.as_static().is_some_and(|n| n < 0) => {
            return Err(ctx.value_err("out_dim", format!("must be non-negative, got {d}")));
        }
        Some([d]) => Some(d.clone()),
        Some(other) => {
            return Err(ctx.value_err("out_dim", format!("must be a single dim, got {}", shape_str(other))));
        }
    };
    let dim = match ctx.inputs.len() {
        1 => {
            let n = ctx.int("repeats")?;
            if n <= 0 {
                return Err(ctx.value_err("repeats", format!("must be positive, got {n}")));
            }
            let dim = shape[axis].mul(&Dim::stat(n)).map_err(dim_err(ctx, "repeats"))?;
            if let (Some(want), Some(got)) = (out_dim.as_ref().and_then(Dim::as_static), dim.as_static())
                && want != got
            {
                return Err(ctx.value_err("out_dim", format!("{want} contradicts the repeated size {got}")));
            }
            dim
        }
        2 => {
            let r = ctx.tensor(1)?;
            if !r.dtype.is_integral() {
                return Err(ctx.type_err("repeats", format!("must have an integer dtype, got {}", r.dtype)));
            }
            if r.rank() > 1 {
                return Err(
                    ctx.value_err("repeats", format!("must be a scalar or rank 1, got shape {}", shape_str(&r.shape)))
                );
            }
            if let (Some(len), Some(size)) = (r.shape.first().and_then(Dim::as_static), shape[axis].as_static())
                && len != 1
                && len != size
            {
                return Err(ctx.value_err(
                    "repeats",
                    format!("has {len} counts for a dimension of size {size} (expected 1 or {size})"),
                ));
            }
            out_dim.ok_or_else(|| ctx.value_err("out_dim", "out_dim must be given when repeats is a tensor"))?
        }
        n => return Err(ctx.value_err("inputs", format!("expected 1 or 2 inputs, got {n}"))),
    };
    shape[axis] = dim;
    one(x.with_shape(shape))
}

#[cfg(test)]
mod tests;
