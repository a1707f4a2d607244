//! Collectives: ops over one value per device that give one result per device, the
//! communication of tensor-parallel models (MAX's `ops.allreduce.sum`, `ops.allgather`,
//! `ops.reducescatter.sum`, `ops.distributed_broadcast`).
//!
//! Inputs: the N tensors (input `i` on device `i`), then N signal buffers (uint8, rank 1,
//! buffer `i` on device `i`; MAX's `Signals.buffers()`). Signal buffers only name the devices
//! taking part and order the op after their setup: the GPU path communicates through NCCL,
//! which keeps its own scratch memory. Broadcast takes one tensor and N signal buffers.
//!
//! - `allreduce_sum`: result `i` (on device `i`) is the elementwise sum of all inputs; every
//!   result holds the same bits.
//! - `allgather` (attr `axis`): every result is the inputs concatenated along `axis`, in
//!   device order.
//! - `reducescatter_sum` (attr `axis`): the sum cut along `axis` into N equal pieces, piece `i`
//!   on device `i`.
//! - `distributed_broadcast`: the input copied to every signal buffer's device.
//!
//! Devices are all GPUs, each at most once, or all the CPU: a list of CPU values (`cpu:0` or
//! `cpu:i`, repeats allowed) stands for as many simulated devices, which is how the collective
//! API is tested without GPUs.

use super::{Ctx, OpKind};
use crate::dim::Dim;
use crate::dtype::DType;
use crate::error::Result;
use crate::types::{DeviceKind, DeviceRef, TensorType, Type, shape_str};

/// Which collective a step runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Collective {
    AllreduceSum,
    Allgather,
    ReducescatterSum,
    Broadcast,
}

/// A collective's parameters, parsed once for both backends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    pub op: Collective,
    /// Devices taking part (results).
    pub ranks: usize,
    /// The axis of allgather and reducescatter (normalised), 0 otherwise.
    pub axis: usize,
}

impl Params {
    /// From the op, its number of inputs and the rank of its tensors.
    pub fn of(op: &super::Op, inputs: usize, rank: usize) -> Result<Params> {
        let ctx = Ctx::of_op(op);
        let (collective, ranks) = match op.kind {
            OpKind::AllreduceSum => (Collective::AllreduceSum, inputs / 2),
            OpKind::Allgather => (Collective::Allgather, inputs / 2),
            OpKind::ReducescatterSum => (Collective::ReducescatterSum, inputs / 2),
            OpKind::DistributedBroadcast => (Collective::Broadcast, inputs.saturating_sub(1)),
            _ => return Err(ctx.value_err("op", "not a collective op")),
        };
        let axis = match collective {
            Collective::Allgather | Collective::ReducescatterSum => ctx.axis("axis", ctx.int("axis")?, rank)?,
            _ => 0,
        };
        Ok(Params { op: collective, ranks, axis })
    }
}

pub fn infer(ctx: &Ctx) -> Result<Vec<Type>> {
    match ctx.kind {
        OpKind::AllreduceSum | OpKind::Allgather | OpKind::ReducescatterSum => per_device(ctx),
        OpKind::DistributedBroadcast => broadcast(ctx),
        _ => Err(ctx.value_err("op", "not a collective op")),
    }
}

fn input_name(i: usize) -> String {
    format!("inputs[{i}]")
}

/// The N signal buffers from input `first` on: uint8 rank-1 buffers; their devices.
fn signal_devices(ctx: &Ctx, first: usize) -> Result<Vec<DeviceRef>> {
    (first..ctx.inputs.len())
        .map(|i| {
            let name = format!("signal_buffers[{}]", i - first);
            match &ctx.inputs[i] {
                Type::Buffer(b) if b.dtype == DType::UInt8 && b.rank() == 1 => Ok(b.device),
                other => Err(ctx.type_err(
                    &name,
                    format!("expected a uint8 buffer of rank 1 (Signals.input_types()), got {other}"),
                )),
            }
        })
        .collect()
}

/// All CPU, or all GPUs with none twice.
fn check_devices(ctx: &Ctx, devices: &[DeviceRef], what: &str) -> Result<()> {
    let gpus = devices.iter().filter(|d| d.kind == DeviceKind::Gpu).count();
    if gpus != 0 && gpus != devices.len() {
        let list: Vec<String> = devices.iter().map(|d| d.to_string()).collect();
        return Err(ctx.value_err(what, format!("devices must be all GPUs or all the CPU, got [{}]", list.join(", "))));
    }
    if gpus != 0 {
        for (i, d) in devices.iter().enumerate() {
            if let Some(j) = devices[..i].iter().position(|e| e == d) {
                return Err(
                    ctx.value_err(what, format!("{d} appears twice (at {j} and {i}); each GPU takes part once"))
                );
            }
        }
    }
    Ok(())
}

