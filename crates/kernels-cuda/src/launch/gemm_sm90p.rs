//! Launching the persistent Hopper GEMM (kernels/gemm_sm90p.cu): the plan (column tile width,
//! cluster size, split-K, grid) and the launch through `cuLaunchKernelEx` (the cluster size is a
//! launch attribute). [`super::gemm_sm90::gemm`] prepares A and B and calls [`launch`]; sibling
//! products of one A (up to [`SEGS`] weights, [`launch_segments`]) and a gated MLP's pair
//! ([`launch_gated`]) run as one launch each.
//!
//! Every choice can be forced through the `gemm.*` tuning knobs (max_tuning's declarations):
//! `gemm.bm` (row tile: 64 rows, where both consumer warpgroups split the columns, by default
//! for at most 64 rows per batch, the decode batches; else 128), `gemm.bn` (column tile),
//! `gemm.cluster` (CTAs per cluster along M sharing B by TMA
//! multicast), `gemm.cluster_n` (along N sharing A), `gemm.splitk`, `gemm.persistent` (one CTA
//! per work unit, or at most one per SM walking units), `gemm.grid`, `gemm.group_m` (row tiles
//! per raster group), `gemm.tail` (split-K for the tiles of a last, partial wave: on by
//! default), `gemm.epilogue` = direct | staged (the
//! epilogue stores straight from the accumulator fragments, 8 scattered 8-byte pieces per store
//! instruction, or through a per-warp shared-memory tile as coalesced 16-byte vectors: the `_st`
//! kernels, taken only where C allows them, see [`staged_ok`]; staged by default: on an H200,
//! bf16 W^T, it measured 0.92-1.0x cuBLAS where direct measured 0.81-0.94x at 2048-8192 rows and
//! K of 4096-14336, and 1.1-1.5x faster than direct on ResNet-50's 1x1-conv shapes). Each launch's plan is recorded while launches are recorded
//! ([`super::record`]). A ping-pong schedule (each consumer warpgroup on its own tile, one's
//! epilogue overlapping the other's mainloop) measured 0.62-0.64x cuBLAS on an H200 where the
//! cooperative one ran 0.83-0.90x (bf16, 2048 to 8192 rows) and was deleted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaFunction, CudaStream, result};
use max_graph::DType;

use super::epilogue::Epilogue;
use super::{gemm_sm90::tma_map, tma::TmaMap};
use crate::sources::{GEMM_SM90P_BF16, GEMM_SM90P_F16};
use crate::{Error, Result, function};

mod plan;
pub use plan::{Knobs, Plan, plan};

const BK: usize = 64;
const THREADS: u32 = 384;

/// The kernel's `GemmPArgs`, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
struct GemmPArgs {
    c: u64,
    ws: u64,
    counters: u64,
    m: i64,
    n: i64,
    stride_c: i64,
    k_tiles: i32,
    splits: i32,
    k_per_split: i32,
    m_tiles: i32,
    n_tiles: i32,
    group: i32,
    units: i32,
    dp_units: i32,
    pairs: i32,
    sk_len: i32,
    sk_tiles: i32,
    sk_stride: i32,
    cn: i32,
    ldc: i32,
    pdl: i32,
    early_b: i32,
    segs: i32,
    seg_tiles: [i32; SEGS + 1],
    seg_n: [i64; SEGS],
    seg_c: [u64; SEGS],
    epi: Epilogue,
}

/// The most B operands one launch takes side by side (`GP_SEGS` in the kernel).
pub(crate) const SEGS: usize = 4;

/// The B operands of a launch: one; up to [`SEGS`] weights Wt [n_s, k] read against the same A,
/// each with its own C [rows, n_s] (`(w, c, n_s)`: a layer's q, k and v projections), with an
/// identity epilogue; or a gated pair, C = act(A @ Wg^T) * (A @ Wu^T) with the gate's
/// activation (`Gated(w_up)`; B is Wg [n, k] and C [rows, n]).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Operands<'a> {
    One,
    Segments(&'a [(u64, u64, usize)]),
    Gated(u64),
}

/// The family with this type's kernels.
pub(crate) fn family(dtype: DType) -> &'static crate::sources::Family {
    if dtype == DType::BFloat16 { &GEMM_SM90P_BF16 } else { &GEMM_SM90P_F16 }
}

