//! `max.driver.Buffer`: the Python face of runtime::Buffer (alias `Tensor`).

use max_runtime::{Buffer, Device, Scalar, Stream};
use pyo3::IntoPyObjectExt;
use pyo3::exceptions::{PyBufferError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyList, PySequence, PyTuple};

use crate::device::{PyDevice, PyStream, device_to_py, extract_device};
use crate::errors::{PyResultExt, detached};
use crate::index::{check_fits, parse_index, parse_scalar, scalar_to_py};
use crate::{dlpack, dtype, numpy_interop};

/// A typed, shaped block of memory on a device: `Buffer(dtype, shape, device)`,
/// `Buffer.from_numpy(array)`, `Buffer.zeros(shape, dtype)`. Indexing gives views; `to(device)`
/// copies across devices; `np.asarray(buffer)` and DLPack give the values.
#[pyclass(frozen, module = "max.driver", name = "Buffer")]
pub struct PyBuffer {
    pub inner: Buffer,
}

fn shape_arg(shape: &Bound<'_, PyAny>, op: &str) -> PyResult<Vec<i64>> {
    if let Ok(n) = shape.extract::<i64>() {
        return Ok(vec![n]);
    }
    let is_text = shape.is_instance_of::<pyo3::types::PyString>() || shape.is_instance_of::<pyo3::types::PyBytes>();
    let seq = shape.cast::<PySequence>().ok().filter(|_| !is_text).ok_or_else(|| {
        PyTypeError::new_err(format!(
            "{op}: shape must be a sequence of ints, got {}",
            shape.get_type().name().map(|n| n.to_string()).unwrap_or_default()
        ))
    })?;
    let mut dims = Vec::new();
    for d in seq.try_iter()? {
        let d = d?;
        if d.is_instance_of::<pyo3::types::PyBool>() || !d.hasattr("__index__")? {
            return Err(PyTypeError::new_err(format!(
                "{op}: shape entries must be ints, got {} ({d})",
                d.get_type().name()?
            )));
        }
        dims.push(
            d.extract::<i64>()
                .map_err(|_| PyValueError::new_err(format!("{op}: dimension {d} does not fit in 64 bits")))?,
        );
    }
    Ok(dims)
}

/// (device, stream) from optional `device=` and `stream=` arguments.
fn placement(device: Option<&Bound<'_, PyAny>>, stream: Option<&Bound<'_, PyAny>>) -> PyResult<Stream> {
    if let Some(s) = stream.filter(|s| !s.is_none()) {
        let s = s.cast::<PyStream>().map_err(|_| PyTypeError::new_err("stream must be a max.driver.DeviceStream"))?;
        return Ok(s.get().inner.clone());
    }
    let device = match device.filter(|d| !d.is_none()) {
        Some(d) => extract_device(d, "device")?,
        None => Device::Cpu,
    };
    Ok(Stream::default_for(&device))
}

impl PyBuffer {
    pub fn wrap(py: Python<'_>, inner: Buffer) -> PyResult<Py<PyBuffer>> {
        Py::new(py, PyBuffer { inner })
    }

