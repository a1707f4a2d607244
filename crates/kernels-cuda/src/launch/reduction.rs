//! Launching the reduction families: reduction.cu (sum, mean, max, min, argmax, argmin),
//! norm.cu (softmax, logsoftmax, layer_norm), scan.cu (cumsum) and sort.cu (top_k, argsort).
//! Every tensor is contiguous and seen as [outer, n, inner] around the op's axis ([`Lines`]);
//! the kernels' comments say how each layout is mapped to threads.
//!
//! Some launches need a device scratch buffer (partial results of long reductions, sort
//! buffers); the caller allocates `*_scratch` bytes on the stream and passes its address.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaStream, DeviceRepr, LaunchConfig, PushKernelArg};
use max_graph::DType;

use super::cast_name;
use crate::sources::{NORM, REDUCTION, SCAN, SORT};
use crate::{Error, Result, function};

/// Grid-stride loops cover the rest; this many blocks fill any current GPU.
const MAX_BLOCKS: usize = 1 << 16;
/// Blocks worth running at once: below this many lines, long lines are split into segments.
const TARGET_BLOCKS: usize = 1024;
/// The largest line the sort kernels sort in shared memory (CAP in sort.cu).
pub const SORT_CAP: usize = 4096;

/// A contiguous tensor around one axis: `outer` blocks of `n` elements along the axis, each
/// element `inner` apart (a line is one (outer, inner) pair).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lines {
    pub outer: usize,
    pub n: usize,
    pub inner: usize,
}

