//! A loaded model: the lowered program, its constants and weights already on their devices,
//! and a cache of plans keyed by the input shapes. `execute` binds the inputs, picks (or
//! builds) the plan, allocates one arena per device, and runs the steps.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use max_graph::attrs::Attr;
use max_graph::graph::Graph;
use max_graph::{DType, DeviceKind, DeviceRef, OpKind, Type, ValueId};

use super::exec;
use super::passes;
use super::plan::{self, Plan};
use super::program::{Body, Program, StepKind};
use super::shapes::bind_inputs;
use super::workers;
use crate::storage::Storage;

/// Input dtypes and shapes: the key of a model's per-shape plans and CUDA graphs.
type ShapeKey = Vec<(DType, Vec<usize>)>;
use crate::weights::Progress;
use crate::{Buffer, Device, Error, Result, Stream};

pub struct Model {
    pub name: String,
    pub program: Program,
    pub input_types: Vec<Type>,
    pub output_types: Vec<Type>,
    pub devices: Vec<Device>,
    /// Constants and weights, on their devices, by value id.
    pub(crate) fixed: HashMap<ValueId, Buffer>,
    plans: Mutex<HashMap<ShapeKey, Arc<Plan>>>,
    /// CUDA graph state per plan (see cuda_graphs.rs); unused when `use_graphs` is off.
    pub(crate) graphs: Mutex<HashMap<ShapeKey, super::cuda_graphs::GraphState>>,
    use_graphs: bool,
    /// Whether any step runs on the host (and so needs the worker pool); a plan that only
    /// launches GPU kernels runs on the calling thread, saving a hand-off per execution.
    host_work: bool,
    /// Whether every step runs on the host: the pool's workers then stay awake through an
    /// execution (workers::run_awake).
    host_only: bool,
    pub(crate) pool: Arc<rayon::ThreadPool>,
}

/// The session device a graph device refers to.
pub fn resolve_device(devices: &[Device], d: DeviceRef) -> Result<Device> {
    match d.kind {
        DeviceKind::Cpu => Ok(Device::Cpu),
        DeviceKind::Gpu => {
            devices.iter().find(|dev| !dev.is_host() && dev.id() as i64 == d.id).cloned().ok_or_else(|| {
                Error::Value(format!(
                    "the graph uses {d} but the session has no such device (pass it in InferenceSession(devices=[...]))"
                ))
            })
        }
    }
}

fn tensor_device(devices: &[Device], t: &Type) -> Result<Device> {
    match t {
        Type::Tensor(t) | Type::Buffer(t) => resolve_device(devices, t.device),
        Type::Chain => Ok(Device::Cpu),
    }
}

impl Model {
    /// Compiles `graph` for `devices`; `weights` supplies every external constant by name.
    pub fn load(
        graph: &Graph,
        devices: &[Device],
        weights: &HashMap<String, Buffer>,
        threads: Option<usize>,
    ) -> Result<Model> {
        graph.verify().map_err(|e| Error::Value(e.to_string()))?;
        let program = passes::lower(graph);
        super::gpu::prefetch_quant_kernels(&program.body, &program.types, devices);
        let pool = workers::pool(threads)?;
        let mut fixed = HashMap::new();
        // A bar on stderr when moving the weights takes over a second (weights/progress.rs).
        let mut progress = Progress::new("loading weights", external_bytes(&program.body, weights));
        load_fixed(&program, &program.body, devices, weights, &mut fixed, &mut progress)?;
        progress.finish();
        let mut program = program;
        pool.install(|| fold_constants(&mut program, devices, &mut fixed))?;
        passes::mark_early_index(&mut program);
        passes::mark_const_weights(&mut program, &|v| fixed.contains_key(&v));
        // Constants and weights are never written again: kernels may keep forms derived from them.
        for buf in fixed.values() {
            buf.storage().freeze();
        }
        let input_types = graph.inputs().iter().map(|v| program.types[*v].clone()).collect::<Vec<_>>();
        for t in &input_types {
            tensor_device(devices, t)?;
        }
        let output_types = graph.outputs().unwrap_or(&[]).iter().map(|v| program.types[*v].clone()).collect();
        let host_work = has_host_work(&program.body, &program.types);
        let host_only = !touches_gpu(&program.body, &program.types);
        Ok(Model {
            name: graph.name.clone(),
            program,
            input_types,
            output_types,
            devices: devices.to_vec(),
            fixed,
            plans: Mutex::new(HashMap::new()),
            graphs: Mutex::new(HashMap::new()),
            use_graphs: super::cuda_graphs::enabled(),
            host_work,
            host_only,
            pool,
        })
    }

