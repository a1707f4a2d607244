//! Host kernels of the reduction ops: sum, mean, reduce_max, reduce_min, argmax, argmin
//! (`reduce`), softmax, logsoftmax and layer_norm (`norm`), cumsum, top_k and argsort (`sort`).
//! Attributes are parsed as crates/graph/src/ops/reduction.rs documents them.
//!
//! A tensor is seen as [outer, n, inner] around the op's axis; a *line* is the n elements of
//! one (outer, inner) pair, `inner` apart in memory. Floats compute in f32 (f64 for float64),
//! integers in 64 bits with wrapping (see `work`).

mod norm;
mod reduce;
mod sort;
pub(crate) mod work;

use max_graph::ops::reduction::{CumsumParams, cumsum_params};
use max_graph::ops::{Op, OpKind};
use rayon::prelude::*;

pub(crate) use crate::operands::expect;
use crate::operands::{axis_lines, flag, graph_err, layer_norm_args};
use crate::{Buffer, Error, Result};
use work::{Dst, Num, Src, Typed};

pub(crate) use reduce::max_of;

/// Below this many elements a kernel stays on the calling thread.
pub(crate) const PAR_MIN: usize = 1 << 15;

pub fn run(op: &Op, inputs: &[Buffer], outputs: &[Buffer]) -> Result<()> {
    let name = op.kind.name();
    let (Some(x), Some(out)) = (inputs.first(), outputs.first()) else {
        return Err(Error::Value(format!("{name}: expected an input and an output")));
    };
    if x.num_elements() == 0 && out.num_elements() == 0 {
        return Ok(());
    }
    match op.kind {
        OpKind::Sum | OpKind::Mean | OpKind::ReduceMax | OpKind::ReduceMin | OpKind::ArgMax | OpKind::ArgMin => {
            let ax = Axis::of(op, x, true)?;
            reduce::run(op.kind, ax, x, out)
        }
        OpKind::Softmax | OpKind::LogSoftmax => {
            let ax = Axis::of(op, x, false)?;
            norm::softmax(op.kind == OpKind::LogSoftmax, ax, x, out)
        }
        OpKind::LayerNorm => {
            let (gamma, beta, eps) = layer_norm_args(op, inputs)?;
            norm::layer_norm(x, gamma, beta, eps, out)
        }
        OpKind::RmsNorm => {
            let Some(weight) = inputs.get(1) else {
                return Err(Error::Value(format!("{name}: expected input and weight")));
            };
            let p = max_graph::ops::reduction::RmsNormParams::from_attrs(&op.attrs)
                .map_err(|m| Error::Value(format!("{name}: {m}")))?;
            norm::rms_norm(x, weight, p, out)
        }
        OpKind::Cumsum => {
            let ax = Axis::of(op, x, true)?;
            let CumsumParams { exclusive, reverse } = cumsum_params(op).map_err(graph_err)?;
            sort::cumsum(ax, exclusive, reverse, x, out)
        }
        OpKind::TopK => {
            let ax = Axis::of(op, x, true)?;
            let Some(indices) = outputs.get(1) else {
                return Err(Error::Value(format!("{name}: expected the values and indices outputs")));
            };
            sort::top_k(ax, x, out, indices)
        }
        OpKind::ArgSort => {
            if x.rank() != 1 {
                return Err(Error::Value(format!("{name}: sorts rank-1 tensors only, got shape {:?}", x.shape())));
            }
            sort::argsort(flag(op, "ascending", true)?, x, out)
        }
        other => Err(Error::Value(format!("{}: no CPU kernel for this op", other.name()))),
    }
}

/// A tensor's shape around one axis: [outer, n, inner].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Axis {
    pub outer: usize,
    pub n: usize,
    pub inner: usize,
}

impl Axis {
    /// The split of `x` around the op's `axis` attribute (a scalar is one element when
    /// `need_rank` is false).
    fn of(op: &Op, x: &Buffer, need_rank: bool) -> Result<Axis> {
        let (outer, n, inner) = axis_lines(op, x, need_rank)?;
        Ok(Axis { outer, n, inner })
    }

    /// The number of elements of a tensor with `m` elements along the axis.
    pub fn elems(&self, m: usize) -> usize {
        self.outer * m * self.inner
    }

    /// The index of element `k` of line `line` in a tensor with `m` elements along the axis.
    #[inline]
    pub fn at(&self, line: usize, m: usize, k: usize) -> usize {
        let (o, i) = (line / self.inner, line % self.inner);
        (o * m + k) * self.inner + i
    }
}

/// Lines processed together when they are interleaved in memory (inner > 1), so that gathering
/// them reads whole cache lines.
const TILE: usize = 16;

/// Calls `f(values, line)` for every line of `x` along `ax`, with the line's n values as
/// working values in a scratch slice that `f` may change. Tiles of lines run in parallel for
/// large tensors; `f` writes its results for `line` only.
pub(crate) fn lines<T: Typed, V: Num>(x: &Buffer, ax: Axis, f: impl Fn(&mut [V], usize) + Sync) {
    tiles::<T, V>(x, ax, None, f)
}

/// Like `lines`, and then stores each line's scratch slice, as `f` left it, into the same
/// line of `out` (a tensor shaped like `x`).
pub(crate) fn map_lines<T: Typed, V: Num>(x: &Buffer, out: &Buffer, ax: Axis, f: impl Fn(&mut [V]) + Sync) {
    tiles::<T, V>(x, ax, Some(Dst::<T>::of(out)), |row, _| f(row))
}

fn tiles<T: Typed, V: Num>(x: &Buffer, ax: Axis, out: Option<Dst<T>>, f: impl Fn(&mut [V], usize) + Sync) {
    let src = Src::<T>::of(x);
    let (n, inner) = (ax.n, ax.inner);
    let tw = inner.clamp(1, TILE);
    let tiles_per = inner.div_ceil(tw);
    let tasks = ax.outer * tiles_per;
    let task = |buf: &mut Vec<V>, t: usize| {
        let (o, i0) = (t / tiles_per, (t % tiles_per) * tw);
        let w = tw.min(inner - i0);
        buf.resize(n * w + TILE, V::default());
        let (buf, tmp) = buf.split_at_mut(n * w);
        let base = o * n * inner + i0;
        if inner == 1 {
            src.read(base, buf);
            f(buf, o * inner + i0);
            if let Some(d) = &out {
                d.write(base, buf);
            }
            return;
        }
        for j in 0..n {
            src.read(base + j * inner, &mut tmp[..w]);
            for (c, &v) in tmp[..w].iter().enumerate() {
                buf[c * n + j] = v;
            }
        }
        for c in 0..w {
            f(&mut buf[c * n..(c + 1) * n], o * inner + i0 + c);
        }
        if let Some(d) = &out {
            for j in 0..n {
                for c in 0..w {
                    tmp[c] = buf[c * n + j];
                }
                d.write(base + j * inner, &tmp[..w]);
            }
        }
    };
    if ax.elems(n) < PAR_MIN || tasks < 2 {
        let mut buf = Vec::new();
        (0..tasks).for_each(|t| task(&mut buf, t));
    } else {
        (0..tasks).into_par_iter().for_each_init(Vec::new, task);
    }
}

/// Runs `$body` with `$t` bound to the storage type of `$dtype` (any dtype cast supports).
macro_rules! typed_dispatch {
    ($name:expr, $dtype:expr, $t:ident, $body:expr) => {
        crate::with_cast_type!(
            $dtype,
            $t,
            $body,
            Err(crate::Error::Value(format!("{}: unsupported dtype {}", $name, $dtype)))
        )
    };
}
pub(crate) use typed_dispatch;