/// Ring stages, as `PRing` in the kernel. 128-row tiles: 4 x 48 KB (bn 256), 7 x 32 KB (bn
/// 128), 6 x 32 KB (bn 128 with the staged epilogue, whose staging tiles do not fit next to 7).
/// 64-row tiles (never staged): 9 x 24 KB (bn 128), 12 x 16 KB (bn 64).
fn stages(bm: usize, bn: usize, staged: bool) -> usize {
    match (bm, bn) {
        (128, 256) => 4,
        (128, _) if staged => 6,
        (128, _) => 7,
        (_, 256) => 5,
        (_, 128) => 9,
        _ => 12,
    }
}

/// The staged epilogue's staging tiles: 8 consumer warps x 16 rows of 144 bytes (64 columns of
/// a 16-bit type plus 16 bytes of padding), as STG_WARP_BYTES in the kernel.
const STAGING_BYTES: usize = 8 * 16 * 144;

/// Shared memory of a block: the ring, its 2 * stages barriers, 16 bytes of split-K flags (one
/// per consumer warpgroup), 16 spare bytes (kept so the layout measured stays), and slack to align the
/// ring to 1024 bytes: at most 230,544 bytes, within the 232,448 (227 KB) a Hopper block may
/// have. Staged: the barriers get 256 bytes, then the staging tiles: 216,320 bytes for bn 256
/// (4 x 48 KB) and for bn 128 (6 x 32 KB).
fn smem_bytes(bm: usize, bn: usize, staged: bool) -> u32 {
    let ring = stages(bm, bn, staged) * (bm + bn) * BK * 2;
    let rest = if staged { 256 + STAGING_BYTES } else { 2 * stages(bm, bn, false) * 8 + 16 + 2 * 8 };
    (ring + rest + 1024) as u32
}

/// Whether the staged epilogue may store C: every 8-column piece of a row one aligned 16-byte
/// vector (n % 8 == 0, C 16-byte aligned, batches n * rows elements apart) and the fragment
/// math's 32-bit pairs (`pairs`: bias and residual 4-byte aligned).
fn staged_ok(n: usize, c: u64, pairs: bool) -> bool {
    pairs && n.is_multiple_of(8) && c.is_multiple_of(16)
}

/// The kernel entry for a tile of `bm` x `bn`: `_m64` for 64-row tiles, `_st` with the staged
/// epilogue, `_f32` for f32 results, else `_pl` for an identity epilogue (the kernel compiled
/// without the epilogue's operations).
fn kernel_name(
    dtype: DType,
    n_major: bool,
    (bm, bn): (usize, usize),
    staged: bool,
    f32: bool,
    identity: bool,
) -> String {
    format!(
        "gemm_sm90p_{}_{}{}_n{}{}{}",
        if dtype == DType::BFloat16 { "bf16" } else { "f16" },
        if n_major { "b" } else { "t" },
        if bm == 64 { "_m64" } else { "" },
        bn,
        if staged { "_st" } else { "" },
        if f32 {
            "_f32"
        } else if identity {
            "_pl"
        } else {
            ""
        },
    )
}

/// The gated kernel for a tile of `bm` x `bn` (Bt only, direct stores).
fn gated_name(dtype: DType, (bm, bn): (usize, usize)) -> String {
    let t = if dtype == DType::BFloat16 { "bf16" } else { "f16" };
    format!("gemm_sm90p_{t}_t{}_n{bn}_gt", if bm == 64 { "_m64" } else { "" })
}

/// Clusters of `cluster` CTAs that fit on the device at once for this kernel (cached per
/// device and kernel), or SMs / cluster when the driver cannot say. A persistent grid larger
/// than that would leave some clusters waiting for a whole round of units.
fn max_clusters(stream: &Arc<CudaStream>, f: &CudaFunction, name: &str, cluster: usize, smem: u32) -> Result<usize> {
    type Cache = Mutex<Option<HashMap<(usize, String, usize), usize>>>;
    static CACHE: Cache = Mutex::new(None);
    let key = (stream.context().ordinal(), name.to_string(), cluster);
    if let Some(&v) = CACHE.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert_with(HashMap::new).get(&key) {
        return Ok(v);
    }
    let sms = super::sm_count(stream)?;
    let fallback = (sms / cluster).max(1);
    let v = if cluster == 1 {
        sms
    } else {
        match crate::launch::active_clusters(stream, f, cluster, cluster * fallback, (THREADS, smem)) {
            // Fewer than SMs / cluster when some GPC has an odd SM left over; an answer far
            // below that would mean the query misread the launch, and is not trusted.
            Some(count) if count * 4 >= fallback * 3 => count.min(fallback),
            _ => fallback,
        }
    };
    CACHE.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert_with(HashMap::new).insert(key, v);
    Ok(v)
}

