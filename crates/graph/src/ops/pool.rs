//! Sliding windows: pooling (avg_pool2d, max_pool2d on NHWC input), fold, and the window count
//! the convolutions use too. Dispatched from `conv.rs`. The attributes are read once into
//! `WindowParams`, which shape inference and both backends use.
//!
//! Attributes:
//! - avg_pool2d, max_pool2d: `kernel_size` [2 dims, static ones >= 1; symbolic allowed],
//!   `stride` [2 ints >= 1], `dilation` [2 ints >= 1], `padding` [4 ints >= 0: top, bottom,
//!   left, right; the Python op pads both sides of each dim alike], `ceil_mode` (bool, default
//!   false); avg_pool2d also `count_boundary` (bool, default true), which changes values only.
//! - fold: `output_size` [2 dims], `kernel_size` [2 dims], `stride`, `dilation` [2 ints >= 1],
//!   `padding` [2 ints >= 0, added on both sides of each spatial dim].
//!
//! All keep the input's dtype.

use super::conv::{dim_ok, int_list};
use super::{Ctx, Op, OpKind, one};
use crate::dim::Dim;
use crate::error::Result;
use crate::types::{TensorType, Type, shape_str};

/// Kernel sizes must be at least 1 where they are known.
pub(super) fn check_kernel(ctx: &Ctx, arg: &str, kernel: &[Dim]) -> Result<()> {
    if kernel.iter().any(|k| k.as_static().is_some_and(|k| k < 1)) {
        return Err(ctx.value_err(arg, format!("kernel sizes must be positive, got {}", shape_str(kernel))));
    }
    Ok(())
}

/// The number of window positions along one dimension: `(size + pad_before + pad_after -
/// dilation * (kernel - 1) - 1) // stride + 1` (rounding up with `ceil`), or None when the
/// window does not fit the padded size. `pads` is the sum of both paddings. `window_dim` is the
/// same count over dims.
pub fn window_count(
    size: usize,
    kernel: usize,
    stride: usize,
    dilation: usize,
    pads: usize,
    ceil: bool,
) -> Option<usize> {
    let room = size.checked_add(pads)?.checked_sub(dilation.checked_mul(kernel.checked_sub(1)?)?.checked_add(1)?)?;
    Some((room + stride + if ceil { stride - 1 } else { 0 }) / stride)
}

/// `window_count` over dims, built as one floor division so that a symbolic result reads as
/// MAX prints it: `(h + 1) // 2`, not `((h + -1) // 2) + 1`.
#[allow(clippy::too_many_arguments)]
pub(super) fn window_dim(
    ctx: &Ctx,
    arg: &str,
    size: &Dim,
    kernel: &Dim,
    stride: i64,
    dilation: i64,
    pads: [i64; 2],
    ceil: bool,
) -> Result<Dim> {
    let span = dim_ok(ctx, arg, kernel.sub(&Dim::stat(1)).and_then(|k| k.mul(&Dim::stat(dilation))))?;
    let padded = dim_ok(ctx, arg, size.add(&Dim::stat(pads[0])).and_then(|d| d.add(&Dim::stat(pads[1]))))?;
    let room = dim_ok(ctx, arg, padded.sub(&span).and_then(|r| r.sub(&Dim::stat(1))))?;
    if room.as_static().is_some_and(|r| r < 0) {
        let window = dim_ok(ctx, arg, span.add(&Dim::stat(1)))?;
        return Err(
            ctx.value_err(arg, format!("the window spans {window} elements but the padded input has only {padded}"))
        );
    }
    let round_up = if ceil { stride - 1 } else { 0 };
    let num = dim_ok(ctx, arg, room.add(&Dim::stat(stride)).and_then(|d| d.add(&Dim::stat(round_up))))?;
    dim_ok(ctx, arg, num.floordiv(&Dim::stat(stride)))
}

fn two_dims<'a>(ctx: &Ctx<'a>, key: &str) -> Result<&'a [Dim]> {
    let d = ctx.dims(key)?;
    if d.len() != 2 {
        return Err(ctx.value_err(key, format!("expected 2 sizes, got {}", shape_str(d))));
    }
    Ok(d)
}