impl Lines {
    pub fn count(&self) -> usize {
        self.outer * self.inner
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduce {
    Sum,
    Mean,
    Max,
    Min,
    ArgMax,
    ArgMin,
}

fn short(dtype: DType) -> Result<&'static str> {
    cast_name(dtype).ok_or_else(|| Error::Unsupported(format!("reductions of {dtype} are not supported on the GPU")))
}

fn blocks(n: usize) -> u32 {
    n.clamp(1, MAX_BLOCKS) as u32
}

fn cfg(grid: u32, block: u32, smem: u32) -> LaunchConfig {
    LaunchConfig { grid_dim: (grid, 1, 1), block_dim: (block, 1, 1), shared_mem_bytes: smem }
}

/// Launches `f` with one argument struct.
fn go<A: DeviceRepr>(stream: &Arc<CudaStream>, f: &CudaFunction, args: &A, config: LaunchConfig) -> Result<()> {
    let mut launch = stream.launch_builder(f);
    launch.arg(args);
    // SAFETY: every caller passes the argument struct its kernel takes (same #[repr(C)] layout),
    // with pointers to device buffers that hold the elements the shapes in it describe.
    unsafe { launch.launch(config) }.map_err(Error::driver("cuLaunchKernel(reduction)"))?;
    Ok(())
}

// ---- kernel names ---------------------------------------------------------------------------

fn red_kernel(layout: &str, class: &str, dt: &str) -> String {
    format!("red_{layout}_{class}_{dt}")
}

/// `group` is empty for the cols kernel.
fn norm_kernel(op: &str, variant: &str, group: &str, dt: &str) -> String {
    if group.is_empty() { format!("{op}_{variant}_{dt}") } else { format!("{op}_{variant}_{group}_{dt}") }
}

fn scan_kernel(variant: &str, dt: &str) -> String {
    format!("cumsum_{variant}_{dt}")
}

fn sort_kernel(variant: &str, dt: &str) -> String {
    format!("sort_{variant}_{dt}")
}

const SORT_MERGE: &str = "sort_merge";

/// Every kernel these wrappers launch: (family, name, bytes of its argument struct), for the
/// compile checks in tests/ (each must exist, taking an argument of that size).
#[doc(hidden)]
pub fn kernels() -> Vec<(crate::sources::Family, String, usize)> {
    let mut all = vec![(SORT, SORT_MERGE.to_string(), size_of::<MergeArgs>())];
    for dtype in DType::ALL.iter().copied().filter(|d| cast_name(*d).is_some()) {
        let Ok(dt) = short(dtype) else { continue };
        for class in ["sum", "ext", "arg"] {
            for layout in ["rows", "cols", "finish"] {
                all.push((REDUCTION, red_kernel(layout, class, dt), size_of::<RedArgs>()));
            }
        }
        for variant in ["cols", "rows_warp", "rows_block"] {
            all.push((SCAN, scan_kernel(variant, dt), size_of::<ScanArgs>()));
        }
        for variant in ["block", "chunks", "emit"] {
            all.push((SORT, sort_kernel(variant, dt), size_of::<SortArgs>()));
        }
        if norm_dtype(dtype) == dtype {
            for op in ["softmax", "layer_norm"] {
                for variant in ["cached", "rows"] {
                    for group in ["warp", "block"] {
                        all.push((NORM, norm_kernel(op, variant, group, dt), size_of::<NormArgs>()));
                    }
                }
            }
            all.push((NORM, norm_kernel("softmax", "cols", "", dt), size_of::<NormArgs>()));
            for group in ["warp", "block"] {
                all.push((NORM, norm_kernel("rms_norm", "rows", group, dt), size_of::<NormArgs>()));
            }
        }
    }
    all
}

// ---- sum, mean, max, min, argmax, argmin ----------------------------------------------------

#[repr(C)]
#[derive(Clone, Copy)]
struct RedArgs {
    x: u64,
    out: u64,
    part: u64,
    outer: i64,
    n: i64,
    inner: i64,
    splits: i64,
    seg: i64,
    tiles: i64,
    kind: i32,
    g: i32,
    tx: i32,
}
// SAFETY: plain-old-data with the layout of the kernel's `RedArgs`.
unsafe impl DeviceRepr for RedArgs {}

/// How a reduction is spread over the GPU.
struct RedPlan {
    rows: bool,
    /// Rows: threads per row (32, or the 512-thread block). Cols: lines per block.
    width: usize,
    splits: usize,
    seg: usize,
    tiles: usize,
    grid: usize,
}

/// Splits lines of `n` elements into segments so that about TARGET_BLOCKS tasks exist, with
/// at least `min_seg` elements per segment; returns (splits, seg).
fn split(tasks: usize, n: usize, min_seg: usize, align: usize) -> (usize, usize) {
    if tasks >= TARGET_BLOCKS / 4 || n < 2 * min_seg {
        return (1, n);
    }
    let want = (n / min_seg).min(TARGET_BLOCKS.div_ceil(tasks)).max(1);
    let seg = n.div_ceil(want).next_multiple_of(align);
    (n.div_ceil(seg), seg)
}

fn red_plan(l: Lines) -> RedPlan {
    if l.inner == 1 {
        if l.n <= 1024 {
            return RedPlan { rows: true, width: 32, splits: 1, seg: l.n, tiles: 1, grid: l.outer.div_ceil(8) };
        }
        let (splits, seg) = split(l.outer, l.n, 8192, 16);
        return RedPlan { rows: true, width: 512, splits, seg, tiles: 1, grid: l.outer * splits };
    }
    let tx = l.inner.next_power_of_two().min(32);
    let tiles = l.inner.div_ceil(tx);
    let (splits, seg) = split(l.outer * tiles, l.n, (256 / tx) * 16, 1);
    RedPlan { rows: false, width: tx, splits, seg, tiles, grid: l.outer * tiles * splits }
}

/// Bytes of scratch `reduce` needs for `lines` (0: none).
pub fn reduce_scratch(lines: Lines) -> usize {
    let p = red_plan(lines);
    if p.splits > 1 { lines.count() * p.splits * 16 } else { 0 }
}

/// Reduces `x` ([outer, n, inner] of `dtype`) along the axis into `out` ([outer, inner]: of
/// `dtype`, int64 for argmax/argmin). The caller has rejected empty axes where the op has no
/// value (max, min, argmax, argmin, integer mean). `scratch` holds `reduce_scratch` bytes.
pub fn reduce(
    stream: &Arc<CudaStream>,
    kind: Reduce,
    dtype: DType,
    (x, out, scratch): (u64, u64, u64),
    lines: Lines,
) -> Result<()> {
    if lines.count() == 0 {
        return Ok(());
    }
    let dt = short(dtype)?;
    let class = match kind {
        Reduce::Sum | Reduce::Mean => "sum",
        Reduce::Max | Reduce::Min => "ext",
        Reduce::ArgMax | Reduce::ArgMin => "arg",
    };
    let p = red_plan(lines);
    if p.splits > 1 && scratch == 0 {
        return Err(Error::Unsupported("reduce: the scratch buffer is missing".into()));
    }
    let args = RedArgs {
        x,
        out,
        part: scratch,
        outer: lines.outer as i64,
        n: lines.n as i64,
        inner: lines.inner as i64,
        splits: p.splits as i64,
        seg: p.seg as i64,
        tiles: p.tiles as i64,
        kind: kind as i32,
        g: if p.rows { p.width as i32 } else { 0 },
        tx: if p.rows { 0 } else { p.width as i32 },
    };
    let ctx = stream.context();
    let (layout, block) = if p.rows { ("rows", if p.width == 32 { 256 } else { 512 }) } else { ("cols", 256) };
    let f = function(ctx, &REDUCTION, &red_kernel(layout, class, dt))?;
    go(stream, &f, &args, cfg(blocks(p.grid), block, 0))?;
    if p.splits > 1 {
        let f = function(ctx, &REDUCTION, &red_kernel("finish", class, dt))?;
        go(stream, &f, &args, cfg(blocks(lines.count().div_ceil(256)), 256, 0))?;
    }
    Ok(())
}

// ---- softmax, logsoftmax, layer_norm --------------------------------------------------------

#[repr(C)]
#[derive(Clone, Copy)]
struct NormArgs {
    x: u64,
    out: u64,
    gamma: u64,
    beta: u64,
    outer: i64,
    n: i64,
    inner: i64,
    eps: f64,
    log: i32,
    tile: i32,
    offset: f64,
    mbc: i32,
    pad: i32,
}
// SAFETY: plain-old-data with the layout of the kernel's `NormArgs`.
unsafe impl DeviceRepr for NormArgs {}

/// The dtype softmax and layer_norm of `dtype` compute in, the only dtypes their kernels take:
/// the 16-, 32- and 64-bit floats themselves, f32 for the float8 types, f64 for integers and
/// bool (as the CPU kernels compute). Callers cast other inputs to it and the result back.
pub fn norm_dtype(dtype: DType) -> DType {
    match dtype {
        DType::Float16 | DType::BFloat16 | DType::Float32 | DType::Float64 => dtype,
        DType::Float8E4m3fn | DType::Float8E5m2 => DType::Float32,
        _ => DType::Float64,
    }
}

fn norm_short(dtype: DType) -> Result<&'static str> {
    if norm_dtype(dtype) != dtype {
        return Err(Error::Unsupported(format!(
            "softmax/layer_norm kernels take no {dtype}: cast to {} first",
            norm_dtype(dtype)
        )));
    }
    short(dtype)
}

