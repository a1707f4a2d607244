//! `max.driver` devices and streams: Device (with CPU and Accelerator as subclasses, as in
//! MAX), DeviceStream, and the module-level accelerator queries.

use max_runtime::{Device, Stream, accelerator_count, cuda_unavailable_reason};
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::{PyResultExt, detached};

/// A device that holds buffers and runs compiled models: the host (`CPU`) or an NVIDIA GPU
/// (`Accelerator`). Devices compare equal when they name the same hardware.
#[pyclass(subclass, frozen, module = "max.driver", name = "Device")]
pub struct PyDevice {
    pub inner: Device,
}

/// The host: `CPU()`. Its buffers are numpy-compatible views of host memory.
#[pyclass(extends = PyDevice, frozen, module = "max.driver", name = "CPU")]
pub struct PyCpu;

/// An NVIDIA GPU: `Accelerator()` for the first, `Accelerator(id)` for another; RuntimeError,
/// saying why, when there is none.
#[pyclass(extends = PyDevice, frozen, module = "max.driver", name = "Accelerator")]
pub struct PyAccelerator;

/// An ordered queue of work on a device: copies and model runs on one stream happen in order.
#[pyclass(frozen, module = "max.driver", name = "DeviceStream")]
pub struct PyStream {
    pub inner: Stream,
}

/// A Python object (CPU or Accelerator instance) for a runtime device.
pub fn device_to_py(py: Python<'_>, device: &Device) -> PyResult<Py<PyAny>> {
    let base = PyClassInitializer::from(PyDevice { inner: device.clone() });
    Ok(match device {
        Device::Cpu => Py::new(py, base.add_subclass(PyCpu))?.into_any(),
        Device::Cuda(_) => Py::new(py, base.add_subclass(PyAccelerator))?.into_any(),
    })
}

/// A `max.driver.Device` argument; anything else is a TypeError naming `what`.
pub fn extract_device(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Device> {
    match obj.cast::<PyDevice>() {
        Ok(d) => Ok(d.get().inner.clone()),
        Err(_) => Err(PyTypeError::new_err(format!(
            "{what} must be a max.driver.Device (CPU() or Accelerator()), got {}",
            obj.get_type().name()?
        ))),
    }
}

fn describe(device: &Device) -> String {
    format!("Device(type={},id={})", device.label(), device.id())
}

#[pymethods]
impl PyDevice {
    /// "cpu" for the host, "gpu" for accelerators.
    #[getter]
    fn label(&self) -> &'static str {
        self.inner.label()
    }

    /// "cpu" or "cuda".
    #[getter]
    fn api(&self) -> &'static str {
        self.inner.api()
    }

    /// The device's index among devices of its kind (0 for the CPU).
    #[getter]
    fn id(&self) -> usize {
        self.inner.id()
    }

    /// Whether this is the host CPU.
    #[getter]
    fn is_host(&self) -> bool {
        self.inner.is_host()
    }

    /// Whether the engine can run on this device (the CPU always; a GPU it has kernels for).
    #[getter]
    fn is_compatible(&self) -> bool {
        true
    }

    /// `sm_90a` on Hopper; the CPU raises ValueError.
    #[getter]
    fn architecture_name(&self) -> PyResult<String> {
        self.inner.architecture_name().py()
    }

    /// Free and total memory in bytes.
    #[getter]
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.inner.stats().py()?;
        let d = PyDict::new(py);
        d.set_item("free_memory", s.free_memory)?;
        d.set_item("total_memory", s.total_memory)?;
        Ok(d)
    }

    /// The stream that work on this device uses unless given another.
    #[getter]
    fn default_stream(&self) -> PyStream {
        PyStream { inner: Stream::default_for(&self.inner) }
    }

    /// Waits for all work on this device; errors of earlier asynchronous work surface here.
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        let d = self.inner.clone();
        py.detach(move || d.synchronize()).map_err(|e| PyValueError::new_err(e.to_string()))
    }

    /// Whether this device can read `other`'s memory directly (peer access).
    fn can_access(&self, other: &Bound<'_, PyAny>) -> PyResult<bool> {
        let other = extract_device(other, "can_access(other)")?;
        self.inner.can_access(&other).py()
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other.cast::<PyDevice>().is_ok_and(|o| o.get().inner == self.inner)
    }

    fn __hash__(&self) -> u64 {
        ((self.inner.is_host() as u64) << 32) | self.inner.id() as u64
    }

    fn __repr__(&self) -> String {
        describe(&self.inner)
    }

    fn __str__(&self) -> String {
        describe(&self.inner)
    }
}

