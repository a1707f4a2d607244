//! Convolutions: conv2d and conv3d. conv2d_transpose lives in `conv_transpose.rs`, the pooling
//! ops and fold in `pool.rs` (with the window count all of them use); this module dispatches the
//! whole family, reads the convolutions' attributes once into `ConvParams` (what shape inference
//! and both backends use) and holds the argument checks they share.
//!
//! Attributes (all optional in Rust, with the Python defaults):
//! - conv2d: `stride` [2 ints >= 1], `dilation` [2 ints >= 1], `padding` [4 ints >= 0: top,
//!   bottom, left, right], `groups` (int >= 1), `input_layout` ("NHWC" | "NCHW"),
//!   `filter_layout` ("RSCF" | "FCRS" | "CFRS").
//! - conv3d: `stride`, `dilation` [3 ints], `padding` [6 ints: depth before/after, height
//!   before/after, width before/after], `groups`, `input_layout` ("NHWC" is NDHWC, "NCHW" is
//!   NCDHW), `filter_layout` ("QRSCF" | "FCQRS").
//! - conv2d_transpose: `stride`, `dilation`, `padding` as conv2d, `output_paddings` [2 ints >= 0,
//!   each smaller than its stride], `input_layout`, `filter_layout`.
//!
//! Inputs are `x`, `filter` and an optional `bias` of shape [out_channels], all of one dtype (the
//! Python layer casts them to the promoted dtype) on one device.
//!
//! Layout letters: R/S (Q) are the kernel's spatial sizes, C the input channels per group, F the
//! output channels. For conv2d_transpose MAX documents RSCF as (R, S, out_channels, in_channels)
//! and its own layers pass torch's (in_channels, out_channels, R, S) as CFRS; FCRS is then
//! (out_channels, in_channels, R, S).
//!
//! MAX infers conv2d and conv3d results channels-last ([N, H, W, F]) for either input layout,
//! while conv2d_transpose keeps the input's layout; we infer the same shapes.

use super::pool::{check_kernel, window_dim};
use super::{Ctx, Op, OpKind, conv_transpose, one, pool};
use crate::dim::Dim;
use crate::error::Result;
use crate::types::{TensorType, Type, shape_str};

pub fn infer(ctx: &Ctx) -> Result<Vec<Type>> {
    match ctx.kind {
        OpKind::Conv2d | OpKind::Conv3d => conv(ctx),
        OpKind::Conv2dTranspose => conv_transpose::conv_transpose(ctx),
        OpKind::AvgPool2d | OpKind::MaxPool2d => pool::pool2d(ctx),
        OpKind::Fold => pool::fold(ctx),
        _ => Err(ctx.value_err("op", "not a convolution op")),
    }
}

/// `n` integers from attribute `key`, each at least `min`; `default` for each when absent.
pub(super) fn int_list(ctx: &Ctx, key: &str, n: usize, default: i64, min: i64) -> Result<Vec<i64>> {
    if ctx.attr(key).is_none() {
        return Ok(vec![default; n]);
    }
    let v = ctx.ints(key)?;
    if v.len() != n {
        return Err(ctx.value_err(key, format!("expected {n} values, got {} ({v:?})", v.len())));
    }
    if v.iter().any(|&x| x < min) {
        let rule = if min == 1 { "positive" } else { "non-negative" };
        return Err(ctx.value_err(key, format!("values must be {rule}, got {v:?}")));
    }
    Ok(v.to_vec())
}

/// Wraps a Dim arithmetic error (overflow) with the op and argument.
pub(super) fn dim_ok(ctx: &Ctx, arg: &str, r: std::result::Result<Dim, crate::error::GraphError>) -> Result<Dim> {
    r.map_err(|e| ctx.value_err(arg, e.to_string()))
}

