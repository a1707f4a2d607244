//! sum, mean, reduce_max, reduce_min, argmax and argmin along one axis (kept with size 1).
//!
//! Float sums are cascaded: blocks of 128 elements are summed in 8 lanes, and the block sums
//! are combined pairwise, so the rounding error grows with log(n) rather than n. Integer sums
//! wrap in 64 bits; an integer mean truncates. max/min propagate NaN; argmax/argmin give the
//! first index of the extreme value (a NaN counts as the extreme, as in numpy).

use max_graph::DType;
use max_graph::ops::OpKind;
use rayon::prelude::*;

use super::work::{Dst, Num, Src, Typed};
use super::{Axis, PAR_MIN, expect, typed_dispatch};
use crate::{Buffer, Error, Result};

const BLOCK: usize = 128;
/// Rows of a long contiguous line are cut into segments of this size, reduced in parallel.
const SEGMENT: usize = 1 << 16;
/// Interleaved lines are reduced this many at a time (one stretch of each row).
const COLS: usize = 64;
/// Rows summed directly before a partial sum joins the cascade (interleaved lines).
const ROW_BLOCK: usize = 32;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Red {
    Sum,
    Mean,
    Max,
    Min,
    ArgMax,
    ArgMin,
}

pub(super) fn run(kind: OpKind, ax: Axis, x: &Buffer, out: &Buffer) -> Result<()> {
    let name = kind.name();
    let red = match kind {
        OpKind::Sum => Red::Sum,
        OpKind::Mean => Red::Mean,
        OpKind::ReduceMax => Red::Max,
        OpKind::ReduceMin => Red::Min,
        OpKind::ArgMax => Red::ArgMax,
        _ => Red::ArgMin,
    };
    let arg = matches!(red, Red::ArgMax | Red::ArgMin);
    expect(name, "the output", out, if arg { DType::Int64 } else { x.dtype() }, ax.elems(1))?;
    if ax.n == 0 && !matches!(red, Red::Sum | Red::Mean) {
        return Err(Error::Value(format!("{name}: cannot reduce an axis of size 0 (input shape {:?})", x.shape())));
    }
    let dtype = x.dtype();
    typed_dispatch!(name, dtype, T, reduce::<T>(name, red, ax, x, out))
}

/// The better of two candidates for the extreme (NaN wins and stays).
#[inline]
pub(crate) fn better<W: Num>(v: W, best: W, max: bool) -> bool {
    !best.is_nan() && (v.is_nan() || if max { v > best } else { v < best })
}

/// max(a, v) with NaN propagating (vectorisable: no index to keep).
#[inline]
pub(crate) fn max_of<W: Num>(a: W, v: W) -> W {
    if v > a || v.is_nan() { v } else { a }
}

/// min(a, v) with NaN propagating.
#[inline]
fn min_of<W: Num>(a: W, v: W) -> W {
    if v < a || v.is_nan() { v } else { a }
}

/// The max (or min) of `init` and `v`, NaN propagating, in 8 independent lanes.
#[inline]
pub(crate) fn fold_extreme<W: Num>(init: W, v: &[W], max: bool) -> W {
    let pick = if max { max_of::<W> } else { min_of::<W> };
    let mut l = [init; 8];
    let chunks = v.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for k in 0..8 {
            l[k] = pick(l[k], c[k]);
        }
    }
    let m = pick(pick(pick(l[0], l[1]), pick(l[2], l[3])), pick(pick(l[4], l[5]), pick(l[6], l[7])));
    rest.iter().fold(m, |a, &x| pick(a, x))
}

/// A binary counter of partial sums: two sums of the same level merge into one of the next,
/// so that every addition is between sums of similar size (pairwise summation).
struct Cascade<W> {
    stack: Vec<(W, u32)>,
}

impl<W: Num> Cascade<W> {
    fn new() -> Self {
        Cascade { stack: Vec::with_capacity(64) }
    }

    fn push(&mut self, mut v: W) {
        let mut level = 0;
        while let Some(&(top, l)) = self.stack.last() {
            if l != level {
                break;
            }
            self.stack.pop();
            v = top.wadd(v);
            level += 1;
        }
        self.stack.push((v, level));
    }

    fn total(&self) -> W {
        self.stack
            .iter()
            .rev()
            .fold(None, |acc: Option<W>, &(v, _)| Some(acc.map_or(v, |a| v.wadd(a))))
            .unwrap_or_default()
    }
}

