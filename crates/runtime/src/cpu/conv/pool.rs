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
use max_graph::attrs::Attr;
use max_graph::ops::{Op, OpKind};
use rayon::prelude::*;

use super::{PAR_MIN, check_out, ints, steps, window_count};
use crate::cpu::reduction::max_of;
use crate::cpu::reduction::typed_dispatch;
use crate::cpu::reduction::work::{Dst, Num, Src, Typed};
use crate::{Buffer, Error, Result};

/// The two sizes of attribute `key` (Dims), each None where it is symbolic.
fn two_dims(op: &Op, key: &str) -> Result<[Option<usize>; 2]> {
    match op.attrs.get(key) {
        Some(Attr::Dims(d)) if d.len() == 2 => {
            let v = |i: usize| d[i].as_static().map(|n| n.max(0) as usize);
            Ok([v(0), v(1)])
        }
        Some(Attr::Ints(d)) if d.len() == 2 => Ok([Some(d[0].max(0) as usize), Some(d[1].max(0) as usize)]),
        _ => Err(Error::Value(format!("{}: {key}: expected 2 sizes", op.kind.name()))),
    }
}

/// A symbolic kernel size: the one size in 1..=limit that `fits`, or an error.
fn solve(name: &str, limit: usize, fits: impl Fn(usize) -> bool) -> Result<usize> {
    let mut found = (1..=limit).filter(|&k| fits(k));
    match (found.next(), found.next()) {
        (Some(k), None) => Ok(k),
        _ => Err(Error::Value(format!(
            "{name}: kernel_size is symbolic and the input and output sizes do not determine it"
        ))),
    }
}

/// A window op's sizes. For fold, `input` is the grid of block positions and `output` the
/// folded image.
struct Pool {
    n: usize,
    c: usize,
    input: [usize; 2],
    output: [usize; 2],
    kernel: [usize; 2],
    stride: [usize; 2],
    dil: [usize; 2],
    pad: [usize; 2],
}

pub(super) fn pool2d(op: &Op, x: &Buffer, out: &Buffer) -> Result<()> {
    let name = op.kind.name();
    let xs = x.shape();
    let os = out.shape();
    if xs.len() != 4 || os.len() != 4 {
        return Err(Error::Value(format!("{name}: input must be rank 4 (NHWC), got shape {xs:?}")));
    }
    let (stride, dil) = steps(op, 2)?;
    let pad = ints(op, "padding", 4, 0)?;
    let ceil = match op.attrs.get("ceil_mode") {
        None => false,
        Some(Attr::Bool(b)) => *b,
        Some(a) => return Err(Error::Value(format!("{name}: ceil_mode: expected a bool, got {a}"))),
    };
    let count_boundary = match op.attrs.get("count_boundary") {
        None => true,
        Some(Attr::Bool(b)) => *b,
        Some(a) => return Err(Error::Value(format!("{name}: count_boundary: expected a bool, got {a}"))),
    };
    let given = two_dims(op, "kernel_size")?;
    let mut kernel = [0; 2];
    for i in 0..2 {
        let pads = pad[2 * i] + pad[2 * i + 1];
        let count = |k| window_count(xs[1 + i], k, stride[i], dil[i], pads, ceil);
        kernel[i] = match given[i] {
            Some(k) => k,
            None => solve(name, xs[1 + i] + pads, |k| count(k) == Some(os[1 + i]))?,
        };
        if kernel[i] == 0 {
            return Err(Error::Value(format!("{name}: kernel sizes must be positive")));
        }
    }
    let mut want = vec![xs[0], 0, 0, xs[3]];
    for i in 0..2 {
        want[1 + i] = window_count(xs[1 + i], kernel[i], stride[i], dil[i], pad[2 * i] + pad[2 * i + 1], ceil)
            .ok_or_else(|| Error::Value(format!("{name}: the window does not fit the padded input")))?;
    }
    check_out(name, out, &want)?;
    let p = Pool {
        n: xs[0],
        c: xs[3],
        input: [xs[1], xs[2]],
        output: [want[1], want[2]],
        kernel,
        stride: [stride[0], stride[1]],
        dil: [dil[0], dil[1]],
        pad: [pad[0], pad[2]],
    };
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
    let (xs, os) = (x.shape(), out.shape());
    if xs.len() != 3 || os.len() != 4 {
        return Err(Error::Value(format!("{name}: input must be rank 3, got shape {xs:?}")));
    }
    let (stride, dil) = steps(op, 2)?;
    let pad = ints(op, "padding", 2, 0)?;
    let (c, size) = (os[1], [os[2], os[3]]);
    let blocks = |k: [usize; 2]| -> Option<usize> {
        let a = window_count(size[0], k[0], stride[0], dil[0], 2 * pad[0], false)?;
        Some(a * window_count(size[1], k[1], stride[1], dil[1], 2 * pad[1], false)?)
    };
    let taps = xs[1].checked_div(c).unwrap_or(0);
    let given = two_dims(op, "kernel_size")?;
    let kernel = match given {
        [Some(a), Some(b)] => [a, b],
        [Some(a), None] => [a, taps.checked_div(a).unwrap_or(0)],
        [None, Some(b)] => [taps.checked_div(b).unwrap_or(0), b],
        [None, None] => {
            let a = solve(name, taps, |a| taps % a == 0 && blocks([a, taps / a]) == Some(xs[2]))?;
            [a, taps / a]
        }
    };
    if kernel.contains(&0) || xs[1] != c * kernel[0] * kernel[1] || os[0] != xs[0] {
        return Err(Error::Value(format!(
            "{name}: input {xs:?} does not hold the [N, C * {} * {}, L] blocks of output {os:?}",
            kernel[0], kernel[1]
        )));
    }
    if blocks(kernel) != Some(xs[2]) {
        return Err(Error::Value(format!(
            "{name}: the input has {} blocks, but output_size, kernel_size, stride, dilation and padding give {:?}",
            xs[2],
            blocks(kernel)
        )));
    }
    let grid = [
        window_count(size[0], kernel[0], stride[0], dil[0], 2 * pad[0], false).unwrap_or(0),
        window_count(size[1], kernel[1], stride[1], dil[1], 2 * pad[1], false).unwrap_or(0),
    ];
    let p = Pool {
        n: xs[0],
        c,
        input: grid,
        output: size,
        kernel,
        stride: [stride[0], stride[1]],
        dil: [dil[0], dil[1]],
        pad: [pad[0], pad[1]],
    };
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
