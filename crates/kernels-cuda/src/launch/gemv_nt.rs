//! Launching the W^T products of kernels/gemv_nt.cu (`skinny_nt_*`): C [m, n] =
//! epilogue(A [m, k] @ W^T) with W [n, k] row-major, the layout a linear layer's weight is
//! stored in, for the one to four rows of a decode step. A warp per 1-4 rows of W reads them whole, so
//! nothing is split over K and no workspace is needed. [`plan`] is pure and picks the kernel;
//! the launch takes two rows of W per warp for one row of A whose blocks would spill a little
//! past one wave of resident blocks (an H200, the Llama-3-8B shape's q, k and v at batch 1:
//! 1,536 blocks of one row where 1,188 of the folded-norm kernel fit; decode 207.4 -> 212.9
//! tok/s, Llama-3.2-1B unchanged).
//! Plain products whose blocks fill at most half a wave take K split over 2 or 4 warps per row
//! (`_ks`, [`plan_ks`]): an H200's SMs hold 40 warps of the one-row kernel, and a product of
//! 2,048 rows (Llama-3.2-1B's down projection) gave them 16, too few loads in flight.
//! A launch may also fold in the RMSNorm of A's rows and the gated MLP's `act(gate) * up`
//! ([`Fusion`]), which saves a decoder layer's norm, up and mul launches, and at one row the
//! decode step's rope + KV-cache store into its q/k/v products ([`NtRope`]), which saves the
//! rope_kv_store launch between them and the attention.

use std::sync::Arc;

use cudarc::driver::{CudaStream, DeviceRepr, LaunchConfig};
use max_graph::DType;
use max_graph::ops::reduction::RmsNormParams;

use super::epilogue::Epilogue;
use super::gemm_skinny::short_name;
use crate::sources::GEMV_NT;
use crate::{Error, Result, function};

/// Most rows of A the kernels take. At 8 rows the CUDA cores' FMAs and conversions, not the
/// weight stream, bound a SIMT kernel (an H200: 48 us for Llama-3.2-1B's gate/up at 8 rows
/// against 15 at one); more rows go to the tensor cores.
pub const MAX_M: usize = 4;
/// Most weights one launch multiplies A by: the kernel's NT_SEGS.
pub const SEGS: usize = 4;
/// Warps per block: the kernel's NT_WARPS (each owns as many rows of W as A has rows, rounded
/// up to a power of two).
const WARPS: usize = 4;

#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct NtArgs {
    a: u64,
    m: i64,
    k: i64,
    segs: i64,
    w: [u64; SEGS],
    c: [u64; SEGS],
    n: [i64; SEGS],
    first: [i64; SEGS + 1],
    epi: Epilogue,
    gamma: u64,
    eps: f32,
    offset: f32,
    mbc: i32,
    pad: i32,
    rope: NtRope,
}
// SAFETY: plain-old-data with the layout of the kernel's `NtArgs`.
unsafe impl DeviceRepr for NtArgs {}

/// The RMSNorm folded into a launch: A's rows are normalised with the weight at `gamma` (K
/// values of A's dtype) before the products, as the rms_norm op with `params` would.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NormPrologue {
    pub gamma: u64,
    pub params: RmsNormParams,
    /// The products of `A * gamma` scaled by each row's 1 / rms at the end (`_postnorm`: one
    /// pass over A, for long rows; 16-bit types) instead of a first pass that normalises A's
    /// rows exactly as the rms_norm kernel rounds them (`_norm`).
    pub post: bool,
}

/// The decode step's rope + KV-cache store folded into one row's q/k/v products of a 16-bit type (the kernel's
/// `NtRope`, `_rope`): the three parts' sums are stored as rope_kv_store stores them, q's
/// rotated into `q_out` [1, q rows], k's rotated and v's as they are into `layer` of the paged
/// cache `blocks` [pages, 2, layers, page_size, kv rows] at the token's slot (`slots`, u32); the
/// rotation of the first `rot` dims of each `dim`-row head at the token's position (`pos`, u32)
/// from the table `freqs` [npos, rot] of (cos, sin) pairs (f32 when `freqs_f32`, else the
/// activations' type), in halves (neox) or adjacent pairs (`interleaved`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NtRope {
    pub q_out: u64,
    pub blocks: u64,
    pub slots: u64,
    pub freqs: u64,
    pub pos: u64,
    pub npos: i64,
    pub page_size: i64,
    pub layers: i64,
    pub pages: i64,
    pub layer: i64,
    pub dim: i32,
    pub rot: i32,
    pub freqs_f32: i32,
    pub interleaved: i32,
}

