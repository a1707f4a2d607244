//! CUDA graphs: a plan whose work all runs on one GPU, with static shapes and no host round
//! trips, is captured into a CUDA graph on its second execution (the first, ordinary one has
//! compiled and loaded its kernels) and replayed from then on — one launch instead of one per
//! step, which is most of the time of a small model.
//!
//! A graph bakes in every address it touches, so a captured plan owns its memory: an arena,
//! staging buffers for the inputs and buffers for the results. A replay copies the caller's
//! inputs into the staging buffers, launches the graph and copies the results into fresh
//! buffers for the caller (all stream-ordered on the device's stream). Kernels that need the
//! host (index checks read back to the host, data-dependent shapes) make the capture fail; the
//! plan then runs step by step for good. The staging copies cost what moving the inputs and
//! results once more costs, so only plans whose launches outweigh that are captured (see
//! `worth_it`). `MAX_CUDA_GRAPHS=off` turns capture off, `MAX_CUDA_GRAPHS=always` drops the
//! cost test.
//!
//! Mutable buffer inputs (a KV cache the graph writes in place) are not staged: the graph
//! addresses the caller's buffer itself, and a replay checks that the caller passed a buffer at
//! the same address (a decode loop passes the same cache every step); another address captures
//! again. A model keeps at most `MAX_CAPTURED` graphs, so a stream of prompt lengths does not
//! hold one arena per length.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::driver::CudaGraph;
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use max_graph::{DeviceKind, OpKind, Type, ValueId};

use super::exec;
use super::model::Model;
use super::plan::{Plan, Slot};
use super::program::StepKind;
use crate::cuda::CudaDevice;
use crate::storage::Storage;
use crate::{Buffer, Device, Error, Result};

/// What the model knows about capturing one plan.
pub(crate) enum GraphState {
    /// Ran once step by step; the next execution captures.
    Warm,
    /// Not capturable (or capture failed): always runs step by step.
    Stepwise,
    Ready(Arc<Mutex<Captured>>),
}

/// Captured graphs a model keeps (one per input shape key); past this, new keys run step by step.
const MAX_CAPTURED: usize = 8;

pub(crate) struct Captured {
    graph: CudaGraph,
    dev: Arc<CudaDevice>,
    /// Per input, in input order: the staging buffer the graph reads a tensor input from, or
    /// the address of a buffer input the graph uses in place.
    inputs: Vec<Input>,
    /// Where each result is when a replay finishes.
    results: Vec<Buffer>,
    /// Memory the graph's kernels address; kept alive with the graph.
    _arenas: HashMap<String, Arc<Storage>>,
}

enum Input {
    Staged(Buffer),
    InPlace(u64),
}

// SAFETY: the graph handles are only used under the Mutex that owns a Captured, with the
// device's context bound by cudarc on each call.
unsafe impl Send for Captured {}

pub(crate) fn enabled() -> bool {
    max_tuning::current().choice(max_tuning::Knob::CudaGraphs) != Some("off")
}

fn gpu_of(model: &Model, ty: &Type) -> Option<Arc<CudaDevice>> {
    let (Type::Tensor(t) | Type::Buffer(t)) = ty else { return None };
    if t.device.kind != DeviceKind::Gpu {
        return None;
    }
    model.devices.iter().find_map(|d| match d {
        Device::Cuda(c) if c.ordinal as i64 == t.device.id => Some(c.clone()),
        _ => None,
    })
}

