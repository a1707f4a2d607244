//! Copies between any two buffers: host and GPU, either direction, contiguous or strided.
//! The destination is always a contiguous buffer of the same dtype and element count.
//! Device work is ordered on the destination's stream after the source's stream.

use cudarc::driver::result;

use crate::{Buffer, Error, Result, Stream, cpu};

fn host_bytes<'a>(b: &Buffer) -> &'a [u8] {
    // SAFETY: callers pass contiguous host buffers; the slice is used before the buffer drops.
    unsafe { std::slice::from_raw_parts(b.addr() as *const u8, b.nbytes()) }
}

fn host_bytes_mut<'a>(b: &Buffer) -> &'a mut [u8] {
    // SAFETY: as above; the destination is a fresh or exclusively targeted buffer.
    unsafe { std::slice::from_raw_parts_mut(b.addr() as *mut u8, b.nbytes()) }
}

/// Copies `src` into `dst` (contiguous, same dtype and element count).
pub(crate) fn copy_into(src: &Buffer, dst: &Buffer) -> Result<()> {
    debug_assert!(dst.is_contiguous() && src.num_elements() == dst.num_elements());
    if src.num_elements() == 0 {
        return Ok(());
    }
    let width = src.dtype().size_in_bytes();
    if src.device().is_host() != dst.device().is_host() {
        crate::cuda::forbid_in_capture("a copy between host and device")?;
    }
    match (src.stream(), dst.stream()) {
        (Stream::Host, Stream::Host) => {
            // SAFETY: src's view lies in its storage; dst is contiguous with room for every
            // element, and the two do not overlap (inplace copies go through a temporary).
            unsafe {
                cpu::copy::gather(src.addr() as *const u8, dst.addr() as *mut u8, width, src.shape(), src.strides())
            };
            Ok(())
        }
        (Stream::Host, Stream::Cuda { device, stream }) => {
            let packed;
            let src = if src.is_contiguous() {
                src
            } else {
                packed = src.contiguous()?;
                &packed
            };
            device.bind()?;
            // Small pageable sources go through the device's pinned ring, without waiting for
            // the stream (staging.rs); the driver would wait for it before staging them.
            if !src.is_pinned() && crate::staging::copy_to_device(device, stream, dst.addr(), host_bytes(src))? {
                return Ok(());
            }
            // SAFETY: dst is device memory of nbytes; the host slice is valid for the call.
            // Pageable sources are staged by the driver before the call returns; pinned ones
            // are read asynchronously, so the stream is drained before the source can drop.
            unsafe { result::memcpy_htod_async(dst.addr(), host_bytes(src), stream.cu_stream()) }
                .map_err(Error::cuda("cuMemcpyHtoDAsync"))?;
            if src.is_pinned() {
                dst.synchronize()?;
            }
            Ok(())
        }
        (Stream::Cuda { .. }, Stream::Host) => {
            let packed;
            let src = if src.is_contiguous() {
                src
            } else {
                packed = src.contiguous()?;
                &packed
            };
            let (device, stream) = src.stream().cuda().ok_or_else(|| Error::Value("unreachable".into()))?;
            device.bind()?;
            // SAFETY: src is device memory of nbytes; dst is host memory of the same size.
            unsafe { result::memcpy_dtoh_async(host_bytes_mut(dst), src.addr(), stream.cu_stream()) }
                .map_err(Error::cuda("cuMemcpyDtoHAsync"))?;
            stream.synchronize().map_err(Error::cuda("cuStreamSynchronize"))
        }
        (Stream::Cuda { device: sd, .. }, Stream::Cuda { device: dd, stream }) => {
            let packed;
            let src = if src.is_contiguous() || sd.ordinal == dd.ordinal {
                src
            } else {
                packed = src.contiguous()?;
                &packed
            };
            dst.stream().wait_for(src.stream())?;
            dd.bind()?;
            if sd.ordinal != dd.ordinal && crate::cuda::peer_access(dd, sd) {
                // SAFETY: both ranges are device memory of nbytes; dst's device may address
                // src's memory directly (unified addresses), so this is one device copy.
                unsafe { result::memcpy_dtod_async(dst.addr(), src.addr(), src.nbytes(), stream.cu_stream()) }
                    .map_err(Error::cuda("cuMemcpyDtoDAsync"))?;
            } else if sd.ordinal != dd.ordinal {
                // SAFETY: both ranges are device memory of nbytes in their own contexts.
                unsafe {
                    result::memcpy_peer_async(
                        dd.ctx.cu_ctx(),
                        dst.addr(),
                        sd.ctx.cu_ctx(),
                        src.addr(),
                        src.nbytes(),
                        stream.cu_stream(),
                    )
                }
                .map_err(Error::cuda("cuMemcpyPeerAsync"))?;
            } else if src.is_contiguous() {
                // SAFETY: both ranges are device memory of nbytes on this device.
                unsafe { result::memcpy_dtod_async(dst.addr(), src.addr(), src.nbytes(), stream.cu_stream()) }
                    .map_err(Error::cuda("cuMemcpyDtoDAsync"))?;
            } else {
                let (shape, strides) = cpu::copy::coalesce(src.shape(), src.strides());
                gather_on_device(stream, src.addr(), dst.addr(), width, &shape, &strides)?;
            }
            // The source is freed in the order of its own stream: keep that after this copy.
            src.stream().wait_for(dst.stream())
        }
    }
}

/// Gathers a strided device view into contiguous device memory. Views with more dimensions
/// than the kernel takes (after merging) are split along their leading dimension.
fn gather_on_device(
    stream: &std::sync::Arc<cudarc::driver::CudaStream>,
    src: u64,
    dst: u64,
    width: usize,
    shape: &[usize],
    strides: &[isize],
) -> Result<()> {
    use max_kernels_cuda::launch::{MAX_STRIDED_RANK, copy_strided};
    if shape.len() <= MAX_STRIDED_RANK {
        return Ok(copy_strided(stream, src, dst, width, shape, strides)?);
    }
    let inner: usize = shape[1..].iter().product::<usize>() * width;
    for i in 0..shape[0] {
        let from = (src as i128 + i as i128 * strides[0] as i128 * width as i128) as u64;
        gather_on_device(stream, from, dst + (i * inner) as u64, width, &shape[1..], &strides[1..])?;
    }
    Ok(())
}