impl NtRope {
    /// The rope with table `freqs` ([npos, rot] of (cos, sin) pairs; f32 when `freqs_f32`, else
    /// the activations' type) at the token's position (`positions`, u32), q into `q_out`, k and v
    /// into the cache `blocks` of `layout` at the token's slot (`slots`, u32), as
    /// qgemv_fold.rs's `QRope::new` takes them; rotating adjacent pairs when `interleaved`.
    pub fn new(
        (q_out, blocks, slots, freqs, positions): (u64, u64, u64, u64, u64),
        layout: &max_graph::ops::attention::CacheLayout,
        layer: usize,
        (npos, rot, freqs_f32): (usize, usize, bool),
        interleaved: bool,
    ) -> NtRope {
        NtRope {
            q_out,
            blocks,
            slots,
            freqs,
            pos: positions,
            npos: npos as i64,
            page_size: layout.page_size as i64,
            layers: layout.layers as i64,
            pages: layout.pages as i64,
            layer: layer as i64,
            dim: layout.head_dim as i32,
            rot: rot as i32,
            freqs_f32: freqs_f32 as i32,
            interleaved: interleaved as i32,
        }
    }
}

/// What a launch computes besides the plain products (all optional).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Fusion {
    pub norm: Option<NormPrologue>,
    /// The up weight of a gated product: one part (W_gate, C, n) gives `C = act(A @ W_gate^T) *
    /// (A @ W_up^T)` with the epilogue's activation (and nothing else) on the gate.
    pub gated_up: Option<u64>,
    /// The rope + KV-cache store of three parts q, k, v at one row (identity epilogue).
    pub rope: Option<NtRope>,
}

/// The kernel and grid for one launch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub kernel: String,
    /// The first block of each segment, then the total.
    pub first: Vec<usize>,
    pub threads: u32,
}

/// The plan for C_s [m, n_s] = A [m, k] @ W_s^T, W_s [n_s, k], for the weights at `ws` with
/// `ns` rows each (one launch), or None when these kernels do not take it (another dtype, more
/// than [`MAX_M`] rows, more than [`SEGS`] weights, an empty or too large grid, a gated
/// product of more than one part).
pub fn plan(dtype: DType, m: usize, ns: &[usize], k: usize, a: u64, ws: &[u64], fusion: &Fusion) -> Option<Plan> {
    plan_rows(dtype, m, ns, k, a, ws, fusion, 1)
}

/// [`plan`] with at least `min_mr` rows of W per warp (the kernel's MR).
#[allow(clippy::too_many_arguments)]
fn plan_rows(
    dtype: DType,
    m: usize,
    ns: &[usize],
    k: usize,
    a: u64,
    ws: &[u64],
    fusion: &Fusion,
    min_mr: usize,
) -> Option<Plan> {
    let name = short_name(dtype)?;
    if m == 0 || m > MAX_M || k == 0 || ns.is_empty() || ns.len() > SEGS || ns.len() != ws.len() || ns.contains(&0) {
        return None;
    }
    if fusion.gated_up.is_some() && ns.len() != 1 {
        return None;
    }
    if let Some(r) = &fusion.rope {
        // one row of three parts of whole heads, pairs of whole rotary dims
        let (dim, rot) = (r.dim as usize, r.rot as usize);
        let heads = |n: usize| dim > 0 && n.is_multiple_of(dim);
        // (16-bit types: f32 products read their weights transposed, gemm_skinny.cu)
        let one = m == 1 && min_mr == 1 && dtype.size_in_bytes() == 2;
        // (k and v: rows of the cache alike)
        let kv = ns.len() == 3 && ns[1] == ns[2];
        if !one || !kv || fusion.gated_up.is_some() || !ns.iter().all(|&n| heads(n)) {
            return None;
        }
        if !dim.is_multiple_of(2) || !rot.is_multiple_of(2) || rot == 0 || rot > dim {
            return None;
        }
    }
    let elem = dtype.size_in_bytes();
    let extra = fusion.norm.map_or(0, |n| n.gamma) | fusion.gated_up.unwrap_or(0);
    let aligned = ws.iter().fold(a | extra, |acc, w| acc | w) % 16 == 0;
    let vec = k.is_multiple_of(16 / elem) && aligned;
    let mr = m.next_power_of_two().max(min_mr);
    if fusion.rope.is_some() && !vec {
        return None;
    }
    // rows of W per warp: the kernel's R (_rope: a pair of rows per warp)
    let first = match fusion.rope {
        Some(_) => block_ranges(&ns.iter().map(|n| n / 2).collect::<Vec<_>>(), WARPS)?,
        None => block_ranges(ns, WARPS * mr)?,
    };
    let kind = if vec { "vec" } else { "any" };
    let norm = match fusion.norm {
        Some(n) if n.post && elem == 2 => "_postnorm",
        Some(_) => "_norm",
        None => "",
    };
    let gated = if fusion.gated_up.is_some() { "_gated" } else { "" };
    let rope = if fusion.rope.is_some() { "_rope" } else { "" };
    Some(Plan {
        kernel: format!("skinny_nt_{name}_m{mr}_{kind}{norm}{gated}{rope}"),
        first,
        threads: (WARPS * 32) as u32,
    })
}

