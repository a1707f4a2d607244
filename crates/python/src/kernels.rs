//! Private hooks into the kernel compiler, for tests and CI: compile every family for an
//! architecture without a GPU, read the compiled-kernel cache's counters, count launches of the
//! Hopper conv2d kernel.

use max_kernels_cuda::{Target, cache_dir, cache_stats, compile, nvrtc_version, sources, warm_cache};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

fn kernel_err(e: max_kernels_cuda::Error) -> PyErr {
    PyRuntimeError::new_err(e.to_string())
}

/// {family: image} for the kernel families named in `families` (default: every one), compiled
/// now (no cache) for `arch`.
#[pyfunction]
#[pyo3(signature = (arch = "sm_90a", target = "cubin", families = None))]
fn _compile_kernels<'py>(
    py: Python<'py>,
    arch: &str,
    target: &str,
    families: Option<Vec<String>>,
) -> PyResult<Bound<'py, PyDict>> {
    let target = match target {
        "cubin" => Target::Cubin,
        "ptx" => Target::Ptx,
        other => {
            return Err(PyValueError::new_err(format!("target must be 'cubin' or 'ptx', got {other:?}")));
        }
    };
    let selected = sources::select(families.as_deref()).map_err(|e| PyValueError::new_err(e.to_string()))?;
    let arch = arch.to_string();
    let images = py.detach(move || {
        selected.into_iter().map(|f| compile(f, &arch, target).map(|img| (f.name, img))).collect::<Result<Vec<_>, _>>()
    });
    let out = PyDict::new(py);
    for (name, img) in images.map_err(kernel_err)? {
        out.set_item(name, PyBytes::new(py, &img))?;
    }
    Ok(out)
}

/// {"memory_hits", "disk_hits", "compiles"} for this process.
#[pyfunction]
fn _kernel_cache_stats(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let s = cache_stats();
    let d = PyDict::new(py);
    d.set_item("memory_hits", s.memory_hits)?;
    d.set_item("disk_hits", s.disk_hits)?;
    d.set_item("compiles", s.compiles)?;
    Ok(d)
}

#[pyfunction]
fn _kernel_cache_dir() -> Option<String> {
    cache_dir().map(|p| p.display().to_string())
}

/// Compiles the kernel families named in `families` (default: every one) for `arch` through the
/// cache (memory, then disk, then NVRTC).
#[pyfunction]
#[pyo3(signature = (arch = "sm_90a", families = None))]
fn _warm_kernel_cache(py: Python<'_>, arch: &str, families: Option<Vec<String>>) -> PyResult<()> {
    let arch = arch.to_string();
    py.detach(move || warm_cache(&arch, families.as_deref())).map_err(kernel_err)
}

/// The names of every kernel family, in compile order.
#[pyfunction]
fn _kernel_families() -> Vec<&'static str> {
    sources::ALL.iter().map(|f| f.name).collect()
}

/// How many times this process has launched the Hopper implicit-GEMM conv2d
/// (max_kernels_cuda::launch::conv_sm90): lets tests check that a shape took that path.
#[pyfunction]
fn _conv_sm90_launches() -> u64 {
    max_kernels_cuda::launch::conv_sm90::launches()
}

/// Of those launches, (padded, split-K): how many ran on channel-padded copies of the input
/// and how many split the reduction (launch::conv_sm90::{padded_launches, split_launches}).
#[pyfunction]
fn _conv_sm90_path_counts() -> (u64, u64) {
    use max_kernels_cuda::launch::conv_sm90 as c;
    (c::padded_launches(), c::split_launches())
}

/// Of those launches, how many had the consumer warpgroups take alternate tiles (ping-pong).
#[pyfunction]
fn _conv_sm90_pingpong_launches() -> u64 {
    max_kernels_cuda::launch::conv_sm90::pingpong_launches()
}

/// Of those launches, how many had tiles of 256 rows.
#[pyfunction]
fn _conv_sm90_wide_launches() -> u64 {
    max_kernels_cuda::launch::conv_sm90::wide_launches()
}

/// Of those launches, how many had tiles of 192 rows (three consumer warpgroups).
#[pyfunction]
fn _conv_sm90_short_launches() -> u64 {
    max_kernels_cuda::launch::conv_sm90::short_launches()
}

#[pyfunction]
fn _conv_sm90_trio_launches() -> u64 {
    max_kernels_cuda::launch::conv_sm90::trio_launches()
}

