//! The run-time checks of irfft's tensors, shared by the host and CUDA kernels: the geometry of
//! the call (crates/graph's `IrfftShape`) over the input's shape, and a result of the input's
//! dtype and the planned shape.

use max_graph::DType;
use max_graph::ops::Op;
use max_graph::ops::fft::{IrfftParams, IrfftShape};

use crate::{Buffer, Error, Result};

/// The float dtypes irfft takes (and returns).
fn fft_dtype(d: DType) -> bool {
    matches!(d, DType::Float16 | DType::BFloat16 | DType::Float32 | DType::Float64)
}

/// irfft of `x` into `out`: its geometry, once the dtypes and the result's shape are checked.
pub(crate) fn irfft_shape(op: &Op, x: &Buffer, out: &Buffer) -> Result<IrfftShape> {
    let name = op.kind.name();
    let err = |m: String| Error::Value(format!("{name}: {m}"));
    let p = IrfftParams::from_attrs(&op.attrs).map_err(err)?;
    let g = IrfftShape::of(&p, x.shape()).map_err(err)?;
    if !fft_dtype(x.dtype()) {
        return Err(err(format!("input_tensor: must be float32, float64, float16 or bfloat16, got {}", x.dtype())));
    }
    let signal = &x.shape()[..x.rank() - usize::from(g.complex)];
    let mut want = signal.to_vec();
    if let Some(axis) = p.axis_of(signal.len()) {
        want[axis] = g.n;
    }
    if out.dtype() != x.dtype() || out.shape() != want.as_slice() {
        return Err(err(format!("the result is {} {:?}, expected {} {want:?}", out.dtype(), out.shape(), x.dtype())));
    }
    Ok(g)
}
