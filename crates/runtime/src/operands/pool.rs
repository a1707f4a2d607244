//! The window ops' geometry (avg_pool2d, max_pool2d over NHWC input, and fold), checked once for
//! both backends: the graph's `WindowParams` over the buffers' concrete shapes. A symbolic
//! kernel size, known to shapes only, is recovered from the input and output sizes when they
//! determine it.

use max_graph::ops::Op;
use max_graph::ops::pool::{WindowParams, window_count, window_params};

use super::conv::check_out;
use super::graph_err;
use crate::{Buffer, Error, Result};

/// A window op's sizes. For fold, `input` is the grid of block positions and `output` the
/// folded image.
pub(crate) struct Window {
    pub n: usize,
    pub c: usize,
    pub input: [usize; 2],
    pub output: [usize; 2],
    pub kernel: [usize; 2],
    pub stride: [usize; 2],
    pub dil: [usize; 2],
    /// The padding before each dim.
    pub pad: [usize; 2],
}

/// The checked attributes of window `op`, with its kernel sizes (None where symbolic).
fn params(op: &Op) -> Result<(WindowParams, [Option<usize>; 2])> {
    let p = window_params(op).map_err(graph_err)?;
    let given = [0, 1].map(|i| p.kernel[i].as_static().map(|k| k as usize));
    Ok((p, given))
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

/// The window of avg_pool2d or max_pool2d `op` over `x` into `out`, with the `count_boundary`
/// attribute (what avg_pool2d divides by).
pub(crate) fn pool_window(op: &Op, x: &Buffer, out: &Buffer) -> Result<(Window, bool)> {
    let name = op.kind.name();
    let xs = x.shape();
    let os = out.shape();
    if xs.len() != 4 || os.len() != 4 {
        return Err(Error::Value(format!("{name}: input must be rank 4 (NHWC), got shape {xs:?}")));
    }
    let (p, given) = params(op)?;
    let (stride, dil, pad, ceil) = (p.stride, p.dilation, p.padding, p.ceil_mode);
    let mut kernel = [0; 2];
    for i in 0..2 {
        let pads = pad[2 * i] + pad[2 * i + 1];
        let count = |k| window_count(xs[1 + i], k, stride[i], dil[i], pads, ceil);
        kernel[i] = match given[i] {
            Some(k) => k,
            None => solve(name, xs[1 + i] + pads, |k| count(k) == Some(os[1 + i]))?,
        };
    }
    let mut want = vec![xs[0], 0, 0, xs[3]];
    for i in 0..2 {
        want[1 + i] = window_count(xs[1 + i], kernel[i], stride[i], dil[i], pad[2 * i] + pad[2 * i + 1], ceil)
            .ok_or_else(|| Error::Value(format!("{name}: the window does not fit the padded input")))?;
    }
    check_out(name, out, &want)?;
    let w = Window {
        n: xs[0],
        c: xs[3],
        input: [xs[1], xs[2]],
        output: [want[1], want[2]],
        kernel,
        stride,
        dil,
        pad: [pad[0], pad[2]],
    };
    Ok((w, p.count_boundary))
}

/// The window of fold `op`: blocks `x` [N, C·kh·kw, L] summed into `out` [N, C, H, W].
pub(crate) fn fold_window(op: &Op, x: &Buffer, out: &Buffer) -> Result<Window> {
    let name = op.kind.name();
    let (xs, os) = (x.shape(), out.shape());
    if xs.len() != 3 || os.len() != 4 {
        return Err(Error::Value(format!("{name}: input must be rank 3, got shape {xs:?}")));
    }
    let (p, given) = params(op)?;
    let (stride, dil, pad) = (p.stride, p.dilation, [p.padding[0], p.padding[2]]);
    let (c, size) = (os[1], [os[2], os[3]]);
    let blocks = |k: [usize; 2]| -> Option<usize> {
        let a = window_count(size[0], k[0], stride[0], dil[0], 2 * pad[0], false)?;
        Some(a * window_count(size[1], k[1], stride[1], dil[1], 2 * pad[1], false)?)
    };
    let taps = xs[1].checked_div(c).unwrap_or(0);
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
    Ok(Window { n: xs[0], c, input: grid, output: size, kernel, stride, dil, pad })
}
