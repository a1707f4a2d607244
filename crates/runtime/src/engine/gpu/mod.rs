//! Running steps on a CUDA device: fused elementwise groups through generated kernels, and the
//! other ops through the kernels of crates/kernels-cuda (more land with the CUDA backend).

use max_graph::ops::{Family, OpKind};

mod conv;
mod indexing;
mod layout;
mod quant;
mod reduction;
use max_graph::{Attr, Type};
use max_kernels_cuda::fused::{Arg, FusedSpec, Input, Node, launch};

use super::program::{Fused, Operand, Step, StepKind, fusible};
use crate::cuda::CudaDevice;
use crate::{Buffer, Error, Result};

fn spec_of(f: &Fused, inputs: &[Buffer], rank: usize) -> Result<FusedSpec> {
    let nodes = f
        .nodes
        .iter()
        .map(|(op, operands, ty)| {
            let dtype =
                ty.tensor().map(|t| t.dtype).ok_or_else(|| Error::Value("fused result is not a tensor".into()))?;
            let approximate = match op.attrs.get("approximate") {
                Some(Attr::Str(s)) => Some(s.clone()),
                _ => None,
            };
            let args = operands
                .iter()
                .map(|o| match o {
                    Operand::Input(i) => Arg::Input(*i),
                    Operand::Node(j) => Arg::Node(*j),
                })
                .collect();
            Ok(Node { op: op.kind, args, dtype, approximate })
        })
        .collect::<Result<_>>()?;
    Ok(FusedSpec { inputs: inputs.iter().map(|b| b.dtype()).collect(), nodes, rank })
}

/// Broadcast strides of `b` for an output of `shape` (0 where it broadcasts).
fn reader(b: &Buffer, shape: &[usize]) -> Result<Input> {
    let pad = shape
        .len()
        .checked_sub(b.rank())
        .ok_or_else(|| Error::Value("elementwise input has a higher rank than its output".into()))?;
    let mut strides = vec![0i64; shape.len()];
    for (i, (&d, &s)) in b.shape().iter().zip(b.strides()).enumerate() {
        if d != 1 {
            strides[pad + i] = s as i64;
        }
    }
    Ok(Input {
        ptr: b.addr(),
        strides,
        same_layout: b.shape() == shape && b.is_contiguous(),
        scalar: b.num_elements() == 1,
    })
}

fn run_fused(dev: &CudaDevice, f: &Fused, inputs: &[Buffer], out: &Buffer) -> Result<()> {
    let (shape, strides) = (out.shape().to_vec(), ());
    let _ = strides;
    let spec = spec_of(f, inputs, shape.len())?;
    let readers: Vec<Input> = inputs.iter().map(|b| reader(b, &shape)).collect::<Result<_>>()?;
    dev.bind()?;
    launch(&dev.stream, &spec, out.addr(), &shape, &readers).map_err(|e| match e {
        max_kernels_cuda::Error::Unsupported(m) => Error::Value(m),
        other => other.into(),
    })
}

/// Runs one step on `dev`; inputs and outputs are device buffers on its stream.
pub(crate) fn run(dev: &CudaDevice, types: &[Type], step: &Step, inputs: &[Buffer], outputs: &[Buffer]) -> Result<()> {
    match &step.kind {
        StepKind::Fused(f) => run_fused(dev, f, inputs, &outputs[0]),
        StepKind::Op(op) if fusible(op.kind) => {
            let f = crate::cpu::elementwise::single(op, &types[step.outputs[0]], inputs.len());
            run_fused(dev, &f, inputs, &outputs[0])
        }
        StepKind::Op(op) if op.kind == OpKind::Matmul => matmul(dev, &inputs[0], &inputs[1], &outputs[0]),
        StepKind::Op(op) if op.kind == OpKind::Outer => {
            let a = inputs[0].reshaped(vec![inputs[0].num_elements(), 1])?;
            let b = inputs[1].reshaped(vec![1, inputs[1].num_elements()])?;
            matmul(dev, &a, &b, &outputs[0])
        }
        StepKind::Op(op) => match op.kind.family() {
            Family::Reduction => reduction::run(dev, op, inputs, outputs),
            Family::Layout => layout::run(dev, op, inputs, outputs),
            Family::Indexing => indexing::run(dev, op, inputs, outputs),
            Family::Conv => conv::run(dev, op, inputs, outputs),
            Family::Quant => quant::run(dev, op, inputs, outputs),
            _ => Err(Error::Value(format!("{}: no GPU kernel for this op yet", op.kind.name()))),
        },
    }
}

