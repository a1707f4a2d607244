//! Reductions and normalisations along one axis: sum, mean, max, min, argmax, argmin (the axis
//! stays, with size 1, as MAX keeps it), softmax, logsoftmax, cumsum, top_k, argsort and
//! layer_norm.
//!
//! Attributes:
//! - sum, mean, reduce_max, reduce_min, argmax, argmin, softmax, logsoftmax: `axis` (int, may be
//!   negative): [`ReduceAxis`].
//! - cumsum: `axis` (int), `exclusive` and `reverse` (bools, default false): [`CumsumParams`].
//! - top_k: `k` (int >= 0), `axis` (int). Two results: the values and their int64 indices.
//! - argsort: `ascending` (bool, default true).
//! - layer_norm: `epsilon` (number > 0): [`LayerNormParams`]; gamma and beta are inputs.
//! - rms_norm: `epsilon` (number > 0), `weight_offset` (number, default 0) and
//!   `multiply_before_cast` (bool, default true): [`RmsNormParams`].
//!
//! Every op keeps the input's dtype (MAX reduces ints and bools in their own type, so `mean` of
//! an int tensor is an int tensor) except the index results, which are int64.

use super::{Ctx, Op, OpKind, one};
use crate::dim::Dim;
use crate::dtype::DType;
use crate::error::Result;
use crate::types::{TensorType, Type, shape_str};

pub fn infer(ctx: &Ctx) -> Result<Vec<Type>> {
    use OpKind::*;
    match ctx.kind {
        Sum | Mean | ReduceMax | ReduceMin => reduce(ctx, None),
        ArgMax | ArgMin => reduce(ctx, Some(DType::Int64)),
        Softmax | LogSoftmax => softmax(ctx),
        Cumsum => cumsum(ctx),
        TopK => top_k(ctx),
        ArgSort => argsort(ctx),
        LayerNorm => layer_norm(ctx),
        RmsNorm => rms_norm(ctx),
        _ => Err(ctx.value_err("op", "not a reduction op")),
    }
}

/// The `axis` attribute of a reduction, softmax, cumsum or top_k, as given: it may count from
/// the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReduceAxis(pub i64);

impl ReduceAxis {
    pub fn parse(ctx: &Ctx) -> Result<ReduceAxis> {
        ctx.int("axis").map(ReduceAxis)
    }

    /// The axis of a rank-`rank` value (`-rank..rank`, counted from the end when negative), None
    /// when it is out of range.
    pub fn of_rank(self, rank: usize) -> Option<usize> {
        let (axis, r) = (self.0, rank as i64);
        (-r..r).contains(&axis).then(|| if axis < 0 { (axis + r) as usize } else { axis as usize })
    }
}

/// The axis attribute of reduction `op`.
pub fn reduce_axis(op: &Op) -> Result<ReduceAxis> {
    ReduceAxis::parse(&Ctx::of_op(op))
}

/// cumsum's flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CumsumParams {
    /// Each sum leaves out its own element.
    pub exclusive: bool,
    /// Sums run from the end of the axis.
    pub reverse: bool,
}

impl CumsumParams {
    pub fn parse(ctx: &Ctx) -> Result<CumsumParams> {
        Ok(CumsumParams { exclusive: ctx.boolean("exclusive", false)?, reverse: ctx.boolean("reverse", false)? })
    }
}

/// The flags of cumsum `op`.
pub fn cumsum_params(op: &Op) -> Result<CumsumParams> {
    CumsumParams::parse(&Ctx::of_op(op))
}

/// layer_norm's attribute: `epsilon`, positive.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LayerNormParams {
    pub epsilon: f64,
}

impl LayerNormParams {
    pub fn parse(ctx: &Ctx) -> Result<LayerNormParams> {
        let epsilon = ctx.float("epsilon")?;
        if epsilon.is_nan() || epsilon <= 0.0 {
            return Err(ctx.value_err("epsilon", format!("must be positive, got {epsilon}")));
        }
        Ok(LayerNormParams { epsilon })
    }
}

