//! GPTQ products (kernels/quant.cu's gptq_*): 4-bit weights with f16 group scales and an
//! optional permutation of K, decoded in registers for up to 8 lhs rows, through the quant
//! family's dequantize-to-scratch + f32 GEMM path above that.

use std::sync::Arc;

use cudarc::driver::{CudaStream, LaunchConfig, PushKernelArg};
use max_graph::DType;

use super::conv::grid;
use super::quant::{GEMV_MAX_ROWS, large_m, rows_variant};
use crate::sources::QUANT;
use crate::{Error, Result, function};

/// GPTQ: out [m, n] (bf16) = lhs [m, k] (bf16) @ W [k, n], W decoded from `rhs` (see quant.cu),
/// with the (host-checked) int32 permutation `perm` of K when it is not 0.
pub fn gptq(
    stream: &Arc<CudaStream>,
    (lhs, rhs, perm, out): (u64, u64, u64, u64),
    (m, n, k, group): (usize, usize, usize, usize),
) -> Result<()> {
    if m == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        return super::fill(stream, out, (m * n) as u64, 2, 0);
    }
    if k > i32::MAX as usize {
        return Err(Error::Unsupported(format!("GPTQ with K = {k} (the kernels index K with 32-bit ints)")));
    }
    let (ni, ki, gi) = (n as i64, k as i64, group as i64);
    if m <= GEMV_MAX_ROWS {
        let f = function(stream.context(), &QUANT, &format!("gptq_gemv_m{}", rows_variant(m)))?;
        let cfg = LaunchConfig { grid_dim: (n.div_ceil(32) as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
        let mi = m as i64;
        let mut l = stream.launch_builder(&f);
        l.arg(&lhs).arg(&rhs).arg(&perm).arg(&out).arg(&mi).arg(&ni).arg(&ki).arg(&gi);
        // SAFETY: lhs holds m x k bf16, rhs the packed [k/2 + 2k/group, n] bytes, perm k int32
        // (or is null), out m x n bf16.
        unsafe { l.launch(cfg) }.map_err(Error::driver("cuLaunchKernel(gptq_gemv)"))?;
        return Ok(());
    }
    let deq = function(stream.context(), &QUANT, "gptq_dequant_t_f32")?;
    large_m(stream, DType::BFloat16, (lhs, out), 0, (m, n, k), |n0, nc, wt| {
        let (n0i, nci) = (n0 as i64, nc as i64);
        let mut l = stream.launch_builder(&deq);
        l.arg(&rhs).arg(&perm).arg(&wt).arg(&ni).arg(&ki).arg(&gi).arg(&n0i).arg(&nci);
        // SAFETY: wt holds k x nc f32; columns n0 .. n0 + nc of the weights exist.
        unsafe { l.launch(grid((k * nc) as u64)) }.map_err(Error::driver("cuLaunchKernel(gptq_dequant_t)"))?;
        Ok(())
    })
}
