//! Workspace for kernels that need device memory for the length of one launch (the split
//! decode attention's shares, the Hopper GEMM's split-K partials): one buffer per stream, made
//! or grown outside a CUDA graph capture and kept for the process. Kernels on one stream run
//! one after another (a launch under PDL waits for the grid ahead of it before it touches
//! memory, and that grid waited for its own), so one buffer serves every launch on the stream.
//!
//! Memory allocated and freed around each launch instead (cuMemAllocAsync / cuMemFreeAsync on
//! the stream) becomes an allocation node and a free node in a captured decode step, and a
//! kernel behind such a node cannot start while the kernel ahead of it drains: the decode
//! attention and the output projection after it then each wait for a whole kernel.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaStream, result};

use super::tickets::{bind_uncaptured, stream_key};

use crate::{Error, Result};

/// The largest workspace kept for a stream; a call that needs more gets None.
pub const MAX_BYTES: usize = 1 << 30;

/// Bytes of the smallest workspace made.
const MIN_BYTES: usize = 1 << 20;

/// (context, stream): a stream's key.
type Key = (usize, usize);

/// Each stream's workspace: (device address, bytes).
static BUFFERS: Mutex<Option<HashMap<Key, (u64, usize)>>> = Mutex::new(None);

/// The address of at least `bytes` of the stream's workspace (uninitialised). None when
/// `bytes` is past [`MAX_BYTES`], or when the workspace is smaller and the stream is being
/// captured (no allocation then): the caller allocates its own.
///
/// A workspace that grows is replaced, not freed: a CUDA graph captured earlier may still
/// address it. It grows at least twofold, so what is left behind stays below what is kept.
pub fn for_stream(stream: &Arc<CudaStream>, bytes: usize) -> Result<Option<u64>> {
    if bytes > MAX_BYTES {
        return Ok(None);
    }
    let key = stream_key(stream);
    let mut buffers = BUFFERS.lock().unwrap_or_else(|p| p.into_inner());
    let buffers = buffers.get_or_insert_with(HashMap::new);
    let held = buffers.get(&key).copied();
    if let Some((ptr, size)) = held
        && size >= bytes
    {
        return Ok(Some(ptr));
    }
    if !bind_uncaptured(stream)? {
        return Ok(None);
    }
    let size = bytes.max(MIN_BYTES).max(held.map_or(0, |(_, s)| s.saturating_mul(2))).min(MAX_BYTES);
    // SAFETY: a fresh allocation of `size` bytes, never freed (kernels captured into CUDA
    // graphs keep its address); every user writes what it reads within its launch.
    let ptr = unsafe { result::malloc_sync(size) }.map_err(Error::driver("cuMemAlloc"))?;
    buffers.insert(key, (ptr, size));
    Ok(Some(ptr))
}
