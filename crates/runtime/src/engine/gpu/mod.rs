//! Running steps on a CUDA device: fused elementwise groups through generated kernels, and the
//! other ops through the kernels of crates/kernels-cuda (more land with the CUDA backend).

use max_graph::ops::{Family, OpKind};

mod attention;
pub(crate) mod collective;
mod conv;
mod fft;
mod folded_store;
mod indexing;
mod layout;
mod matmul;
mod matmul_rope;
mod quant;
pub(crate) use quant::prefetch as prefetch_quant_kernels;
mod random;
mod reduction;
mod sampling;
use max_graph::{Attr, Type};
use max_kernels_cuda::fused::{Arg, FusedSpec, Input, Node, launch};
use max_kernels_cuda::launch::epilogue::Epilogue;

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
    let shape = out.shape().to_vec();
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
            let f = Fused::single(op, &types[step.outputs[0]], inputs.len());
            run_fused(dev, &f, inputs, &outputs[0])
        }
        StepKind::Gemm(g) => matmul::fused(dev, g, inputs, outputs),
        StepKind::Conv(c) => conv::fused(dev, c, inputs, &outputs[0]),
        StepKind::Op(op) if op.kind == OpKind::Matmul => {
            matmul::matmul(dev, &inputs[0], &inputs[1], &outputs[0], &Epilogue::default())
        }
        StepKind::Op(op) if op.kind == OpKind::Outer => {
            let a = inputs[0].reshaped(vec![inputs[0].num_elements(), 1])?;
            let b = inputs[1].reshaped(vec![1, inputs[1].num_elements()])?;
            matmul::matmul(dev, &a, &b, &outputs[0], &Epilogue::default())
        }
        StepKind::Op(op) => match op.kind.family() {
            Family::Reduction => reduction::run(dev, op, inputs, outputs),
            Family::Layout => layout::run(dev, op, inputs, outputs),
            Family::Indexing => indexing::run(dev, op, inputs, outputs),
            Family::Conv => conv::run(dev, op, inputs, outputs),
            Family::Quant => quant::run(dev, op, inputs, outputs),
            Family::Attention => attention::run(dev, op, inputs, outputs),
            Family::Sampling => sampling::run(dev, op, inputs, outputs),
            Family::Fft => fft::run(dev, op, inputs, outputs),
            Family::Random => random::run(dev, op, inputs, outputs),
            _ => Err(Error::Value(format!("{}: no GPU kernel for this op yet", op.kind.name()))),
        },
    }
}