/// The first block of each segment of `ns` rows, `rows_per_block` a block, then the total;
/// None past an i32 grid.
fn block_ranges(ns: &[usize], rows_per_block: usize) -> Option<Vec<usize>> {
    let mut first = vec![0usize];
    for &n in ns {
        first.push(first.last()? + n.div_ceil(rows_per_block));
    }
    (*first.last()? <= i32::MAX as usize).then_some(first)
}

/// `base` (a plain `vec` plan of one row of a 16-bit A) with K split over `ks` warps per row
/// (`_ks<ks>`: a block's warps take WARPS / ks rows of W), or None when K's 512-byte steps
/// over `ks` (rounded down) are fewer than [`KS_MIN_STEPS`] or the grid is too large.
pub fn plan_ks(base: &Plan, dtype: DType, ns: &[usize], k: usize, ks: usize) -> Option<Plan> {
    if !base.kernel.ends_with("_m1_vec") || !matches!(ks, 2 | 4) || dtype.size_in_bytes() != 2 {
        return None;
    }
    let steps = k.div_ceil(512 / dtype.size_in_bytes());
    if steps / ks < KS_MIN_STEPS {
        return None;
    }
    let first = block_ranges(ns, WARPS / ks)?;
    Some(Plan { kernel: format!("{}_ks{ks}", base.kernel), first, threads: base.threads })
}

/// The fewest steps of K (512 bytes of each row) a `_ks` part takes: one group of a warp's loads.
const KS_MIN_STEPS: usize = 4;

/// The per-segment arrays of a GEMV launch's arguments (gemv_nt.cu's and gemv_mma.cu's): each
/// part's weight, output and rows, a gated pair's up weight as the second weight, and the first
/// block (or tile) of each segment, then the total.
pub(super) struct Segments {
    pub w: [u64; SEGS],
    pub c: [u64; SEGS],
    pub n: [i64; SEGS],
    pub first: [i64; SEGS + 1],
}

impl Segments {
    /// `parts` (weight, output, rows; at most [`SEGS`]) with `gated_up`, and `first` from a plan.
    pub(super) fn new(parts: &[(u64, u64, usize)], gated_up: Option<u64>, first: &[usize]) -> Segments {
        let mut s = Segments { w: [0; SEGS], c: [0; SEGS], n: [0; SEGS], first: [0; SEGS + 1] };
        for (i, &(w, c, n)) in parts.iter().enumerate().take(SEGS) {
            (s.w[i], s.c[i], s.n[i]) = (w, c, n as i64);
        }
        if let Some(up) = gated_up {
            s.w[1] = up;
        }
        for (f, &b) in s.first.iter_mut().zip(first) {
            *f = b as i64;
        }
        s
    }
}

