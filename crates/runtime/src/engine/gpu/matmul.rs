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

/// A `Gemm` step: inputs are `[a, b, bias?, residual?]`, or `[a, W_1 .. W_n]` for n > 1 sibling
/// products of one `a` (one output each, no epilogue) when the weights are read as stored.
pub(super) fn fused(dev: &CudaDevice, g: &GemmEpilogue, inputs: &[Buffer], outputs: &[Buffer]) -> Result<()> {
    let weights = if g.b_transpose.is_some() { outputs.len() } else { 1 };
    let mut extra = inputs[1 + weights..].iter();
    let bias = if g.bias { extra.next().map(|b| b.addr()) } else { None };
    let residual = if g.residual { extra.next().map(|r| r.addr()) } else { None };
    let act = g.act.as_ref().map(act_of).transpose()?.unwrap_or_default();
    let epi = Epilogue::new(bias, act, residual);
    match g.b_transpose {
        Some(_) => matmul_wt(dev, &inputs[0], &inputs[1..=weights], outputs, &epi),
        None => matmul(dev, &inputs[0], &inputs[1], &outputs[0], &epi),
    }
}

/// `a @ W^T` for each W [n, k] as stored (passes/fuse_weight_transpose.rs) into its output; a's
/// batch dims fold into rows. Up to gemv_nt::MAX_M rows one launch for all the weights, a warp
/// per 1-4 rows of W; more rows on Hopper the wgmma GEMM with W as its K-major operand;
/// elsewhere W is transposed into a scratch matrix first.
fn matmul_wt(dev: &CudaDevice, a: &Buffer, ws: &[Buffer], outs: &[Buffer], epi: &Epilogue) -> Result<()> {
    let k = *a.shape().last().unwrap_or(&1);
    let mut ns = Vec::with_capacity(ws.len());
    for w in ws {
        match w.shape() {
            [n, k2] if *k2 == k => ns.push(*n),
            s => {
                return Err(Error::Value(format!(
                    "matmul: the weight {s:?} (read transposed) does not contract with {:?}",
                    a.shape()
                )));
            }
        }
    }
    let rows = a.num_elements() / k.max(1);
    let dtype = outs[0].dtype();
    dev.bind()?;
    let addrs: Vec<u64> = ws.iter().map(|w| w.addr()).collect();
    if gemv_nt::plan(dtype, rows, &ns, k, a.addr(), &addrs).is_some() {
        let parts: Vec<(u64, u64, usize)> =
            ws.iter().zip(outs).zip(&ns).map(|((w, o), &n)| (w.addr(), o.addr(), n)).collect();
        return gemv_nt::gemv_nt(&dev.stream, dtype, a.addr(), &parts, (rows, k), epi).map_err(Error::from);
    }
    let hopper = dev.arch.starts_with("sm_90") || dev.arch.starts_with("sm_10");
    for ((w, out), &n) in ws.iter().zip(outs).zip(&ns) {
        if hopper {
            let ptrs = (a.addr(), w.addr(), out.addr());
            match max_kernels_cuda::launch::gemm_sm90::gemm_bt(&dev.stream, dtype, ptrs, (rows, n, k), epi) {
                Err(max_kernels_cuda::Error::Unsupported(_)) => {}
                r => {
                    r.map_err(Error::from)?;
                    continue;
                }
            }
        }
        let wt = Buffer::empty(w.dtype(), &[k as i64, n as i64], out.device())?;
        let elem = w.dtype().size_in_bytes();
        let (src, dst) = ([1, k as isize], [n as isize, 1]);
        max_kernels_cuda::launch::layout::copy_view(&dev.stream, w.addr(), &src, wt.addr(), &dst, &[k, n], elem)
            .map_err(Error::from)?;
        matmul(dev, a, &wt, out, epi)?;
    }
    Ok(())
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
            .map_err(Error::from)
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
                .map_err(Error::from);
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
