//! The quant families (kernels/quant.cu, kernels/qgemv*.cu): dequantize of the GGUF block
//! encodings and qmatmul (in-register decode for up to 8 lhs rows; above, bf16 weights and the
//! wgmma GEMM on Hopper, qmatmul_sm90.rs, else dequantize-to-scratch + f32 GEMM). GPTQ, which
//! shares the f32 many-rows path, is in gptq.rs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::driver::sys;
use cudarc::driver::{CudaFunction, CudaStream, LaunchConfig, PushKernelArg};
use max_graph::DType;

use super::conv::{GEMM_MAX_ROWS, SCRATCH_BUDGET, Scratch, gemm, grid};
use super::tma::{self, TmaMap};
use crate::sources::{self, QGEMV_MMA, QUANT};
use crate::{Error, Result, function};

pub use max_graph::ops::quant::Encoding;

#[path = "qgemv_mma.rs"]
mod mma;
pub use mma::QM_SEGS;
use mma::{QM_PREP_BUDGET, mma_gemv_smem, qgemv_mma};

/// The RMSNorm folded into a qmatmul's lhs (quant_common.cuh's `QNorm`): the GEMV kernels
/// normalise x's rows as they stage them, rounding as the rms_norm kernel stores its result.
/// `gamma` 0 is no norm.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct QNorm {
    gamma: u64,
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

/// What a decode GEMV launch folds around its products: an RMSNorm of the lhs ([`QNorm`]) and
/// the gated MLP's `silu(gate) * up` (two parts, gate then up, of equal rows, stored into the
/// first part's output).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct QFold {
    pub norm: QNorm,
    pub gated: bool,
}

/// The kernel-name suffix of an encoding (`q4_0`, `q4_k`, ...).
fn suffix(enc: Encoding) -> String {
    enc.name().to_ascii_lowercase()
}

/// The kernel-name suffix of the activation dtype of a qmatmul: lhs, result and residual are
/// all f32 (no suffix), bf16 (`_bf16`) or f16 (`_f16`); the products accumulate in f32.
pub fn act_suffix(dtype: DType) -> Result<&'static str> {
    match dtype {
        DType::Float32 => Ok(""),
        DType::BFloat16 => Ok("_bf16"),
        DType::Float16 => Ok("_f16"),
        other => Err(Error::Unsupported(format!("qmatmul with {other} activations (float32, bfloat16, float16)"))),
    }
}

/// The kernel families a qmatmul of `enc` with `dtype` activations may launch, whatever its
/// rows: the decode GEMVs (qgemv's family of the pair, qgemv_mma for the 4-bit encodings) and
/// quant's dequantize kernels of the many-rows path; for [`crate::prefetch`].
pub fn families(enc: Encoding, dtype: DType) -> Result<Vec<&'static crate::sources::Family>> {
    let mut out = vec![sources::qgemv(&suffix(enc), act_suffix(dtype)?)?, &QUANT];
    if matches!(enc, Encoding::Q4_0 | Encoding::Q4_1 | Encoding::Q4K) {
        out.push(&QGEMV_MMA);
    }
    Ok(out)
}

/// Elements between the lane runs of the staged lhs (Lhs<T>::LD in quant_common.cuh).
fn lhs_ld(dtype: DType) -> usize {
    if dtype == DType::Float32 { QV_LD } else { QV_LD_16 }
}

/// lhs rows up to which qmatmul decodes in registers (qgemv) instead of through a GEMM.
pub const GEMV_MAX_ROWS: usize = 8;
/// Matches QV_ROWS, QV_CHUNK, QV_LD, Chunk::SLOT and Qv::ST in qgemv.cu.
const QV_ROWS_PER_BLOCK: usize = 16;
const QV_CHUNK: usize = 1024;
const QV_LD: usize = 36;
const QV_LD_16: usize = 40;

pub(super) fn rows_variant(m: usize) -> usize {
    match m {
        1 => 1,
        2 => 2,
        3..=4 => 4,
        _ => 8,
    }
}

