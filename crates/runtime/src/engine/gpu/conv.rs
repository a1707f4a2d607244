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
//! Attributes are parsed and checked once for both backends (operands/conv.rs, which computes
//! the geometry both consume); the kernels reproduce the CPU's working types and cast rules.

mod fused;
mod pool;

pub(super) use fused::fused;

use max_graph::DType;
use max_graph::ops::{Op, OpKind};
use max_kernels_cuda::launch::conv::{ConvGeo, ConvTGeo, conv_forward_epi, conv_transpose};
use max_kernels_cuda::launch::conv_sm90::{self, Conv2dShape, Outcome};
use max_kernels_cuda::launch::epilogue::Epilogue;

use crate::cuda::CudaDevice;
use crate::operands::{conv_geometry, conv_io, conv_weights, transpose_geometry};
use crate::{Buffer, Error, Result};

pub(crate) fn run(dev: &CudaDevice, op: &Op, inputs: &[Buffer], outputs: &[Buffer]) -> Result<()> {
    let (x, out) = conv_io(op, inputs, outputs)?;
    match op.kind {
        OpKind::Conv2d | OpKind::Conv3d | OpKind::Conv2dTranspose => {
            let (filter, bias) = conv_weights(op, inputs, x)?;
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

/// Whether a 16-bit NHWC/RSCF conv2d may take the Hopper implicit-GEMM kernel
/// (launch/conv_sm90.rs, which still checks the shape): on sm_90a unless the tuning knob `conv.sm90` is off.
fn sm90_enabled(dev: &CudaDevice, dtype: DType) -> bool {
    matches!(dtype, DType::BFloat16 | DType::Float16)
        && dev.wgmma()
        && max_tuning::current().flag_or(max_tuning::Knob::ConvSm90, true)
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
    let geo = conv_geometry(op, x, filter, bias, out)?;
    if geo.nd == 2 && geo.groups == 1 && geo.channels_last && geo.rscf && sm90_enabled(dev, x.dtype()) {
        // A 2-D geometry's spatial dims are the last two of the 3-D arrays.
        let shape = Conv2dShape {
            n: geo.n,
            h: geo.input[1],
            w: geo.input[2],
            c: geo.c,
            k: geo.f,
            r: geo.kernel[1],
            s: geo.kernel[2],
            p: geo.output[1],
            q: geo.output[2],
            stride: [geo.stride[1], geo.stride[2]],
            pad: [geo.pad[1], geo.pad[2]],
            dil: [geo.dil[1], geo.dil[2]],
        };
        dev.bind()?;
        let ptrs = (x.addr(), filter.addr(), bias.map_or(0, |b| b.addr()), out.addr());
        if conv_sm90::conv2d(&dev.stream, x.dtype(), ptrs, &shape, epi).map_err(Error::from)? == Outcome::Ran {
            return Ok(true);
        }
    }
    let wide = |a: [usize; 3]| a.map(|v| v as i64);
    let mut g = ConvGeo {
        n: geo.n as i64,
        c: geo.c as i64,
        f: geo.f as i64,
        groups: geo.groups as i64,
        cg: geo.cg as i64,
        fg: geo.fg as i64,
        input: wide(geo.input),
        output: wide(geo.output),
        kernel: wide(geo.kernel),
        stride: wide(geo.stride),
        dil: wide(geo.dil),
        pad: wide(geo.pad),
        ftap: wide(geo.ftap),
        fc: geo.fc as i64,
        ff: geo.ff as i64,
        ..ConvGeo::default()
    };
    let cl = geo.channels_last;
    // x as [N, C, D, H, W] or [N, D, H, W, C] (D = 1 for conv2d), contiguous.
    let [id, ih, iw] = g.input;
    let ci = geo.c as i64;
    if cl {
        (g.xs_c, g.xs, g.xs_n) = (1, [ih * iw * ci, iw * ci, ci], id * ih * iw * ci);
    } else {
        (g.xs_c, g.xs, g.xs_n) = (id * ih * iw, [ih * iw, iw, 1], ci * id * ih * iw);
    }
    dev.bind()?;
    let ptrs = (x.addr(), filter.addr(), bias.map_or(0, |b| b.addr()), out.addr());
    conv_forward_epi(&dev.stream, x.dtype(), dev.wgmma(), ptrs, g, epi).map_err(Error::from)
}

fn transpose(
    dev: &CudaDevice,
    op: &Op,
    x: &Buffer,
    filter: &Buffer,
    bias: Option<&Buffer>,
    out: &Buffer,
) -> Result<()> {
    let geo = transpose_geometry(op, x, filter, bias, out)?;
    let cl = geo.channels_last;
    let [ih, iw] = geo.input.map(|v| v as i64);
    let c = geo.cin as i64;
    let (xs_n, xs_c, xstr) = if cl { (ih * iw * c, 1, [iw * c, c]) } else { (c * ih * iw, ih * iw, [iw, 1]) };
    let wide = |a: [usize; 2]| a.map(|v| v as i64);
    let g = ConvTGeo {
        n: geo.n as i64,
        cin: c,
        f: geo.f as i64,
        input: [ih, iw],
        output: wide(geo.output),
        kernel: wide(geo.kernel),
        stride: wide(geo.stride),
        dil: wide(geo.dil),
        pad: wide(geo.pad),
        xs_n,
        xs_c,
        xs: xstr,
        ftap: wide(geo.ftap),
        fin: geo.fin as i64,
        fout: geo.fout as i64,
        channels_last: cl as i64,
        ..ConvTGeo::default()
    };
    dev.bind()?;
    let ptrs = (x.addr(), filter.addr(), bias.map_or(0, |b| b.addr()), out.addr());
    conv_transpose(&dev.stream, x.dtype(), dev.wgmma(), ptrs, g).map_err(Error::from)
}