/// The attribute of layer_norm `op`.
pub fn layer_norm_params(op: &Op) -> Result<LayerNormParams> {
    LayerNormParams::parse(&Ctx::of_op(op))
}

/// The normalised `axis` attribute for a tensor of rank `rank`.
fn axis_attr(ctx: &Ctx, rank: usize) -> Result<usize> {
    let ReduceAxis(axis) = ReduceAxis::parse(ctx)?;
    if rank == 0 {
        return Err(ctx.index_err(
            "axis",
            format!("axis {axis} is out of range: {} has no axes (reshape it to [1] first)", ctx.arg(0)),
        ));
    }
    ctx.axis("axis", axis, rank)
}

fn reduce(ctx: &Ctx, out_dtype: Option<DType>) -> Result<Vec<Type>> {
    ctx.expect_inputs(1)?;
    let x = ctx.tensor(0)?;
    let axis = axis_attr(ctx, x.rank())?;
    let extreme = matches!(ctx.kind, OpKind::ReduceMax | OpKind::ReduceMin | OpKind::ArgMax | OpKind::ArgMin);
    if extreme && x.shape[axis].as_static() == Some(0) {
        // (sum and mean of nothing are 0 and NaN; an extreme of nothing has no value)
        return Err(ctx.value_err("x", format!("cannot reduce axis {axis} of size 0 (shape {})", shape_str(&x.shape))));
    }
    let mut shape = x.shape.clone();
    shape[axis] = Dim::stat(1);
    one(TensorType { dtype: out_dtype.unwrap_or(x.dtype), shape, device: x.device })
}

fn softmax(ctx: &Ctx) -> Result<Vec<Type>> {
    ctx.expect_inputs(1)?;
    super::elementwise::require_float(ctx, 0)?;
    let x = ctx.tensor(0)?;
    // A scalar is a one-element distribution (MAX stages it); its only axes are -1 and 0.
    if x.rank() == 0 {
        let ReduceAxis(axis) = ReduceAxis::parse(ctx)?;
        if axis != 0 && axis != -1 {
            return Err(ctx.index_err("axis", format!("axis {axis} is out of range for a scalar (expected -1 or 0)")));
        }
    } else {
        axis_attr(ctx, x.rank())?;
    }
    one(x.clone())
}

fn cumsum(ctx: &Ctx) -> Result<Vec<Type>> {
    ctx.expect_inputs(1)?;
    let x = ctx.tensor(0)?;
    axis_attr(ctx, x.rank())?;
    CumsumParams::parse(ctx)?;
    one(x.clone())
}

fn top_k(ctx: &Ctx) -> Result<Vec<Type>> {
    ctx.expect_inputs(1)?;
    let x = ctx.tensor(0)?;
    let axis = axis_attr(ctx, x.rank())?;
    let k = ctx.int("k")?;
    if k < 0 {
        return Err(ctx.value_err("k", format!("must not be negative, got {k}")));
    }
    if let Some(n) = x.shape[axis].as_static()
        && k > n
    {
        return Err(ctx.value_err("k", format!("k ({k}) cannot be larger than the size {n} of axis {axis}")));
    }
    let mut shape = x.shape.clone();
    shape[axis] = Dim::stat(k);
    let values = TensorType { dtype: x.dtype, shape: shape.clone(), device: x.device };
    let indices = TensorType { dtype: DType::Int64, shape, device: x.device };
    Ok(vec![Type::Tensor(values), Type::Tensor(indices)])
}

fn argsort(ctx: &Ctx) -> Result<Vec<Type>> {
    ctx.expect_inputs(1)?;
    let x = ctx.tensor(0)?;
    ctx.boolean("ascending", true)?;
    // MAX sorts along the first (only) dimension and implements rank 1 alone.
    if x.rank() != 1 {
        return Err(ctx.value_err(
            "x",
            format!("argsort sorts rank-1 tensors only, got rank {} (shape {})", x.rank(), shape_str(&x.shape)),
        ));
    }
    one(x.with_dtype(DType::Int64))
}