/// The attributes of avg_pool2d, max_pool2d and fold, parsed and checked once (the module
/// comment lists them): shape inference and both backends read these.
#[derive(Clone, Debug, PartialEq)]
pub struct WindowParams {
    /// Height and width; a static size is at least 1, a symbolic one is known to shapes only.
    pub kernel: [Dim; 2],
    /// Each at least 1.
    pub stride: [usize; 2],
    pub dilation: [usize; 2],
    /// Before and after each spatial dim (fold's one padding per dim goes on both sides).
    pub padding: [usize; 4],
    /// Pooling: count a last window that overhangs the padded input.
    pub ceil_mode: bool,
    /// avg_pool2d: divide by the whole window rather than by the taps inside the input.
    pub count_boundary: bool,
    /// fold: the folded image's height and width (static ones at least 1).
    pub output_size: Option<[Dim; 2]>,
}

impl WindowParams {
    /// Reads and checks the attributes of the window op `ctx` stages.
    pub fn parse(ctx: &Ctx) -> Result<WindowParams> {
        let fold = ctx.kind == OpKind::Fold;
        let output_size = if fold {
            let out = two_dims(ctx, "output_size")?;
            if out.iter().any(|d| d.as_static().is_some_and(|n| n < 1)) {
                return Err(ctx.value_err("output_size", format!("sizes must be positive, got {}", shape_str(out))));
            }
            Some([out[0].clone(), out[1].clone()])
        } else {
            None
        };
        let kernel = two_dims(ctx, "kernel_size")?;
        check_kernel(ctx, "kernel_size", kernel)?;
        let pair = |key: &str, default: i64, min: i64| -> Result<[usize; 2]> {
            let v = int_list(ctx, key, 2, default, min)?;
            Ok([v[0] as usize, v[1] as usize])
        };
        let stride = pair("stride", 1, 1)?;
        let dilation = pair("dilation", 1, 1)?;
        let padding = if fold {
            let [h, w] = pair("padding", 0, 0)?;
            [h, h, w, w]
        } else {
            let v = int_list(ctx, "padding", 4, 0, 0)?;
            [v[0] as usize, v[1] as usize, v[2] as usize, v[3] as usize]
        };
        let ceil_mode = !fold && ctx.boolean("ceil_mode", false)?;
        let count_boundary = if ctx.kind == OpKind::AvgPool2d { ctx.boolean("count_boundary", true)? } else { true };
        Ok(WindowParams {
            kernel: [kernel[0].clone(), kernel[1].clone()],
            stride,
            dilation,
            padding,
            ceil_mode,
            count_boundary,
            output_size,
        })
    }

    /// The number of window positions along spatial dim `i` of `size` elements (for fold, of
    /// the output), as a dim.
    fn count(&self, ctx: &Ctx, arg: &str, i: usize, size: &Dim) -> Result<Dim> {
        let pads = [self.padding[2 * i] as i64, self.padding[2 * i + 1] as i64];
        let (stride, dilation) = (self.stride[i] as i64, self.dilation[i] as i64);
        window_dim(ctx, arg, size, &self.kernel[i], stride, dilation, pads, self.ceil_mode)
    }
}

/// The parameters of avg_pool2d, max_pool2d or fold `op`.
pub fn window_params(op: &Op) -> Result<WindowParams> {
    WindowParams::parse(&Ctx::of_op(op))
}

pub(super) fn pool2d(ctx: &Ctx) -> Result<Vec<Type>> {
    ctx.expect_inputs(1)?;
    let x = ctx.tensor(0)?;
    if x.rank() != 4 {
        return Err(ctx.value_err(
            "input",
            format!("must be rank 4 (NHWC: batch, height, width, channels), got shape {}", shape_str(&x.shape)),
        ));
    }
    let p = WindowParams::parse(ctx)?;
    let mut shape = vec![x.shape[0].clone()];
    for i in 0..2 {
        shape.push(p.count(ctx, "input", i, &x.shape[1 + i])?);
    }
    shape.push(x.shape[3].clone());
    one(TensorType { shape, ..x.clone() })
}

