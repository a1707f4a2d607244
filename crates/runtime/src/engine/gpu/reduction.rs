//! GPU kernels of the reduction ops: sum, mean, reduce_max, reduce_min, argmax, argmin,
//! softmax, logsoftmax, layer_norm, cumsum, top_k and argsort, through
//! max_kernels_cuda::launch::reduction. Attributes, checks and error messages are those of the
//! CPU kernels (crates/runtime/src/cpu/reduction), which define the behaviour.

use max_graph::DType;
use max_graph::ops::reduction::{CumsumParams, cumsum_params};
use max_graph::ops::{Op, OpKind};
use max_kernels_cuda::launch::reduction::{self as k, Lines, Reduce};

use crate::cuda::CudaDevice;
use crate::operands::expect;
use crate::operands::{axis_lines, flag, graph_err, layer_norm_args};
use crate::{Buffer, Device, Error, Result};

pub(crate) fn run(dev: &CudaDevice, op: &Op, inputs: &[Buffer], outputs: &[Buffer]) -> Result<()> {
    let name = op.kind.name();
    let (Some(x), Some(out)) = (inputs.first(), outputs.first()) else {
        return Err(Error::Value(format!("{name}: expected an input and an output")));
    };
    if x.num_elements() == 0 && out.num_elements() == 0 {
        return Ok(());
    }
    let x = &packed(x)?;
    let dtype = x.dtype();
    dev.bind()?;
    match op.kind {
        OpKind::Sum | OpKind::Mean | OpKind::ReduceMax | OpKind::ReduceMin | OpKind::ArgMax | OpKind::ArgMin => {
            let l = lines(op, x, true)?;
            let kind = match op.kind {
                OpKind::Sum => Reduce::Sum,
                OpKind::Mean => Reduce::Mean,
                OpKind::ReduceMax => Reduce::Max,
                OpKind::ReduceMin => Reduce::Min,
                OpKind::ArgMax => Reduce::ArgMax,
                _ => Reduce::ArgMin,
            };
            let arg = matches!(kind, Reduce::ArgMax | Reduce::ArgMin);
            expect(name, "the output", out, if arg { DType::Int64 } else { dtype }, l.count())?;
            if l.n == 0 && !matches!(kind, Reduce::Sum | Reduce::Mean) {
                return Err(Error::Value(format!(
                    "{name}: cannot reduce an axis of size 0 (input shape {:?})",
                    x.shape()
                )));
            }
            if l.n == 0 && kind == Reduce::Mean && !dtype.is_float() && l.count() > 0 {
                return Err(Error::Value(format!("{name}: the mean of an empty axis is undefined for integers")));
            }
            let scratch = scratch(out, k::reduce_scratch(l))?;
            k::reduce(&dev.stream, kind, dtype, (x.addr(), out.addr(), addr(&scratch)), l).map_err(Error::from)
        }
        OpKind::Softmax | OpKind::LogSoftmax => {
            let l = lines(op, x, false)?;
            expect(name, "the output", out, dtype, x.num_elements())?;
            let log = op.kind == OpKind::LogSoftmax;
            in_norm_dtype(dev, &[x], out, |ins, y| {
                k::softmax(&dev.stream, log, y.dtype(), ins[0].addr(), y.addr(), l).map_err(Error::from)
            })
        }
        OpKind::LayerNorm => {
            let (gamma, beta, eps) = layer_norm_args(op, inputs)?;
            let Some(&d) = x.shape().last() else {
                return Err(Error::Value(format!("{name}: the input must have at least one dimension")));
            };
            for (what, p) in [("gamma", gamma), ("beta", beta)] {
                expect(name, what, p, dtype, d)?;
            }
            expect(name, "the output", out, dtype, x.num_elements())?;
            if d == 0 {
                return Ok(());
            }
            let (gamma, beta) = (packed(gamma)?, packed(beta)?);
            let rows = x.num_elements() / d;
            in_norm_dtype(dev, &[x, &gamma, &beta], out, |ins, y| {
                let ptrs = (ins[0].addr(), ins[1].addr(), ins[2].addr(), y.addr());
                k::layer_norm(&dev.stream, y.dtype(), ptrs, rows, d, eps).map_err(Error::from)
            })
        }
        OpKind::RmsNorm => {
            let Some(weight) = inputs.get(1) else {
                return Err(Error::Value(format!("{name}: expected input and weight")));
            };
            let p = max_graph::ops::reduction::RmsNormParams::from_attrs(&op.attrs)
                .map_err(|m| Error::Value(format!("{name}: {m}")))?;
            let Some(&d) = x.shape().last() else {
                return Err(Error::Value(format!("{name}: the input must have at least one dimension")));
            };
            expect(name, "weight", weight, dtype, d)?;
            expect(name, "the output", out, dtype, x.num_elements())?;
            if d == 0 {
                return Ok(());
            }
            let weight = packed(weight)?;
            let rows = x.num_elements() / d;
            k::rms_norm(
                &dev.stream,
                dtype,
                (x.addr(), weight.addr(), out.addr()),
                rows,
                d,
                p.epsilon,
                p.weight_offset,
                p.multiply_before_cast,
            )
            .map_err(Error::from)
        }
        OpKind::Cumsum => {
            let l = lines(op, x, true)?;
            expect(name, "the output", out, dtype, x.num_elements())?;
            let CumsumParams { exclusive, reverse } = cumsum_params(op).map_err(graph_err)?;
            k::cumsum(&dev.stream, dtype, (x.addr(), out.addr()), l, exclusive, reverse).map_err(Error::from)
        }
        OpKind::TopK => {
            let l = lines(op, x, true)?;
            let Some(indices) = outputs.get(1) else {
                return Err(Error::Value(format!("{name}: expected the values and indices outputs")));
            };
            if l.count() == 0 {
                return Ok(());
            }
            let kk = out.num_elements() / l.count();
            if kk > l.n {
                return Err(Error::Value(format!("{name}: k ({kk}) is larger than the axis size {}", l.n)));
            }
            expect(name, "the values", out, dtype, l.outer * kk * l.inner)?;
            expect(name, "the indices", indices, DType::Int64, l.outer * kk * l.inner)?;
            sort(dev, op, x, (out.addr(), indices.addr()), outputs, l, kk, true)
        }
        OpKind::ArgSort => {
            if x.rank() != 1 {
                return Err(Error::Value(format!("{name}: sorts rank-1 tensors only, got shape {:?}", x.shape())));
            }
            let n = x.num_elements();
            expect(name, "the output", out, DType::Int64, n)?;
            let desc = !flag(op, "ascending", true)?;
            sort(dev, op, x, (0, out.addr()), outputs, Lines { outer: 1, n, inner: 1 }, n, desc)
        }
        other => Err(Error::Value(format!("{}: no GPU kernel for this op", other.name()))),
    }
}