fn layer_norm(ctx: &Ctx) -> Result<Vec<Type>> {
    ctx.expect_inputs(3)?;
    let x = ctx.tensor(0)?;
    let device = ctx.same_device(&[0, 1, 2])?;
    if x.rank() == 0 {
        return Err(ctx.value_err("input", "must have at least one dimension to normalise over, got a scalar"));
    }
    let last = &x.shape[x.rank() - 1];
    for (i, name) in [(1, "gamma"), (2, "beta")] {
        let p = ctx.tensor(i)?;
        if p.dtype != x.dtype {
            return Err(
                ctx.type_err(name, format!("dtype {} differs from the input's {}; cast it first", p.dtype, x.dtype))
            );
        }
        if p.rank() != 1 || &p.shape[0] != last {
            return Err(ctx.value_err(
                name,
                format!("shape {} must be [{last}], the size of the input's last dimension (insert a rebind if they are equal at run time)", shape_str(&p.shape)),
            ));
        }
    }
    LayerNormParams::parse(ctx)?;
    one(TensorType { device, ..x.clone() })
}

/// rms_norm's attributes: `y = x / sqrt(mean(x^2) + epsilon) * (weight + weight_offset)` over
/// the last dim, computed in f32 (f64 for float64). With `multiply_before_cast` the product is
/// taken in f32 and rounded once to the input's dtype; otherwise the normalised value is
/// rounded first and multiplied in the dtype (MAX's RMSNorm options).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RmsNormParams {
    pub epsilon: f64,
    pub weight_offset: f64,
    pub multiply_before_cast: bool,
}

impl RmsNormParams {
    pub fn from_attrs(attrs: &crate::attrs::Attrs) -> std::result::Result<RmsNormParams, String> {
        use crate::attrs::Attr;
        let num = |key: &str, default: Option<f64>| match (attrs.get(key), default) {
            (Some(Attr::Float(x)), _) => Ok(*x),
            (Some(Attr::Int(i)), _) => Ok(*i as f64),
            (Some(other), _) => Err(format!("{key}: expected a number, got {other}")),
            (None, Some(d)) => Ok(d),
            (None, None) => Err(format!("{key}: missing number")),
        };
        let epsilon = num("epsilon", None)?;
        if epsilon.is_nan() || epsilon <= 0.0 {
            return Err(format!("epsilon: must be positive, got {epsilon}"));
        }
        let weight_offset = num("weight_offset", Some(0.0))?;
        if !weight_offset.is_finite() {
            return Err(format!("weight_offset: must be finite, got {weight_offset}"));
        }
        let multiply_before_cast = match attrs.get("multiply_before_cast") {
            None => true,
            Some(Attr::Bool(b)) => *b,
            Some(other) => return Err(format!("multiply_before_cast: expected a bool, got {other}")),
        };
        Ok(RmsNormParams { epsilon, weight_offset, multiply_before_cast })
    }
}