/// Of those launches, how many loaded the fused residual into the ring by TMA.
#[pyfunction]
fn _conv_sm90_res_ring_launches() -> u64 {
    max_kernels_cuda::launch::conv_sm90::res_ring_launches()
}

/// Of those launches, how many took an entry compiled with the lean epilogue only.
#[pyfunction]
fn _conv_sm90_lean_launches() -> u64 {
    max_kernels_cuda::launch::conv_sm90::lean_launches()
}

/// Of those launches, how many wrote their results over the residual's slots and stored them
/// from there.
#[pyfunction]
fn _conv_sm90_tma_out_launches() -> u64 {
    max_kernels_cuda::launch::conv_sm90::tma_out_launches()
}

/// Of those, how many added the residual on pairs of the element type to relu's rounded output.
#[pyfunction]
fn _conv_sm90_packed_launches() -> u64 {
    max_kernels_cuda::launch::conv_sm90::packed_launches()
}

/// Of those, how many stored the results from the slots as 16-byte vectors (the rest by TMA).
#[pyfunction]
fn _conv_sm90_vector_out_launches() -> u64 {
    max_kernels_cuda::launch::conv_sm90::vector_out_launches()
}

/// Of those launches, how many loaded the residual into a shared-memory buffer of its own.
#[pyfunction]
fn _conv_sm90_res_buf_launches() -> u64 {
    max_kernels_cuda::launch::conv_sm90::res_buf_launches()
}

/// Of those launches, how many ran as clusters of two CTAs sharing the A tile.
#[pyfunction]
fn _conv_sm90_cluster_launches() -> u64 {
    max_kernels_cuda::launch::conv_sm90::cluster_launches()
}

/// Of `_conv_sm90_launches()`, the 1x1 convs that ran as a GEMM on the Hopper GEMM kernel.
#[pyfunction]
fn _conv_sm90_gemm_launches() -> u64 {
    max_kernels_cuda::launch::conv_sm90::gemm_launches()
}

/// How many times this process has launched the integer tensor-core decode GEMV
/// (max_kernels_cuda::launch::quant, kernels/qgemv_mma.cu).
#[pyfunction]
fn _qgemv_mma_launches() -> u64 {
    max_kernels_cuda::launch::quant::mma_gemv_launches()
}

/// NVRTC's (major, minor); RuntimeError saying where it looked when it cannot be loaded.
#[pyfunction]
fn _nvrtc_version() -> PyResult<(i32, i32)> {
    nvrtc_version().map_err(kernel_err)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_compile_kernels, m)?)?;
    m.add_function(wrap_pyfunction!(_kernel_cache_stats, m)?)?;
    m.add_function(wrap_pyfunction!(_kernel_cache_dir, m)?)?;
    m.add_function(wrap_pyfunction!(_nvrtc_version, m)?)?;
    m.add_function(wrap_pyfunction!(_warm_kernel_cache, m)?)?;
    m.add_function(wrap_pyfunction!(_kernel_families, m)?)?;
    m.add_function(wrap_pyfunction!(_conv_sm90_launches, m)?)?;
    m.add_function(wrap_pyfunction!(_conv_sm90_path_counts, m)?)?;
    m.add_function(wrap_pyfunction!(_conv_sm90_pingpong_launches, m)?)?;
    m.add_function(wrap_pyfunction!(_conv_sm90_wide_launches, m)?)?;
    m.add_function(wrap_pyfunction!(_conv_sm90_trio_launches, m)?)?;
    m.add_function(wrap_pyfunction!(_conv_sm90_short_launches, m)?)?;
    m.add_function(wrap_pyfunction!(_conv_sm90_res_ring_launches, m)?)?;
    m.add_function(wrap_pyfunction!(_conv_sm90_lean_launches, m)?)?;
    m.add_function(wrap_pyfunction!(_conv_sm90_tma_out_launches, m)?)?;
    m.add_function(wrap_pyfunction!(_conv_sm90_packed_launches, m)?)?;
    m.add_function(wrap_pyfunction!(_conv_sm90_vector_out_launches, m)?)?;
    m.add_function(wrap_pyfunction!(_conv_sm90_res_buf_launches, m)?)?;
    m.add_function(wrap_pyfunction!(_conv_sm90_cluster_launches, m)?)?;
    m.add_function(wrap_pyfunction!(_qgemv_mma_launches, m)?)?;
    m.add_function(wrap_pyfunction!(_conv_sm90_gemm_launches, m)?)?;
    Ok(())
}
