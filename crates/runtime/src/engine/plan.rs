//! A program specialised to concrete input shapes: the shape of every value, where each
//! intermediate tensor lives (an offset in its device's arena), and the arena sizes.
//! Plans are cached per input-shape tuple by the model.

use std::collections::HashMap;

use max_graph::{DType, Type, ValueId};

use super::memory::{self, Interval};
use super::program::{Body, Program, StepKind};
use super::shapes::Bindings;
use crate::{Error, Result};

/// Where a value's memory comes from during one execution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    /// A byte offset in the arena of the value's device.
    Arena(usize),
    /// Its own allocation: graph outputs (handed to the caller), values whose shape is known
    /// only at run time, and everything inside control-flow bodies.
    Own,
    /// The memory of its (contiguous) input, seen with another shape.
    View,
}

/// Steps whose result is their input's memory with another shape.
pub fn is_view(step: &super::program::Step) -> bool {
    matches!(&step.kind, StepKind::Op(op) if matches!(
        op.kind,
        max_graph::OpKind::Reshape | max_graph::OpKind::Flatten | max_graph::OpKind::Squeeze
            | max_graph::OpKind::Unsqueeze | max_graph::OpKind::Rebind
    )) && step.inputs.len() == 1
        && step.outputs.len() == 1
}

#[derive(Clone, Debug)]
pub struct Plan {
    pub bindings: Bindings,
    /// Concrete shapes of the values known before running (block 0 and its static bodies).
    pub shapes: HashMap<ValueId, Vec<usize>>,
    pub slots: HashMap<ValueId, Slot>,
    /// Arena bytes per device key ("cpu:0", "gpu:0").
    pub arenas: HashMap<String, usize>,
    pub report: String,
    /// Elements of every value whose shape is known before running: a plan's size of work.
    pub elements: usize,
}

fn device_key(t: &Type) -> String {
    match t {
        Type::Tensor(t) | Type::Buffer(t) => t.device.to_string(),
        Type::Chain => "cpu:0".into(),
    }
}

/// More bytes than any machine's memory holds (256 TiB): a value of more is refused before
/// anything is allocated, and the arena's offsets (at most the sum of its values' sizes) stay
/// far from overflowing.
const MOST_BYTES: u128 = 1 << 48;

/// The bytes of a `dtype` tensor of `shape`; an error naming it where they pass MOST_BYTES
/// (a static shape of 2^62 elements multiplied out to a few bytes and ran off the arena).
fn bytes(dtype: DType, shape: &[usize]) -> Result<usize> {
    let n = if shape.contains(&0) {
        0
    } else {
        // each factor is below 2^64 and the product so far at most MOST_BYTES + 1: no overflow
        shape.iter().fold(dtype.size_in_bytes() as u128, |acc, &d| (acc * d as u128).min(MOST_BYTES + 1))
    };
    if n > MOST_BYTES {
        return Err(Error::OutOfMemory(format!(
            "a {dtype} tensor of shape {shape:?} needs more than {MOST_BYTES} bytes (256 TiB), more than any \
             memory holds"
        )));
    }
    Ok(n as usize)
}