/// x, filter and the optional bias: tensors of one dtype on one device.
pub(super) fn conv_inputs<'a>(ctx: &Ctx<'a>) -> Result<(&'a TensorType, &'a TensorType, Option<&'a TensorType>)> {
    if !(2..=3).contains(&ctx.inputs.len()) {
        return Err(ctx
            .value_err("inputs", format!("expected x, filter and an optional bias, got {} inputs", ctx.inputs.len())));
    }
    let x = ctx.tensor(0)?;
    let f = ctx.tensor(1)?;
    let bias = if ctx.inputs.len() == 3 { Some(ctx.tensor(2)?) } else { None };
    let idx: Vec<usize> = (0..ctx.inputs.len()).collect();
    ctx.same_device(&idx)?;
    for (i, t) in [(1, Some(f)), (2, bias)] {
        if let Some(t) = t
            && t.dtype != x.dtype
        {
            return Err(ctx.type_err(
                &ctx.arg(i),
                format!("dtype {} differs from x's {}; cast them to one dtype first", t.dtype, x.dtype),
            ));
        }
    }
    Ok((x, f, bias))
}

pub(super) fn check_rank(ctx: &Ctx, arg: &str, t: &TensorType, rank: usize, what: &str) -> Result<()> {
    if t.rank() != rank {
        return Err(ctx.value_err(arg, format!("must be rank {rank} ({what}), got shape {}", shape_str(&t.shape))));
    }
    Ok(())
}

pub(super) fn check_bias(ctx: &Ctx, bias: Option<&TensorType>, out_channels: &Dim) -> Result<()> {
    if let Some(b) = bias
        && (b.rank() != 1 || &b.shape[0] != out_channels)
    {
        return Err(ctx.value_err(
            "bias",
            format!("shape {} must be [{out_channels}], the output channels", shape_str(&b.shape)),
        ));
    }
    Ok(())
}

/// Where a filter's dims sit, by `filter_layout`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FilterLayout {
    Rscf,
    Fcrs,
    Cfrs,
    Qrscf,
    Fcqrs,
}

impl FilterLayout {
    pub fn name(self) -> &'static str {
        match self {
            FilterLayout::Rscf => "RSCF",
            FilterLayout::Fcrs => "FCRS",
            FilterLayout::Cfrs => "CFRS",
            FilterLayout::Qrscf => "QRSCF",
            FilterLayout::Fcqrs => "FCQRS",
        }
    }
}

/// The positions in a filter's shape of the kernel dims, of the input channels (per group) and
/// of the output channels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilterAxes {
    pub kernel: std::ops::Range<usize>,
    pub input: usize,
    pub output: usize,
}

/// The attributes of conv2d, conv3d and conv2d_transpose, parsed and checked once (the module
/// comment lists them): shape inference and both backends read these.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConvParams {
    /// conv2d_transpose rather than a forward convolution.
    pub transposed: bool,
    /// The number of spatial dims: 3 for conv3d, else 2.
    pub nd: usize,
    /// `input_layout` NHWC (NDHWC for conv3d) rather than NCHW (NCDHW).
    pub channels_last: bool,
    pub filter_layout: FilterLayout,
    /// Per spatial dim, each at least 1.
    pub stride: Vec<usize>,
    pub dilation: Vec<usize>,
    /// Before and after each spatial dim: `2 * nd` values.
    pub padding: Vec<usize>,
    /// conv2d_transpose's extra output size per spatial dim, each below its stride (zeros for
    /// the forward convolutions).
    pub output_padding: Vec<usize>,
    /// At least 1; conv2d_transpose has no groups (1).
    pub groups: usize,
}

