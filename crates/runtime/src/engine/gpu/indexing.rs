//! GPU kernels of the indexing ops. gather and gather_nd: the index vectors are resolved into
//! source row numbers on the device (`resolve`), then one row gather copies them (a gather of
//! i32, i64, u32 or u64 indices in one launch that resolves them as it copies: `gather_idx`). scatter and
//! scatter_nd: the input is copied into the result, the indices resolved, and the updates
//! written in two phases so that, as on the CPU, the last update to a place wins
//! deterministically (see kernels/indexing.cu).
//!
//! Index errors: `resolve` records the position of the first out-of-range index in a device
//! word that is read back after the launches (one small copy and a stream synchronisation).
//! When it is set, the op is run again by the CPU kernel on host copies, which raises exactly
//! the CPU's error. The same host path runs masked_scatter and nonzero (their results depend on
//! a count of true/non-zero elements, a prefix sum that is cheap on the host for the sizes they
//! see), and any call whose shapes the CPU kernel would reject, so messages always match.

use max_graph::DType;
use max_graph::ops::{Op, OpKind};
use max_kernels_cuda::launch::{indexing as ki, layout as kl};

use crate::cuda::CudaDevice;
use crate::operands::{axis_of, int_attr};
use crate::strided::contiguous_strides;
use crate::{Buffer, Device, Error, Result};

pub(crate) fn run(dev: &CudaDevice, op: &Op, inputs: &[Buffer], outputs: &[Buffer]) -> Result<()> {
    let want = match op.kind {
        OpKind::Gather | OpKind::GatherNd => 2,
        OpKind::NonZero => 1,
        _ => 3,
    };
    if inputs.len() != want || outputs.len() != 1 {
        return on_host(op, inputs, outputs);
    }
    dev.bind()?;
    let (i, out) = (inputs, &outputs[0]);
    match op.kind {
        OpKind::Gather => gather(dev, op, &i[0], &i[1], out, inputs, outputs),
        OpKind::GatherNd => gather_nd(dev, op, &i[0], &i[1], out, inputs, outputs),
        OpKind::Scatter => scatter(dev, op, (&i[0], &i[1], &i[2]), out, inputs, outputs),
        OpKind::ScatterNd => scatter_nd(dev, op, (&i[0], &i[1], &i[2]), out, inputs, outputs),
        _ => on_host(op, inputs, outputs),
    }
}

/// Runs the op's CPU kernel on host copies of the inputs and copies its results back into the
/// device outputs.
pub(super) fn on_host(op: &Op, inputs: &[Buffer], outputs: &[Buffer]) -> Result<()> {
    let hin: Vec<Buffer> = inputs.iter().map(|b| b.to(&Device::Cpu)).collect::<Result<_>>()?;
    let hout: Vec<Buffer> = outputs
        .iter()
        .map(|b| Buffer::empty(b.dtype(), &b.shape().iter().map(|d| *d as i64).collect::<Vec<_>>(), &Device::Cpu))
        .collect::<Result<_>>()?;
    crate::engine::host_dispatch::run_cpu(op, &hin, &hout)?;
    for (o, h) in outputs.iter().zip(&hout) {
        o.inplace_copy_from(h)?;
    }
    Ok(())
}

/// A device int64 tensor holding `values`, on the stream of `like`.
pub(super) fn upload_i64(values: &[i64], like: &Buffer) -> Result<Buffer> {
    let n = values.len() as i64;
    let dev = Buffer::empty_on(DType::Int64, &[n], like.stream())?;
    if values.is_empty() {
        return Ok(dev);
    }
    let host = Buffer::empty(DType::Int64, &[n], &Device::Cpu)?;
    // SAFETY: a fresh contiguous host buffer of exactly values.len() int64 elements.
    unsafe { std::ptr::copy_nonoverlapping(values.as_ptr().cast::<u8>(), host.addr() as *mut u8, values.len() * 8) };
    dev.inplace_copy_from(&host)?;
    Ok(dev)
}