/// Decodes `total` elements (whole blocks) at `x` into f32 `out`.
pub fn dequantize(stream: &Arc<CudaStream>, enc: Encoding, x: u64, out: u64, total: usize) -> Result<()> {
    if total == 0 {
        return Ok(());
    }
    let f = function(stream.context(), &QUANT, &format!("dequantize_{}", suffix(enc)))?;
    let t = total as i64;
    let mut l = stream.launch_builder(&f);
    l.arg(&x).arg(&out).arg(&t);
    // SAFETY: x holds total / elems whole blocks, out total f32 values (the caller's contract).
    unsafe { l.launch(grid(total as u64)) }.map_err(Error::driver("cuLaunchKernel(dequantize)"))?;
    Ok(())
}

/// out [m, n] = lhs [m, k] @ dequantize(w)^T, w [n, row_bytes]; lhs and out of `dtype` (f32,
/// bf16 or f16; [`act_suffix`]).
pub fn qmatmul(
    stream: &Arc<CudaStream>,
    enc: Encoding,
    dtype: DType,
    ptrs: (u64, u64, u64),
    dims: (usize, usize, usize, usize),
) -> Result<()> {
    qmatmul_add(stream, enc, dtype, ptrs, 0, dims)
}

/// [`qmatmul`] plus `res` (`dtype` [m, n], 0 for none) added to the result: a residual
/// connection fused into the product (the GEMV kernels add it as they store, before rounding
/// to `dtype`; the GEMM paths in their store).
pub fn qmatmul_add(
    stream: &Arc<CudaStream>,
    enc: Encoding,
    dtype: DType,
    (lhs, w, out): (u64, u64, u64),
    res: u64,
    (m, n, k, row_bytes): (usize, usize, usize, usize),
) -> Result<()> {
    act_suffix(dtype)?;
    if m == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        if res != 0 {
            return super::cast(stream, res, dtype, out, dtype, (m * n) as u64);
        }
        return super::fill(stream, out, (m * n) as u64, dtype.size_in_bytes(), 0);
    }
    let tuning = max_tuning::current();
    let problem = QProblem { enc, m, n, k, row_bytes, lhs, w };
    let t = dtype;
    match select_path(&problem, arch_major(stream)?, &tuning) {
        QPath::Mma => {
            let parts = [(w, out, n)];
            return qgemv_mma(stream, enc, t, lhs, &parts, res, QFold::default(), (m, k, row_bytes), &tuning);
        }
        QPath::Stream => return qgemv(stream, enc, t, (lhs, w, out, res), (m, n, k, row_bytes), true, &tuning),
        QPath::General => return qgemv(stream, enc, t, (lhs, w, out, res), (m, n, k, row_bytes), false, &tuning),
        QPath::Wgmma => {
            return super::qmatmul_sm90::qmatmul(stream, enc, t, (lhs, w, out), res, (m, n, k, row_bytes));
        }
        QPath::Gemm => {}
    }
    qmatmul_gemm(stream, enc, t, (lhs, w, out), res, (m, n, k, row_bytes))
}

/// More than GEMV_MAX_ROWS rows: dequantize the weights to scratch, then the f32 GEMM (16-bit
/// lhs converted to f32 first, the result rounded to `dtype` with the residual in its store).
fn qmatmul_gemm(
    stream: &Arc<CudaStream>,
    enc: Encoding,
    dtype: DType,
    (lhs, w, out): (u64, u64, u64),
    res: u64,
    (m, n, k, row_bytes): (usize, usize, usize, usize),
) -> Result<()> {
    let deq = function(stream.context(), &QUANT, &format!("dequant_t_{}", suffix(enc)))?;
    large_m(stream, dtype, (lhs, out), res, (m, n, k), |n0, nc, wt| {
        let (rb, ki, n0i, nci) = (row_bytes as i64, k as i64, n0 as i64, nc as i64);
        let mut l = stream.launch_builder(&deq);
        l.arg(&w).arg(&wt).arg(&rb).arg(&ki).arg(&n0i).arg(&nci);
        // SAFETY: wt holds k x nc f32; rows n0 .. n0 + nc of w exist.
        unsafe { l.launch(grid((k * nc) as u64)) }.map_err(Error::driver("cuLaunchKernel(dequant_t)"))?;
        Ok(())
    })
}

/// One qmatmul as the kernel choice sees it: the encoding, the sizes, the byte length of a
/// weight row and the device addresses of lhs and the weights (their alignment matters).
#[derive(Clone, Copy, Debug)]
pub struct QProblem {
    pub enc: Encoding,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub row_bytes: usize,
    pub lhs: u64,
    pub w: u64,
}