fn block_sum<W: Num>(v: &[W]) -> W {
    let mut l = [W::default(); 8];
    let chunks = v.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for k in 0..8 {
            l[k] = l[k].wadd(c[k]);
        }
    }
    let mut s = (l[0].wadd(l[1]).wadd(l[2].wadd(l[3]))).wadd(l[4].wadd(l[5]).wadd(l[6].wadd(l[7])));
    for &r in rest {
        s = s.wadd(r);
    }
    s
}

/// The cascaded sum of `get(0..len)`.
pub(super) fn pairwise_by<W: Num>(len: usize, get: impl Fn(usize) -> W) -> W {
    let mut cascade = Cascade::new();
    let mut buf = [W::default(); BLOCK];
    let mut i = 0;
    while i < len {
        let m = (len - i).min(BLOCK);
        for (k, slot) in buf[..m].iter_mut().enumerate() {
            *slot = get(i + k);
        }
        cascade.push(block_sum(&buf[..m]));
        i += m;
    }
    cascade.total()
}

/// The cascaded sum of elements a..b.
fn sum_range<T: Typed>(src: Src<T>, a: usize, b: usize) -> T::W {
    let mut cascade = Cascade::new();
    let mut buf = [T::W::default(); BLOCK];
    let mut i = a;
    while i < b {
        let m = (b - i).min(BLOCK);
        src.read(i, &mut buf[..m]);
        cascade.push(block_sum(&buf[..m]));
        i += m;
    }
    cascade.total()
}

/// The first extreme of elements a..b (a < b) and its index (only for argmax/argmin).
fn extreme_range<T: Typed>(src: Src<T>, a: usize, b: usize, red: Red) -> (T::W, usize) {
    let max = matches!(red, Red::Max | Red::ArgMax);
    let arg = matches!(red, Red::ArgMax | Red::ArgMin);
    let mut buf = [T::W::default(); BLOCK];
    src.read(a, &mut buf[..1]);
    let (mut best, mut at) = (buf[0], a);
    let mut i = a;
    while i < b && !best.is_nan() {
        let m = (b - i).min(BLOCK);
        src.read(i, &mut buf[..m]);
        if arg {
            for (k, &v) in buf[..m].iter().enumerate() {
                if better(v, best, max) {
                    best = v;
                    at = i + k;
                }
            }
        } else {
            best = fold_extreme(best, &buf[..m], max);
        }
        i += m;
    }
    (best, at)
}

/// The result of a reduction from its sum or extreme, as the output element.
fn finish<T: Typed>(name: &str, red: Red, n: usize, v: T::W) -> Result<T> {
    if red == Red::Mean {
        return match v.div_count(n) {
            Some(m) => Ok(T::store(m)),
            None => Err(Error::Value(format!("{name}: the mean of an empty axis is undefined for integers"))),
        };
    }
    Ok(T::store(v))
}

fn reduce<T: Typed>(name: &str, red: Red, ax: Axis, x: &Buffer, out: &Buffer) -> Result<()> {
    let src = Src::<T>::of(x);
    let n = ax.n;
    if n == 0 {
        let zero = T::W::default();
        let dst = Dst::<T>::of(out);
        for i in 0..ax.elems(1) {
            dst.set(i, if red == Red::Sum { T::store(zero) } else { finish::<T>(name, red, 0, zero)? });
        }
        return Ok(());
    }
    let par = ax.elems(n) >= PAR_MIN;
    if ax.inner == 1 {
        contiguous::<T>(name, red, ax, src, out, par)
    } else {
        interleaved::<T>(name, red, ax, src, out, par)
    }
}

