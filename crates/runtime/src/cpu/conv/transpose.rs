//! conv2d_transpose: every input pixel's channels times the filter, [Cin] × [Cin, R·S·F],
//! gives its contribution to an R × S patch of output pixels (GEMM over blocks of input rows),
//! and the patches are summed into the output (col2im), output row by output row so that rows
//! can be filled in parallel. Output element (oh, ow) takes input (h, w) through tap (r, s)
//! when oh = h·stride_h − pad_top + r·dilation_h and ow = w·stride_w − pad_left + s·dilation_w.
//! The result keeps the input's layout.

use max_graph::DType;
use max_graph::ops::Op;
use rayon::prelude::*;

use super::forward::strides_of;
use super::gemm::{Mac, Mat};
use super::{PAR_MIN, channels_last, check_out, ints, load_channels_last, steps, string, with_acc};
use crate::cpu::reduction::typed_dispatch;
use crate::cpu::reduction::work::{Src, Typed};
use crate::{Buffer, Error, Result};

/// The column block of one GEMM holds about this many elements.
const COLS_ELEMS: usize = 1 << 20;

struct Geo {
    n: usize,
    cin: usize,
    f: usize,
    input: [usize; 2],
    output: [usize; 2],
    kernel: [usize; 2],
    stride: [usize; 2],
    dil: [usize; 2],
    pad: [usize; 2],
    /// Filter element strides of R, S, the input channel and the output channel.
    ftap: [usize; 2],
    fin: usize,
    fout: usize,
}

pub(super) fn run(op: &Op, x: &Buffer, filter: &Buffer, bias: Option<&Buffer>, out: &Buffer) -> Result<()> {
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
    let geo = Geo {
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
    };
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
