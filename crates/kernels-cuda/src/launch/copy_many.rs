//! Several contiguous device-to-device copies on one stream in one launch (copy_strided.cu:
//! copy_many): a CUDA graph replay stages a decode step's small inputs this way, one launch
//! instead of one memcpy each (each costs about 2 us of the device's time at a step's start).

use std::sync::Arc;

use cudarc::driver::{CudaStream, DeviceRepr, LaunchConfig, PushKernelArg};

use crate::sources::COPY_STRIDED;
use crate::{Error, Result, function};

/// Pieces per launch (COPY_MANY in copy_strided.cu).
pub const PIECES: usize = 16;
/// The largest piece worth a block of its own: larger ones go faster as a memcpy.
pub const MAX_PIECE_BYTES: usize = 64 << 10;

#[repr(C)]
#[derive(Clone, Copy)]
struct CopyMany {
    src: [u64; PIECES],
    dst: [u64; PIECES],
    bytes: [u64; PIECES],
    n: i32,
    pad: i32,
}

// SAFETY: plain-old-data with the layout of the kernel's `CopyMany`.
unsafe impl DeviceRepr for CopyMany {}

/// Copies each `(src, dst, bytes)` of `pieces` on `stream` (launches of up to [`PIECES`]).
/// The caller's contract: every range is device memory this stream's device may address, the
/// destinations do not overlap each other or any source.
pub fn copy_many(stream: &Arc<CudaStream>, pieces: &[(u64, u64, usize)]) -> Result<()> {
    if pieces.is_empty() {
        return Ok(());
    }
    let f = function(stream.context(), &COPY_STRIDED, "copy_many")?;
    for chunk in pieces.chunks(PIECES) {
        let mut a = CopyMany { src: [0; PIECES], dst: [0; PIECES], bytes: [0; PIECES], n: chunk.len() as i32, pad: 0 };
        for (i, &(s, d, b)) in chunk.iter().enumerate() {
            (a.src[i], a.dst[i], a.bytes[i]) = (s, d, b as u64);
        }
        let cfg = LaunchConfig { grid_dim: (chunk.len() as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
        let mut launch = stream.launch_builder(&f);
        launch.arg(&a);
        // SAFETY: the argument struct matches the kernel's; each piece's ranges are device
        // memory of `bytes` (the caller's contract).
        unsafe { launch.launch(cfg) }.map_err(Error::driver("cuLaunchKernel(copy_many)"))?;
    }
    Ok(())
}
