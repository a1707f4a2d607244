//! Host kernels of the conv ops: conv2d and conv3d (`forward`: im2col + GEMM, with a direct
//! path for depthwise convolutions), conv2d_transpose (`transpose`: GEMM + col2im), and the
//! window ops avg_pool2d, max_pool2d and fold (`pool`). Attributes are parsed and the geometry
//! checked once for both backends, in operands/conv.rs and operands/pool.rs.
//!
//! Every kernel computes in the working type of the input (`reduction::work`): f32 for
//! float16, bfloat16, float32 and the float8 types (accumulating in f32), f64 for float64, and
//! 64-bit integers with wrapping for the integer types and bool. Inputs are loaded once into
//! a channels-last working copy; results are rounded to the output dtype on the way out.

mod forward;
mod gemm;
mod pool;
mod transpose;

use std::any::TypeId;

use max_graph::ops::{Op, OpKind};
use rayon::prelude::*;

use super::reduction::work::{Dst, Num, Src, Typed};
use crate::operands::{conv_io, conv_weights};
use crate::{Buffer, Error, Result};

/// Below this many multiply-adds (or elements) a kernel stays on the calling thread.
const PAR_MIN: usize = 1 << 16;

pub fn run(op: &Op, inputs: &[Buffer], outputs: &[Buffer]) -> Result<()> {
    let (x, out) = conv_io(op, inputs, outputs)?;
    match op.kind {
        OpKind::Conv2d | OpKind::Conv3d | OpKind::Conv2dTranspose => {
            let (filter, bias) = conv_weights(op, inputs, x)?;
            if op.kind == OpKind::Conv2dTranspose {
                transpose::run(op, x, filter, bias, out)
            } else {
                forward::run(op, x, filter, bias, out)
            }
        }
        OpKind::AvgPool2d | OpKind::MaxPool2d => pool::pool2d(op, x, out),
        OpKind::Fold => pool::fold(op, x, out),
        other => Err(Error::Value(format!("{}: no CPU kernel for this op", other.name()))),
    }
}

/// Loads `x` ([N, C, S...] or [N, S..., C]) as working values in channels-last order.
fn load_channels_last<T: Typed>(x: &Buffer, channels_last: bool) -> Vec<T::W> {
    let src = Src::<T>::of(x);
    let total = x.num_elements();
    let mut out = vec![T::W::default(); total];
    let shape = x.shape();
    if total == 0 {
        return out;
    }
    if channels_last || shape.len() < 3 {
        let fill = |(ci, chunk): (usize, &mut [T::W])| src.read(ci * 4096, chunk);
        if total >= PAR_MIN {
            out.par_chunks_mut(4096).enumerate().for_each(fill);
        } else {
            out.chunks_mut(4096).enumerate().for_each(fill);
        }
        return out;
    }
    let c = shape[1];
    let s: usize = shape[2..].iter().product();
    let image = |(b, img): (usize, &mut [T::W])| {
        let mut plane = vec![T::W::default(); s];
        for ch in 0..c {
            src.read((b * c + ch) * s, &mut plane);
            for (p, &v) in plane.iter().enumerate() {
                img[p * c + ch] = v;
            }
        }
    };
    if total >= PAR_MIN {
        out.par_chunks_mut(c * s).enumerate().for_each(image);
    } else {
        out.chunks_mut(c * s).enumerate().for_each(image);
    }
    out
}

/// Runs `f` on a zeroed channels-last working accumulator of `len` elements ([N, S..., F]),
/// then stores it into `out` with `bias` (see `store`). When the working type is the output's
/// own type and the output is channels-last and aligned, the accumulator is `out` itself.
fn with_acc<T: Typed>(
    out: &Buffer,
    len: usize,
    f: usize,
    bias: Option<&Buffer>,
    channels_last: bool,
    run: impl FnOnce(&mut [T::W]),
) {
    let direct = channels_last
        && TypeId::of::<T>() == TypeId::of::<T::W>()
        && out.num_elements() == len
        && len > 0
        && (out.addr() as usize).is_multiple_of(align_of::<T::W>());
    if !direct {
        let mut acc = vec![T::W::default(); len];
        run(&mut acc);
        store::<T>(&mut acc, f, bias, channels_last, out);
        return;
    }
    let ptr = out.addr() as *mut T::W;
    // SAFETY: `out` is this kernel's own host output of `len` elements of T::W (same type),
    // aligned (checked above); it is zeroed before the slice over it is formed, and nothing
    // else touches it during the call.
    let acc = unsafe {
        std::ptr::write_bytes(ptr, 0, len);
        std::slice::from_raw_parts_mut(ptr, len)
    };
    run(acc);
    if let Some(b) = bias {
        let mut bs = vec![T::W::default(); f];
        Src::<T>::of(b).read(0, &mut bs);
        let add = |px: &mut [T::W]| px.iter_mut().zip(&bs).for_each(|(v, &b)| *v = v.wadd(b));
        if len >= PAR_MIN {
            acc.par_chunks_mut(f).for_each(add);
        } else {
            acc.chunks_mut(f).for_each(add);
        }
    }
}

/// Stores the channels-last working result `acc` ([N, S..., F]) into `out`, adding `bias`
/// ([F]) and writing channels-first ([N, F, S...]) when `channels_last` is false.
fn store<T: Typed>(acc: &mut [T::W], f: usize, bias: Option<&Buffer>, channels_last: bool, out: &Buffer) {
    let total = acc.len();
    if total == 0 || f == 0 {
        return;
    }
    let bias: Option<Vec<T::W>> = bias.map(|b| {
        let mut v = vec![T::W::default(); f];
        Src::<T>::of(b).read(0, &mut v);
        v
    });
    let dst = Dst::<T>::of(out);
    let per_image = total / out.shape().first().copied().unwrap_or(1).max(1);
    let spatial = per_image / f;
    // Chunks of whole pixels (f channels each).
    let step = f * 4096usize.div_ceil(f);
    let chunk = |(ci, vals): (usize, &mut [T::W])| {
        if let Some(bs) = &bias {
            for px in vals.chunks_mut(f) {
                px.iter_mut().zip(bs).for_each(|(v, &b)| *v = v.wadd(b));
            }
        }
        let a = ci * step;
        if channels_last {
            dst.write(a, vals);
            return;
        }
        for (k, &v) in vals.iter().enumerate() {
            let i = a + k;
            let (img, p, ch) = (i / per_image, (i % per_image) / f, i % f);
            dst.set((img * f + ch) * spatial + p, T::store(v));
        }
    };
    if total >= PAR_MIN {
        acc.par_chunks_mut(step).enumerate().for_each(chunk);
    } else {
        acc.chunks_mut(step).enumerate().for_each(chunk);
    }
}