    /// Anything a buffer can be made from in assignments: a Buffer, or a numpy array.
    fn coerce(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<Buffer> {
        if let Ok(b) = obj.cast::<PyBuffer>() {
            return Ok(b.get().inner.clone());
        }
        let np = py.import("numpy")?;
        if obj.is_instance(&np.getattr("ndarray")?)? {
            return numpy_interop::from_numpy(obj);
        }
        dlpack::import(obj, None)
    }
}

#[pymethods]
impl PyBuffer {
    /// Allocates a buffer: zero-filled on the host, uninitialised on a GPU.
    #[new]
    #[pyo3(signature = (dtype, shape, device = None, pinned = false, stream = None))]
    fn new(
        py: Python<'_>,
        dtype: &Bound<'_, PyAny>,
        shape: &Bound<'_, PyAny>,
        device: Option<&Bound<'_, PyAny>>,
        pinned: bool,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyBuffer> {
        let dtype = dtype::extract(dtype, "Buffer(dtype)")?;
        let shape = shape_arg(shape, "Buffer")?;
        let stream = placement(device, stream)?;
        let inner = if pinned {
            let gpu = match stream.device() {
                Device::Cpu => Device::accelerator(0).py()?,
                gpu => gpu,
            };
            detached(py, "Buffer (pinned)", || Buffer::pinned(dtype, &shape, &gpu))?
        } else {
            detached(py, "Buffer", || Buffer::empty_on(dtype, &shape, &stream))?
        };
        Ok(PyBuffer { inner })
    }

    /// A zero-filled buffer.
    #[staticmethod]
    #[pyo3(signature = (shape, dtype, device = None))]
    fn zeros(
        py: Python<'_>,
        shape: &Bound<'_, PyAny>,
        dtype: &Bound<'_, PyAny>,
        device: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyBuffer> {
        let dtype = dtype::extract(dtype, "Buffer.zeros(dtype)")?;
        let shape = shape_arg(shape, "Buffer.zeros")?;
        let device = placement(device, None)?.device();
        Ok(PyBuffer { inner: detached(py, "Buffer.zeros", || Buffer::zeros(dtype, &shape, &device))? })
    }

    /// A rank-0 buffer holding `value`.
    #[staticmethod]
    #[pyo3(signature = (value, dtype, device = None))]
    fn scalar(
        py: Python<'_>,
        value: &Bound<'_, PyAny>,
        dtype: &Bound<'_, PyAny>,
        device: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyBuffer> {
        let dtype = dtype::extract(dtype, "Buffer.scalar(dtype)")?;
        let value = parse_scalar(value)?.ok_or_else(|| {
            PyTypeError::new_err(format!(
                "Buffer.scalar: value must be a bool, int or float, got {}",
                value.get_type().name().map(|n| n.to_string()).unwrap_or_default()
            ))
        })?;
        check_fits(value, dtype, "Buffer.scalar: value")?;
        let device = placement(device, None)?.device();
        let b = detached(py, "Buffer.scalar", || Buffer::empty(dtype, &[], &device))?;
        b.fill(value).py()?;
        Ok(PyBuffer { inner: b })
    }

    /// Shares the array's memory (copying only non-contiguous or read-only arrays).
    #[staticmethod]
    fn from_numpy(arr: &Bound<'_, PyAny>) -> PyResult<PyBuffer> {
        Ok(PyBuffer { inner: numpy_interop::from_numpy(arr)? })
    }

    /// Shares the memory of any DLPack producer (numpy, torch, jax, another Buffer).
    #[staticmethod]
    #[pyo3(signature = (array, *, copy = None))]
    fn from_dlpack(array: &Bound<'_, PyAny>, copy: Option<bool>) -> PyResult<PyBuffer> {
        if let Ok(b) = array.cast::<PyBuffer>() {
            let inner = b.get().inner.clone();
            return Ok(PyBuffer { inner: if copy == Some(true) { inner.contiguous().py()? } else { inner } });
        }
        Ok(PyBuffer { inner: dlpack::import(array, copy)? })
    }

    /// Maps a file into a host buffer (numpy.memmap underneath; `mode` as numpy takes it, except
    /// that a read-only mapping ("r", "readonly") is mapped copy-on-write: pages are read from the
    /// file as they are touched, never copied up front, and the file is never written).
    #[staticmethod]
    #[pyo3(signature = (filename, dtype, shape, mode = "copyonwrite", offset = 0))]
    fn mmap(
        py: Python<'_>,
        filename: &Bound<'_, PyAny>,
        dtype: &Bound<'_, PyAny>,
        shape: &Bound<'_, PyAny>,
        mode: &str,
        offset: u64,
    ) -> PyResult<PyBuffer> {
        let d = dtype::extract(dtype, "Buffer.mmap(dtype)")?;
        let dims = shape_arg(shape, "Buffer.mmap")?;
        let bits =
            dtype::class(py)?.call1((max_runtime::DType::from_name(&format!("uint{}", d.size_in_bytes() * 8))
                .map_err(|e| PyValueError::new_err(e.to_string()))?
                .code(),))?;
        let kw = pyo3::types::PyDict::new(py);
        kw.set_item("dtype", bits.call_method0("to_numpy")?)?;
        kw.set_item("mode", if matches!(mode, "r" | "readonly") { "c" } else { mode })?;
        kw.set_item("offset", offset)?;
        kw.set_item("shape", PyTuple::new(py, &dims)?)?;
        let mm = py.import("numpy")?.call_method("memmap", (filename,), Some(&kw))?;
        let raw = numpy_interop::from_numpy(&mm)?;
        Ok(PyBuffer { inner: raw.view(d, Some(&dims)).py()? })
    }

    /// The element type (a `max.dtype.DType`).
    #[getter]
    fn dtype<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        dtype::to_py(py, self.inner.dtype())
    }

    /// The dimensions, as a tuple of ints.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.inner.shape())
    }

    /// The device that holds the memory.
    #[getter]
    fn device(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        device_to_py(py, self.inner.device())
    }

    /// The stream that orders work on this buffer.
    #[getter]
    fn stream(&self) -> PyStream {
        PyStream { inner: self.inner.stream().clone() }
    }

    /// The number of dimensions.
    #[getter]
    fn rank(&self) -> usize {
        self.inner.rank()
    }

    /// Elements in the buffer (1 for rank 0).
    #[getter]
    fn num_elements(&self) -> usize {
        self.inner.num_elements()
    }

    /// Bytes per element.
    #[getter]
    fn element_size(&self) -> usize {
        self.inner.dtype().size_in_bytes()
    }

    /// Whether the memory is on the host.
    #[getter]
    fn is_host(&self) -> bool {
        self.inner.device().is_host()
    }

    /// False for slices with gaps or negative steps.
    #[getter]
    fn is_contiguous(&self) -> bool {
        self.inner.is_contiguous()
    }

    /// Whether the host memory is page-locked (faster copies to a GPU).
    #[getter]
    fn pinned(&self) -> bool {
        self.inner.is_pinned()
    }

    /// A numpy array; on the host it shares this buffer's memory, from a GPU it is a copy.
    fn to_numpy(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        numpy_interop::to_numpy(py, &self.inner)
    }

    /// numpy's array protocol, so ``np.asarray(buffer)`` gives the values: a view of a host
    /// buffer, a copy of a device buffer (``copy=False`` refuses to copy with ValueError, as
    /// numpy asks); ``dtype`` converts the values.
    #[pyo3(signature = (dtype = None, copy = None))]
    fn __array__(&self, py: Python<'_>, dtype: Option<&Bound<'_, PyAny>>, copy: Option<bool>) -> PyResult<Py<PyAny>> {
        if copy == Some(false) && !self.inner.device().is_host() {
            return Err(PyValueError::new_err(format!(
                "__array__: a buffer on {} cannot be viewed without a copy (copy=False)",
                self.inner.device().label()
            )));
        }
        let mut arr = numpy_interop::to_numpy(py, &self.inner)?.into_bound(py);
        if let Some(dt) = dtype.filter(|d| !d.is_none()) {
            arr = arr.call_method1("astype", (dt,))?;
        }
        if copy == Some(true) && self.inner.device().is_host() {
            arr = arr.call_method0("copy")?;
        }
        Ok(arr.unbind())
    }

    /// The single element as a Python bool, int or float.
    fn item(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let b = self.inner.clone();
        let s = detached(py, "Buffer.item", move || b.item())?;
        scalar_to_py(py, s)
    }

    /// A contiguous copy on the same device.
    fn contiguous(&self, py: Python<'_>) -> PyResult<PyBuffer> {
        let b = self.inner.clone();
        Ok(PyBuffer { inner: detached(py, "Buffer.contiguous", move || b.contiguous())? })
    }

    /// A deep copy: on `device` (default: this buffer's), or on the device of `stream`.
    #[pyo3(signature = (target = None, *, device = None, stream = None))]
    fn copy(
        &self,
        py: Python<'_>,
        target: Option<&Bound<'_, PyAny>>,
        device: Option<&Bound<'_, PyAny>>,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyBuffer> {
        let dest = match target.filter(|t| !t.is_none()) {
            Some(t) if t.cast::<PyStream>().is_ok() => placement(None, Some(t))?,
            Some(t) => placement(Some(t), None)?,
            None if device.is_some_and(|d| !d.is_none()) || stream.is_some_and(|s| !s.is_none()) => {
                placement(device, stream)?
            }
            None => self.inner.stream().clone(),
        };
        let b = self.inner.clone();
        Ok(PyBuffer { inner: detached(py, "Buffer.copy", move || b.copy_to_stream(&dest))? })
    }

    /// This buffer on a device or stream (copied only when the device differs), or a list of
    /// buffers for a sequence of devices or streams: one argument, positional or by the name
    /// MAX documents for its kind (`device`, `devices`, `stream`, `streams`).
    #[pyo3(signature = (device = None, *, devices = None, stream = None, streams = None))]
    fn to(
        &self,
        py: Python<'_>,
        device: Option<&Bound<'_, PyAny>>,
        devices: Option<&Bound<'_, PyAny>>,
        stream: Option<&Bound<'_, PyAny>>,
        streams: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let given: Vec<&Bound<'_, PyAny>> = [device, devices, stream, streams].into_iter().flatten().collect();
        let [target] = given[..] else {
            return Err(PyTypeError::new_err(format!(
                "Buffer.to takes one target (a device, devices, a stream or streams), got {}",
                given.len()
            )));
        };
        let one = |t: &Bound<'_, PyAny>| -> PyResult<Buffer> {
            let b = self.inner.clone();
            if let Ok(s) = t.cast::<PyStream>() {
                let stream = s.get().inner.clone();
                if stream.device() == *b.device() {
                    return b.with_stream(&stream).py();
                }
                return detached(py, "Buffer.to (stream)", move || b.copy_to_stream(&stream));
            }
            let device = extract_device(t, "Buffer.to(device)")?;
            detached(py, "Buffer.to", move || b.to(&device))
        };
        if target.cast::<PyDevice>().is_ok() || target.cast::<PyStream>().is_ok() {
            return PyBuffer::wrap(py, one(target)?)?.into_py_any(py);
        }
        let seq = target
            .cast::<PySequence>()
            .map_err(|_| PyTypeError::new_err("Buffer.to expects a Device, a DeviceStream, or a sequence of them"))?;
        let mut out = Vec::new();
        for t in seq.try_iter()? {
            out.push(PyBuffer::wrap(py, one(&t?)?)?);
        }
        PyList::new(py, out)?.into_py_any(py)
    }

