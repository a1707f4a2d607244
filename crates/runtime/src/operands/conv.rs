//! The conv ops' operands and geometry, checked once for both backends: conv2d and conv3d
//! (`ConvGeometry`), conv2d_transpose (`TransposeGeometry`). The attributes are the graph's
//! `ConvParams`; what is checked here depends on the buffers: their dtypes, and the geometry
//! those parameters give over their concrete shapes. Every error names the op. The window ops
//! (pools, fold) are in `pool.rs`.

use max_graph::ops::Op;
use max_graph::ops::conv::{ConvParams, FilterLayout, conv_params};
use max_graph::ops::pool::window_count;

use super::graph_err;
use crate::{Buffer, Error, Result};

/// A conv-family call's input and output, which must share a dtype.
pub(crate) fn conv_io<'a>(op: &Op, inputs: &'a [Buffer], outputs: &'a [Buffer]) -> Result<(&'a Buffer, &'a Buffer)> {
    let name = op.kind.name();
    let (Some(x), Some(out)) = (inputs.first(), outputs.first()) else {
        return Err(Error::Value(format!("{name}: expected an input and an output")));
    };
    if out.dtype() != x.dtype() {
        return Err(Error::Value(format!("{name}: the output is {}, expected {}", out.dtype(), x.dtype())));
    }
    Ok((x, out))
}

/// A convolution's filter and optional bias (inputs 1 and 2), of `x`'s dtype.
pub(crate) fn conv_weights<'a>(op: &Op, inputs: &'a [Buffer], x: &Buffer) -> Result<(&'a Buffer, Option<&'a Buffer>)> {
    let name = op.kind.name();
    let Some(filter) = inputs.get(1) else {
        return Err(Error::Value(format!("{name}: expected x, filter and an optional bias")));
    };
    let bias = inputs.get(2);
    for (what, t) in [("filter", Some(filter)), ("bias", bias)] {
        if let Some(t) = t
            && t.dtype() != x.dtype()
        {
            return Err(Error::Value(format!("{name}: {what} is {}, expected {} like x", t.dtype(), x.dtype())));
        }
    }
    Ok((filter, bias))
}

/// The checked attributes of conv `op`.
fn params(op: &Op) -> Result<ConvParams> {
    conv_params(op).map_err(graph_err)
}

/// Checks that a kernel's computed output shape is the planned one.
pub(crate) fn check_out(name: &str, out: &Buffer, want: &[usize]) -> Result<()> {
    if out.shape() != want {
        return Err(Error::Value(format!(
            "{name}: the output has shape {:?}, but the inputs and attributes give {want:?}",
            out.shape()
        )));
    }
    Ok(())
}

fn check_bias(name: &str, bias: Option<&Buffer>, f: usize) -> Result<()> {
    if let Some(b) = bias
        && b.shape() != [f]
    {
        return Err(Error::Value(format!("{name}: bias has shape {:?}, expected [{f}]", b.shape())));
    }
    Ok(())
}

