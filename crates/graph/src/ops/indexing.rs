//! Indexing ops: gather and gather_nd read by index, scatter, scatter_nd and masked_scatter
//! write by index, nonzero lists the indices of non-zero elements.
//!
//! Error kinds follow MAX where it is explicit: a bad index dtype or a dtype mismatch between
//! `input` and `updates` is a ValueError there, and so is an out-of-range scatter axis.

use super::{Ctx, OpKind, one};
use crate::dim::Dim;
use crate::dtype::DType;
use crate::error::Result;
use crate::types::{TensorType, Type, shape_str};

pub fn infer(ctx: &Ctx) -> Result<Vec<Type>> {
    match ctx.kind {
        OpKind::Gather => gather(ctx),
        OpKind::GatherNd => gather_nd(ctx),
        OpKind::Scatter => scatter(ctx),
        OpKind::ScatterNd => scatter_nd(ctx),
        OpKind::MaskedScatter => masked_scatter(ctx),
        OpKind::NonZero => nonzero(ctx),
        _ => Err(ctx.value_err("op", "not an indexing op")),
    }
}

/// An index tensor must hold integers; `narrow` is the scatter ops' rule (int32 or int64 only).
fn index_dtype(ctx: &Ctx, i: usize, narrow: bool) -> Result<()> {
    let t = ctx.tensor(i)?;
    let ok = if narrow { matches!(t.dtype, DType::Int32 | DType::Int64) } else { t.dtype.is_integral() };
    if !ok {
        let want = if narrow { "int32 or int64" } else { "an integer dtype" };
        return Err(ctx.value_err(&ctx.arg(i), format!("indices must have {want}, got {}", t.dtype)));
    }
    Ok(())
}

fn same_dtype(ctx: &Ctx, a: usize, b: usize) -> Result<()> {
    let (ta, tb) = (ctx.tensor(a)?, ctx.tensor(b)?);
    if ta.dtype != tb.dtype {
        return Err(ctx.value_err(
            &ctx.arg(b),
            format!("{} has dtype {} but {} has {}; they must match", ctx.arg(b), tb.dtype, ctx.arg(a), ta.dtype),
        ));
    }
    Ok(())
}

/// `input.shape[:axis] + indices.shape + input.shape[axis+1:]`.
fn gather(ctx: &Ctx) -> Result<Vec<Type>> {
    ctx.expect_inputs(2)?;
    let (input, indices) = (ctx.tensor(0)?, ctx.tensor(1)?);
    index_dtype(ctx, 1, false)?;
    ctx.same_device(&[0, 1])?;
    let axis = ctx.axis("axis", ctx.int("axis")?, input.rank())?;
    let mut shape = input.shape[..axis].to_vec();
    shape.extend(indices.shape.iter().cloned());
    shape.extend(input.shape[axis + 1..].iter().cloned());
    one(input.with_shape(shape))
}

/// `input.shape[:b] + indices.shape[b:-1] + input.shape[b + k:]` with `k = indices.shape[-1]`.
fn gather_nd(ctx: &Ctx) -> Result<Vec<Type>> {
    ctx.expect_inputs(2)?;
    let (input, indices) = (ctx.tensor(0)?, ctx.tensor(1)?);
    index_dtype(ctx, 1, false)?;
    ctx.same_device(&[0, 1])?;
    let batch = ctx.int("batch_dims")?;
    if batch < 0 {
        return Err(ctx.value_err("batch_dims", format!("must be non-negative, got {batch}")));
    }
    let batch = batch as usize;
    if indices.rank() < batch + 1 {
        return Err(ctx.value_err(
            "indices",
            format!(
                "needs at least batch_dims + 1 = {} dimensions (the batch dims and the index vector), got shape {}",
                batch + 1,
                shape_str(&indices.shape)
            ),
        ));
    }
    let last = &indices.shape[indices.rank() - 1];
    let k = match last.as_static() {
        Some(k) if k >= 0 => k as usize,
        _ => {
            return Err(
                ctx.value_err("indices", format!("the last dimension (the index vector) must be static, got {last}"))
            );
        }
    };
    if batch + k > input.rank() {
        return Err(ctx.value_err(
            "input",
            format!("has rank {} but batch_dims ({batch}) + index size ({k}) dimensions are indexed", input.rank()),
        ));
    }
    for i in 0..batch {
        if input.shape[i] != indices.shape[i] {
            return Err(ctx.value_err(
                "indices",
                format!("batch dimension {i} is {} in indices but {} in input; the first batch_dims={batch} dimensions must match", indices.shape[i], input.shape[i]),
            ));
        }
    }
    let mut shape = input.shape[..batch].to_vec();
    shape.extend(indices.shape[batch..indices.rank() - 1].iter().cloned());
    shape.extend(input.shape[batch + k..].iter().cloned());
    one(input.with_shape(shape))
}

