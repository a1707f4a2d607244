//! GPU kernels of the conv ops: conv2d and conv3d (im2col + GEMM, a direct kernel for
//! depthwise convolutions and for the dtypes the GEMM does not take), conv2d_transpose (GEMM +
//! col2im), and the window ops in `conv/pool.rs`. The kernels are in
//! crates/kernels-cuda/kernels/conv.cu and pool.cu, strung together by
//! `max_kernels_cuda::launch::conv`. On sm_90a, 16-bit NHWC conv2d with an RSCF filter and
//! groups == 1 (fused epilogue included) runs on the Hopper implicit-GEMM kernel
//! (kernels/conv_sm90.cu) when its launcher finds the shape eligible (input channel counts that
//! are not a multiple of 8, like the ResNet stem's 3, on zero-padded copies; split-K for few
//! output tiles; see launch/conv_sm90.rs for its knobs); the tuning knob `conv.sm90=0`
//! turns that off.
//!
//! Attributes are parsed and checked exactly as the CPU kernels do (crates/runtime/src/cpu/conv),
//! with the same error messages; the kernels reproduce the CPU's working types and cast rules.

mod epilogue;
mod pool;

pub(super) use epilogue::fused;

use max_graph::DType;
use max_graph::attrs::Attr;
use max_graph::ops::{Op, OpKind};
use max_kernels_cuda::launch::conv::{ConvGeo, ConvTGeo, conv_forward_epi, conv_transpose};
use max_kernels_cuda::launch::conv_sm90::{self, Conv2dShape, Outcome};
use max_kernels_cuda::launch::epilogue::Epilogue;

use crate::cuda::CudaDevice;
use crate::{Buffer, Error, Result};

pub(crate) fn run(dev: &CudaDevice, op: &Op, inputs: &[Buffer], outputs: &[Buffer]) -> Result<()> {
    let name = op.kind.name();
    let (Some(x), Some(out)) = (inputs.first(), outputs.first()) else {
        return Err(Error::Value(format!("{name}: expected an input and an output")));
    };
    if out.dtype() != x.dtype() {
        return Err(Error::Value(format!("{name}: the output is {}, expected {}", out.dtype(), x.dtype())));
    }
    match op.kind {
        OpKind::Conv2d | OpKind::Conv3d | OpKind::Conv2dTranspose => {
            let Some(filter) = inputs.get(1) else {
                return Err(Error::Value(format!("{name}: expected x, filter and an optional bias")));
            };
            let bias = inputs.get(2);
            for (what, t) in [("filter", Some(filter)), ("bias", bias)] {
                if let Some(t) = t {
                    if t.dtype() != x.dtype() {
                        return Err(Error::Value(format!(
                            "{name}: {what} is {}, expected {} like x",
                            t.dtype(),
                            x.dtype()
                        )));
                    }
                }
            }
            if op.kind == OpKind::Conv2dTranspose {
                transpose(dev, op, x, filter, bias, out)
            } else {
                forward(dev, op, x, filter, bias, out)
            }
        }
        OpKind::AvgPool2d | OpKind::MaxPool2d => pool::pool2d(dev, op, x, out),
        OpKind::Fold => pool::fold(dev, op, x, out),
        other => Err(Error::Value(format!("{}: no GPU kernel for this op", other.name()))),
    }
}

/// Kernel-side "unsupported" errors are value errors here, like the CPU's.
fn kernel_err(e: max_kernels_cuda::Error) -> Error {
    match e {
        max_kernels_cuda::Error::Unsupported(m) => Error::Value(m),
        other => other.into(),
    }
}

fn hopper(dev: &CudaDevice) -> bool {
    dev.arch.starts_with("sm_90") || dev.arch.starts_with("sm_10")
}