/// The row kernel for a row op ("softmax", "layer_norm") on rows of `n` elements: a warp per
/// row up to 1024 elements, a 1024-thread block beyond; the register-cached variant when the
/// rows are whole 16-byte vectors at 16-byte aligned addresses and fit (see norm.cu).
fn row_kernel(op: &str, dtype: DType, n: usize, ptrs: &[u64]) -> Result<(String, u32, usize)> {
    let dt = norm_short(dtype)?;
    let warp = n <= 1024;
    let (group, per_thread) = if warp { ("warp", 32 * 8 * 16) } else { ("block", 1024 * 4 * 16) };
    let bytes = n * dtype.size_in_bytes();
    let cached = bytes % 16 == 0 && bytes <= per_thread && ptrs.iter().all(|p| p % 16 == 0);
    let variant = if cached { "cached" } else { "rows" };
    Ok((norm_kernel(op, variant, group, dt), if warp { 256 } else { 1024 }, if warp { 8 } else { 1 }))
}

/// softmax (or logsoftmax) of `x` along the axis into `out`, both [outer, n, inner] of `dtype`
/// (one that is its own [`norm_dtype`]).
pub fn softmax(stream: &Arc<CudaStream>, log: bool, dtype: DType, x: u64, out: u64, lines: Lines) -> Result<()> {
    if lines.count() == 0 || lines.n == 0 {
        return Ok(());
    }
    let args = NormArgs {
        x,
        out,
        gamma: 0,
        beta: 0,
        outer: lines.outer as i64,
        n: lines.n as i64,
        inner: lines.inner as i64,
        eps: 0.0,
        log: log as i32,
        tile: lines.inner.next_power_of_two().min(32) as i32,
        offset: 0.0,
        mbc: 0,
        pad: 0,
    };
    if lines.inner > 1 {
        let f = function(stream.context(), &NORM, &norm_kernel("softmax", "cols", "", norm_short(dtype)?))?;
        let tiles = lines.inner.div_ceil(args.tile as usize);
        return go(stream, &f, &args, cfg(blocks(lines.outer * tiles), 256, 0));
    }
    let (name, block, rows_per_block) = row_kernel("softmax", dtype, lines.n, &[x, out])?;
    let f = function(stream.context(), &NORM, &name)?;
    go(stream, &f, &args, cfg(blocks(lines.outer.div_ceil(rows_per_block)), block, 0))
}