#[pymethods]
impl PyCpu {
    #[new]
    #[pyo3(signature = (id = -1))]
    fn new(id: i64) -> PyClassInitializer<PyCpu> {
        let _ = id; // the host is one device whatever id is asked for, as in MAX
        PyClassInitializer::from(PyDevice { inner: Device::Cpu }).add_subclass(PyCpu)
    }
}

#[pymethods]
impl PyAccelerator {
    /// The GPU with this id (-1: the first). RuntimeError, saying why, when there is none.
    #[new]
    #[pyo3(signature = (id = -1))]
    fn new(py: Python<'_>, id: i64) -> PyResult<PyClassInitializer<PyAccelerator>> {
        let id = if id < 0 { 0 } else { id };
        let device = detached(py, "Accelerator", move || Device::accelerator(id))?;
        Ok(PyClassInitializer::from(PyDevice { inner: device }).add_subclass(PyAccelerator))
    }
}

#[pymethods]
impl PyStream {
    /// A new stream of execution on `device`.
    #[new]
    fn new(device: &Bound<'_, PyAny>) -> PyResult<PyStream> {
        let device = extract_device(device, "DeviceStream(device)")?;
        Ok(PyStream { inner: Stream::new_on(&device).py()? })
    }

    /// The device this stream runs work on.
    #[getter]
    fn device(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        device_to_py(py, &self.inner.device())
    }

    /// Waits until the work queued on this stream is done.
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        let s = self.inner.clone();
        py.detach(move || s.synchronize()).map_err(|e| PyValueError::new_err(e.to_string()))
    }

    /// Later work on this stream waits for what is queued now on `stream` (a stream, or a
    /// device's default stream; by name `stream` or `device`, as MAX documents).
    #[pyo3(signature = (stream = None, *, device = None))]
    fn wait_for(&self, stream: Option<&Bound<'_, PyAny>>, device: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let other = match (stream, device) {
            (Some(o), None) | (None, Some(o)) => o,
            _ => return Err(PyTypeError::new_err("wait_for takes one stream or device")),
        };
        let other = match other.cast::<PyStream>() {
            Ok(s) => s.get().inner.clone(),
            Err(_) => Stream::default_for(&extract_device(other, "wait_for(stream or device)")?),
        };
        self.inner.wait_for(&other).py()
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other.cast::<PyStream>().is_ok_and(|o| o.get().inner == self.inner)
    }

    fn __hash__(&self) -> u64 {
        self.inner.cu_stream()
    }

    fn __repr__(&self) -> String {
        let d = self.inner.device();
        format!("DeviceStream({}[{}], handle={:#x})", d.label(), d.id(), self.inner.cu_stream())
    }
}

/// Number of accelerators this process can use (0 without a GPU or driver).
#[pyfunction(name = "accelerator_count")]
fn py_accelerator_count() -> usize {
    accelerator_count()
}

/// "cuda" when an accelerator is present, else "cpu".
#[pyfunction]
fn accelerator_api() -> &'static str {
    if accelerator_count() > 0 { "cuda" } else { "cpu" }
}

/// The first accelerator's architecture (`sm_90a`); RuntimeError without one.
#[pyfunction]
fn accelerator_architecture_name(py: Python<'_>) -> PyResult<String> {
    if accelerator_count() == 0 {
        let why = cuda_unavailable_reason().unwrap_or_default();
        return Err(PyRuntimeError::new_err(format!("no accelerator is available: {why}")));
    }
    detached(py, "accelerator_architecture_name", || Device::accelerator(0)?.architecture_name())
}

/// Why there is no accelerator (None when there is one).
#[pyfunction]
fn accelerator_unavailable_reason() -> Option<String> {
    cuda_unavailable_reason()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyDevice>()?;
    m.add_class::<PyCpu>()?;
    m.add_class::<PyAccelerator>()?;
    m.add_class::<PyStream>()?;
    m.add_function(wrap_pyfunction!(py_accelerator_count, m)?)?;
    m.add_function(wrap_pyfunction!(accelerator_api, m)?)?;
    m.add_function(wrap_pyfunction!(accelerator_architecture_name, m)?)?;
    m.add_function(wrap_pyfunction!(accelerator_unavailable_reason, m)?)?;
    Ok(())
}
