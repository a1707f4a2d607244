//! Matmul on the GPU: the Hopper wgmma kernel for large 16-bit problems, mma.sync or SIMT
//! kernels otherwise, each applying the fused epilogue of a `Gemm` step.

use max_graph::Attr;
use max_graph::ops::reduction::RmsNormParams;
use max_graph::ops::{Op, OpKind};
use max_kernels_cuda::launch::epilogue::{Act, Epilogue};
use max_kernels_cuda::launch::gemv_nt::{Fusion, NormPrologue};
use max_kernels_cuda::launch::{gemm_skinny, gemm_sm90, gemv_mma, gemv_nt};

use super::super::program::{Fused, GemmEpilogue, Operand};
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
/// products of one `a` (one output each, no epilogue) when the weights are read as stored; a
/// folded rms_norm or gated pair is [`folded`]'s, a folded rope + KV-cache store matmul_rope.rs's.
pub(super) fn fused(dev: &CudaDevice, g: &GemmEpilogue, inputs: &[Buffer], outputs: &[Buffer]) -> Result<()> {
    if let Some(store) = &g.rope_store {
        return super::matmul_rope::with_rope_store(dev, g, store, inputs, outputs);
    }
    // the kernels read every operand (x, the weights, bias, residual, the norm weight) as dense
    // rows: a strided view is copied first
    let dense: Vec<Buffer> =
        inputs.iter().map(|b| if b.is_contiguous() { Ok(b.clone()) } else { b.contiguous() }).collect::<Result<_>>()?;
    let inputs = &dense[..];
    if g.norm.is_some() || g.gated.is_some() {
        return folded(dev, g, inputs, outputs);
    }
    let weights = g.weights(outputs.len());
    let epi = epilogue_of(g, &inputs[1 + weights..])?;
    match g.b_transpose {
        Some(_) => matmul_wt(dev, &inputs[0], &inputs[1..=weights], outputs, &epi, g.const_weights),
        None => matmul(dev, &inputs[0], &inputs[1], &outputs[0], &epi),
    }
}

/// The epilogue of `g` over its bias and residual, the first of `extra`.
fn epilogue_of(g: &GemmEpilogue, extra: &[Buffer]) -> Result<Epilogue> {
    let mut extra = extra.iter();
    let bias = if g.bias { extra.next().map(|b| b.addr()) } else { None };
    let residual = if g.residual { extra.next().map(|r| r.addr()) } else { None };
    let act = g.act.as_ref().map(act_of).transpose()?.unwrap_or_default();
    Ok(Epilogue::new(bias, act, residual))
}

