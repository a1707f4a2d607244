//! conv2d_transpose: every input pixel's channels times the filter, [Cin] × [Cin, R·S·F],
//! gives its contribution to an R × S patch of output pixels (GEMM over blocks of input rows),
//! and the patches are summed into the output (col2im), output row by output row so that rows
//! can be filled in parallel. Output element (oh, ow) takes input (h, w) through tap (r, s)
//! when oh = h·stride_h − pad_top + r·dilation_h and ow = w·stride_w − pad_left + s·dilation_w.
//! The result keeps the input's layout.

use max_graph::DType;
use max_graph::ops::Op;
use rayon::prelude::*;

use super::gemm::{Mac, Mat};
use super::{PAR_MIN, load_channels_last, with_acc};
use crate::cpu::reduction::typed_dispatch;
use crate::cpu::reduction::work::{Src, Typed};
use crate::operands::{TransposeGeometry as Geo, transpose_geometry};
use crate::{Buffer, Result};

/// The column block of one GEMM holds about this many elements.
const COLS_ELEMS: usize = 1 << 20;

pub(super) fn run(op: &Op, x: &Buffer, filter: &Buffer, bias: Option<&Buffer>, out: &Buffer) -> Result<()> {
    let name = op.kind.name();
    let geo = transpose_geometry(op, x, filter, bias, out)?;
    let cl = geo.channels_last;
    let dtype = x.dtype();
    typed_dispatch!(name, dtype, T, {
        transpose::<T>(&geo, x, filter, cl, bias, out);
        Ok(())
    })
}

fn transpose<T: Typed>(geo: &Geo, x: &Buffer, filter: &Buffer, cl: bool, bias: Option<&Buffer>, out: &Buffer)
where
    T::W: Mac,
{
    let xw = load_channels_last::<T>(x, cl);
    let [oh, ow] = geo.output;
    let fw = Src::<T>::of(filter);
    let [kh, kw] = geo.kernel;
    let cols = kh * kw * geo.f;
    // [Cin, (r, s, f)]
    let mut b = vec![T::W::default(); geo.cin * cols];
    for ci in 0..geo.cin {
        for r in 0..kh {
            for s in 0..kw {
                for o in 0..geo.f {
                    let at = r * geo.ftap[0] + s * geo.ftap[1] + ci * geo.fin + o * geo.fout;
                    b[ci * cols + (r * kw + s) * geo.f + o] = fw.get(at).work();
                }
            }
        }
    }
    with_acc::<T>(out, geo.n * oh * ow * geo.f, geo.f, bias, cl, |acc| {
        if acc.is_empty() || cols == 0 {
            return;
        }
        let per_image = oh * ow * geo.f;
        let work = geo.n * geo.input[0] * geo.input[1] * geo.cin * cols;
        let threads = rayon::current_num_threads();
        if work >= PAR_MIN && geo.n >= threads.min(4) && geo.n >= 2 {
            acc.par_chunks_mut(per_image).enumerate().for_each(|(img, o)| image(geo, &xw, &b, img, o, false));
        } else {
            let par = work >= PAR_MIN;
            for (img, o) in acc.chunks_mut(per_image).enumerate() {
                image(geo, &xw, &b, img, o, par);
            }
        }
    });
}

/// One image: GEMM over blocks of input rows, then col2im into `out` ([OH, OW, F]).
fn image<W: Mac>(geo: &Geo, xw: &[W], b: &[W], img: usize, out: &mut [W], par: bool) {
    let [ih, iw] = geo.input;
    let [kh, kw] = geo.kernel;
    let [sh, sw] = geo.stride;
    let [dh, dw] = geo.dil;
    let [pt, pl] = geo.pad;
    let [oh, ow] = geo.output;
    let (cin, f) = (geo.cin, geo.f);
    let cols = kh * kw * f;
    let rows_per = (COLS_ELEMS / (iw * cols).max(1)).clamp(1, ih.max(1));
    let mut colbuf = vec![W::default(); rows_per * iw * cols];
    let mut h0 = 0;
    while h0 < ih {
        let h1 = (h0 + rows_per).min(ih);
        let m = (h1 - h0) * iw;
        let a = Mat { data: &xw[(img * ih + h0) * iw * cin..], ld: cin };
        W::matmul(m, cols, cin, &mut colbuf[..m * cols], cols, a, Mat { data: b, ld: cols }, par);
        let colbuf = &colbuf[..m * cols];
        // Output rows this block reaches.
        let lo = (h0 * sh).saturating_sub(pt);
        let hi = ((h1 - 1) * sh + (kh - 1) * dh + 1).saturating_sub(pt).min(oh);
        let row = |(y, orow): (usize, &mut [W])| {
            for r in 0..kh {
                let Some(num) = (y + pt).checked_sub(r * dh) else { continue };
                if num % sh != 0 || num / sh < h0 || num / sh >= h1 {
                    continue;
                }
                let h = num / sh;
                for w in 0..iw {
                    let src = ((h - h0) * iw + w) * cols;
                    for s in 0..kw {
                        let Some(xo) = (w * sw + s * dw).checked_sub(pl).filter(|&v| v < ow) else { continue };
                        let c = &colbuf[src + (r * kw + s) * f..src + (r * kw + s + 1) * f];
                        for (o, &v) in orow[xo * f..(xo + 1) * f].iter_mut().zip(c) {
                            *o = o.wadd(v);
                        }
                    }
                }
            }
        };
        if lo < hi {
            let rows = &mut out[lo * ow * f..hi * ow * f];
            if par {
                rows.par_chunks_mut(ow * f).enumerate().for_each(|(i, r)| row((lo + i, r)));
            } else {
                rows.chunks_mut(ow * f).enumerate().for_each(|(i, r)| row((lo + i, r)));
            }
        }
        h0 = h1;
    }
}
