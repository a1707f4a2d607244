//! The qgemv launches that serve several products of one lhs, and what they fold around them:
//! sibling qmatmuls in one qgemv.cu (or qgemv_mma.cu) launch, the RMSNorm of the lhs ([`QNorm`])
//! and the gated MLP's `silu(gate) * up` ([`QFold`]); quant.rs re-exports the public names.

use super::*;

/// The RMSNorm folded into a qmatmul's lhs (quant_common.cuh's `QNorm`): the GEMV kernels
/// normalise x's rows as they stage them, rounding as the rms_norm kernel stores its result.
/// `gamma` 0 is no norm.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct QNorm {
    pub(super) gamma: u64,
    eps: f32,
    offset: f32,
    mbc: i32,
    pad: i32,
}

impl QNorm {
    /// The norm with weight `gamma` ([K], the activation's dtype) and rms_norm's options.
    pub fn new(gamma: u64, p: &max_graph::ops::reduction::RmsNormParams) -> QNorm {
        let (eps, offset) = (p.epsilon as f32, p.weight_offset as f32);
        QNorm { gamma, eps, offset, mbc: p.multiply_before_cast as i32, pad: 0 }
    }
}

/// The decode step's rope and KV-cache store folded into the store of a layer's q/k/v products
/// (quant_common.cuh's `QRope`, passes/fuse_qkv_rope_store.rs): the launch's three parts are q,
/// k and v, one token per lhs row; q is stored rotated into `q_out`, k rotated and v as it is
/// into `layer` of the paged cache at each token's slot, as rope_kv_store stores them.
/// Interleaved ropes only. `on` 0: the plain products.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct QRope {
    q_out: u64,
    blocks: u64,
    slots: u64,
    freqs: u64,
    pos: u64,
    npos: i64,
    page_size: i64,
    layers: i64,
    pages: i64,
    layer: i64,
    dim: i32,
    rot: i32,
    freqs_f32: i32,
    on: i32,
}

impl QRope {
    /// The rope with table `freqs` ([npos, rot] of (cos, sin) pairs; f32 when `freqs_f32`, else
    /// the activations' type) at each token's position (`positions`, u32), q into `q_out`, k and
    /// v into the cache `blocks` of `layout` at each token's slot (`slots`, u32).
    pub fn new(
        (q_out, blocks, slots, freqs, positions): (u64, u64, u64, u64, u64),
        layout: &max_graph::ops::attention::CacheLayout,
        layer: usize,
        (npos, rot, freqs_f32): (usize, usize, bool),
    ) -> QRope {
        QRope {
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
            on: 1,
        }
    }

    /// Whether the rope and store are folded in.
    pub fn on(&self) -> bool {
        self.on != 0
    }
}

/// What a decode GEMV launch folds around its products: an RMSNorm of the lhs ([`QNorm`]), the
/// gated MLP's `silu(gate) * up` (two parts, gate then up, of equal rows, stored into the
/// first part's output) and the rope + KV-cache store of q/k/v ([`QRope`]); and whether the
/// weights are constants.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct QFold {
    pub norm: QNorm,
    pub gated: bool,
    pub rope: QRope,
    /// No kernel of the program writes the weights (the engine's `const_weights`): under PDL
    /// the GEMVs may copy their first stages of them before they wait for the previous kernel
    /// (`qgemv.early_weights`).
    pub consts: bool,
}

/// Products of one lhs that one qgemv.cu launch serves at most (QV_SEGS).
pub const QV_SEGS: usize = 4;

/// The segments of a qgemv.cu launch: weights, output and rows of each, and its first block.
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct QvSegs {
    w: [u64; QV_SEGS],
    out: [u64; QV_SEGS],
    res: [u64; QV_SEGS],
    n: [i64; QV_SEGS],
    first: [i32; QV_SEGS],
    count: i32,
    /// The first stages' weight copies before griddepcontrol.wait (set by `launch_qv`).
    pub(super) early: i32,
    norm: QNorm,
    gated: i32,
    pad2: i32,
    rope: QRope,
}
// SAFETY: plain-old-data with the layout of qgemv.cu's `QvSegs`.
unsafe impl cudarc::driver::DeviceRepr for QvSegs {}