fn contiguous(b: &Buffer) -> Result<Buffer> {
    if b.is_contiguous() { Ok(b.clone()) } else { b.contiguous() }
}

/// Room for `n` resolved rows plus the error word after them (set to "no error"; not inside a
/// CUDA graph capture, where nothing reads it: `gather_index_error`, and a scatter's check
/// ends the capture).
fn rows_buffer(dev: &CudaDevice, n: usize, like: &Buffer) -> Result<(Buffer, u64)> {
    let rows = Buffer::empty_on(DType::Int64, &[n as i64 + 1], like.stream())?;
    let err = rows.addr() + 8 * n as u64;
    if !crate::cuda::capturing() {
        max_kernels_cuda::launch::fill(&dev.stream, err, 1, 8, u64::MAX).map_err(Error::from)?;
    }
    Ok((rows, err))
}

/// Whether `resolve` recorded an out-of-range index (waits for the stream).
fn index_error(dev: &CudaDevice, err: u64) -> Result<bool> {
    crate::cuda::forbid_in_capture("an index range check")?;
    let mut word = [0u64; 1];
    // SAFETY: `err` is one u64 of device memory that stays alive (its buffer is held by the
    // caller) until the synchronisation below; `word` is host memory of that size.
    unsafe { cudarc::driver::result::memcpy_dtoh_async(&mut word[..], err, dev.stream.cu_stream()) }
        .map_err(Error::cuda("cuMemcpyDtoHAsync"))?;
    dev.stream.synchronize().map_err(Error::cuda("cuStreamSynchronize"))?;
    Ok(word[0] != u64::MAX)
}

/// A gather's range check: as `index_error`, except inside a CUDA graph capture, where it
/// cannot read the host and an out-of-range index reads row 0 unreported (a read stays in
/// bounds; the first, uncaptured execution of the same plan has checked the same way with the
/// host). Scatters keep the check: a bad index there would write.
fn gather_index_error(dev: &CudaDevice, err: u64) -> Result<bool> {
    if crate::cuda::capturing() { Ok(false) } else { index_error(dev, err) }
}

/// A zeroed u32 winner array of `n` entries for a two-phase scatter.
fn winner_buffer(n: usize, like: &Buffer) -> Result<Buffer> {
    let w = Buffer::empty_on(DType::UInt32, &[n as i64], like.stream())?;
    if n > 0 {
        w.fill_bits(0)?;
    }
    Ok(w)
}

/// `out[p, i, q] = input[p, indices[i], q]` for `input` split as `[pre, dim, post]` at `axis`.
fn gather(
    dev: &CudaDevice,
    op: &Op,
    input: &Buffer,
    indices: &Buffer,
    out: &Buffer,
    inputs: &[Buffer],
    outputs: &[Buffer],
) -> Result<()> {
    let shape = input.shape();
    let axis = axis_of(op, input.rank())?;
    let dim = shape[axis];
    let outer: usize = shape[..axis].iter().product();
    let row: usize = shape[axis + 1..].iter().product();
    let n = indices.num_elements();
    let e = input.dtype().size_in_bytes();
    let fits = out.nbytes() == outer * n * row * e && out.dtype() == input.dtype();
    if !fits || !ki::is_index_dtype(indices.dtype()) || (dim == 0 && n > 0) {
        return on_host(op, inputs, outputs);
    }
    if n == 0 {
        return Ok(());
    }
    let (input, indices) = (contiguous(input)?, contiguous(indices)?);
    let s = &dev.stream;
    // One launch that resolves the indices as it copies (the common index dtypes), else the
    // resolution into row numbers, then the row gather.
    let one = ki::gather_index_takes(indices.dtype());
    let (rows, err) = rows_buffer(dev, if one { 0 } else { n }, out)?;
    if one {
        let ptrs = (input.addr(), out.addr(), indices.addr());
        ki::gather_index(s, ptrs, indices.dtype(), (outer, n, dim), row, e, err).map_err(Error::from)?;
    } else {
        let (raw, rows) = (indices.addr(), rows.addr());
        ki::resolve(s, raw, indices.dtype(), rows, n as u64, &[dim], (1, 0), err).map_err(Error::from)?;
        ki::gather_rows(s, input.addr(), out.addr(), rows, (outer, n, dim), row, e).map_err(Error::from)?;
    }
    if gather_index_error(dev, err)? {
        return on_host(op, inputs, outputs);
    }
    Ok(())
}

