//! The matrix product the convolutions are built on: `gemm` for f32 and f64, a row-streaming
//! loop with wrapping 64-bit arithmetic for the integer working types.

use gemm::{Parallelism, gemm};

use super::Num;

/// A row-major operand: its elements from the first one, and the distance between rows.
pub(super) struct Mat<'a, E> {
    pub data: &'a [E],
    pub ld: usize,
}

pub(super) trait Mac: Num {
    /// `dst = a × b` (m × k times k × n), overwriting the m × n block of `dst` whose rows are
    /// `ldd` apart; `par` lets the product use the rayon pool.
    #[allow(clippy::too_many_arguments)]
    fn matmul(m: usize, n: usize, k: usize, dst: &mut [Self], ldd: usize, a: Mat<Self>, b: Mat<Self>, par: bool);
}

/// Panics (an internal error) unless a matrix of `rows` × `cols` with rows `ld` apart fits.
fn check<E>(what: &str, data: &[E], rows: usize, cols: usize, ld: usize) {
    let need = if rows == 0 || cols == 0 { 0 } else { (rows - 1) * ld + cols };
    assert!(cols <= ld || rows <= 1, "{what}: row length {cols} exceeds the row distance {ld}");
    assert!(data.len() >= need, "{what}: {} elements for a {rows}x{cols} matrix", data.len());
}

macro_rules! float_mac {
    ($t:ty) => {
        impl Mac for $t {
            fn matmul(m: usize, n: usize, k: usize, dst: &mut [$t], ldd: usize, a: Mat<$t>, b: Mat<$t>, par: bool) {
                check("gemm dst", dst, m, n, ldd);
                check("gemm lhs", a.data, m, k, a.ld);
                check("gemm rhs", b.data, k, n, b.ld);
                if m == 0 || n == 0 {
                    return;
                }
                if k == 0 {
                    for i in 0..m {
                        dst[i * ldd..i * ldd + n].fill(0.0);
                    }
                    return;
                }
                let threads = rayon::current_num_threads();
                let parallelism = if par && threads > 1 { Parallelism::Rayon(threads) } else { Parallelism::None };
                // SAFETY: the three matrices fit their slices (checked above) and dst does not
                // overlap the operands (it is a distinct &mut slice).
                unsafe {
                    gemm(
                        m,
                        n,
                        k,
                        dst.as_mut_ptr(),
                        1,
                        ldd as isize,
                        false,
                        a.data.as_ptr(),
                        1,
                        a.ld as isize,
                        b.data.as_ptr(),
                        1,
                        b.ld as isize,
                        0.0,
                        1.0,
                        false,
                        false,
                        false,
                        parallelism,
                    );
                }
            }
        }
    };
}
float_mac!(f32);
float_mac!(f64);

macro_rules! int_mac {
    ($t:ty) => {
        impl Mac for $t {
            fn matmul(m: usize, n: usize, k: usize, dst: &mut [$t], ldd: usize, a: Mat<$t>, b: Mat<$t>, _par: bool) {
                check("gemm dst", dst, m, n, ldd);
                check("gemm lhs", a.data, m, k, a.ld);
                check("gemm rhs", b.data, k, n, b.ld);
                for i in 0..m {
                    let row = &mut dst[i * ldd..i * ldd + n];
                    row.fill(0);
                    for p in 0..k {
                        let x = a.data[i * a.ld + p];
                        if x == 0 {
                            continue;
                        }
                        let brow = &b.data[p * b.ld..p * b.ld + n];
                        for (d, &y) in row.iter_mut().zip(brow) {
                            *d = d.wrapping_add(x.wrapping_mul(y));
                        }
                    }
                }
            }
        }
    };
}
int_mac!(i64);
int_mac!(u64);
