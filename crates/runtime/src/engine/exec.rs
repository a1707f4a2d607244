//! Running a plan: the step loop, output allocation (arena views or own buffers), and control
//! flow. Kernels are chosen per step from the op and the device of its result.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use max_graph::{Attr, Dim, Op, OpKind, Type, ValueId};

use super::model::{Model, resolve_device};
use super::plan::{Plan, Slot};
use super::program::{Body, GemmEpilogue, Step, StepKind};
use super::shapes::Bindings;
use crate::storage::Storage;
use crate::{Buffer, Device, Error, Result, Stream, cpu};

pub(crate) struct State<'a> {
    pub model: &'a Model,
    pub plan: &'a Plan,
    pub arenas: &'a HashMap<String, Arc<Storage>>,
    pub env: HashMap<ValueId, Buffer>,
    /// The plan's bindings plus the symbols that data-dependent ops (nonzero's count) bound
    /// during this execution; shapes not in `plan.shapes` are evaluated under these.
    pub bindings: Bindings,
    /// Buffers chosen in advance for some results (a CUDA graph capture's fixed outputs).
    pub preset: Option<&'a HashMap<ValueId, Buffer>>,
}

fn device_of(model: &Model, ty: &Type) -> Result<Device> {
    match ty {
        Type::Tensor(t) | Type::Buffer(t) => resolve_device(&model.devices, t.device),
        Type::Chain => Ok(Device::Cpu),
    }
}

/// A buffer for result `v` of shape `shape`: a view of the arena when the plan placed it
/// there, else a fresh allocation.
pub(crate) fn output(state: &State, v: ValueId, shape: &[usize]) -> Result<Buffer> {
    let ty = &state.model.program.types[v];
    let t = match ty {
        Type::Tensor(t) | Type::Buffer(t) => t,
        Type::Chain => return Buffer::empty(max_graph::DType::Bool, &[0], &Device::Cpu),
    };
    if let Some(b) = state.preset.and_then(|p| p.get(&v))
        && b.shape() == shape
    {
        return Ok(b.clone());
    }
    let device = device_of(state.model, ty)?;
    if let Some(Slot::Arena(offset)) = state.plan.slots.get(&v)
        && let Some(arena) = state.arenas.get(&t.device.to_string())
    {
        return Ok(Buffer::in_storage(arena, *offset, t.dtype, shape.to_vec(), Stream::default_for(&device)));
    }
    Buffer::for_result(t.dtype, &shape.iter().map(|d| *d as i64).collect::<Vec<_>>(), &device)
}

pub(crate) fn shape_of(state: &State, v: ValueId) -> Result<Vec<usize>> {
    if let Some(s) = state.plan.shapes.get(&v) {
        return Ok(s.clone());
    }
    match &state.model.program.types[v] {
        Type::Tensor(t) | Type::Buffer(t) => state
            .bindings
            .eval(&t.shape)?
            .ok_or_else(|| Error::Value(format!("the shape of %{v} is not known before it is computed"))),
        Type::Chain => Ok(vec![0]),
    }
}

/// `op` with the symbolic dims of its attributes (slice bounds, split sizes, ...) evaluated
/// under the plan's bindings, so kernels read numbers; borrowed as is when it has none.
fn with_dims_bound<'o>(op: &'o Op, b: &Bindings) -> Result<Cow<'o, Op>> {
    let symbolic = |a: &Attr| matches!(a, Attr::Dims(v) if v.iter().any(|d| !d.is_static()));
    if !op.attrs.0.values().any(symbolic) {
        return Ok(Cow::Borrowed(op));
    }
    let mut op = op.clone();
    for a in op.attrs.0.values_mut() {
        if let Attr::Dims(v) = a {
            for d in v.iter_mut().filter(|d| !d.is_static()) {
                let value = d.evaluate(&|s| b.get(s)).map_err(|e| Error::Value(e.to_string()))?;
                if let Some(n) = value {
                    *d = Dim::stat(n);
                }
            }
        }
    }
    Ok(Cow::Owned(op))
}

pub(crate) fn run_body(state: &mut State, body: &Body) -> Result<()> {
    for step in &body.steps {
        run_step(state, step)?;
    }
    Ok(())
}

