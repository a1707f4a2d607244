//! Matrix products on the host through the `gemm` crate (f32, f64; f16 and bf16 are widened
//! to f32, multiplied with f32 accumulation, and rounded back), with MAX's rank rules: a 1-D
//! left operand is a row vector and a 1-D right operand a column vector (the added dim is
//! dropped from the result), and leading batch dims broadcast. Integer products accumulate in
//! 64 bits with wrapping.

use gemm::{Parallelism, gemm};
use max_graph::DType;

use super::cast::{Canon, Elem};
use crate::{Buffer, Error, Result, with_cast_type};

struct Operand {
    batch: Vec<usize>,
    rows: usize,
    cols: usize,
}

fn split(shape: &[usize], is_lhs: bool) -> Operand {
    match shape.len() {
        0 => Operand { batch: vec![], rows: 1, cols: 1 },
        1 if is_lhs => Operand { batch: vec![], rows: 1, cols: shape[0] },
        1 => Operand { batch: vec![], rows: shape[0], cols: 1 },
        r => Operand { batch: shape[..r - 2].to_vec(), rows: shape[r - 2], cols: shape[r - 1] },
    }
}

/// Element offsets of each batch of `op` for every batch index of the broadcast `out_batch`.
fn batch_offsets(op: &Operand, out_batch: &[usize]) -> Vec<usize> {
    let per = op.rows * op.cols;
    let pad = out_batch.len() - op.batch.len();
    let total: usize = out_batch.iter().product();
    let mut strides = vec![0usize; out_batch.len()];
    let mut acc = per;
    for i in (0..op.batch.len()).rev() {
        if op.batch[i] != 1 {
            strides[pad + i] = acc;
        }
        acc *= op.batch[i];
    }
    (0..total)
        .map(|mut lin| {
            let mut off = 0;
            for d in (0..out_batch.len()).rev() {
                off += (lin % out_batch[d]) * strides[d];
                lin /= out_batch[d];
            }
            off
        })
        .collect()
}

fn threads() -> Parallelism {
    let n = rayon::current_num_threads();
    if n > 1 { Parallelism::Rayon(n) } else { Parallelism::None }
}

/// Widens any float buffer to f32 values.
fn to_f32(b: &Buffer) -> Result<Vec<f32>> {
    let n = b.num_elements();
    with_cast_type!(
        b.dtype(),
        T,
        {
            let ptr = b.addr() as *const T;
            // SAFETY: b is a contiguous host buffer of n elements of T.
            Ok((0..n).map(|i| f32::from_canon(unsafe { std::ptr::read_unaligned(ptr.add(i)) }.canon())).collect())
        },
        Err(Error::Value(format!("matmul: unsupported dtype {}", b.dtype())))
    )
}