/// Lines that are contiguous rows: segments of rows reduce in parallel, then combine in order.
fn contiguous<T: Typed>(name: &str, red: Red, ax: Axis, src: Src<T>, out: &Buffer, par: bool) -> Result<()> {
    let (rows, n) = (ax.outer, ax.n);
    let segs = n.div_ceil(SEGMENT);
    let range = |t: usize| {
        let (r, s) = (t / segs, t % segs);
        let a = r * n + s * SEGMENT;
        (a, (a + SEGMENT).min((r + 1) * n))
    };
    let tasks = rows * segs;
    if matches!(red, Red::Sum | Red::Mean) {
        let part = |t: usize| {
            let (a, b) = range(t);
            sum_range(src, a, b)
        };
        let parts: Vec<T::W> =
            if par { (0..tasks).into_par_iter().map(part).collect() } else { (0..tasks).map(part).collect() };
        let dst = Dst::<T>::of(out);
        for (r, row) in parts.chunks(segs).enumerate() {
            let total = if segs == 1 {
                row[0]
            } else {
                let mut c = Cascade::new();
                row.iter().for_each(|&v| c.push(v));
                c.total()
            };
            dst.set(r, finish::<T>(name, red, n, total)?);
        }
        return Ok(());
    }
    let max = matches!(red, Red::Max | Red::ArgMax);
    let part = |t: usize| {
        let (a, b) = range(t);
        extreme_range(src, a, b, red)
    };
    let parts: Vec<(T::W, usize)> =
        if par { (0..tasks).into_par_iter().map(part).collect() } else { (0..tasks).map(part).collect() };
    let arg = matches!(red, Red::ArgMax | Red::ArgMin);
    let (vals, idx) = (Dst::<T>::of(out), Dst::<i64>::of(out));
    for (r, row) in parts.chunks(segs).enumerate() {
        let mut best = row[0];
        for &p in &row[1..] {
            if better(p.0, best.0, max) {
                best = p;
            }
        }
        if arg {
            idx.set(r, (best.1 - r * n) as i64);
        } else {
            vals.set(r, T::store(best.0));
        }
    }
    Ok(())
}

/// Lines interleaved in memory (inner > 1): each task reduces COLS neighbouring lines of one
/// outer index, walking the rows in order.
fn interleaved<T: Typed>(name: &str, red: Red, ax: Axis, src: Src<T>, out: &Buffer, par: bool) -> Result<()> {
    let (n, inner) = (ax.n, ax.inner);
    let per = inner.div_ceil(COLS);
    let tasks = ax.outer * per;
    let arg = matches!(red, Red::ArgMax | Red::ArgMin);
    let max = matches!(red, Red::Max | Red::ArgMax);
    let (vals, idx) = (Dst::<T>::of(out), Dst::<i64>::of(out));
    let task = |t: usize| -> Result<()> {
        let (o, i0) = (t / per, (t % per) * COLS);
        let w = COLS.min(inner - i0);
        let base = o * n * inner + i0;
        let out_at = o * inner + i0;
        let mut tmp = [T::W::default(); COLS];
        if matches!(red, Red::Sum | Red::Mean) {
            let mut stack: Vec<(Vec<T::W>, u32)> = Vec::new();
            let mut j = 0;
            while j < n {
                let m = (n - j).min(ROW_BLOCK);
                let mut acc = vec![T::W::default(); w];
                for jj in j..j + m {
                    src.read(base + jj * inner, &mut tmp[..w]);
                    acc.iter_mut().zip(&tmp[..w]).for_each(|(a, &v)| *a = a.wadd(v));
                }
                let mut level = 0;
                while stack.last().is_some_and(|(_, l)| *l == level) {
                    if let Some((top, _)) = stack.pop() {
                        acc.iter_mut().zip(top).for_each(|(a, t)| *a = t.wadd(*a));
                    }
                    level += 1;
                }
                stack.push((acc, level));
                j += m;
            }
            let mut total = vec![T::W::default(); w];
            if let Some((last, rest)) = stack.split_last() {
                total.clone_from(&last.0);
                for (v, _) in rest.iter().rev() {
                    total.iter_mut().zip(v).for_each(|(a, t)| *a = t.wadd(*a));
                }
            }
            for (c, v) in total.into_iter().enumerate() {
                vals.set(out_at + c, finish::<T>(name, red, n, v)?);
            }
            return Ok(());
        }
        let mut best = [T::W::default(); COLS];
        src.read(base, &mut best[..w]);
        let mut at = [0usize; COLS];
        for j in 1..n {
            src.read(base + j * inner, &mut tmp[..w]);
            let row = tmp[..w].iter().zip(&mut best[..w]);
            if arg {
                for (c, (&v, b)) in row.enumerate() {
                    if better(v, *b, max) {
                        *b = v;
                        at[c] = j;
                    }
                }
            } else if max {
                row.for_each(|(&v, b)| *b = max_of(*b, v));
            } else {
                row.for_each(|(&v, b)| *b = min_of(*b, v));
            }
        }
        for c in 0..w {
            if arg {
                idx.set(out_at + c, at[c] as i64);
            } else {
                vals.set(out_at + c, T::store(best[c]));
            }
        }
        Ok(())
    };
    if par && tasks > 1 { (0..tasks).into_par_iter().try_for_each(task) } else { (0..tasks).try_for_each(task) }
}
