//! `max._core.engine`: compiling a staged graph and executing it (the GIL is released while a
//! model runs, so several threads can run one model at once).

use std::collections::HashMap;
use std::sync::Arc;

use max_runtime::engine::Model;
use max_runtime::{Buffer, Device};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::buffer::PyBuffer;
use crate::device::extract_device;
use crate::errors::{PyResultExt, detached};
use crate::graph::{PyGraphIR, type_to_py};

#[pyclass(frozen, module = "max._core.engine", name = "Model")]
pub struct PyModel {
    inner: Arc<Model>,
}

#[pymethods]
impl PyModel {
    /// Compiles `graph` for `devices`; `weights` maps each external constant's name to a Buffer.
    #[staticmethod]
    #[pyo3(signature = (graph, devices, weights, num_threads = None))]
    fn load(
        py: Python<'_>,
        graph: PyRef<'_, PyGraphIR>,
        devices: Vec<Bound<'_, PyAny>>,
        weights: &Bound<'_, PyDict>,
        num_threads: Option<usize>,
    ) -> PyResult<PyModel> {
        let devices: Vec<Device> = devices.iter().map(|d| extract_device(d, "devices")).collect::<PyResult<_>>()?;
        let mut w: HashMap<String, Buffer> = HashMap::new();
        for (k, v) in weights.iter() {
            w.insert(k.extract()?, v.cast::<PyBuffer>()?.get().inner.clone());
        }
        let g = graph.inner.clone();
        let model = detached(py, "InferenceSession.load", move || Model::load(&g, &devices, &w, num_threads))?;
        Ok(PyModel { inner: Arc::new(model) })
    }

    /// Runs the model on Buffers (already converted and on the right devices); with
    /// `reuse_results`, a replayed CUDA graph's results are its own buffers, which its next
    /// replay overwrites (Model::execute_with).
    #[pyo3(signature = (inputs, reuse_results = false))]
    fn execute(
        &self,
        py: Python<'_>,
        inputs: Vec<Bound<'_, PyAny>>,
        reuse_results: bool,
    ) -> PyResult<Vec<Py<PyBuffer>>> {
        let bufs: Vec<Buffer> =
            inputs.iter().map(|b| Ok(b.cast::<PyBuffer>()?.get().inner.clone())).collect::<PyResult<_>>()?;
        let model = self.inner.clone();
        let outs = detached(py, "Model.execute", move || {
            let mut outs = model.execute_with(bufs, reuse_results)?;
            // A value returned twice (`[y, y]`, or two results folded into one) comes back as
            // separate buffers: writing one must not change the other.
            for i in 1..outs.len() {
                if outs[..i].iter().any(|o| o.addr() == outs[i].addr() && o.nbytes() > 0) {
                    outs[i] = outs[i].copy_to_stream(outs[i].stream())?;
                }
            }
            Ok(outs)
        })?;
        outs.into_iter().map(|b| PyBuffer::wrap(py, b)).collect()
    }

    #[getter]
    fn input_types<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, pyo3::types::PyTuple>>> {
        self.inner.input_types.iter().map(|t| type_to_py(py, t)).collect()
    }

    #[getter]
    fn output_types<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, pyo3::types::PyTuple>>> {
        self.inner.output_types.iter().map(|t| type_to_py(py, t)).collect()
    }

    #[getter]
    fn num_threads(&self) -> usize {
        self.inner.num_threads()
    }

    #[getter]
    fn num_plans(&self) -> usize {
        self.inner.num_plans()
    }

    /// How many plans run as captured CUDA graphs.
    #[getter]
    fn num_cuda_graphs(&self) -> usize {
        self.inner.num_cuda_graphs()
    }

    /// The plan for inputs of these (dtype code, shape) pairs: kernels, fused groups, arena
    /// bytes and the max-live lower bound.
    fn plan_report(&self, given: Vec<(i64, Vec<usize>)>) -> PyResult<String> {
        let given = given
            .into_iter()
            .map(|(c, s)| {
                Ok((
                    max_graph::DType::from_code(c)
                        .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?,
                    s,
                ))
            })
            .collect::<PyResult<Vec<_>>>()?;
        let plan = self.inner.plan_for(&given).py()?;
        Ok(self.inner.describe_plan(&plan))
    }
}

/// The step names of `graph` as compiled, before any plan (e.g. `conv[conv2d+bias+relu]` for a
/// fused convolution): what the fusion passes did, whatever devices the graph names (tests).
/// With `marks`, the load's PDL marks too (passes/mark_early_index.rs), as `+` and the
/// attribute's name after a marked step's.
#[pyfunction]
#[pyo3(signature = (graph, marks=false))]
fn _lowered_steps(graph: PyRef<'_, PyGraphIR>, marks: bool) -> PyResult<Vec<String>> {
    use max_graph::ops::attention::{EARLY_INDEX, EARLY_NEXT};
    graph.inner.verify().map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
    let mut program = max_runtime::engine::passes::lower(&graph.inner);
    if marks {
        max_runtime::engine::passes::mark_early_index(&mut program);
    }
    let name = |s: &max_runtime::engine::program::Step| {
        let mut n = s.name();
        if let max_runtime::engine::program::StepKind::Op(op) = &s.kind {
            for key in [EARLY_INDEX, EARLY_NEXT, max_runtime::engine::passes::ROPE_STORE] {
                if op.attrs.get(key).is_some() {
                    n = format!("{n}+{key}");
                }
            }
            // (a store folded into q/k/v products keeps its attributes under a prefix)
            if op.attrs.get(&format!("kv_cache_store.{EARLY_NEXT}")).is_some() {
                n = format!("{n}+{EARLY_NEXT}");
            }
        }
        if let max_runtime::engine::program::StepKind::Gemm(g) = &s.kind
            && g.rope_store.as_ref().is_some_and(|op| op.attrs.get(EARLY_NEXT).is_some())
        {
            n = format!("{n}+{EARLY_NEXT}");
        }
        n
    };
    Ok(program.body.steps.iter().map(name).collect())
}

/// Panics with `message` under the guard every call into the runtime runs under (load,
/// execute, the weight readers, buffer copies: errors::detached), for the test that a bug's
/// panic reaches Python as a RuntimeError.
#[pyfunction]
fn _panic_under_guard(py: Python<'_>, message: String) -> PyResult<()> {
    detached(py, "_panic_under_guard", move || -> Result<(), max_runtime::Error> { panic!("{message}") })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyModel>()?;
    m.add_function(wrap_pyfunction!(_panic_under_guard, m)?)?;
    m.add_function(wrap_pyfunction!(_lowered_steps, m)?)
}
