//! Typed launch wrappers: the only place that knows each kernel's name and argument list.
//! Pointers are raw device addresses (`CUdeviceptr`); the caller owns the memory and keeps it
//! alive until the stream has run the launch.

use std::sync::Arc;

use cudarc::driver::{CudaStream, DeviceRepr, LaunchConfig, PushKernelArg};
use max_graph::DType;

use crate::sources::{CAST, COPY_STRIDED, FILL};
use crate::{Error, Result, function};

const BLOCK: u32 = 256;
/// Grid-stride loops cover the rest; this many blocks fill any current GPU.
const MAX_BLOCKS: u64 = 1 << 16;

fn grid_for(n: u64) -> LaunchConfig {
    let blocks = n.div_ceil(BLOCK as u64).clamp(1, MAX_BLOCKS) as u32;
    LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (BLOCK, 1, 1), shared_mem_bytes: 0 }
}

fn width_suffix(elem_bytes: usize) -> Result<&'static str> {
    Ok(match elem_bytes {
        1 => "b8",
        2 => "b16",
        4 => "b32",
        8 => "b64",
        other => {
            return Err(Error::Unsupported(format!("no kernel for {other}-byte elements")));
        }
    })
}

/// The short dtype name used in kernel names (`cast_f32_bf16`), for the dtypes cast supports.
pub fn cast_name(dtype: DType) -> Option<&'static str> {
    Some(match dtype {
        DType::Bool => "bool",
        DType::Int8 => "i8",
        DType::Int16 => "i16",
        DType::Int32 => "i32",
        DType::Int64 => "i64",
        DType::UInt8 => "u8",
        DType::UInt16 => "u16",
        DType::UInt32 => "u32",
        DType::UInt64 => "u64",
        DType::Float16 => "f16",
        DType::BFloat16 => "bf16",
        DType::Float32 => "f32",
        DType::Float64 => "f64",
        DType::Float8E4m3fn => "f8e4m3fn",
        DType::Float8E5m2 => "f8e5m2",
        _ => return None,
    })
}

/// Writes `pattern` (truncated to `elem_bytes`) into `n` contiguous elements at `dst`.
pub fn fill(stream: &Arc<CudaStream>, dst: u64, n: u64, elem_bytes: usize, pattern: u64) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    let name = format!("fill_{}", width_suffix(elem_bytes)?);
    let f = function(stream.context(), &FILL, &name)?;
    let mut launch = stream.launch_builder(&f);
    launch.arg(&dst).arg(&n).arg(&pattern);
    // SAFETY: fill_* takes (T*, u64, u64); dst holds n elements of elem_bytes (caller's contract).
    unsafe { launch.launch(grid_for(n)) }.map_err(Error::driver("cuLaunchKernel(fill)"))?;
    Ok(())
}

/// Converts `n` contiguous elements from `src` (dtype `from`) into `dst` (dtype `to`).
pub fn cast(stream: &Arc<CudaStream>, src: u64, from: DType, dst: u64, to: DType, n: u64) -> Result<()> {
    let (Some(a), Some(b)) = (cast_name(from), cast_name(to)) else {
        return Err(Error::Unsupported(format!("cast from {from} to {to} is not supported on the GPU")));
    };
    if n == 0 {
        return Ok(());
    }
    let f = function(stream.context(), &CAST, &format!("cast_{a}_{b}"))?;
    let mut launch = stream.launch_builder(&f);
    launch.arg(&src).arg(&dst).arg(&n);
    // SAFETY: cast_* takes (const S*, D*, u64); both hold n elements (caller's contract).
    unsafe { launch.launch(grid_for(n)) }.map_err(Error::driver("cuLaunchKernel(cast)"))?;
    Ok(())
}

/// Most dimensions a strided view may have after merging; matches MAX_RANK in copy_strided.cu.
pub const MAX_STRIDED_RANK: usize = 8;

#[repr(C)]
#[derive(Clone, Copy)]
struct StridedView {
    shape: [i64; MAX_STRIDED_RANK],
    strides: [i64; MAX_STRIDED_RANK],
    rank: i32,
}

// SAFETY: plain-old-data with the same layout as the kernel's `StridedView`.
unsafe impl DeviceRepr for StridedView {}

/// Gathers the view (`shape`, `strides` in elements, relative to `src`) into contiguous `dst`.
/// The caller merges contiguous dimensions first; more than MAX_STRIDED_RANK is an error.
pub fn copy_strided(
    stream: &Arc<CudaStream>,
    src: u64,
    dst: u64,
    elem_bytes: usize,
    shape: &[usize],
    strides: &[isize],
) -> Result<()> {
    if shape.len() > MAX_STRIDED_RANK || shape.len() != strides.len() {
        return Err(Error::Unsupported(format!(
            "strided copy supports at most {MAX_STRIDED_RANK} non-mergeable dimensions, got {}",
            shape.len()
        )));
    }
    let n: u64 = shape.iter().map(|d| *d as u64).product();
    if n == 0 {
        return Ok(());
    }
    let mut view =
        StridedView { shape: [1; MAX_STRIDED_RANK], strides: [0; MAX_STRIDED_RANK], rank: shape.len() as i32 };
    for (i, (d, s)) in shape.iter().zip(strides).enumerate() {
        view.shape[i] = *d as i64;
        view.strides[i] = *s as i64;
    }
    let name = format!("copy_strided_{}", width_suffix(elem_bytes)?);
    let f = function(stream.context(), &COPY_STRIDED, &name)?;
    let mut launch = stream.launch_builder(&f);
    launch.arg(&src).arg(&dst).arg(&n).arg(&view);
    // SAFETY: copy_strided_* takes (const T*, T*, u64, StridedView); every address the view
    // reaches lies inside the source allocation (the caller's Buffer checked its view).
    unsafe { launch.launch(grid_for(n)) }.map_err(Error::driver("cuLaunchKernel(copy_strided)"))?;
    Ok(())
}