/// The kernel a qmatmul takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QPath {
    /// qgemv_mma.cu: integer tensor cores, 1-2 rows of Q4_0/Q4_1/Q4_K (`qgemv.mma`).
    Mma,
    /// qgemv_stream.cu: persistent, precomputed copy offsets, word-decoded encodings over 16-byte
    /// aligned rows (`qgemv.stream`).
    Stream,
    /// qgemv.cu: every encoding, up to 8 rows.
    General,
    /// Dequantize to bf16 scratch, then the wgmma GEMM (more than 8 rows on sm_90:
    /// qmatmul_sm90.rs; `qmatmul.wgmma`).
    Wgmma,
    /// Dequantize to f32 scratch, then the f32 GEMM (more than 8 rows elsewhere).
    Gemm,
}

/// The path for `p` on a device of compute capability `arch_major` under the tuning knobs.
pub fn select_path(p: &QProblem, arch_major: u32, t: &max_tuning::Tuning) -> QPath {
    let aligned = (p.lhs | p.w) % 16 == 0 && p.row_bytes % 16 == 0;
    let mma = p.m <= 2
        && matches!(p.enc, Encoding::Q4_0 | Encoding::Q4_1 | Encoding::Q4K)
        && aligned
        && p.n < i32::MAX as usize
        && mma_gemv_smem(p.enc, p.m, p.k).0 <= QM_PREP_BUDGET
        && t.flag_or(max_tuning::Knob::QgemvMma, true)
        && arch_major >= 9;
    if mma {
        return QPath::Mma;
    }
    if p.m > GEMV_MAX_ROWS {
        // (The wgmma kernels exist for sm_90a only; K is whole blocks, a multiple of 8.)
        let wgmma = arch_major == 9 && p.k % 8 == 0 && t.flag_or(max_tuning::Knob::QmatmulWgmma, true);
        return if wgmma { QPath::Wgmma } else { QPath::Gemm };
    }
    let stream = matches!(p.enc, Encoding::Q4_0 | Encoding::Q4_1 | Encoding::Q8_0 | Encoding::Q4K)
        && aligned
        && p.n < i32::MAX as usize
        && p.k < i32::MAX as usize
        && t.flag_or(max_tuning::Knob::QgemvStream, true)
        && arch_major >= 9;
    if stream { QPath::Stream } else { QPath::General }
}

/// The device's compute capability major version (9 on Hopper).
fn arch_major(stream: &Arc<CudaStream>) -> Result<u32> {
    let arch = crate::modules::arch_name(stream.context())?;
    Ok(arch.trim_start_matches("sm_").trim_end_matches('a').parse::<u32>().unwrap_or(0) / 10)
}