/// Runs the kernel: A [rows_a, k] per batch (`z` batches at `a`, or one), B at `b` either
/// [k, n] (`n_major`) or transposed [n, k], `batch_b` of them, C [rows_a, n] per batch at `c`.
/// `b_constant`: no kernel writes B (a layer's weight), so under PDL the kernel loads its first
/// stages of B before it waits for the kernel ahead.
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch(
    stream: &Arc<CudaStream>,
    dtype: DType,
    (a, b, c): (u64, u64, u64),
    (rows_a, n, k): (usize, usize, usize),
    (z, batch_b, n_major): (usize, usize, bool),
    epi: &Epilogue,
    b_constant: bool,
) -> Result<()> {
    let out = COut { f32: false, ldc: n };
    let batches = (z, batch_b, n_major);
    launch_out(stream, dtype, (a, b, c), (rows_a, n, k), batches, epi, (out, b_constant), Operands::One)
}

/// One launch for several weights Wt [n_s, k] (16-bit, K-major) read against the same A [rows,
/// k]: `parts` are `(w, c, n_s)`, each product into its own C [rows, n_s]; an identity epilogue.
/// `b_constant` as for [`launch`].
pub(crate) fn launch_segments(
    stream: &Arc<CudaStream>,
    dtype: DType,
    a: u64,
    parts: &[(u64, u64, usize)],
    (rows, k): (usize, usize),
    b_constant: bool,
) -> Result<()> {
    let Some(&(w0, c0, n0)) = parts.first() else { return Ok(()) };
    if parts.len() > SEGS || parts.iter().any(|&(_, _, n)| n == 0 || n > i32::MAX as usize) {
        return Err(Error::Unsupported(format!("gemm_sm90p: {} weights in one launch", parts.len())));
    }
    let out = COut { f32: false, ldc: n0 };
    let epi = Epilogue::default();
    let (dims, batches) = ((rows, n0, k), (1, 1, false));
    launch_out(stream, dtype, (a, w0, c0), dims, batches, &epi, (out, b_constant), Operands::Segments(parts))
}

/// C [rows, n] = act(A @ Wg^T) * (A @ Wu^T) in one launch (the gated kernels): A [rows, k], Wg
/// and Wu [n, k] (16-bit, K-major), `epi` an activation at most; `b_constant` as for [`launch`].
pub(crate) fn launch_gated(
    stream: &Arc<CudaStream>,
    dtype: DType,
    (a, wg, wu, c): (u64, u64, u64, u64),
    (rows, n, k): (usize, usize, usize),
    epi: &Epilogue,
    b_constant: bool,
) -> Result<()> {
    if !epi.act_only() || n > (i32::MAX / 2) as usize {
        return Err(Error::Unsupported("gemm_sm90p: a gated product takes an activation of the gate only".into()));
    }
    let out = COut { f32: false, ldc: n };
    launch_out(stream, dtype, (a, wg, c), (rows, n, k), (1, 1, false), epi, (out, b_constant), Operands::Gated(wu))
}

/// Where the kernel stores C: f32 (the `_f32` kernels: bf16 operands, Bt [N, K], an epilogue of
/// at most `beta * residual`) or the operands' 16-bit type, and the elements between rows of C
/// (and of the residual; n unless C is a column range of a wider matrix, f32 only).
#[derive(Clone, Copy, Debug)]
pub(crate) struct COut {
    pub f32: bool,
    pub ldc: usize,
}

/// C [rows_a, n] (rows `ldc` apart) = A [rows_a, k] @ Bt^T in f32 for bf16 A and Bt [n, k] (a
/// linear layer's weight as stored), with `epi`'s residual (f32, same layout) added.
pub(crate) fn launch_f32(
    stream: &Arc<CudaStream>,
    (a, b, c): (u64, u64, u64),
    (rows_a, n, k): (usize, usize, usize),
    ldc: usize,
    epi: &Epilogue,
) -> Result<()> {
    if !epi.residual_only() || ldc < n || ldc > i32::MAX as usize {
        return Err(Error::Unsupported("gemm_sm90p: f32 results take a residual at most, rows < 2^31 apart".into()));
    }
    let out = COut { f32: true, ldc };
    // (B is a chunk of weights the dequantize kernel ahead has just written.)
    launch_out(stream, DType::BFloat16, (a, b, c), (rows_a, n, k), (1, 1, false), epi, (out, false), Operands::One)
}