impl ConvParams {
    /// Reads and checks the attributes of the convolution `ctx` stages.
    pub fn parse(ctx: &Ctx) -> Result<ConvParams> {
        let transposed = ctx.kind == OpKind::Conv2dTranspose;
        let nd = if ctx.kind == OpKind::Conv3d { 3 } else { 2 };
        let layout = if ctx.attr("input_layout").is_some() { ctx.string("input_layout")? } else { "NHWC" };
        let channels_last = match layout {
            "NHWC" => true,
            "NCHW" => false,
            other => {
                return Err(ctx.value_err("input_layout", format!("must be NHWC or NCHW, got {other:?}")));
            }
        };
        let name = if ctx.attr("filter_layout").is_some() {
            ctx.string("filter_layout")?
        } else if nd == 2 {
            "RSCF"
        } else {
            "QRSCF"
        };
        let filter_layout = match (transposed, nd, name) {
            (_, 2, "RSCF") => FilterLayout::Rscf,
            (_, 2, "FCRS") => FilterLayout::Fcrs,
            (_, 2, "CFRS") => FilterLayout::Cfrs,
            (false, 3, "QRSCF") => FilterLayout::Qrscf,
            (false, 3, "FCQRS") => FilterLayout::Fcqrs,
            (true, ..) => {
                return Err(ctx.value_err(
                    "filter_layout",
                    format!("a transposed 2-D convolution takes RSCF, CFRS or FCRS, got {name:?}"),
                ));
            }
            _ => {
                let known = if nd == 2 { "RSCF, FCRS or CFRS" } else { "QRSCF or FCQRS" };
                return Err(ctx.value_err("filter_layout", format!("a {nd}-D convolution takes {known}, got {name:?}")));
            }
        };
        let groups = if transposed || ctx.attr("groups").is_none() { 1 } else { ctx.int("groups")? };
        if groups < 1 {
            return Err(ctx.value_err("groups", format!("must be positive, got {groups}")));
        }
        let stride = int_list(ctx, "stride", nd, 1, 1)?;
        let dilation = int_list(ctx, "dilation", nd, 1, 1)?;
        let padding = int_list(ctx, "padding", 2 * nd, 0, 0)?;
        let output_padding = if transposed { int_list(ctx, "output_paddings", nd, 0, 0)? } else { vec![0; nd] };
        // With stride s, s output sizes map back to the same input size; output padding picks
        // one of them, so it stays below the stride (MAX rejects it otherwise, whatever the
        // dilation).
        if output_padding.iter().zip(&stride).any(|(p, s)| p >= s) {
            return Err(ctx.value_err(
                "output_paddings",
                format!("each must be smaller than its stride, got {output_padding:?} with stride {stride:?}"),
            ));
        }
        let sizes = |v: Vec<i64>| v.into_iter().map(|x| x as usize).collect();
        Ok(ConvParams {
            transposed,
            nd,
            channels_last,
            filter_layout,
            stride: sizes(stride),
            dilation: sizes(dilation),
            padding: sizes(padding),
            output_padding: sizes(output_padding),
            groups: groups as usize,
        })
    }

    /// Where the filter's dims sit. conv2d_transpose reads RSCF as (R, S, out_channels,
    /// in_channels) and CFRS as (in_channels, out_channels, R, S), as MAX does.
    pub fn filter_axes(&self) -> FilterAxes {
        let nd = self.nd;
        let (kernel, input, output) = match self.filter_layout {
            FilterLayout::Rscf | FilterLayout::Qrscf if self.transposed => (0..nd, nd + 1, nd),
            FilterLayout::Rscf | FilterLayout::Qrscf => (0..nd, nd, nd + 1),
            FilterLayout::Fcrs | FilterLayout::Fcqrs => (2..nd + 2, 1, 0),
            FilterLayout::Cfrs => (2..nd + 2, 0, 1),
        };
        FilterAxes { kernel, input, output }
    }
}

/// The parameters of conv2d, conv3d or conv2d_transpose `op`.
pub fn conv_params(op: &Op) -> Result<ConvParams> {
    ConvParams::parse(&Ctx::of_op(op))
}

/// The input split for `input_layout`.
pub(super) struct Input {
    pub batch: Dim,
    pub spatial: Vec<Dim>,
    pub channels: Dim,
}

pub(super) fn split_input(ctx: &Ctx, x: &TensorType, p: &ConvParams) -> Result<Input> {
    let nd = p.nd;
    let what = if p.channels_last { "batch, spatial dims, channels" } else { "batch, channels, spatial dims" };
    check_rank(ctx, "x", x, nd + 2, what)?;
    let s = &x.shape;
    let (spatial, channels) =
        if p.channels_last { (s[1..=nd].to_vec(), s[nd + 1].clone()) } else { (s[2..].to_vec(), s[1].clone()) };
    Ok(Input { batch: s[0].clone(), spatial, channels })
}

/// The filter's kernel sizes, input channels (per group) and output channels, its rank checked.
pub(super) fn split_filter<'a>(ctx: &Ctx, f: &'a TensorType, p: &ConvParams) -> Result<(&'a [Dim], &'a Dim, &'a Dim)> {
    check_rank(ctx, "filter", f, p.nd + 2, &format!("{} layout", p.filter_layout.name()))?;
    let axes = p.filter_axes();
    let s = &f.shape;
    check_kernel(ctx, "filter", &s[axes.kernel.clone()])?;
    Ok((&s[axes.kernel], &s[axes.input], &s[axes.output]))
}