/// Builds the plan for `program` under `bindings` (from the inputs).
pub fn build(program: &Program, mut bindings: Bindings) -> Result<Plan> {
    let mut shapes = HashMap::new();
    for v in program.body.args.iter() {
        if let Some(s) = eval(program, &bindings, *v)? {
            shapes.insert(*v, s);
        }
    }
    collect_shapes(program, &program.body, &mut bindings, &mut shapes)?;
    // Liveness over the steps of the body: [defining step, last step that reads]. A view
    // (a reshape of a contiguous tensor) is the same memory as its source, so its uses extend
    // the source's life; a view that is a graph output keeps its source out of the arena.
    let body = &program.body;
    let mut alias: HashMap<ValueId, ValueId> = HashMap::new();
    let root = |alias: &HashMap<ValueId, ValueId>, mut v: ValueId| {
        while let Some(&s) = alias.get(&v) {
            v = s;
        }
        v
    };
    let mut first: HashMap<ValueId, usize> = HashMap::new();
    let mut last: HashMap<ValueId, usize> = HashMap::new();
    for (i, step) in body.steps.iter().enumerate() {
        if is_view(step) {
            alias.insert(step.outputs[0], step.inputs[0]);
        }
        for v in &step.outputs {
            first.insert(*v, i);
            last.insert(*v, i);
        }
        let mut used = step.inputs.clone();
        nested_uses(&step.bodies, &mut used);
        for v in used {
            if let Some(l) = last.get_mut(&root(&alias, v)) {
                *l = i;
            }
        }
    }
    let escaping: std::collections::HashSet<ValueId> = body.results.iter().map(|v| root(&alias, *v)).collect();
    let mut slots = HashMap::new();
    let mut per_device: HashMap<String, (Vec<ValueId>, Vec<Interval>)> = HashMap::new();
    for step in &body.steps {
        if is_view(step) {
            slots.insert(step.outputs[0], Slot::View);
            continue;
        }
        let arena_ok = matches!(&step.kind, StepKind::Op(op) if !matches!(op.kind, max_graph::OpKind::Constant | max_graph::OpKind::ConstantExternal))
            || matches!(step.kind, StepKind::Fused(_) | StepKind::Gemm(_) | StepKind::Conv(_));
        for v in &step.outputs {
            let ty = &program.types[*v];
            let placeable = arena_ok && !escaping.contains(v) && matches!(ty, Type::Tensor(_));
            match (placeable, shapes.get(v), ty) {
                (true, Some(shape), Type::Tensor(t)) => {
                    let entry = per_device.entry(device_key(ty)).or_default();
                    entry.0.push(*v);
                    entry.1.push(Interval { size: bytes(t.dtype, shape)?, first: first[v], last: last[v] });
                }
                _ => {
                    slots.insert(*v, Slot::Own);
                }
            }
        }
    }
    let mut arenas = HashMap::new();
    let mut report = String::new();
    for (device, (values, intervals)) in per_device {
        let total: u128 = intervals.iter().map(|iv| iv.size as u128).sum();
        if total > (usize::MAX / 4) as u128 {
            return Err(Error::OutOfMemory(format!(
                "the graph's intermediate values on {device} need {total} bytes in all, more than any memory holds"
            )));
        }
        let p = memory::plan(&intervals);
        for (v, off) in values.iter().zip(&p.offsets) {
            slots.insert(*v, Slot::Arena(*off));
        }
        report.push_str(&format!(
            "arena {device}: {} bytes for {} tensors; max-live lower bound {} bytes ({:.3}x)\n",
            p.arena,
            values.len(),
            p.lower_bound,
            if p.lower_bound > 0 { p.arena as f64 / p.lower_bound as f64 } else { 1.0 }
        ));
        arenas.insert(device, p.arena);
    }
    let elements =
        shapes.values().map(|s| s.iter().fold(1usize, |a, &d| a.saturating_mul(d))).fold(0, usize::saturating_add);
    Ok(Plan { bindings, shapes, slots, arenas, report, elements })
}

fn eval(program: &Program, b: &Bindings, v: ValueId) -> Result<Option<Vec<usize>>> {
    match &program.types[v] {
        Type::Tensor(t) | Type::Buffer(t) => b.eval(&t.shape),
        Type::Chain => Ok(Some(vec![])),
    }
}

fn collect_shapes(
    program: &Program,
    body: &Body,
    b: &mut Bindings,
    shapes: &mut HashMap<ValueId, Vec<usize>>,
) -> Result<()> {
    for step in &body.steps {
        if let StepKind::Op(op) = &step.kind
            && op.kind == max_graph::OpKind::Rebind
        {
            bind_rebind(op, step, b, shapes)?;
        }
        for v in &step.outputs {
            if let Some(s) = eval(program, b, *v)? {
                shapes.insert(*v, s);
            }
        }
        for inner in &step.bodies {
            for a in &inner.args {
                if let Some(s) = eval(program, b, *a)? {
                    shapes.insert(*a, s);
                }
            }
            collect_shapes(program, inner, b, shapes)?;
        }
    }
    Ok(())
}

/// A rebind may name new symbols (`x.rebind(["n", 3])`): they take the input's sizes.
fn bind_rebind(
    op: &max_graph::Op,
    step: &super::program::Step,
    b: &mut Bindings,
    shapes: &HashMap<ValueId, Vec<usize>>,
) -> Result<()> {
    let (Some(max_graph::Attr::Dims(target)), Some(actual)) = (op.attrs.get("shape"), shapes.get(&step.inputs[0]))
    else {
        return Ok(());
    };
    for (d, &n) in target.iter().zip(actual) {
        if let Some(name) = d.as_symbol()
            && b.get(name).is_none()
        {
            b.bind(name, n as i64, "rebind")?;
        }
    }
    Ok(())
}

fn nested_uses(bodies: &[Body], out: &mut Vec<ValueId>) {
    for body in bodies {
        for step in &body.steps {
            out.extend(step.inputs.iter().copied());
            nested_uses(&step.bodies, out);
        }
        out.extend(body.results.iter().copied());
    }
}

impl Plan {
    pub fn shape(&self, v: ValueId) -> Result<&[usize]> {
        self.shapes.get(&v).map(Vec::as_slice).ok_or_else(|| Error::Value(format!("value %{v} has no known shape")))
    }
}
