//! Launching the small-M GEMM of kernels/gemm_skinny.cu: `batch` products C = epilogue(A @ B)
//! of row-major A [m, k], B [k, n], C [m, n], for decode shapes where reading B dominates.
//!
//! Planning (pure, see [`plan`]): batches that share B and follow each other contiguously in A
//! and C fold into the rows of one product (B is then read once). bf16/f16 with few rows go to
//! the SIMT kernel, more rows to the tensor-core kernel (which needs K % 8 == 0, N % 8 == 0 and
//! 16-byte aligned A and B); f32 always takes the SIMT kernel (exact f32 FMAs, no tf32). K is
//! split over blocks until the grid covers the GPU a few times, within two limits: each split
//! keeps a minimum number of rows of K, and the f32 partial sums (written and read back once)
//! stay under half the bytes of B.
//!
//! Workspace: with more than one split the partial sums need `splits * batch * m * n` f32. A
//! caller may pass a buffer (see [`workspace_bytes`]); otherwise it is taken from the stream's
//! memory pool (`cuMemAllocAsync`) and given back right after the reduction on the same
//! stream, which costs a pointer bump with the engine's pool (it keeps freed memory) and needs
//! no lifetime management by the caller. Without a buffer or a pool there is one split.

use std::sync::Arc;

use cudarc::driver::{CudaStream, DeviceRepr, LaunchConfig, PushKernelArg, result};
use max_graph::DType;

use super::epilogue::Epilogue;
use super::{grid_for, sm_count};
use crate::sources::GEMM_SKINNY;
use crate::{Error, Result, function};

const SIMT_THREADS: u32 = 256;
/// Rows of K per SIMT block at least (8 warps x 8 rows) and per MMA block (4 k-tiles of 32).
const SIMT_MIN_K: usize = 64;
const MMA_MIN_K: usize = 128;
/// Split boundaries: any multiple of 8 for SIMT, whole k-tiles for MMA.
const SIMT_K_ALIGN: usize = 8;
const MMA_BK: usize = 32;
const MMA_BN: usize = 128;
const MMA_STAGES: usize = 4;
/// Blocks per SM the split count aims for.
const SIMT_BLOCKS_PER_SM: usize = 4;
const MMA_BLOCKS_PER_SM: usize = 3;
const MAX_SPLITS: usize = 512;
/// Most rows the SIMT kernel takes (in row tiles of at most 16).
const SIMT_MAX_M: usize = 64;
/// bf16/f16 products with at most this many rows run on the SIMT kernel when the MMA kernel
/// could also take them (override: the tuning knob `gemm.skinny_simt_m`, 0 to 16).
const SIMT_MAX_M_16BIT: usize = 4;
/// The MMA kernel takes fewer rows than this per batch; the Hopper kernel takes the rest.
const MMA_MAX_M: usize = 256;
/// SM count assumed where no device is at hand (`suitable`); H100/H200 have 132.
const DEFAULT_SMS: usize = 132;

#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct SkinnyArgs {
    a: u64,
    b: u64,
    c: u64,
    ws: u64,
    m: i64,
    n: i64,
    k: i64,
    stride_a: i64,
    stride_b: i64,
    stride_c: i64,
    k_per_split: i64,
    splits: i64,
    m_tiles: i64,
    counters: u64,
    epi: Epilogue,
}
// SAFETY: plain-old-data with the layout of the kernel's `SkinnyArgs`.
unsafe impl DeviceRepr for SkinnyArgs {}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct ReduceArgs {
    ws: u64,
    c: u64,
    total: i64,
    mn: i64,
    n: i64,
    splits: i64,
    stride_c: i64,
    epi: Epilogue,
}
// SAFETY: plain-old-data with the layout of the kernel's `ReduceArgs`.
unsafe impl DeviceRepr for ReduceArgs {}

/// The kernel that runs a product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    Simt,
    Mma,
}

/// Overrides of the planner's choices, for tests and tuning.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Force {
    pub path: Option<Path>,
    pub splits: Option<usize>,
    /// Rows up to which 16-bit products take the SIMT path (`gemm.skinny_simt_m`; default 4).
    pub simt_m: Option<usize>,
}

/// How one product runs: the kernel, its tiles and the K split, after folding batches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub path: Path,
    pub kernel: String,
    pub threads: u32,
    /// Dynamic shared memory in bytes (the SIMT kernels use static shared memory only).
    pub smem: u32,
    /// Rows and batches after folding, with the element strides between batches.
    pub m: usize,
    pub batch: usize,
    pub strides: (usize, usize, usize),
    pub tile_m: usize,
    pub tile_n: usize,
    pub m_tiles: usize,
    pub n_tiles: usize,
    pub splits: usize,
    pub k_per_split: usize,
}