    /// The plan for inputs of these dtypes and shapes (built once per shape tuple).
    pub fn plan_for(&self, given: &[(DType, Vec<usize>)]) -> Result<Arc<Plan>> {
        let key = given.to_vec();
        if let Some(p) = self.plans.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
            return Ok(p.clone());
        }
        let bindings = bind_inputs(&self.input_types, given)?;
        let p = Arc::new(plan::build(&self.program, bindings)?);
        if max_tuning::current().flag_or(max_tuning::Knob::PrintPlan, false) {
            eprintln!("{}", self.describe_plan(&p));
        }
        self.plans.lock().unwrap_or_else(|p| p.into_inner()).insert(key, p.clone());
        Ok(p)
    }

    /// Worker threads the host kernels of this model use.
    pub fn num_threads(&self) -> usize {
        self.pool.current_num_threads()
    }

    pub fn num_cuda_graphs(&self) -> usize {
        let graphs = self.graphs.lock().unwrap_or_else(|p| p.into_inner());
        graphs.values().filter(|g| matches!(g, super::cuda_graphs::GraphState::Ready(_))).count()
    }

    pub fn num_plans(&self) -> usize {
        self.plans.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Runs the model; inputs must be on the devices of the graph's input types.
    pub fn execute(&self, inputs: Vec<Buffer>) -> Result<Vec<Buffer>> {
        self.execute_with(inputs, false)
    }

    /// As `execute`; with `reuse_results`, a replayed CUDA graph returns its own result buffers
    /// (those its steps write; an input or a constant returned as a result is still copied)
    /// instead of fresh copies of them, which the graph's next replay overwrites (stream
    /// ordered): for a caller that queues every use of the results on their devices' streams
    /// before it executes the model again (a decode step's logits, sampled at once), and so
    /// saves a copy of them each step.
    pub fn execute_with(&self, inputs: Vec<Buffer>, reuse_results: bool) -> Result<Vec<Buffer>> {
        for (i, (buf, ty)) in inputs.iter().zip(&self.input_types).enumerate() {
            let want = tensor_device(&self.devices, ty)?;
            if *buf.device() != want {
                return Err(Error::Type(format!(
                    "input {i} is on {}:{} but the graph expects it on {}:{}",
                    buf.device().label(),
                    buf.device().id(),
                    want.label(),
                    want.id()
                )));
            }
        }
        let given: Vec<(DType, Vec<usize>)> = inputs.iter().map(|b| (b.dtype(), b.shape().to_vec())).collect();
        let plan = self.plan_for(&given)?;
        if self.use_graphs
            && self.devices.iter().any(|d| !d.is_host())
            && let Some(outputs) = super::cuda_graphs::execute(self, &given, &plan, &inputs, reuse_results)?
        {
            return Ok(outputs);
        }
        let mut arenas: HashMap<String, Arc<Storage>> = HashMap::new();
        for (key, &size) in &plan.arenas {
            let storage = if key.starts_with("cpu") {
                Storage::host_recycled(size)?
            } else {
                let dev = resolve_device(&self.devices, parse_key(key)?)?;
                let cuda = dev.cuda().ok_or_else(|| Error::Value(format!("{key} is not a GPU")))?;
                Storage::cuda(size, cuda, &cuda.stream)?
            };
            arenas.insert(key.clone(), Arc::new(storage));
        }
        let mut env: HashMap<ValueId, Buffer> = self.fixed.clone();
        for (v, buf) in self.program.body.args.iter().zip(inputs) {
            let buf = if buf.is_contiguous() { buf } else { buf.contiguous()? };
            env.insert(*v, buf);
        }
        let mut state = exec::State {
            model: self,
            plan: &plan,
            arenas: &arenas,
            env,
            bindings: plan.bindings.clone(),
            preset: None,
        };
        if self.host_work
            && plan.elements <= INLINE_ELEMENTS
            && !self.program.body.steps.iter().any(|s| !s.bodies.is_empty())
        {
            // A small plan (an eager op, a few thousand values) runs on the calling thread:
            // handing it to the pool and waiting for it costs more than the work, and its
            // kernels stay below their parallel grain anyway.
            exec::run_body(&mut state, &self.program.body)?;
        } else if self.host_work && self.host_only {
            super::workers::run_awake(&self.pool, || exec::run_body(&mut state, &self.program.body))?;
        } else if self.host_work {
            self.pool.install(|| exec::run_body(&mut state, &self.program.body))?;
        } else {
            exec::run_body(&mut state, &self.program.body)?;
        }
        self.program
            .body
            .results
            .iter()
            .map(|v| {
                let b = state.env.get(v).ok_or_else(|| Error::Value(format!("output %{v} was not computed")))?;
                // Constants, weights and inputs (or views of them) returned as outputs are
                // copied: the caller must not be able to change the model's own data or see
                // later writes to its input.
                let shared = |other: &Buffer| Arc::ptr_eq(other.storage(), b.storage());
                let aliased = self.fixed.values().any(shared)
                    || self.program.body.args.iter().filter_map(|a| state.env.get(a)).any(shared);
                if aliased { b.contiguous() } else { Ok(b.clone()) }
            })
            .collect()
    }

    /// Shape, dtype and device of the values of one plan, for the plan report.
    pub fn describe_plan(&self, plan: &Plan) -> String {
        let mut out = format!("plan for {} with {:?}\n", self.name, plan.bindings.0);
        describe_body(&self.program, &self.program.body, plan, &self.fixed, 1, &mut out);
        out.push_str(&plan.report);
        out
    }
}

