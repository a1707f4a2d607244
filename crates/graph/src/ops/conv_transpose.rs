//! conv2d_transpose: the gradient of conv2d with respect to its input, staged as its own op.
//! Its attributes and filter layouts are described in `conv.rs`, which dispatches here.

use super::conv::{
    Input, check_bias, check_rank, conv_inputs, dim_ok, int_list, layout_attr, split_input, window_attrs,
};
use super::pool::check_kernel;
use super::{Ctx, one};
use crate::dim::Dim;
use crate::error::Result;
use crate::types::{TensorType, Type};

pub(super) fn conv_transpose(ctx: &Ctx) -> Result<Vec<Type>> {
    let (x, f, bias) = conv_inputs(ctx)?;
    let Input { batch, spatial, channels, channels_last } = split_input(ctx, x, 2)?;
    let layout = layout_attr(ctx, "RSCF")?;
    check_rank(ctx, "filter", f, 4, &format!("{layout} layout"))?;
    let s = &f.shape;
    // (kernel, in_channels, out_channels)
    let (kernel, fin, fout) = match layout {
        "RSCF" => (s[..2].to_vec(), &s[3], &s[2]),
        "CFRS" => (s[2..].to_vec(), &s[0], &s[1]),
        "FCRS" => (s[2..].to_vec(), &s[1], &s[0]),
        _ => {
            return Err(ctx.value_err(
                "filter_layout",
                format!("a transposed 2-D convolution takes RSCF, CFRS or FCRS, got {layout:?}"),
            ));
        }
    };
    check_kernel(ctx, "filter", &kernel)?;
    if fin != &channels {
        return Err(ctx.value_err(
            "filter",
            format!("x has {channels} channels but the {layout} filter takes {fin} input channels (insert a rebind if they are equal at run time)"),
        ));
    }
    let (stride, dilation, padding) = window_attrs(ctx, 2)?;
    let out_pad = int_list(ctx, "output_paddings", 2, 0, 0)?;
    for i in 0..2 {
        // With stride s, s output sizes map back to the same input size; output padding picks
        // one of them, so it stays below the stride (MAX rejects it otherwise, whatever the
        // dilation).
        if out_pad[i] >= stride[i] {
            return Err(ctx.value_err(
                "output_paddings",
                format!("each must be smaller than its stride, got {out_pad:?} with stride {stride:?}"),
            ));
        }
    }
    let mut out_spatial = Vec::with_capacity(2);
    for i in 0..2 {
        // (size - 1) * stride - pads + dilation * (kernel - 1) + 1 + output_padding
        let span = dim_ok(ctx, "filter", kernel[i].sub(&Dim::stat(1)).and_then(|k| k.mul(&Dim::stat(dilation[i]))))?;
        let grown = dim_ok(ctx, "x", spatial[i].sub(&Dim::stat(1)).and_then(|d| d.mul(&Dim::stat(stride[i]))))?;
        let size = dim_ok(
            ctx,
            "x",
            grown
                .add(&span)
                .and_then(|d| d.add(&Dim::stat(1)))
                .and_then(|d| d.add(&Dim::stat(out_pad[i])))
                .and_then(|d| d.sub(&Dim::stat(padding[2 * i])))
                .and_then(|d| d.sub(&Dim::stat(padding[2 * i + 1]))),
        )?;
        if size.as_static().is_some_and(|n| n < 1) {
            return Err(
                ctx.value_err("padding", format!("{padding:?} leaves no output along spatial dim {i} (size {size})"))
            );
        }
        out_spatial.push(size);
    }
    check_bias(ctx, bias, fout)?;
    let [h, w]: [Dim; 2] = out_spatial.try_into().map_err(|_| ctx.value_err("x", "expected two spatial dims"))?;
    let shape = if channels_last { vec![batch, h, w, fout.clone()] } else { vec![batch, fout.clone(), h, w] };
    one(TensorType { shape, ..x.clone() })
}

#[cfg(test)]
mod tests {
    use super::super::OpKind;
    use super::super::{Op, infer as infer_op};
    use super::*;
    use crate::attrs::{Attr, Attrs};
    use crate::dtype::DType;
    use crate::error::GraphError;
    use crate::types::DeviceRef;
    use crate::types::shape_str;

