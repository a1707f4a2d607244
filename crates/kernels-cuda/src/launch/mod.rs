//! Typed launch wrappers: the only place that knows each kernel's name and argument list.
//! The buffer kernels (fill, cast, strided copy) and matmul are here; each further kernel
//! family has its own submodule.
//! Pointers are raw device addresses (`CUdeviceptr`); the caller owns the memory and keeps it
//! alive until the stream has run the launch.

pub mod allreduce_p2p;
pub mod attention;
pub mod attention_decode;
pub mod attention_prefill;
pub mod conv;
pub mod conv_sm90;
pub mod copy_many;
pub mod epilogue;
pub mod fft;
pub mod gemm_skinny;
pub mod gemm_sm90;
pub mod gemm_sm90p;
pub mod gemv_mma;
pub mod gemv_nt;
pub mod gptq;
pub mod qgemm_sm90;
pub mod qmatmul_sm90;
pub mod quant;
pub mod random;
pub mod record;
pub mod reduction;
pub mod sampling;
pub mod scratch;
pub mod tickets;
mod tma;

use std::sync::Arc;

use cudarc::driver::sys::CUdevice_attribute;
use cudarc::driver::{CudaStream, DeviceRepr, LaunchConfig, PushKernelArg};
use max_graph::DType;

use crate::sources::{CAST, COPY_STRIDED, FILL, MATMUL};

pub mod indexing;
pub mod layout;
pub mod pdl;
use crate::{Error, Result, function};
use pdl::Pdl;

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

#[repr(C)]
#[derive(Clone, Copy)]
struct MatmulArgs {
    a: u64,
    b: u64,
    c: u64,
    m: i64,
    n: i64,
    k: i64,
    stride_a: i64,
    stride_b: i64,
    stride_c: i64,
    epi: epilogue::Epilogue,
}

// SAFETY: plain-old-data with the layout of the kernel's `MatmulArgs`.
unsafe impl DeviceRepr for MatmulArgs {}

/// Shared memory of the tensor-core kernel: 3 stages of a 128x40 A tile and a 32x136 B tile.
const MMA_SMEM: u32 = 3 * (128 * 40 + 32 * 136) * 2;

/// `batch` products C = A @ B of row-major matrices (A [m, k], B [k, n], C [m, n]) that follow
/// each other at the given element strides (0 repeats an operand for every batch). Tensor
/// cores for bf16/f16 when the shapes allow 16-byte loads, a SIMT kernel otherwise.
#[allow(clippy::too_many_arguments)]
pub fn matmul(
    stream: &Arc<CudaStream>,
    dtype: DType,
    (a, b, c): (u64, u64, u64),
    (m, n, k): (usize, usize, usize),
    batch: usize,
    (stride_a, stride_b, stride_c): (usize, usize, usize),
    epi: &epilogue::Epilogue,
) -> Result<()> {
    if m == 0 || n == 0 || batch == 0 {
        return Ok(());
    }
    if dtype == DType::Float64 && !epi.is_identity() {
        return Err(Error::Unsupported("matmul: a fused epilogue needs a 16- or 32-bit float output".into()));
    }
    let aligned = k % 8 == 0 && n % 8 == 0 && (a | b) % 16 == 0;
    let (name, tile, threads, smem) = match dtype {
        DType::BFloat16 if aligned => ("matmul_mma_bf16", 128, 256, MMA_SMEM),
        DType::Float16 if aligned => ("matmul_mma_f16", 128, 256, MMA_SMEM),
        DType::BFloat16 => ("matmul_simt_bf16", 16, 256, 0),
        DType::Float16 => ("matmul_simt_f16", 16, 256, 0),
        DType::Float32 => ("matmul_simt_f32", 16, 256, 0),
        DType::Float64 => ("matmul_simt_f64", 16, 256, 0),
        other => return Err(Error::Unsupported(format!("matmul of {other} is not supported on the GPU"))),
    };
    let f = function(stream.context(), &MATMUL, name)?;
    crate::allow_smem(stream.context(), &f, smem)?;
    let args = MatmulArgs {
        a,
        b,
        c,
        m: m as i64,
        n: n as i64,
        k: k as i64,
        stride_a: stride_a as i64,
        stride_b: stride_b as i64,
        stride_c: stride_c as i64,
        epi: *epi,
    };
    let grid = (n.div_ceil(tile) as u32, m.div_ceil(tile) as u32, batch as u32);
    let cfg = LaunchConfig { grid_dim: grid, block_dim: (threads, 1, 1), shared_mem_bytes: smem };
    let mut launch = stream.launch_builder(&f);
    launch.arg(&args);
    // SAFETY: the argument struct matches the kernel's; the caller guarantees the matrices lie
    // inside their buffers for every batch.
    unsafe { launch.launch(cfg) }.map_err(Error::driver("cuLaunchKernel(matmul)"))?;
    Ok(())
}