fn run_step(state: &mut State, step: &Step) -> Result<()> {
    if let StepKind::Op(op) = &step.kind {
        match op.kind {
            OpKind::Constant | OpKind::ConstantExternal => return Ok(()),
            OpKind::ChainCreate => {
                let chain = output(state, step.outputs[0], &[0])?;
                state.env.insert(step.outputs[0], chain);
                return Ok(());
            }
            _ => {}
        }
    }
    let inputs: Vec<Buffer> = step
        .inputs
        .iter()
        .map(|v| {
            state
                .env
                .get(v)
                .cloned()
                .ok_or_else(|| Error::Value(format!("{}: input %{v} is not available", step.name())))
        })
        .collect::<Result<_>>()?;
    // Kernels read numbers: symbolic dims in attributes take their values now.
    let bound_step;
    let step = match &step.kind {
        StepKind::Op(op) => match with_dims_bound(op, &state.bindings)? {
            Cow::Owned(op) => {
                bound_step = Step { kind: StepKind::Op(op), ..step.clone() };
                &bound_step
            }
            Cow::Borrowed(_) => step,
        },
        StepKind::Fused(_) | StepKind::Gemm(_) | StepKind::Conv(_) => step,
    };
    if step.outputs.first().and_then(|v| state.plan.slots.get(v)) == Some(&Slot::View) && inputs[0].is_contiguous() {
        if let StepKind::Op(op) = &step.kind
            && op.kind == OpKind::Rebind
        {
            // rebind still checks the shape at run time
            super::control::run(state, step, op, &inputs)?;
        }
        let view = inputs[0].reshaped(shape_of(state, step.outputs[0])?)?;
        state.env.insert(step.outputs[0], view);
        return Ok(());
    }
    if let StepKind::Op(op) = &step.kind
        && let Some(outs) = super::control::run(state, step, op, &inputs)?
    {
        for (v, b) in step.outputs.iter().zip(outs) {
            state.env.insert(*v, b);
        }
        return Ok(());
    }
    // A data-dependent op whose result shape is not known yet (nonzero with an unbound count
    // symbol) allocates its result itself; see run_dynamic_step.
    if let StepKind::Op(op) = &step.kind
        && super::host_dispatch::data_dependent(op.kind)
        && step.outputs.iter().any(|v| shape_of(state, *v).is_err())
    {
        return run_dynamic_step(state, step, op, &inputs);
    }
    let outputs: Vec<Buffer> =
        step.outputs.iter().map(|&v| output(state, v, &shape_of(state, v)?)).collect::<Result<_>>()?;
    let device = step_device(state, step)?;
    match &device {
        Device::Cpu => {
            // A transfer to the host reads its device input; the kernel needs it on the host.
            let inputs: Vec<Buffer> = inputs.iter().map(|b| b.to(&Device::Cpu)).collect::<Result<_>>()?;
            run_host_kernel(&state.model.program.types, step, &inputs, &outputs)?
        }
        // A collective's inputs and results are on several GPUs: it runs on all of them.
        Device::Cuda(_) if is_collective(step) => super::gpu::collective::run(step, &inputs, &outputs)?,
        Device::Cuda(dev) => {
            // Chains carry no data: they stay where they are (no allocation, capturable).
            // A transfer copies from the other device straight into its result.
            let types = &state.model.program.types;
            let transfer = matches!(&step.kind, StepKind::Op(op) if op.kind == OpKind::TransferTo);
            let inputs: Vec<Buffer> = inputs
                .iter()
                .zip(&step.inputs)
                .map(|(b, v)| {
                    if matches!(types[*v], Type::Chain) || transfer || b.device() == &device {
                        return Ok(b.clone());
                    }
                    // A copy made here would not outlive a CUDA graph.
                    crate::cuda::forbid_in_capture("a step reading a value of another device")?;
                    b.to(&device)
                })
                .collect::<Result<_>>()?;
            super::gpu::run(dev, &state.model.program.types, step, &inputs, &outputs)?
        }
    }
    for (v, b) in step.outputs.iter().zip(outputs) {
        state.env.insert(*v, b);
    }
    Ok(())
}

fn is_collective(step: &Step) -> bool {
    matches!(&step.kind, StepKind::Op(op) if op.kind.family() == max_graph::ops::Family::Collective)
}

