//! top_k and argsort (sort.cu): whole rows in one block where they fit, else block sorts and
//! merge passes through scratch.

use std::sync::Arc;

use cudarc::driver::{CudaStream, DeviceRepr};
use max_graph::DType;

use super::{Lines, SORT_CAP, SORT_MERGE, blocks, cfg, go, short, sort_kernel};
use crate::sources::SORT;
use crate::{Error, Result, function};

#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct SortArgs {
    x: u64,
    values: u64,
    indices: u64,
    keys: u64,
    idx: u64,
    outer: i64,
    n: i64,
    inner: i64,
    k: i64,
    desc: i32,
    p: i32,
    k2: i32,
}
// SAFETY: plain-old-data with the layout of the kernel's `SortArgs`.
unsafe impl DeviceRepr for SortArgs {}

#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct MergeArgs {
    keys_in: u64,
    idx_in: u64,
    keys_out: u64,
    idx_out: u64,
    lines: i64,
    n: i64,
    width: i64,
}
// SAFETY: plain-old-data with the layout of the kernel's `MergeArgs`.
unsafe impl DeviceRepr for MergeArgs {}

/// Whether the first `k` of lines of `n` elements can be found by one block per line in shared
/// memory (else the lines are merge-sorted through a scratch buffer).
pub(super) fn in_block(n: usize, k: usize) -> bool {
    n <= SORT_CAP || k.next_power_of_two() <= SORT_CAP / 2
}

/// Whether lines of `n` elements can be sorted on the GPU at all (indices are 32-bit there).
pub fn sortable(n: usize) -> bool {
    n < u32::MAX as usize
}

/// Bytes of scratch `sort` needs for the first `k` of each line (0: none).
pub fn sort_scratch(lines: Lines, k: usize) -> usize {
    if k == 0 || in_block(lines.n, k) { 0 } else { lines.count() * lines.n * 24 }
}

/// The first `k` elements of every line of `x` in sorted order (`desc`: largest first; ties by
/// the lower index): their int64 positions along the axis into `indices` and, unless `values`
/// is 0, the elements themselves into `values` (both [outer, k, inner]). top_k is `desc` with
/// its k; argsort is one line with k = n. `scratch` holds `sort_scratch` bytes.
pub fn sort(
    stream: &Arc<CudaStream>,
    dtype: DType,
    (x, values, indices, scratch): (u64, u64, u64, u64),
    lines: Lines,
    k: usize,
    desc: bool,
) -> Result<()> {
    if lines.count() == 0 || k == 0 {
        return Ok(());
    }
    if k > lines.n || !sortable(lines.n) {
        return Err(Error::Unsupported(format!("sort: cannot take {k} of {} elements on the GPU", lines.n)));
    }
    let dt = short(dtype)?;
    let ctx = stream.context();
    let mut args = SortArgs {
        x,
        values,
        indices,
        keys: 0,
        idx: 0,
        outer: lines.outer as i64,
        n: lines.n as i64,
        inner: lines.inner as i64,
        k: k as i64,
        desc: desc as i32,
        p: 0,
        k2: 0,
    };
    if in_block(lines.n, k) {
        let p = if lines.n <= SORT_CAP { lines.n.next_power_of_two() } else { SORT_CAP };
        args.p = p as i32;
        args.k2 = k.next_power_of_two() as i32;
        let threads = (p / 2).clamp(32, 1024) as u32;
        let smem = (p * 12 + 16) as u32;
        let f = function(ctx, &SORT, &sort_kernel("block", dt))?;
        crate::allow_smem(stream.context(), &f, smem)?;
        return go(stream, &f, &args, cfg(blocks(lines.count()), threads, smem));
    }
    if scratch == 0 {
        return Err(Error::Unsupported("sort: the scratch buffer is missing".into()));
    }
    // Scratch: keys [2][total] u64, then indices [2][total] u32.
    let total = (lines.count() * lines.n) as u64;
    let keys = [scratch, scratch + 8 * total];
    let idx = [scratch + 16 * total, scratch + 20 * total];
    args.keys = keys[0];
    args.idx = idx[0];
    let smem = (SORT_CAP * 12) as u32;
    let f = function(ctx, &SORT, &sort_kernel("chunks", dt))?;
    crate::allow_smem(stream.context(), &f, smem)?;
    go(stream, &f, &args, cfg(blocks(lines.count() * lines.n.div_ceil(SORT_CAP)), 1024, smem))?;
    let merge = function(ctx, &SORT, SORT_MERGE)?;
    let mut cur = 0;
    let mut width = SORT_CAP;
    while width < lines.n {
        let m = MergeArgs {
            keys_in: keys[cur],
            idx_in: idx[cur],
            keys_out: keys[1 - cur],
            idx_out: idx[1 - cur],
            lines: lines.count() as i64,
            n: lines.n as i64,
            width: width as i64,
        };
        go(stream, &merge, &m, cfg(blocks((total as usize).div_ceil(256)), 256, 0))?;
        cur = 1 - cur;
        width *= 2;
    }
    args.keys = keys[cur];
    args.idx = idx[cur];
    let f = function(ctx, &SORT, &sort_kernel("emit", dt))?;
    go(stream, &f, &args, cfg(blocks((lines.count() * k).div_ceil(256)), 256, 0))
}
