//! softmax, logsoftmax, layer_norm and rms_norm (norm.cu).

use std::sync::Arc;

use cudarc::driver::{CudaStream, DeviceRepr};
use max_graph::DType;

use super::{Lines, blocks, cfg, go, norm_kernel, short};
use crate::sources::NORM;
use crate::{Error, Result, function};

#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct NormArgs {
    x: u64,
    out: u64,
    gamma: u64,
    beta: u64,
    outer: i64,
    n: i64,
    inner: i64,
    eps: f64,
    log: i32,
    tile: i32,
    offset: f64,
    mbc: i32,
    pad: i32,
}
// SAFETY: plain-old-data with the layout of the kernel's `NormArgs`.
unsafe impl DeviceRepr for NormArgs {}

/// The dtype softmax and layer_norm of `dtype` compute in, the only dtypes their kernels take:
/// the 16-, 32- and 64-bit floats themselves, f32 for the float8 types, f64 for integers and
/// bool (as the CPU kernels compute). Callers cast other inputs to it and the result back.
pub fn norm_dtype(dtype: DType) -> DType {
    match dtype {
        DType::Float16 | DType::BFloat16 | DType::Float32 | DType::Float64 => dtype,
        DType::Float8E4m3fn | DType::Float8E5m2 => DType::Float32,
        _ => DType::Float64,
    }
}

fn norm_short(dtype: DType) -> Result<&'static str> {
    if norm_dtype(dtype) != dtype {
        return Err(Error::Unsupported(format!(
            "softmax/layer_norm kernels take no {dtype}: cast to {} first",
            norm_dtype(dtype)
        )));
    }
    short(dtype)
}

/// The row kernel for a row op ("softmax", "layer_norm", "rms_norm") on rows of `n` elements,
/// with its block size and rows per block: a warp per row up to 1024 elements, a block beyond;
/// the register-cached variant when the rows are whole 16-byte vectors at 16-byte aligned
/// addresses and fit (see norm.cu), in a 256-thread block up to 16 KiB a row. (An H200 took
/// 39 us for the rms_norm of 2,048 x 4,096 bf16 in 1024-thread blocks, half of whose threads
/// held nothing.)
pub(super) fn row_kernel(op: &str, dtype: DType, n: usize, ptrs: &[u64]) -> Result<(String, u32, usize)> {
    let dt = norm_short(dtype)?;
    if n <= 1024 {
        let cached = fits(n * dtype.size_in_bytes(), 32 * 8 * 16, ptrs);
        return Ok((norm_kernel(op, if cached { "cached" } else { "rows" }, "warp", dt), 256, 8));
    }
    let bytes = n * dtype.size_in_bytes();
    Ok(if fits(bytes, 256 * 4 * 16, ptrs) {
        (norm_kernel(op, "cached", "mid", dt), 256, 1)
    } else if fits(bytes, 1024 * 4 * 16, ptrs) {
        (norm_kernel(op, "cached", "block", dt), 1024, 1)
    } else {
        (norm_kernel(op, "rows", "block", dt), 1024, 1)
    })
}

/// Whether rows of `bytes` are whole 16-byte vectors at 16-byte aligned addresses, at most
/// `most` bytes (what a cached kernel's threads hold).
fn fits(bytes: usize, most: usize, ptrs: &[u64]) -> bool {
    bytes.is_multiple_of(16) && bytes <= most && ptrs.iter().all(|p| p % 16 == 0)
}

/// softmax (or logsoftmax) of `x` along the axis into `out`, both [outer, n, inner] of `dtype`
/// (one that is its own [`norm_dtype`]).
pub fn softmax(stream: &Arc<CudaStream>, log: bool, dtype: DType, x: u64, out: u64, lines: Lines) -> Result<()> {
    if lines.count() == 0 || lines.n == 0 {
        return Ok(());
    }
    let args = NormArgs {
        x,
        out,
        gamma: 0,
        beta: 0,
        outer: lines.outer as i64,
        n: lines.n as i64,
        inner: lines.inner as i64,
        eps: 0.0,
        log: log as i32,
        tile: lines.inner.next_power_of_two().min(32) as i32,
        offset: 0.0,
        mbc: 0,
        pad: 0,
    };
    if lines.inner > 1 {
        let f = function(stream.context(), &NORM, &norm_kernel("softmax", "cols", "", norm_short(dtype)?))?;
        let tiles = lines.inner.div_ceil(args.tile as usize);
        return go(stream, &f, &args, cfg(blocks(lines.outer * tiles), 256, 0));
    }
    let (name, block, rows_per_block) = row_kernel("softmax", dtype, lines.n, &[x, out])?;
    let f = function(stream.context(), &NORM, &name)?;
    go(stream, &f, &args, cfg(blocks(lines.outer.div_ceil(rows_per_block)), block, 0))
}

/// layer_norm over the last dim: `x` and `out` are [rows, d], `gamma` and `beta` [d], all of
/// `dtype` (one that is its own [`norm_dtype`]).
#[allow(clippy::too_many_arguments)]
pub fn layer_norm(
    stream: &Arc<CudaStream>,
    dtype: DType,
    (x, gamma, beta, out): (u64, u64, u64, u64),
    rows: usize,
    d: usize,
    eps: f64,
) -> Result<()> {
    if rows == 0 || d == 0 {
        return Ok(());
    }
    let args = NormArgs {
        x,
        out,
        gamma,
        beta,
        outer: rows as i64,
        n: d as i64,
        inner: 1,
        eps,
        log: 0,
        tile: 0,
        offset: 0.0,
        mbc: 0,
        pad: 0,
    };
    let (name, block, rows_per_block) = row_kernel("layer_norm", dtype, d, &[x, out, gamma, beta])?;
    let f = function(stream.context(), &NORM, &name)?;
    go(stream, &f, &args, cfg(blocks(rows.div_ceil(rows_per_block)), block, 0))
}

/// rms_norm over the last dim: `x` and `out` are [rows, d], `weight` [d], all of `dtype` (one
/// that is its own [`norm_dtype`]); see norm.cu for `weight_offset` and `multiply_before_cast`.
#[allow(clippy::too_many_arguments)]
pub fn rms_norm(
    stream: &Arc<CudaStream>,
    dtype: DType,
    (x, weight, out): (u64, u64, u64),
    rows: usize,
    d: usize,
    eps: f64,
    weight_offset: f64,
    multiply_before_cast: bool,
) -> Result<()> {
    if rows == 0 || d == 0 {
        return Ok(());
    }
    let args = NormArgs {
        x,
        out,
        gamma: weight,
        beta: 0,
        outer: rows as i64,
        n: d as i64,
        inner: 1,
        eps,
        log: 0,
        tile: 0,
        offset: weight_offset,
        mbc: multiply_before_cast as i32,
        pad: 0,
    };
    let (name, block, rows_per_block) = row_kernel("rms_norm", dtype, d, &[x, weight, out])?;
    let f = function(stream.context(), &NORM, &name)?;
    let config = cfg(blocks(rows.div_ceil(rows_per_block)), block, 0);
    // SAFETY: NormArgs is the kernel's argument struct; x and out hold rows x d and weight d
    // elements of dtype (the caller's contract); the rms_norm kernels wait before reading x.
    unsafe {
        crate::launch::pdl::launch_pdl(stream, (&NORM, &name, &f), config, &args, None, "cuLaunchKernelEx(rms_norm)")
    }?;
    Ok(())
}