/// The GPU a layout step (transpose, permute) of fixed values runs on at load: every input and
/// result on that one GPU.
fn device_layout_fold(
    step: &super::program::Step,
    shapes: &[(Vec<usize>, DType, Device)],
    inputs: &[&Buffer],
) -> Option<Arc<crate::cuda::CudaDevice>> {
    let StepKind::Op(op) = &step.kind else { return None };
    if !matches!(op.kind, OpKind::Transpose | OpKind::Permute) {
        return None;
    }
    let dev = shapes.first()?.2.cuda()?.clone();
    let here = |d: &Device| d.cuda().is_some_and(|c| c.ordinal == dev.ordinal);
    (shapes.iter().all(|(_, _, d)| here(d)) && inputs.iter().all(|b| here(b.device()))).then_some(dev)
}

/// A slice copies its piece of the input: one of a host weight folds at any size (a
/// tensor-parallel piece of a whole weight, python/max/graph/sharding.py).
fn is_slice(step: &super::program::Step) -> bool {
    matches!(&step.kind, StepKind::Op(op) if op.kind == OpKind::Slice)
}

/// Plans of at most this many elements (every value with a known shape) run on the calling
/// thread instead of the worker pool.
const INLINE_ELEMENTS: usize = 1 << 14;

/// Largest result (in elements) constant folding may create on the host; bigger ones stay in
/// the plan (except layout steps on a GPU, see `device_layout_fold`).
const FOLD_LIMIT: usize = 1 << 22;

