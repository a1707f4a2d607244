//! Launching the W^T products of kernels/gemm_skinny.cu (`skinny_nt_*`): C [m, n] =
//! epilogue(A [m, k] @ W^T) with W [n, k] row-major, the layout a linear layer's weight is
//! stored in, for the few rows of a decode step. One warp per row of W reads it whole, so
//! nothing is split over K and no workspace is needed. [`plan`] is pure and picks the kernel.

use std::sync::Arc;

use cudarc::driver::{CudaStream, DeviceRepr, LaunchConfig, PushKernelArg};
use max_graph::DType;

use super::epilogue::Epilogue;
use super::gemm_skinny::short_name;
use crate::sources::GEMM_SKINNY;
use crate::{Error, Result, function};

/// Most rows of A the kernels take.
pub const MAX_M: usize = 8;
/// Warps (rows of W) per block: the kernel's NT_WARPS.
const WARPS: usize = 4;

#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct NtArgs {
    a: u64,
    w: u64,
    c: u64,
    m: i64,
    n: i64,
    k: i64,
    epi: Epilogue,
}
// SAFETY: plain-old-data with the layout of the kernel's `NtArgs`.
unsafe impl DeviceRepr for NtArgs {}

/// The kernel and grid for one product.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub kernel: String,
    pub blocks: u32,
    pub threads: u32,
}

/// The plan for C [m, n] = A [m, k] @ W^T, W [n, k], or None when these kernels do not take
/// it (another dtype, more than [`MAX_M`] rows, an empty or too large grid).
pub fn plan(dtype: DType, (m, n, k): (usize, usize, usize), (a, w): (u64, u64)) -> Option<Plan> {
    let name = short_name(dtype)?;
    if m == 0 || m > MAX_M || n == 0 || k == 0 {
        return None;
    }
    let elem = dtype.size_in_bytes();
    let vec = k % (16 / elem) == 0 && (a | w) % 16 == 0;
    let blocks = u32::try_from(n.div_ceil(WARPS)).ok().filter(|&b| b <= i32::MAX as u32)?;
    let mr = m.next_power_of_two();
    let kind = if vec { "vec" } else { "any" };
    Some(Plan { kernel: format!("skinny_nt_{name}_m{mr}_{kind}"), blocks, threads: (WARPS * 32) as u32 })
}

/// Runs C = epilogue(A @ W^T) (see [`plan`]); `Unsupported` when no kernel takes it.
pub fn gemv_nt(
    stream: &Arc<CudaStream>,
    dtype: DType,
    (a, w, c): (u64, u64, u64),
    (m, n, k): (usize, usize, usize),
    epi: &Epilogue,
) -> Result<()> {
    let p = plan(dtype, (m, n, k), (a, w))
        .ok_or_else(|| Error::Unsupported(format!("gemv_nt: no kernel for {dtype} with m={m}, n={n}, k={k}")))?;
    let f = function(stream.context(), &GEMM_SKINNY, &p.kernel)?;
    let args = NtArgs { a, w, c, m: m as i64, n: n as i64, k: k as i64, epi: *epi };
    let cfg = LaunchConfig { grid_dim: (p.blocks, 1, 1), block_dim: (p.threads, 1, 1), shared_mem_bytes: 0 };
    let mut launch = stream.launch_builder(&f);
    launch.arg(&args);
    // SAFETY: the argument struct matches the kernel's; A holds m x k, W n x k and C m x n
    // elements of `dtype` (the caller's contract).
    unsafe { launch.launch(cfg) }.map_err(Error::driver("cuLaunchKernel(gemv_nt)"))?;
    super::record::record("gemv_nt", || (p.kernel.clone(), vec![("blocks", p.blocks as i64)]));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_by_rows_dtype_and_alignment() {
        let p = plan(DType::BFloat16, (1, 2048, 2048), (0, 256)).unwrap();
        assert_eq!((p.kernel.as_str(), p.blocks, p.threads), ("skinny_nt_bf16_m1_vec", 512, 128));
        assert_eq!(plan(DType::BFloat16, (3, 10, 2048), (0, 0)).unwrap().kernel, "skinny_nt_bf16_m4_vec");
        assert_eq!(plan(DType::BFloat16, (5, 10, 2048), (0, 0)).unwrap().blocks, 3);
        // K not a whole number of 16-byte vectors, or a misaligned operand: element loads
        assert_eq!(plan(DType::Float16, (8, 7, 104), (0, 0)).unwrap().kernel, "skinny_nt_f16_m8_vec");
        assert_eq!(plan(DType::Float16, (8, 7, 101), (0, 0)).unwrap().kernel, "skinny_nt_f16_m8_any");
        assert_eq!(plan(DType::Float32, (2, 7, 64), (4, 0)).unwrap().kernel, "skinny_nt_f32_m2_any");
        assert!(plan(DType::BFloat16, (9, 7, 64), (0, 0)).is_none());
        assert!(plan(DType::Int32, (1, 7, 64), (0, 0)).is_none());
        assert!(plan(DType::BFloat16, (1, 0, 64), (0, 0)).is_none());
    }
}