fn conv(ctx: &Ctx) -> Result<Vec<Type>> {
    let (x, f, bias) = conv_inputs(ctx)?;
    let p = ConvParams::parse(ctx)?;
    let Input { batch, spatial, channels } = split_input(ctx, x, &p)?;
    let layout = p.filter_layout.name();
    let (kernel, fc, fo) = split_filter(ctx, f, &p)?;
    let groups = p.groups as i64;
    let expected = dim_ok(ctx, "filter", fc.mul(&Dim::stat(groups)))?;
    if expected != channels {
        return Err(ctx.value_err(
            "filter",
            format!("x has {channels} input channels but the {layout} filter holds {fc} per group, times groups={groups} is {expected} (insert a rebind if they are equal at run time)"),
        ));
    }
    if let Some(n) = fo.as_static()
        && n % groups != 0
    {
        return Err(ctx.value_err("filter", format!("its {n} output channels are not divisible by groups={groups}")));
    }
    let mut shape = vec![batch];
    for i in 0..p.nd {
        let pads = [p.padding[2 * i] as i64, p.padding[2 * i + 1] as i64];
        shape.push(window_dim(
            ctx,
            "x",
            &spatial[i],
            &kernel[i],
            p.stride[i] as i64,
            p.dilation[i] as i64,
            pads,
            false,
        )?);
    }
    shape.push(fo.clone());
    check_bias(ctx, bias, fo)?;
    one(TensorType { shape, ..x.clone() })
}

#[cfg(test)]
mod tests {
    use super::super::Op;
    use super::*;
    use crate::attrs::{Attr, Attrs};
    use crate::dtype::DType;
    use crate::error::GraphError;
    use crate::ops::testing::{f32 as t, infer_one as run, ints, shape_of as shape};
    use crate::types::DeviceRef;

    #[test]
    fn conv2d_static_shapes() {
        let out = run(OpKind::Conv2d, Attrs::new(), &[t(&["1", "8", "8", "3"]), t(&["3", "3", "3", "16"])]).unwrap();
        assert_eq!(out, t(&["1", "6", "6", "16"]));
        let attrs = Attrs::new()
            .with("stride", ints(&[2, 1]))
            .with("dilation", ints(&[2, 1]))
            .with("padding", ints(&[1, 2, 0, 0]));
        let out = run(OpKind::Conv2d, attrs, &[t(&["1", "9", "7", "3"]), t(&["3", "3", "3", "16"])]).unwrap();
        assert_eq!(out, t(&["1", "4", "5", "16"]));
    }

    #[test]
    fn conv2d_symbolic_shapes_read_like_max() {
        let attrs = Attrs::new().with("stride", ints(&[2, 2])).with("padding", ints(&[1, 1, 1, 1]));
        let out = run(OpKind::Conv2d, attrs, &[t(&["n", "h", "w", "3"]), t(&["3", "3", "3", "16"])]).unwrap();
        assert_eq!(shape(&out), "[n, (h + 1) // 2, (w + 1) // 2, 16]");
        let attrs = Attrs::new()
            .with("stride", ints(&[2, 1]))
            .with("dilation", ints(&[2, 1]))
            .with("padding", ints(&[1, 2, 0, 0]));
        let out = run(OpKind::Conv2d, attrs, &[t(&["n", "h", "w", "3"]), t(&["3", "3", "3", "16"])]).unwrap();
        assert_eq!(shape(&out), "[n, h // 2, w + -2, 16]");
        let out = run(OpKind::Conv2d, Attrs::new(), &[t(&["1", "8", "8", "3"]), t(&["r", "s", "3", "16"])]).unwrap();
        assert_eq!(shape(&out), "[1, (r * -1) + 9, (s * -1) + 9, 16]");
    }

