//! Matmul on the GPU: the Hopper wgmma kernel for large 16-bit problems, mma.sync or SIMT
//! kernels otherwise, each applying the fused epilogue of a `Gemm` step.

use max_graph::Attr;
use max_graph::ops::{Op, OpKind};
use max_kernels_cuda::launch::epilogue::{Act, Epilogue};
use max_kernels_cuda::launch::{gemm_skinny, gemv_nt};

use super::super::program::GemmEpilogue;
use crate::cuda::CudaDevice;
use crate::{Buffer, Error, Result};

pub(super) fn act_of(op: &Op) -> Result<Act> {
    Ok(match op.kind {
        OpKind::Relu => Act::Relu,
        OpKind::Silu => Act::Silu,
        OpKind::Sigmoid => Act::Sigmoid,
        OpKind::Gelu => match op.attrs.get("approximate") {
            Some(Attr::Str(s)) if s == "tanh" => Act::GeluTanh,
            Some(Attr::Str(s)) if s == "quick" => Act::GeluQuick,
            _ => Act::Gelu,
        },
        other => return Err(Error::Value(format!("{}: not a GEMM epilogue activation", other.name()))),
    })
}

/// A `Gemm` step: inputs are `[a, b, bias?, residual?]`.
pub(super) fn fused(dev: &CudaDevice, g: &GemmEpilogue, inputs: &[Buffer], out: &Buffer) -> Result<()> {
    let mut extra = inputs[2..].iter();
    let bias = if g.bias { extra.next().map(|b| b.addr()) } else { None };
    let residual = if g.residual { extra.next().map(|r| r.addr()) } else { None };
    let act = g.act.as_ref().map(act_of).transpose()?.unwrap_or_default();
    let epi = Epilogue::new(bias, act, residual);
    match g.b_transpose {
        Some(_) => matmul_wt(dev, &inputs[0], &inputs[1], out, &epi),
        None => matmul(dev, &inputs[0], &inputs[1], out, &epi),
    }
}

/// `a @ W^T` for W [n, k] as stored (passes/fuse_weight_transpose.rs): a's batch dims fold into
/// rows. Up to gemv_nt::MAX_M rows a warp per row of W; more on Hopper the wgmma GEMM with W
/// as its K-major operand; elsewhere W is transposed into a scratch matrix first.
fn matmul_wt(dev: &CudaDevice, a: &Buffer, w: &Buffer, out: &Buffer, epi: &Epilogue) -> Result<()> {
    let k = *a.shape().last().unwrap_or(&1);
    let (n, k2) = match w.shape() {
        [n, k2] => (*n, *k2),
        s => return Err(Error::Value(format!("matmul: the transposed weight must have rank 2, got shape {s:?}"))),
    };
    if k != k2 {
        return Err(Error::Value(format!("matmul: shapes {:?} and {:?}^T do not contract", a.shape(), w.shape())));
    }
    let rows = a.num_elements() / k.max(1);
    dev.bind()?;
    let unsupported = |e: max_kernels_cuda::Error| match e {
        max_kernels_cuda::Error::Unsupported(msg) => Error::Value(msg),
        other => other.into(),
    };
    let ptrs = (a.addr(), w.addr(), out.addr());
    if gemv_nt::plan(out.dtype(), (rows, n, k), (a.addr(), w.addr())).is_some() {
        return gemv_nt::gemv_nt(&dev.stream, out.dtype(), ptrs, (rows, n, k), epi).map_err(unsupported);
    }
    let hopper = dev.arch.starts_with("sm_90") || dev.arch.starts_with("sm_10");
    if hopper {
        match max_kernels_cuda::launch::gemm_sm90::gemm_bt(&dev.stream, out.dtype(), ptrs, (rows, n, k), epi) {
            Err(max_kernels_cuda::Error::Unsupported(_)) => {}
            r => return r.map_err(unsupported),
        }
    }
    let wt = Buffer::empty(w.dtype(), &[k as i64, n as i64], out.device())?;
    max_kernels_cuda::launch::layout::copy_view(
        &dev.stream,
        w.addr(),
        &[1, k as isize],
        wt.addr(),
        &[n as isize, 1],
        &[k, n],
        w.dtype().size_in_bytes(),
    )
    .map_err(unsupported)?;
    matmul(dev, a, &wt, out, epi)
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

pub(super) fn matmul(dev: &CudaDevice, a: &Buffer, b: &Buffer, out: &Buffer, epi: &Epilogue) -> Result<()> {
    let (ba, m, k) = matrix_dims(a.shape(), true);
    let (bb, k2, n) = matrix_dims(b.shape(), false);
    if k != k2 {
        return Err(Error::Value(format!("matmul: shapes {:?} and {:?} do not contract", a.shape(), b.shape())));
    }
    let batch = out.num_elements() / (m * n).max(1);
    let (na, nb) = (ba.iter().product::<usize>(), bb.iter().product::<usize>());
    let width = out.dtype().size_in_bytes() as u64;
    dev.bind()?;
    let run = |pa: u64, pb: u64, pc: u64, count: usize, sa: usize, sb: usize, e: Epilogue| {
        max_kernels_cuda::launch::matmul(&dev.stream, out.dtype(), (pa, pb, pc), (m, n, k), count, (sa, sb, m * n), &e)
            .map_err(|e| match e {
                max_kernels_cuda::Error::Unsupported(msg) => Error::Value(msg),
                other => other.into(),
            })
    };
    let hopper = dev.arch.starts_with("sm_90") || dev.arch.starts_with("sm_10");
    // Batched A with one shared B folds into the rows of a single GEMM.
    let rows = if nb == 1 && na == batch { m * batch } else { m };
    let sm90 = hopper
        && max_kernels_cuda::launch::gemm_sm90::suitable(out.dtype(), rows, k, a.addr(), b.addr())
        && na == batch
        && (nb == batch || nb == 1);
    if (na == batch || na == 1) && (nb == batch || nb == 1) && !sm90 {
        // Few rows (decode): split-K kernels that stream B (batches sharing B fold into rows).
        let strides = (if na == 1 { 0 } else { m * k }, if nb == 1 { 0 } else { k * n }, m * n);
        if gemm_skinny::suitable(out.dtype(), (m, n, k), batch, strides, (a.addr(), b.addr())) {
            let ptrs = (a.addr(), b.addr(), out.addr());
            return gemm_skinny::gemm_skinny(&dev.stream, out.dtype(), ptrs, (m, n, k), batch, strides, epi, None)
                .map_err(|e| match e {
                    max_kernels_cuda::Error::Unsupported(msg) => Error::Value(msg),
                    other => other.into(),
                });
        }
    }
    if sm90 {
        // wgmma + TMA (persistent, clustered, split-K for few rows: launch/gemm_sm90p.rs).
        let r = max_kernels_cuda::launch::gemm_sm90::gemm(
            &dev.stream,
            out.dtype(),
            (a.addr(), b.addr(), out.addr()),
            (m, n, k),
            batch,
            (na, nb),
            epi,
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
        return run(a.addr(), b.addr(), out.addr(), batch, sa, sb, *epi);
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
        // The kernel indexes the residual like its output, from this batch's start.
        let mut e = *epi;
        if e.residual != 0 {
            e.residual += (z * m * n) as u64 * width;
        }
        run(pa, pb, out.addr() + (z * m * n) as u64 * width, 1, 0, 0, e)?;
    }
    Ok(())
}