/// Where a step runs: the device of its first tensor result or, for a step whose results are
/// only chains (a store into a buffer), of its first buffer or tensor input.
fn step_device(state: &State, step: &Step) -> Result<Device> {
    let types = &state.model.program.types;
    let tensor = |v: &ValueId| !matches!(types[*v], Type::Chain);
    match step.outputs.iter().find(|v| tensor(v)).or_else(|| step.inputs.iter().find(|v| tensor(v))) {
        Some(&v) => device_of(state.model, &types[v]),
        None => Ok(Device::Cpu),
    }
}

/// Runs a data-dependent op on the host: its kernel allocates the results and reports the
/// values of the symbols they introduce, which are bound for the rest of the execution (a
/// conflicting earlier binding is an error). Results go to their value's device afterwards.
fn run_dynamic_step(state: &mut State, step: &Step, op: &max_graph::ops::Op, inputs: &[Buffer]) -> Result<()> {
    let inputs: Vec<Buffer> = inputs.iter().map(|b| b.to(&Device::Cpu)).collect::<Result<_>>()?;
    let (outputs, bound) = super::host_dispatch::run_dynamic(op, &inputs)?;
    for (name, value) in bound {
        state.bindings.bind(&name, value, &format!("the result of {}", op.kind.name()))?;
    }
    for (v, b) in step.outputs.iter().zip(outputs) {
        let device = device_of(state.model, &state.model.program.types[*v])?;
        state.env.insert(*v, b.to(&device)?);
    }
    Ok(())
}

/// Runs one step's host kernel on host buffers (also used to fold constants at load).
pub(crate) fn run_host_kernel(types: &[Type], step: &Step, inputs: &[Buffer], outputs: &[Buffer]) -> Result<()> {
    match &step.kind {
        StepKind::Fused(f) => cpu::elementwise::run(f, inputs, &outputs[0]),
        StepKind::Op(op) if crate::engine::program::fusible(op.kind) => {
            let ty = &types[step.outputs[0]];
            cpu::elementwise::run(&crate::shared::Fused::single(op, ty, inputs.len()), inputs, &outputs[0])
        }
        StepKind::Op(op) => super::host_dispatch::run_cpu(op, inputs, outputs),
        StepKind::Gemm(g @ GemmEpilogue { rope_store: Some(store), .. }) => {
            // the products, then the store (with its ropes) through their outputs
            let missing = || Error::Value(format!("{}: missing inputs or outputs", g.name()));
            let (pin, pout) = (inputs.len().checked_sub(5).ok_or_else(missing)?, outputs.len().checked_sub(2));
            let pout = pout.filter(|&p| p >= 3).ok_or_else(missing)?;
            let product = Step { kind: StepKind::Gemm(GemmEpilogue { rope_store: None, ..g.clone() }), ..step.clone() };
            run_host_kernel(types, &product, &inputs[..pin], &outputs[..pout])?;
            let [chain, blocks, slots, freqs, positions] = &inputs[pin..] else { return Err(missing()) };
            // (the products' outputs as the store sees them: q as rope(q), k and v as cache rows)
            let c = max_graph::ops::attention::CacheLayout::from_shape(blocks.shape()).map_err(Error::Value)?;
            let kv = vec![slots.num_elements(), c.kv_heads, c.head_dim];
            let q = outputs[0].reshaped(outputs[pout + 1].shape().to_vec())?;
            let (kk, v) = (outputs[1].reshaped(kv.clone())?, outputs[2].reshaped(kv)?);
            let store_in = [chain, blocks, &kk, &v, slots, &q, freqs, positions].map(|b| b.clone());
            super::host_dispatch::run_cpu(store, &store_in, &outputs[pout..])
        }
        StepKind::Gemm(g) if g.norm.is_some() || g.gated.is_some() => run_host_folded(types, g, inputs, outputs),
        StepKind::Gemm(g @ GemmEpilogue { b_transpose: Some(op), .. }) => {
            // inputs [a, W_1 .. W_n, bias?, residual?] with W_i [n_i, k]: transpose each W_i here
            let parts = outputs.len();
            let plain = Step { kind: StepKind::Gemm(GemmEpilogue { b_transpose: None, ..g.clone() }), ..step.clone() };
            for (w, out) in inputs[1..=parts].iter().zip(outputs) {
                let (n, k) = (w.shape()[0] as i64, w.shape()[1] as i64);
                let wt = Buffer::for_result(w.dtype(), &[k, n], &Device::Cpu)?;
                super::host_dispatch::run_cpu(op, std::slice::from_ref(w), std::slice::from_ref(&wt))?;
                let mut gemm_inputs = vec![inputs[0].clone(), wt];
                gemm_inputs.extend(inputs[1 + parts..].iter().cloned());
                run_host_kernel(types, &plain, &gemm_inputs, std::slice::from_ref(out))?;
            }
            Ok(())
        }
        StepKind::Gemm(g) => {
            if g.tail.nodes.is_empty() {
                return cpu::matmul::run(&inputs[0], &inputs[1], &outputs[0]);
            }
            let shape: Vec<i64> = outputs[0].shape().iter().map(|&d| d as i64).collect();
            let product = Buffer::for_result(outputs[0].dtype(), &shape, &Device::Cpu)?;
            cpu::matmul::run(&inputs[0], &inputs[1], &product)?;
            let mut tail_inputs = vec![product];
            tail_inputs.extend(inputs[2..].iter().cloned());
            cpu::elementwise::run(&g.tail, &tail_inputs, &outputs[0])
        }
        StepKind::Conv(c) => {
            // The convolution, then the epilogue's elementwise group over its result.
            let shape: Vec<i64> = outputs[0].shape().iter().map(|&d| d as i64).collect();
            let product = Buffer::empty(outputs[0].dtype(), &shape, &Device::Cpu)?;
            let head = inputs.get(..c.head).ok_or_else(|| Error::Value(format!("{}: missing inputs", step.name())))?;
            super::host_dispatch::run_cpu(&c.conv, head, std::slice::from_ref(&product))?;
            let mut tail_inputs = vec![product];
            tail_inputs.extend(inputs[c.head..].iter().cloned());
            cpu::elementwise::run(&c.tail, &tail_inputs, &outputs[0])
        }
    }
}

