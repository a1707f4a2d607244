//! cumsum (scan.cu).

use std::sync::Arc;

use cudarc::driver::{CudaStream, DeviceRepr};
use max_graph::DType;

use super::{Lines, blocks, cfg, go, scan_kernel, short};
use crate::sources::SCAN;
use crate::{Result, function};

#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct ScanArgs {
    x: u64,
    out: u64,
    outer: i64,
    n: i64,
    inner: i64,
    exclusive: i32,
    reverse: i32,
}
// SAFETY: plain-old-data with the layout of the kernel's `ScanArgs`.
unsafe impl DeviceRepr for ScanArgs {}

/// cumsum of `x` along the axis into `out` (both [outer, n, inner] of `dtype`).
pub fn cumsum(
    stream: &Arc<CudaStream>,
    dtype: DType,
    (x, out): (u64, u64),
    lines: Lines,
    exclusive: bool,
    reverse: bool,
) -> Result<()> {
    if lines.count() == 0 || lines.n == 0 {
        return Ok(());
    }
    let dt = short(dtype)?;
    let args = ScanArgs {
        x,
        out,
        outer: lines.outer as i64,
        n: lines.n as i64,
        inner: lines.inner as i64,
        exclusive: exclusive as i32,
        reverse: reverse as i32,
    };
    let (name, block, grid) = if lines.inner > 1 {
        (scan_kernel("cols", dt), 256, lines.count().div_ceil(256))
    } else if lines.n <= 256 {
        (scan_kernel("rows_warp", dt), 256, lines.outer.div_ceil(8))
    } else {
        (scan_kernel("rows_block", dt), 512, lines.outer)
    };
    let f = function(stream.context(), &SCAN, &name)?;
    go(stream, &f, &args, cfg(blocks(grid), block, 0))
}