#[allow(clippy::too_many_arguments)]
fn launch_out(
    stream: &Arc<CudaStream>,
    dtype: DType,
    (a, b, c): (u64, u64, u64),
    (rows_a, n, k): (usize, usize, usize),
    batches: (usize, usize, bool),
    epi: &Epilogue,
    out: (COut, bool),
    ops: Operands,
) -> Result<()> {
    let mut knobs = Knobs::from_tuning(&max_tuning::current());
    if matches!(ops, Operands::Gated(_)) {
        // (the gated kernels load B without multicast: clusters along N only)
        knobs.cluster = Some(1);
    }
    let r = launch_with(stream, dtype, (a, b, c), (rows_a, n, k), batches, epi, knobs, out, ops);
    match r {
        // A cluster launch the device refuses (cluster scheduling is not guaranteed) falls back
        // to single-CTA clusters, unless the cluster size was forced.
        Err(Error::Driver { op, .. }) if op == LAUNCH && knobs.cluster.is_none() && knobs.cluster_n.is_none() => {
            let knobs = Knobs { cluster: Some(1), cluster_n: Some(1), ..knobs };
            launch_with(stream, dtype, (a, b, c), (rows_a, n, k), batches, epi, knobs, out, ops)
        }
        other => other,
    }
}

/// The plan for `ops`: segments' column tiles are counted per segment (a segment's last tile
/// may be partial), a gated pair's B rows are twice C's columns (a tile of bn B rows makes bn / 2
/// columns of C).
#[allow(clippy::too_many_arguments)]
fn plan_for(
    rows: usize,
    n: usize,
    k: usize,
    z: usize,
    sms: usize,
    n_major: bool,
    knobs: Knobs,
    ops: Operands,
) -> Option<Plan> {
    match ops {
        Operands::One => plan(rows, n, k, z, sms, n_major, knobs),
        Operands::Gated(_) => plan(rows, 2 * n, k, z, sms, n_major, knobs),
        Operands::Segments(parts) => {
            let total: usize = parts.iter().map(|p| p.2).sum();
            let first = plan(rows, total, k, z, sms, n_major, knobs)?;
            let tiles: usize = parts.iter().map(|p| p.2.div_ceil(first.bn)).sum();
            if tiles == first.n_tiles {
                return Some(first);
            }
            plan(rows, tiles * first.bn, k, z, sms, n_major, Knobs { bn: Some(first.bn), bm: Some(first.bm), ..knobs })
        }
    }
}

const LAUNCH: &str = "cuLaunchKernelEx(gemm_sm90p)";

