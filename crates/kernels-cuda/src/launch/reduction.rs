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

mod norm;
mod scan;
mod sort;

use norm::NormArgs;
#[cfg(test)]
use norm::row_kernel;
pub use norm::{layer_norm, norm_dtype, rms_norm, softmax};
use scan::ScanArgs;
pub use scan::cumsum;
#[cfg(test)]
use sort::in_block;
use sort::{MergeArgs, SortArgs};
pub use sort::{sort, sort_scratch, sortable};

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
            for op in ["softmax", "layer_norm", "rms_norm"] {
                for variant in ["cached", "rows"] {
                    for group in ["warp", "block"] {
                        all.push((NORM, norm_kernel(op, variant, group, dt), size_of::<NormArgs>()));
                    }
                }
            }
            for op in ["softmax", "layer_norm", "rms_norm"] {
                all.push((NORM, norm_kernel(op, "cached", "mid", dt), size_of::<NormArgs>()));
            }
            all.push((NORM, norm_kernel("softmax", "cols", "", dt), size_of::<NormArgs>()));
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
        let (name, block, rows) = row_kernel("rms_norm", DType::BFloat16, 4096, &[0; 3]).unwrap();
        assert_eq!((name.as_str(), block, rows), ("rms_norm_cached_mid_bf16", 256, 1));
        let (name, block, _) = row_kernel("rms_norm", DType::Float32, 4100, &[0; 3]).unwrap();
        assert_eq!((name.as_str(), block), ("rms_norm_cached_block_f32", 1024));
        let (name, block, _) = row_kernel("rms_norm", DType::Float32, 4096, &[0, 8, 0]).unwrap();
        assert_eq!((name.as_str(), block), ("rms_norm_rows_block_f32", 1024));
        let (name, ..) = row_kernel("layer_norm", DType::Float32, 16_385, &[0; 4]).unwrap();
        assert_eq!(name, "layer_norm_rows_block_f32");
        let (name, ..) = row_kernel("softmax", DType::Float16, 64, &[0, 8]).unwrap();
        assert_eq!(name, "softmax_rows_warp_f16");
        assert!(row_kernel("softmax", DType::Int8, 64, &[0, 0]).is_err());
    }
}