    /// The same bytes as another dtype (and shape); needs a contiguous buffer.
    #[pyo3(signature = (dtype, shape = None))]
    fn view(&self, dtype: &Bound<'_, PyAny>, shape: Option<&Bound<'_, PyAny>>) -> PyResult<PyBuffer> {
        let d = dtype::extract(dtype, "Buffer.view(dtype)")?;
        let dims = match shape.filter(|s| !s.is_none()) {
            Some(s) => Some(shape_arg(s, "Buffer.view")?),
            None => None,
        };
        Ok(PyBuffer { inner: self.inner.view(d, dims.as_deref()).py()? })
    }

    /// Copies `src` (same dtype and element count, both contiguous) into this buffer.
    fn inplace_copy_from(&self, py: Python<'_>, src: &Bound<'_, PyAny>) -> PyResult<()> {
        let src = src
            .cast::<PyBuffer>()
            .map_err(|_| PyTypeError::new_err("inplace_copy_from expects a max.driver.Buffer"))?
            .get()
            .inner
            .clone();
        let dst = self.inner.clone();
        detached(py, "Buffer.inplace_copy_from", move || dst.inplace_copy_from(&src))
    }

    /// A converted copy with every element cast to `dtype` (same device).
    fn _cast(&self, py: Python<'_>, dtype: &Bound<'_, PyAny>) -> PyResult<PyBuffer> {
        let d = dtype::extract(dtype, "cast(dtype)")?;
        let b = self.inner.clone();
        Ok(PyBuffer { inner: detached(py, "Buffer cast", move || b.cast(d))? })
    }