#[allow(clippy::too_many_arguments)]
fn launch_with(
    stream: &Arc<CudaStream>,
    dtype: DType,
    (a, b, c): (u64, u64, u64),
    (rows_a, n, k): (usize, usize, usize),
    (z, batch_b, n_major): (usize, usize, bool),
    epi: &Epilogue,
    knobs: Knobs,
    (out, b_constant): (COut, bool),
    ops: Operands,
) -> Result<()> {
    let sms = super::sm_count(stream)?;
    let gated = matches!(ops, Operands::Gated(_));
    let one = [(b, c, n)];
    let parts: &[(u64, u64, usize)] = match ops {
        Operands::Segments(parts) => parts,
        _ => &one,
    };
    if (parts.len() > 1 || gated) && (z != 1 || batch_b != 1 || n_major || out.f32) {
        return Err(Error::Unsupported("gemm_sm90p: segments and gated pairs take one Bt and 16-bit C".into()));
    }
    if parts.len() > 1 && !epi.is_identity() {
        return Err(Error::Unsupported("gemm_sm90p: segments take an identity epilogue".into()));
    }
    let p = plan_for(rows_a, n, k, z, sms, n_major, knobs, ops)
        .ok_or_else(|| Error::Unsupported("gemm_sm90p: problem too large for one launch".into()))?;
    let pairs = if out.f32 {
        out.ldc.is_multiple_of(2) && c % 8 == 0 && epi.residual.is_multiple_of(8)
    } else {
        parts.iter().all(|&(_, c, n)| n % 2 == 0 && c % 4 == 0)
            && epi.bias.is_multiple_of(4)
            && epi.residual.is_multiple_of(4)
    };
    // (The 64-row tiles have no staged form: their stores are a small part of their time.)
    let staged = !out.f32
        && !gated
        && p.bm == 128
        && knobs.staged.unwrap_or(true)
        && parts.iter().all(|&(_, c, n)| staged_ok(n, c, pairs));
    let name = if gated {
        gated_name(dtype, (p.bm, p.bn))
    } else {
        kernel_name(dtype, n_major, (p.bm, p.bn), staged, out.f32, epi.is_identity())
    };
    let f = function(stream.context(), family(dtype), &name)?;
    let smem = smem_bytes(p.bm, p.bn, staged);
    crate::allow_smem(stream.context(), &f, smem)?;
    // Each CTA of a cluster row loads bm / cluster_n rows of the A tile, and each of a cluster
    // column bn / cm rows of Bt (with B [k, n], whole 64 x 64 boxes); a gated pair's consumer
    // half a warpgroup's columns of each weight.
    let cm = p.cluster / p.cluster_n;
    let map_a = tma_map(dtype, a, k, rows_a, z, (p.bm / p.cluster_n) as u32)?;
    let wn = if p.bm == 128 { p.bn } else { p.bn / 2 };
    let map_of = |w: u64, n: usize| -> Result<TmaMap> {
        if n_major {
            // 64 x 64 boxes of B [k, n]: rows of 128 bytes, the N-major swizzled layout.
            tma_map(dtype, w, n, k, batch_b, BK as u32)
        } else if gated {
            tma_map(dtype, w, k, n, 1, (wn / 2) as u32)
        } else {
            tma_map(dtype, w, k, n, batch_b, (p.bn / cm) as u32)
        }
    };
    let map_b = map_of(b, n)?;
    let mut maps = [map_b; SEGS];
    let mut seg_tiles = [0i32; SEGS + 1];
    let (mut seg_n, mut seg_c) = ([0i64; SEGS], [0u64; SEGS]);
    match ops {
        Operands::Gated(wu) => {
            maps[1] = map_of(wu, n)?;
            (seg_n, seg_c) = ([n as i64; SEGS], [c; SEGS]);
            seg_tiles[1..].fill(p.n_tiles as i32);
        }
        _ => {
            let mut first = 0;
            for (i, &(w, c, n)) in parts.iter().enumerate() {
                if i > 0 {
                    maps[i] = map_of(w, n)?;
                }
                (seg_n[i], seg_c[i], seg_tiles[i]) = (n as i64, c, first as i32);
                first += n.div_ceil(p.bn);
            }
            seg_tiles[parts.len()..].fill(first as i32);
            if first != p.n_tiles {
                return Err(Error::Unsupported("gemm_sm90p: the segments' tiles are not the plan's".into()));
            }
        }
    }
    let segs = if gated { 2 } else { parts.len() };
    let (p, clusters) = if p.persistent {
        let cap = max_clusters(stream, &f, &name, p.cluster, smem)?;
        let cap = knobs.grid.map_or(cap, |g| (g / p.cluster).max(1));
        // (With stream-K, units >= cap: every cluster runs, taking ranges 0, 1, ... in order.)
        let p = p.with_clusters(cap);
        (p, p.units.min(cap))
    } else {
        (p, p.units)
    };
    let grid = (clusters * p.cluster) as u32;
    // Split-K / stream-K: one u32 counter per split tile, zero at launch and left at zero by the
    // kernel: the stream's ticket counters (no memset node between the kernels, which would
    // break their programmatic overlap), else zeroed at the start of the workspace; then the
    // f32 partials. The workspace is the stream's (launch/scratch.rs: no allocation and free
    // nodes around each launch in a captured step), else the launch's own.
    let (split_tiles, parts) = p.split_tiles();
    let tickets = if split_tiles > 0 { super::tickets::for_stream(stream, split_tiles)? } else { None };
    let counters_bytes = if tickets.is_some() { 0 } else { (split_tiles * 4).div_ceil(256) * 256 };
    let ws_bytes = if split_tiles > 0 { counters_bytes + split_tiles * parts * p.bm * p.bn * 4 } else { 0 };
    let shared = if ws_bytes > 0 { super::scratch::for_stream(stream, ws_bytes)? } else { None };
    let owned = ws_bytes > 0 && shared.is_none();
    let ws = match shared {
        Some(ws) => ws,
        // SAFETY: stream-ordered allocation, freed below on the same stream after the launch.
        None if owned => {
            unsafe { result::malloc_async(stream.cu_stream(), ws_bytes) }.map_err(Error::driver("cuMemAllocAsync"))?
        }
        None => 0,
    };
    if counters_bytes > 0 {
        // SAFETY: the counters lie at the start of the workspace, which holds ws_bytes.
        if let Err(e) = unsafe { result::memset_d8_async(ws, 0, counters_bytes, stream.cu_stream()) } {
            if owned {
                // SAFETY: allocated above on this stream, not used by any launch.
                let _ = unsafe { result::free_async(ws, stream.cu_stream()) };
            }
            return Err(Error::driver("cuMemsetD8Async")(e));
        }
    }
    // The kernel waits for the previous grid when args.pdl is set (the launch's attribute). Not
    // for the f32-output kernels: qmatmul_sm90 launches them right after its own dequantize and
    // cast kernels, which never let a dependent start early (measured: batch-64 decode of a
    // Q4_1 SmolLM2 2% slower with it, a bf16 Llama-3.2-1B 2.8% faster).
    let pdl = if out.f32 {
        super::pdl::Pdl::OFF
    } else {
        super::pdl::Pdl::of(family(dtype), &name, Some(max_tuning::Knob::GemmPdl))
    };
    let mut args = GemmPArgs {
        c,
        ws: if ws != 0 { ws + counters_bytes as u64 } else { 0 },
        counters: tickets.unwrap_or(ws),
        m: rows_a as i64,
        n: n as i64,
        stride_c: (rows_a * n) as i64,
        k_tiles: p.k_tiles as i32,
        splits: p.splits as i32,
        k_per_split: p.k_per_split as i32,
        m_tiles: p.m_tiles as i32,
        n_tiles: p.n_tiles as i32,
        group: p.group as i32,
        units: p.units as i32,
        dp_units: p.dp_units as i32,
        pairs: pairs as i32,
        sk_len: p.sk_len as i32,
        sk_tiles: p.sk_tiles as i32,
        sk_stride: p.sk_stride as i32,
        cn: p.cluster_n as i32,
        ldc: out.ldc as i32,
        pdl: pdl.on() as i32,
        early_b: (pdl.on() && b_constant && !n_major && knobs.early_b.unwrap_or(true)) as i32,
        segs: segs as i32,
        seg_tiles,
        seg_n,
        seg_c,
        epi: *epi,
    };
    let mut map_a = map_a;
    let mut params: [*mut std::ffi::c_void; 3] = [
        &mut map_a as *mut TmaMap as *mut _,
        &mut maps as *mut [TmaMap; SEGS] as *mut _,
        &mut args as *mut GemmPArgs as *mut _,
    ];
    // SAFETY: the parameters match the kernel's (TmaMap, TmaMaps, GemmPArgs) by value and live
    // across the call (the driver copies them); the maps describe live allocations, C holds
    // z batches of rows_a x n, the workspace covers every tile's partials and counter; under
    // PDL the kernel waits (args.pdl) before it touches global memory, except B's first stages
    // with args.early_b, set only for a B that no kernel writes (`b_constant`).
    let launched = unsafe {
        super::launch_ex_cluster(stream, &f, (grid, THREADS, smem), &mut params, pdl, p.cluster as u32, LAUNCH)
    };
    if owned {
        // SAFETY: allocated above on this stream; freed after the kernel that uses it.
        let _ = unsafe { result::free_async(ws, stream.cu_stream()) };
    }
    if launched.is_ok() {
        super::record::record("gemm_sm90p", || {
            let fields = vec![
                ("bm", p.bm as i64),
                ("bn", p.bn as i64),
                ("cluster", p.cluster as i64),
                ("cluster_n", p.cluster_n as i64),
                ("splits", p.splits as i64),
                ("persistent", p.persistent as i64),
                ("tail", p.tail as i64),
                ("group", p.group as i64),
                ("sk_len", p.sk_len as i64),
                ("staged", staged as i64),
                ("n_major", n_major as i64),
                ("f32", out.f32 as i64),
                ("grid", grid as i64),
                ("pdl", pdl.on() as i64),
                ("early_b", args.early_b as i64),
                ("segs", segs as i64),
                ("gated", gated as i64),
            ];
            (name.clone(), fields)
        });
    }
    launched
}

#[cfg(test)]
#[path = "gemm_sm90p/launch_tests.rs"]
mod tests;
