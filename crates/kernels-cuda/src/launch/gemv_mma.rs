//! Launching the tensor-core W^T products of kernels/gemv_mma.cu (`gemv_mma_*`): C [m, n] =
//! epilogue(A [m, k] @ W^T), W [n, k] row-major, for the 2-16 rows of a batched decode step
//! (16-bit types). A warp streams a tile of 16 rows of W into mma.sync; `parts` warps share a
//! tile, each taking every parts-th chunk of K. [`plan`] is pure and picks the kernel and grid.

use std::sync::Arc;

use cudarc::driver::{CudaStream, DeviceRepr, LaunchConfig};
use max_graph::DType;

use super::epilogue::Epilogue;
use super::gemv_nt::Segments;
use crate::sources::GEMV_MMA;
use crate::{Result, function};

/// Most rows of A a launch takes: two mma column tiles of 8.
pub const MAX_M: usize = 16;
/// Most weights one launch multiplies A by: the kernel's GM_SEGS (gemv_nt's too).
pub const SEGS: usize = super::gemv_nt::SEGS;
/// The kernel's GM_WARPS, GM_CHUNK and the blocks an SM holds at once (its launch bounds).
const WARPS: usize = 8;
const CHUNK: usize = 64;
const BLOCKS_PER_SM: usize = 2;
/// Most chunks of K one warp walks where more parts can shorten it (see [`auto_parts`]).
const CHAIN: usize = 16;

#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct GmArgs {
    a: u64,
    m: i64,
    k: i64,
    segs: i64,
    w: [u64; SEGS],
    c: [u64; SEGS],
    n: [i64; SEGS],
    first: [i64; SEGS + 1],
    epi: Epilogue,
    parts: i32,
    pad: i32,
}
// SAFETY: plain-old-data with the layout of the kernel's `GmArgs`.
unsafe impl DeviceRepr for GmArgs {}

/// What besides the problem decides a plan: the `gemv_mma.min_rows` and `gemv_mma.parts` knobs
/// and the device (multiprocessors, compute capability major).
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    pub min_rows: usize,
    pub parts: Option<usize>,
    pub sms: usize,
    pub arch_major: u32,
}

/// The kernel and grid for one launch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub kernel: String,
    /// The first tile of each segment, then the total.
    pub first: Vec<usize>,
    /// Warps per tile (1, 2, 4 or 8).
    pub parts: usize,
    pub blocks: usize,
}

/// Warps per tile for `tiles` tiles over K's `chunks` on `sms` multiprocessors (a power of two
/// up to 8 and up to `chunks`): the most that keeps every warp of the launch resident at once,
/// and at least enough that no warp walks more than [`CHAIN`] chunks. Each warp keeps only a few
/// chunks in flight, so its chain of dependent weight reads, not the memory system, sets the
/// time of a long one (an H200, Llama-3-8B's gate and up at 8 rows as 1,792 tiles of 64 chunks
/// in one part each: slower than the two GEMMs it replaced); past one wave the last warps start
/// late, which costs less. The launch's tiles (its weights' rows), K and the device decide it,
/// never M, so a row's sums do not depend on the other rows of its batch.
fn auto_parts(tiles: usize, chunks: usize, sms: usize) -> usize {
    let slots = sms * BLOCKS_PER_SM * WARPS;
    let mut parts = 8;
    while parts > 1 && (tiles * parts > slots || parts > chunks) {
        parts /= 2;
    }
    while parts < WARPS && chunks.div_ceil(parts) > CHAIN && parts * 2 <= chunks {
        parts *= 2;
    }
    parts
}

