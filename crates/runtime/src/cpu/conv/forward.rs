//! conv2d and conv3d. A 2-D convolution is a 3-D one with a depth of 1. The filter becomes one
//! [K, F/groups] matrix per group (K = kernel taps × input channels per group); blocks of
//! output positions gather their input windows into an im2col block [positions, K] and
//! multiply it by the group's matrix (`gemm`), straight into the channels-last result. A 1x1
//! convolution with stride 1 and no padding multiplies the input itself. Depthwise
//! convolutions (one input channel per group) accumulate tap by tap across the channels
//! instead, which keeps every group's tiny product vectorised.

use max_graph::DType;
use max_graph::attrs::Attr;
use max_graph::ops::{Op, OpKind};
use rayon::prelude::*;

use super::gemm::{Mac, Mat};
use super::{PAR_MIN, channels_last, check_out, ints, load_channels_last, steps, string, window_count, with_acc};
use crate::cpu::reduction::typed_dispatch;
use crate::cpu::reduction::work::{Num, Src, Typed};
use crate::{Buffer, Error, Result};

/// im2col blocks hold about this many elements.
const BLOCK_ELEMS: usize = 1 << 16;

/// A convolution's sizes, as 3-D (a 2-D one has depth 1).
pub(super) struct Geo {
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
    pub pad: [usize; 3],
    /// Element strides in the filter of each kernel dim, of the input channel, of the output
    /// channel.
    pub ftap: [usize; 3],
    pub fc: usize,
    pub ff: usize,
}

impl Geo {
    fn taps(&self) -> usize {
        self.kernel.iter().product()
    }

    fn positions(&self) -> usize {
        self.output.iter().product()
    }

    /// The input coordinate of kernel tap `k` for output coordinate `z` along dim `i`.
    #[inline]
    fn at(&self, i: usize, z: usize, k: usize) -> Option<usize> {
        (z * self.stride[i] + k * self.dil[i]).checked_sub(self.pad[i]).filter(|&v| v < self.input[i])
    }
}

/// Contiguous element strides of `shape`.
pub(super) fn strides_of(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

pub(super) fn run(op: &Op, x: &Buffer, filter: &Buffer, bias: Option<&Buffer>, out: &Buffer) -> Result<()> {
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
    let mut geo = Geo {
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
    if let Some(b) = bias {
        if b.shape() != [f] {
            return Err(Error::Value(format!("{name}: bias has shape {:?}, expected [{f}]", b.shape())));
        }
    }
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