/// [N, C * kernel_h * kernel_w, L] blocks back into [N, C, output_h, output_w]; L must be the
/// number of window positions over the padded output.
pub(super) fn fold(ctx: &Ctx) -> Result<Vec<Type>> {
    ctx.expect_inputs(1)?;
    let x = ctx.tensor(0)?;
    if x.rank() != 3 {
        return Err(ctx.value_err(
            "input",
            format!("must be rank 3 (batch, channels * kernel size, blocks), got shape {}", shape_str(&x.shape)),
        ));
    }
    let p = WindowParams::parse(ctx)?;
    let Some(out) = &p.output_size else {
        return Err(ctx.value_err("output_size", "missing a shape"));
    };
    let kernel = &p.kernel;
    let kernel_elems = dim_ok(ctx, "kernel_size", kernel[0].mul(&kernel[1]))?;
    let packed = &x.shape[1];
    if let (Some(ck), Some(k)) = (packed.as_static(), kernel_elems.as_static())
        && ck % k != 0
    {
        return Err(ctx.value_err(
            "input",
            format!("dimension 1 ({ck}) must be a multiple of the kernel size {} * {} = {k}", kernel[0], kernel[1]),
        ));
    }
    let channels = dim_ok(ctx, "input", packed.floordiv(&kernel_elems))?;

    let mut blocks = Dim::stat(1);
    for i in 0..2 {
        let n = p.count(ctx, "output_size", i, &out[i])?;
        blocks = dim_ok(ctx, "input", blocks.mul(&n))?;
    }
    if x.shape[2] != blocks {
        return Err(ctx.value_err(
            "input",
            format!(
                "its last dimension ({}) must equal the number of blocks {blocks} that output_size, kernel_size, stride, dilation and padding give (insert a rebind if they are equal at run time)",
                x.shape[2]
            ),
        ));
    }
    let shape = vec![x.shape[0].clone(), channels, out[0].clone(), out[1].clone()];
    one(TensorType { shape, ..x.clone() })
}

#[cfg(test)]
mod tests {
    use super::super::{Op, infer as infer_op};
    use super::*;
    use crate::attrs::{Attr, Attrs};
    use crate::dtype::DType;
    use crate::error::GraphError;
    use crate::ops::testing::{d as dim, dims_attr as dims, ints};
    use crate::types::DeviceRef;

    fn t(dims: &[&str]) -> Type {
        Type::Tensor(TensorType::new(DType::Int32, dims.iter().map(|d| dim(d)).collect(), DeviceRef::CPU))
    }

    fn run(kind: OpKind, attrs: Attrs, x: &[&str]) -> Result<Type> {
        infer_op(&Op { kind, attrs }, &[t(x)]).map(|mut v| v.remove(0))
    }

    fn shape(t: &Type) -> String {
        shape_str(&t.tensor().unwrap().shape)
    }

    fn k(kh: &str, kw: &str) -> Attrs {
        Attrs::new().with("kernel_size", dims(&[kh, kw]))
    }

    #[test]
    fn pool_static_shapes() {
        assert_eq!(run(OpKind::AvgPool2d, k("2", "2"), &["1", "8", "8", "3"]).unwrap(), t(&["1", "7", "7", "3"]));
        let a = k("3", "2")
            .with("stride", ints(&[2, 3]))
            .with("dilation", ints(&[1, 2]))
            .with("padding", ints(&[1, 1, 0, 0]));
        assert_eq!(run(OpKind::AvgPool2d, a, &["1", "8", "9", "3"]).unwrap(), t(&["1", "4", "3", "3"]));
        let ceil = k("2", "2").with("stride", ints(&[2, 2])).with("ceil_mode", Attr::Bool(true));
        assert_eq!(run(OpKind::MaxPool2d, ceil.clone(), &["1", "7", "9", "3"]).unwrap(), t(&["1", "4", "5", "3"]));
        let ceil_pad = ceil.with("padding", ints(&[1, 1, 1, 1]));
        assert_eq!(run(OpKind::MaxPool2d, ceil_pad, &["1", "8", "9", "3"]).unwrap(), t(&["1", "5", "6", "3"]));
    }

