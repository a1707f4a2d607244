//! Collectives on GPUs: allreduce.sum through the GPUs' peer access and signal buffers
//! (`collective.p2p`, [`allreduce_p2p`]) where it fits, else NCCL (crate::nccl): one
//! communicator per ordered set of devices, each device's share of the op enqueued on its own
//! stream.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use max_graph::ops::Op;
use max_graph::ops::collective::{Collective, Params};
use max_graph::ops::reduction::RmsNormParams;
use max_kernels_cuda::launch::allreduce_p2p as p2p;
use max_tuning::Knob;

use super::super::program::{Step, StepKind};
use crate::cuda::{CudaDevice, peer_access};
use crate::{Buffer, Device, Error, Result, Stream};

/// One peer-to-peer allreduce's launches (one per device) at a time in the process, a replay of
/// a CUDA graph holding such launches included: another thread's launches falling between one
/// call's devices would pair different calls across the GPUs (each rank's epoch counts the
/// calls on its stream).
pub(crate) static P2P_TURN: Mutex<()> = Mutex::new(());

/// The ordered GPUs (ordinals) each signal buffer, by address, has served in a peer-to-peer
/// allreduce: its epochs count that group's calls, so it serves no other group.
static SERVED: Mutex<Option<HashMap<u64, Vec<usize>>>> = Mutex::new(None);

/// The norm a peer-to-peer allreduce may apply: each GPU's weight and result, the parameters.
type NormArgs<'a> = (&'a [Buffer], &'a [Buffer], RmsNormParams);

thread_local! {
    /// Whether the capture under way on this thread recorded a peer-to-peer allreduce.
    static P2P_CAPTURED: Cell<bool> = const { Cell::new(false) };
}

/// Whether the current (or last) capture on this thread recorded a peer-to-peer allreduce;
/// forgets it.
pub(crate) fn take_p2p_captured() -> bool {
    P2P_CAPTURED.with(|c| c.replace(false))
}

/// Runs collective `step` over its inputs (the tensors, then the signal buffers) on their GPUs.
pub(crate) fn run(step: &Step, inputs: &[Buffer], outputs: &[Buffer]) -> Result<()> {
    let StepKind::Op(op) = &step.kind else {
        return Err(Error::Value(format!("{}: not a collective", step.name())));
    };
    let (norm, plain) = match crate::engine::passes::split_qnorm(op) {
        Some((norm, plain)) => (Some(norm), plain),
        None => (None, op.clone()),
    };
    let (residual, plain) = match crate::engine::passes::split_residual(&plain) {
        Some(plain) => (true, plain),
        None => (false, plain),
    };
    if norm.is_none() && !residual {
        if allreduce_p2p(op, inputs, outputs, &[], None)? {
            return Ok(());
        }
        return crate::nccl::run(op, inputs, outputs);
    }
    joined(norm.as_ref(), residual, &plain, inputs, outputs)
}