/// Contiguous element strides of `shape`.
fn strides_of(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// A conv2d's or conv3d's checked sizes, as 3-D (a 2-D one has depth 1: its spatial dims are
/// the last two of the arrays).
pub(crate) struct ConvGeometry {
    /// 2 or 3 spatial dims.
    pub nd: usize,
    pub channels_last: bool,
    /// Whether the filter is [R, S, C, F] (a 2-D filter_layout RSCF).
    pub rscf: bool,
    pub n: usize,
    pub c: usize,
    pub f: usize,
    pub groups: usize,
    pub cg: usize,
    pub fg: usize,
    pub input: [usize; 3],
    pub output: [usize; 3],
    pub kernel: [usize; 3],
    pub stride: [usize; 3],
    pub dil: [usize; 3],
    /// The padding before each dim.
    pub pad: [usize; 3],
    /// Element strides in the filter of each kernel dim, of the input channel, of the output
    /// channel.
    pub ftap: [usize; 3],
    pub fc: usize,
    pub ff: usize,
}

impl ConvGeometry {
    pub fn taps(&self) -> usize {
        self.kernel.iter().product()
    }

    pub fn positions(&self) -> usize {
        self.output.iter().product()
    }

    /// The input coordinate of kernel tap `k` for output coordinate `z` along dim `i`.
    #[inline]
    pub fn at(&self, i: usize, z: usize, k: usize) -> Option<usize> {
        (z * self.stride[i] + k * self.dil[i]).checked_sub(self.pad[i]).filter(|&v| v < self.input[i])
    }
}

/// The geometry of conv2d or conv3d `op` over `x` and `filter` into `out`, with `bias` checked
/// against it.
pub(crate) fn conv_geometry(
    op: &Op,
    x: &Buffer,
    filter: &Buffer,
    bias: Option<&Buffer>,
    out: &Buffer,
) -> Result<ConvGeometry> {
    let name = op.kind.name();
    let p = params(op)?;
    let (nd, cl) = (p.nd, p.channels_last);
    let xs = x.shape();
    if xs.len() != nd + 2 {
        return Err(Error::Value(format!("{name}: x must be rank {}, got shape {xs:?}", nd + 2)));
    }
    let (spatial, c) = if cl { (&xs[1..=nd], xs[nd + 1]) } else { (&xs[2..], xs[1]) };
    let fs = filter.shape();
    if fs.len() != nd + 2 {
        return Err(Error::Value(format!("{name}: filter must be rank {}, got shape {fs:?}", nd + 2)));
    }
    let axes = p.filter_axes();
    let (taps, c_pos, f_pos): (Vec<usize>, usize, usize) = (axes.kernel.collect(), axes.input, axes.output);
    let groups = p.groups;
    let (cg, f) = (fs[c_pos], fs[f_pos]);
    if cg * groups != c || f % groups != 0 {
        return Err(Error::Value(format!(
            "{name}: x has {c} channels and the filter {cg} per group with {f} outputs, which groups={groups} does not fit"
        )));
    }
    let (stride, dil, pad) = (&p.stride, &p.dilation, &p.padding);
    let fstr = strides_of(fs);
    let lead = 3 - nd;
    let mut geo = ConvGeometry {
        nd,
        channels_last: cl,
        rscf: p.filter_layout == FilterLayout::Rscf,
        n: xs[0],
        c,
        f,
        groups,
        cg,
        fg: f / groups,
        input: [1; 3],
        output: [1; 3],
        kernel: [1; 3],
        stride: [1; 3],
        dil: [1; 3],
        pad: [0; 3],
        ftap: [0; 3],
        fc: fstr[c_pos],
        ff: fstr[f_pos],
    };
    let mut want = vec![geo.n];
    for i in 0..nd {
        let j = lead + i;
        geo.input[j] = spatial[i];
        geo.kernel[j] = fs[taps[i]];
        geo.ftap[j] = fstr[taps[i]];
        geo.stride[j] = stride[i];
        geo.dil[j] = dil[i];
        geo.pad[j] = pad[2 * i];
        geo.output[j] = window_count(spatial[i], fs[taps[i]], stride[i], dil[i], pad[2 * i] + pad[2 * i + 1], false)
            .ok_or_else(|| Error::Value(format!("{name}: the filter window does not fit the padded input")))?;
        want.push(geo.output[j]);
    }
    want.push(f);
    check_out(name, out, &want)?;
    check_bias(name, bias, f)?;
    Ok(geo)
}

/// A conv2d_transpose's checked sizes.
pub(crate) struct TransposeGeometry {
    pub channels_last: bool,
    pub n: usize,
    pub cin: usize,
    pub f: usize,
    pub input: [usize; 2],
    pub output: [usize; 2],
    pub kernel: [usize; 2],
    pub stride: [usize; 2],
    pub dil: [usize; 2],
    /// The padding before each dim.
    pub pad: [usize; 2],
    /// Filter element strides of R, S, the input channel and the output channel.
    pub ftap: [usize; 2],
    pub fin: usize,
    pub fout: usize,
}

/// The geometry of conv2d_transpose `op` over `x` and `filter` into `out`, with `bias` checked
/// against it. The result keeps the input's layout.
pub(crate) fn transpose_geometry(
    op: &Op,
    x: &Buffer,
    filter: &Buffer,
    bias: Option<&Buffer>,
    out: &Buffer,
) -> Result<TransposeGeometry> {
    let name = op.kind.name();
    let p = params(op)?;
    let cl = p.channels_last;
    let xs = x.shape();
    if xs.len() != 4 {
        return Err(Error::Value(format!("{name}: x must be rank 4, got shape {xs:?}")));
    }
    let (spatial, cin) = if cl { ([xs[1], xs[2]], xs[3]) } else { ([xs[2], xs[3]], xs[1]) };
    let fs = filter.shape();
    if fs.len() != 4 {
        return Err(Error::Value(format!("{name}: filter must be rank 4, got shape {fs:?}")));
    }
    // Positions of R, S, the input-channel and the output-channel dims.
    let axes = p.filter_axes();
    let (r_pos, s_pos, in_pos, out_pos) = (axes.kernel.start, axes.kernel.start + 1, axes.input, axes.output);
    if fs[in_pos] != cin {
        return Err(Error::Value(format!("{name}: x has {cin} channels but the filter takes {}", fs[in_pos])));
    }
    let (stride, dil, pad, out_pad) = (&p.stride, &p.dilation, &p.padding, &p.output_padding);
    let fstr = strides_of(fs);
    let kernel = [fs[r_pos], fs[s_pos]];
    let f = fs[out_pos];
    let mut output = [0; 2];
    for i in 0..2 {
        let full = spatial[i].saturating_sub(1) * stride[i] + dil[i] * kernel[i].saturating_sub(1) + 1 + out_pad[i];
        output[i] = full
            .checked_sub(pad[2 * i] + pad[2 * i + 1])
            .filter(|_| spatial[i] > 0 && kernel[i] > 0)
            .ok_or_else(|| Error::Value(format!("{name}: the padding leaves no output")))?;
    }
    let want = if cl { vec![xs[0], output[0], output[1], f] } else { vec![xs[0], f, output[0], output[1]] };
    check_out(name, out, &want)?;
    check_bias(name, bias, f)?;
    Ok(TransposeGeometry {
        channels_last: cl,
        n: xs[0],
        cin,
        f,
        input: spatial,
        output,
        kernel,
        stride: [stride[0], stride[1]],
        dil: [dil[0], dil[1]],
        pad: [pad[0], pad[2]],
        ftap: [fstr[r_pos], fstr[s_pos]],
        fin: fstr[in_pos],
        fout: fstr[out_pos],
    })
}