/// Every kernel [`plan`] can name, with its argument size.
pub fn kernels() -> Vec<(crate::sources::Family, String, usize)> {
    let mut all = vec![];
    for dtype in ["bf16", "f16", "f32"] {
        for mr in [1, 2, 4] {
            for kind in ["vec", "any"] {
                let post: &[&str] = if dtype == "f32" { &[] } else { &["_postnorm", "_postnorm_gated"] };
                for fused in ["", "_norm", "_gated", "_norm_gated"].iter().chain(post) {
                    all.push((GEMV_NT, format!("skinny_nt_{dtype}_m{mr}_{kind}{fused}"), size_of::<NtArgs>()));
                }
                if kind == "vec" && mr == 1 && dtype != "f32" {
                    for ks in [2, 4] {
                        all.push((GEMV_NT, format!("skinny_nt_{dtype}_m1_vec_ks{ks}"), size_of::<NtArgs>()));
                    }
                }
                if kind == "vec" && mr == 1 && dtype != "f32" {
                    for norm in ["", "_norm", "_postnorm"] {
                        all.push((GEMV_NT, format!("skinny_nt_{dtype}_m1_vec{norm}_rope"), size_of::<NtArgs>()));
                    }
                }
            }
        }
    }
    all
}

/// Waves of resident blocks past which a launch keeps the L1 (see [`wide_carveout`]).
const WIDE_WAVES: usize = 4;

/// The launch's own carveout: 0 (all L1) for a grid of more than [`WIDE_WAVES`] waves of
/// `resident()` blocks (whatever its rows) of a `kernel` whose function asks for all of the
/// shared memory (`launch.smem_carveout`: every kernel under `shared`, the one-row ones under
/// `one_row`), else the function's. Such a product (a vocabulary
/// projection) runs its blocks in many generations, and each block's warps read A through L1
/// again; with the L1 that the shared carveout leaves (28 KiB of an H200's 256), an H200 ran
/// Llama-3.2-1B's 128,256 x 2,048 at one row in 145.9 us instead of 129.6 (8B's x 4,096: 266.3
/// against 251.5), while the layers' products ran alike. Its neighbours in a decode step are
/// small kernels: it loses nothing by not sharing their SMs.
fn wide_carveout(
    tuning: &max_tuning::Tuning,
    kernel: &str,
    blocks: usize,
    resident: impl FnOnce() -> usize,
) -> Option<u32> {
    let l1 = crate::modules::l1_carveout(tuning, &GEMV_NT, kernel)?;
    (blocks > WIDE_WAVES.saturating_mul(resident())).then_some(l1)
}