/// Whether a 16-bit NHWC/RSCF conv2d may take the Hopper implicit-GEMM kernel
/// (launch/conv_sm90.rs, which still checks the shape): on sm_90a unless the tuning knob `conv.sm90` is off.
fn sm90_enabled(dev: &CudaDevice, dtype: DType) -> bool {
    matches!(dtype, DType::BFloat16 | DType::Float16)
        && dev.arch == "sm_90a"
        && max_tuning::current().flag_or(max_tuning::Knob::ConvSm90, true)
}

/// `n` non-negative integers of attribute `key` (each `default` when it is absent).
fn ints(op: &Op, key: &str, n: usize, default: usize) -> Result<Vec<usize>> {
    match op.attrs.get(key) {
        None => Ok(vec![default; n]),
        Some(Attr::Ints(v)) if v.len() == n && v.iter().all(|&x| x >= 0) => Ok(v.iter().map(|&x| x as usize).collect()),
        Some(a) => Err(Error::Value(format!("{}: {key}: expected {n} non-negative integers, got {a}", op.kind.name()))),
    }
}

/// Strides and dilations (at least 1) of `nd` spatial dims.
fn steps(op: &Op, nd: usize) -> Result<(Vec<usize>, Vec<usize>)> {
    let (stride, dilation) = (ints(op, "stride", nd, 1)?, ints(op, "dilation", nd, 1)?);
    if stride.iter().chain(&dilation).any(|&s| s == 0) {
        return Err(Error::Value(format!("{}: strides and dilations must be positive", op.kind.name())));
    }
    Ok((stride, dilation))
}

fn string<'a>(op: &'a Op, key: &str, default: &'a str) -> Result<&'a str> {
    match op.attrs.get(key) {
        None => Ok(default),
        Some(Attr::Str(s)) => Ok(s),
        Some(a) => Err(Error::Value(format!("{}: {key}: expected a string, got {a}", op.kind.name()))),
    }
}

/// Whether `input_layout` is channels-last (NHWC, or NDHWC for conv3d).
fn channels_last(op: &Op) -> Result<bool> {
    match string(op, "input_layout", "NHWC")? {
        "NHWC" => Ok(true),
        "NCHW" => Ok(false),
        other => Err(Error::Value(format!("{}: input_layout: must be NHWC or NCHW, got {other:?}", op.kind.name()))),
    }
}

/// The number of window positions along one dim, as the shape inference counts them.
fn window_count(size: usize, kernel: usize, stride: usize, dilation: usize, pads: usize, ceil: bool) -> Option<usize> {
    let room = (size + pads).checked_sub(dilation * (kernel.checked_sub(1)?) + 1)?;
    Some((room + stride + if ceil { stride - 1 } else { 0 }) / stride)
}

