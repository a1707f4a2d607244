//! `max._core.graph`: the Rust graph builder behind `max.graph`. Python holds a `GraphIR` per
//! Graph and stages each op through `add_op`, which validates and infers in Rust. Types cross
//! as tuples `(kind, dtype_code, [Dim], (device_kind, device_id))`; attributes as a dict of
//! plain values or tagged tuples (`("dims", [...])`, `("dtype", code)`, ...).

use std::sync::Arc;

use max_graph::attrs::{Attr, Attrs};
use max_graph::ops::elementwise::promote_operands;
use max_graph::promote::{Scalar, scalar_fits};
use max_graph::{DType, DeviceKind, DeviceRef, Dim, DimKind, Graph, GraphError, Op, OpKind, TensorType, Type};
use pyo3::exceptions::{PyIndexError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

pub fn graph_err(e: GraphError) -> PyErr {
    match e {
        GraphError::Value(m) => PyValueError::new_err(m),
        GraphError::Type(m) => PyTypeError::new_err(m),
        GraphError::Index(m) => PyIndexError::new_err(m),
    }
}

/// A canonical dimension expression (wrapped by max.graph.dim.Dim and its subclasses).
#[pyclass(frozen, skip_from_py_object, module = "max._core.graph", name = "Dim")]
#[derive(Clone)]
pub struct PyDim {
    pub inner: Dim,
}

#[pymethods]
impl PyDim {
    #[staticmethod]
    #[pyo3(name = "static")]
    fn static_(n: i64) -> PyDim {
        PyDim { inner: Dim::stat(n) }
    }

    #[staticmethod]
    fn symbol(name: &str) -> PyResult<PyDim> {
        Ok(PyDim { inner: Dim::sym(name).map_err(graph_err)? })
    }

    /// 0 static, 1 symbolic, 2 algebraic.
    #[getter]
    fn kind(&self) -> u8 {
        match self.inner.kind() {
            DimKind::Static => 0,
            DimKind::Symbolic => 1,
            DimKind::Algebraic => 2,
        }
    }

    #[getter]
    fn value(&self) -> Option<i64> {
        self.inner.as_static()
    }

    #[getter]
    fn name(&self) -> Option<String> {
        self.inner.as_symbol().map(str::to_string)
    }

    #[getter]
    fn parameters(&self) -> Vec<String> {
        self.inner.parameters().iter().map(|s| s.to_string()).collect()
    }

    fn add(&self, o: &PyDim) -> PyResult<PyDim> {
        Ok(PyDim { inner: self.inner.add(&o.inner).map_err(graph_err)? })
    }

    fn sub(&self, o: &PyDim) -> PyResult<PyDim> {
        Ok(PyDim { inner: self.inner.sub(&o.inner).map_err(graph_err)? })
    }

    fn mul(&self, o: &PyDim) -> PyResult<PyDim> {
        Ok(PyDim { inner: self.inner.mul(&o.inner).map_err(graph_err)? })
    }

    fn floordiv(&self, o: &PyDim) -> PyResult<PyDim> {
        Ok(PyDim { inner: self.inner.floordiv(&o.inner).map_err(graph_err)? })
    }

    fn neg(&self) -> PyResult<PyDim> {
        Ok(PyDim { inner: self.inner.neg().map_err(graph_err)? })
    }

    /// Replaces symbols by dims from `env` (name -> Dim).
    fn substitute(&self, env: &Bound<'_, PyDict>) -> PyResult<PyDim> {
        let mut map = std::collections::HashMap::new();
        for (k, v) in env.iter() {
            map.insert(k.extract::<String>()?, v.cast::<PyDim>()?.get().inner.clone());
        }
        let out = self.inner.substitute(&|s| map.get(s).cloned()).map_err(graph_err)?;
        Ok(PyDim { inner: out })
    }

    /// The canonical terms as data: a list of (coefficient, [(atom, power)]), an atom being a
    /// symbol's name or (numerator, denominator) terms of a floor division (max.graph.dim
    /// rebuilds a pickled dim from it).
    fn terms<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        dim_terms(py, &self.inner)
    }

    fn __eq__(&self, o: &Bound<'_, PyAny>) -> bool {
        o.cast::<PyDim>().is_ok_and(|o| o.get().inner == self.inner)
    }

    fn __hash__(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.inner.hash(&mut h);
        h.finish()
    }

    fn __str__(&self) -> String {
        self.inner.to_string()
    }

    fn __repr__(&self) -> String {
        self.inner.repr()
    }
}

