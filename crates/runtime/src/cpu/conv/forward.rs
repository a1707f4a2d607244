//! conv2d and conv3d. A 2-D convolution is a 3-D one with a depth of 1. The filter becomes one
//! [K, F/groups] matrix per group (K = kernel taps × input channels per group); blocks of
//! output positions gather their input windows into an im2col block [positions, K] and
//! multiply it by the group's matrix (`gemm`), straight into the channels-last result. A 1x1
//! convolution with stride 1 and no padding multiplies the input itself. Depthwise
//! convolutions (one input channel per group) accumulate tap by tap across the channels
//! instead, which keeps every group's tiny product vectorised.

use max_graph::DType;
use max_graph::ops::Op;
use rayon::prelude::*;

use super::gemm::{Mac, Mat};
use super::{PAR_MIN, load_channels_last, with_acc};
use crate::cpu::reduction::typed_dispatch;
use crate::cpu::reduction::work::{Num, Src, Typed};
use crate::operands::{ConvGeometry as Geo, conv_geometry};
use crate::{Buffer, Result};

/// im2col blocks hold about this many elements.
const BLOCK_ELEMS: usize = 1 << 16;

pub(super) fn run(op: &Op, x: &Buffer, filter: &Buffer, bias: Option<&Buffer>, out: &Buffer) -> Result<()> {
    let name = op.kind.name();
    let geo = conv_geometry(op, x, filter, bias, out)?;
    let cl = geo.channels_last;
    let dtype = x.dtype();
    typed_dispatch!(name, dtype, T, {
        conv::<T>(&geo, x, filter, cl, bias, out);
        Ok(())
    })
}

fn conv<T: Typed>(geo: &Geo, x: &Buffer, filter: &Buffer, cl: bool, bias: Option<&Buffer>, out: &Buffer)
where
    T::W: Mac,
{
    let xw = load_channels_last::<T>(x, cl);
    with_acc::<T>(out, geo.n * geo.positions() * geo.f, geo.f, bias, true, |acc| {
        if !acc.is_empty() && geo.taps() * geo.cg > 0 {
            let fw = Src::<T>::of(filter);
            if geo.cg == 1 && geo.groups > 1 {
                depthwise(geo, &xw, &depthwise_weights(geo, |i| fw.get(i).work()), acc);
            } else {
                im2col_gemm(geo, &xw, &group_matrices(geo, |i| fw.get(i).work()), acc);
            }
        }
    });
}

/// The filter as `groups` matrices [K, fg], K ordered (q, r, s, input channel).
fn group_matrices<W: Num>(geo: &Geo, get: impl Fn(usize) -> W) -> Vec<W> {
    let (k, fg) = (geo.taps() * geo.cg, geo.fg);
    let mut b = vec![W::default(); geo.groups * k * fg];
    for g in 0..geo.groups {
        for (t, tap) in taps(geo).enumerate() {
            for ci in 0..geo.cg {
                let row = (g * k + t * geo.cg + ci) * fg;
                for j in 0..fg {
                    b[row + j] = get(tap + ci * geo.fc + (g * fg + j) * geo.ff);
                }
            }
        }
    }
    b
}

/// Filter offsets of the kernel taps in (q, r, s) order.
fn taps(geo: &Geo) -> impl Iterator<Item = usize> + '_ {
    let [kd, kh, kw] = geo.kernel;
    (0..kd * kh * kw).map(move |t| {
        let (q, r, s) = (t / (kh * kw), (t / kw) % kh, t % kw);
        q * geo.ftap[0] + r * geo.ftap[1] + s * geo.ftap[2]
    })
}