/// (batch dims, rows, cols) of a matmul operand under MAX's rank rules.
fn matrix_dims(shape: &[usize], is_lhs: bool) -> (Vec<usize>, usize, usize) {
    match shape.len() {
        0 => (vec![], 1, 1),
        1 if is_lhs => (vec![], 1, shape[0]),
        1 => (vec![], shape[0], 1),
        r => (shape[..r - 2].to_vec(), shape[r - 2], shape[r - 1]),
    }
}

fn matmul(dev: &CudaDevice, a: &Buffer, b: &Buffer, out: &Buffer) -> Result<()> {
    let (ba, m, k) = matrix_dims(a.shape(), true);
    let (bb, k2, n) = matrix_dims(b.shape(), false);
    if k != k2 {
        return Err(Error::Value(format!("matmul: shapes {:?} and {:?} do not contract", a.shape(), b.shape())));
    }
    let batch = out.num_elements() / (m * n).max(1);
    let (na, nb) = (ba.iter().product::<usize>(), bb.iter().product::<usize>());
    let width = out.dtype().size_in_bytes() as u64;
    dev.bind()?;
    let run = |pa: u64, pb: u64, pc: u64, count: usize, sa: usize, sb: usize| {
        max_kernels_cuda::launch::matmul(&dev.stream, out.dtype(), (pa, pb, pc), (m, n, k), count, (sa, sb, m * n))
            .map_err(|e| match e {
                max_kernels_cuda::Error::Unsupported(msg) => Error::Value(msg),
                other => other.into(),
            })
    };
    if (na == batch || na == 1) && (nb == batch || nb == 1) {
        // Few rows (decode): split-K kernels that stream B (batches sharing B fold into rows).
        use max_kernels_cuda::launch::{epilogue::Epilogue, gemm_skinny};
        let strides = (if na == 1 { 0 } else { m * k }, if nb == 1 { 0 } else { k * n }, m * n);
        if gemm_skinny::suitable(out.dtype(), (m, n, k), batch, strides, (a.addr(), b.addr())) {
            let ptrs = (a.addr(), b.addr(), out.addr());
            let epi = Epilogue::default();
            return gemm_skinny::gemm_skinny(&dev.stream, out.dtype(), ptrs, (m, n, k), batch, strides, &epi, None)
                .map_err(|e| match e {
                    max_kernels_cuda::Error::Unsupported(msg) => Error::Value(msg),
                    other => other.into(),
                });
        }
    }
    let hopper = dev.arch.starts_with("sm_90") || dev.arch.starts_with("sm_10");
    if hopper
        && max_kernels_cuda::launch::gemm_sm90::suitable(out.dtype(), m, k, a.addr(), b.addr())
        && na == batch
        && (nb == batch || nb == 1)
    {
        // wgmma + TMA: batched A with one shared B folds into the rows of a single GEMM.
        let r = max_kernels_cuda::launch::gemm_sm90::gemm(
            &dev.stream,
            out.dtype(),
            (a.addr(), b.addr(), out.addr()),
            (m, n, k),
            batch,
            (na, nb),
        );
        match r {
            Ok(()) => return Ok(()),
            Err(max_kernels_cuda::Error::Unsupported(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    if (na == batch || na == 1) && (nb == batch || nb == 1) {
        // Each operand either has every batch or one matrix shared by all: one launch.
        let sa = if na == 1 { 0 } else { m * k };
        let sb = if nb == 1 { 0 } else { k * n };
        return run(a.addr(), b.addr(), out.addr(), batch, sa, sb);
    }
    // General broadcasting of batch dims: one launch per output batch.
    let out_batch: Vec<usize> = out.shape()[..out.rank().saturating_sub(2)].to_vec();
    let offset = |dims: &[usize], mut lin: usize| -> usize {
        let pad = out_batch.len() - dims.len();
        let mut off = 0;
        let mut stride = 1;
        let mut idx = vec![0; out_batch.len()];
        for d in (0..out_batch.len()).rev() {
            idx[d] = lin % out_batch[d];
            lin /= out_batch[d];
        }
        for d in (0..dims.len()).rev() {
            if dims[d] != 1 {
                off += idx[pad + d] * stride;
            }
            stride *= dims[d];
        }
        off
    };
    for z in 0..batch {
        let pa = a.addr() + (offset(&ba, z) * m * k) as u64 * width;
        let pb = b.addr() + (offset(&bb, z) * k * n) as u64 * width;
        run(pa, pb, out.addr() + (z * m * n) as u64 * width, 1, 0, 0)?;
    }
    Ok(())
}