/// layer_norm over the last dim: `x` and `out` are [rows, d], `gamma` and `beta` [d], all of
/// `dtype` (one that is its own [`norm_dtype`]).
#[allow(clippy::too_many_arguments)]
pub fn layer_norm(
    stream: &Arc<CudaStream>,
    dtype: DType,
    (x, gamma, beta, out): (u64, u64, u64, u64),
    rows: usize,
    d: usize,
    eps: f64,
) -> Result<()> {
    if rows == 0 || d == 0 {
        return Ok(());
    }
    let args = NormArgs {
        x,
        out,
        gamma,
        beta,
        outer: rows as i64,
        n: d as i64,
        inner: 1,
        eps,
        log: 0,
        tile: 0,
        offset: 0.0,
        mbc: 0,
        pad: 0,
    };
    let (name, block, rows_per_block) = row_kernel("layer_norm", dtype, d, &[x, out, gamma, beta])?;
    let f = function(stream.context(), &NORM, &name)?;
    go(stream, &f, &args, cfg(blocks(rows.div_ceil(rows_per_block)), block, 0))
}

/// rms_norm over the last dim: `x` and `out` are [rows, d], `weight` [d], all of `dtype` (one
/// that is its own [`norm_dtype`]); see norm.cu for `weight_offset` and `multiply_before_cast`.
#[allow(clippy::too_many_arguments)]
pub fn rms_norm(
    stream: &Arc<CudaStream>,
    dtype: DType,
    (x, weight, out): (u64, u64, u64),
    rows: usize,
    d: usize,
    eps: f64,
    weight_offset: f64,
    multiply_before_cast: bool,
) -> Result<()> {
    if rows == 0 || d == 0 {
        return Ok(());
    }
    let args = NormArgs {
        x,
        out,
        gamma: weight,
        beta: 0,
        outer: rows as i64,
        n: d as i64,
        inner: 1,
        eps,
        log: 0,
        tile: 0,
        offset: weight_offset,
        mbc: multiply_before_cast as i32,
        pad: 0,
    };
    let dt = norm_short(dtype)?;
    let (group, block, rows_per_block) = if d <= 1024 { ("warp", 256, 8) } else { ("block", 1024, 1) };
    let f = function(stream.context(), &NORM, &norm_kernel("rms_norm", "rows", group, dt))?;
    go(stream, &f, &args, cfg(blocks(rows.div_ceil(rows_per_block)), block, 0))
}