    #[test]
    fn conv2d_layouts_groups_and_bias() {
        let nchw =
            Attrs::new().with("input_layout", Attr::Str("NCHW".into())).with("filter_layout", Attr::Str("FCRS".into()));
        let out = run(OpKind::Conv2d, nchw, &[t(&["1", "3", "8", "10"]), t(&["16", "3", "3", "5"])]).unwrap();
        assert_eq!(out, t(&["1", "6", "6", "16"]));
        let cfrs = Attrs::new().with("filter_layout", Attr::Str("CFRS".into()));
        assert_eq!(
            run(OpKind::Conv2d, cfrs, &[t(&["1", "8", "8", "3"]), t(&["3", "16", "3", "3"])]).unwrap(),
            t(&["1", "6", "6", "16"])
        );
        let g = |n: i64| Attrs::new().with("groups", Attr::Int(n));
        assert_eq!(
            run(OpKind::Conv2d, g(4), &[t(&["1", "8", "8", "4"]), t(&["3", "3", "1", "8"])]).unwrap(),
            t(&["1", "6", "6", "8"])
        );
        let err = run(OpKind::Conv2d, g(2), &[t(&["1", "8", "8", "4"]), t(&["3", "3", "2", "15"])]).unwrap_err();
        assert!(
            matches!(&err, GraphError::Value(m) if m.starts_with("conv2d: filter:") && m.contains("divisible")),
            "{err}"
        );
        assert!(
            matches!(run(OpKind::Conv2d, g(0), &[t(&["1", "8", "8", "4"]), t(&["3", "3", "2", "16"])]), Err(GraphError::Value(m)) if m.starts_with("conv2d: groups:"))
        );
        let err =
            run(OpKind::Conv2d, Attrs::new(), &[t(&["1", "8", "8", "c"]), t(&["3", "3", "d", "16"])]).unwrap_err();
        assert!(matches!(&err, GraphError::Value(m) if m.starts_with("conv2d: filter:")), "{err}");
        let ok = run(OpKind::Conv2d, Attrs::new(), &[t(&["1", "8", "8", "3"]), t(&["3", "3", "3", "16"]), t(&["16"])])
            .unwrap();
        assert_eq!(ok, t(&["1", "6", "6", "16"]));
        let err = run(OpKind::Conv2d, Attrs::new(), &[t(&["1", "8", "8", "3"]), t(&["3", "3", "3", "16"]), t(&["15"])])
            .unwrap_err();
        assert!(matches!(&err, GraphError::Value(m) if m.starts_with("conv2d: bias:")), "{err}");
    }

    #[test]
    fn conv2d_rejects_bad_arguments() {
        let x = t(&["1", "8", "8", "3"]);
        let f = t(&["3", "3", "3", "16"]);
        let bad = |key: &str, v: &[i64]| {
            run(OpKind::Conv2d, Attrs::new().with(key, ints(v)), &[x.clone(), f.clone()]).unwrap_err()
        };
        for (key, v) in [
            ("stride", &[0, 1][..]),
            ("dilation", &[1, 0]),
            ("padding", &[-1, 0, 0, 0]),
            ("padding", &[1, 1]),
            ("stride", &[1, 1, 1]),
        ] {
            assert!(
                matches!(bad(key, v), GraphError::Value(m) if m.starts_with(&format!("conv2d: {key}:"))),
                "{key} {v:?}"
            );
        }
        let err = run(OpKind::Conv2d, Attrs::new(), &[t(&["1", "2", "2", "3"]), f.clone()]).unwrap_err();
        assert!(matches!(&err, GraphError::Value(m) if m.starts_with("conv2d: x:") && m.contains("window")), "{err}");
        assert!(
            matches!(run(OpKind::Conv2d, Attrs::new(), &[t(&["8", "8", "3"]), f.clone()]), Err(GraphError::Value(m)) if m.starts_with("conv2d: x:"))
        );
        assert!(
            matches!(run(OpKind::Conv2d, Attrs::new(), &[x.clone(), t(&["3", "3", "16"])]), Err(GraphError::Value(m)) if m.starts_with("conv2d: filter:"))
        );
        let q = Attrs::new().with("filter_layout", Attr::Str("QRSCF".into()));
        assert!(
            matches!(run(OpKind::Conv2d, q, &[x.clone(), f.clone()]), Err(GraphError::Value(m)) if m.starts_with("conv2d: filter_layout:"))
        );
        let f16 = Type::Tensor(TensorType::new(DType::Float16, vec![Dim::stat(3); 4], DeviceRef::CPU));
        assert!(matches!(run(OpKind::Conv2d, Attrs::new(), &[x, f16]), Err(GraphError::Type(_))));
    }