impl QvSegs {
    /// Segments for `parts` (weights, output, rows); `res` is added to the first's result;
    /// `norm` normalises the lhs.
    pub(super) fn new(parts: &[(u64, u64, usize)], res: u64, norm: QNorm) -> QvSegs {
        let mut s = QvSegs {
            w: [0; QV_SEGS],
            out: [0; QV_SEGS],
            res: [res, 0, 0, 0],
            n: [0; QV_SEGS],
            first: [0; QV_SEGS],
            count: 0,
            early: 0,
            norm,
            gated: 0,
            pad2: 0,
            rope: QRope::default(),
        };
        let mut first = 0usize;
        for (i, &(w, out, n)) in parts.iter().take(QV_SEGS).enumerate() {
            (s.w[i], s.out[i], s.n[i], s.first[i]) = (w, out, n as i64, first as i32);
            first += n.div_ceil(QV_ROWS_PER_BLOCK);
        }
        s.count = parts.len().min(QV_SEGS) as i32;
        s
    }
}

/// Whether every part `(w, out, n)` (n > 0) of `base`'s product takes `path`, each in a launch of
/// `rows` weight rows (the size rules of a launch of all of them), or of its own n (None).
fn all_take(
    base: &QProblem,
    parts: &[(u64, u64, usize)],
    rows: Option<usize>,
    path: QPath,
    arch: u32,
    t: &max_tuning::Tuning,
) -> bool {
    parts.iter().all(|&(w, _, n)| n > 0 && select_path(&QProblem { n: rows.unwrap_or(n), w, ..*base }, arch, t) == path)
}

/// Sibling qmatmuls: `lhs` [m, k] of `dtype` times each part's weights (`n` rows of
/// `row_bytes`, one encoding) into its own output [m, n] of `dtype`. One qgemv_mma.cu or
/// qgemv.cu launch serves them all when that is the kernel each of them would take; otherwise
/// each runs as [`qmatmul`] does.
pub fn qmatmul_siblings(
    stream: &Arc<CudaStream>,
    enc: Encoding,
    dtype: DType,
    lhs: u64,
    parts: &[(u64, u64, usize)],
    (m, k, row_bytes): (usize, usize, usize),
    consts: bool,
) -> Result<()> {
    let tuning = max_tuning::current();
    let arch = arch_major(stream)?;
    let t = &tuning;
    let plain = QFold { consts, ..QFold::default() };
    // The tensor-core launch: each part's weights as a launch of all of them sees it (the size
    // rule reads the total); the general one: where each part alone would take that kernel.
    let total: usize = parts.iter().map(|p| p.2).sum();
    let base = QProblem { enc, m, n: 0, k, row_bytes, lhs, w: 0 };
    let takes = |path: QPath, all: bool| all_take(&base, parts, all.then_some(total), path, arch, t);
    if m > 0 && k > 0 && (2..=QM_SEGS).contains(&parts.len()) && takes(QPath::Mma, true) && total < i32::MAX as usize {
        return qgemv_mma(stream, enc, dtype, lhs, parts, 0, plain, (m, k, row_bytes), &tuning);
    }
    // Rows where each part takes qgemm_sm90.cu in a launch of all of them (the size rules read
    // the total, as for the tensor-core GEMV): one launch (and one bf16 lhs) for all.
    if (2..=super::super::qgemm_sm90::SEGS).contains(&parts.len()) && takes(QPath::Qgemm, true) {
        return super::super::qgemm_sm90::qgemm(stream, enc, dtype, lhs, parts, 0, false, (m, k, row_bytes));
    }
    let groups: usize = parts.iter().map(|p| p.2.div_ceil(QV_ROWS_PER_BLOCK)).sum();
    // (a part of small weights that the Q8_0 tile kernel takes alone, under `qgemv.mma`, runs in
    // the general kernel's launch of all of them, as before that kernel; large ones streamed
    // alone before it and take it alone now)
    let general = parts.iter().all(|&(w, _, n)| {
        n > 0
            && match select_path(&QProblem { n, w, ..base }, arch, t) {
                QPath::General => true,
                QPath::MmaTile => n.saturating_mul(k) < SMALL_WEIGHTS,
                _ => false,
            }
    });
    if m == 0 || k == 0 || parts.len() < 2 || parts.len() > QV_SEGS || !general || groups > i32::MAX as usize {
        for &(w, out, n) in parts {
            qmatmul(stream, enc, dtype, (lhs, w, out), (m, n, k, row_bytes), consts)?;
        }
        return Ok(());
    }
    // (more than GEMV_MAX_ROWS rows only batch-invariant)
    row_groups(dtype, k, lhs, parts, 0, m, GEMV_MAX_ROWS, |lhs, parts, _, rows| {
        qgemv_segments(stream, enc, dtype, lhs, parts, plain, (rows, k, row_bytes))
    })
}