fn dim_terms<'py>(py: Python<'py>, d: &Dim) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    for (atoms, coeff) in d.terms() {
        let list = PyList::empty(py);
        for (atom, power) in atoms {
            let a = match atom {
                max_graph::dim::Atom::Sym(name) => name.to_string().into_pyobject(py)?.into_any(),
                max_graph::dim::Atom::FloorDiv(num, den) => {
                    (dim_terms(py, num)?, dim_terms(py, den)?).into_pyobject(py)?.into_any()
                }
            };
            list.append((a, *power))?;
        }
        out.append((coeff, list))?;
    }
    Ok(out)
}

fn device_from_py(obj: &Bound<'_, PyAny>) -> PyResult<DeviceRef> {
    let (kind, id): (String, i64) = obj.extract()?;
    let kind = match kind.as_str() {
        "cpu" => DeviceKind::Cpu,
        "gpu" => DeviceKind::Gpu,
        other => {
            return Err(PyValueError::new_err(format!("unknown device kind {other:?}")));
        }
    };
    Ok(DeviceRef { kind, id })
}

fn device_to_py(d: DeviceRef) -> (&'static str, i64) {
    (if d.kind == DeviceKind::Cpu { "cpu" } else { "gpu" }, d.id)
}

fn dims_from_py(obj: &Bound<'_, PyAny>) -> PyResult<Vec<Dim>> {
    let mut out = Vec::new();
    for d in obj.try_iter()? {
        out.push(d?.cast::<PyDim>()?.get().inner.clone());
    }
    Ok(out)
}

pub fn type_from_py(obj: &Bound<'_, PyAny>) -> PyResult<Type> {
    let t = obj.cast::<PyTuple>()?;
    let kind: String = t.get_item(0)?.extract()?;
    if kind == "chain" {
        return Ok(Type::Chain);
    }
    let dtype = DType::from_code(t.get_item(1)?.extract()?).map_err(|e| PyValueError::new_err(e.to_string()))?;
    let shape = dims_from_py(&t.get_item(2)?)?;
    let device = device_from_py(&t.get_item(3)?)?;
    let tt = TensorType::new(dtype, shape, device);
    match kind.as_str() {
        "tensor" => Ok(Type::Tensor(tt)),
        "buffer" => Ok(Type::Buffer(tt)),
        other => Err(PyValueError::new_err(format!("unknown type kind {other:?}"))),
    }
}

pub fn type_to_py<'py>(py: Python<'py>, t: &Type) -> PyResult<Bound<'py, PyTuple>> {
    match t {
        Type::Chain => PyTuple::new(py, ["chain"]),
        Type::Tensor(tt) | Type::Buffer(tt) => {
            let kind = if matches!(t, Type::Tensor(_)) { "tensor" } else { "buffer" };
            let dims: Vec<PyDim> = tt.shape.iter().map(|d| PyDim { inner: d.clone() }).collect();
            let dims = PyList::new(py, dims)?;
            (kind, tt.dtype.code(), dims, device_to_py(tt.device)).into_pyobject(py)
        }
    }
}