/// Runs C_s = epilogue(A @ W_s^T) for each (W_s, C_s, n_s) of `parts` in one launch (see
/// [`plan`]); `Unsupported` when no kernel takes it. A bias or residual in `epi` is indexed as
/// for the first part: pass one part with them. `weights_constant`: no kernel writes the
/// weights, so the launch may go under PDL (the kernels read weights before the wait).
pub fn gemv_nt(
    stream: &Arc<CudaStream>,
    dtype: DType,
    a: u64,
    parts: &[(u64, u64, usize)],
    (m, k): (usize, usize),
    epi: &Epilogue,
    fusion: &Fusion,
    weights_constant: bool,
) -> Result<()> {
    let ns: Vec<usize> = parts.iter().map(|p| p.2).collect();
    let ws: Vec<u64> = parts.iter().map(|p| p.0).collect();
    if fusion.rope.is_some() && !epi.is_identity() {
        return Err(Error::Unsupported("gemv_nt: a folded rope + store takes the plain products".into()));
    }
    let p = plan(dtype, m, &ns, k, a, &ws, fusion)
        .ok_or_else(|| Error::Unsupported(format!("gemv_nt: no kernel for {dtype} with m={m}, n={ns:?}, k={k}")))?;
    let mut f = function(stream.context(), &GEMV_NT, &p.kernel)?;
    let mut p = p;
    if m == 1 {
        // One row whose blocks spill a little past one wave of resident blocks: two rows of W
        // per warp (half the blocks) where those fit in one wave, rather than a short second one.
        // (a heuristic: where the device cannot say how many blocks fit, the plan stays)
        let blocks = *p.first.last().unwrap_or(&0);
        if blocks > super::resident_blocks(stream, &f, &p.kernel, (WARPS * 32) as u32, 0).unwrap_or(usize::MAX)
            && let Some(p2) = plan_rows(dtype, m, &ns, k, a, &ws, fusion, 2)
        {
            let f2 = function(stream.context(), &GEMV_NT, &p2.kernel)?;
            if *p2.first.last().unwrap_or(&0)
                <= super::resident_blocks(stream, &f2, &p2.kernel, (WARPS * 32) as u32, 0).unwrap_or(0)
            {
                (p, f) = (p2, f2);
            }
        }
    }
    let t = max_tuning::current();
    if *fusion == Fusion::default() && !t.batch_invariant() {
        // Few rows of long K: the most warps per row whose blocks still fit in one wave (or
        // `gemv_nt.split_k`). Batch-invariant numerics keep one warp per row: the split changes
        // the order of a row's sums.
        let chosen = t.int(max_tuning::Knob::GemvNtSplitK);
        let blocks = *p.first.last().unwrap_or(&0);
        let wave = super::resident_blocks(stream, &f, &p.kernel, (WARPS * 32) as u32, 0).unwrap_or(0);
        for ks in chosen.map_or(vec![4, 2], |c| vec![c]) {
            let Some(p2) = plan_ks(&p, dtype, &ns, k, ks) else { continue };
            if chosen.is_none() && blocks * ks > wave {
                continue;
            }
            let f2 = function(stream.context(), &GEMV_NT, &p2.kernel)?;
            if chosen.is_some()
                || *p2.first.last().unwrap_or(&0)
                    <= super::resident_blocks(stream, &f2, &p2.kernel, (WARPS * 32) as u32, 0).unwrap_or(0)
            {
                (p, f) = (p2, f2);
                break;
            }
        }
    }
    let seg = Segments::new(parts, fusion.gated_up, &p.first);
    let mut args = NtArgs {
        a,
        m: m as i64,
        k: k as i64,
        segs: parts.len() as i64,
        w: seg.w,
        c: seg.c,
        n: seg.n,
        first: seg.first,
        epi: *epi,
        gamma: 0,
        eps: 0.0,
        offset: 0.0,
        mbc: 0,
        pad: 0,
        rope: fusion.rope.unwrap_or_default(),
    };
    if let Some(norm) = fusion.norm {
        args.gamma = norm.gamma;
        // f32 as the rms_norm kernel computes it (NormArgs converts them the same way)
        args.eps = norm.params.epsilon as f32;
        args.offset = norm.params.weight_offset as f32;
        args.mbc = norm.params.multiply_before_cast as i32;
    }
    let blocks = *p.first.last().unwrap_or(&0) as u32;
    let cfg = LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (p.threads, 1, 1), shared_mem_bytes: 0 };
    let carveout = wide_carveout(&t, &p.kernel, blocks as usize, || {
        super::resident_blocks(stream, &f, &p.kernel, (WARPS * 32) as u32, 0).unwrap_or(usize::MAX)
    });
    // SAFETY: the argument struct matches the kernel's; A holds m x k, each W_s n_s x k and
    // each C_s m x n_s elements of `dtype` (the caller's contract); every skinny_nt kernel
    // waits (griddepcontrol.wait) before it reads A or writes C, and reads W before it only
    // under PDL with constant weights.
    let pdl = unsafe {
        let what = "cuLaunchKernelEx(gemv_nt)";
        let early = (weights_constant, carveout);
        super::pdl::launch_weights_early(stream, (&GEMV_NT, &p.kernel, &f), cfg, &args, early, what)
    }?;
    super::record::record("gemv_nt", || {
        let rope = fusion.rope.is_some() as i64;
        (
            p.kernel.clone(),
            vec![("blocks", blocks as i64), ("segs", parts.len() as i64), ("pdl", pdl as i64), ("rope", rope)],
        )
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONE: Fusion = Fusion { norm: None, gated_up: None, rope: None };

    #[test]
    fn only_grids_of_many_waves_keep_the_l1_and_only_where_the_function_asks_for_the_shared_memory() {
        let shared = max_tuning::Tuning::parse("launch.smem_carveout=shared").unwrap();
        let one_row = max_tuning::Tuning::parse("").unwrap();
        let driver = max_tuning::Tuning::parse("launch.smem_carveout=driver").unwrap();
        let (m1, m2) = ("skinny_nt_bf16_m1_vec_postnorm", "skinny_nt_bf16_m2_any");
        // Llama-3.2-1B's vocabulary projection at one row: 32,064 blocks of 4 warps
        assert_eq!(wide_carveout(&shared, m1, 32_064, || 2_112), Some(0));
        assert_eq!(wide_carveout(&one_row, m1, 32_064, || 2_112), Some(0));
        assert_eq!(wide_carveout(&shared, m2, 32_064, || 2_112), Some(0));
        assert_eq!(wide_carveout(&one_row, m2, 32_064, || 2_112), None);
        assert_eq!(wide_carveout(&shared, m1, 4 * 2_112, || 2_112), None);
        assert_eq!(wide_carveout(&shared, m1, 3_584, || 2_112), None);
        assert_eq!(wide_carveout(&driver, m1, 32_064, || 2_112), None);
        // a device that cannot say how many blocks fit
        assert_eq!(wide_carveout(&shared, m1, 32_064, || usize::MAX), None);
    }

    #[test]
    fn a_rope_from_the_store_call_carries_its_layout() {
        let layout =
            max_graph::ops::attention::CacheLayout { pages: 9, layers: 3, page_size: 16, kv_heads: 2, head_dim: 64 };
        let r = NtRope::new((1, 2, 3, 4, 5), &layout, 2, (4096, 32, true), false);
        let want = NtRope {
            q_out: 1,
            blocks: 2,
            slots: 3,
            freqs: 4,
            pos: 5,
            npos: 4096,
            page_size: 16,
            layers: 3,
            pages: 9,
            layer: 2,
            dim: 64,
            rot: 32,
            freqs_f32: 1,
            interleaved: 0,
        };
        assert_eq!(r, want);
        assert_eq!(NtRope::new((1, 2, 3, 4, 5), &layout, 2, (4096, 32, false), true).interleaved, 1);
    }

    #[test]
    fn kernels_by_rows_dtype_and_alignment() {
        let p = plan(DType::BFloat16, 1, &[2048], 2048, 0, &[256], &NONE).unwrap();
        assert_eq!((p.kernel.as_str(), p.first.clone(), p.threads), ("skinny_nt_bf16_m1_vec", vec![0, 512], 128));
        assert_eq!(plan(DType::BFloat16, 3, &[10], 2048, 0, &[0], &NONE).unwrap().kernel, "skinny_nt_bf16_m4_vec");
        assert_eq!(plan(DType::BFloat16, 4, &[10], 2048, 0, &[0], &NONE).unwrap().first, vec![0, 1]);
        assert_eq!(plan(DType::BFloat16, 2, &[4096], 2048, 0, &[0], &NONE).unwrap().first, vec![0, 512]);
        // K not a whole number of 16-byte vectors, or a misaligned operand: element loads
        assert_eq!(plan(DType::Float16, 4, &[7], 104, 0, &[0], &NONE).unwrap().kernel, "skinny_nt_f16_m4_vec");
        assert_eq!(plan(DType::Float16, 3, &[7], 101, 0, &[0], &NONE).unwrap().kernel, "skinny_nt_f16_m4_any");
        assert_eq!(plan(DType::Float32, 2, &[7], 64, 4, &[0], &NONE).unwrap().kernel, "skinny_nt_f32_m2_any");
        assert_eq!(plan(DType::Float32, 2, &[7, 9], 64, 0, &[0, 8], &NONE).unwrap().kernel, "skinny_nt_f32_m2_any");
        assert!(plan(DType::BFloat16, 5, &[7], 64, 0, &[0], &NONE).is_none());
        assert!(plan(DType::Int32, 1, &[7], 64, 0, &[0], &NONE).is_none());
        assert!(plan(DType::BFloat16, 1, &[0], 64, 0, &[0], &NONE).is_none());
    }

    #[test]
    fn split_k_plans_share_rows_among_warps() {
        // Llama-3.2-1B's down projection at one row: 512 blocks of a warp per row; K over two
        // warps, 1,024 blocks of two rows each; over four, 2,048 blocks of one row
        let p = plan(DType::BFloat16, 1, &[2048], 8192, 0, &[0], &NONE).unwrap();
        let two = plan_ks(&p, DType::BFloat16, &[2048], 8192, 2).unwrap();
        assert_eq!((two.kernel.as_str(), two.first), ("skinny_nt_bf16_m1_vec_ks2", vec![0, 1024]));
        let four = plan_ks(&p, DType::BFloat16, &[2048], 8192, 4).unwrap();
        assert_eq!((four.kernel.as_str(), four.first), ("skinny_nt_bf16_m1_vec_ks4", vec![0, 2048]));
        // siblings
        let p = plan(DType::Float16, 1, &[100, 30], 4096, 0, &[0, 0], &NONE).unwrap();
        let two = plan_ks(&p, DType::Float16, &[100, 30], 4096, 2).unwrap();
        assert_eq!((two.kernel.as_str(), two.first), ("skinny_nt_f16_m1_vec_ks2", vec![0, 50, 65]));
        // a part needs one group of steps (4 x 512 bytes); more rows of A, f32, element loads
        // and fused forms keep their kernels
        assert!(plan_ks(&p, DType::Float16, &[100, 30], 1024 * 4, 4).is_some());
        assert!(plan_ks(&p, DType::Float16, &[100, 30], 1024 * 4 - 256, 4).is_none());
        assert!(plan_ks(&p, DType::Float16, &[100, 30], 4096, 3).is_none());
        let three = plan(DType::Float16, 3, &[100], 4096, 0, &[0], &NONE).unwrap();
        assert!(plan_ks(&three, DType::Float16, &[100], 4096, 2).is_none());
        let f32 = plan(DType::Float32, 1, &[7], 4096, 0, &[0], &NONE).unwrap();
        assert!(plan_ks(&f32, DType::Float32, &[7], 4096, 2).is_none());
        let any = plan(DType::BFloat16, 1, &[7], 4097, 0, &[0], &NONE).unwrap();
        assert!(plan_ks(&any, DType::BFloat16, &[7], 4097, 2).is_none());
        // a grid past i32::MAX blocks
        let huge = 2_200_000_000usize;
        let p = plan(DType::BFloat16, 1, &[huge], 4096, 0, &[0], &NONE).unwrap();
        assert!(plan_ks(&p, DType::BFloat16, &[huge], 4096, 4).is_none());
        assert_eq!(plan_ks(&p, DType::BFloat16, &[huge], 4096, 2).unwrap().first, vec![0, huge / 2]);
        let params = RmsNormParams { epsilon: 1e-5, weight_offset: 0.0, multiply_before_cast: true };
        let norm = Fusion { norm: Some(NormPrologue { gamma: 64, params, post: false }), gated_up: None, rope: None };
        let normed = plan(DType::BFloat16, 1, &[2048], 8192, 0, &[0], &norm).unwrap();
        assert!(plan_ks(&normed, DType::BFloat16, &[2048], 8192, 2).is_none());
    }

    #[test]
    fn siblings_take_consecutive_block_ranges() {
        // q, k, v of Llama-3.2-1B at one row: a warp per row, 4 rows per block
        let p = plan(DType::BFloat16, 1, &[2048, 512, 512], 2048, 0, &[0, 0, 0], &NONE).unwrap();
        assert_eq!(p.first, vec![0, 512, 640, 768]);
        // partial blocks do not straddle segments
        assert_eq!(plan(DType::BFloat16, 4, &[17, 3], 64, 0, &[0, 0], &NONE).unwrap().first, vec![0, 2, 3]);
        assert!(plan(DType::BFloat16, 1, &[1; 5], 64, 0, &[0; 5], &NONE).is_none());
        assert!(plan(DType::BFloat16, 1, &[1, 1], 64, 0, &[0], &NONE).is_none());
    }

    #[test]
    fn fused_kernels_take_the_norm_and_gate_suffixes() {
        let params = RmsNormParams { epsilon: 1e-5, weight_offset: 0.0, multiply_before_cast: true };
        let norm = Fusion { norm: Some(NormPrologue { gamma: 64, params, post: false }), gated_up: None, rope: None };
        assert_eq!(plan(DType::BFloat16, 1, &[576], 576, 0, &[0], &norm).unwrap().kernel, "skinny_nt_bf16_m1_vec_norm");
        // a misaligned norm weight: element loads
        let odd = Fusion { norm: Some(NormPrologue { gamma: 66, params, post: false }), gated_up: None, rope: None };
        assert_eq!(plan(DType::BFloat16, 2, &[8], 576, 0, &[0], &odd).unwrap().kernel, "skinny_nt_bf16_m2_any_norm");
        let gated =
            Fusion { norm: Some(NormPrologue { gamma: 64, params, post: false }), gated_up: Some(128), rope: None };
        let p = plan(DType::Float32, 3, &[1536], 576, 0, &[0], &gated).unwrap();
        assert_eq!((p.kernel.as_str(), p.first), ("skinny_nt_f32_m4_vec_norm_gated", vec![0, 96]));
        // one gated part per launch
        assert!(plan(DType::BFloat16, 1, &[8, 8], 64, 0, &[0, 0], &gated).is_none());
        // the scale after the products: 16-bit types (f32 keeps the first pass)
        let post =
            |gated_up| Fusion { norm: Some(NormPrologue { gamma: 64, params, post: true }), gated_up, rope: None };
        let name = |d, m, f: &Fusion| plan(d, m, &[4096], 4096, 0, &[0], f).unwrap().kernel;
        assert_eq!(name(DType::BFloat16, 1, &post(None)), "skinny_nt_bf16_m1_vec_postnorm");
        assert_eq!(name(DType::Float16, 3, &post(Some(128))), "skinny_nt_f16_m4_vec_postnorm_gated");
        assert_eq!(name(DType::Float32, 2, &post(None)), "skinny_nt_f32_m2_vec_norm");
    }

    #[test]
    fn a_rope_and_store_fold_into_one_row_of_whole_heads() {
        let rope = NtRope { dim: 64, rot: 64, ..NtRope::default() };
        let fold = Fusion { rope: Some(rope), ..Fusion::default() };
        // Llama-3.2-1B's q, k, v at one row: a warp per pair of rows, 4 pairs per block
        let p = plan(DType::BFloat16, 1, &[2048, 512, 512], 2048, 0, &[0, 0, 0], &fold).unwrap();
        assert_eq!((p.kernel.as_str(), p.first), ("skinny_nt_bf16_m1_vec_rope", vec![0, 256, 320, 384]));
        let params = RmsNormParams { epsilon: 1e-5, weight_offset: 0.0, multiply_before_cast: true };
        let post = Fusion { norm: Some(NormPrologue { gamma: 64, params, post: true }), ..fold };
        let name = |d, f: &Fusion| plan(d, 1, &[256, 128, 128], 576, 0, &[0; 3], f).map(|p| p.kernel);
        assert_eq!(name(DType::BFloat16, &post).as_deref(), Some("skinny_nt_bf16_m1_vec_postnorm_rope"));
        assert_eq!(name(DType::Float16, &post).as_deref(), Some("skinny_nt_f16_m1_vec_postnorm_rope"));
        assert_eq!(name(DType::Float32, &post), None);
        // not taken: two rows, two parts, a part of partial heads, misaligned rows, odd or
        // empty rotations
        assert!(plan(DType::BFloat16, 2, &[256, 128, 128], 576, 0, &[0; 3], &fold).is_none());
        assert!(plan(DType::BFloat16, 1, &[256, 128], 576, 0, &[0; 2], &fold).is_none());
        assert!(plan(DType::BFloat16, 1, &[256, 96, 128], 576, 0, &[0; 3], &fold).is_none());
        assert!(plan(DType::BFloat16, 1, &[256, 128, 64], 576, 0, &[0; 3], &fold).is_none());
        assert!(plan(DType::BFloat16, 1, &[256, 128, 128], 577, 0, &[0; 3], &fold).is_none());
        for rot in [0, 31, 66] {
            let f = Fusion { rope: Some(NtRope { rot, ..rope }), ..Fusion::default() };
            assert!(plan(DType::BFloat16, 1, &[256, 128, 128], 576, 0, &[0; 3], &f).is_none(), "rot {rot}");
        }
        assert!(kernels().iter().any(|k| k.1 == "skinny_nt_f16_m1_vec_postnorm_rope"));
    }
}