/// One qgemv.cu launch for the sibling `parts` (2..=QV_SEGS, or one with a fold) of lhs;
/// gated: a block per QV_WARPS rows of the gate and up parts.
fn qgemv_segments(
    stream: &Arc<CudaStream>,
    enc: Encoding,
    dtype: DType,
    lhs: u64,
    parts: &[(u64, u64, usize)],
    fold: QFold,
    (m, k, row_bytes): (usize, usize, usize),
) -> Result<()> {
    let groups: usize = if fold.gated {
        parts[0].2.div_ceil(QV_ROWS_PER_BLOCK / 2)
    } else {
        parts.iter().map(|p| p.2.div_ceil(QV_ROWS_PER_BLOCK)).sum()
    };
    let mr = rows_variant(m);
    let name = format!("qgemv_{}_m{mr}{}", suffix(enc), act_suffix(dtype)?);
    let f = function(stream.context(), sources::qgemv(&suffix(enc), act_suffix(dtype)?)?, &name)?;
    let (elems, bytes) = enc.block();
    let slot = (QV_CHUNK / elems * bytes + 32).next_multiple_of(16);
    let stages = qv_stages(mr, k);
    let smem = (stages * (mr * 32 * lhs_ld(dtype) * dtype.size_in_bytes() + QV_ROWS_PER_BLOCK * slot)) as u32;
    crate::allow_smem(stream.context(), &f, smem)?;
    let cfg = LaunchConfig { grid_dim: (groups as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: smem };
    let mut segs = QvSegs::new(if fold.gated { &parts[..1] } else { parts }, 0, fold.norm);
    segs.rope = fold.rope;
    if fold.gated {
        (segs.w[1], segs.gated) = (parts[1].0, 1);
    }
    let family = sources::qgemv(&suffix(enc), act_suffix(dtype)?)?;
    let args = (lhs, segs, m as i64, k as i64, row_bytes as i64);
    // SAFETY: lhs holds m x k of dtype; each segment's w holds n rows of row_bytes and its out
    // m x n of dtype; the segments' blocks tile the grid (QvSegs::new).
    let tuning = max_tuning::current();
    let pdl = unsafe { super::launch_qv(stream, (family, &name, &f), cfg, (args, fold.consts), &tuning) }?;
    super::super::record::record("qgemv", || {
        let (segments, norm, gated) = (parts.len() as i64, (fold.norm.gamma != 0) as i64, fold.gated as i64);
        let fields = vec![
            ("mma", 0),
            ("streaming", 0),
            ("blocks", groups as i64),
            ("segments", segments),
            ("norm", norm),
            ("gated", gated),
            ("rope", fold.rope.on() as i64),
            ("pdl", pdl.0 as i64),
            ("early", pdl.1 as i64),
        ];
        (name.clone(), fields)
    });
    Ok(())
}

/// The kernel that runs the products of `lhs` by `parts` (one encoding, `m` rows) with `fold`
/// in one launch, for 1-2 rows (3-4 rows are not folded): qgemv_mma.cu where each part takes it
/// (at most QM_SEGS); else qgemv_stream.cu for one part of K at most one chunk (a norm only)
/// where it takes the rows; else qgemv.cu where each part takes it (at most QV_SEGS) and, folding a
/// norm, K is at most `fusion.norm_gemv_max_k` (every block of 16 weight rows sums the squares
/// again; the persistent tensor-core grid does so once per block, so no limit there); else, for
/// weights too small for the tensor-core kernel by default (select_path's size rule), that
/// kernel all the same. A norm needs lhs
/// and its weight 16-byte aligned; a gated pair two parts of equal rows; a rope three parts
/// (q, k, v) of whole pairs of rows, an even head dim (a pair's rows begin on even rows) and no
/// gate. None: run the steps, always when
/// batch-invariant (1-2 rows folded, more not: a norm summed two ways).
pub fn fold_path(
    enc: Encoding,
    lhs: u64,
    fold: &QFold,
    parts: &[(u64, u64, usize)],
    (m, k, row_bytes): (usize, usize, usize),
    arch: u32,
    t: &max_tuning::Tuning,
) -> Option<QPath> {
    let total: usize = parts.iter().map(|p| p.2).sum();
    let norm = fold.norm.gamma != 0;
    let pair = parts.len() == 2 && parts[0].2 == parts[1].2;
    let rope = fold.rope.on();
    if !(1..=2).contains(&m)
        || (rope && (fold.gated || parts.len() != 3 || fold.rope.dim % 2 != 0 || parts.iter().any(|p| p.2 % 2 != 0)))
        || t.batch_invariant()
        || k == 0
        || k % 32 != 0
        || (norm && !(lhs | fold.norm.gamma).is_multiple_of(16))
        || (fold.gated && !pair)
        || total >= i32::MAX as usize
    {
        return None;
    }
    // Every part takes `path` in a launch of `rows` weight rows.
    let base = QProblem { enc, m, n: 0, k, row_bytes, lhs, w: 0 };
    let all = |path: QPath, rows: usize| all_take(&base, parts, Some(rows), path, arch, t);
    if parts.len() <= QM_SEGS && all(QPath::Mma, total) {
        return Some(QPath::Mma);
    }
    // One row of a single product of short Q8_0 rows (a vocabulary projection after the final
    // norm): the tile kernel, which normalises the lhs as it prepares it.
    if parts.len() == 1 && !fold.gated && !rope && all(QPath::MmaTile, total) {
        return Some(QPath::MmaTile);
    }
    // One product of a single chunk of K on the streaming kernel (a vocabulary projection after
    // the final norm): it stages the lhs once, normalised.
    if parts.len() == 1 && !fold.gated && !rope && k <= QV_CHUNK && all(QPath::Stream, total) {
        return Some(QPath::Stream);
    }
    let max_k = t.int(max_tuning::Knob::FusionNormGemvMaxK).unwrap_or(1024);
    // (Rows off 16 bytes stream only as single products of large weights: several parts whose
    // total is large keep the general kernel's one launch.)
    let general = all(QPath::General, total)
        || (!row_bytes.is_multiple_of(16) && (all(QPath::Stream, total) || all(QPath::MmaTile, total)));
    if parts.len() <= QV_SEGS && (!norm || k <= max_k) && general {
        return Some(QPath::General);
    }
    // Small weights whose norm the general kernel does not fold (K past its limit): the
    // tensor-core kernel folds it whatever their size, as before the size rule.
    let as_large = total.max(SMALL_WEIGHTS.div_ceil(k));
    (parts.len() <= QM_SEGS && all(QPath::Mma, as_large)).then_some(QPath::Mma)
}

/// The products of `lhs` [m, k] (`dtype`) by each part's weights into its output with `fold`
/// (a gated pair: into the first part's output), as one launch: Ok(false), launching nothing,
/// where [`fold_path`] finds no kernel.
pub fn qmatmul_folded(
    stream: &Arc<CudaStream>,
    enc: Encoding,
    dtype: DType,
    lhs: u64,
    parts: &[(u64, u64, usize)],
    fold: QFold,
    (m, k, row_bytes): (usize, usize, usize),
) -> Result<bool> {
    act_suffix(dtype)?;
    let tuning = max_tuning::current();
    let dims = (m, k, row_bytes);
    match fold_path(enc, lhs, &fold, parts, dims, arch_major(stream)?, &tuning) {
        Some(QPath::Mma) => qgemv_mma(stream, enc, dtype, lhs, parts, 0, fold, dims, &tuning)?,
        Some(QPath::MmaTile) => {
            let (w, out, n) = parts[0];
            let (ptrs, norm) = ((lhs, w, out, 0), (fold.norm, fold.consts));
            qgemv_mma_tile(stream, dtype, ptrs, (n, k, row_bytes), norm, &tuning)?;
        }
        Some(QPath::Stream) => {
            let (w, out, n) = parts[0];
            let (dims, norm) = ((m, n, k, row_bytes), (fold.norm, fold.consts));
            qgemv_stream(stream, enc, dtype, (lhs, w, out, 0), dims, norm, &tuning)?;
        }
        Some(_) => qgemv_segments(stream, enc, dtype, lhs, parts, fold, dims)?,
        None => return Ok(false),
    }
    Ok(true)
}

/// silu(lhs @ gate^T) * (lhs @ up^T) into the gate part's output in one launch of
/// qgemm_sm90.cu, where both weights take it (`parts`: gate, then up, of equal rows; 9 to 64
/// rows, fewer with `qmatmul.qgemm_min_rows`): Ok(false), launching nothing, where they do
/// not (the caller runs the products and the elementwise step).
pub fn qmatmul_gated(
    stream: &Arc<CudaStream>,
    enc: Encoding,
    dtype: DType,
    lhs: u64,
    parts: &[(u64, u64, usize)],
    (m, k, row_bytes): (usize, usize, usize),
) -> Result<bool> {
    act_suffix(dtype)?;
    let tuning = max_tuning::current();
    let arch = arch_major(stream)?;
    let base = QProblem { enc, m, n: 0, k, row_bytes, lhs, w: 0 };
    let pair = parts.len() == 2 && parts[0].2 == parts[1].2;
    let total = parts.iter().map(|p| p.2).sum();
    if !pair || !all_take(&base, parts, Some(total), QPath::Qgemm, arch, &tuning) {
        return Ok(false);
    }
    super::super::qgemm_sm90::qgemm(stream, enc, dtype, lhs, parts, 0, true, (m, k, row_bytes))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use max_tuning::Tuning;

    use super::*;

    #[test]
    fn segments_match_the_kernel_layout() {
        // qgemv.cu's QvSegs: w, out, res, n (4 each), first[4], count, early, then QNorm
        assert_eq!(std::mem::offset_of!(QvSegs, norm), 152);
        assert_eq!(std::mem::offset_of!(QvSegs, gated), 176);
        assert_eq!(std::mem::offset_of!(QvSegs, rope), 184);
        assert_eq!(std::mem::size_of::<QvSegs>(), 280);
        assert_eq!(std::mem::size_of::<QNorm>(), 24);
    }

    #[test]
    fn a_vocabulary_projection_folds_its_norm_into_the_tile_or_streaming_gemv() {
        let t = Tuning::parse("").unwrap();
        let fold = QFold { norm: QNorm { gamma: 0x2000, ..QNorm::default() }, ..QFold::default() };
        // SmolLM2's tied Q8_0 embeddings as its output projection: 49152 rows of 612 bytes
        let head = |m: usize, k: usize, n: usize, w: u64| {
            fold_path(Encoding::Q8_0, 0x1000, &fold, &[(w, 0x4000_0000, n)], (m, k, k / 32 * 34), 9, &t)
        };
        assert_eq!(head(1, 576, 49152, 0x10_0000), Some(QPath::MmaTile));
        assert_eq!(head(1, 960, 49152, 0x10_0000), Some(QPath::MmaTile));
        assert_eq!(head(2, 960, 49152, 0x10_0000), Some(QPath::Stream));
        // past one chunk of K the streaming kernel has no norm; the general one folds it to
        // fusion.norm_gemv_max_k
        assert_eq!(head(1, 2048, 49152, 0x10_0000), None);
        // weights off 16 bytes: the general kernel
        assert_eq!(head(1, 576, 49152, 0x10_0008), Some(QPath::General));
        // small weights keep the general kernel
        assert_eq!(head(1, 576, 1000, 0x10_0000), Some(QPath::General));
        // several parts of rows off 16 bytes whose total is large (Qwen2.5-0.5B's Q8_0 gate/up,
        // 4864 x 896 each, 952-byte rows; its q/k/v with a rope): the general kernel's one launch
        let gated = QFold { gated: true, ..fold };
        let pair = [(0x10_0000, 0x4000_0000, 4864), (0x20_0000, 0x5000_0000, 4864)];
        assert_eq!(fold_path(Encoding::Q8_0, 0x1000, &gated, &pair, (1, 896, 952), 9, &t), Some(QPath::General));
        let qkv = [(0x10_0000, 0x4000_0000, 4096), (0x20_0000, 0x5000_0000, 2048), (0x30_0000, 0x6000_0000, 2048)];
        assert_eq!(fold_path(Encoding::Q8_0, 0x1000, &fold, &qkv, (1, 896, 952), 9, &t), Some(QPath::General));
    }

    #[test]
    fn norms_fold_into_the_tensor_core_gemv_and_short_rows_of_the_general_one() {
        let t = Tuning::parse("").unwrap();
        let norm = |enc: Encoding, m: usize, k: usize, n: usize, spec: &str| {
            let (elems, bytes) = enc.block();
            let parts = [(0x10_0000, 0x20_0000, n), (0x30_0000, 0x40_0000, n)];
            let tuning = Tuning::parse(spec).unwrap();
            let fold = QFold { norm: QNorm { gamma: 0x2000, ..QNorm::default() }, ..QFold::default() };
            fold_path(enc, 0x1000, &fold, &parts, (m, k, k / elems * bytes), 9, &tuning)
        };
        assert_eq!(norm(Encoding::Q4_0, 1, 4096, 4096, ""), Some(QPath::Mma));
        assert_eq!(norm(Encoding::Q4K, 2, 4096, 1024, ""), Some(QPath::Mma));
        // Q4_1 at K = 576 (360-byte rows): not 16-byte rows, the general kernel
        assert_eq!(norm(Encoding::Q4_1, 1, 576, 576, ""), Some(QPath::General));
        // Q6_K: one row of large weights on the tensor cores; two on the general kernel up to
        // its K limit
        assert_eq!(norm(Encoding::Q6K, 1, 4096, 4096, ""), Some(QPath::Mma));
        assert_eq!(norm(Encoding::Q6K, 1, 4096, 1024, ""), None);
        assert_eq!(norm(Encoding::Q6K, 2, 4096, 4096, ""), None);
        assert_eq!(norm(Encoding::Q6K, 2, 4096, 4096, "fusion.norm_gemv_max_k=4096"), Some(QPath::General));
        assert_eq!(norm(Encoding::Q4_0, 3, 4096, 4096, ""), None);
        // Q8_0 siblings take the streaming kernel, which folds a norm into single products
        // only, from 3072 x 2048 weights (the parts together); below, the general one
        assert_eq!(norm(Encoding::Q8_0, 1, 512, 8192, ""), None);
        assert_eq!(norm(Encoding::Q8_0, 1, 512, 512, ""), Some(QPath::General));
        let p = (Encoding::Q4_0, (1, 4096, 4096 / 32 * 18));
        let norm = QFold { norm: QNorm { gamma: 0x2000, ..QNorm::default() }, ..QFold::default() };
        assert_eq!(fold_path(p.0, 0x1008, &norm, &[(0x10_0000, 0, 64)], p.1, 9, &t), None);
        // a gated pair: two parts of equal rows; no row limit without a norm
        let gated = QFold { gated: true, ..QFold::default() };
        let pair = [(0x10_0000, 0x20_0000, 1536), (0x30_0000, 0, 1536)];
        assert_eq!(fold_path(p.0, 0x1000, &gated, &pair, p.1, 9, &t), Some(QPath::Mma));
        assert_eq!(fold_path(p.0, 0x1000, &gated, &pair[..1], p.1, 9, &t), None);
        let uneven = [pair[0], (0x30_0000, 0, 1024)];
        assert_eq!(fold_path(p.0, 0x1000, &gated, &uneven, p.1, 9, &t), None);
        let q6 = (Encoding::Q6K, (2, 4096, 4096 / 256 * 210));
        assert_eq!(fold_path(q6.0, 0x1000, &gated, &pair, q6.1, 9, &t), Some(QPath::General));
        // Small weights (a q/k/v of 1536 x 2048): the general kernel, which folds norms of K up
        // to 1024 only; the norm still folds, into the tensor-core kernel (not with qgemv.mma=0)
        let qkv = [(0x10_0000, 0x20_0000, 1024), (0x30_0000, 0x40_0000, 256), (0x50_0000, 0x60_0000, 256)];
        let small = (1, 2048, 2048 / 32 * 18);
        assert_eq!(fold_path(p.0, 0x1000, &QFold::default(), &qkv, small, 9, &t), Some(QPath::General));
        assert_eq!(fold_path(p.0, 0x1000, &norm, &qkv, small, 9, &t), Some(QPath::Mma));
        let no_mma = Tuning::parse("qgemv.mma=0").unwrap();
        assert_eq!(fold_path(p.0, 0x1000, &norm, &qkv, small, 9, &no_mma), None);
    }

    #[test]
    fn a_rope_folds_into_three_products_of_one_or_two_rows() {
        let t = Tuning::parse("").unwrap();
        let layout =
            max_graph::ops::attention::CacheLayout { pages: 4, layers: 2, page_size: 16, kv_heads: 8, head_dim: 128 };
        let rope = QRope::new((1, 2, 3, 4, 5), &layout, 1, (4096, 128, true));
        assert!(rope.on() && !QRope::default().on());
        let fold = QFold { rope, ..QFold::default() };
        let normed = QFold { norm: QNorm { gamma: 0x2000, ..QNorm::default() }, ..fold };
        let qkv = [(0x10_0000, 0x20_0000, 4096), (0x30_0000, 0x40_0000, 1024), (0x50_0000, 0x60_0000, 1024)];
        let q4 = |m: usize, k: usize| (m, k, k / 32 * 18);
        assert_eq!(fold_path(Encoding::Q4_0, 0x1000, &fold, &qkv, q4(1, 4096), 9, &t), Some(QPath::Mma));
        assert_eq!(fold_path(Encoding::Q4_0, 0x1000, &normed, &qkv, q4(2, 4096), 9, &t), Some(QPath::Mma));
        // SmolLM2's q/k/v: K = 576, Q4_1 rows of 360 bytes (not whole 16 bytes): the general kernel
        let small = [(0x10_0000, 0x20_0000, 576), (0x30_0000, 0x40_0000, 192), (0x50_0000, 0x60_0000, 192)];
        let q41 = (1, 576, 576 / 32 * 20);
        assert_eq!(fold_path(Encoding::Q4_1, 0x1000, &normed, &small, q41, 9, &t), Some(QPath::General));
        // three rows, two parts, a gated pair, odd rows: the steps
        assert_eq!(fold_path(Encoding::Q4_0, 0x1000, &fold, &qkv, q4(3, 4096), 9, &t), None);
        assert_eq!(fold_path(Encoding::Q4_0, 0x1000, &fold, &qkv[..2], q4(1, 4096), 9, &t), None);
        let gated = QFold { gated: true, ..fold };
        assert_eq!(fold_path(Encoding::Q4_0, 0x1000, &gated, &qkv, q4(1, 4096), 9, &t), None);
        let odd = [qkv[0], qkv[1], (0x50_0000, 0x60_0000, 1023)];
        assert_eq!(fold_path(Encoding::Q4_0, 0x1000, &fold, &odd, q4(1, 4096), 9, &t), None);
    }
}