/// `out[b, g, r] = input[b, indices[b, g, :], r]` after `batch_dims` shared dims.
fn gather_nd(
    dev: &CudaDevice,
    op: &Op,
    input: &Buffer,
    indices: &Buffer,
    out: &Buffer,
    inputs: &[Buffer],
    outputs: &[Buffer],
) -> Result<()> {
    let (shape, ishape) = (input.shape(), indices.shape());
    let Ok(batch) = usize::try_from(int_attr(op, "batch_dims")?) else {
        return on_host(op, inputs, outputs);
    };
    let Some((&k, gdims)) = ishape.split_last() else {
        return on_host(op, inputs, outputs);
    };
    let valid = gdims.len() >= batch && batch + k <= shape.len() && shape[..batch] == gdims[..batch];
    if !valid || k == 0 || k > ki::MAX_RANK || !ki::is_index_dtype(indices.dtype()) {
        return on_host(op, inputs, outputs);
    }
    let nbatch: usize = shape[..batch].iter().product();
    let per_batch: usize = gdims[batch..].iter().product();
    let sdims = &shape[batch..batch + k];
    let slices: usize = sdims.iter().product();
    let row: usize = shape[batch + k..].iter().product();
    let nvec = nbatch * per_batch;
    let e = input.dtype().size_in_bytes();
    if out.nbytes() != nvec * row * e || out.dtype() != input.dtype() || (slices == 0 && nvec > 0) {
        return on_host(op, inputs, outputs);
    }
    if nvec == 0 {
        return Ok(());
    }
    let (input, indices) = (contiguous(input)?, contiguous(indices)?);
    let (rows, err) = rows_buffer(dev, nvec, out)?;
    let s = &dev.stream;
    ki::resolve(s, indices.addr(), indices.dtype(), rows.addr(), nvec as u64, sdims, (per_batch, slices), err)
        .map_err(Error::from)?;
    ki::gather_rows(s, input.addr(), out.addr(), rows.addr(), (1, nvec, 0), row, e).map_err(Error::from)?;
    if gather_index_error(dev, err)? {
        return on_host(op, inputs, outputs);
    }
    Ok(())
}

/// The input copied into the (contiguous) output.
fn copy_input(dev: &CudaDevice, input: &Buffer, out: &Buffer) -> Result<()> {
    let e = input.dtype().size_in_bytes();
    let dst = contiguous_strides(input.shape());
    kl::copy_view(&dev.stream, input.addr(), input.strides(), out.addr(), &dst, input.shape(), e).map_err(Error::from)
}