fn attr_from_py(v: &Bound<'_, PyAny>) -> PyResult<Attr> {
    if v.is_none() {
        return Ok(Attr::None);
    }
    if v.is_instance_of::<PyBool>() {
        return Ok(Attr::Bool(v.extract()?));
    }
    if v.is_instance_of::<PyInt>() {
        return Ok(Attr::Int(v.extract()?));
    }
    if v.is_instance_of::<PyFloat>() {
        return Ok(Attr::Float(v.extract()?));
    }
    if v.is_instance_of::<PyString>() {
        return Ok(Attr::Str(v.extract()?));
    }
    if let Ok(t) = v.cast::<PyTuple>()
        && let Ok(tag) = t.get_item(0).and_then(|x| x.extract::<String>())
    {
        match tag.as_str() {
            "dims" => return Ok(Attr::Dims(dims_from_py(&t.get_item(1)?)?)),
            "dtype" => {
                let code: i64 = t.get_item(1)?.extract()?;
                return DType::from_code(code).map(Attr::DType).map_err(|e| PyValueError::new_err(e.to_string()));
            }
            "device" => return Ok(Attr::Device(device_from_py(&t.get_item(1)?)?)),
            "types" => {
                let mut out = Vec::new();
                for ty in t.get_item(1)?.try_iter()? {
                    out.push(type_from_py(&ty?)?);
                }
                return Ok(Attr::Types(out));
            }
            "data" => {
                return Ok(Attr::Data(Arc::new(t.get_item(1)?.cast::<PyBytes>()?.as_bytes().to_vec())));
            }
            _ => {}
        }
    }
    if v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>() {
        let ints: Vec<i64> =
            v.extract().map_err(|_| PyTypeError::new_err(format!("attribute lists must hold ints, got {v}")))?;
        return Ok(Attr::Ints(ints));
    }
    Err(PyTypeError::new_err(format!("unsupported attribute value {v} of type {}", v.get_type().name()?)))
}

fn attrs_from_py(d: Option<&Bound<'_, PyDict>>) -> PyResult<Attrs> {
    let mut attrs = Attrs::new();
    if let Some(d) = d {
        for (k, v) in d.iter() {
            attrs.0.insert(k.extract()?, attr_from_py(&v)?);
        }
    }
    Ok(attrs)
}

fn op_kind(name: &str) -> PyResult<OpKind> {
    OpKind::from_name(name).ok_or_else(|| PyValueError::new_err(format!("unknown op {name:?}")))
}

/// The Rust graph behind one max.graph.Graph.
#[pyclass(module = "max._core.graph", name = "GraphIR")]
pub struct PyGraphIR {
    pub inner: Graph,
}

#[pymethods]
impl PyGraphIR {
    #[new]
    fn new(name: &str) -> PyGraphIR {
        PyGraphIR { inner: Graph::new(name) }
    }

    #[getter]
    fn name(&self) -> String {
        self.inner.name.clone()
    }

    fn add_input(&mut self, ty: &Bound<'_, PyAny>) -> PyResult<usize> {
        Ok(self.inner.add_input(type_from_py(ty)?))
    }

    /// Stages op `name` on value ids `inputs`; returns the result value ids.
    #[pyo3(signature = (name, inputs, attrs = None))]
    fn add_op(&mut self, name: &str, inputs: Vec<usize>, attrs: Option<&Bound<'_, PyDict>>) -> PyResult<Vec<usize>> {
        let op = Op { kind: op_kind(name)?, attrs: attrs_from_py(attrs)? };
        self.inner.add_node(op, inputs).map_err(graph_err)
    }

    /// Stages an input-free op (a weight) in the graph body, whatever block is open.
    #[pyo3(signature = (name, attrs = None))]
    fn add_op_to_body(&mut self, name: &str, attrs: Option<&Bound<'_, PyDict>>) -> PyResult<Vec<usize>> {
        let op = Op { kind: op_kind(name)?, attrs: attrs_from_py(attrs)? };
        self.inner.add_node_to_body(op).map_err(graph_err)
    }