/// The GPU a plan runs on, when every input, result and step of it lives there with a static
/// shape and a home in the arena (so a capture allocates nothing that outlives it).
fn capturable(model: &Model, plan: &Plan) -> Option<Arc<CudaDevice>> {
    let body = &model.program.body;
    let dev = gpu_of(model, model.input_types.first().or(model.output_types.first())?)?;
    let same = |ty: &Type| gpu_of(model, ty).is_some_and(|d| d.ordinal == dev.ordinal);
    if !model.input_types.iter().chain(&model.output_types).all(same) {
        return None;
    }
    for step in &body.steps {
        if !step.bodies.is_empty() {
            return None;
        }
        if let StepKind::Op(op) = &step.kind {
            let host_bound = matches!(
                op.kind,
                OpKind::Print
                    | OpKind::NonZero
                    | OpKind::TransferTo
                    | OpKind::BufferCreate
                    | OpKind::BufferLoad
                    | OpKind::BufferStore
                    | OpKind::BufferStoreSlice
                    | OpKind::Call
            );
            // Collectives make their NCCL communicator on first use and hand an event per
            // stream to their watchdog: they run step by step.
            if host_bound || op.kind.family() == max_graph::ops::Family::Collective {
                return None;
            }
            if matches!(op.kind, OpKind::Constant | OpKind::ConstantExternal) {
                continue;
            }
        }
        for v in &step.outputs {
            // A chain orders effects; it holds no data and runs no device work.
            if matches!(model.program.types[*v], Type::Chain) {
                continue;
            }
            let placed =
                matches!(plan.slots.get(v), Some(Slot::Arena(_)) | Some(Slot::View)) || body.results.contains(v);
            if !same(&model.program.types[*v]) || !plan.shapes.contains_key(v) || !placed {
                return None;
            }
        }
    }
    Some(dev)
}

/// Launch overhead saved (a few microseconds per step) against the staging copies (inputs
/// and results moved once more at ~1.5 TB/s, read plus write): capture when the copies cost at
/// most about a quarter of the launches saved, i.e. up to ~1 MiB of inputs and results per step.
fn worth_it(model: &Model, plan: &Plan, inputs: &[Buffer]) -> bool {
    if max_tuning::current().choice(max_tuning::Knob::CudaGraphs) == Some("always") {
        return true;
    }
    let body = &model.program.body;
    let steps = body
        .steps
        .iter()
        .filter(
            |s| !matches!(&s.kind, StepKind::Op(op) if matches!(op.kind, OpKind::Constant | OpKind::ConstantExternal)),
        )
        .count();
    let result_bytes: usize = body
        .results
        .iter()
        .map(|v| match (&model.program.types[*v], plan.shapes.get(v)) {
            (Type::Tensor(t), Some(s)) => s.iter().product::<usize>() * t.dtype.size_in_bytes(),
            _ => 0,
        })
        .sum();
    let input_bytes: usize =
        inputs.iter().zip(&model.input_types).filter(|(_, ty)| !in_place(ty)).map(|(b, _)| b.nbytes()).sum();
    input_bytes + result_bytes <= steps << 20
}

/// A buffer input: the graph reads and writes the caller's buffer rather than a staged copy.
fn in_place(ty: &Type) -> bool {
    matches!(ty, Type::Buffer(_))
}

fn fresh_like(b: &Buffer) -> Result<Buffer> {
    let shape: Vec<i64> = b.shape().iter().map(|&d| d as i64).collect();
    Buffer::empty(b.dtype(), &shape, b.device())
}

fn capture(model: &Model, plan: &Plan, inputs: &[Buffer], dev: &Arc<CudaDevice>) -> Result<Captured> {
    let device = Device::Cuda(dev.clone());
    let body = &model.program.body;
    let mut arenas = HashMap::new();
    for (key, &size) in &plan.arenas {
        arenas.insert(key.clone(), Arc::new(Storage::cuda(size, dev, &dev.stream)?));
    }
    let mut staged = Vec::with_capacity(inputs.len());
    let mut bound = Vec::with_capacity(inputs.len());
    for (i, ty) in inputs.iter().zip(&model.input_types) {
        if in_place(ty) && i.is_contiguous() {
            staged.push(Input::InPlace(i.addr()));
            bound.push(i.clone());
        } else {
            let s = fresh_like(i)?;
            s.inplace_copy_from(i)?;
            staged.push(Input::Staged(s.clone()));
            bound.push(s);
        }
    }
    let mut preset = HashMap::new();
    for step in &body.steps {
        for v in step.outputs.iter().filter(|v| body.results.contains(v)) {
            let (Some(shape), Type::Tensor(t)) = (plan.shapes.get(v), &model.program.types[*v]) else {
                return Err(Error::Value("a graph result has no static shape".into()));
            };
            let shape: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
            preset.insert(*v, Buffer::empty(t.dtype, &shape, &device)?);
        }
    }
    let mut env: HashMap<ValueId, Buffer> = model.fixed.clone();
    for (v, b) in body.args.iter().zip(bound) {
        env.insert(*v, b);
    }
    let mut state =
        exec::State { model, plan, arenas: &arenas, env, bindings: plan.bindings.clone(), preset: Some(&preset) };
    dev.bind()?;
    dev.stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .map_err(Error::cuda("cuStreamBeginCapture"))?;
    let scope = crate::cuda::CaptureScope::enter();
    let ran = exec::run_body(&mut state, body);
    drop(scope);
    // Capture always ends, also after an error, so the stream is usable again.
    let ended = dev.stream.end_capture(CUgraphInstantiate_flags(0)).map_err(Error::cuda("cuStreamEndCapture"));
    ran?;
    let graph = ended?.ok_or_else(|| Error::Value("the captured CUDA graph is empty".into()))?;
    let results = body
        .results
        .iter()
        .map(|v| state.env.get(v).cloned().ok_or_else(|| Error::Value(format!("output %{v} was not computed"))))
        .collect::<Result<_>>()?;
    Ok(Captured { graph, dev: dev.clone(), inputs: staged, results, _arenas: arenas })
}