/// The plan for C_s [m, n_s] = A [m, k] @ W_s^T for the weights at `ws` with `ns` rows each (one
/// launch; `gated`: one gate part with its up weight at `gated`), or None when these kernels
/// do not take it: a device before sm_80, a dtype other than bf16/f16, rows outside
/// `min_rows..=`[`MAX_M`], K not a multiple of 8, an operand not on 16 bytes, more than [`SEGS`]
/// weights, a gated launch of more than one part, an empty or too large grid. `parts` forces
/// the warps per tile.
#[allow(clippy::too_many_arguments)]
pub fn plan(
    dtype: DType,
    m: usize,
    ns: &[usize],
    k: usize,
    a: u64,
    ws: &[u64],
    gated: Option<u64>,
    s: &Settings,
) -> Option<Plan> {
    let name = match dtype {
        DType::BFloat16 => "bf16",
        DType::Float16 => "f16",
        _ => return None,
    };
    if s.arch_major < 8
        || m < s.min_rows.max(1)
        || m > MAX_M
        || k == 0
        || !k.is_multiple_of(8)
        || ns.is_empty()
        || ns.len() > SEGS
    {
        return None;
    }
    if ns.len() != ws.len() || ns.contains(&0) || (gated.is_some() && ns.len() != 1) {
        return None;
    }
    if ws.iter().fold(a | gated.unwrap_or(0), |acc, w| acc | w) % 16 != 0 {
        return None;
    }
    let rows_per_tile = if gated.is_some() { 8 } else { 16 };
    let mut first = vec![0usize];
    for &n in ns {
        first.push(first.last()? + n.div_ceil(rows_per_tile));
    }
    let tiles = *first.last()?;
    let chunks = k.div_ceil(CHUNK);
    let parts = match s.parts {
        Some(p) if p.is_power_of_two() && p <= WARPS => p,
        _ => auto_parts(tiles, chunks, s.sms.max(1)),
    };
    let blocks = tiles.div_ceil(WARPS / parts);
    if blocks > i32::MAX as usize {
        return None;
    }
    let nt = if m > 8 { 2 } else { 1 };
    let suffix = if gated.is_some() { "_gated" } else { "" };
    Some(Plan { kernel: format!("gemv_mma_{name}_n{nt}{suffix}"), first, parts, blocks })
}

/// Every kernel [`plan`] can name, with its argument size.
pub fn kernels() -> Vec<(crate::sources::Family, String, usize)> {
    let mut all = vec![];
    for dtype in ["bf16", "f16"] {
        for nt in [1, 2] {
            for suffix in ["", "_gated"] {
                all.push((GEMV_MMA, format!("gemv_mma_{dtype}_n{nt}{suffix}"), size_of::<GmArgs>()));
            }
        }
    }
    all
}

