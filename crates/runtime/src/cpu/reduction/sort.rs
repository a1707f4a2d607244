//! cumsum, top_k and argsort. Float running sums are compensated (Neumaier), so each prefix is
//! as accurate as a pairwise sum; integer ones wrap. Orderings treat NaN as larger than every
//! number and break ties by the lower index, which makes top_k and argsort deterministic and
//! argsort stable in both directions.

use std::cmp::Ordering;

use max_graph::DType;
use max_graph::ops::OpKind;
use rayon::prelude::*;

use super::work::{Dst, Num, Src, Typed};
use super::{Axis, PAR_MIN, expect, lines, map_lines, typed_dispatch};
use crate::{Buffer, Error, Result};

/// A total order of working values, NaN last.
#[inline]
fn order<W: Num>(a: W, b: W) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        _ => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
    }
}

pub(super) fn cumsum(ax: Axis, exclusive: bool, reverse: bool, x: &Buffer, out: &Buffer) -> Result<()> {
    let name = OpKind::Cumsum.name();
    expect(name, "the output", out, x.dtype(), ax.elems(ax.n))?;
    let dtype = x.dtype();
    typed_dispatch!(name, dtype, T, {
        cumsum_typed::<T>(ax, exclusive, reverse, x, out);
        Ok(())
    })
}

fn cumsum_typed<T: Typed>(ax: Axis, exclusive: bool, reverse: bool, x: &Buffer, out: &Buffer) {
    let n = ax.n;
    map_lines::<T, T::W>(x, out, ax, |row| {
        let (mut sum, mut comp) = (T::W::default(), T::W::default());
        for step in 0..n {
            let k = if reverse { n - 1 - step } else { step };
            let v = row[k];
            if exclusive {
                row[k] = sum.wadd(comp);
                T::W::comp_add(&mut sum, &mut comp, v);
            } else {
                T::W::comp_add(&mut sum, &mut comp, v);
                row[k] = sum.wadd(comp);
            }
        }
    });
}

pub(super) fn top_k(ax: Axis, x: &Buffer, values: &Buffer, indices: &Buffer) -> Result<()> {
    let name = OpKind::TopK.name();
    let lines_count = ax.outer * ax.inner;
    if lines_count == 0 {
        return Ok(());
    }
    let k = values.num_elements() / lines_count;
    if k > ax.n {
        return Err(Error::Value(format!("{name}: k ({k}) is larger than the axis size {}", ax.n)));
    }
    expect(name, "the values", values, x.dtype(), ax.elems(k))?;
    expect(name, "the indices", indices, DType::Int64, ax.elems(k))?;
    if k == 0 {
        return Ok(());
    }
    let dtype = x.dtype();
    typed_dispatch!(name, dtype, T, {
        top_k_typed::<T>(ax, k, x, values, indices);
        Ok(())
    })
}

/// Up to this k, top_k keeps a sorted list of the best so far while scanning each line.
const SMALL_K: usize = 64;

fn top_k_typed<T: Typed>(ax: Axis, k: usize, x: &Buffer, values: &Buffer, indices: &Buffer) {
    let (vals, idx) = (Dst::<T>::of(values), Dst::<i64>::of(indices));
    lines::<T, T::W>(x, ax, |row, line| {
        let row = &*row;
        let base = ax.at(line, k, 0);
        let best: Vec<usize> = if k <= SMALL_K && k < row.len() {
            // Later indices lose ties, so a newcomer goes after every entry it does not beat.
            let mut best: Vec<usize> = Vec::with_capacity(k + 1);
            for (i, &v) in row.iter().enumerate() {
                if best.len() == k && order(v, row[best[k - 1]]) != Ordering::Greater {
                    continue;
                }
                let at = best.iter().position(|&e| order(v, row[e]) == Ordering::Greater).unwrap_or(best.len());
                best.insert(at, i);
                best.truncate(k);
            }
            best
        } else {
            let desc = |a: &usize, b: &usize| order(row[*b], row[*a]).then(a.cmp(b));
            let mut all: Vec<usize> = (0..row.len()).collect();
            if k < row.len() {
                all.select_nth_unstable_by(k - 1, desc);
                all.truncate(k);
            }
            all.sort_unstable_by(desc);
            all
        };
        for (t, &i) in best.iter().enumerate() {
            let at = base + t * ax.inner;
            vals.set(at, T::store(row[i]));
            idx.set(at, i as i64);
        }
    });
}

pub(super) fn argsort(ascending: bool, x: &Buffer, out: &Buffer) -> Result<()> {
    let name = OpKind::ArgSort.name();
    let n = x.num_elements();
    expect(name, "the output", out, DType::Int64, n)?;
    let dtype = x.dtype();
    typed_dispatch!(name, dtype, T, {
        argsort_typed::<T>(ascending, x, out);
        Ok(())
    })
}

fn argsort_typed<T: Typed>(ascending: bool, x: &Buffer, out: &Buffer) {
    let n = x.num_elements();
    let src = Src::<T>::of(x);
    let v: Vec<T::W> = (0..n).map(|i| src.get(i).work()).collect();
    let cmp = |a: &usize, b: &usize| {
        let o = order(v[*a], v[*b]);
        (if ascending { o } else { o.reverse() }).then(a.cmp(b))
    };
    let mut idx: Vec<usize> = (0..n).collect();
    if n >= PAR_MIN {
        idx.par_sort_unstable_by(cmp);
    } else {
        idx.sort_unstable_by(cmp);
    }
    let dst = Dst::<i64>::of(out);
    for (t, &i) in idx.iter().enumerate() {
        dst.set(t, i as i64);
    }
}
