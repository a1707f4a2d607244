//! The tuning registry and the launch record, for `max.tuning`: the declarations, the current
//! values, scoped overrides (a context manager holding a max_tuning::Scope) and the recorded
//! launch configurations.

use max_kernels_cuda::launch::record;
use max_tuning::{DECLS, Kind};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// Every entry: (name, environment variable or None, kind, default, doc).
#[pyfunction]
fn _tuning_knobs() -> Vec<(&'static str, Option<&'static str>, String, &'static str, &'static str)> {
    DECLS
        .iter()
        .map(|d| {
            let kind = match d.kind {
                Kind::Flag => "flag".to_string(),
                Kind::Int { min, max, step } => {
                    let max = if max == usize::MAX { String::new() } else { max.to_string() };
                    format!("int {min}..{max} step {step}")
                }
                Kind::OneOf(values) => {
                    format!("one of {}", values.iter().map(|v| v.to_string()).collect::<Vec<_>>().join("|"))
                }
                Kind::Choice(words) => format!("one of {}", words.join("|")),
                Kind::Text => "text".to_string(),
            };
            (d.name, d.env, kind, d.default, d.doc)
        })
        .collect()
}

/// The current value of `name` as text ("" where chosen per problem); ValueError for an
/// unknown name.
#[pyfunction]
fn _tuning_get(name: &str) -> PyResult<String> {
    let knob = max_tuning::Knob::by_name(name)
        .ok_or_else(|| PyValueError::new_err(format!("no setting or tuning knob is called '{name}'")))?;
    Ok(max_tuning::current().value(knob).map(|v| v.to_string()).unwrap_or_default())
}

/// The explicitly set entries as a spec string.
#[pyfunction]
fn _tuning_describe() -> String {
    max_tuning::current().describe()
}

/// An override of the registry, in force between `__enter__` and `__exit__`.
#[pyclass(unsendable, module = "max._core.tuning")]
struct TuningOverride {
    spec: String,
    scope: Option<max_tuning::Scope>,
}

#[pymethods]
impl TuningOverride {
    /// Checks `spec` at once (ValueError naming the bad entry).
    #[new]
    fn new(spec: String) -> PyResult<Self> {
        max_tuning::Tuning::parse(&spec).map_err(PyValueError::new_err)?;
        Ok(TuningOverride { spec, scope: None })
    }

    fn __enter__(mut slf: PyRefMut<'_, Self>) -> PyResult<PyRefMut<'_, Self>> {
        if slf.scope.is_some() {
            return Err(PyRuntimeError::new_err("this tuning override is already in force"));
        }
        let scope = max_tuning::scoped(&slf.spec).map_err(PyValueError::new_err)?;
        slf.scope = Some(scope);
        Ok(slf)
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&mut self, _args: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.scope = None;
        false
    }
}

/// Launch recording on until the returned token is passed to `_launch_recording_stop`.
#[pyclass(unsendable, module = "max._core.tuning")]
struct LaunchRecording {
    guard: Option<record::Recording>,
}

#[pymethods]
impl LaunchRecording {
    #[new]
    fn new() -> Self {
        LaunchRecording { guard: Some(record::start()) }
    }

    fn stop(&mut self) {
        self.guard = None;
    }
}

/// The recorded launches, oldest first: (family, kernel, {field: value}).
#[pyfunction]
fn _launch_records<'py>(py: Python<'py>) -> PyResult<Vec<(&'static str, String, Bound<'py, PyDict>)>> {
    record::records()
        .into_iter()
        .map(|r| {
            let d = PyDict::new(py);
            for (k, v) in &r.config {
                d.set_item(*k, *v)?;
            }
            Ok((r.family, r.kernel, d))
        })
        .collect()
}

#[pyfunction]
fn _launch_records_clear() {
    record::clear();
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_tuning_knobs, m)?)?;
    m.add_function(wrap_pyfunction!(_tuning_get, m)?)?;
    m.add_function(wrap_pyfunction!(_tuning_describe, m)?)?;
    m.add_function(wrap_pyfunction!(_launch_records, m)?)?;
    m.add_function(wrap_pyfunction!(_launch_records_clear, m)?)?;
    m.add_class::<TuningOverride>()?;
    m.add_class::<LaunchRecording>()?;
    Ok(())
}