/// `out = input` except `out[c with c[axis] = indices[c]] = updates[c]` for every coordinate
/// `c` of `updates`, later ones winning.
fn scatter(
    dev: &CudaDevice,
    op: &Op,
    (input, updates, indices): (&Buffer, &Buffer, &Buffer),
    out: &Buffer,
    inputs: &[Buffer],
    outputs: &[Buffer],
) -> Result<()> {
    let (shape, ushape) = (input.shape(), updates.shape());
    let Ok(axis) = axis_of(op, input.rank()) else {
        return on_host(op, inputs, outputs);
    };
    let valid = input.dtype() == updates.dtype()
        && ushape == indices.shape()
        && ushape.len() == shape.len()
        && ushape.iter().zip(shape).enumerate().all(|(d, (&u, &n))| d == axis || u <= n)
        && out.nbytes() == input.nbytes()
        && out.dtype() == input.dtype();
    let n = updates.num_elements();
    let size = shape[axis];
    if !valid
        || shape.len() > ki::MAX_RANK
        || !ki::is_index_dtype(indices.dtype())
        || (size == 0 && n > 0)
        || n >= u32::MAX as usize
    {
        return on_host(op, inputs, outputs);
    }
    copy_input(dev, input, out)?;
    if n == 0 {
        return Ok(());
    }
    let (updates, indices) = (contiguous(updates)?, contiguous(indices)?);
    let (rows, err) = rows_buffer(dev, n, out)?;
    let s = &dev.stream;
    ki::resolve(s, indices.addr(), indices.dtype(), rows.addr(), n as u64, &[size], (1, 0), err)
        .map_err(Error::from)?;
    // Two updates can only hit one place when they share their coordinate off the axis.
    let winner = if ushape[axis] > 1 {
        let w = winner_buffer(n / ushape[axis] * size, out)?;
        ki::scatter_claim(s, rows.addr(), w.addr(), ushape, shape, axis).map_err(Error::from)?;
        Some(w)
    } else {
        None
    };
    let w = winner.as_ref().map_or(0, |w| w.addr());
    let e = input.dtype().size_in_bytes();
    ki::scatter(s, updates.addr(), out.addr(), rows.addr(), w, ushape, shape, axis, e).map_err(Error::from)?;
    if index_error(dev, err)? {
        return on_host(op, inputs, outputs);
    }
    Ok(())
}

/// `out = input` except the slice `out[indices[u, :]]` becomes `updates[u]`, in order.
fn scatter_nd(
    dev: &CudaDevice,
    op: &Op,
    (input, updates, indices): (&Buffer, &Buffer, &Buffer),
    out: &Buffer,
    inputs: &[Buffer],
    outputs: &[Buffer],
) -> Result<()> {
    let shape = input.shape();
    let Some((&k, udims)) = indices.shape().split_last() else {
        return on_host(op, inputs, outputs);
    };
    let valid = input.dtype() == updates.dtype()
        && k >= 1
        && k <= shape.len()
        && updates.shape().iter().copied().eq(udims.iter().chain(&shape[k..]).copied())
        && out.nbytes() == input.nbytes()
        && out.dtype() == input.dtype();
    let nvec: usize = udims.iter().product();
    let targets: usize = if valid { shape[..k].iter().product() } else { 0 };
    if !valid
        || k > ki::MAX_RANK
        || !ki::is_index_dtype(indices.dtype())
        || (targets == 0 && nvec > 0)
        || nvec >= u32::MAX as usize
    {
        return on_host(op, inputs, outputs);
    }
    copy_input(dev, input, out)?;
    if nvec == 0 {
        return Ok(());
    }
    let row: usize = shape[k..].iter().product();
    let (updates, indices) = (contiguous(updates)?, contiguous(indices)?);
    let (rows, err) = rows_buffer(dev, nvec, out)?;
    let s = &dev.stream;
    ki::resolve(s, indices.addr(), indices.dtype(), rows.addr(), nvec as u64, &shape[..k], (1, 0), err)
        .map_err(Error::from)?;
    let winner = if nvec > 1 && row > 0 {
        let w = winner_buffer(targets, out)?;
        ki::scatter_nd_claim(s, rows.addr(), w.addr(), nvec).map_err(Error::from)?;
        Some(w)
    } else {
        None
    };
    let w = winner.as_ref().map_or(0, |w| w.addr());
    let e = input.dtype().size_in_bytes();
    ki::scatter_rows(s, updates.addr(), out.addr(), rows.addr(), w, nvec, row, e).map_err(Error::from)?;
    if index_error(dev, err)? {
        return on_host(op, inputs, outputs);
    }
    Ok(())
}