/// An allreduce with a joined residual add (engine/passes/fuse_allreduce_residual.rs) and/or
/// rms_norm (engine/passes/fuse_allreduce_norm.rs): inputs the N tensors, the signal buffers,
/// the N residuals (with `residual`) and the N norm weights (with `norm`); outputs the N sums
/// (plus the residuals), then the N normalised sums (with `norm`). One peer-to-peer launch per
/// GPU where it fits, else the allreduce (peer to peer or NCCL), then the add and the rms_norm
/// kernel on each GPU's stream.
fn joined(norm: Option<&Op>, residual: bool, plain: &Op, inputs: &[Buffer], outputs: &[Buffer]) -> Result<()> {
    let n = if norm.is_some() { outputs.len() / 2 } else { outputs.len() };
    let per = 2 + residual as usize + norm.is_some() as usize;
    if n == 0 || outputs.len() != n * (1 + norm.is_some() as usize) || inputs.len() != per * n {
        return Err(Error::Value(format!(
            "allreduce_sum with a residual or rms_norm: {} inputs and {} results",
            inputs.len(),
            outputs.len()
        )));
    }
    let params = norm
        .map(|norm| RmsNormParams::from_attrs(&norm.attrs).map_err(|m| Error::Value(format!("rms_norm: {m}"))))
        .transpose()?;
    let (sums, normed) = outputs.split_at(n);
    let collective = &inputs[..2 * n];
    let residuals = if residual { &inputs[2 * n..3 * n] } else { &[] };
    let gammas = &inputs[(2 + residual as usize) * n..];
    if allreduce_p2p(plain, collective, sums, residuals, params.map(|p| (gammas, normed, p)))? {
        return Ok(());
    }
    if !allreduce_p2p(plain, collective, sums, &[], None)? {
        crate::nccl::run(plain, collective, sums)?;
    }
    for (sum, x) in sums.iter().zip(residuals) {
        add_in_place(sum, x)?;
    }
    let Some(params) = params else { return Ok(()) };
    for ((sum, gamma), out) in sums.iter().zip(gammas).zip(normed) {
        let k = sum.shape().last().copied().unwrap_or(1);
        let dev =
            sum.device().cuda().cloned().ok_or_else(|| Error::Value("allreduce_sum: a sum off the GPU".into()))?;
        let fits = |b: &Buffer| b.is_contiguous() && b.dtype() == sum.dtype() && b.device() == sum.device();
        if !fits(gamma) || !fits(out) || !sum.is_contiguous() || gamma.num_elements() != k {
            return Err(Error::Value(format!(
                "rms_norm after allreduce_sum: weight {:?} or result {:?} do not match the sum {:?}",
                gamma.shape(),
                out.shape(),
                sum.shape()
            )));
        }
        let rows = sum.num_elements() / k.max(1);
        let (eps, offset, mbc) = (params.epsilon, params.weight_offset, params.multiply_before_cast);
        dev.bind()?;
        max_kernels_cuda::launch::reduction::rms_norm(
            &dev.stream,
            sum.dtype(),
            (sum.addr(), gamma.addr(), out.addr()),
            rows,
            k,
            eps,
            offset,
            mbc,
        )?;
    }
    Ok(())
}

/// sum += x on the sum's GPU (passes::residual_add's elementwise group, in place: each element
/// is read before it is written, by the same thread): the residual add of a joined step that
/// the peer-to-peer allreduce did not take.
fn add_in_place(sum: &Buffer, x: &Buffer) -> Result<()> {
    let dev = sum.device().cuda().cloned().ok_or_else(|| Error::Value("allreduce_sum: a sum off the GPU".into()))?;
    if x.shape() != sum.shape() || x.dtype() != sum.dtype() || x.device() != sum.device() || !sum.is_contiguous() {
        return Err(Error::Value(format!(
            "allreduce_sum: residual {:?} does not match the sum {:?}",
            x.shape(),
            sum.shape()
        )));
    }
    let add = crate::engine::passes::residual_add(sum.dtype(), sum.shape());
    super::run_fused(&dev, &add, &[x.clone(), sum.clone()], sum)
}