impl Plan {
    /// Bytes of f32 partial sums this plan needs (0 with one split).
    pub fn workspace_bytes(&self, n: usize) -> usize {
        if self.splits > 1 { self.splits * self.batch * self.m * n * 4 } else { 0 }
    }
}

pub(super) fn short_name(dtype: DType) -> Option<&'static str> {
    match dtype {
        DType::BFloat16 => Some("bf16"),
        DType::Float16 => Some("f16"),
        DType::Float32 => Some("f32"),
        _ => None,
    }
}

/// (splits, rows of K per split) for `base` blocks without splitting.
#[allow(clippy::too_many_arguments)]
fn split_k(
    base: usize,
    k: usize,
    (align, min_k): (usize, usize),
    rows: usize,
    elem: usize,
    blocks_wanted: usize,
    forced: Option<usize>,
) -> (usize, usize) {
    if k == 0 {
        return (1, 0);
    }
    let want = match forced {
        Some(s) => s.clamp(1, MAX_SPLITS),
        None => {
            let fill = blocks_wanted.div_ceil(base.max(1));
            // partial sums (written once, read once) under half the bytes of B
            let traffic = (k * elem / (16 * rows.max(1))).max(1);
            fill.min((k / min_k).max(1)).min(traffic).clamp(1, MAX_SPLITS)
        }
    };
    let per = k.div_ceil(want).next_multiple_of(align);
    (k.div_ceil(per), per)
}

/// The plan for a product, or None when these kernels do not take it (other dtypes, too many
/// rows, grid limits). `sms` is the device's multiprocessor count.
#[allow(clippy::too_many_arguments)]
pub fn plan(
    dtype: DType,
    (m, n, k): (usize, usize, usize),
    batch: usize,
    (stride_a, stride_b, stride_c): (usize, usize, usize),
    (a, b): (u64, u64),
    sms: usize,
    force: Force,
) -> Option<Plan> {
    let name = short_name(dtype)?;
    let elem = dtype.size_in_bytes();
    if m == 0 || n == 0 || batch == 0 {
        return None;
    }
    // Batches sharing B with A and C contiguous are rows of one product.
    let (rows, batch, strides) = if batch > 1 && stride_b == 0 && stride_a == m * k && stride_c == m * n {
        (m.checked_mul(batch)?, 1, (0, 0, 0))
    } else {
        (m, batch, (stride_a, stride_b, stride_c))
    };
    if batch > 65535 {
        return None;
    }
    let is16 = elem == 2;
    let mma_ok = is16
        && k % 8 == 0
        && n % 8 == 0
        && (a | b) % 16 == 0
        && (batch == 1 || (strides.0 % 8 == 0 && strides.1 % 8 == 0))
        && m < MMA_MAX_M;
    let simt_ok = rows <= SIMT_MAX_M;
    let path = match force.path {
        Some(Path::Mma) if mma_ok => Path::Mma,
        Some(Path::Simt) if simt_ok => Path::Simt,
        Some(_) => return None,
        None if is16 && rows <= force.simt_m.unwrap_or(SIMT_MAX_M_16BIT) => Path::Simt,
        None if mma_ok => Path::Mma,
        None if simt_ok => Path::Simt,
        None => return None,
    };
    let sms = sms.max(1);
    let (kernel, threads, smem, tile_m, tile_n, split_rule, per_sm) = match path {
        Path::Simt => {
            let mt = rows.next_power_of_two().min(16);
            let v = 16 / elem;
            let vec = n % v == 0 && b % 16 == 0 && (batch == 1 || (strides.1 * elem).is_multiple_of(16));
            let kind = if vec { "vec" } else { "any" };
            let kernel = format!("skinny_simt_{name}_m{mt}_{kind}");
            (kernel, SIMT_THREADS, 0, mt, 32 * v, (SIMT_K_ALIGN, SIMT_MIN_K), SIMT_BLOCKS_PER_SM)
        }
        Path::Mma => {
            let (bm, threads) = match rows {
                0..=16 => (16, 128),
                17..=32 => (32, 128),
                33..=64 => (64, 256),
                _ => (128, 256),
            };
            let smem = MMA_STAGES * (bm * (MMA_BK + 8) + MMA_BK * (MMA_BN + 8)) * 2;
            let kernel = format!("skinny_mma_{name}_m{bm}");
            (kernel, threads, smem as u32, bm, MMA_BN, (MMA_BK, MMA_MIN_K), MMA_BLOCKS_PER_SM)
        }
    };
    let (m_tiles, n_tiles) = (rows.div_ceil(tile_m), n.div_ceil(tile_n));
    let base = m_tiles.checked_mul(n_tiles)?;
    if base > i32::MAX as usize {
        return None;
    }
    let (splits, k_per_split) = split_k(base * batch, k, split_rule, rows, elem, sms * per_sm, force.splits);
    Some(Plan {
        path,
        kernel,
        threads,
        smem,
        m: rows,
        batch,
        strides,
        tile_m,
        tile_n,
        m_tiles,
        n_tiles,
        splits,
        k_per_split,
    })
}