    fn __getitem__(&self, key: &Bound<'_, PyAny>) -> PyResult<PyBuffer> {
        Ok(PyBuffer { inner: self.inner.index(&parse_index(key)?).py()? })
    }

    /// `buf[idx] = scalar` fills the selected elements; `buf[idx] = buffer_or_array` copies.
    fn __setitem__(&self, py: Python<'_>, key: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let view = self.inner.index(&parse_index(key)?).py()?;
        if let Some(s) = parse_scalar(value)? {
            check_fits(s, view.dtype(), "Buffer.__setitem__: value")?;
            return detached(py, "Buffer.__setitem__", move || view.fill(s));
        }
        let src = if value.is_instance_of::<pyo3::types::PyList>() || value.is_instance_of::<PyTuple>() {
            numpy_interop::from_numpy(&py.import("numpy")?.call_method1("asarray", (value,))?)?
        } else {
            PyBuffer::coerce(py, value)?
        };
        if !view.is_contiguous() {
            return Err(PyValueError::new_err(format!(
                "Buffer.__setitem__: the selection {:?} is not contiguous: an array can be assigned to a \
                 contiguous selection only (a scalar to any)",
                view.shape()
            )));
        }
        if src.shape() != view.shape() {
            return Err(PyValueError::new_err(format!(
                "cannot assign a value of shape {:?} to a selection of shape {:?}",
                src.shape(),
                view.shape()
            )));
        }
        let src = if src.dtype() == view.dtype() { src } else { src.cast(view.dtype()).py()? };
        detached(py, "Buffer.__setitem__", move || view.inplace_copy_from(&src))
    }