/// A product with a folded rms_norm (inputs `[x, W.., bias?, residual?, gamma]`, dense) and/or a
/// gated pair (`[a, W_gate, W_up]`): one GEMV launch where one takes the problem, else the steps
/// it replaced, through the scratch outputs after the results (program.rs).
fn folded(dev: &CudaDevice, g: &GemmEpilogue, inputs: &[Buffer], outputs: &[Buffer]) -> Result<()> {
    let bad = || Error::Value(format!("{}: missing inputs or outputs", g.name()));
    let results = outputs.len().checked_sub(g.scratch()).filter(|&r| r > 0).ok_or_else(bad)?;
    let weights = g.weights(results);
    if g.b_transpose.is_none() || inputs.len() < 1 + weights {
        return Err(bad());
    }
    let (outs, mut scratch) = (&outputs[..results], outputs[results..].iter());
    let a = &inputs[0];
    let ws = &inputs[1..=weights];
    let mut extra = inputs[1 + weights..].to_vec();
    let gamma = if g.norm.is_some() { Some(extra.pop().ok_or_else(bad)?) } else { None };
    let epi = epilogue_of(g, &extra)?;
    let k = *a.shape().last().unwrap_or(&1);
    let ns = weight_rows(a, ws)?;
    let norm = match (&g.norm, &gamma) {
        (Some(op), Some(gm)) => {
            let params = RmsNormParams::from_attrs(&op.attrs).map_err(|m| Error::Value(format!("rms_norm: {m}")))?;
            if gm.shape() != [k] || gm.dtype() != a.dtype() {
                return Err(Error::Value(format!(
                    "rms_norm: the weight {:?} does not match {:?}",
                    gm.shape(),
                    a.shape()
                )));
            }
            Some(NormPrologue { gamma: gm.addr(), params, post: g.norm_post })
        }
        _ => None,
    };
    if g.gated.is_some() && ns[0] != ns[1] {
        return Err(Error::Value(format!("gated matmul: the gate has {} rows, the up weight {}", ns[0], ns[1])));
    }
    let fusion = Fusion { norm, gated_up: g.gated.as_ref().map(|_| ws[1].addr()), rope: None };
    let consts = g.const_weights;
    let rows = a.num_elements() / k.max(1);
    let dtype = outs[0].dtype();
    let parts_of = |ws: &[Buffer], outs: &[Buffer]| -> Vec<(u64, u64, usize)> {
        ws.iter().zip(outs).zip(&ns).map(|((w, o), &n)| (w.addr(), o.addr(), n)).collect()
    };
    let (one_launch_ws, one_launch_ns) = if g.gated.is_some() { (&ws[..1], &ns[..1]) } else { (ws, &ns[..]) };
    let addrs: Vec<u64> = one_launch_ws.iter().map(|w| w.addr()).collect();
    dev.bind()?;
    if fusion.norm.is_none()
        && mma_rows(dev, dtype, a.addr(), &parts_of(one_launch_ws, outs), (rows, k), &epi, fusion.gated_up, consts)?
    {
        return Ok(());
    }
    if gemv_nt::plan(dtype, rows, one_launch_ns, k, a.addr(), &addrs, &fusion).is_some() {
        let parts = parts_of(one_launch_ws, outs);
        return gemv_nt::gemv_nt(&dev.stream, dtype, a.addr(), &parts, (rows, k), &epi, &fusion, consts)
            .map_err(Error::from);
    }
    if invariant_rows(dev, dtype, a.addr(), &parts_of(one_launch_ws, outs), (rows, k), &epi, (&fusion, consts))? {
        return Ok(());
    }
    // The unfused steps: rms_norm into its value, the products, the mul.
    let a = match norm {
        Some(n) => {
            let normed = scratch.next().ok_or_else(bad)?;
            let p = n.params;
            let ptrs = (a.addr(), n.gamma, normed.addr());
            let (eps, offset, mbc) = (p.epsilon, p.weight_offset, p.multiply_before_cast);
            max_kernels_cuda::launch::reduction::rms_norm(&dev.stream, dtype, ptrs, rows, k, eps, offset, mbc)?;
            normed
        }
        None => a,
    };
    let Some(mul) = &g.gated else { return matmul_wt(dev, a, ws, outs, &epi, consts) };
    if mma_rows(dev, dtype, a.addr(), &parts_of(&ws[..1], outs), (rows, k), &epi, Some(ws[1].addr()), consts)? {
        return Ok(());
    }
    if dev.wgmma() && !max_tuning::current().batch_invariant() {
        // One launch of the Hopper GEMM over both weights, act(gate) * up in its epilogue.
        let ptrs = (a.addr(), ws[0].addr(), ws[1].addr(), outs[0].addr());
        match gemm_sm90::gemm_bt_gated(&dev.stream, dtype, ptrs, (rows, ns[0], k), &epi, consts) {
            Err(max_kernels_cuda::Error::Unsupported(_)) => {}
            r => return r.map_err(Error::from),
        }
    }
    let (Some(gate), Some(up)) = (scratch.next(), scratch.next()) else { return Err(bad()) };
    if g.act.is_some() && !g.bias && !g.residual && !g.tail.nodes.is_empty() {
        // Rows for the GEMM: the activation joins the mul's elementwise pass (which reads the
        // gate anyway) rather than the gate's epilogue, whose kernel is not the identity
        // epilogue's (an H200, 2048 x 4096 x 7168 bf16: 225 us with SiLU, 174 without).
        matmul_wt(dev, a, &ws[..1], std::slice::from_ref(gate), &Epilogue::default(), consts)?;
        matmul_wt(dev, a, &ws[1..], std::slice::from_ref(up), &Epilogue::default(), consts)?;
        let t = g.tail.nodes.len();
        let shift = |o: &Operand| match *o {
            Operand::Input(0) => Operand::Node(t - 1),
            Operand::Input(i) => Operand::Input(i),
            Operand::Node(i) => Operand::Node(i + t),
        };
        let mut nodes = g.tail.nodes.clone();
        nodes.extend(mul.nodes.iter().map(|(op, args, ty)| (op.clone(), args.iter().map(shift).collect(), ty.clone())));
        return super::run_fused(dev, &Fused { nodes }, &[gate.clone(), up.clone()], &outs[0]);
    }
    matmul_wt(dev, a, &ws[..1], std::slice::from_ref(gate), &epi, consts)?;
    matmul_wt(dev, a, &ws[1..], std::slice::from_ref(up), &Epilogue::default(), consts)?;
    super::run_fused(dev, mul, &[gate.clone(), up.clone()], &outs[0])
}

