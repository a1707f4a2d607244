//! GPU kernels of the random family (random_uniform, random_normal) through
//! max_kernels_cuda::launch::random. Operands are checked as the host kernel checks them
//! (cpu::random defines the values; the kernel gives the same uniform bits and normal values
//! within a few ulps). The seed stays on the device: the kernel reads it there.

use max_graph::ops::Op;
use max_kernels_cuda::launch::random::{Problem, launch};

use crate::cpu::random::{Call, check};
use crate::cuda::CudaDevice;
use crate::{Buffer, Error, Result};

pub(crate) fn run(dev: &CudaDevice, op: &Op, inputs: &[Buffer], outputs: &[Buffer]) -> Result<()> {
    let Call { params, recipe } = check(op, inputs, outputs)?;
    let (seed, out) = (&inputs[0], &outputs[0]);
    let seed = if seed.is_contiguous() { seed.clone() } else { seed.contiguous()? };
    let problem = Problem { recipe, dtype: params.dtype, n: out.num_elements() };
    dev.bind()?;
    launch(&dev.stream, &problem, out.addr(), seed.addr(), params.stream).map_err(|e| match e {
        max_kernels_cuda::Error::Unsupported(m) => Error::Value(format!("{}: {m}", op.kind.name())),
        other => other.into(),
    })
}