/// Constant folding: a top-level step whose inputs are all constants or weights runs once, on
/// the host, at load; its results become fixed values and the step leaves the program. This is
/// also how weight transforms (a transpose or cast of a weight) happen once instead of per call.
fn fold_constants(program: &mut Program, devices: &[Device], fixed: &mut HashMap<ValueId, Buffer>) -> Result<()> {
    let steps = std::mem::take(&mut program.body.steps);
    let mut kept = Vec::with_capacity(steps.len());
    for step in steps {
        let foldable = step.bodies.is_empty()
            && !step.inputs.is_empty()
            && step.inputs.iter().all(|v| fixed.contains_key(v))
            && match &step.kind {
                // (a product with a KV-cache store folded in stores into the cache)
                StepKind::Gemm(g) => g.rope_store.is_none(),
                StepKind::Fused(_) | StepKind::Conv(_) => true,
                StepKind::Op(op) => !matches!(
                    op.kind,
                    OpKind::Constant
                        | OpKind::ConstantExternal
                        | OpKind::ChainCreate
                        | OpKind::Print
                        | OpKind::BufferCreate
                        | OpKind::BufferLoad
                        | OpKind::BufferStore
                        | OpKind::BufferStoreSlice
                        | OpKind::KvCacheStore
                        | OpKind::PagedAttention
                        | OpKind::Cond
                        | OpKind::WhileLoop
                        | OpKind::Call
                        | OpKind::NonZero
                ),
            };
        let shapes: Option<Vec<(Vec<usize>, DType, Device)>> = step
            .outputs
            .iter()
            .map(|v| match &program.types[*v] {
                Type::Tensor(t) => {
                    let shape: Option<Vec<usize>> = t.shape.iter().map(|d| d.as_static().map(|n| n as usize)).collect();
                    let device = resolve_device(devices, t.device).ok()?;
                    shape.map(|s| (s, t.dtype, device))
                }
                _ => None,
            })
            .collect();
        let (true, Some(shapes)) = (foldable, shapes) else {
            kept.push(step);
            continue;
        };
        // A transfer of a weight (a tensor-parallel piece going to its device) happens once,
        // at load, whatever its size.
        if let (StepKind::Op(op), [(_, _, dev)]) = (&step.kind, shapes.as_slice())
            && op.kind == OpKind::TransferTo
        {
            match fixed[&step.inputs[0]].to(dev).and_then(|b| b.with_stream(&Stream::default_for(dev))) {
                Ok(b) => {
                    fixed.insert(step.outputs[0], b);
                }
                Err(_) => kept.push(step),
            }
            continue;
        }
        // A weight's transpose on a GPU (a Linear's W^T) is folded there, whatever its size: no
        // trip through the host, and no per-call transpose of a large weight.
        if let Some(dev) =
            device_layout_fold(&step, &shapes, &step.inputs.iter().map(|v| &fixed[v]).collect::<Vec<_>>())
        {
            let bufs = (|| -> Result<Vec<Buffer>> {
                let inputs: Vec<Buffer> = step.inputs.iter().map(|v| fixed[v].clone()).collect();
                let outputs: Vec<Buffer> = shapes
                    .iter()
                    .map(|(s, d, dv)| Buffer::empty(*d, &s.iter().map(|x| *x as i64).collect::<Vec<_>>(), dv))
                    .collect::<Result<_>>()?;
                super::gpu::run(&dev, &program.types, &step, &inputs, &outputs)?;
                Ok(outputs)
            })();
            match bufs {
                Ok(bufs) => {
                    for (v, b) in step.outputs.iter().zip(bufs) {
                        fixed.insert(*v, b);
                    }
                }
                Err(_) => kept.push(step),
            }
            continue;
        }
        let host_slice = is_slice(&step) && fixed[&step.inputs[0]].device().is_host();
        if !host_slice && shapes.iter().any(|(s, _, _)| s.iter().product::<usize>() > FOLD_LIMIT) {
            kept.push(step);
            continue;
        }
        let folded = (|| -> Result<Vec<Buffer>> {
            let inputs: Vec<Buffer> = step.inputs.iter().map(|v| fixed[v].to(&Device::Cpu)).collect::<Result<_>>()?;
            let outputs: Vec<Buffer> = shapes
                .iter()
                .map(|(s, d, _)| Buffer::empty(*d, &s.iter().map(|x| *x as i64).collect::<Vec<_>>(), &Device::Cpu))
                .collect::<Result<_>>()?;
            super::exec::run_host_kernel(&program.types, &step, &inputs, &outputs)?;
            outputs
                .iter()
                .zip(&shapes)
                .map(|(b, (_, _, dev))| b.to(dev)?.with_stream(&Stream::default_for(dev)))
                .collect()
        })();
        match folded {
            Ok(bufs) => {
                for (v, b) in step.outputs.iter().zip(bufs) {
                    fixed.insert(*v, b);
                }
            }
            // A kernel that cannot run here fails the same way at execution; keep the step.
            Err(_) => kept.push(step),
        }
    }
    program.body.steps = kept;
    // Constants that only fed folded steps are no longer needed.
    super::passes::dce(&mut program.body);
    let mut used: std::collections::HashSet<ValueId> = program.body.results.iter().copied().collect();
    super::passes::free_uses(std::slice::from_ref(&program.body), &mut used);
    fixed.retain(|v, _| used.contains(v));
    Ok(())
}