fn per_device(ctx: &Ctx) -> Result<Vec<Type>> {
    let n = ctx.inputs.len() / 2;
    if n == 0 || ctx.inputs.len() != 2 * n {
        return Err(ctx.value_err(
            "signal_buffers",
            format!("expected one input and one signal buffer per device, got {} values in all", ctx.inputs.len()),
        ));
    }
    let tensors: Vec<&TensorType> = (0..n)
        .map(|i| match &ctx.inputs[i] {
            Type::Tensor(t) => Ok(t),
            other => Err(ctx.type_err(&input_name(i), format!("expected a tensor, got {other}"))),
        })
        .collect::<Result<_>>()?;
    let signals = signal_devices(ctx, n)?;
    let first = tensors[0];
    let axis = match ctx.kind {
        OpKind::AllreduceSum => None,
        _ => Some(ctx.axis("axis", ctx.int("axis")?, first.rank())?),
    };
    if ctx.kind != OpKind::Allgather && first.dtype == DType::Bool {
        return Err(ctx.type_err("inputs", "cannot sum bool values"));
    }
    for (i, t) in tensors.iter().enumerate() {
        if t.dtype != first.dtype {
            return Err(ctx.type_err(
                &input_name(i),
                format!("all inputs must have one dtype: inputs[0] is {}, inputs[{i}] is {}", first.dtype, t.dtype),
            ));
        }
        let same = t.rank() == first.rank()
            && t.shape.iter().zip(&first.shape).enumerate().all(|(k, (a, b))| a == b || Some(k) == axis);
        if !same {
            let rule = match ctx.kind {
                OpKind::Allgather => "the same shape except along the gather axis",
                _ => "the same shape",
            };
            return Err(ctx.value_err(
                &input_name(i),
                format!(
                    "all inputs must have {rule}: inputs[0] is {}, inputs[{i}] is {}",
                    shape_str(&first.shape),
                    shape_str(&t.shape)
                ),
            ));
        }
        if signals[i] != t.device {
            return Err(ctx.value_err(
                &format!("signal_buffers[{i}]"),
                format!(
                    "is on {} but inputs[{i}] is on {}; buffer i must be on input i's device",
                    signals[i], t.device
                ),
            ));
        }
    }
    let devices: Vec<DeviceRef> = tensors.iter().map(|t| t.device).collect();
    check_devices(ctx, &devices, "inputs")?;
    let shape = match (ctx.kind, axis) {
        (OpKind::Allgather, Some(a)) => {
            let mut total = Dim::stat(0);
            for t in &tensors {
                total = total.add(&t.shape[a]).map_err(|e| ctx.value_err("inputs", e.to_string()))?;
            }
            let mut s = first.shape.clone();
            s[a] = total;
            s
        }
        (OpKind::ReducescatterSum, Some(a)) => {
            let d = &first.shape[a];
            if let Some(size) = d.as_static()
                && size % n as i64 != 0
            {
                return Err(
                    ctx.value_err("axis", format!("dimension {a} of size {size} does not split into {n} equal pieces"))
                );
            }
            let mut s = first.shape.clone();
            s[a] = d.floordiv(&Dim::stat(n as i64)).map_err(|e| ctx.value_err("axis", e.to_string()))?;
            s
        }
        _ => first.shape.clone(),
    };
    Ok(devices.into_iter().map(|d| Type::Tensor(TensorType::new(first.dtype, shape.clone(), d))).collect())
}

fn broadcast(ctx: &Ctx) -> Result<Vec<Type>> {
    let x = ctx.tensor(0)?;
    let devices = signal_devices(ctx, 1)?;
    if devices.len() < 2 {
        return Err(ctx.value_err(
            "signal_buffers",
            format!("a broadcast needs at least 2 signal buffers (devices), got {}", devices.len()),
        ));
    }
    check_devices(ctx, &devices, "signal_buffers")?;
    if !devices.contains(&x.device) {
        let list: Vec<String> = devices.iter().map(|d| d.to_string()).collect();
        return Err(ctx.value_err(
            "input",
            format!("is on {}, which is not among the signal buffers' devices [{}]", x.device, list.join(", ")),
        ));
    }
    Ok(devices.into_iter().map(|d| Type::Tensor(TensorType::new(x.dtype, x.shape.clone(), d))).collect())
}

#[cfg(test)]
#[path = "collective_tests.rs"]
mod tests;