    fn dim(d: &str) -> Dim {
        d.parse::<i64>().map(Dim::stat).unwrap_or_else(|_| Dim::sym(d).unwrap())
    }

    fn t(dims: &[&str]) -> Type {
        Type::Tensor(TensorType::new(DType::Float32, dims.iter().map(|d| dim(d)).collect(), DeviceRef::CPU))
    }

    fn ints(v: &[i64]) -> Attr {
        Attr::Ints(v.to_vec())
    }

    fn run(kind: OpKind, attrs: Attrs, inputs: &[Type]) -> Result<Type> {
        infer_op(&Op { kind, attrs }, inputs).map(|mut v| v.remove(0))
    }

    fn shape(t: &Type) -> String {
        shape_str(&t.tensor().unwrap().shape)
    }

    #[test]
    fn conv2d_transpose_shapes() {
        let ct = |attrs: Attrs, x: &[&str], f: &[&str]| run(OpKind::Conv2dTranspose, attrs, &[t(x), t(f)]);
        assert_eq!(ct(Attrs::new(), &["1", "4", "4", "3"], &["3", "3", "8", "3"]).unwrap(), t(&["1", "6", "6", "8"]));
        let attrs = Attrs::new()
            .with("stride", ints(&[2, 3]))
            .with("padding", ints(&[1, 0, 0, 2]))
            .with("dilation", ints(&[1, 2]));
        assert_eq!(ct(attrs.clone(), &["1", "4", "5", "3"], &["3", "3", "8", "3"]).unwrap(), t(&["1", "8", "15", "8"]));
        assert_eq!(shape(&ct(attrs, &["n", "h", "w", "3"], &["3", "3", "8", "3"]).unwrap()), "[n, h * 2, w * 3, 8]");
        let op = Attrs::new().with("stride", ints(&[2, 2])).with("output_paddings", ints(&[1, 1]));
        assert_eq!(ct(op, &["1", "4", "4", "3"], &["3", "3", "8", "3"]).unwrap(), t(&["1", "10", "10", "8"]));
        let nchw =
            Attrs::new().with("input_layout", Attr::Str("NCHW".into())).with("filter_layout", Attr::Str("CFRS".into()));
        assert_eq!(ct(nchw, &["1", "3", "4", "5"], &["3", "8", "3", "3"]).unwrap(), t(&["1", "8", "6", "7"]));
        let fcrs = Attrs::new().with("filter_layout", Attr::Str("FCRS".into()));
        assert_eq!(ct(fcrs, &["1", "4", "4", "3"], &["8", "3", "3", "3"]).unwrap(), t(&["1", "6", "6", "8"]));
        let err = ct(Attrs::new().with("output_paddings", ints(&[1, 0])), &["1", "4", "4", "3"], &["3", "3", "8", "3"])
            .unwrap_err();
        assert!(matches!(&err, GraphError::Value(m) if m.starts_with("conv2d_transpose: output_paddings:")), "{err}");
        let dilated = Attrs::new().with("dilation", ints(&[2, 2])).with("output_paddings", ints(&[1, 1]));
        assert!(ct(dilated, &["1", "4", "4", "3"], &["3", "3", "8", "3"]).is_err());
        let err = ct(Attrs::new(), &["1", "4", "4", "4"], &["3", "3", "8", "3"]).unwrap_err();
        assert!(matches!(&err, GraphError::Value(m) if m.starts_with("conv2d_transpose: filter:")), "{err}");
        let err = ct(Attrs::new().with("padding", ints(&[3, 3, 0, 0])), &["1", "1", "4", "3"], &["3", "3", "8", "3"])
            .unwrap_err();
        assert!(matches!(&err, GraphError::Value(m) if m.starts_with("conv2d_transpose: padding:")), "{err}");
        let with_bias = run(
            OpKind::Conv2dTranspose,
            Attrs::new(),
            &[t(&["1", "4", "4", "3"]), t(&["3", "3", "8", "3"]), t(&["8"])],
        );
        assert_eq!(with_bias.unwrap(), t(&["1", "6", "6", "8"]));
    }
}