fn has_host_work(body: &Body, types: &[Type]) -> bool {
    body.steps.iter().any(|s| {
        !s.bodies.is_empty()
            || s.outputs.iter().any(|v| !matches!(&types[*v], Type::Tensor(t) if t.device.kind == DeviceKind::Gpu))
    })
}

fn touches_gpu(body: &Body, types: &[Type]) -> bool {
    body.steps.iter().any(|s| {
        s.bodies.iter().any(|b| touches_gpu(b, types))
            || s.inputs
                .iter()
                .chain(&s.outputs)
                .any(|v| matches!(&types[*v], Type::Tensor(t) | Type::Buffer(t) if t.device.kind == DeviceKind::Gpu))
    })
}

pub(crate) fn parse_key(key: &str) -> Result<DeviceRef> {
    let (kind, id) = key.split_once(':').ok_or_else(|| Error::Value(format!("bad device key {key}")))?;
    let id: i64 = id.parse().map_err(|_| Error::Value(format!("bad device key {key}")))?;
    Ok(DeviceRef { kind: if kind == "cpu" { DeviceKind::Cpu } else { DeviceKind::Gpu }, id })
}

fn describe_body(
    program: &Program,
    body: &Body,
    plan: &Plan,
    fixed: &HashMap<ValueId, Buffer>,
    depth: usize,
    out: &mut String,
) {
    let pad = "  ".repeat(depth);
    for step in &body.steps {
        let outs: Vec<String> = step
            .outputs
            .iter()
            .map(|v| {
                let where_ = match plan.slots.get(v) {
                    _ if fixed.contains_key(v) => "loaded".into(),
                    Some(plan::Slot::Arena(o)) => format!("arena+{o}"),
                    Some(plan::Slot::View) => "view".into(),
                    _ => "own".into(),
                };
                let shape = plan.shapes.get(v).map(|s| format!("{s:?}")).unwrap_or_else(|| "dynamic".into());
                format!(
                    "%{v} {} {shape} @{where_}",
                    match &program.types[*v] {
                        Type::Tensor(t) | Type::Buffer(t) => t.dtype.to_string(),
                        Type::Chain => "chain".into(),
                    }
                )
            })
            .collect();
        out.push_str(&format!("{pad}{} -> {}\n", step.name(), outs.join(", ")));
        for inner in &step.bodies {
            describe_body(program, inner, plan, fixed, depth + 1, out);
        }
    }
}