/// Whether the caller's in-place buffers are the ones the graph was captured with.
fn same_buffers(c: &Captured, inputs: &[Buffer]) -> bool {
    c.inputs.iter().zip(inputs).all(|(s, i)| match s {
        Input::InPlace(addr) => i.is_contiguous() && i.addr() == *addr,
        Input::Staged(_) => true,
    })
}

fn replay(c: &Captured, inputs: &[Buffer]) -> Result<Vec<Buffer>> {
    for (s, i) in c.inputs.iter().zip(inputs) {
        if let Input::Staged(s) = s {
            if i.is_contiguous() { s.inplace_copy_from(i)? } else { s.inplace_copy_from(&i.contiguous()?)? }
        }
    }
    c.dev.bind()?;
    c.graph.launch().map_err(Error::cuda("cuGraphLaunch"))?;
    c.results
        .iter()
        .map(|r| {
            let out = fresh_like(r)?;
            out.inplace_copy_from(r)?;
            Ok(out)
        })
        .collect()
}

/// Runs `plan` through a CUDA graph when it can; `None` means: run it step by step.
pub(crate) fn execute(
    model: &Model,
    key: &[(max_graph::DType, Vec<usize>)],
    plan: &Plan,
    inputs: &[Buffer],
) -> Result<Option<Vec<Buffer>>> {
    let mut graphs = model.graphs.lock().unwrap_or_else(|p| p.into_inner());
    let ready = match graphs.get(key) {
        None => {
            let next = if capturable(model, plan).is_some() && worth_it(model, plan, inputs) {
                GraphState::Warm
            } else {
                GraphState::Stepwise
            };
            graphs.insert(key.to_vec(), next);
            return Ok(None);
        }
        Some(GraphState::Stepwise) => return Ok(None),
        Some(GraphState::Ready(c)) if same_buffers(&c.lock().unwrap_or_else(|p| p.into_inner()), inputs) => c.clone(),
        Some(GraphState::Ready(_)) | Some(GraphState::Warm) => {
            let captured = graphs.values().filter(|g| matches!(g, GraphState::Ready(_))).count();
            let replacing = matches!(graphs.get(key), Some(GraphState::Ready(_)));
            let dev = capturable(model, plan).filter(|_| replacing || captured < MAX_CAPTURED);
            let Some(dev) = dev else {
                graphs.insert(key.to_vec(), GraphState::Stepwise);
                return Ok(None);
            };
            match capture(model, plan, inputs, &dev) {
                Ok(c) => {
                    let c = Arc::new(Mutex::new(c));
                    graphs.insert(key.to_vec(), GraphState::Ready(c.clone()));
                    c
                }
                Err(_) => {
                    graphs.insert(key.to_vec(), GraphState::Stepwise);
                    return Ok(None);
                }
            }
        }
    };
    drop(graphs);
    let c = ready.lock().unwrap_or_else(|p| p.into_inner());
    replay(&c, inputs).map(Some)
}