/// The stream's device's SM count (at least 1).
pub(crate) fn sm_count(stream: &Arc<CudaStream>) -> Result<usize> {
    Ok(device_attribute(stream, CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?.max(1) as usize)
}

/// Blocks of `threads` threads and `smem` bytes of dynamic shared memory of this kernel that
/// fit on the stream's device at once (per SM times SMs), cached per device, kernel and shape.
pub(crate) fn resident_blocks(
    stream: &Arc<CudaStream>,
    f: &cudarc::driver::CudaFunction,
    name: &str,
    threads: u32,
    smem: u32,
) -> Result<usize> {
    use std::collections::HashMap;
    use std::sync::Mutex;
    type Cache = Mutex<Option<HashMap<(usize, String, u32, u32), usize>>>;
    static CACHE: Cache = Mutex::new(None);
    let key = (stream.context().ordinal(), name.to_string(), threads, smem);
    if let Some(&v) = CACHE.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert_with(HashMap::new).get(&key) {
        return Ok(v);
    }
    let per_sm = f
        .occupancy_max_active_blocks_per_multiprocessor(threads, smem as usize, None)
        .map_err(Error::driver("cuOccupancyMaxActiveBlocksPerMultiprocessor"))?
        .max(1) as usize;
    let v = per_sm * sm_count(stream)?;
    CACHE.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert_with(HashMap::new).insert(key, v);
    Ok(v)
}

/// Clusters of `cluster` consecutive blocks (`threads` threads and `smem` bytes of dynamic
/// shared memory each) of this kernel the driver says the stream's device holds at once, asked
/// for a grid of `grid` blocks; None where it cannot say. Callers decide what to trust.
pub(crate) fn active_clusters(
    stream: &Arc<CudaStream>,
    f: &cudarc::driver::CudaFunction,
    cluster: usize,
    grid: usize,
    (threads, smem): (u32, u32),
) -> Option<usize> {
    use cudarc::driver::sys;
    // SAFETY: an all-zero launch attribute is valid plain data; the fields are set below.
    let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
    attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attr.value.clusterDim.x = cluster as u32;
    attr.value.clusterDim.y = 1;
    attr.value.clusterDim.z = 1;
    let cfg = sys::CUlaunchConfig {
        gridDimX: grid as u32,
        gridDimY: 1,
        gridDimZ: 1,
        blockDimX: threads,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: smem,
        hStream: stream.cu_stream(),
        attrs: &mut attr as *mut _,
        numAttrs: 1,
    };
    let mut count: std::ffi::c_int = 0;
    // SAFETY: `cfg` and the attribute it points at outlive the call; the function is loaded.
    let r = unsafe { sys::cuOccupancyMaxActiveClusters(&mut count, f.cu_function(), &cfg) };
    r.result().ok().map(|()| count.max(0) as usize)
}

/// The stream's device's L2 cache size in bytes.
pub(crate) fn l2_bytes(stream: &Arc<CudaStream>) -> Result<usize> {
    Ok(device_attribute(stream, CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)?.max(0) as usize)
}

fn device_attribute(stream: &Arc<CudaStream>, attr: CUdevice_attribute) -> Result<i32> {
    stream.context().attribute(attr).map_err(Error::driver("cuDeviceGetAttribute"))
}

/// Launches `f` on a 1-D grid of `grid` blocks of `block` threads with `smem` bytes of dynamic
/// shared memory, through cuLaunchKernelEx; with `pdl` on, under programmatic stream
/// serialization: the grid may start while the stream's previous kernel drains, so the kernel
/// must wait (griddepcontrol.wait) before touching global memory that kernel may use. Only
/// [`Pdl::of`] makes an on `Pdl`, for the kernels [`pdl::DECLARED`] lists.
///
/// # Safety
/// `params` points at the kernel's arguments in order, each matching the kernel's parameter
/// type by value and live across the call (the driver copies them), and the memory they
/// describe holds what the kernel reads and writes.
pub(crate) unsafe fn launch_ex(
    stream: &Arc<CudaStream>,
    f: &cudarc::driver::CudaFunction,
    dims: (u32, u32, u32),
    params: &mut [*mut std::ffi::c_void],
    pdl: Pdl,
    what: &'static str,
) -> Result<()> {
    // SAFETY: the caller's contract, passed on.
    unsafe { launch_ex_cluster(stream, f, dims, params, pdl, 1, what) }
}

/// [`launch_ex`] in clusters of `cluster` consecutive blocks (1: none); `grid` a multiple of it.
///
/// # Safety
/// As [`launch_ex`].
pub(crate) unsafe fn launch_ex_cluster(
    stream: &Arc<CudaStream>,
    f: &cudarc::driver::CudaFunction,
    (grid, block, smem): (u32, u32, u32),
    params: &mut [*mut std::ffi::c_void],
    pdl: Pdl,
    cluster: u32,
    what: &'static str,
) -> Result<()> {
    // SAFETY: the caller's contract, passed on.
    unsafe { launch_ex_carveout(stream, f, (grid, block, smem), params, (pdl, cluster), None, what) }
}

/// [`launch_ex_cluster`] with this launch's own preferred shared-memory carveout (percent of
/// the most an SM gives, cuLaunchKernelEx's PREFERRED_SHARED_MEMORY_CARVEOUT) over the
/// function's (`launch.smem_carveout`, modules.rs) where `carveout` is given.
///
/// # Safety
/// As [`launch_ex`].
pub(crate) unsafe fn launch_ex_carveout(
    stream: &Arc<CudaStream>,
    f: &cudarc::driver::CudaFunction,
    (grid, block, smem): (u32, u32, u32),
    params: &mut [*mut std::ffi::c_void],
    (pdl, cluster): (Pdl, u32),
    carveout: Option<u32>,
    what: &'static str,
) -> Result<()> {
    use cudarc::driver::sys;
    // SAFETY: an all-zero launch attribute is valid plain data; the fields are set below.
    let mut attrs: [sys::CUlaunchAttribute; 3] = unsafe { std::mem::zeroed() };
    let mut n = 0;
    if pdl.on() {
        attrs[n].id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attrs[n].value.programmaticStreamSerializationAllowed = 1;
        n += 1;
    }
    if cluster > 1 {
        attrs[n].id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        attrs[n].value.clusterDim.x = cluster;
        attrs[n].value.clusterDim.y = 1;
        attrs[n].value.clusterDim.z = 1;
        n += 1;
    }
    if let Some(c) = carveout {
        attrs[n].id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT;
        attrs[n].value.sharedMemCarveout = c.min(100);
        n += 1;
    }
    let cfg = sys::CUlaunchConfig {
        gridDimX: grid,
        gridDimY: 1,
        gridDimZ: 1,
        blockDimX: block,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: smem,
        hStream: stream.cu_stream(),
        attrs: if n > 0 { attrs.as_mut_ptr() } else { std::ptr::null_mut() },
        numAttrs: n as u32,
    };
    stream.context().bind_to_thread().map_err(Error::driver("cuCtxSetCurrent"))?;
    // SAFETY: the caller's contract (the parameters and the memory behind them); cfg and attr
    // live across the call.
    unsafe { sys::cuLaunchKernelEx(&cfg, f.cu_function(), params.as_mut_ptr(), std::ptr::null_mut()) }
        .result()
        .map_err(Error::driver(what))
}