// ---- cumsum ---------------------------------------------------------------------------------

#[repr(C)]
#[derive(Clone, Copy)]
struct ScanArgs {
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

// ---- top_k, argsort -------------------------------------------------------------------------

#[repr(C)]
#[derive(Clone, Copy)]
struct SortArgs {
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
struct MergeArgs {
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
fn in_block(n: usize, k: usize) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reduction_plans_cover_every_element_once() {
        for outer in [1, 3, 100, 5000] {
            for n in [0, 1, 31, 1024, 1025, 5000, 16_384, 100_000, 300_001, 1 << 21] {
                for inner in [1, 2, 3, 33, 129] {
                    let l = Lines { outer, n, inner };
                    let p = red_plan(l);
                    assert!(p.splits >= 1 && p.grid >= 1);
                    if p.splits > 1 {
                        // Every segment is non-empty and together they cover the axis.
                        assert!(p.seg * p.splits >= n && p.seg * (p.splits - 1) < n, "{l:?}");
                        assert_eq!(reduce_scratch(l), outer * inner * p.splits * 16);
                    } else {
                        assert_eq!(p.seg, n);
                        assert_eq!(reduce_scratch(l), 0);
                    }
                    if inner == 1 {
                        assert!(p.rows && (p.width == 32) == (n <= 1024));
                    } else {
                        assert!(!p.rows && p.width.is_power_of_two() && p.width <= 32);
                        assert!(p.tiles * p.width >= inner);
                    }
                }
            }
        }
    }

    #[test]
    fn sorts_pick_a_path_by_size() {
        let l = |n| Lines { outer: 2, n, inner: 3 };
        assert!(in_block(4096, 4096) && in_block(100_000, 2048) && !in_block(100_000, 2049));
        assert_eq!(sort_scratch(l(100_000), 64), 0);
        assert_eq!(sort_scratch(l(5000), 3000), 6 * 5000 * 24);
        assert_eq!(sort_scratch(l(5000), 0), 0);
    }

    #[test]
    fn norm_kernels_take_the_float_dtypes() {
        assert_eq!(norm_dtype(DType::BFloat16), DType::BFloat16);
        assert_eq!(norm_dtype(DType::Float8E4m3fn), DType::Float32);
        assert_eq!(norm_dtype(DType::Int32), DType::Float64);
        assert_eq!(norm_dtype(DType::Bool), DType::Float64);
        let (name, block, rows) = row_kernel("softmax", DType::Float32, 1024, &[0, 4096]).unwrap();
        assert_eq!((name.as_str(), block, rows), ("softmax_cached_warp_f32", 256, 8));
        let (name, ..) = row_kernel("softmax", DType::Float32, 1023, &[0, 4096]).unwrap();
        assert_eq!(name, "softmax_rows_warp_f32");
        let (name, block, _) = row_kernel("layer_norm", DType::BFloat16, 32_768, &[0; 4]).unwrap();
        assert_eq!((name.as_str(), block), ("layer_norm_cached_block_bf16", 1024));
        let (name, ..) = row_kernel("layer_norm", DType::Float32, 16_385, &[0; 4]).unwrap();
        assert_eq!(name, "layer_norm_rows_block_f32");
        let (name, ..) = row_kernel("softmax", DType::Float16, 64, &[0, 8]).unwrap();
        assert_eq!(name, "softmax_rows_warp_f16");
        assert!(row_kernel("softmax", DType::Int8, 64, &[0, 0]).is_err());
    }
}