    #[pyo3(signature = (*, stream = None, max_version = None, dl_device = None, copy = None))]
    fn __dlpack__(
        &self,
        py: Python<'_>,
        stream: Option<&Bound<'_, PyAny>>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        let mut buf = self.inner.clone();
        if let Some((dev_type, dev_id)) = dl_device {
            let here = dlpack::dl_device(buf.device());
            if (dev_type, dev_id) != (here.device_type, here.device_id) {
                if dev_type != dlpack::KDL_CPU || copy == Some(false) {
                    return Err(PyBufferError::new_err(format!(
                        "__dlpack__: cannot export a buffer on {} to DLPack device ({dev_type}, {dev_id})",
                        buf.device().label()
                    )));
                }
                let b = buf.clone();
                buf = detached(py, "Buffer.__dlpack__", move || b.copy_to(&Device::Cpu))?;
            }
        }
        if copy == Some(true) && buf.storage().addr() == self.inner.storage().addr() {
            let b = buf.clone();
            buf = detached(py, "Buffer.__dlpack__", move || b.contiguous())?;
        }
        if let Stream::Cuda { .. } = buf.stream() {
            buf.mark_exported();
            match stream.filter(|s| !s.is_none()) {
                // No stream named: make the data ready for anyone.
                None => detached(py, "Buffer.__dlpack__", || buf.synchronize())?,
                Some(s) => {
                    let handle: i64 = s.extract()?;
                    if handle != -1 {
                        let b = buf.clone();
                        detached(py, "Buffer.__dlpack__", move || b.stream().make_wait(handle as u64))?;
                    }
                }
            }
        }
        let versioned = max_version.is_some_and(|(major, _)| major >= 1);
        dlpack::export(py, &buf, versioned)
    }

    fn __dlpack_device__(&self) -> (i32, i32) {
        let d = dlpack::dl_device(self.inner.device());
        (d.device_type, d.device_id)
    }

    fn __repr__(&self) -> String {
        let b = &self.inner;
        let dims: Vec<String> = b.shape().iter().map(|d| d.to_string()).collect();
        let shape = if dims.len() == 1 { format!("({},)", dims[0]) } else { format!("({})", dims.join(", ")) };
        format!("max.driver.Buffer(DType.{}, {shape}, {}[{}])", b.dtype(), b.device().label(), b.device().id())
    }

    fn __str__(&self, py: Python<'_>) -> PyResult<String> {
        let b = &self.inner;
        let values = match numpy_interop::to_numpy(py, b) {
            Ok(a) => a.bind(py).str()?.to_string().replace('\n', "\n       "),
            Err(_) => "...".into(),
        };
        let dims: Vec<String> = b.shape().iter().map(|d| d.to_string()).collect();
        let shape = if dims.len() == 1 { format!("({},)", dims[0]) } else { format!("({})", dims.join(", ")) };
        Ok(format!(
            "Buffer({values}, dtype=DType.{}, shape={shape}, device=Device(type={},id={}))",
            b.dtype(),
            b.device().label(),
            b.device().id()
        ))
    }
}

/// Applies the cast rules to a scalar without a buffer: the bits `value` has as `dtype`.
#[pyfunction]
fn _scalar_bits(value: &Bound<'_, PyAny>, dtype: &Bound<'_, PyAny>) -> PyResult<u64> {
    let d = dtype::extract(dtype, "dtype")?;
    let s: Scalar = parse_scalar(value)?.ok_or_else(|| PyTypeError::new_err("value must be a bool, int or float"))?;
    s.to_bits(d).py()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyBuffer>()?;
    m.add_function(wrap_pyfunction!(_scalar_bits, m)?)?;
    numpy_interop::register(m)
}