    #[test]
    fn pool_symbolic_shapes() {
        let a = k("3", "3").with("stride", ints(&[2, 2])).with("padding", ints(&[1, 1, 1, 1]));
        assert_eq!(
            shape(&run(OpKind::AvgPool2d, a, &["n", "h", "w", "3"]).unwrap()),
            "[n, (h + 1) // 2, (w + 1) // 2, 3]"
        );
        let ceil = k("3", "3").with("stride", ints(&[2, 2])).with("ceil_mode", Attr::Bool(true));
        assert_eq!(shape(&run(OpKind::MaxPool2d, ceil, &["n", "h", "w", "3"]).unwrap()), "[n, h // 2, w // 2, 3]");
        assert_eq!(
            shape(&run(OpKind::AvgPool2d, k("k", "k"), &["1", "8", "8", "3"]).unwrap()),
            "[1, (k * -1) + 9, (k * -1) + 9, 3]"
        );
    }

    #[test]
    fn pool_errors() {
        let huge = k("2", "2").with("padding", ints(&[i64::MAX, 1, 0, 0]));
        let err = run(OpKind::MaxPool2d, huge, &["1", "8", "8", "3"]).unwrap_err();
        assert!(matches!(&err, GraphError::Value(m) if m.contains("overflow")), "{err}");
        let err = run(OpKind::AvgPool2d, k("9", "3"), &["1", "8", "8", "3"]).unwrap_err();
        assert!(
            matches!(&err, GraphError::Value(m) if m.starts_with("avg_pool2d: input:") && m.contains("int32[1, 8, 8, 3]")),
            "{err}"
        );
        assert!(
            matches!(run(OpKind::MaxPool2d, k("0", "2"), &["1", "8", "8", "3"]), Err(GraphError::Value(m)) if m.starts_with("max_pool2d: kernel_size:"))
        );
        assert!(
            matches!(run(OpKind::MaxPool2d, k("2", "2"), &["8", "8", "3"]), Err(GraphError::Value(m)) if m.starts_with("max_pool2d: input:"))
        );
        let s0 = k("2", "2").with("stride", ints(&[0, 1]));
        assert!(
            matches!(run(OpKind::AvgPool2d, s0, &["1", "8", "8", "3"]), Err(GraphError::Value(m)) if m.starts_with("avg_pool2d: stride:"))
        );
        let k3 = Attrs::new().with("kernel_size", dims(&["2", "2", "2"]));
        assert!(
            matches!(run(OpKind::AvgPool2d, k3, &["1", "8", "8", "3"]), Err(GraphError::Value(m)) if m.starts_with("avg_pool2d: kernel_size:"))
        );
    }

    #[test]
    fn window_params_read_once() {
        let p = window_params(&Op { kind: OpKind::MaxPool2d, attrs: k("3", "k").with("ceil_mode", Attr::Bool(true)) })
            .unwrap();
        assert_eq!((p.kernel, p.stride, p.padding, p.ceil_mode), ([dim("3"), dim("k")], [1, 1], [0; 4], true));
        let attrs = fold_attrs(["4", "5"], ["2", "2"]).with("padding", ints(&[1, 2])).with("dilation", ints(&[2, 1]));
        let p = window_params(&Op { kind: OpKind::Fold, attrs }).unwrap();
        assert_eq!((p.padding, p.dilation, p.output_size), ([1, 1, 2, 2], [2, 1], Some([dim("4"), dim("5")])));
        let err = window_params(&Op { kind: OpKind::AvgPool2d, attrs: k("2", "2").with("stride", ints(&[0, 1])) });
        assert_eq!(
            err.unwrap_err(),
            GraphError::Value("avg_pool2d: stride: values must be positive, got [0, 1]".into())
        );
    }

