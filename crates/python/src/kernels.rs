//! Private hooks into the kernel compiler, for tests and CI: compile every family for an
//! architecture without a GPU, read the compiled-kernel cache's counters.

use max_kernels_cuda::{Target, cache_dir, cache_stats, compile, nvrtc_version, settle, sources, warm_cache};
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

/// NVRTC's (major, minor); RuntimeError saying where it looked when it cannot be loaded.
#[pyfunction]
fn _nvrtc_version() -> PyResult<(i32, i32)> {
    nvrtc_version().map_err(kernel_err)
}

/// Waits for the kernel compiles a model's load started in the background (and starts no
/// more): the package's exit handler, since NVRTC torn down under a running compile crashes the
/// exiting process.
#[pyfunction]
fn _settle_background_compiles(py: Python<'_>) {
    py.detach(settle)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_settle_background_compiles, m)?)?;
    m.add_function(wrap_pyfunction!(_compile_kernels, m)?)?;
    m.add_function(wrap_pyfunction!(_kernel_cache_stats, m)?)?;
    m.add_function(wrap_pyfunction!(_kernel_cache_dir, m)?)?;
    m.add_function(wrap_pyfunction!(_nvrtc_version, m)?)?;
    m.add_function(wrap_pyfunction!(_warm_kernel_cache, m)?)?;
    m.add_function(wrap_pyfunction!(_kernel_families, m)?)?;
    Ok(())
}