/// Whether [`gemm_skinny`] takes this product and should be preferred for it: bf16, f16 or f32
/// with few rows (after folding batches that share B), any alignment for f32 and for up to 64
/// rows; bf16/f16 with more rows (up to 255 per batch) need K % 8 == 0, N % 8 == 0 and 16-byte
/// aligned `a` and `b`.
pub fn suitable(
    dtype: DType,
    dims: (usize, usize, usize),
    batch: usize,
    strides: (usize, usize, usize),
    ptrs: (u64, u64),
) -> bool {
    plan(dtype, dims, batch, strides, ptrs, DEFAULT_SMS, Force::default()).is_some()
}

/// Bytes of workspace [`gemm_skinny`] uses for this product on the stream's device (0 when
/// it needs none, or does not take the product).
pub fn workspace_bytes(
    stream: &Arc<CudaStream>,
    dtype: DType,
    dims: (usize, usize, usize),
    batch: usize,
    strides: (usize, usize, usize),
    ptrs: (u64, u64),
) -> Result<usize> {
    let sms = sm_count(stream)?;
    Ok(plan(dtype, dims, batch, strides, ptrs, sms, Force::default()).map_or(0, |p| p.workspace_bytes(dims.1)))
}

/// `batch` products C = epilogue(A @ B) at element strides (0 shares an operand); see the
/// module comment. `workspace` is an optional (device address, bytes) buffer for the split-K
/// partial sums; None (or one too small) takes it from the stream's memory pool.
#[allow(clippy::too_many_arguments)]
pub fn gemm_skinny(
    stream: &Arc<CudaStream>,
    dtype: DType,
    ptrs: (u64, u64, u64),
    dims: (usize, usize, usize),
    batch: usize,
    strides: (usize, usize, usize),
    epi: &Epilogue,
    workspace: Option<(u64, usize)>,
) -> Result<()> {
    let force = Force { simt_m: max_tuning::current().int(max_tuning::Knob::GemmSkinnySimtM), ..Force::default() };
    gemm_skinny_forced(stream, dtype, ptrs, dims, batch, strides, epi, workspace, force)
}

/// [`gemm_skinny`] with the planner's choices overridden (tests, tuning).
#[allow(clippy::too_many_arguments)]
pub fn gemm_skinny_forced(
    stream: &Arc<CudaStream>,
    dtype: DType,
    (a, b, c): (u64, u64, u64),
    (m, n, k): (usize, usize, usize),
    batch: usize,
    strides: (usize, usize, usize),
    epi: &Epilogue,
    workspace: Option<(u64, usize)>,
    force: Force,
) -> Result<()> {
    if m == 0 || n == 0 || batch == 0 {
        return Ok(());
    }
    let sms = sm_count(stream)?;
    let unsupported =
        || Error::Unsupported(format!("gemm_skinny: no kernel for {dtype} [{m}, {k}] @ [{k}, {n}] x {batch}"));
    let mut p = plan(dtype, (m, n, k), batch, strides, (a, b), sms, force).ok_or_else(unsupported)?;
    let mut need = p.workspace_bytes(n);
    let provided = workspace.filter(|(_, bytes)| *bytes >= need).map(|(ptr, _)| ptr);
    if need > 0 && provided.is_none() && !stream.context().has_async_alloc() {
        p = plan(dtype, (m, n, k), batch, strides, (a, b), sms, Force { splits: Some(1), ..force })
            .ok_or_else(unsupported)?;
        need = 0;
    }
    let (ws, owned) = match (need, provided) {
        (0, _) => (0, false),
        (_, Some(ptr)) => (ptr, false),
        // SAFETY: stream-ordered allocation, freed below on the same stream after its last use.
        _ => {
            (unsafe { result::malloc_async(stream.cu_stream(), need) }.map_err(Error::driver("cuMemAllocAsync"))?, true)
        }
    };
    let out = launch(stream, dtype, &p, (a, b, c, ws), (n, k), epi);
    if out.is_ok() {
        super::record::record("gemm_skinny", || {
            let fields = vec![
                ("mma", (p.path == Path::Mma) as i64),
                ("splits", p.splits as i64),
                ("m_tiles", p.m_tiles as i64),
                ("n_tiles", p.n_tiles as i64),
            ];
            (p.kernel.clone(), fields)
        });
    }
    if owned {
        // SAFETY: allocated above on this stream; the kernels that use it are queued before.
        let _ = unsafe { result::free_async(ws, stream.cu_stream()) };
    }
    out
}