/// An allreduce.sum through the signal buffers (kernels/allreduce_p2p.cu) when
/// `collective.p2p` is on and the call fits it: 2 to 8 GPUs (2 to 4 past 1 MiB, where each
/// rank reads the others' tensors) that may each access every other's memory, contiguous
/// tensors of one 16-bit or f32 type, 16-byte aligned,
/// signal buffers with room for the receive slots that have served no other group of GPUs, and
/// launches not serialised by CUDA_LAUNCH_BLOCKING=1 (the first rank would wait for the others
/// inside its own launch). False (nothing enqueued) otherwise.
///
/// With `residuals` (none, or each GPU's) the results are the sums plus them; with `norm` (each
/// GPU's norm weight and normalised result, the norm's parameters) the same launch also
/// normalises the results' rows, when they fit the kernel (`p2p::fits_norm`); false (nothing
/// enqueued) when they do not.
fn allreduce_p2p(
    op: &Op,
    inputs: &[Buffer],
    outputs: &[Buffer],
    residuals: &[Buffer],
    norm: Option<NormArgs>,
) -> Result<bool> {
    let tuning = max_tuning::current();
    if !tuning.flag_or(Knob::CollectiveP2p, true) || std::env::var("CUDA_LAUNCH_BLOCKING").as_deref() == Ok("1") {
        return Ok(false);
    }
    let rank = inputs.first().map_or(0, Buffer::rank);
    let Ok(p) = Params::of(op, inputs.len(), rank) else { return Ok(false) };
    let n = p.ranks;
    if p.op != Collective::AllreduceSum || n < 2 || outputs.len() != n || inputs.len() != 2 * n {
        return Ok(false);
    }
    let (tensors, sigs) = inputs.split_at(n);
    let Some(devices) = outputs.iter().map(|b| b.device().cuda().cloned()).collect::<Option<Vec<Arc<CudaDevice>>>>()
    else {
        return Ok(false);
    };
    let (dtype, count) = (tensors[0].dtype(), tensors[0].num_elements());
    let same_place = |b: &Buffer, d: &Arc<CudaDevice>| b.device().cuda().is_some_and(|x| x.ordinal == d.ordinal);
    let fitting = (0..n).all(|i| {
        let t = &tensors[i];
        t.is_contiguous()
            && t.dtype() == dtype
            && t.num_elements() == count
            && outputs[i].num_elements() == count
            && outputs[i].dtype() == dtype
            && outputs[i].is_contiguous()
            && same_place(t, &devices[i])
            && same_place(&sigs[i], &devices[i])
    });
    let fitting = fitting
        && (residuals.is_empty() || residuals.len() == n)
        && residuals.iter().enumerate().all(|(i, x)| {
            x.is_contiguous() && x.dtype() == dtype && x.num_elements() == count && same_place(x, &devices[i])
        });
    let mut addrs: Vec<u64> = tensors.iter().chain(outputs).chain(sigs).chain(residuals).map(Buffer::addr).collect();
    let signal = sigs.iter().map(Buffer::nbytes).min().unwrap_or(0);
    let k = tensors[0].shape().last().copied().unwrap_or(1);
    if let Some((gammas, normed, _)) = norm {
        let like = |b: &Buffer, elems: usize, i: usize| {
            b.is_contiguous() && b.dtype() == dtype && b.num_elements() == elems && same_place(b, &devices[i])
        };
        let ok = gammas.len() == n
            && normed.len() == n
            && (0..n).all(|i| like(&gammas[i], k, i) && like(&normed[i], count, i))
            && p2p::fits_norm(dtype, count, k);
        if !ok {
            return Ok(false);
        }
        addrs.extend(gammas.iter().chain(normed).map(Buffer::addr));
    }
    if !fitting || !p2p::fits(dtype, count, n, signal, &addrs) {
        return Ok(false);
    }
    if !(0..n).all(|i| (0..n).all(|j| i == j || peer_access(&devices[i], &devices[j]))) {
        return Ok(false);
    }
    let group: Vec<usize> = devices.iter().map(|d| d.ordinal).collect();
    {
        let mut served = SERVED.lock().unwrap_or_else(|p| p.into_inner());
        let served = served.get_or_insert_with(HashMap::new);
        if sigs.iter().any(|b| served.get(&b.addr()).is_some_and(|g| *g != group)) {
            return Ok(false);
        }
        for b in sigs {
            served.insert(b.addr(), group.clone());
        }
    }
    // Each device's stream starts after its input is ready; an input freed in the order of
    // another stream outlives the reads (as for NCCL).
    for (t, d) in tensors.iter().chain(residuals).zip(devices.iter().cycle()) {
        Stream::default_for(&Device::Cuda(d.clone())).wait_for(t.stream())?;
    }
    let streams: Vec<_> = devices.iter().map(|d| d.stream.clone()).collect();
    let ins: Vec<u64> = tensors.iter().map(Buffer::addr).collect();
    let outs: Vec<u64> = outputs.iter().map(Buffer::addr).collect();
    let sig: Vec<u64> = sigs.iter().map(Buffer::addr).collect();
    let timeout_ns = tuning.int(Knob::NcclTimeoutS).unwrap_or(120) as u64 * 1_000_000_000;
    {
        let _turn = P2P_TURN.lock().unwrap_or_else(|p| p.into_inner());
        let gammas: Vec<u64> = norm.map_or(vec![], |(g, _, _)| g.iter().map(Buffer::addr).collect());
        let normed: Vec<u64> = norm.map_or(vec![], |(_, o, _)| o.iter().map(Buffer::addr).collect());
        let norm = norm.map(|(_, _, params)| p2p::NormOut { gammas: &gammas, normed: &normed, k, params });
        let res: Vec<u64> = residuals.iter().map(Buffer::addr).collect();
        p2p::allreduce_p2p(&streams, dtype, (&ins, &outs, &sig), count, timeout_ns, &res, norm).map_err(Error::from)?;
    }
    if crate::cuda::capturing() {
        P2P_CAPTURED.with(|c| c.set(true));
    }
    for (t, d) in tensors.iter().zip(&devices) {
        t.stream().wait_for(&Stream::default_for(&Device::Cuda(d.clone())))?;
    }
    Ok(true)
}