fn check_out(name: &str, out: &Buffer, want: &[usize]) -> Result<()> {
    if out.shape() != want {
        return Err(Error::Value(format!(
            "{name}: the output has shape {:?}, but the inputs and attributes give {want:?}",
            out.shape()
        )));
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

fn forward(dev: &CudaDevice, op: &Op, x: &Buffer, filter: &Buffer, bias: Option<&Buffer>, out: &Buffer) -> Result<()> {
    forward_epi(dev, op, x, filter, bias, out, &Epilogue::default()).map(|_| ())
}

/// `forward` with a fused epilogue: false (nothing launched) when the GEMM cannot apply it.
fn forward_epi(
    dev: &CudaDevice,
    op: &Op,
    x: &Buffer,
    filter: &Buffer,
    bias: Option<&Buffer>,
    out: &Buffer,
    epi: &Epilogue,
) -> Result<bool> {
    let name = op.kind.name();
    let nd = if op.kind == OpKind::Conv3d { 3 } else { 2 };
    let cl = channels_last(op)?;
    let xs = x.shape();
    if xs.len() != nd + 2 {
        return Err(Error::Value(format!("{name}: x must be rank {}, got shape {xs:?}", nd + 2)));
    }
    let (spatial, c) = if cl { (&xs[1..=nd], xs[nd + 1]) } else { (&xs[2..], xs[1]) };
    let layout = string(op, "filter_layout", if nd == 2 { "RSCF" } else { "QRSCF" })?;
    let fs = filter.shape();
    if fs.len() != nd + 2 {
        return Err(Error::Value(format!("{name}: filter must be rank {}, got shape {fs:?}", nd + 2)));
    }
    // Positions of the kernel dims, the input-channel dim and the output-channel dim.
    let (taps, c_pos, f_pos): (Vec<usize>, usize, usize) = match (nd, layout) {
        (2, "RSCF") | (3, "QRSCF") => ((0..nd).collect(), nd, nd + 1),
        (2, "FCRS") | (3, "FCQRS") => ((2..nd + 2).collect(), 1, 0),
        (2, "CFRS") => ((2..4).collect(), 0, 1),
        _ => return Err(Error::Value(format!("{name}: filter_layout {layout:?} is not supported"))),
    };
    let groups = match op.attrs.get("groups") {
        None => 1,
        Some(Attr::Int(g)) if *g >= 1 => *g as usize,
        Some(a) => return Err(Error::Value(format!("{name}: groups: expected a positive integer, got {a}"))),
    };
    let (cg, f) = (fs[c_pos], fs[f_pos]);
    if cg * groups != c || f % groups != 0 {
        return Err(Error::Value(format!(
            "{name}: x has {c} channels and the filter {cg} per group with {f} outputs, which groups={groups} does not fit"
        )));
    }
    let (stride, dil) = steps(op, nd)?;
    let pad = ints(op, "padding", 2 * nd, 0)?;
    let fstr = strides_of(fs);
    let lead = 3 - nd;
    let mut g = ConvGeo {
        n: xs[0] as i64,
        c: c as i64,
        f: f as i64,
        groups: groups as i64,
        cg: cg as i64,
        fg: (f / groups) as i64,
        input: [1; 3],
        output: [1; 3],
        kernel: [1; 3],
        stride: [1; 3],
        dil: [1; 3],
        pad: [0; 3],
        fc: fstr[c_pos] as i64,
        ff: fstr[f_pos] as i64,
        ..ConvGeo::default()
    };
    let mut want = vec![xs[0]];
    for i in 0..nd {
        let j = lead + i;
        g.input[j] = spatial[i] as i64;
        g.kernel[j] = fs[taps[i]] as i64;
        g.ftap[j] = fstr[taps[i]] as i64;
        g.stride[j] = stride[i] as i64;
        g.dil[j] = dil[i] as i64;
        g.pad[j] = pad[2 * i] as i64;
        let o = window_count(spatial[i], fs[taps[i]], stride[i], dil[i], pad[2 * i] + pad[2 * i + 1], false)
            .ok_or_else(|| Error::Value(format!("{name}: the filter window does not fit the padded input")))?;
        g.output[j] = o as i64;
        want.push(o);
    }
    want.push(f);
    check_out(name, out, &want)?;
    if let Some(b) = bias {
        if b.shape() != [f] {
            return Err(Error::Value(format!("{name}: bias has shape {:?}, expected [{f}]", b.shape())));
        }
    }
    if nd == 2 && groups == 1 && cl && layout == "RSCF" && sm90_enabled(dev, x.dtype()) {
        let shape = Conv2dShape {
            n: xs[0],
            h: spatial[0],
            w: spatial[1],
            c,
            k: f,
            r: fs[0],
            s: fs[1],
            p: want[1],
            q: want[2],
            stride: [stride[0], stride[1]],
            pad: [pad[0], pad[2]],
            dil: [dil[0], dil[1]],
        };
        dev.bind()?;
        let ptrs = (x.addr(), filter.addr(), bias.map_or(0, |b| b.addr()), out.addr());
        if conv_sm90::conv2d(&dev.stream, x.dtype(), ptrs, &shape, epi).map_err(kernel_err)? == Outcome::Ran {
            return Ok(true);
        }
    }
    // x as [N, C, D, H, W] or [N, D, H, W, C] (D = 1 for conv2d), contiguous.
    let [id, ih, iw] = g.input;
    let ci = c as i64;
    if cl {
        (g.xs_c, g.xs, g.xs_n) = (1, [ih * iw * ci, iw * ci, ci], id * ih * iw * ci);
    } else {
        (g.xs_c, g.xs, g.xs_n) = (id * ih * iw, [ih * iw, iw, 1], ci * id * ih * iw);
    }
    dev.bind()?;
    let ptrs = (x.addr(), filter.addr(), bias.map_or(0, |b| b.addr()), out.addr());
    conv_forward_epi(&dev.stream, x.dtype(), hopper(dev), ptrs, g, epi).map_err(kernel_err)
}

fn transpose(
    dev: &CudaDevice,
    op: &Op,
    x: &Buffer,
    filter: &Buffer,
    bias: Option<&Buffer>,
    out: &Buffer,
) -> Result<()> {
    let name = op.kind.name();
    let cl = channels_last(op)?;
    let xs = x.shape();
    if xs.len() != 4 {
        return Err(Error::Value(format!("{name}: x must be rank 4, got shape {xs:?}")));
    }
    let (spatial, cin) = if cl { ([xs[1], xs[2]], xs[3]) } else { ([xs[2], xs[3]], xs[1]) };
    let layout = string(op, "filter_layout", "RSCF")?;
    let fs = filter.shape();
    if fs.len() != 4 {
        return Err(Error::Value(format!("{name}: filter must be rank 4, got shape {fs:?}")));
    }
    // Positions of R, S, the input-channel and the output-channel dims.
    let (r_pos, s_pos, in_pos, out_pos) = match layout {
        "RSCF" => (0, 1, 3, 2),
        "CFRS" => (2, 3, 0, 1),
        "FCRS" => (2, 3, 1, 0),
        _ => return Err(Error::Value(format!("{name}: filter_layout {layout:?} is not supported"))),
    };
    if fs[in_pos] != cin {
        return Err(Error::Value(format!("{name}: x has {cin} channels but the filter takes {}", fs[in_pos])));
    }
    let (stride, dil) = steps(op, 2)?;
    let pad = ints(op, "padding", 4, 0)?;
    let out_pad = ints(op, "output_paddings", 2, 0)?;
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
    if let Some(b) = bias {
        if b.shape() != [f] {
            return Err(Error::Value(format!("{name}: bias has shape {:?}, expected [{f}]", b.shape())));
        }
    }
    let [ih, iw] = spatial.map(|v| v as i64);
    let c = cin as i64;
    let (xs_n, xs_c, xstr) = if cl { (ih * iw * c, 1, [iw * c, c]) } else { (c * ih * iw, ih * iw, [iw, 1]) };
    let g = ConvTGeo {
        n: xs[0] as i64,
        cin: c,
        f: f as i64,
        input: [ih, iw],
        output: output.map(|v| v as i64),
        kernel: kernel.map(|v| v as i64),
        stride: [stride[0] as i64, stride[1] as i64],
        dil: [dil[0] as i64, dil[1] as i64],
        pad: [pad[0] as i64, pad[2] as i64],
        xs_n,
        xs_c,
        xs: xstr,
        ftap: [fstr[r_pos] as i64, fstr[s_pos] as i64],
        fin: fstr[in_pos] as i64,
        fout: fstr[out_pos] as i64,
        channels_last: cl as i64,
        ..ConvTGeo::default()
    };
    dev.bind()?;
    let ptrs = (x.addr(), filter.addr(), bias.map_or(0, |b| b.addr()), out.addr());
    conv_transpose(&dev.stream, x.dtype(), hopper(dev), ptrs, g).map_err(kernel_err)
}
