//! Host collectives: the reference of the NCCL path, and what runs when every "device" of a
//! collective is the CPU (simulated devices: N CPU values stand for N devices).
//!
//! The sum adds the inputs in device order in a wide accumulator (float32 for 16-bit and 8-bit
//! floats, float64 for float64, a wrapping int64 for integers) and rounds once, so every result
//! holds the same bits whatever the number of devices. NCCL's ring sums in the data's own
//! precision and in ring order, so the GPU results differ from these by that rounding.
//! Gather and scatter are the concat and split kernels; the results are copies of one result.

use max_graph::ops::collective::{Collective, Params};
use max_graph::ops::{Op, OpKind};
use max_graph::{Attr, Attrs, DType};

use crate::{Buffer, Error, Result, cpu};

/// Runs collective `op`: `inputs` are the N tensors then the signal buffers (broadcast: one
/// tensor then the signal buffers), `outputs` the N results, all on the host. An allreduce
/// with a joined residual add (engine/passes/fuse_allreduce_residual.rs) also takes the N
/// residuals and gives their sums with it; one with a joined rms_norm
/// (engine/passes/fuse_allreduce_norm.rs) also takes the N norm weights and gives the N
/// normalised sums after the sums.
pub fn run(op: &Op, inputs: &[Buffer], outputs: &[Buffer]) -> Result<()> {
    if let Some((norm, plain)) = crate::engine::passes::split_qnorm(op) {
        let n = outputs.len() / 2;
        let per = if crate::engine::passes::split_residual(&plain).is_some() { 3 } else { 2 };
        if n == 0 || outputs.len() != 2 * n || inputs.len() != (per + 1) * n {
            return Err(Error::Value(format!(
                "{} with rms_norm: {} inputs and {} results",
                op.kind.name(),
                inputs.len(),
                outputs.len()
            )));
        }
        let (sums, normed) = outputs.split_at(n);
        run(&plain, &inputs[..per * n], sums)?;
        for ((sum, gamma), out) in sums.iter().zip(&inputs[per * n..]).zip(normed) {
            crate::engine::host_dispatch::run_cpu(&norm, &[sum.clone(), gamma.clone()], std::slice::from_ref(out))?;
        }
        return Ok(());
    }
    if let Some(plain) = crate::engine::passes::split_residual(op) {
        // (engine/passes/fuse_allreduce_residual.rs) the sum rounded once, then each device's add
        let n = outputs.len();
        if n == 0 || inputs.len() != 3 * n {
            return Err(Error::Value(format!(
                "{} with a residual: {} inputs and {} results",
                op.kind.name(),
                inputs.len(),
                outputs.len()
            )));
        }
        let p = Params::of(&plain, 2 * n, inputs[0].rank()).map_err(|e| Error::Value(e.to_string()))?;
        if p.op != Collective::AllreduceSum || p.ranks != n {
            return Err(Error::Value(format!("{}: a residual for {} devices", op.kind.name(), p.ranks)));
        }
        let total = sum(&inputs[..n])?;
        for (x, out) in inputs[2 * n..].iter().zip(outputs) {
            let add = crate::engine::passes::residual_add(out.dtype(), out.shape());
            cpu::elementwise::run(&add, &[x.clone(), total.clone()], out)?;
        }
        return Ok(());
    }
    let rank = inputs.first().map_or(0, Buffer::rank);
    let p = Params::of(op, inputs.len(), rank).map_err(|e| Error::Value(e.to_string()))?;
    if outputs.len() != p.ranks || p.ranks == 0 {
        return Err(Error::Value(format!("{}: {} results for {} devices", op.kind.name(), outputs.len(), p.ranks)));
    }
    let tensors = if p.op == Collective::Broadcast { &inputs[..1] } else { &inputs[..p.ranks] };
    let with_axis = |kind: OpKind| Op { kind, attrs: Attrs::new().with("axis", Attr::Int(p.axis as i64)) };
    match p.op {
        Collective::AllreduceSum => copies(&sum(tensors)?, outputs),
        Collective::Broadcast => copies(&tensors[0], outputs),
        Collective::Allgather => {
            cpu::layout::run(&with_axis(OpKind::Concat), tensors, &outputs[..1])?;
            copies(&outputs[0].clone(), &outputs[1..])
        }
        Collective::ReducescatterSum => cpu::layout::run(&with_axis(OpKind::Split), &[sum(tensors)?], outputs),
    }
}

fn copies(src: &Buffer, outputs: &[Buffer]) -> Result<()> {
    let src = if src.is_contiguous() { src.clone() } else { src.contiguous()? };
    outputs.iter().try_for_each(|o| o.inplace_copy_from(&src))
}

/// The wide type the sum of `dtype` values accumulates in.
fn accumulator(dtype: DType) -> DType {
    if dtype == DType::Float64 {
        DType::Float64
    } else if dtype.is_float() {
        DType::Float32
    } else {
        DType::Int64
    }
}

/// The elementwise sum of `xs` (one shape and dtype), added in order, rounded once.
fn sum(xs: &[Buffer]) -> Result<Buffer> {
    let dtype = xs[0].dtype();
    let acc_type = accumulator(dtype);
    let acc = xs[0].cast(acc_type)?;
    let n = acc.num_elements();
    for x in &xs[1..] {
        if x.shape() != acc.shape() || x.dtype() != dtype {
            return Err(Error::Value(format!(
                "allreduce: inputs differ: {} {:?} and {} {:?}",
                dtype,
                acc.shape(),
                x.dtype(),
                x.shape()
            )));
        }
        let wide = x.cast(acc_type)?;
        // SAFETY: `acc` and `wide` are fresh contiguous host buffers of n elements of acc_type.
        unsafe {
            match acc_type {
                DType::Float64 => add(acc.addr() as *mut f64, wide.addr() as *const f64, n, |a, b| a + b),
                DType::Float32 => add(acc.addr() as *mut f32, wide.addr() as *const f32, n, |a, b| a + b),
                _ => add(acc.addr() as *mut i64, wide.addr() as *const i64, n, i64::wrapping_add),
            }
        }
    }
    acc.cast(dtype)
}

/// `acc[i] = f(acc[i], x[i])` for `i < n`.
///
/// # Safety
/// Both pointers address `n` valid, distinct elements.
unsafe fn add<T: Copy>(acc: *mut T, x: *const T, n: usize, f: impl Fn(T, T) -> T) {
    // SAFETY: guaranteed by the caller.
    let (a, b) = unsafe { (std::slice::from_raw_parts_mut(acc, n), std::slice::from_raw_parts(x, n)) };
    for (a, b) in a.iter_mut().zip(b) {
        *a = f(*a, *b);
    }
}