/// `out = lhs @ rhs` for contiguous host buffers whose shapes passed staging.
pub fn run(lhs: &Buffer, rhs: &Buffer, out: &Buffer) -> Result<()> {
    let (a, b) = (split(lhs.shape(), true), split(rhs.shape(), false));
    if a.cols != b.rows {
        return Err(Error::Value(format!("matmul: shapes {:?} and {:?} do not contract", lhs.shape(), rhs.shape())));
    }
    let (m, k, n) = (a.rows, a.cols, b.cols);
    let out_batch: Vec<usize> = {
        let rank = a.batch.len().max(b.batch.len());
        (0..rank)
            .map(|i| {
                let da = if i + a.batch.len() >= rank { a.batch[i + a.batch.len() - rank] } else { 1 };
                let db = if i + b.batch.len() >= rank { b.batch[i + b.batch.len() - rank] } else { 1 };
                if da == 1 { db } else { da } // (a 0 against a 1 is 0: no batches)
            })
            .collect()
    };
    if out_batch.iter().product::<usize>() * m * n != out.num_elements() {
        return Err(Error::Value(format!(
            "matmul: shapes {:?} and {:?} do not give the output's {:?}",
            lhs.shape(),
            rhs.shape(),
            out.shape()
        )));
    }
    if out.num_elements() == 0 {
        return Ok(());
    }
    let (oa, ob) = (batch_offsets(&a, &out_batch), batch_offsets(&b, &out_batch));
    let dtype = out.dtype();
    match dtype {
        DType::Float32 => gemm_batches::<f32>(
            lhs.addr() as *const f32,
            rhs.addr() as *const f32,
            out.addr() as *mut f32,
            &oa,
            &ob,
            m,
            k,
            n,
        ),
        DType::Float64 => gemm_batches::<f64>(
            lhs.addr() as *const f64,
            rhs.addr() as *const f64,
            out.addr() as *mut f64,
            &oa,
            &ob,
            m,
            k,
            n,
        ),
        d if d.is_float() => {
            let (xa, xb) = (to_f32(lhs)?, to_f32(rhs)?);
            let mut acc = vec![0f32; out.num_elements()];
            gemm_batches::<f32>(xa.as_ptr(), xb.as_ptr(), acc.as_mut_ptr(), &oa, &ob, m, k, n);
            with_cast_type!(
                d,
                T,
                {
                    let ptr = out.addr() as *mut T;
                    for (i, v) in acc.iter().enumerate() {
                        // SAFETY: out holds acc.len() elements of T.
                        unsafe { std::ptr::write_unaligned(ptr.add(i), T::from_canon(Canon::F(*v as f64))) };
                    }
                },
                return Err(Error::Value(format!("matmul: unsupported dtype {d}")))
            );
        }
        d if d.is_integral() => with_cast_type!(
            d,
            T,
            {
                int_batches::<T>(
                    lhs.addr() as *const T,
                    rhs.addr() as *const T,
                    out.addr() as *mut T,
                    &oa,
                    &ob,
                    m,
                    k,
                    n,
                )
            },
            return Err(Error::Value(format!("matmul: unsupported dtype {d}")))
        ),
        d => return Err(Error::Value(format!("matmul: unsupported dtype {d}"))),
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn gemm_batches<T>(a: *const T, b: *const T, c: *mut T, oa: &[usize], ob: &[usize], m: usize, k: usize, n: usize)
where
    T: 'static + Copy + Default + num_one::One,
{
    for (bi, (&xa, &xb)) in oa.iter().zip(ob).enumerate() {
        // SAFETY: the offsets address whole row-major matrices inside the buffers (shapes were
        // checked above); the output batch bi holds m * n elements.
        unsafe {
            // Row-major C = A B is column-major C^T = B^T A^T, the layout the gemm crate's
            // kernels write directly (no staging of the destination).
            gemm(
                n,
                m,
                k,
                c.add(bi * m * n),
                n as isize,
                1,
                false,
                b.add(xb),
                n as isize,
                1,
                a.add(xa),
                k as isize,
                1,
                T::default(),
                T::one(),
                false,
                false,
                false,
                threads(),
            );
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn int_batches<T: Elem>(a: *const T, b: *const T, c: *mut T, oa: &[usize], ob: &[usize], m: usize, k: usize, n: usize) {
    let as_i = |v: T| match v.canon() {
        Canon::I(i) => i,
        Canon::U(u) => u as i64,
        Canon::F(f) => f as i64,
    };
    for (bi, (&xa, &xb)) in oa.iter().zip(ob).enumerate() {
        for i in 0..m {
            for j in 0..n {
                let mut acc: i64 = 0;
                for p in 0..k {
                    // SAFETY: indices stay inside the checked matrix extents.
                    let (x, y) = unsafe {
                        (
                            std::ptr::read_unaligned(a.add(xa + i * k + p)),
                            std::ptr::read_unaligned(b.add(xb + p * n + j)),
                        )
                    };
                    acc = acc.wrapping_add(as_i(x).wrapping_mul(as_i(y)));
                }
                // SAFETY: output index inside batch bi.
                unsafe { std::ptr::write_unaligned(c.add(bi * m * n + i * n + j), T::from_canon(Canon::I(acc))) };
            }
        }
    }
}

/// The multiplicative identity of the gemm element types.
mod num_one {
    pub trait One {
        fn one() -> Self;
    }
    impl One for f32 {
        fn one() -> f32 {
            1.0
        }
    }
    impl One for f64 {
        fn one() -> f64 {
            1.0
        }
    }
}