/// Element-wise scatter along `axis`: `updates` and `indices` share a shape of the input's rank,
/// no larger than the input off the axis.
fn scatter(ctx: &Ctx) -> Result<Vec<Type>> {
    ctx.expect_inputs(3)?;
    let (input, updates, indices) = (ctx.tensor(0)?, ctx.tensor(1)?, ctx.tensor(2)?);
    same_dtype(ctx, 0, 1)?;
    index_dtype(ctx, 2, true)?;
    ctx.same_device(&[0, 1, 2])?;
    let rank = input.rank() as i64;
    let axis = ctx.int("axis")?;
    if rank == 0 || axis < -rank || axis >= rank {
        return Err(ctx.value_err(
            "axis",
            format!("axis {axis} is out of range for rank {rank} (expected {}..={})", -rank, rank - 1),
        ));
    }
    let axis = if axis < 0 { axis + rank } else { axis } as usize;
    for (i, t) in [(1, updates), (2, indices)] {
        if t.rank() != input.rank() {
            return Err(ctx.value_err(
                &ctx.arg(i),
                format!("must have the input's rank {rank}, got shape {}", shape_str(&t.shape)),
            ));
        }
    }
    for (d, (u, ix)) in updates.shape.iter().zip(&indices.shape).enumerate() {
        if u != ix {
            return Err(ctx.value_err(
                "indices",
                format!("must have the shape of updates: dimension {d} is {ix} in indices and {u} in updates (insert a rebind if they are equal at run time)"),
            ));
        }
        if d != axis
            && let (Some(a), Some(b)) = (u.as_static(), input.shape[d].as_static())
            && a > b
        {
            return Err(ctx.value_err("updates", format!("dimension {d} is {a}, larger than the input's {b}")));
        }
    }
    one(input.clone())
}

/// `indices` is `[..., k]`: each index vector addresses a slice `input.shape[k:]`, so `updates`
/// is `indices.shape[:-1] + input.shape[k:]`.
fn scatter_nd(ctx: &Ctx) -> Result<Vec<Type>> {
    ctx.expect_inputs(3)?;
    let (input, updates, indices) = (ctx.tensor(0)?, ctx.tensor(1)?, ctx.tensor(2)?);
    same_dtype(ctx, 0, 1)?;
    index_dtype(ctx, 2, true)?;
    ctx.same_device(&[0, 1, 2])?;
    if indices.rank() == 0 {
        return Err(ctx.value_err("indices", "must have at least one dimension (the index vector)"));
    }
    // A symbolic index length leaves the updates shape to be checked at run time.
    if let Some(k) = indices.shape[indices.rank() - 1].as_static() {
        if k < 1 || k as usize > input.rank() {
            return Err(ctx.value_err(
                "indices",
                format!("index vectors of length {k} cannot address an input of rank {}", input.rank()),
            ));
        }
        let mut want = indices.shape[..indices.rank() - 1].to_vec();
        want.extend(input.shape[k as usize..].iter().cloned());
        if updates.shape != want {
            return Err(ctx.value_err(
                "updates",
                format!(
                    "must have shape indices.shape[:-1] + input.shape[{k}:] = {}, got {} (insert a rebind if they are equal at run time)",
                    shape_str(&want),
                    shape_str(&updates.shape)
                ),
            ));
        }
    }
    one(input.clone())
}

