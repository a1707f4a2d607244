//! Collectives on GPUs through NCCL (loaded at run time, `api.rs`; communicators and the
//! watchdog, `comm.rs`). One call enqueues every device's share of the op on that device's
//! stream inside one NCCL group (all ranks live in this process) and returns without waiting.
//!
//! - allreduce.sum: `ncclAllReduce` (one rank: a copy);
//! - allgather: `ncclAllGather` along axis 0 when the pieces are equal, else one
//!   `ncclBroadcast` per piece into its place; along an inner axis the pieces are gathered into
//!   a staging buffer and copied into place with a 2-D copy;
//! - reducescatter.sum: `ncclReduceScatter` (axis 0 only);
//! - distributed_broadcast: `ncclBroadcast` from the input's device.

pub mod api;
mod comm;

use std::ffi::c_void;
use std::sync::Arc;

use max_graph::ops::Op;
use max_graph::ops::collective::{Collective, Params};

pub use api::add_search_dir;
pub(crate) use comm::Comms;

use crate::cuda::CudaDevice;
use crate::{Buffer, Device, Error, Result, Stream};

fn gpu_of(op: &Op, b: &Buffer) -> Result<Arc<CudaDevice>> {
    b.device()
        .cuda()
        .cloned()
        .ok_or_else(|| Error::Value(format!("{}: every value of a GPU collective must be on a GPU", op.kind.name())))
}

fn stream_of(dev: &CudaDevice) -> api::Stream {
    dev.stream.cu_stream() as api::Stream
}

/// Runs collective `op`: `inputs` are the tensors (broadcast: the one tensor) then the signal
/// buffers; `outputs` one per device, on the devices of the signal buffers, in order.
pub fn run(op: &Op, inputs: &[Buffer], outputs: &[Buffer]) -> Result<()> {
    let rank = inputs.first().map_or(0, Buffer::rank);
    let p = Params::of(op, inputs.len(), rank).map_err(|e| Error::Value(e.to_string()))?;
    if outputs.len() != p.ranks || p.ranks == 0 {
        return Err(Error::Value(format!("{}: {} results for {} devices", op.kind.name(), outputs.len(), p.ranks)));
    }
    let devices: Vec<Arc<CudaDevice>> = outputs.iter().map(|b| gpu_of(op, b)).collect::<Result<_>>()?;
    let tensors: Vec<Buffer> = match p.op {
        Collective::Broadcast => vec![inputs[0].clone()],
        _ => inputs[..p.ranks].to_vec(),
    };
    // Each device's stream starts the collective after its input is ready.
    let tensors: Vec<Buffer> = tensors
        .iter()
        .map(|b| {
            let dev = gpu_of(op, b)?;
            Stream::default_for(&Device::Cuda(dev)).wait_for(b.stream())?;
            if b.is_contiguous() { Ok(b.clone()) } else { b.contiguous() }
        })
        .collect::<Result<_>>()?;
    let api = api::api()?;
    let comms = comm::comms_for(&devices)?;
    comms.check_alive()?;
    let one_at_a_time = comms.enqueue.lock().unwrap_or_else(|p| p.into_inner());
    let what = op.kind.name();
    match p.op {
        Collective::AllreduceSum => {
            let dt = sum_type(op, &tensors[0])?;
            group(api, what, p.ranks, |i| {
                // SAFETY: device buffers of `count` elements on rank i's device; its stream.
                unsafe {
                    (api.all_reduce)(
                        ptr(&tensors[i]),
                        ptr_mut(&outputs[i]),
                        tensors[i].num_elements(),
                        dt,
                        api::SUM,
                        comms.rank(i),
                        stream_of(&devices[i]),
                    )
                }
            })?;
        }
        Collective::ReducescatterSum => {
            if outer(&tensors[0], p.axis) != 1 {
                return Err(Error::Value(format!(
                    "{what}: on GPUs the scatter axis must be the outermost non-unit axis (got axis {})",
                    p.axis
                )));
            }
            let dt = sum_type(op, &tensors[0])?;
            group(api, what, p.ranks, |i| {
                // SAFETY: input of ranks * count elements, output of count, on rank i's device.
                unsafe {
                    (api.reduce_scatter)(
                        ptr(&tensors[i]),
                        ptr_mut(&outputs[i]),
                        outputs[i].num_elements(),
                        dt,
                        api::SUM,
                        comms.rank(i),
                        stream_of(&devices[i]),
                    )
                }
            })?;
        }
        Collective::Broadcast => {
            let src = &tensors[0];
            let root = devices
                .iter()
                .position(|d| src.device().cuda().is_some_and(|s| s.ordinal == d.ordinal))
                .ok_or_else(|| Error::Value(format!("{what}: the input's GPU is not among the signal buffers'")))?;
            group(api, what, p.ranks, |i| {
                let send = if i == root { ptr(src) } else { ptr(&outputs[i]) };
                // SAFETY: nbytes on each rank's device; only the root reads `send`.
                unsafe {
                    (api.broadcast)(
                        send,
                        ptr_mut(&outputs[i]),
                        src.nbytes(),
                        api::BYTES,
                        root as i32,
                        comms.rank(i),
                        stream_of(&devices[i]),
                    )
                }
            })?;
        }
        Collective::Allgather => allgather(api, &comms, &devices, &tensors, outputs, p.axis, what)?,
    }
    drop(one_at_a_time);
    // An input freed in the order of another stream must outlive the collective's reads.
    for t in &tensors {
        if let Some(dev) = t.device().cuda() {
            t.stream().wait_for(&Stream::default_for(&Device::Cuda(dev.clone())))?;
        }
    }
    if crate::cuda::capturing() {
        // Recorded into a CUDA graph: each replay is watched instead (watch_replay).
        CAPTURED.with(|c| {
            let mut c = c.borrow_mut();
            if !c.iter().any(|k| Arc::ptr_eq(k, &comms)) {
                c.push(comms.clone());
            }
        });
        return Ok(());
    }
    let events = devices
        .iter()
        .map(|d| {
            d.bind()?;
            let ev = d.stream.record_event(None).map_err(Error::cuda("cuEventRecord"))?;
            Ok((d.clone(), ev))
        })
        .collect::<Result<_>>()?;
    comm::watch(comm::Pending { comms, events, what });
    Ok(())
}

