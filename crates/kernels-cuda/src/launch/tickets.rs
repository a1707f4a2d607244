//! Ticket counters for kernels whose last block to finish a tile completes it (the split-K
//! fixups of gemm_skinny and gemm_sm90p, the split decode attention's merge): one zeroed u32
//! array per stream, made on first use outside a CUDA graph
//! capture and kept for the process; every kernel leaves its counters at zero again. Kernels on
//! one stream run one after another, so one array serves every launch on that stream.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaStream, result, sys};

use crate::{Error, Result};

/// Counters per stream: the most tiles one fixup launch may take.
pub const CAPACITY: usize = 4096;

/// (context, stream) -> device address of the stream's counters.
static ARRAYS: Mutex<Option<HashMap<(usize, usize), u64>>> = Mutex::new(None);

/// A stream's key in the per-stream tables (these counters, scratch.rs's workspaces): its
/// context and its handle.
pub(super) fn stream_key(stream: &Arc<CudaStream>) -> (usize, usize) {
    (stream.context().cu_ctx() as usize, stream.cu_stream() as usize)
}

/// For a per-stream allocation: false when `stream` is being captured into a CUDA graph
/// (nothing may be allocated then); else true, with the stream's context bound to the thread.
pub(super) fn bind_uncaptured(stream: &Arc<CudaStream>) -> Result<bool> {
    // SAFETY: the stream is valid for the duration of the call.
    let status =
        unsafe { result::stream::is_capturing(stream.cu_stream()) }.map_err(Error::driver("cuStreamIsCapturing"))?;
    if status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE {
        return Ok(false);
    }
    stream.context().bind_to_thread().map_err(Error::driver("cuCtxSetCurrent"))?;
    Ok(true)
}

/// The stream's zeroed counters for a launch of `tiles` tiles; None when there are more tiles
/// than CAPACITY, or when the array does not exist yet and the stream is being captured (the
/// caller then finishes the tiles another way).
pub fn for_stream(stream: &Arc<CudaStream>, tiles: usize) -> Result<Option<u64>> {
    if tiles > CAPACITY {
        return Ok(None);
    }
    let key = stream_key(stream);
    let mut arrays = ARRAYS.lock().unwrap_or_else(|p| p.into_inner());
    let arrays = arrays.get_or_insert_with(HashMap::new);
    if let Some(&ptr) = arrays.get(&key) {
        return Ok(Some(ptr));
    }
    if !bind_uncaptured(stream)? {
        return Ok(None);
    }
    let bytes = CAPACITY * 4;
    // SAFETY: a fresh allocation of `bytes`, zeroed before any kernel can see it, never freed
    // (kernels captured into CUDA graphs keep its address).
    let ptr = unsafe { result::malloc_sync(bytes) }.map_err(Error::driver("cuMemAlloc"))?;
    // SAFETY: as above; zeroed on the stream itself, so before any kernel queued after it.
    unsafe { result::memset_d8_async(ptr, 0, bytes, stream.cu_stream()) }.map_err(Error::driver("cuMemsetD8Async"))?;
    arrays.insert(key, ptr);
    Ok(Some(ptr))
}

/// Makes the stream's counters now, so that a CUDA graph captured next finds them (a launch
/// inside a capture cannot make them, and its kernels then zero counters of their own: a memset
/// node before each, which breaks the kernels' programmatic overlap).
pub fn prepare(stream: &Arc<CudaStream>) -> Result<()> {
    for_stream(stream, 1).map(|_| ())
}