/// The first `kk` of every line in sorted order: on the GPU, or (for lines too long for the
/// GPU sort's 32-bit indices, over 4 billion elements) with the CPU kernel on host copies.
#[allow(clippy::too_many_arguments)]
fn sort(
    dev: &CudaDevice,
    op: &Op,
    x: &Buffer,
    (values, indices): (u64, u64),
    outputs: &[Buffer],
    l: Lines,
    kk: usize,
    desc: bool,
) -> Result<()> {
    if !k::sortable(l.n) {
        let host_in = x.to(&Device::Cpu)?;
        let host_out: Vec<Buffer> = outputs
            .iter()
            .map(|b| {
                let shape: Vec<i64> = b.shape().iter().map(|&d| d as i64).collect();
                Buffer::empty(b.dtype(), &shape, &Device::Cpu)
            })
            .collect::<Result<_>>()?;
        crate::engine::host_dispatch::run_cpu(op, &[host_in], &host_out)?;
        for (dst, src) in outputs.iter().zip(&host_out) {
            dst.inplace_copy_from(src)?;
        }
        return Ok(());
    }
    let scratch = scratch(&outputs[0], k::sort_scratch(l, kk))?;
    let ptrs = (x.addr(), values, indices, addr(&scratch));
    k::sort(&dev.stream, x.dtype(), ptrs, l, kk, desc).map_err(Error::from)
}

/// Runs `f(inputs, output)` in the dtype the softmax and layer_norm kernels compute `out`'s
/// dtype in ([`k::norm_dtype`]): directly, or on copies of the inputs cast to it, writing a
/// temporary that is then cast into `out` (the cast rounds as the CPU kernels' stores do).
fn in_norm_dtype(
    dev: &CudaDevice,
    inputs: &[&Buffer],
    out: &Buffer,
    f: impl FnOnce(&[Buffer], &Buffer) -> Result<()>,
) -> Result<()> {
    let (dtype, work) = (out.dtype(), k::norm_dtype(out.dtype()));
    if work == dtype {
        let ins: Vec<Buffer> = inputs.iter().map(|b| (*b).clone()).collect();
        return f(&ins, out);
    }
    let ins: Vec<Buffer> = inputs.iter().map(|b| b.cast(work)).collect::<Result<_>>()?;
    let shape: Vec<i64> = out.shape().iter().map(|&d| d as i64).collect();
    let tmp = Buffer::empty_on(work, &shape, out.stream())?;
    f(&ins, &tmp)?;
    let n = out.num_elements() as u64;
    max_kernels_cuda::launch::cast(&dev.stream, tmp.addr(), work, out.addr(), dtype, n).map_err(Error::from)
}

/// `b` itself when contiguous, else a contiguous copy on its stream.
fn packed(b: &Buffer) -> Result<Buffer> {
    if b.is_contiguous() { Ok(b.clone()) } else { b.contiguous() }
}

/// A device scratch buffer of `bytes` on the stream of `like` (freed in stream order when it
/// drops, after the kernels queued before).
fn scratch(like: &Buffer, bytes: usize) -> Result<Option<Buffer>> {
    if bytes == 0 {
        return Ok(None);
    }
    Buffer::empty_on(DType::UInt8, &[bytes as i64], like.stream()).map(Some)
}

fn addr(b: &Option<Buffer>) -> u64 {
    b.as_ref().map_or(0, |b| b.addr())
}

/// `x` around the op's `axis` attribute as [outer, n, inner] (see operands::axis_lines).
fn lines(op: &Op, x: &Buffer, need_rank: bool) -> Result<Lines> {
    let (outer, n, inner) = axis_lines(op, x, need_rank)?;
    Ok(Lines { outer, n, inner })
}
