//! conv2d_transpose: the gradient of conv2d with respect to its input, staged as its own op.
//! Its attributes and filter layouts are described in `conv.rs`, which dispatches here.

use super::conv::{ConvParams, Input, check_bias, conv_inputs, dim_ok, split_filter, split_input};
use super::{Ctx, one};
use crate::dim::Dim;
use crate::error::Result;
use crate::types::{TensorType, Type};

pub(super) fn conv_transpose(ctx: &Ctx) -> Result<Vec<Type>> {
    let (x, f, bias) = conv_inputs(ctx)?;
    let p = ConvParams::parse(ctx)?;
    let Input { batch, spatial, channels } = split_input(ctx, x, &p)?;
    let layout = p.filter_layout.name();
    let (kernel, fin, fout) = split_filter(ctx, f, &p)?;
    if fin != &channels {
        return Err(ctx.value_err(
            "filter",
            format!("x has {channels} channels but the {layout} filter takes {fin} input channels (insert a rebind if they are equal at run time)"),
        ));
    }
    let stat = |v: usize| Dim::stat(v as i64);
    let padding = &p.padding;
    let mut out_spatial = Vec::with_capacity(2);
    for i in 0..2 {
        // (size - 1) * stride - pads + dilation * (kernel - 1) + 1 + output_padding
        let span = dim_ok(ctx, "filter", kernel[i].sub(&Dim::stat(1)).and_then(|k| k.mul(&stat(p.dilation[i]))))?;
        let grown = dim_ok(ctx, "x", spatial[i].sub(&Dim::stat(1)).and_then(|d| d.mul(&stat(p.stride[i]))))?;
        let size = dim_ok(
            ctx,
            "x",
            grown
                .add(&span)
                .and_then(|d| d.add(&Dim::stat(1)))
                .and_then(|d| d.add(&stat(p.output_padding[i])))
                .and_then(|d| d.sub(&stat(padding[2 * i])))
                .and_then(|d| d.sub(&stat(padding[2 * i + 1]))),
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
    let shape = if p.channels_last { vec![batch, h, w, fout.clone()] } else { vec![batch, fout.clone(), h, w] };
    one(TensorType { shape, ..x.clone() })
}

#[cfg(test)]
mod tests {
    use super::super::OpKind;
    use crate::attrs::{Attr, Attrs};
    use crate::error::GraphError;
    use crate::ops::testing::{f32 as t, infer_one as run, ints, shape_of as shape};

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
