//! softmax, logsoftmax (along any axis), layer_norm and rms_norm (over the last dim), computed in f32
//! (f64 for float64 and integer inputs). Each line is loaded once into a scratch row; its max
//! is found in one pass and its sum of exponentials in a second, cascaded pass, so the result
//! is stable for any magnitude and accurate for long rows. layer_norm takes the mean, then the
//! variance as the mean squared deviation from it (two passes over the scratch row), both
//! cascaded.

use max_graph::DType;
use max_graph::ops::OpKind;
use max_graph::ops::reduction::RmsNormParams;

use super::reduce::{fold_extreme, pairwise_by};
use super::work::{Float, Num, Src, Typed};
use super::{Axis, expect, map_lines, typed_dispatch};
use crate::{Buffer, Error, Result};

pub(super) fn softmax(log: bool, ax: Axis, x: &Buffer, out: &Buffer) -> Result<()> {
    let name = if log { OpKind::LogSoftmax.name() } else { OpKind::Softmax.name() };
    expect(name, "the output", out, x.dtype(), ax.elems(ax.n))?;
    let dtype = x.dtype();
    typed_dispatch!(name, dtype, T, {
        softmax_typed::<T>(log, ax, x, out);
        Ok(())
    })
}

fn softmax_typed<T: Typed>(log: bool, ax: Axis, x: &Buffer, out: &Buffer) {
    let n = ax.n;
    map_lines::<T, T::F>(x, out, ax, |row| {
        let m = fold_extreme(T::F::lowest(), row, true);
        if log {
            row.iter_mut().for_each(|v| *v = *v - m);
            let ls = pairwise_by(n, |k| row[k].exp()).ln();
            row.iter_mut().for_each(|v| *v = *v - ls);
        } else {
            row.iter_mut().for_each(|v| *v = (*v - m).exp());
            let s = pairwise_by(n, |k| row[k]);
            row.iter_mut().for_each(|v| *v = *v / s);
        }
    });
}

pub(super) fn layer_norm(x: &Buffer, gamma: &Buffer, beta: &Buffer, eps: f64, out: &Buffer) -> Result<()> {
    let name = OpKind::LayerNorm.name();
    let Some(&d) = x.shape().last() else {
        return Err(Error::Value(format!("{name}: the input must have at least one dimension")));
    };
    for (what, p) in [("gamma", gamma), ("beta", beta)] {
        expect(name, what, p, x.dtype(), d)?;
    }
    expect(name, "the output", out, x.dtype(), x.num_elements())?;
    if d == 0 {
        return Ok(());
    }
    let ax = Axis { outer: x.num_elements() / d, n: d, inner: 1 };
    let dtype = x.dtype();
    typed_dispatch!(name, dtype, T, {
        layer_norm_typed::<T>(ax, x, gamma, beta, eps, out);
        Ok(())
    })
}

fn layer_norm_typed<T: Typed>(ax: Axis, x: &Buffer, gamma: &Buffer, beta: &Buffer, eps: f64, out: &Buffer) {
    let d = ax.n;
    let (g, b) = (Src::<T>::of(gamma), Src::<T>::of(beta));
    let g: Vec<T::F> = (0..d).map(|k| g.get(k).real()).collect();
    let b: Vec<T::F> = (0..d).map(|k| b.get(k).real()).collect();
    let count = T::F::from_f64(d as f64);
    let eps = T::F::from_f64(eps);
    map_lines::<T, T::F>(x, out, ax, |row| {
        let mean = pairwise_by(d, |k| row[k]) / count;
        let var = pairwise_by(d, |k| {
            let c = row[k] - mean;
            c * c
        }) / count;
        let inv = T::F::from_f64(1.0) / (var + eps).sqrt();
        for ((v, &gk), &bk) in row.iter_mut().zip(&g).zip(&b) {
            *v = (*v - mean) * inv * gk + bk;
        }
    });
}

pub(super) fn rms_norm(x: &Buffer, weight: &Buffer, p: RmsNormParams, out: &Buffer) -> Result<()> {
    let name = OpKind::RmsNorm.name();
    let Some(&d) = x.shape().last() else {
        return Err(Error::Value(format!("{name}: the input must have at least one dimension")));
    };
    expect(name, "weight", weight, x.dtype(), d)?;
    expect(name, "the output", out, x.dtype(), x.num_elements())?;
    if d == 0 {
        return Ok(());
    }
    let ax = Axis { outer: x.num_elements() / d, n: d, inner: 1 };
    let dtype = x.dtype();
    typed_dispatch!(name, dtype, T, {
        rms_norm_typed::<T>(ax, x, weight, p, out);
        Ok(())
    })
}

/// `v` rounded to `T` and back.
fn round<T: Typed>(v: T::F) -> T::F {
    T::store(v).real()
}

fn rms_norm_typed<T: Typed>(ax: Axis, x: &Buffer, weight: &Buffer, p: RmsNormParams, out: &Buffer) {
    let d = ax.n;
    let w = Src::<T>::of(weight);
    let offset = T::F::from_f64(p.weight_offset);
    // The weight plus its offset, in F (with multiply_before_cast) or rounded to T first.
    let w: Vec<T::F> = (0..d)
        .map(|k| {
            let g = w.get(k).real() + offset;
            if p.multiply_before_cast { g } else { round::<T>(g) }
        })
        .collect();
    let count = T::F::from_f64(d as f64);
    let eps = T::F::from_f64(p.epsilon);
    map_lines::<T, T::F>(x, out, ax, |row| {
        let ms = pairwise_by(d, |k| row[k] * row[k]) / count;
        let inv = T::F::from_f64(1.0) / (ms + eps).sqrt();
        for (v, &g) in row.iter_mut().zip(&w) {
            *v = if p.multiply_before_cast { *v * inv * g } else { round::<T>(*v * inv) * g };
        }
    });
}
