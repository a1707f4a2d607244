//! GPU kernel of the FFT family (irfft) through max_kernels_cuda::launch::fft. The geometry and
//! its checks are the CPU kernel's (crates/runtime/src/cpu/fft defines the behaviour); the
//! launcher's `select` picks the kernel, and the scratch it asks for is allocated here on the
//! output's stream.

use max_graph::DType;
use max_graph::ops::Op;
use max_kernels_cuda::launch::fft as k;

use crate::cuda::CudaDevice;
use crate::operands::irfft_shape;
use crate::{Buffer, Error, Result};

pub(crate) fn run(dev: &CudaDevice, op: &Op, inputs: &[Buffer], outputs: &[Buffer]) -> Result<()> {
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
    dev.bind()?;
    let facts = k::device_facts(&dev.stream).map_err(Error::from)?;
    let cfg = k::select(&g, x.dtype(), &facts).map_err(Error::from)?;
    let scratch = match cfg.scratch_bytes {
        0 => None,
        bytes => Some(Buffer::empty_on(DType::UInt8, &[bytes as i64], out.stream())?),
    };
    let ptrs = (x.addr(), out.addr(), scratch.as_ref().map_or(0, |b| b.addr()));
    k::irfft(&dev.stream, x.dtype(), ptrs, &g, &cfg).map_err(Error::from)
}