/// A product with a folded rms_norm or a gated pair, on the host: the steps it replaced, one at
/// a time, through its scratch outputs (see `GemmEpilogue`).
fn run_host_folded(types: &[Type], g: &GemmEpilogue, inputs: &[Buffer], outputs: &[Buffer]) -> Result<()> {
    let missing = || Error::Value(format!("{}: missing inputs or outputs", g.name()));
    let results = outputs.len().checked_sub(g.scratch()).ok_or_else(missing)?;
    let (outs, mut scratch) = (&outputs[..results], outputs[results..].iter());
    let mut inputs = inputs.to_vec();
    if let Some(op) = &g.norm {
        let (gamma, normed) = (inputs.pop().ok_or_else(missing)?, scratch.next().ok_or_else(missing)?);
        let x = inputs.first().ok_or_else(missing)?.clone();
        super::host_dispatch::run_cpu(op, &[x, gamma], std::slice::from_ref(normed))?;
        inputs[0] = normed.clone();
    }
    let inner = GemmEpilogue { norm: None, gated: None, ..g.clone() };
    let step = |epi: GemmEpilogue| Step { kind: StepKind::Gemm(epi), inputs: vec![], outputs: vec![], bodies: vec![] };
    let Some(mul) = &g.gated else { return run_host_kernel(types, &step(inner), &inputs, outs) };
    let ([a, wg, wu], [out], Some(gate), Some(up)) = (&inputs[..], outs, scratch.next(), scratch.next()) else {
        return Err(missing());
    };
    run_host_kernel(types, &step(inner.clone()), &[a.clone(), wg.clone()], std::slice::from_ref(gate))?;
    let plain = GemmEpilogue { act: None, tail: crate::shared::Fused { nodes: vec![] }, ..inner };
    run_host_kernel(types, &step(plain), &[a.clone(), wu.clone()], std::slice::from_ref(up))?;
    cpu::elementwise::run(mul, &[gate.clone(), up.clone()], out)
}

#[cfg(test)]
#[path = "exec_tests.rs"]
mod tests;
