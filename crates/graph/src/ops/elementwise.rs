//! Elementwise ops: unary maps, binary ops with numpy broadcasting, comparisons, logical ops
//! and `where`. Binary operands arrive with one dtype (the Python layer casts them to the dtype
//! `promote_operands` chose); scalars have already become constants.

use super::{Ctx, OpKind, broadcast_shapes, one};
use crate::dtype::DType;
use crate::error::Result;
use crate::promote;
use crate::types::{TensorType, Type};

pub fn infer(ctx: &Ctx) -> Result<Vec<Type>> {
    use OpKind::*;
    match ctx.kind {
        Where => infer_where(ctx),
        Add | Sub | Mul | Div | FloorDiv | Mod | Pow | Maximum | Minimum => binary(ctx, None),
        Equal | NotEqual | Greater | GreaterEqual => binary(ctx, Some(DType::Bool)),
        LogicalAnd | LogicalOr | LogicalXor => {
            require_bool(ctx, 0)?;
            require_bool(ctx, 1)?;
            binary(ctx, None)
        }
        LogicalNot => {
            require_bool(ctx, 0)?;
            unary(ctx, None)
        }
        IsNan | IsInf => {
            ctx.expect_inputs(1)?;
            let x = ctx.tensor(0)?;
            if !x.dtype.is_float() {
                return Err(ctx.type_err("x", format!("expected a floating-point tensor, got {}", x.dtype)));
            }
            unary(ctx, Some(DType::Bool))
        }
        Gelu => {
            let approx = match ctx.attr("approximate") {
                None => "none",
                Some(_) => ctx.string("approximate")?,
            };
            if !["none", "tanh", "quick"].contains(&approx) {
                return Err(ctx.value_err("approximate", format!("must be 'none', 'tanh' or 'quick', got {approx:?}")));
            }
            float_unary(ctx)
        }
        Exp | Log | Log1p | Sqrt | Rsqrt | Sin | Cos | Tanh | Acos | Atanh | Erf | Sigmoid | Silu => float_unary(ctx),
        _ => numeric_unary(ctx),
    }
}

/// A unary map defined on real numbers (exp, sqrt, tanh, ...): a floating-point input, as MAX
/// requires; on an integer tensor the result would be truncated (exp([1, 2]) = [2, 7]).
fn float_unary(ctx: &Ctx) -> Result<Vec<Type>> {
    require_float(ctx, 0)?;
    unary(ctx, None)
}

/// Input `i` has a floating-point dtype, or a type error naming the op and the dtype.
pub(super) fn require_float(ctx: &Ctx, i: usize) -> Result<()> {
    let t = ctx.tensor(i)?;
    if !t.dtype.is_float() {
        return Err(ctx.type_err(
            &ctx.arg(i),
            format!("expected a floating-point tensor, got {}; cast it first (e.g. to float32)", t.dtype),
        ));
    }
    Ok(())
}

fn require_bool(ctx: &Ctx, i: usize) -> Result<()> {
    let t = ctx.tensor(i)?;
    if t.dtype != DType::Bool {
        return Err(ctx.type_err(&ctx.arg(i), format!("{} needs bool inputs, got {}", ctx.name(), t.dtype)));
    }
    Ok(())
}

fn numeric_unary(ctx: &Ctx) -> Result<Vec<Type>> {
    unary(ctx, None)
}

fn unary(ctx: &Ctx, out: Option<DType>) -> Result<Vec<Type>> {
    ctx.expect_inputs(1)?;
    let x = ctx.tensor(0)?;
    one(TensorType { dtype: out.unwrap_or(x.dtype), ..x.clone() })
}

fn binary(ctx: &Ctx, out: Option<DType>) -> Result<Vec<Type>> {
    ctx.expect_inputs(2)?;
    let (a, b) = (ctx.tensor(0)?, ctx.tensor(1)?);
    let device = ctx.same_device(&[0, 1])?;
    if a.dtype != b.dtype {
        return Err(dtype_mismatch(ctx, 1, a.dtype, b.dtype));
    }
    let shape = broadcast_shapes(ctx, &a.shape, &b.shape, (&ctx.arg(0), &ctx.arg(1)))?;
    one(TensorType { dtype: out.unwrap_or(a.dtype), shape, device })
}

