//! A fused conv2d step (engine/passes/fuse_conv_epilogue.rs) on the GPU: the im2col GEMM applies the
//! bias, activation, clamp and scaled residual to its accumulators when it writes the output
//! itself; otherwise the convolution runs into a scratch product and the epilogue's
//! elementwise group reads it (correct everywhere, fused where the GEMM allows).

use max_kernels_cuda::launch::epilogue::{Act, Epilogue};

use super::super::matmul::act_of;
use super::super::run_fused;
use super::{forward, forward_epi};
use crate::cuda::CudaDevice;
use crate::engine::program::ConvEpilogue;
use crate::{Buffer, Error, Result};

pub(in crate::engine::gpu) fn fused(dev: &CudaDevice, c: &ConvEpilogue, inputs: &[Buffer], out: &Buffer) -> Result<()> {
    let name = c.conv.kind.name();
    let (Some(head), Some(rest)) = (inputs.get(..c.head), inputs.get(c.head..)) else {
        return Err(Error::Value(format!("{name}: expected {} convolution inputs", c.head)));
    };
    let [x, filter, conv_bias @ ..] = head else {
        return Err(Error::Value(format!("{name}: expected x, filter and an optional bias")));
    };
    for (what, t) in [("x", Some(x)), ("filter", Some(filter)), ("bias", conv_bias.first())] {
        if let Some(t) = t
            && t.dtype() != out.dtype()
        {
            return Err(Error::Value(format!("{name}: {what} is {}, expected {}", t.dtype(), out.dtype())));
        }
    }
    let conv_bias = conv_bias.first();
    let f = out.shape().last().copied().unwrap_or(0);
    let bias = c.bias.and_then(|i| inputs.get(i));
    let residual = c.residual.and_then(|i| inputs.get(i));
    // The GEMM reads the bias as F values and the residual like the output (contiguous).
    let gemm_ready = bias.is_none_or(|b| b.num_elements() == f && b.is_contiguous() && b.dtype() == out.dtype())
        && residual.is_none_or(|r| r.shape() == out.shape() && r.is_contiguous() && r.dtype() == out.dtype());
    if gemm_ready {
        let act = c.act.as_ref().map(act_of).transpose()?.unwrap_or(Act::None);
        let mut epi = Epilogue::new(bias.map(|b| b.addr()), act, residual.map(|r| r.addr()));
        if let Some(beta) = c.beta {
            epi = epi.with_beta(beta as f32);
        }
        if let Some((lo, hi)) = c.clamp {
            epi = epi.with_clamp(lo as f32, hi as f32);
        }
        if forward_epi(dev, &c.conv, x, filter, conv_bias, out, &epi)? {
            return Ok(());
        }
    }
    let shape: Vec<i64> = out.shape().iter().map(|&d| d as i64).collect();
    let product = Buffer::empty_on(out.dtype(), &shape, out.stream())?;
    forward(dev, &c.conv, x, filter, conv_bias, &product)?;
    let mut tail_inputs = Vec::with_capacity(rest.len() + 1);
    tail_inputs.push(product);
    tail_inputs.extend(rest.iter().cloned());
    run_fused(dev, &c.tail, &tail_inputs, out)
}
