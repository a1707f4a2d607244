//! avg_pool2d and max_pool2d over NHWC input, and fold.
//!
//! Pooling walks each output row's windows and combines whole channel vectors, so the inner
//! loop runs over contiguous channels. A window tap outside the input (padding, or the overhang
//! ceil_mode adds at the bottom/right) is skipped by max_pool2d, i.e. the padding is -inf.
//! avg_pool2d sums the taps inside the input; with `count_boundary` (the default) it divides by
//! the full window size kernel_h × kernel_w, as if the outside taps were zeros, and without it
//! by the number of taps inside the input.
//!
//! fold sums blocks [N, C·kh·kw, L] into [N, C, H, W] (the inverse of unfold): block l at
//! (bh, bw) (row-major over the block grid) puts kernel tap (i, j) of channel c at
//! (bh·stride_h − pad_h + i·dilation_h, bw·stride_w − pad_w + j·dilation_w), when inside.
//!
//! A symbolic kernel size, known to shapes only, is recovered from the input and output
//! sizes when they determine it.

use max_graph::DType;
use max_graph::ops::{Op, OpKind};
use rayon::prelude::*;

use super::PAR_MIN;
use crate::cpu::reduction::max_of;
use crate::cpu::reduction::typed_dispatch;
use crate::cpu::reduction::work::{Dst, Num, Src, Typed};
use crate::operands::{Window as Pool, fold_window, pool_window};
use crate::{Buffer, Result};

pub(super) fn pool2d(op: &Op, x: &Buffer, out: &Buffer) -> Result<()> {
    let name = op.kind.name();
    let (p, count_boundary) = pool_window(op, x, out)?;
    let avg = (op.kind == OpKind::AvgPool2d).then_some(count_boundary);
    let dtype = x.dtype();
    typed_dispatch!(name, dtype, T, {
        pool::<T>(&p, avg, x, out);
        Ok(())
    })
}

/// Max pooling (`avg` None) or average pooling (`avg` = Some(count_boundary)).
fn pool<T: Typed>(p: &Pool, avg: Option<bool>, x: &Buffer, out: &Buffer) {
    let (src, dst) = (Src::<T>::of(x), Dst::<T>::of(out));
    let [ih, iw] = p.input;
    let [oh, ow] = p.output;
    let [kh, kw] = p.kernel;
    let c = p.c;
    let tap = |i: usize, z: usize, k: usize| {
        (z * p.stride[i] + k * p.dil[i]).checked_sub(p.pad[i]).filter(|&v| v < p.input[i])
    };
    let row = |scratch: &mut Vec<T::W>, ri: usize| {
        let (img, y) = (ri / oh, ri % oh);
        scratch.resize(3 * c, T::W::default());
        let (acc, rest) = scratch.split_at_mut(c);
        let (tmp, res) = rest.split_at_mut(c);
        for xo in 0..ow {
            acc.fill(if avg.is_some() { T::W::default() } else { T::W::lowest() });
            let mut inside = 0;
            for r in 0..kh {
                let Some(h) = tap(0, y, r) else { continue };
                for s in 0..kw {
                    let Some(w) = tap(1, xo, s) else { continue };
                    inside += 1;
                    src.read(((img * ih + h) * iw + w) * c, tmp);
                    if avg.is_some() {
                        acc.iter_mut().zip(tmp.iter()).for_each(|(a, &v)| *a = a.wadd(v));
                    } else {
                        acc.iter_mut().zip(tmp.iter()).for_each(|(a, &v)| *a = max_of(*a, v));
                    }
                }
            }
            let count = if avg == Some(true) { kh * kw } else { inside };
            let at = ((img * oh + y) * ow + xo) * c;
            if avg.is_some() {
                res.iter_mut().zip(acc.iter()).for_each(|(r, &a)| *r = a.div_count(count).unwrap_or_default());
                dst.write(at, res);
            } else {
                dst.write(at, acc);
            }
        }
    };
    let rows = p.n * oh;
    if rows * ow * c * kh * kw >= PAR_MIN {
        (0..rows).into_par_iter().for_each_init(Vec::new, row);
    } else {
        let mut acc = Vec::new();
        (0..rows).for_each(|ri| row(&mut acc, ri));
    }
}

pub(super) fn fold(op: &Op, x: &Buffer, out: &Buffer) -> Result<()> {
    let name = op.kind.name();
    let p = fold_window(op, x, out)?;
    let dtype = x.dtype();
    typed_dispatch!(name, dtype, T, {
        fold_typed::<T>(&p, x, out);
        Ok(())
    })
}

fn fold_typed<T: Typed>(p: &Pool, x: &Buffer, out: &Buffer) {
    let (src, dst) = (Src::<T>::of(x), Dst::<T>::of(out));
    let [gh, gw] = p.input;
    let [oh, ow] = p.output;
    let [kh, kw] = p.kernel;
    let l = gh * gw;
    let plane = |acc: &mut Vec<T::W>, pi: usize| {
        let (img, ch) = (pi / p.c, pi % p.c);
        acc.clear();
        acc.resize(oh * ow, T::W::default());
        for i in 0..kh {
            for j in 0..kw {
                let row = (img * p.c * kh * kw + (ch * kh + i) * kw + j) * l;
                for bh in 0..gh {
                    let Some(y) = (bh * p.stride[0] + i * p.dil[0]).checked_sub(p.pad[0]).filter(|&v| v < oh) else {
                        continue;
                    };
                    for bw in 0..gw {
                        let Some(xo) = (bw * p.stride[1] + j * p.dil[1]).checked_sub(p.pad[1]).filter(|&v| v < ow)
                        else {
                            continue;
                        };
                        let a = &mut acc[y * ow + xo];
                        *a = a.wadd(src.get(row + bh * gw + bw).work());
                    }
                }
            }
        }
        for (k, &v) in acc.iter().enumerate() {
            dst.set(pi * oh * ow + k, T::store(v));
        }
    };
    let planes = p.n * p.c;
    if x.num_elements() >= PAR_MIN {
        (0..planes).into_par_iter().for_each_init(Vec::new, plane);
    } else {
        let mut acc = Vec::new();
        (0..planes).for_each(|pi| plane(&mut acc, pi));
    }
}