fn rms_norm(ctx: &Ctx) -> Result<Vec<Type>> {
    ctx.expect_inputs(2)?;
    RmsNormParams::from_attrs(ctx.attrs).map_err(|m| match m.split_once(": ") {
        Some((key, msg)) => ctx.value_err(key, msg),
        None => ctx.value_err("attributes", m),
    })?;
    let x = ctx.tensor(0)?;
    let device = ctx.same_device(&[0, 1])?;
    if !x.dtype.is_float() || x.dtype.is_float8() {
        return Err(ctx.type_err("input", format!("must be float32, float64, float16 or bfloat16, got {}", x.dtype)));
    }
    if x.rank() == 0 {
        return Err(ctx.value_err("input", "must have at least one dimension to normalise over, got a scalar"));
    }
    let w = ctx.tensor(1)?;
    if w.dtype != x.dtype {
        return Err(
            ctx.type_err("weight", format!("dtype {} differs from the input's {}; cast it first", w.dtype, x.dtype))
        );
    }
    let last = &x.shape[x.rank() - 1];
    if w.rank() != 1 || &w.shape[0] != last {
        return Err(ctx.value_err(
            "weight",
            format!("shape {} must be [{last}], the size of the input's last dimension", shape_str(&w.shape)),
        ));
    }
    one(TensorType { device, ..x.clone() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attrs::{Attr, Attrs};
    use crate::error::GraphError;
    use crate::ops::testing::{infer_with as run, tt as t};

    fn axis(a: i64) -> Attrs {
        Attrs::new().with("axis", Attr::Int(a))
    }

    #[test]
    fn reduction_params_read_once() {
        assert_eq!(
            [-3, -1, 0, 2, 3, -4].map(|a| ReduceAxis(a).of_rank(3)),
            [Some(0), Some(2), Some(0), Some(2), None, None]
        );
        assert_eq!(ReduceAxis(0).of_rank(0), None);
        let op = |kind, attrs| Op { kind, attrs };
        assert_eq!(reduce_axis(&op(OpKind::Sum, Attrs::new().with("axis", Attr::Int(-2)))), Ok(ReduceAxis(-2)));
        assert!(
            matches!(reduce_axis(&op(OpKind::Sum, Attrs::new())), Err(GraphError::Value(m)) if m.starts_with("sum: axis:"))
        );
        let flags = Attrs::new().with("reverse", Attr::Bool(true));
        assert_eq!(cumsum_params(&op(OpKind::Cumsum, flags)), Ok(CumsumParams { exclusive: false, reverse: true }));
        let eps = |e: f64| layer_norm_params(&op(OpKind::LayerNorm, Attrs::new().with("epsilon", Attr::Float(e))));
        assert_eq!(eps(1e-5), Ok(LayerNormParams { epsilon: 1e-5 }));
        assert_eq!(eps(0.0), Err(GraphError::Value("layer_norm: epsilon: must be positive, got 0".into())));
    }

    #[test]
    fn reductions_keep_the_axis_with_size_one() {
        for kind in [OpKind::Sum, OpKind::Mean, OpKind::ReduceMax, OpKind::ReduceMin] {
            let out = run(kind, axis(-1), &[t(DType::Int32, &["batch", "3"])]).unwrap();
            assert_eq!(out, vec![t(DType::Int32, &["batch", "1"])], "{kind:?}");
        }
        let out = run(OpKind::Sum, axis(0), &[t(DType::Float16, &["batch", "3"])]).unwrap();
        assert_eq!(out[0], t(DType::Float16, &["1", "3"]));
    }

    #[test]
    fn arg_reductions_give_int64() {
        let out = run(OpKind::ArgMax, axis(1), &[t(DType::Float32, &["2", "n", "4"])]).unwrap();
        assert_eq!(out[0], t(DType::Int64, &["2", "1", "4"]));
        let out = run(OpKind::ArgMin, axis(-3), &[t(DType::Bool, &["2", "n", "4"])]).unwrap();
        assert_eq!(out[0], t(DType::Int64, &["1", "n", "4"]));
    }

    #[test]
    fn bad_axes_are_index_errors() {
        let err = run(OpKind::Sum, axis(2), &[t(DType::Float32, &["b", "3"])]).unwrap_err();
        assert!(
            matches!(&err, GraphError::Index(m) if m.starts_with("sum: axis:") && m.contains("float32[b, 3]")),
            "{err}"
        );
        assert!(matches!(run(OpKind::ArgMax, axis(-1), &[t(DType::Float32, &[])]), Err(GraphError::Index(_))));
        assert!(matches!(run(OpKind::Cumsum, axis(-3), &[t(DType::Float32, &["2", "2"])]), Err(GraphError::Index(_))));
        assert!(matches!(run(OpKind::Softmax, axis(2), &[t(DType::Float32, &["2", "2"])]), Err(GraphError::Index(_))));
    }

    #[test]
    fn softmax_and_cumsum_keep_the_type() {
        let x = t(DType::Float16, &["b", "7"]);
        assert_eq!(run(OpKind::Softmax, axis(0), std::slice::from_ref(&x)).unwrap()[0], x);
        assert_eq!(run(OpKind::LogSoftmax, axis(-1), std::slice::from_ref(&x)).unwrap()[0], x);
        assert_eq!(run(OpKind::Softmax, axis(-1), &[t(DType::Float32, &[])]).unwrap()[0], t(DType::Float32, &[]));
        let attrs = axis(0).with("exclusive", Attr::Bool(true)).with("reverse", Attr::Bool(true));
        assert_eq!(run(OpKind::Cumsum, attrs, std::slice::from_ref(&x)).unwrap()[0], x);
        let bad = axis(0).with("exclusive", Attr::Int(1));
        assert!(matches!(run(OpKind::Cumsum, bad, &[x]), Err(GraphError::Type(_))));
    }

    #[test]
    fn top_k_gives_values_and_indices() {
        let k = |k: i64, a: i64| axis(a).with("k", Attr::Int(k));
        let out = run(OpKind::TopK, k(2, -1), &[t(DType::Float32, &["b", "5"])]).unwrap();
        assert_eq!(out, vec![t(DType::Float32, &["b", "2"]), t(DType::Int64, &["b", "2"])]);
        let out = run(OpKind::TopK, k(3, 1), &[t(DType::Int8, &["2", "n"])]).unwrap();
        assert_eq!(out, vec![t(DType::Int8, &["2", "3"]), t(DType::Int64, &["2", "3"])]);
        assert!(run(OpKind::TopK, k(5, -1), &[t(DType::Float32, &["5"])]).is_ok());
        let err = run(OpKind::TopK, k(6, -1), &[t(DType::Float32, &["5"])]).unwrap_err();
        assert!(matches!(&err, GraphError::Value(m) if m.starts_with("top_k: k:")), "{err}");
        assert!(matches!(run(OpKind::TopK, k(-1, -1), &[t(DType::Float32, &["5"])]), Err(GraphError::Value(_))));
        assert!(matches!(run(OpKind::TopK, k(1, 1), &[t(DType::Float32, &["5"])]), Err(GraphError::Index(_))));
    }

    #[test]
    fn argsort_is_rank_one() {
        let out = run(OpKind::ArgSort, Attrs::new().with("ascending", Attr::Bool(false)), &[t(DType::Float32, &["n"])])
            .unwrap();
        assert_eq!(out[0], t(DType::Int64, &["n"]));
        let err = run(OpKind::ArgSort, Attrs::new(), &[t(DType::Float32, &["2", "3"])]).unwrap_err();
        assert!(matches!(&err, GraphError::Value(m) if m.starts_with("argsort: x:")), "{err}");
    }

    #[test]
    fn layer_norm_checks_gamma_beta_and_epsilon() {
        let eps = |e: f64| Attrs::new().with("epsilon", Attr::Float(e));
        let x = t(DType::Float32, &["b", "h"]);
        let p = t(DType::Float32, &["h"]);
        let out = run(OpKind::LayerNorm, eps(1e-5), &[x.clone(), p.clone(), p.clone()]).unwrap();
        assert_eq!(out[0], x);
        let err = run(OpKind::LayerNorm, eps(1e-5), &[x.clone(), t(DType::Float32, &["4"]), p.clone()]).unwrap_err();
        assert!(matches!(&err, GraphError::Value(m) if m.starts_with("layer_norm: gamma:")), "{err}");
        let err =
            run(OpKind::LayerNorm, eps(1e-5), &[x.clone(), p.clone(), t(DType::Float32, &["1", "h"])]).unwrap_err();
        assert!(matches!(&err, GraphError::Value(m) if m.starts_with("layer_norm: beta:")), "{err}");
        for bad in [0.0, -1.0, f64::NAN] {
            let err = run(OpKind::LayerNorm, eps(bad), &[x.clone(), p.clone(), p.clone()]).unwrap_err();
            assert!(matches!(&err, GraphError::Value(m) if m.starts_with("layer_norm: epsilon:")), "{err}");
        }
        let err = run(OpKind::LayerNorm, eps(1e-5), &[x.clone(), t(DType::Float16, &["h"]), p]).unwrap_err();
        assert!(matches!(err, GraphError::Type(_)));
    }
}