thread_local! {
    /// The communicators used while this thread records a CUDA graph.
    static CAPTURED: std::cell::RefCell<Vec<Arc<Comms>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Takes the communicators the current (or last) capture on this thread used.
pub(crate) fn take_captured() -> Vec<Arc<Comms>> {
    CAPTURED.with(|c| std::mem::take(&mut *c.borrow_mut()))
}

/// Hands the watchdog a replay of a graph holding collectives of `comms`: an event after the
/// graph on `origin`'s stream (which launched it), so a collective that never finishes aborts
/// the communicator after `nccl.timeout_s` instead of hanging the process.
pub(crate) fn watch_replay(comms: &Arc<Comms>, origin: &Arc<CudaDevice>) -> Result<()> {
    comms.check_alive()?;
    origin.bind()?;
    let ev = origin.stream.record_event(None).map_err(Error::cuda("cuEventRecord"))?;
    comm::watch(comm::Pending {
        comms: comms.clone(),
        events: vec![(origin.clone(), ev)],
        what: "a CUDA graph's collectives",
    });
    Ok(())
}

fn ptr(b: &Buffer) -> *const c_void {
    b.addr() as *const c_void
}

fn ptr_mut(b: &Buffer) -> *mut c_void {
    b.addr() as *mut c_void
}

fn sum_type(op: &Op, b: &Buffer) -> Result<i32> {
    api::data_type(b.dtype())
        .filter(|_| b.dtype() != max_graph::DType::Bool)
        .ok_or_else(|| Error::Value(format!("{}: NCCL cannot sum {} values on GPUs", op.kind.name(), b.dtype())))
}

/// Elements before `axis` (the number of rows of the `[outer, axis * inner]` view).
fn outer(b: &Buffer, axis: usize) -> usize {
    b.shape()[..axis].iter().product()
}

/// Enqueues `call(i)` for `i` in `0..n` inside one NCCL group.
fn group(api: &api::Api, what: &str, n: usize, call: impl Fn(usize) -> api::Status) -> Result<()> {
    // SAFETY: group calls only batch the calls between them.
    api.check("ncclGroupStart", unsafe { (api.group_start)() })?;
    let mut first_err = Ok(());
    for i in 0..n {
        let status = call(i);
        if first_err.is_ok() {
            first_err = api.check(what, status);
        }
    }
    // SAFETY: closes the group opened above (always, so NCCL's group depth stays balanced).
    let end = api.check("ncclGroupEnd", unsafe { (api.group_end)() });
    first_err.and(end)
}

/// Gathers every rank's piece (`pieces[r]` bytes from rank r) into `dst[i]` on each rank i,
/// piece r at byte offset `offsets[r]`: one allgather when the pieces are equal, else one
/// broadcast per piece.
fn gather_bytes(
    api: &api::Api,
    comms: &comm::Comms,
    devices: &[Arc<CudaDevice>],
    src: &[Buffer],
    dst: &[u64],
    what: &str,
) -> Result<()> {
    let n = devices.len();
    let sizes: Vec<usize> = src.iter().map(Buffer::nbytes).collect();
    let offsets: Vec<usize> = sizes
        .iter()
        .scan(0, |acc, s| {
            let o = *acc;
            *acc += s;
            Some(o)
        })
        .collect();
    if sizes.iter().all(|&s| s == sizes[0]) {
        return group(api, what, n, |i| {
            // SAFETY: rank i sends its piece and receives n pieces into dst[i] (room for all).
            unsafe {
                (api.all_gather)(
                    ptr(&src[i]),
                    dst[i] as *mut c_void,
                    sizes[0],
                    api::BYTES,
                    comms.rank(i),
                    stream_of(&devices[i]),
                )
            }
        });
    }
    group(api, what, n * n, |k| {
        let (i, r) = (k / n, k % n);
        let recv = (dst[i] + offsets[r] as u64) as *mut c_void;
        let send = if i == r { ptr(&src[r]) } else { recv as *const c_void };
        // SAFETY: piece r's bytes, read on its root, written at its offset on every rank.
        unsafe { (api.broadcast)(send, recv, sizes[r], api::BYTES, r as i32, comms.rank(i), stream_of(&devices[i])) }
    })
}

fn allgather(
    api: &api::Api,
    comms: &comm::Comms,
    devices: &[Arc<CudaDevice>],
    tensors: &[Buffer],
    outputs: &[Buffer],
    axis: usize,
    what: &'static str,
) -> Result<()> {
    let rows = outer(&tensors[0], axis);
    if rows == 1 {
        let dst: Vec<u64> = outputs.iter().map(Buffer::addr).collect();
        return gather_bytes(api, comms, devices, tensors, &dst, what);
    }
    // Along an inner axis each piece is `rows` runs of bytes: gather the pieces whole into a
    // staging buffer per device, then copy each piece's runs into its columns. (The staging
    // buffers would not outlive a CUDA graph: such a plan runs step by step.)
    crate::cuda::forbid_in_capture("an allgather of several rows along an inner axis")?;
    let total = outputs[0].nbytes();
    let staging: Vec<Buffer> = devices
        .iter()
        .map(|d| {
            Buffer::empty_on(max_graph::DType::UInt8, &[total as i64], &Stream::default_for(&Device::Cuda(d.clone())))
        })
        .collect::<Result<_>>()?;
    let dst: Vec<u64> = staging.iter().map(Buffer::addr).collect();
    gather_bytes(api, comms, devices, tensors, &dst, what)?;
    let row_bytes: Vec<usize> = tensors.iter().map(|t| t.nbytes() / rows).collect();
    let out_pitch: usize = row_bytes.iter().sum();
    for (i, d) in devices.iter().enumerate() {
        d.bind()?;
        let (mut src_off, mut col) = (0usize, 0usize);
        for &width in &row_bytes {
            let copy = cudarc::driver::sys::CUDA_MEMCPY2D {
                srcXInBytes: 0,
                srcY: 0,
                srcMemoryType: cudarc::driver::sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
                srcHost: std::ptr::null(),
                srcDevice: staging[i].addr() + src_off as u64,
                srcArray: std::ptr::null_mut(),
                srcPitch: width,
                dstXInBytes: 0,
                dstY: 0,
                dstMemoryType: cudarc::driver::sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
                dstHost: std::ptr::null_mut(),
                dstDevice: outputs[i].addr() + col as u64,
                dstArray: std::ptr::null_mut(),
                dstPitch: out_pitch,
                WidthInBytes: width,
                Height: rows,
            };
            // SAFETY: both ranges lie in device buffers of this device (staging: rows * width
            // bytes from src_off; the output: rows rows of out_pitch bytes, width from col).
            unsafe { cudarc::driver::sys::cuMemcpy2DAsync_v2(&copy, d.stream.cu_stream()) }
                .result()
                .map_err(Error::cuda("cuMemcpy2DAsync"))?;
            src_off += width * rows;
            col += width;
        }
    }
    Ok(())
}