/// The error for operands of dtypes `a` and `b`, naming input `arg` (the second operand).
fn dtype_mismatch(ctx: &Ctx, arg: usize, a: DType, b: DType) -> crate::error::GraphError {
    match promote::promote(a, b) {
        Some(p) => ctx.type_err(&ctx.arg(arg), format!("operands must share a dtype: cast both to {p} first")),
        None => ctx.value_err(
            &ctx.arg(arg),
            format!("cannot combine {a} and {b}: neither converts to the other without losing values; insert an explicit cast"),
        ),
    }
}

/// The dtype the last two of `inputs` (the op's inputs in order: where's condition first) are
/// computed in as operands of `kind` (the promotion rule of crate::promote), or an error naming
/// the op and the operands.
pub fn promote_operands(kind: OpKind, inputs: &[Type]) -> Result<DType> {
    let attrs = crate::attrs::Attrs::new();
    let ctx = Ctx { kind, inputs, attrs: &attrs };
    let n = inputs.len();
    if n < 2 {
        return Err(crate::error::GraphError::Value(format!("{}: needs two operands to promote", ctx.name())));
    }
    let (ta, tb) = (ctx.tensor(n - 2)?, ctx.tensor(n - 1)?);
    let p = promote::promote(ta.dtype, tb.dtype).ok_or_else(|| dtype_mismatch(&ctx, n - 1, ta.dtype, tb.dtype))?;
    Ok(if kind == OpKind::Div { promote::true_division_dtype(p) } else { p })
}

fn infer_where(ctx: &Ctx) -> Result<Vec<Type>> {
    ctx.expect_inputs(3)?;
    let (c, x, y) = (ctx.tensor(0)?, ctx.tensor(1)?, ctx.tensor(2)?);
    if c.dtype != DType::Bool {
        return Err(ctx.type_err("condition", format!("expected a bool tensor, got {}", c.dtype)));
    }
    let device = ctx.same_device(&[0, 1, 2])?;
    if x.dtype != y.dtype {
        return Err(dtype_mismatch(ctx, 2, x.dtype, y.dtype));
    }
    let s = broadcast_shapes(ctx, &c.shape, &x.shape, ("condition", "x"))?;
    let shape = broadcast_shapes(ctx, &s, &y.shape, ("condition and x", "y"))?;
    one(TensorType { dtype: x.dtype, shape, device })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::GraphError;
    use crate::ops::testing::{infer_plain as run, tt as t};

    #[test]
    fn broadcasting_static_and_symbolic() {
        let out = run(OpKind::Add, &[t(DType::Float32, &["batch", "1", "3"]), t(DType::Float32, &["4", "1"])]).unwrap();
        assert_eq!(out[0], t(DType::Float32, &["batch", "4", "3"]));
        let err = run(OpKind::Mul, &[t(DType::Float32, &["a"]), t(DType::Float32, &["b"])]).unwrap_err();
        assert!(
            matches!(&err, GraphError::Value(m) if m.starts_with("mul: rhs:") && m.contains("float32[a] on cpu:0")),
            "{err}"
        );
    }

    #[test]
    fn comparisons_give_bool_and_logic_needs_bool() {
        let out = run(OpKind::Greater, &[t(DType::Int32, &["2"]), t(DType::Int32, &["2"])]).unwrap();
        assert_eq!(out[0], t(DType::Bool, &["2"]));
        assert!(matches!(
            run(OpKind::LogicalAnd, &[t(DType::Float32, &["2"]), t(DType::Float32, &["2"])]),
            Err(GraphError::Type(_))
        ));
        assert!(matches!(run(OpKind::IsNan, &[t(DType::Int32, &["2"])]), Err(GraphError::Type(_))));
    }

    #[test]
    fn mixed_dtypes_are_rejected_with_the_rule() {
        let err = run(OpKind::Add, &[t(DType::Int32, &["2"]), t(DType::Float32, &["2"])]).unwrap_err();
        assert!(err.to_string().contains("insert an explicit cast"), "{err}");
        let p = promote_operands(OpKind::Div, &[t(DType::Int32, &["2"]), t(DType::Int16, &["2"])]).unwrap();
        assert_eq!(p, DType::Float64);
    }

    #[test]
    fn where_broadcasts_three_ways() {
        let out = run(
            OpKind::Where,
            &[t(DType::Bool, &["3", "1"]), t(DType::Float16, &["4"]), t(DType::Float16, &["1", "4"])],
        )
        .unwrap();
        assert_eq!(out[0], t(DType::Float16, &["3", "4"]));
    }
}