/// Bytes of the registry's weights that the graph uses, for the progress bar.
fn external_bytes(body: &Body, weights: &HashMap<String, Buffer>) -> u64 {
    let mut total = 0u64;
    for step in &body.steps {
        total += step.bodies.iter().map(|b| external_bytes(b, weights)).sum::<u64>();
        if let StepKind::Op(op) = &step.kind
            && op.kind == OpKind::ConstantExternal
            && let Some(Attr::Str(name)) = op.attrs.get("name")
        {
            total += weights.get(name).map_or(0, |w| w.nbytes() as u64);
        }
    }
    total
}

/// Materialises constants (from their attribute bytes) and weights (from the registry) on
/// their devices, checking every weight's presence, dtype and shape.
fn load_fixed(
    program: &Program,
    body: &Body,
    devices: &[Device],
    weights: &HashMap<String, Buffer>,
    fixed: &mut HashMap<ValueId, Buffer>,
    progress: &mut Progress,
) -> Result<()> {
    for step in &body.steps {
        for inner in &step.bodies {
            load_fixed(program, inner, devices, weights, fixed, progress)?;
        }
        let StepKind::Op(op) = &step.kind else {
            continue;
        };
        let ty = match step.outputs.first().map(|v| &program.types[*v]) {
            Some(Type::Tensor(t)) => t,
            _ => continue,
        };
        let device = resolve_device(devices, ty.device)?;
        let static_shape = || -> Result<Vec<usize>> {
            ty.shape
                .iter()
                .map(|d| {
                    d.as_static()
                        .map(|n| n as usize)
                        .ok_or_else(|| Error::Value(format!("{} has a symbolic shape", op.kind.name())))
                })
                .collect()
        };
        let buf = match op.kind {
            OpKind::Constant => {
                let Some(Attr::Data(data)) = op.attrs.get("data") else {
                    return Err(Error::Value("constant without data".into()));
                };
                let shape = static_shape()?;
                let host = Buffer::empty(ty.dtype, &shape.iter().map(|d| *d as i64).collect::<Vec<_>>(), &Device::Cpu)?;
                if data.len() != host.nbytes() {
                    return Err(Error::Value(format!(
                        "constant data has {} bytes, expected {}",
                        data.len(),
                        host.nbytes()
                    )));
                }
                // SAFETY: the fresh host buffer holds exactly data.len() bytes.
                unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), host.addr() as *mut u8, data.len()) };
                host.to(&device)?
            }
            OpKind::ConstantExternal => {
                let Some(Attr::Str(name)) = op.attrs.get("name") else {
                    return Err(Error::Value("constant_external without a name".into()));
                };
                let w = weights.get(name).ok_or_else(|| {
                    let mut known: Vec<&String> = weights.keys().collect();
                    known.sort();
                    let hint = known.iter().take(8).map(|s| s.as_str()).collect::<Vec<_>>().join(", ");
                    Error::Value(format!("weight {name:?} is missing from weights_registry (it has: {hint})"))
                })?;
                let shape = static_shape()?;
                if w.dtype() != ty.dtype || w.shape() != shape.as_slice() {
                    return Err(Error::Value(format!(
                        "weight {name:?}: the graph expects {} {:?} but weights_registry has {} {:?}",
                        ty.dtype,
                        shape,
                        w.dtype(),
                        w.shape()
                    )));
                }
                let w = if w.is_contiguous() { w.clone() } else { w.contiguous()? };
                let moved = w.to(&device)?;
                progress.advance(w.nbytes() as u64);
                moved
            }
            _ => continue,
        };
        let buf = buf.with_stream(&Stream::default_for(&device))?;
        fixed.insert(step.outputs[0], buf);
    }
    Ok(())
}