    /// Stages a control-flow op owning the closed `blocks`.
    #[pyo3(signature = (name, inputs, blocks, attrs = None))]
    fn add_control(
        &mut self,
        name: &str,
        inputs: Vec<usize>,
        blocks: Vec<usize>,
        attrs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Vec<usize>> {
        let op = Op { kind: op_kind(name)?, attrs: attrs_from_py(attrs)? };
        self.inner.add_node_with_blocks(op, inputs, blocks).map_err(graph_err)
    }

    /// Copies graph `sub` into the current block (ops.call); see `Graph::inline`.
    fn inline(
        &mut self,
        sub: PyRef<'_, PyGraphIR>,
        args: Vec<usize>,
        bound: Vec<(usize, usize)>,
        chain: Option<usize>,
        prefix: &str,
        wanted: Vec<usize>,
    ) -> PyResult<Vec<usize>> {
        self.inner.inline(&sub.inner, &args, &bound, chain, prefix, &wanted).map_err(graph_err)
    }

    fn open_block(&mut self, types: Vec<Bound<'_, PyAny>>) -> PyResult<(usize, Vec<usize>)> {
        let types = types.iter().map(type_from_py).collect::<PyResult<Vec<_>>>()?;
        Ok(self.inner.open_block(types))
    }

    fn close_block(&mut self, results: Vec<usize>) -> PyResult<usize> {
        self.inner.close_block(results).map_err(graph_err)
    }

    fn discard_block(&mut self) {
        self.inner.discard_block()
    }

    fn set_outputs(&mut self, outputs: Vec<usize>) -> PyResult<()> {
        self.inner.set_outputs(outputs).map_err(graph_err)
    }

    fn value_type<'py>(&self, py: Python<'py>, v: usize) -> PyResult<Bound<'py, PyTuple>> {
        let t = self.inner.ty(v).ok_or_else(|| PyValueError::new_err(format!("no value %{v}")))?;
        type_to_py(py, t)
    }

    /// (kind, dtype code, rank, (device kind, id)) without building the shape.
    fn value_summary(&self, v: usize) -> PyResult<(&'static str, u8, usize, (&'static str, i64))> {
        match self.inner.ty(v) {
            Some(Type::Tensor(t)) => Ok(("tensor", t.dtype.code(), t.rank(), device_to_py(t.device))),
            Some(Type::Buffer(t)) => Ok(("buffer", t.dtype.code(), t.rank(), device_to_py(t.device))),
            Some(Type::Chain) => Ok(("chain", 0, 0, ("cpu", 0))),
            None => Err(PyValueError::new_err(format!("no value %{v}"))),
        }
    }

    /// The dtype code two values of a binary op `name` are computed in (`first`: where's
    /// condition, for the error's names).
    #[pyo3(signature = (name, a, b, first=None))]
    fn promote(&self, name: &str, a: usize, b: usize, first: Option<usize>) -> PyResult<u8> {
        let ids: Vec<usize> = first.into_iter().chain([a, b]).collect();
        let mut types = Vec::with_capacity(ids.len());
        for v in ids {
            types.push(self.inner.ty(v).ok_or_else(|| PyValueError::new_err("promote: no such value"))?.clone());
        }
        promote_operands(op_kind(name)?, &types).map(|d| d.code()).map_err(graph_err)
    }

    fn inputs(&self) -> Vec<usize> {
        self.inner.inputs().to_vec()
    }

    fn outputs(&self) -> Option<Vec<usize>> {
        self.inner.outputs().map(<[usize]>::to_vec)
    }

    #[getter]
    fn num_nodes(&self) -> usize {
        self.inner.nodes.len()
    }

    fn verify(&self) -> PyResult<()> {
        self.inner.verify().map_err(graph_err)
    }

    fn __str__(&self) -> String {
        self.inner.to_text()
    }
}

/// Checks that a Python scalar may take `dtype` next to a tensor (the weak-scalar rule).
#[pyfunction]
fn check_scalar(op: &str, arg: &str, dtype_code: i64, value: &Bound<'_, PyAny>) -> PyResult<()> {
    let dtype = DType::from_code(dtype_code).map_err(|e| PyValueError::new_err(e.to_string()))?;
    let scalar = if value.is_instance_of::<PyBool>() {
        Scalar::Bool(value.extract()?)
    } else if value.is_instance_of::<PyFloat>() {
        Scalar::Float(value.extract()?)
    } else {
        match value.extract::<i128>() {
            Ok(i) => Scalar::Int(i),
            Err(_) => {
                return Err(PyValueError::new_err(format!(
                    "{op}: {arg}: the Python int {value} does not fit in {dtype}"
                )));
            }
        }
    };
    scalar_fits(dtype, scalar).map_err(|m| PyValueError::new_err(format!("{op}: {arg}: {m}")))
}

/// Every op name the graph knows, with its family.
#[pyfunction]
fn op_names() -> Vec<(&'static str, String)> {
    OpKind::ALL.iter().map(|k| (k.name(), format!("{:?}", k.family()))).collect()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyDim>()?;
    m.add_class::<PyGraphIR>()?;
    m.add_function(wrap_pyfunction!(check_scalar, m)?)?;
    m.add_function(wrap_pyfunction!(op_names, m)?)?;
    Ok(())
}
