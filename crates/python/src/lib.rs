//! `max._core`: the compiled half of the `max` package. One Rust module per Python submodule;
//! the Python package (python/max) re-exports these under MAX's public names.

use pyo3::prelude::*;

mod buffer;
mod device;
mod dlpack;
mod dtype;
mod engine;
mod errors;
mod graph;
mod index;
mod kernels;
mod numpy_interop;
mod tuning;
mod weights;

/// Lets the kernel compiler find libnvrtc from the `nvidia-cuda-nvrtc` wheel: the folders it
/// installs into (CUDA 13 wheels use nvidia/cu13/lib, older ones nvidia/cuda_nvrtc/lib); and
/// the GPU collectives find libnccl from the `nvidia-nccl-cu13` wheel (either folder).
fn register_wheel_library_dirs(py: Python<'_>) -> PyResult<()> {
    let paths: Vec<String> = py.import("sys")?.getattr("path")?.extract().unwrap_or_default();
    for p in paths {
        for sub in ["nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib"] {
            let dir = std::path::Path::new(&p).join(sub);
            if dir.is_dir() {
                max_kernels_cuda::add_search_dir(dir);
            }
        }
        for sub in ["nvidia/nccl/lib", "nvidia/cu13/lib"] {
            let dir = std::path::Path::new(&p).join(sub);
            if dir.is_dir() {
                max_runtime::nccl::add_search_dir(dir);
            }
        }
    }
    Ok(())
}

/// Adds `sub` as `max._core.<name>` and registers it in sys.modules so that
/// `from max._core.driver import Buffer` works.
fn add_submodule(parent: &Bound<'_, PyModule>, sub: &Bound<'_, PyModule>) -> PyResult<()> {
    parent.add_submodule(sub)?;
    let name = format!("max._core.{}", sub.name()?);
    sub.setattr("__name__", &name)?;
    parent.py().import("sys")?.getattr("modules")?.set_item(name, sub)
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    register_wheel_library_dirs(py)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;

    let dtype_mod = PyModule::new(py, "dtype")?;
    dtype::register(&dtype_mod)?;
    add_submodule(m, &dtype_mod)?;

    let driver_mod = PyModule::new(py, "driver")?;
    device::register(&driver_mod)?;
    buffer::register(&driver_mod)?;
    kernels::register(&driver_mod)?;
    add_submodule(m, &driver_mod)?;

    let engine_mod = PyModule::new(py, "engine")?;
    engine::register(&engine_mod)?;
    add_submodule(m, &engine_mod)?;

    let graph_mod = PyModule::new(py, "graph")?;
    graph::register(&graph_mod)?;
    add_submodule(m, &graph_mod)?;

    let tuning_mod = PyModule::new(py, "tuning")?;
    tuning::register(&tuning_mod)?;
    add_submodule(m, &tuning_mod)?;

    let weights_mod = PyModule::new(py, "weights")?;
    weights::register(&weights_mod)?;
    add_submodule(m, &weights_mod)?;
    Ok(())
}