/// Writes `updates` (in row-major order) where the mask, broadcast to the input, is true;
/// `out_dim` names the number of true elements.
fn masked_scatter(ctx: &Ctx) -> Result<Vec<Type>> {
    ctx.expect_inputs(3)?;
    let (input, mask) = (ctx.tensor(0)?, ctx.tensor(1)?);
    if mask.dtype != DType::Bool {
        return Err(ctx.type_err("mask", format!("expected a bool tensor, got {}", mask.dtype)));
    }
    same_dtype(ctx, 0, 2)?;
    ctx.same_device(&[0, 1, 2])?;
    broadcasts_to(ctx, mask, input)?;
    out_dim(ctx)?;
    one(input.clone())
}

/// numpy broadcasting of `from` onto `to`'s shape, which stays as it is.
fn broadcasts_to(ctx: &Ctx, from: &TensorType, to: &TensorType) -> Result<()> {
    if from.rank() > to.rank() {
        return Err(ctx.value_err(
            "mask",
            format!("shape {} has more dimensions than the input's {}", shape_str(&from.shape), shape_str(&to.shape)),
        ));
    }
    let offset = to.rank() - from.rank();
    for (i, d) in from.shape.iter().enumerate() {
        let target = &to.shape[offset + i];
        if d != target && d.as_static() != Some(1) {
            return Err(ctx.value_err(
                "mask",
                format!(
                    "shape {} does not broadcast to the input's {}: dimension {d} is neither 1 nor {target}",
                    shape_str(&from.shape),
                    shape_str(&to.shape)
                ),
            ));
        }
    }
    Ok(())
}

fn out_dim(ctx: &Ctx) -> Result<Dim> {
    match ctx.dims("out_dim")? {
        [d] if d.as_static().is_some_and(|n| n < 0) => {
            Err(ctx.value_err("out_dim", format!("must not be negative, got {d}")))
        }
        [d] => Ok(d.clone()),
        _ => Err(ctx.value_err("out_dim", "must be a single dim")),
    }
}

