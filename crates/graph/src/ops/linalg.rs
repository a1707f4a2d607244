//! Matrix products: matmul (numpy's rules: 1-D operands become a row or column vector whose
//! extra dimension is dropped from the result; leading dimensions broadcast) and outer.
//!
//! Neither op has attributes. Both operands arrive with one dtype: the Python layer casts them to
//! the dtype the promotion rule picks, as for elementwise ops.

use super::{Ctx, OpKind, broadcast_shapes, one};
use crate::dim::Dim;
use crate::error::Result;
use crate::types::{TensorType, Type, shape_str};

pub fn infer(ctx: &Ctx) -> Result<Vec<Type>> {
    match ctx.kind {
        OpKind::Matmul => matmul(ctx),
        OpKind::Outer => outer(ctx),
        _ => Err(ctx.value_err("op", "not a linear algebra op")),
    }
}

/// Both operands as tensors of one dtype on one device.
fn operands<'a>(ctx: &Ctx<'a>) -> Result<(&'a TensorType, &'a TensorType)> {
    ctx.expect_inputs(2)?;
    let (a, b) = (ctx.tensor(0)?, ctx.tensor(1)?);
    ctx.same_device(&[0, 1])?;
    if a.dtype != b.dtype {
        return Err(ctx.type_err(
            "rhs",
            format!("dtype {} differs from lhs's {}; cast both to one dtype first", b.dtype, a.dtype),
        ));
    }
    Ok((a, b))
}

fn matmul(ctx: &Ctx) -> Result<Vec<Type>> {
    let (a, b) = operands(ctx)?;
    for (name, t) in [("lhs", a), ("rhs", b)] {
        if t.rank() == 0 {
            return Err(ctx.value_err(name, "matmul needs tensors of rank 1 or more, got a scalar"));
        }
    }
    let (ra, rb) = (a.rank(), b.rank());
    let k_lhs = &a.shape[ra - 1];
    let (k_rhs, k_axis) = if rb == 1 { (&b.shape[0], -1) } else { (&b.shape[rb - 2], -2) };
    if k_lhs != k_rhs {
        return Err(ctx.value_err(
            "rhs",
            format!(
                "the contracted dimensions differ: lhs {} has {k_lhs} at axis -1, rhs {} has {k_rhs} at axis {k_axis} (insert a rebind if they are equal at run time)",
                shape_str(&a.shape),
                shape_str(&b.shape)
            ),
        ));
    }
    let batch_a = if ra > 2 { &a.shape[..ra - 2] } else { &[][..] };
    let batch_b = if rb > 2 { &b.shape[..rb - 2] } else { &[][..] };
    let mut shape = broadcast_shapes(ctx, batch_a, batch_b, ("lhs", "rhs"))?;
    if ra >= 2 {
        shape.push(a.shape[ra - 2].clone());
    }
    if rb >= 2 {
        shape.push(b.shape[rb - 1].clone());
    }
    one(TensorType { shape, ..a.clone() })
}

fn numel(ctx: &Ctx, arg: &str, shape: &[Dim]) -> Result<Dim> {
    let mut n = Dim::stat(1);
    for d in shape {
        n = n.mul(d).map_err(|e| ctx.value_err(arg, e.to_string()))?;
    }
    Ok(n)
}

/// Both operands are flattened, so the result is [numel(lhs), numel(rhs)] whatever their ranks.
fn outer(ctx: &Ctx) -> Result<Vec<Type>> {
    let (a, b) = operands(ctx)?;
    let shape = vec![numel(ctx, "lhs", &a.shape)?, numel(ctx, "rhs", &b.shape)?];
    one(TensorType { shape, ..a.clone() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::error::GraphError;
    use crate::ops::testing::{d as dim, f32 as t, infer_plain as run};
    use crate::types::DeviceRef;

    fn mm(a: &[&str], b: &[&str]) -> Result<Type> {
        run(OpKind::Matmul, &[t(a), t(b)]).map(|mut v| v.remove(0))
    }

    #[test]
    fn matrix_and_vector_rules() {
        assert_eq!(mm(&["2", "3"], &["3", "4"]).unwrap(), t(&["2", "4"]));
        assert_eq!(mm(&["m", "k"], &["k", "n"]).unwrap(), t(&["m", "n"]));
        assert_eq!(mm(&["3"], &["3", "4"]).unwrap(), t(&["4"]));
        assert_eq!(mm(&["2", "3"], &["3"]).unwrap(), t(&["2"]));
        assert_eq!(mm(&["k"], &["k"]).unwrap(), t(&[]));
        assert_eq!(mm(&["3"], &["b", "3", "4"]).unwrap(), t(&["b", "4"]));
        assert_eq!(mm(&["b", "2", "3"], &["3"]).unwrap(), t(&["b", "2"]));
    }

    #[test]
    fn batch_dims_broadcast() {
        assert_eq!(mm(&["b", "1", "2", "3"], &["5", "3", "4"]).unwrap(), t(&["b", "5", "2", "4"]));
        let err = mm(&["2", "2", "3"], &["5", "3", "4"]).unwrap_err();
        assert!(matches!(&err, GraphError::Value(m) if m.starts_with("matmul: rhs:")), "{err}");
    }

    #[test]
    fn contracted_dims_must_match() {
        let err = mm(&["2", "3"], &["4", "4"]).unwrap_err();
        assert!(
            matches!(&err, GraphError::Value(m) if m.starts_with("matmul: rhs:") && m.contains("lhs=float32[2, 3]")),
            "{err}"
        );
        assert!(mm(&["m", "k"], &["j", "n"]).is_err());
        assert!(mm(&["3"], &["4"]).is_err());
        let two_k = dim("k").mul(&Dim::stat(2)).unwrap();
        let k_plus_k = dim("k").add(&dim("k")).unwrap();
        let a = Type::Tensor(TensorType::new(DType::Float32, vec![Dim::stat(2), two_k], DeviceRef::CPU));
        let b = Type::Tensor(TensorType::new(DType::Float32, vec![k_plus_k, Dim::stat(4)], DeviceRef::CPU));
        assert_eq!(run(OpKind::Matmul, &[a, b]).unwrap()[0], t(&["2", "4"]));
    }

    #[test]
    fn scalars_dtypes_and_devices_are_rejected() {
        assert!(matches!(mm(&[], &["3", "4"]), Err(GraphError::Value(m)) if m.starts_with("matmul: lhs:")));
        let f16 = Type::Tensor(TensorType::new(DType::Float16, vec![Dim::stat(3), Dim::stat(4)], DeviceRef::CPU));
        assert!(matches!(run(OpKind::Matmul, &[t(&["2", "3"]), f16]), Err(GraphError::Type(_))));
        let gpu = Type::Tensor(TensorType::new(DType::Float32, vec![Dim::stat(3), Dim::stat(4)], DeviceRef::gpu(0)));
        assert!(matches!(run(OpKind::Matmul, &[t(&["2", "3"]), gpu]), Err(GraphError::Value(_))));
    }

    #[test]
    fn outer_flattens_both_sides() {
        assert_eq!(run(OpKind::Outer, &[t(&["3"]), t(&["4"])]).unwrap()[0], t(&["3", "4"]));
        let out = run(OpKind::Outer, &[t(&["2", "n"]), t(&[])]).unwrap();
        let two_n = dim("n").mul(&Dim::stat(2)).unwrap();
        assert_eq!(out[0], Type::Tensor(TensorType::new(DType::Float32, vec![two_n, Dim::stat(1)], DeviceRef::CPU)));
    }
}