/// Rows of each W [n, k] read transposed against `a` [.., k].
fn weight_rows(a: &Buffer, ws: &[Buffer]) -> Result<Vec<usize>> {
    let k = *a.shape().last().unwrap_or(&1);
    ws.iter()
        .map(|w| match w.shape() {
            [n, k2] if *k2 == k => Ok(*n),
            s => Err(Error::Value(format!(
                "matmul: the weight {s:?} (read transposed) does not contract with {:?}",
                a.shape()
            ))),
        })
        .collect()
}

/// `a @ W^T` for each W [n, k] as stored (passes/fuse_weight_transpose.rs) into its output; a's
/// batch dims fold into rows. One launch for all the weights up to 16 rows: from
/// `gemv_mma.min_rows` (2) the weights streamed into mma.sync ([`mma_rows`]), below it (or where
/// that kernel does not take the problem, up to gemv_nt::MAX_M rows) a warp per 1-4 rows of W;
/// more rows on Hopper the wgmma GEMM with W as its K-major operand (siblings with an identity
/// epilogue in one launch); elsewhere W is transposed into a scratch matrix first.
/// `consts`: the weights are constants (`GemmEpilogue::const_weights`).
fn matmul_wt(dev: &CudaDevice, a: &Buffer, ws: &[Buffer], outs: &[Buffer], epi: &Epilogue, consts: bool) -> Result<()> {
    let k = *a.shape().last().unwrap_or(&1);
    let ns = weight_rows(a, ws)?;
    let rows = a.num_elements() / k.max(1);
    let dtype = outs[0].dtype();
    dev.bind()?;
    let addrs: Vec<u64> = ws.iter().map(|w| w.addr()).collect();
    let plain = Fusion::default();
    let parts: Vec<(u64, u64, usize)> =
        ws.iter().zip(outs).zip(&ns).map(|((w, o), &n)| (w.addr(), o.addr(), n)).collect();
    if mma_rows(dev, dtype, a.addr(), &parts, (rows, k), epi, None, consts)? {
        return Ok(());
    }
    if gemv_nt::plan(dtype, rows, &ns, k, a.addr(), &addrs, &plain).is_some() {
        return gemv_nt::gemv_nt(&dev.stream, dtype, a.addr(), &parts, (rows, k), epi, &plain, consts)
            .map_err(Error::from);
    }
    if invariant_rows(dev, dtype, a.addr(), &parts, (rows, k), epi, (&plain, consts))? {
        return Ok(());
    }
    let hopper = dev.wgmma();
    let invariant = max_tuning::current().batch_invariant();
    if hopper && !invariant && ws.len() > 1 && ws.len() <= gemm_sm90::SIBLINGS && epi.is_identity() {
        // Sibling products (q, k and v) in one launch of the Hopper GEMM.
        match gemm_sm90::gemm_bt_siblings(&dev.stream, dtype, a.addr(), &parts, (rows, k), consts) {
            Err(max_kernels_cuda::Error::Unsupported(_)) => {}
            r => return r.map_err(Error::from),
        }
    }
    for ((w, out), &n) in ws.iter().zip(outs).zip(&ns) {
        if hopper {
            let ptrs = (a.addr(), w.addr(), out.addr());
            match max_kernels_cuda::launch::gemm_sm90::gemm_bt(&dev.stream, dtype, ptrs, (rows, n, k), epi, consts) {
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

/// One launch of the tensor-core GEMV (gemv_mma.cu: 2-16 rows by default, 16-bit types) for
/// `parts` (with `gated`: one gate part and the up weight's address) where it takes the problem
/// (gemv_mma::plan: sm_80 and later), outside `numerics.batch_invariant` (whose rows take gemv_nt's sums at
/// every batch size); false (nothing launched) otherwise. A folded norm is not its: at 2-4 rows
/// gemv_nt takes the fold, at more the rms_norm kernel runs first and then this.
#[allow(clippy::too_many_arguments)]
fn mma_rows(
    dev: &CudaDevice,
    dtype: max_graph::DType,
    a: u64,
    parts: &[(u64, u64, usize)],
    (rows, k): (usize, usize),
    epi: &Epilogue,
    gated: Option<u64>,
    consts: bool,
) -> Result<bool> {
    if max_tuning::current().batch_invariant() {
        return Ok(false);
    }
    Ok(gemv_mma::gemv_mma(&dev.stream, dtype, a, parts, (rows, k), epi, gated, consts)?)
}

/// Batch-invariant (`numerics.batch_invariant`), more than gemv_nt::MAX_M rows: gemv_nt per
/// group of MAX_M rows (the epilogue's residual and each output moved to the group), so each
/// row gets the sums, the folded norm and the rounding it gets at one row. A warp of gemv_nt
/// walks a row of W whole, each lane's columns in one order and the lanes' sums in one shuffle
/// tree whatever the kernel's row variant; the GEMMs' K order and split follow the row count.
/// false (nothing launched) otherwise, or where gemv_nt does not take the problem.
fn invariant_rows(
    dev: &CudaDevice,
    dtype: max_graph::DType,
    a: u64,
    parts: &[(u64, u64, usize)],
    (rows, k): (usize, usize),
    epi: &Epilogue,
    (fusion, consts): (&Fusion, bool),
) -> Result<bool> {
    let group = gemv_nt::MAX_M;
    if rows <= group || !max_tuning::current().batch_invariant() {
        return Ok(false);
    }
    let ns: Vec<usize> = parts.iter().map(|p| p.2).collect();
    let ws: Vec<u64> = parts.iter().map(|p| p.0).collect();
    if gemv_nt::plan(dtype, group, &ns, k, a, &ws, fusion).is_none() {
        return Ok(false);
    }
    let es = dtype.size_in_bytes() as u64;
    for r0 in (0..rows).step_by(group) {
        let r = r0 as u64;
        let moved: Vec<(u64, u64, usize)> = parts.iter().map(|&(w, c, n)| (w, c + r * n as u64 * es, n)).collect();
        let mut e = *epi;
        if e.residual != 0 {
            e.residual += r * parts[0].2 as u64 * es;
        }
        let m = (rows - r0).min(group);
        gemv_nt::gemv_nt(&dev.stream, dtype, a + r * k as u64 * es, &moved, (m, k), &e, fusion, consts)?;
    }
    Ok(true)
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
    if out.num_elements() == 0 {
        return Ok(()); // (a batch, M or N of 0: nothing to write)
    }
    let batch = out.num_elements() / (m * n).max(1);
    let (na, nb) = (ba.iter().product::<usize>(), bb.iter().product::<usize>());
    let width = out.dtype().size_in_bytes() as u64;
    dev.bind()?;
    let run = |pa: u64, pb: u64, pc: u64, count: usize, sa: usize, sb: usize, e: Epilogue| {
        max_kernels_cuda::launch::matmul(&dev.stream, out.dtype(), (pa, pb, pc), (m, n, k), count, (sa, sb, m * n), &e)
            .map_err(Error::from)
    };
    let hopper = dev.wgmma();
    // Batched A with one shared B folds into the rows of a single GEMM.
    let rows = if nb == 1 && na == batch { m * batch } else { m };
    let sm90 = hopper
        && max_kernels_cuda::launch::gemm_sm90::suitable(out.dtype(), rows, n, k, a.addr(), b.addr())
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