/// int64 `[out_dim, rank]`: one row of coordinates per non-zero element.
fn nonzero(ctx: &Ctx) -> Result<Vec<Type>> {
    ctx.expect_inputs(1)?;
    let x = ctx.tensor(0)?;
    if x.rank() == 0 {
        return Err(ctx.value_err("x", "scalar inputs are not supported (nonzero needs at least one dimension)"));
    }
    let n = out_dim(ctx)?;
    one(TensorType::new(DType::Int64, vec![n, Dim::stat(x.rank() as i64)], x.device))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attrs::{Attr, Attrs};
    use crate::error::GraphError;
    use crate::ops::testing::{d as dim, infer_with as run, tt as t};

    fn axis(a: i64) -> Attrs {
        Attrs::new().with("axis", Attr::Int(a))
    }

    #[test]
    fn gather_replaces_the_axis_with_the_index_shape() {
        let out =
            run(OpKind::Gather, axis(1), &[t(DType::Float32, &["a", "5", "6"]), t(DType::Int64, &["2", "k"])]).unwrap();
        assert_eq!(out[0], t(DType::Float32, &["a", "2", "k", "6"]));
        let out = run(OpKind::Gather, axis(-1), &[t(DType::Float32, &["a", "5"]), t(DType::Int32, &[])]).unwrap();
        assert_eq!(out[0], t(DType::Float32, &["a"]));
        let err = run(OpKind::Gather, axis(2), &[t(DType::Float32, &["a", "5"]), t(DType::Int32, &["3"])]).unwrap_err();
        assert!(matches!(&err, GraphError::Index(m) if m.starts_with("gather: axis:")), "{err}");
        let err = run(OpKind::Gather, axis(0), &[t(DType::Float32, &["4"]), t(DType::Float32, &["3"])]).unwrap_err();
        assert!(matches!(&err, GraphError::Value(m) if m.starts_with("gather: indices:")), "{err}");
    }

    #[test]
    fn gather_nd_follows_the_documented_example() {
        let attrs = Attrs::new().with("batch_dims", Attr::Int(1));
        let out = run(
            OpKind::GatherNd,
            attrs.clone(),
            &[t(DType::BFloat16, &["a", "b", "c", "d", "e"]), t(DType::Int32, &["a", "f", "3"])],
        )
        .unwrap();
        assert_eq!(out[0], t(DType::BFloat16, &["a", "f", "e"]));
        let zero = Attrs::new().with("batch_dims", Attr::Int(0));
        let out =
            run(OpKind::GatherNd, zero.clone(), &[t(DType::Float32, &["4", "5", "6"]), t(DType::Int64, &["n", "3"])])
                .unwrap();
        assert_eq!(out[0], t(DType::Float32, &["n"]));
        for (input, idx, a) in [
            (&["4", "5", "6"][..], &["n", "m"][..], zero.clone()),
            (&["4", "5", "6"], &["n", "4"], zero.clone()),
            (&["4", "5", "6"], &["3", "1"], attrs.clone()),
            (&["4", "5"], &["4"], attrs),
        ] {
            assert!(matches!(
                run(OpKind::GatherNd, a, &[t(DType::Float32, input), t(DType::Int64, idx)]),
                Err(GraphError::Value(_))
            ));
        }
    }

    #[test]
    fn scatters_keep_the_input_type_and_check_updates() {
        let x = t(DType::Float32, &["a", "5"]);
        let out =
            run(OpKind::Scatter, axis(0), &[x.clone(), t(DType::Float32, &["2", "5"]), t(DType::Int64, &["2", "5"])])
                .unwrap();
        assert_eq!(out[0], x);
        let bad =
            run(OpKind::Scatter, axis(0), &[x.clone(), t(DType::Float32, &["2", "5"]), t(DType::Int64, &["3", "5"])]);
        assert!(matches!(bad, Err(GraphError::Value(m)) if m.starts_with("scatter: indices:")));
        assert!(matches!(
            run(OpKind::Scatter, axis(2), &[x.clone(), x.clone(), t(DType::Int64, &["a", "5"])]),
            Err(GraphError::Value(_))
        ));
        let y = t(DType::Float32, &["4", "5", "6"]);
        let out = run(
            OpKind::ScatterNd,
            Attrs::new(),
            &[y.clone(), t(DType::Float32, &["n", "6"]), t(DType::Int64, &["n", "2"])],
        )
        .unwrap();
        assert_eq!(out[0], y);
        let bad = run(
            OpKind::ScatterNd,
            Attrs::new(),
            &[y.clone(), t(DType::Float32, &["n", "5"]), t(DType::Int64, &["n", "2"])],
        );
        assert!(matches!(bad, Err(GraphError::Value(m)) if m.starts_with("scatter_nd: updates:")));
    }

    #[test]
    fn masked_scatter_and_nonzero() {
        let x = t(DType::Float32, &["4", "5"]);
        let attrs = Attrs::new().with("out_dim", Attr::Dims(vec![dim("n")]));
        let out = run(
            OpKind::MaskedScatter,
            attrs.clone(),
            &[x.clone(), t(DType::Bool, &["5"]), t(DType::Float32, &["3", "4"])],
        )
        .unwrap();
        assert_eq!(out[0], x);
        let bad = run(
            OpKind::MaskedScatter,
            attrs.clone(),
            &[x.clone(), t(DType::Bool, &["3", "5"]), t(DType::Float32, &["7"])],
        );
        assert!(matches!(bad, Err(GraphError::Value(m)) if m.starts_with("masked_scatter: mask:")));
        let out = run(OpKind::NonZero, attrs.clone(), &[t(DType::Float16, &["a", "5", "2"])]).unwrap();
        assert_eq!(out[0], t(DType::Int64, &["n", "3"]));
        assert!(matches!(run(OpKind::NonZero, attrs, &[t(DType::Float16, &[])]), Err(GraphError::Value(_))));
    }
}