    #[test]
    fn conv_params_read_once() {
        let op = |kind, attrs| Op { kind, attrs };
        let p = conv_params(&op(OpKind::Conv3d, Attrs::new())).unwrap();
        assert_eq!((p.nd, p.channels_last, p.filter_layout, p.groups), (3, true, FilterLayout::Qrscf, 1));
        assert_eq!(
            (p.stride, p.dilation, p.padding, p.output_padding),
            (vec![1; 3], vec![1; 3], vec![0; 6], vec![0; 3])
        );
        let attrs = Attrs::new()
            .with("input_layout", Attr::Str("NCHW".into()))
            .with("filter_layout", Attr::Str("FCRS".into()))
            .with("groups", Attr::Int(4))
            .with("stride", ints(&[2, 1]))
            .with("padding", ints(&[1, 2, 3, 4]));
        let p = conv_params(&op(OpKind::Conv2d, attrs)).unwrap();
        assert_eq!(
            (p.channels_last, p.groups, &p.stride[..], &p.padding[..]),
            (false, 4, &[2, 1][..], &[1, 2, 3, 4][..])
        );
        assert_eq!(p.filter_axes(), FilterAxes { kernel: 2..4, input: 1, output: 0 });
        // conv2d_transpose reads RSCF as (R, S, out, in) and has no groups.
        let attrs = Attrs::new()
            .with("stride", ints(&[2, 2]))
            .with("output_paddings", ints(&[1, 0]))
            .with("groups", Attr::Int(3));
        let p = conv_params(&op(OpKind::Conv2dTranspose, attrs)).unwrap();
        assert_eq!((p.groups, p.output_padding.as_slice()), (1, &[1, 0][..]));
        assert_eq!(p.filter_axes(), FilterAxes { kernel: 0..2, input: 3, output: 2 });
        // Without input types, the messages name the op and the attribute alone.
        let err = conv_params(&op(OpKind::Conv2d, Attrs::new().with("dilation", ints(&[1, 0])))).unwrap_err();
        assert_eq!(err, GraphError::Value("conv2d: dilation: values must be positive, got [1, 0]".into()));
    }

    #[test]
    fn conv3d_shapes() {
        let out = run(OpKind::Conv3d, Attrs::new(), &[t(&["1", "5", "8", "8", "3"]), t(&["2", "3", "3", "3", "16"])])
            .unwrap();
        assert_eq!(out, t(&["1", "4", "6", "6", "16"]));
        let attrs = Attrs::new()
            .with("stride", ints(&[1, 2, 3]))
            .with("dilation", ints(&[2, 1, 1]))
            .with("padding", ints(&[0, 1, 1, 1, 1, 0]));
        let out = run(OpKind::Conv3d, attrs.clone(), &[t(&["2", "7", "9", "11", "3"]), t(&["2", "3", "3", "3", "16"])])
            .unwrap();
        assert_eq!(out, t(&["2", "6", "5", "4", "16"]));
        let out = run(OpKind::Conv3d, attrs, &[t(&["n", "d", "h", "w", "3"]), t(&["2", "3", "3", "3", "16"])]).unwrap();
        assert_eq!(shape(&out), "[n, d + -1, (h + 1) // 2, (w + 1) // 3, 16]");
        let fcqrs = Attrs::new().with("filter_layout", Attr::Str("FCQRS".into())).with("groups", Attr::Int(3));
        let out = run(OpKind::Conv3d, fcqrs, &[t(&["1", "5", "8", "8", "6"]), t(&["9", "2", "2", "3", "3"])]).unwrap();
        assert_eq!(out, t(&["1", "4", "6", "6", "9"]));
        let rscf = Attrs::new().with("filter_layout", Attr::Str("RSCF".into()));
        assert!(run(OpKind::Conv3d, rscf, &[t(&["1", "5", "8", "8", "3"]), t(&["2", "3", "3", "3", "16"])]).is_err());
    }
}
