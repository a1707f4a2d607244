//! Host kernel of the FFT family (crates/graph/src/ops/fft.rs): irfft, also the reference of
//! kernels/fft.cu. A row (one (outer, inner) pair around the axis) is gathered into a complex
//! spectrum in the working type (f32 for float16, bfloat16 and float32, f64 for float64),
//! transformed (`irfft`, over the any-length FFT of `plan`) and scattered into the result;
//! rows run in parallel for large tensors, each thread with its own buffers.

mod complex;
mod irfft;
mod plan;
#[cfg(test)]
mod tests;

use half::{bf16, f16};
use max_graph::DType;
use max_graph::ops::Op;
use max_graph::ops::fft::IrfftShape;
use rayon::prelude::*;

use crate::cpu::reduction::PAR_MIN;
use crate::cpu::reduction::work::{Dst, Float, Src, Typed};
use crate::operands::irfft_shape;
use crate::{Buffer, Error, Result};
use complex::Cx;
use irfft::{Irfft, Work};

pub fn run(op: &Op, inputs: &[Buffer], outputs: &[Buffer]) -> Result<()> {
    let name = op.kind.name();
    let ([x], [out]) = (inputs, outputs) else {
        return Err(Error::Value(format!("{name}: expected one input and one output")));
    };
    let x = if x.is_contiguous() { x.clone() } else { x.contiguous()? };
    let g = irfft_shape(op, &x, out)?;
    if !out.is_contiguous() {
        return Err(Error::Value(format!("{name}: the result buffer must be contiguous")));
    }
    if g.output_len() == 0 {
        return Ok(());
    }
    match x.dtype() {
        DType::Float32 => rows::<f32>(&x, out, g),
        DType::Float64 => rows::<f64>(&x, out, g),
        DType::Float16 => rows::<f16>(&x, out, g),
        DType::BFloat16 => rows::<bf16>(&x, out, g),
        other => return Err(Error::Value(format!("{name}: unsupported dtype {other}"))),
    }
    Ok(())
}

/// A thread's buffers: the row's spectrum, its samples, and the transform's work space.
struct Scratch<F> {
    spec: Vec<Cx<F>>,
    line: Vec<F>,
    work: Work<F>,
}

fn rows<T: Typed>(x: &Buffer, out: &Buffer, g: IrfftShape) {
    let plan = Irfft::<T::F>::new(g.n);
    let (src, dst) = (Src::<T>::of(x), Dst::<T>::of(out));
    let scale = T::F::from_f64(g.scale());
    let (n, m, inner, used) = (g.n, g.m, g.inner, g.used());
    let zero = T::F::from_f64(0.0);
    let row = |s: &mut Scratch<T::F>, r: usize| {
        let (o, i) = (r / inner, r % inner);
        let first = o * m * inner + i;
        s.spec.clear();
        s.spec.extend((0..n / 2 + 1).map(|k| {
            if k >= used {
                return Cx::new(zero, zero);
            }
            let at = first + k * inner;
            if g.complex {
                Cx::new(src.get(2 * at).real(), src.get(2 * at + 1).real())
            } else {
                Cx::new(src.get(at).real(), zero)
            }
        }));
        s.line.resize(n, zero);
        plan.run(&s.spec, scale, &mut s.line, &mut s.work);
        let first = o * n * inner + i;
        for (j, v) in s.line.iter().enumerate() {
            dst.set(first + j * inner, T::store(*v));
        }
    };
    let fresh = || Scratch { spec: Vec::new(), line: Vec::new(), work: Work::new() };
    if g.output_len() < PAR_MIN || g.rows() < 2 {
        let mut s = fresh();
        (0..g.rows()).for_each(|r| row(&mut s, r));
    } else {
        (0..g.rows()).into_par_iter().for_each_init(fresh, row);
    }
}