/// qmatmul for m <= 8 lhs rows: qgemv.cu (one block per 16 weight rows) or qgemv_stream.cu.
fn qgemv(
    stream: &Arc<CudaStream>,
    enc: Encoding,
    dtype: DType,
    (lhs, w, out, res): (u64, u64, u64, u64),
    (m, n, k, row_bytes): (usize, usize, usize, usize),
    streaming: bool,
    tuning: &max_tuning::Tuning,
) -> Result<()> {
    let mr = rows_variant(m);
    let name = format!("qgemv_{}{}_m{mr}{}", if streaming { "s_" } else { "" }, suffix(enc), act_suffix(dtype)?);
    let f = function(stream.context(), sources::qgemv(&suffix(enc), act_suffix(dtype)?)?, &name)?;
    let (elems, bytes) = enc.block();
    let slot = (QV_CHUNK / elems * bytes + 32).next_multiple_of(16);
    // A ring of stages, each the lhs chunk and the weight slots of the block's rows (Qv in
    // qgemv.cu; Qs in qgemv_stream.cu, which adds an mbarrier per stage).
    let (stages, rows_per_block, bar) = match (streaming, mr) {
        (false, 1 | 2) => (4, QV_ROWS_PER_BLOCK, 0),
        (false, 4) => (3, QV_ROWS_PER_BLOCK, 0),
        (false, _) => (2, QV_ROWS_PER_BLOCK, 0),
        (true, 1 | 2) => (3, 32, 8),
        (true, 4) => (3, 16, 8),
        (true, _) => (2, 16, 8),
    };
    let lhs_bytes = mr * 32 * lhs_ld(dtype) * dtype.size_in_bytes();
    let smem = (stages * (lhs_bytes + rows_per_block * slot + bar)) as u32;
    crate::allow_smem(stream.context(), &f, smem)?;
    let groups = n.div_ceil(rows_per_block);
    if groups > i32::MAX as usize {
        return Err(Error::Unsupported(format!("qmatmul with {n} weight rows")));
    }
    let blocks = if streaming {
        // qgemv.grid=n caps the grid (tests: several row groups per block).
        let cap = tuning.int(max_tuning::Knob::QgemvGrid);
        groups.min(resident_blocks(stream, &f, &name, smem)?).min(cap.unwrap_or(usize::MAX))
    } else {
        groups
    };
    let cfg = LaunchConfig { grid_dim: (blocks as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: smem };
    let mut l = stream.launch_builder(&f);
    let rb = row_bytes as i64;
    let (ms, ns, ks) = (m as i32, n as i32, k as i32);
    let segs = QvSegs::new(&[(w, out, n)], res, QNorm::default());
    let (mi, ki) = (m as i64, k as i64);
    if streaming {
        l.arg(&lhs).arg(&w).arg(&out).arg(&ms).arg(&ns).arg(&ks).arg(&rb).arg(&MAGIC).arg(&res);
    } else {
        l.arg(&lhs).arg(&segs).arg(&mi).arg(&ki).arg(&rb).arg(&MAGIC);
    }
    // SAFETY: lhs holds m x k of dtype, w n rows of row_bytes (k elements), out (and res) m x n
    // of dtype; the streaming kernel's int arguments fit (select_path).
    unsafe { l.launch(cfg) }.map_err(Error::driver("cuLaunchKernel(qgemv)"))?;
    super::record::record("qgemv", || {
        let fields = vec![("mma", 0), ("streaming", streaming as i64), ("blocks", blocks as i64), ("segments", 1)];
        (name.clone(), fields)
    });
    Ok(())
}

/// 2^23's bit pattern, as an argument rather than a constant (see byte_float in qgemv.cu).
const MAGIC: u32 = 0x4B00_0000;

/// Products of one lhs that one qgemv.cu launch serves at most (QV_SEGS).
pub const QV_SEGS: usize = 4;

/// The segments of a qgemv.cu launch: weights, output and rows of each, and its first block.
#[repr(C)]
#[derive(Clone, Copy)]
struct QvSegs {
    w: [u64; QV_SEGS],
    out: [u64; QV_SEGS],
    res: [u64; QV_SEGS],
    n: [i64; QV_SEGS],
    first: [i32; QV_SEGS],
    count: i32,
    pad: i32,
    norm: QNorm,
    gated: i32,
    pad2: i32,
}
// SAFETY: plain-old-data with the layout of qgemv.cu's `QvSegs`.
unsafe impl cudarc::driver::DeviceRepr for QvSegs {}

impl QvSegs {
    /// Segments for `parts` (weights, output, rows); `res` is added to the first's result;
    /// `norm` normalises the lhs.
    fn new(parts: &[(u64, u64, usize)], res: u64, norm: QNorm) -> QvSegs {
        let mut s = QvSegs {
            w: [0; QV_SEGS],
            out: [0; QV_SEGS],
            res: [res, 0, 0, 0],
            n: [0; QV_SEGS],
            first: [0; QV_SEGS],
            count: 0,
            pad: 0,
            norm,
            gated: 0,
            pad2: 0,
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
) -> Result<()> {
    let tuning = max_tuning::current();
    let arch = arch_major(stream)?;
    let t = &tuning;
    let takes = |path: QPath| {
        move |&(w, _, n): &(u64, u64, usize)| {
            n > 0 && select_path(&QProblem { enc, m, n, k, row_bytes, lhs, w }, arch, t) == path
        }
    };
    let total: usize = parts.iter().map(|p| p.2).sum();
    if m > 0
        && k > 0
        && (2..=QM_SEGS).contains(&parts.len())
        && parts.iter().all(takes(QPath::Mma))
        && total < i32::MAX as usize
    {
        return qgemv_mma(stream, enc, dtype, lhs, parts, 0, QFold::default(), (m, k, row_bytes), &tuning);
    }
    let general = takes(QPath::General);
    let groups: usize = parts.iter().map(|p| p.2.div_ceil(QV_ROWS_PER_BLOCK)).sum();
    if m == 0
        || k == 0
        || parts.len() < 2
        || parts.len() > QV_SEGS
        || !parts.iter().all(general)
        || groups > i32::MAX as usize
    {
        for &(w, out, n) in parts {
            qmatmul(stream, enc, dtype, (lhs, w, out), (m, n, k, row_bytes))?;
        }
        return Ok(());
    }
    qgemv_segments(stream, enc, dtype, lhs, parts, QFold::default(), (m, k, row_bytes))
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
    let stages = match mr {
        1 | 2 => 4,
        4 => 3,
        _ => 2,
    };
    let smem = (stages * (mr * 32 * lhs_ld(dtype) * dtype.size_in_bytes() + QV_ROWS_PER_BLOCK * slot)) as u32;
    crate::allow_smem(stream.context(), &f, smem)?;
    let cfg = LaunchConfig { grid_dim: (groups as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: smem };
    let mut segs = QvSegs::new(if fold.gated { &parts[..1] } else { parts }, 0, fold.norm);
    if fold.gated {
        (segs.w[1], segs.gated) = (parts[1].0, 1);
    }
    let (mi, ki, rb) = (m as i64, k as i64, row_bytes as i64);
    let mut l = stream.launch_builder(&f);
    l.arg(&lhs).arg(&segs).arg(&mi).arg(&ki).arg(&rb).arg(&MAGIC);
    // SAFETY: lhs holds m x k of dtype; each segment's w holds n rows of row_bytes and its out
    // m x n of dtype; the segments' blocks tile the grid (QvSegs::new).
    unsafe { l.launch(cfg) }.map_err(Error::driver("cuLaunchKernel(qgemv)"))?;
    super::record::record("qgemv", || {
        let (segments, norm, gated) = (parts.len() as i64, (fold.norm.gamma != 0) as i64, fold.gated as i64);
        let fields = vec![
            ("mma", 0),
            ("streaming", 0),
            ("blocks", groups as i64),
            ("segments", segments),
            ("norm", norm),
            ("gated", gated),
        ];
        (name.clone(), fields)
    });
    Ok(())
}

/// The kernel that runs the products of `lhs` by `parts` (one encoding, `m` rows) with `fold`
/// in one launch: qgemv_mma.cu for 1-2 rows where each part takes it (at most QM_SEGS); else
/// qgemv.cu for 1-2 rows where each part takes it (at most QV_SEGS) and, folding a norm, K is
/// at most `fusion.norm_gemv_max_k` (every block of 16 weight rows sums the squares again; the
/// persistent tensor-core grid does so once per block, so no limit there). A norm needs lhs
/// and its weight 16-byte aligned; a gated pair two parts of equal rows. None: run the steps.
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
    if !(1..=2).contains(&m)
        || k == 0
        || k % 32 != 0
        || (norm && (lhs | fold.norm.gamma) % 16 != 0)
        || (fold.gated && !pair)
        || total >= i32::MAX as usize
    {
        return None;
    }
    let all = |path: QPath| {
        parts
            .iter()
            .all(|&(w, _, n)| n > 0 && select_path(&QProblem { enc, m, n, k, row_bytes, lhs, w }, arch, t) == path)
    };
    if parts.len() <= QM_SEGS && all(QPath::Mma) {
        return Some(QPath::Mma);
    }
    let max_k = t.int(max_tuning::Knob::FusionNormGemvMaxK).unwrap_or(1024);
    (parts.len() <= QV_SEGS && (!norm || k <= max_k) && all(QPath::General)).then_some(QPath::General)
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
        Some(_) => qgemv_segments(stream, enc, dtype, lhs, parts, fold, dims)?,
        None => return Ok(false),
    }
    Ok(true)
}

/// Blocks of 256 threads with `smem` bytes of this kernel that fit on the device at once (per
/// SM times SMs), cached per device, kernel and shared-memory size: the persistent grid.
fn resident_blocks(stream: &Arc<CudaStream>, f: &CudaFunction, name: &str, smem: u32) -> Result<usize> {
    type Cache = Mutex<Option<HashMap<(usize, String, u32), usize>>>;
    static CACHE: Cache = Mutex::new(None);
    let key = (stream.context().ordinal(), name.to_string(), smem);
    if let Some(&v) = CACHE.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert_with(HashMap::new).get(&key) {
        return Ok(v);
    }
    let per_sm = f
        .occupancy_max_active_blocks_per_multiprocessor(256, smem as usize, None)
        .map_err(Error::driver("cuOccupancyMaxActiveBlocksPerMultiprocessor"))?
        .max(1) as usize;
    let sms = super::sm_count(stream)?;
    CACHE.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert_with(HashMap::new).insert(key, per_sm * sms);
    Ok(per_sm * sms)
}

/// The many-rows path: for chunks of nc weight columns, `decode(n0, nc, wt)` writes W^T's
/// columns n0 .. n0 + nc as f32 [k, nc] into scratch; then, for chunks of lhs rows (converted
/// to f32 when `dtype` is 16-bit), an f32 GEMM, stored (plus `res`, `dtype` [m, n], when it is
/// not 0, and rounded to `dtype`) into out's columns.
pub(super) fn large_m(
    stream: &Arc<CudaStream>,
    dtype: DType,
    (lhs, out): (u64, u64),
    res: u64,
    (m, n, k): (usize, usize, usize),
    decode: impl Fn(usize, usize, u64) -> Result<()>,
) -> Result<()> {
    let half = SCRATCH_BUDGET / 2;
    let nc = (half / (4 * k)).clamp(1, n);
    let convert = dtype != DType::Float32;
    // Rows per GEMM: the f32 result [mc, nc] (and the f32 lhs copy [mc, k]) within the budget.
    let per_row = 4 * (nc + if convert { k } else { 0 });
    let mc = (half / per_row).clamp(1, GEMM_MAX_ROWS).min(m);
    let wt = Scratch::new(stream, k * nc * 4)?;
    // The GEMM writes f32 straight into out when out is f32, one chunk covers every column and
    // there is no residual to add.
    let direct = !convert && nc == n && res == 0;
    let tmp = if direct { None } else { Some(Scratch::new(stream, mc * nc * 4)?) };
    let a32 = if convert { Some(Scratch::new(stream, mc * k * 4)?) } else { None };
    let store =
        function(stream.context(), &QUANT, &format!("store_cols_{}", super::cast_name(dtype).unwrap_or("f32")))?;
    let es = dtype.size_in_bytes();
    for n0 in (0..n).step_by(nc) {
        let ncur = (n - n0).min(nc);
        decode(n0, ncur, wt.ptr())?;
        for m0 in (0..m).step_by(mc) {
            let rows = (m - m0).min(mc);
            let a = match &a32 {
                Some(buf) => {
                    super::cast(
                        stream,
                        lhs + (m0 * k * es) as u64,
                        dtype,
                        buf.ptr(),
                        DType::Float32,
                        (rows * k) as u64,
                    )?;
                    buf.ptr()
                }
                None => lhs + (m0 * k * 4) as u64,
            };
            match &tmp {
                None => {
                    gemm(stream, DType::Float32, false, (a, wt.ptr(), out + (m0 * n * 4) as u64), (rows, ncur, k), 1)?
                }
                Some(t) => {
                    gemm(stream, DType::Float32, false, (a, wt.ptr(), t.ptr()), (rows, ncur, k), 1)?;
                    let (tp, o) = (t.ptr(), out + (m0 * n * es) as u64);
                    let r = if res == 0 { 0 } else { res + (m0 * n * es) as u64 };
                    let (ri, nci, ni, n0i) = (rows as i64, ncur as i64, n as i64, n0 as i64);
                    let mut l = stream.launch_builder(&store);
                    l.arg(&tp).arg(&o).arg(&r).arg(&ri).arg(&nci).arg(&ni).arg(&n0i);
                    // SAFETY: tmp holds rows x ncur f32; out (and res) rows m0 .. m0 + rows of n
                    // columns of dtype.
                    unsafe { l.launch(grid((rows * ncur) as u64)) }
                        .map_err(Error::driver("cuLaunchKernel(store_cols)"))?;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use max_tuning::Tuning;

    use super::*;

    fn problem(enc: Encoding, m: usize) -> QProblem {
        let (k, n) = (4096, 4096);
        let (elems, bytes) = enc.block();
        QProblem { enc, m, n, k, row_bytes: k / elems * bytes, lhs: 0x1000, w: 0x10_0000 }
    }

    fn path(p: &QProblem, arch: u32, spec: &str) -> QPath {
        select_path(p, arch, &Tuning::parse(spec).unwrap())
    }

    #[test]
    fn paths_by_encoding_rows_alignment_and_device() {
        assert_eq!(path(&problem(Encoding::Q4_0, 1), 9, ""), QPath::Mma);
        assert_eq!(path(&problem(Encoding::Q4K, 2), 9, ""), QPath::Mma);
        assert_eq!(path(&problem(Encoding::Q4_0, 3), 9, ""), QPath::Stream);
        assert_eq!(path(&problem(Encoding::Q8_0, 1), 9, ""), QPath::Stream);
        assert_eq!(path(&problem(Encoding::Q6K, 1), 9, ""), QPath::General);
        assert_eq!(path(&problem(Encoding::Q4_0, 1), 8, ""), QPath::General);
        assert_eq!(path(&problem(Encoding::Q4_0, 9), 9, ""), QPath::Wgmma);
        assert_eq!(path(&problem(Encoding::Q6K, 512), 9, ""), QPath::Wgmma);
        assert_eq!(path(&problem(Encoding::Q4_0, 9), 8, ""), QPath::Gemm);
        assert_eq!(path(&problem(Encoding::Q4_0, 9), 10, ""), QPath::Gemm);
        assert_eq!(path(&problem(Encoding::Q4_0, 512), 9, "qmatmul.wgmma=0"), QPath::Gemm);
        let unaligned = QProblem { lhs: 0x1004, ..problem(Encoding::Q4_0, 1) };
        assert_eq!(path(&unaligned, 9, ""), QPath::General);
    }

    #[test]
    fn segments_match_the_kernel_layout() {
        // qgemv.cu's QvSegs: w, out, res, n (4 each), first[4], count, pad, then QNorm
        assert_eq!(std::mem::offset_of!(QvSegs, norm), 152);
        assert_eq!(std::mem::offset_of!(QvSegs, gated), 176);
        assert_eq!(std::mem::size_of::<QvSegs>(), 184);
        assert_eq!(std::mem::size_of::<QNorm>(), 24);
    }

    #[test]
    fn norms_fold_into_the_tensor_core_gemv_and_short_rows_of_the_general_one() {
        let t = Tuning::parse("").unwrap();
        let norm = |enc: Encoding, m: usize, k: usize, n: usize, spec: &str| {
            let (elems, bytes) = enc.block();
            let parts = [(0x10_0000, 0x20_0000, n), (0x30_0000, 0x40_0000, n)];
            let tuning = Tuning::parse(spec).unwrap();
            let fold = QFold { norm: QNorm { gamma: 0x2000, ..QNorm::default() }, gated: false };
            fold_path(enc, 0x1000, &fold, &parts, (m, k, k / elems * bytes), 9, &tuning)
        };
        assert_eq!(norm(Encoding::Q4_0, 1, 4096, 4096, ""), Some(QPath::Mma));
        assert_eq!(norm(Encoding::Q4K, 2, 4096, 1024, ""), Some(QPath::Mma));
        // Q4_1 at K = 576 (360-byte rows): not 16-byte rows, the general kernel
        assert_eq!(norm(Encoding::Q4_1, 1, 576, 576, ""), Some(QPath::General));
        assert_eq!(norm(Encoding::Q6K, 1, 4096, 4096, ""), None);
        assert_eq!(norm(Encoding::Q6K, 1, 4096, 4096, "fusion.norm_gemv_max_k=4096"), Some(QPath::General));
        assert_eq!(norm(Encoding::Q4_0, 3, 4096, 4096, ""), None);
        // Q8_0 takes the streaming kernel, which has no norm
        assert_eq!(norm(Encoding::Q8_0, 1, 512, 512, ""), None);
        let p = (Encoding::Q4_0, (1, 4096, 4096 / 32 * 18));
        let norm = QFold { norm: QNorm { gamma: 0x2000, ..QNorm::default() }, gated: false };
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
    }

    #[test]
    fn qgemv_knobs_change_the_path() {
        let p = problem(Encoding::Q4_0, 1);
        assert_eq!(path(&p, 9, "qgemv.mma=0"), QPath::Stream);
        assert_eq!(path(&p, 9, "qgemv.mma=0,qgemv.stream=0"), QPath::General);
        assert_eq!(path(&problem(Encoding::Q8_0, 4), 9, "qgemv.stream=off"), QPath::General);
    }
}
