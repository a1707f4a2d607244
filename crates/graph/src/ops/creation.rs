//! Ops that make tensors: constants (data carried as attribute bytes), external constants
//! (weights bound at load time), range, shape_to_tensor, cast and rebind.

use super::{Ctx, OpKind, one};
use crate::attrs::Attr;
use crate::dim::Dim;
use crate::dtype::DType;
use crate::error::Result;
use crate::types::{DeviceRef, TensorType, Type, shape_str};

pub fn infer(ctx: &Ctx) -> Result<Vec<Type>> {
    match ctx.kind {
        OpKind::Constant => constant(ctx),
        OpKind::ConstantExternal => constant_external(ctx),
        OpKind::Range => range(ctx),
        OpKind::ShapeToTensor => {
            let dims = ctx.dims("shape")?;
            let device = if ctx.attr("device").is_some() { ctx.device("device")? } else { DeviceRef::CPU };
            one(TensorType::new(DType::Int64, vec![Dim::stat(dims.len() as i64)], device))
        }
        OpKind::Cast => {
            ctx.expect_inputs(1)?;
            let x = ctx.tensor(0)?;
            one(x.with_dtype(ctx.dtype("dtype")?))
        }
        OpKind::Rebind => rebind(ctx),
        _ => Err(ctx.value_err("op", "not a creation op")),
    }
}

fn static_shape(ctx: &Ctx, key: &str) -> Result<(Vec<Dim>, usize)> {
    let dims = ctx.dims(key)?;
    let mut n: usize = 1;
    for d in dims {
        match d.as_static() {
            Some(v) if v >= 0 => {
                n = n.checked_mul(v as usize).ok_or_else(|| ctx.value_err(key, "too many elements"))?
            }
            _ => {
                return Err(ctx.value_err(
                    key,
                    format!("a constant needs a static, non-negative shape, got {}", shape_str(dims)),
                ));
            }
        }
    }
    Ok((dims.to_vec(), n))
}

fn constant(ctx: &Ctx) -> Result<Vec<Type>> {
    ctx.expect_inputs(0)?;
    let dtype = ctx.dtype("dtype")?;
    let (shape, n) = static_shape(ctx, "shape")?;
    let device = ctx.device("device")?;
    match ctx.attr("data") {
        Some(Attr::Data(bytes)) if bytes.len() == n * dtype.size_in_bytes() => {}
        Some(Attr::Data(bytes)) => {
            return Err(ctx.value_err(
                "value",
                format!(
                    "{} bytes of data for {n} elements of {dtype} ({} expected)",
                    bytes.len(),
                    n * dtype.size_in_bytes()
                ),
            ));
        }
        _ => return Err(ctx.value_err("value", "missing constant data")),
    }
    one(TensorType::new(dtype, shape, device))
}

fn constant_external(ctx: &Ctx) -> Result<Vec<Type>> {
    ctx.expect_inputs(0)?;
    let name = ctx.string("name")?;
    if name.is_empty() {
        return Err(ctx.value_err("name", "an external constant needs a non-empty name"));
    }
    match ctx.types("type")? {
        [Type::Tensor(t)] => {
            if let Some(align) = ctx.opt_int("align")?
                && (align <= 0 || (align & (align - 1)) != 0)
            {
                return Err(ctx.value_err("align", format!("must be a positive power of two, got {align}")));
            }
            one(t.clone())
        }
        other => Err(ctx.type_err("type", format!("expected one tensor type, got {} types", other.len()))),
    }
}

fn range(ctx: &Ctx) -> Result<Vec<Type>> {
    ctx.expect_inputs(3)?;
    let dtype = ctx.dtype("dtype")?;
    for i in 0..3 {
        let t = ctx.tensor(i)?;
        if t.rank() != 0 {
            return Err(ctx.value_err(&ctx.arg(i), format!("must be a scalar, got shape {}", shape_str(&t.shape))));
        }
        if t.dtype != dtype {
            return Err(ctx.type_err(&ctx.arg(i), format!("must have the range's dtype {dtype}, got {}", t.dtype)));
        }
    }
    let out = ctx.dims("out_dim")?;
    if out.len() != 1 {
        return Err(ctx.value_err("out_dim", "must be a single dim"));
    }
    if out[0].as_static().is_some_and(|n| n < 0) {
        return Err(ctx.value_err("out_dim", format!("must not be negative, got {}", out[0])));
    }
    one(TensorType::new(dtype, out.to_vec(), ctx.device("device")?))
}

fn rebind(ctx: &Ctx) -> Result<Vec<Type>> {
    ctx.expect_inputs(1)?;
    let x = ctx.tensor(0)?;
    let shape = ctx.dims("shape")?;
    if shape.len() != x.rank() {
        return Err(ctx.value_err(
            "shape",
            format!("rank {} does not match the input's rank {} ({})", shape.len(), x.rank(), shape_str(&x.shape)),
        ));
    }
    for (i, (a, b)) in x.shape.iter().zip(shape).enumerate() {
        if let (Some(p), Some(q)) = (a.as_static(), b.as_static())
            && p != q
        {
            return Err(ctx.value_err("shape", format!("dimension {i} is {p} and can never be {q}")));
        }
    }
    one(x.with_shape(shape.to_vec()))
}

#[cfg(test)]
mod tests {
    use super::super::{Op, infer as infer_op};
    use super::*;
    use crate::attrs::Attrs;
    use std::sync::Arc;

    #[test]
    fn constants_check_their_data() {
        let attrs = Attrs::new()
            .with("dtype", Attr::DType(DType::Float32))
            .with("shape", Attr::Dims(vec![Dim::stat(2), Dim::stat(3)]))
            .with("device", Attr::Device(DeviceRef::CPU))
            .with("data", Attr::Data(Arc::new(vec![0; 24])));
        let out = infer_op(&Op { kind: OpKind::Constant, attrs: attrs.clone() }, &[]).unwrap();
        assert_eq!(out[0].tensor().unwrap().shape, vec![Dim::stat(2), Dim::stat(3)]);
        let short = attrs.with("data", Attr::Data(Arc::new(vec![0; 20])));
        assert!(infer_op(&Op { kind: OpKind::Constant, attrs: short }, &[]).is_err());
    }

    #[test]
    fn rebind_keeps_rank_and_static_agreement() {
        let x = Type::Tensor(TensorType::new(DType::Int8, vec![Dim::sym("a").unwrap(), Dim::stat(3)], DeviceRef::CPU));
        let ok = Attrs::new().with("shape", Attr::Dims(vec![Dim::sym("z").unwrap(), Dim::stat(3)]));
        let out = infer_op(&Op { kind: OpKind::Rebind, attrs: ok }, std::slice::from_ref(&x)).unwrap();
        assert_eq!(out[0].tensor().unwrap().shape[0], Dim::sym("z").unwrap());
        let bad = Attrs::new().with("shape", Attr::Dims(vec![Dim::stat(2), Dim::stat(4)]));
        assert!(infer_op(&Op { kind: OpKind::Rebind, attrs: bad }, &[x]).is_err());
    }
}