fn launch(
    stream: &Arc<CudaStream>,
    dtype: DType,
    p: &Plan,
    (a, b, c, ws): (u64, u64, u64, u64),
    (n, k): (usize, usize),
    epi: &Epilogue,
) -> Result<()> {
    let f = function(stream.context(), &GEMM_SKINNY, &p.kernel)?;
    crate::allow_smem(stream.context(), &f, p.smem)?;
    let tiles = p.m_tiles * p.n_tiles * p.batch;
    let counters = if p.splits > 1 { super::tickets::for_stream(stream, tiles)?.unwrap_or(0) } else { 0 };
    let args = SkinnyArgs {
        a,
        b,
        c,
        ws,
        m: p.m as i64,
        n: n as i64,
        k: k as i64,
        stride_a: p.strides.0 as i64,
        stride_b: p.strides.1 as i64,
        stride_c: p.strides.2 as i64,
        k_per_split: p.k_per_split as i64,
        splits: p.splits as i64,
        m_tiles: p.m_tiles as i64,
        counters,
        epi: *epi,
    };
    let cfg = LaunchConfig {
        grid_dim: ((p.m_tiles * p.n_tiles) as u32, p.splits as u32, p.batch as u32),
        block_dim: (p.threads, 1, 1),
        shared_mem_bytes: p.smem,
    };
    let mut launch = stream.launch_builder(&f);
    launch.arg(&args);
    // SAFETY: the argument struct matches the kernel's; A, B and C hold their matrices for every
    // batch (the caller's contract) and ws holds splits x batch x m x n f32 when splits > 1.
    unsafe { launch.launch(cfg) }.map_err(Error::driver("cuLaunchKernel(gemm_skinny)"))?;
    if p.splits == 1 || counters != 0 {
        return Ok(());
    }
    let name = short_name(dtype).unwrap_or("f32");
    let r = function(stream.context(), &GEMM_SKINNY, &format!("skinny_reduce_{name}"))?;
    let total = (p.batch * p.m * n) as u64;
    let args = ReduceArgs {
        ws,
        c,
        total: total as i64,
        mn: (p.m * n) as i64,
        n: n as i64,
        splits: p.splits as i64,
        stride_c: p.strides.2 as i64,
        epi: *epi,
    };
    let mut launch = stream.launch_builder(&r);
    launch.arg(&args);
    // SAFETY: ws holds the partial sums written by the launch above (same stream); C as above.
    unsafe { launch.launch(grid_for(total)) }.map_err(Error::driver("cuLaunchKernel(skinny_reduce)"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auto(dtype: DType, m: usize, n: usize, k: usize) -> Option<Plan> {
        plan(dtype, (m, n, k), 1, (0, 0, 0), (0, 0), 132, Force::default())
    }

    #[test]
    fn simt_rows_knob_moves_16bit_products_between_paths() {
        let with = |spec: &str| {
            let t = max_tuning::Tuning::parse(spec).unwrap();
            let force = Force { simt_m: t.int(max_tuning::Knob::GemmSkinnySimtM), ..Force::default() };
            plan(DType::BFloat16, (2, 4096, 4096), 1, (0, 0, 0), (0, 0), 132, force).unwrap().path
        };
        assert_eq!(with(""), Path::Simt);
        assert_eq!(with("gemm.skinny_simt_m=1"), Path::Mma);
        assert_eq!(with("gemm.skinny_simt_m=2"), Path::Simt);
    }

    #[test]
    fn argument_structs_match_the_kernel_layout() {
        assert_eq!(std::mem::size_of::<Epilogue>(), 40);
        assert_eq!(std::mem::size_of::<SkinnyArgs>(), 14 * 8 + 40);
        assert_eq!(std::mem::size_of::<ReduceArgs>(), 7 * 8 + 40);
    }

    #[test]
    fn splits_cover_k_exactly_and_respect_the_limits() {
        for dtype in [DType::BFloat16, DType::Float16, DType::Float32] {
            for m in [1, 2, 3, 7, 16, 17, 64, 128, 255] {
                for k in [0, 1, 5, 64, 1000, 4104, 4096, 65536] {
                    for n in [1, 7, 256, 4096, 11008] {
                        let Some(p) = auto(dtype, m, n, k) else { continue };
                        if k == 0 {
                            assert_eq!(p.splits, 1);
                            continue;
                        }
                        // every split non-empty, together exactly K
                        assert!(p.k_per_split * (p.splits - 1) < k && p.k_per_split * p.splits >= k, "{p:?}");
                        let align = if p.path == Path::Mma { MMA_BK } else { SIMT_K_ALIGN };
                        assert_eq!(p.k_per_split % align, 0, "{p:?}");
                        assert!(p.splits <= MAX_SPLITS);
                        assert!(p.m_tiles * p.tile_m >= p.m && p.n_tiles * p.tile_n >= n);
                        // partial sums written and read back: at most half the bytes of B
                        assert!(4 * p.workspace_bytes(n) <= k * n * dtype.size_in_bytes() * p.batch, "{p:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn paths_follow_dtype_rows_and_alignment() {
        let bf = DType::BFloat16;
        assert_eq!(auto(bf, 1, 4096, 4096).map(|p| p.path), Some(Path::Simt));
        assert_eq!(auto(bf, 16, 4096, 4096).map(|p| (p.path, p.tile_m)), Some((Path::Mma, 16)));
        assert_eq!(auto(bf, 128, 11008, 4096).map(|p| (p.path, p.tile_m)), Some((Path::Mma, 128)));
        assert!(auto(bf, 256, 4096, 4096).is_none());
        // misaligned 16-bit: SIMT up to 64 rows, nothing above
        assert_eq!(auto(bf, 17, 4096, 4100).map(|p| p.path), Some(Path::Simt));
        assert!(auto(bf, 65, 4096, 4100).is_none());
        assert_eq!(auto(bf, 3, 7, 5).map(|p| p.kernel), Some("skinny_simt_bf16_m4_any".into()));
        assert_eq!(auto(bf, 3, 256, 5).map(|p| p.kernel), Some("skinny_simt_bf16_m4_vec".into()));
        let f32 = DType::Float32;
        assert_eq!(auto(f32, 16, 4096, 4096).map(|p| p.kernel), Some("skinny_simt_f32_m16_vec".into()));
        assert_eq!(auto(f32, 64, 4096, 4096).map(|p| p.m_tiles), Some(4));
        assert!(auto(f32, 65, 4096, 4096).is_none());
        assert!(auto(DType::Float64, 1, 4096, 4096).is_none());
        // an unaligned B pointer takes the scalar SIMT kernel, and no MMA
        let p = plan(bf, (16, 4096, 4096), 1, (0, 0, 0), (0, 2), 132, Force::default());
        assert_eq!(p.map(|p| p.kernel), Some("skinny_simt_bf16_m16_any".into()));
        // the decode shapes fill the GPU
        let p = auto(bf, 1, 4096, 4096).unwrap_or_else(|| panic!("no plan"));
        assert!(p.n_tiles * p.splits >= 132 * 2, "{p:?}");
        let p = auto(bf, 16, 4096, 4096).unwrap_or_else(|| panic!("no plan"));
        assert!(p.n_tiles * p.splits >= 132 * 2, "{p:?}");
    }

    #[test]
    fn batches_sharing_b_fold_into_rows() {
        let bf = DType::BFloat16;
        let p = plan(bf, (1, 4096, 4096), 8, (4096, 0, 4096), (0, 0), 132, Force::default());
        assert_eq!(p.map(|p| (p.m, p.batch)), Some((8, 1)));
        let p = plan(bf, (1, 4096, 4096), 8, (4096, 4096 * 4096, 4096), (0, 0), 132, Force::default());
        assert_eq!(p.map(|p| (p.m, p.batch)), Some((1, 8)));
        let p = plan(bf, (3, 4096, 4096), 8, (0, 4096 * 4096, 3 * 4096), (0, 0), 132, Force::default());
        assert_eq!(p.map(|p| (p.m, p.batch)), Some((3, 8)));
        // folding past 256 rows still runs here when each batch has fewer than 256 rows
        let p = plan(bf, (16, 4096, 4096), 32, (16 * 4096, 0, 16 * 4096), (0, 0), 132, Force::default());
        assert_eq!(p.map(|p| (p.m, p.m_tiles, p.path)), Some((512, 4, Path::Mma)));
    }
}