/// Runs C_s = epilogue(A @ W_s^T) for each (W_s, C_s, n_s) of `parts` in one launch, or with
/// `gated` (the up weight; one part) C = act(A @ W_gate^T) * (A @ W_up^T), the epilogue's
/// activation on the gate; false (nothing launched) when no kernel takes it (see [`plan`],
/// under the process's knobs). A bias or residual in `epi` is indexed as for the first part.
/// `weights_constant`: no kernel writes the weights, so the launch may go under PDL (the
/// kernels read weights before the wait).
pub fn gemv_mma(
    stream: &Arc<CudaStream>,
    dtype: DType,
    a: u64,
    parts: &[(u64, u64, usize)],
    (m, k): (usize, usize),
    epi: &Epilogue,
    gated: Option<u64>,
    weights_constant: bool,
) -> Result<bool> {
    let t = max_tuning::current();
    let min_rows = t.int(max_tuning::Knob::GemvMmaMinRows).unwrap_or(2);
    if m < min_rows || m > MAX_M {
        return Ok(false); // (before the device queries: most products are not these)
    }
    let s = Settings {
        min_rows,
        parts: t.int(max_tuning::Knob::GemvMmaParts),
        sms: super::sm_count(stream)?,
        arch_major: super::quant::arch_major(stream)?,
    };
    let ns: Vec<usize> = parts.iter().map(|p| p.2).collect();
    let ws: Vec<u64> = parts.iter().map(|p| p.0).collect();
    let Some(p) = plan(dtype, m, &ns, k, a, &ws, gated, &s) else { return Ok(false) };
    let f = function(stream.context(), &GEMV_MMA, &p.kernel)?;
    let seg = Segments::new(parts, gated, &p.first);
    let args = GmArgs {
        a,
        m: m as i64,
        k: k as i64,
        segs: parts.len() as i64,
        w: seg.w,
        c: seg.c,
        n: seg.n,
        first: seg.first,
        epi: *epi,
        parts: p.parts as i32,
        pad: 0,
    };
    let cfg =
        LaunchConfig { grid_dim: (p.blocks as u32, 1, 1), block_dim: ((WARPS * 32) as u32, 1, 1), shared_mem_bytes: 0 };
    // SAFETY: the argument struct matches the kernel's; A holds m x k, each W_s n_s x k and
    // each C_s m x n_s elements of `dtype` (the caller's contract), all 16-byte aligned with k
    // a multiple of 8 (plan); every gemv_mma kernel waits (griddepcontrol.wait) before it reads
    // A or writes C, and reads W before it only under PDL with constant weights.
    // Every warp reads the whole of A (up to 16 rows of K) through L1: under the shared carveout
    // (`launch.smem_carveout=shared`) the launch asks for all of the L1. An H200 ran
    // 16 x 4,096 x 11,008 at 23.8 TFLOP/s with the shared carveout against 34.5 with the
    // driver's; asking for the L1 at the launch got 16 x 4,096 x 4,096 only to 25.9 against 31.6
    // (the reason `shared` is not the default).
    let early = (weights_constant, crate::modules::l1_carveout(&t, &GEMV_MMA, &p.kernel));
    let pdl = unsafe {
        let what = "cuLaunchKernelEx(gemv_mma)";
        super::pdl::launch_weights_early(stream, (&GEMV_MMA, &p.kernel, &f), cfg, &args, early, what)
    }?;
    super::record::record("gemv_mma", || {
        let shape = vec![("blocks", p.blocks as i64), ("parts", p.parts as i64), ("pdl", pdl as i64)];
        (p.kernel.clone(), shape)
    });
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    // (min_rows 5: rows 2-4 below it)
    const AUTO: Settings = Settings { min_rows: 5, parts: None, sms: 132, arch_major: 9 };

    #[test]
    fn kernels_by_rows_and_dtype() {
        let p = plan(DType::BFloat16, 8, &[4096], 4096, 0, &[0], None, &AUTO).unwrap();
        assert_eq!((p.kernel.as_str(), p.first.clone(), p.parts, p.blocks), ("gemv_mma_bf16_n1", vec![0, 256], 8, 256));
        assert_eq!(plan(DType::Float16, 9, &[64], 64, 0, &[0], None, &AUTO).unwrap().kernel, "gemv_mma_f16_n2");
        assert_eq!(
            plan(DType::BFloat16, 16, &[64], 64, 0, &[0], Some(64), &AUTO).unwrap().kernel,
            "gemv_mma_bf16_n2_gated"
        );
        // outside the rows, dtypes, K and alignments the kernels take
        assert!(plan(DType::BFloat16, 4, &[64], 64, 0, &[0], None, &AUTO).is_none());
        assert!(plan(DType::BFloat16, 17, &[64], 64, 0, &[0], None, &AUTO).is_none());
        assert!(plan(DType::Float32, 8, &[64], 64, 0, &[0], None, &AUTO).is_none());
        assert!(plan(DType::BFloat16, 8, &[64], 100, 0, &[0], None, &AUTO).is_none());
        assert!(plan(DType::BFloat16, 8, &[64], 64, 8, &[0], None, &AUTO).is_none());
        assert!(plan(DType::BFloat16, 8, &[64], 64, 0, &[0], Some(72), &AUTO).is_none());
        assert!(plan(DType::BFloat16, 8, &[0], 64, 0, &[0], None, &AUTO).is_none());
        assert!(plan(DType::BFloat16, 8, &[64, 64], 64, 0, &[0, 0], Some(64), &AUTO).is_none());
        // mma.sync bf16 needs sm_80
        assert!(plan(DType::BFloat16, 8, &[64], 64, 0, &[0], None, &Settings { arch_major: 7, ..AUTO }).is_none());
        // the knob's lower bound
        assert_eq!(
            plan(DType::BFloat16, 2, &[64], 64, 0, &[0], None, &Settings { min_rows: 2, ..AUTO }).unwrap().kernel,
            "gemv_mma_bf16_n1"
        );
    }

    #[test]
    fn parts_follow_n_and_k_not_m() {
        // Llama-3-8B's q, k and v: 384 tiles, four parts keep 1,536 warps in one wave
        let qkv = |m| plan(DType::BFloat16, m, &[4096, 1024, 1024], 4096, 0, &[0; 3], None, &AUTO).unwrap();
        assert_eq!((qkv(5).first, qkv(5).parts, qkv(5).blocks), (vec![0, 256, 320, 384], 4, 192));
        assert_eq!(qkv(16).parts, 4);
        // its gate and up: 8 rows of each per tile, 1,792 tiles of 64 chunks: four parts, 16 each
        let gated = plan(DType::BFloat16, 8, &[14336], 4096, 0, &[0], Some(0), &AUTO).unwrap();
        assert_eq!((gated.first, gated.parts, gated.blocks), (vec![0, 1792], 4, 896));
        // its down projection: 256 tiles of 224 chunks, eight parts (28 chunks each)
        assert_eq!(plan(DType::BFloat16, 8, &[4096], 14336, 0, &[0], None, &AUTO).unwrap().parts, 8);
        // never more parts than chunks of 64 columns
        assert_eq!(plan(DType::BFloat16, 8, &[16], 128, 0, &[0], None, &AUTO).unwrap().parts, 2);
        // forced
        assert_eq!(
            plan(DType::BFloat16, 8, &[4096], 4096, 0, &[0], None, &Settings { parts: Some(2), ..AUTO })
                .unwrap()
                .blocks,
            64
        );
    }
}
