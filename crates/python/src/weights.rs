//! `max._core.weights`: the mapped weight-file readers behind `max.graph.weights` (the parsing
//! and every check happen in crates/runtime/src/weights). Tensors come out as host Buffers
//! viewing the file's map, so `WeightData` and `allocated_weights` copy nothing.

use std::path::PathBuf;

use max_runtime::weights::{GgufFile, MetaArray, MetaValue, SafetensorsFile};
use pyo3::IntoPyObjectExt;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::buffer::PyBuffer;
use crate::dtype;
use crate::errors::{PyResultExt, detached};

/// A safetensors file, mapped and parsed.
#[pyclass(frozen, module = "max._core.weights", name = "SafetensorsFile")]
struct PySafetensorsFile {
    inner: SafetensorsFile,
}

#[pymethods]
impl PySafetensorsFile {
    #[new]
    fn open(py: Python<'_>, path: PathBuf) -> PyResult<PySafetensorsFile> {
        Ok(PySafetensorsFile { inner: detached(py, "safetensors open", || SafetensorsFile::open(&path))? })
    }

    #[getter]
    fn path(&self) -> PathBuf {
        self.inner.path().to_path_buf()
    }

    /// `(name, file dtype name, DType or None, shape, file offset, nbytes)` per tensor, in
    /// file order.
    fn tensors<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let rows = self
            .inner
            .tensors()
            .iter()
            .map(|t| {
                let dtype = t.dtype.map(|d| dtype::to_py(py, d)).transpose()?;
                (t.name.as_str(), t.st_dtype.as_str(), dtype, t.shape.clone(), t.offset, t.nbytes).into_py_any(py)
            })
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, rows)
    }

    /// The `__metadata__` strings.
    fn metadata<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (k, v) in self.inner.metadata() {
            d.set_item(k, v)?;
        }
        Ok(d)
    }

    /// The tensor as a host Buffer over the map (an unaligned tensor is copied to align it).
    fn buffer(&self, py: Python<'_>, name: &str) -> PyResult<Py<PyBuffer>> {
        PyBuffer::wrap(py, self.inner.buffer(name).py()?)
    }
}

/// A GGUF file, mapped and parsed.
#[pyclass(frozen, module = "max._core.weights", name = "GgufFile")]
struct PyGgufFile {
    inner: GgufFile,
}

fn array_to_py(py: Python<'_>, a: &MetaArray) -> PyResult<Py<PyAny>> {
    Ok(match a {
        // A list of ints like the other arrays (a Vec<u8> would become bytes).
        MetaArray::U8(v) => PyList::new(py, v.iter().copied())?.into_any().unbind(),
        MetaArray::I8(v) => v.into_py_any(py)?,
        MetaArray::U16(v) => v.into_py_any(py)?,
        MetaArray::I16(v) => v.into_py_any(py)?,
        MetaArray::U32(v) => v.into_py_any(py)?,
        MetaArray::I32(v) => v.into_py_any(py)?,
        MetaArray::F32(v) => v.into_py_any(py)?,
        MetaArray::Bool(v) => v.into_py_any(py)?,
        MetaArray::Str(v) => v.into_py_any(py)?,
        MetaArray::U64(v) => v.into_py_any(py)?,
        MetaArray::I64(v) => v.into_py_any(py)?,
        MetaArray::F64(v) => v.into_py_any(py)?,
        MetaArray::Array(v) => {
            PyList::new(py, v.iter().map(|x| array_to_py(py, x)).collect::<PyResult<Vec<_>>>()?)?.into_any().unbind()
        }
    })
}

fn value_to_py(py: Python<'_>, v: &MetaValue) -> PyResult<Py<PyAny>> {
    Ok(match v {
        MetaValue::U8(x) => x.into_py_any(py)?,
        MetaValue::I8(x) => x.into_py_any(py)?,
        MetaValue::U16(x) => x.into_py_any(py)?,
        MetaValue::I16(x) => x.into_py_any(py)?,
        MetaValue::U32(x) => x.into_py_any(py)?,
        MetaValue::I32(x) => x.into_py_any(py)?,
        MetaValue::F32(x) => x.into_py_any(py)?,
        MetaValue::Bool(x) => x.into_py_any(py)?,
        MetaValue::Str(x) => x.into_py_any(py)?,
        MetaValue::U64(x) => x.into_py_any(py)?,
        MetaValue::I64(x) => x.into_py_any(py)?,
        MetaValue::F64(x) => x.into_py_any(py)?,
        MetaValue::Array(a) => array_to_py(py, a)?,
    })
}

#[pymethods]
impl PyGgufFile {
    #[new]
    fn open(py: Python<'_>, path: PathBuf) -> PyResult<PyGgufFile> {
        Ok(PyGgufFile { inner: detached(py, "GGUF open", || GgufFile::open(&path))? })
    }

    #[getter]
    fn path(&self) -> PathBuf {
        self.inner.path().to_path_buf()
    }

    #[getter]
    fn version(&self) -> u32 {
        self.inner.layout().version
    }

    #[getter]
    fn alignment(&self) -> u64 {
        self.inner.layout().alignment
    }

    #[getter]
    fn data_offset(&self) -> u64 {
        self.inner.layout().data_offset
    }

    /// `(name, GGML type name, dims innermost first, DType or None, encoding name or None,
    /// array shape, file offset, nbytes)` per tensor, in file order. Block types have DType
    /// None and an array shape whose last dimension counts bytes.
    fn tensors<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let rows = self
            .inner
            .layout()
            .tensors
            .iter()
            .map(|t| {
                let dtype = t.ggml_type.dtype().map(|d| dtype::to_py(py, d)).transpose()?;
                (
                    t.name.as_str(),
                    t.ggml_type.name(),
                    t.dims.clone(),
                    dtype,
                    t.ggml_type.encoding(),
                    t.array_shape(),
                    t.file_offset,
                    t.nbytes,
                )
                    .into_py_any(py)
            })
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, rows)
    }

    /// key -> (GGUF type name, value), in file order; arrays become lists.
    fn metadata<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (k, v) in &self.inner.layout().metadata {
            d.set_item(k, (v.type_name(), value_to_py(py, v)?))?;
        }
        Ok(d)
    }

    /// The tensor as a host Buffer over the map: its dtype for plain types, uint8
    /// `[..., bytes_per_row]` for block types.
    fn buffer(&self, py: Python<'_>, name: &str) -> PyResult<Py<PyBuffer>> {
        PyBuffer::wrap(py, self.inner.buffer(name).py()?)
    }
}

/// float32 values of a host uint8 buffer of GGUF blocks (`encoding`: "Q4_0", ...), decoded
/// by the same block decoder as the CPU kernels of ops.dequantize.
#[pyfunction]
fn dequantize(py: Python<'_>, raw: PyRef<'_, PyBuffer>, encoding: &str) -> PyResult<Py<PyBuffer>> {
    let b = raw.inner.clone();
    let out = detached(py, "dequantize", || max_runtime::weights::dequantize(&b, encoding))?;
    PyBuffer::wrap(py, out)
}

/// Whether load progress bars are drawn (stderr is a terminal and MAX_NO_PROGRESS is unset).
#[pyfunction]
fn progress_enabled() -> bool {
    max_runtime::weights::progress_enabled()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PySafetensorsFile>()?;
    m.add_class::<PyGgufFile>()?;
    m.add_function(wrap_pyfunction!(dequantize, m)?)?;
    m.add_function(wrap_pyfunction!(progress_enabled, m)?)?;
    Ok(())
}