fn im2col_gemm<W: Mac>(geo: &Geo, xw: &[W], b: &[W], acc: &mut [W]) {
    let (f, fg, cg, c) = (geo.f, geo.fg, geo.cg, geo.c);
    let k = geo.taps() * cg;
    let p = geo.positions();
    let one_by_one = geo.kernel == [1; 3] && geo.stride == [1; 3] && geo.pad == [0; 3];
    let pb = (BLOCK_ELEMS / k).clamp(16, p.max(16)).min(p);
    let tasks = geo.n * p.div_ceil(pb);
    let work = geo.n * p * k * f;
    let threads = rayon::current_num_threads();
    let outer_par = work >= PAR_MIN && tasks >= 2 && tasks >= threads.min(4);
    let gemm_par = !outer_par && work >= 16 * PAR_MIN;
    let task = |scratch: &mut Vec<W>, img: usize, blk: usize, dst: &mut [W]| {
        let p0 = blk * pb;
        let m = dst.len() / f;
        for g in 0..geo.groups {
            let bm = Mat { data: &b[g * k * fg..(g + 1) * k * fg], ld: fg };
            let d = &mut dst[g * fg..];
            if one_by_one {
                let a = Mat { data: &xw[(img * p + p0) * c + g * cg..], ld: c };
                W::matmul(m, fg, cg, d, f, a, bm, gemm_par);
            } else {
                scratch.resize(m * k, W::default());
                im2col(geo, xw, img, p0, g, &mut scratch[..m * k]);
                W::matmul(m, fg, k, d, f, Mat { data: scratch, ld: k }, bm, gemm_par);
            }
        }
    };
    if outer_par {
        acc.par_chunks_mut(p * f).enumerate().for_each(|(img, out)| {
            out.par_chunks_mut(pb * f).enumerate().for_each_init(Vec::new, |s, (blk, d)| task(s, img, blk, d));
        });
    } else {
        let mut scratch = Vec::new();
        for (img, out) in acc.chunks_mut(p * f).enumerate() {
            for (blk, d) in out.chunks_mut(pb * f).enumerate() {
                task(&mut scratch, img, blk, d);
            }
        }
    }
}

/// Rows p0.. of image `img`'s im2col matrix for group `g` into `a` ([rows, K]).
fn im2col<W: Num>(geo: &Geo, xw: &[W], img: usize, p0: usize, g: usize, a: &mut [W]) {
    let [_, oh, ow] = geo.output;
    let [kd, kh, kw] = geo.kernel;
    let [id, ih, iw] = geo.input;
    let (c, cg) = (geo.c, geo.cg);
    let k = geo.taps() * cg;
    for (row, arow) in a.chunks_mut(k).enumerate() {
        let pos = p0 + row;
        let (zd, zh, zw) = (pos / (oh * ow), (pos / ow) % oh, pos % ow);
        let mut t = 0;
        for q in 0..kd {
            let d = geo.at(0, zd, q);
            for r in 0..kh {
                let h = geo.at(1, zh, r);
                for s in 0..kw {
                    let cols = &mut arow[t * cg..(t + 1) * cg];
                    match (d, h, geo.at(2, zw, s)) {
                        (Some(d), Some(h), Some(w)) => {
                            let at = (((img * id + d) * ih + h) * iw + w) * c + g * cg;
                            cols.copy_from_slice(&xw[at..at + cg]);
                        }
                        _ => cols.fill(W::default()),
                    }
                    t += 1;
                }
            }
        }
    }
}

/// Depthwise weights as [taps, F] (F = channels × multiplier, channel-major).
fn depthwise_weights<W: Num>(geo: &Geo, get: impl Fn(usize) -> W) -> Vec<W> {
    let f = geo.f;
    let mut w = vec![W::default(); geo.taps() * f];
    for (t, tap) in taps(geo).enumerate() {
        for o in 0..f {
            w[t * f + o] = get(tap + o * geo.ff);
        }
    }
    w
}

fn depthwise<W: Num>(geo: &Geo, xw: &[W], wd: &[W], acc: &mut [W]) {
    let [od, oh, ow] = geo.output;
    let [kd, kh, kw] = geo.kernel;
    let [id, ih, iw] = geo.input;
    let (c, f, m) = (geo.c, geo.f, geo.fg);
    let row = |(ri, out): (usize, &mut [W])| {
        let (zh, zd, img) = (ri % oh, (ri / oh) % od, ri / (oh * od));
        for zw in 0..ow {
            let a = &mut out[zw * f..(zw + 1) * f];
            for q in 0..kd {
                let Some(d) = geo.at(0, zd, q) else { continue };
                for r in 0..kh {
                    let Some(h) = geo.at(1, zh, r) else { continue };
                    for s in 0..kw {
                        let Some(w) = geo.at(2, zw, s) else { continue };
                        let t = (q * kh + r) * kw + s;
                        let at = (((img * id + d) * ih + h) * iw + w) * c;
                        let (xr, wr) = (&xw[at..at + c], &wd[t * f..(t + 1) * f]);
                        if m == 1 {
                            for ((o, &xv), &wv) in a.iter_mut().zip(xr).zip(wr) {
                                *o = o.wadd(xv.wmul(wv));
                            }
                        } else {
                            for (ch, &xv) in xr.iter().enumerate() {
                                for j in 0..m {
                                    let o = ch * m + j;
                                    a[o] = a[o].wadd(xv.wmul(wr[o]));
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    let work = acc.len() * geo.taps();
    if work >= PAR_MIN {
        acc.par_chunks_mut(ow * f).enumerate().for_each(row);
    } else {
        acc.chunks_mut(ow * f).enumerate().for_each(row);
    }
}