    #[test]
    fn window_count_matches_the_dims() {
        assert_eq!(window_count(8, 3, 2, 1, 2, false), Some(4));
        assert_eq!(window_count(7, 2, 2, 1, 0, true), Some(4));
        assert_eq!(window_count(2, 3, 1, 1, 0, false), None);
        assert_eq!(window_count(4, 0, 1, 1, 0, false), None);
        assert_eq!(window_count(usize::MAX, 1, 1, 1, 1, false), None);
        let ctx = Ctx { kind: OpKind::MaxPool2d, inputs: &[], attrs: &Attrs::new() };
        for (size, kernel, stride, dilation, pads, ceil) in [(9, 3, 2, 2, [1, 2], false), (9, 2, 4, 1, [0, 1], true)] {
            let d = window_dim(&ctx, "x", &Dim::stat(size), &Dim::stat(kernel), stride, dilation, pads, ceil).unwrap();
            let n = window_count(
                size as usize,
                kernel as usize,
                stride as usize,
                dilation as usize,
                (pads[0] + pads[1]) as usize,
                ceil,
            );
            assert_eq!(d.as_static(), n.map(|n| n as i64));
        }
    }

    fn fold_attrs(out: [&str; 2], kernel: [&str; 2]) -> Attrs {
        Attrs::new().with("output_size", dims(&out)).with("kernel_size", dims(&kernel))
    }

    #[test]
    fn fold_shapes() {
        assert_eq!(
            run(OpKind::Fold, fold_attrs(["4", "5"], ["2", "2"]), &["1", "12", "12"]).unwrap(),
            t(&["1", "3", "4", "5"])
        );
        let a = fold_attrs(["5", "6"], ["3", "2"])
            .with("stride", ints(&[2, 1]))
            .with("padding", ints(&[1, 0]))
            .with("dilation", ints(&[1, 2]));
        assert_eq!(run(OpKind::Fold, a, &["n", "12", "12"]).unwrap(), t(&["n", "2", "5", "6"]));
        assert!(run(OpKind::Fold, fold_attrs(["h", "w"], ["2", "2"]), &["n", "12", "L"]).is_err());
        let blocks = dim("h").sub(&Dim::stat(1)).unwrap().mul(&dim("w").sub(&Dim::stat(1)).unwrap()).unwrap();
        let x = Type::Tensor(TensorType::new(DType::Int32, vec![dim("n"), dim("ck"), blocks], DeviceRef::CPU));
        let out = infer_op(&Op { kind: OpKind::Fold, attrs: fold_attrs(["h", "w"], ["2", "2"]) }, &[x]).unwrap();
        assert_eq!(shape(&out[0]), "[n, ck // 4, h, w]");
    }

    #[test]
    fn fold_errors() {
        let err = run(OpKind::Fold, fold_attrs(["4", "5"], ["2", "2"]), &["1", "12", "11"]).unwrap_err();
        assert!(matches!(&err, GraphError::Value(m) if m.starts_with("fold: input:") && m.contains("12")), "{err}");
        let err = run(OpKind::Fold, fold_attrs(["4", "5"], ["2", "2"]), &["1", "13", "12"]).unwrap_err();
        assert!(
            matches!(&err, GraphError::Value(m) if m.starts_with("fold: input:") && m.contains("multiple")),
            "{err}"
        );
        let err = run(OpKind::Fold, fold_attrs(["4", "5"], ["6", "2"]), &["1", "36", "12"]).unwrap_err();
        assert!(matches!(&err, GraphError::Value(m) if m.starts_with("fold: output_size:")), "{err}");
        assert!(
            matches!(run(OpKind::Fold, fold_attrs(["4", "5"], ["2", "2"]), &["12", "12"]), Err(GraphError::Value(m)) if m.starts_with("fold: input:"))
        );
        let s0 = fold_attrs(["4", "5"], ["2", "2"]).with("stride", ints(&[0, 1]));
        assert!(
            matches!(run(OpKind::Fold, s0, &["1", "12", "12"]), Err(GraphError::Value(m)) if m.starts_with("fold: stride:"))
        );
    }
}
