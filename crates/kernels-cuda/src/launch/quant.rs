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
pub(crate) use mma::weight_map;
use mma::{QM_PREP_BUDGET, mma_gemv_smem, qgemv_mma};

#[path = "qgemv_path.rs"]
mod path;
use path::SMALL_WEIGHTS;
pub use path::{QPath, QProblem, select_path};

#[path = "qgemv_mma_tile.rs"]
mod mma_tile;
use mma_tile::qgemv_mma_tile;

#[path = "qgemv_stream.rs"]
mod stream_gemv;
use stream_gemv::qgemv_stream;

#[path = "qgemv_fold.rs"]
mod fold;
use fold::QvSegs;
pub use fold::{QFold, QNorm, QRope, QV_SEGS, fold_path, qmatmul_folded, qmatmul_gated, qmatmul_siblings};

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

/// The kernel families a qmatmul of `enc` with `dtype` activations may launch on a device of
/// `arch` (`arch_name`), whatever its rows: the decode GEMVs (qgemv's family of the pair,
/// qgemv_mma for the 4-bit encodings and Q6_K), quant's dequantize kernels of the many-rows
/// path and, on sm_90a, qgemm_sm90; for [`crate::prefetch`].
pub fn families(enc: Encoding, dtype: DType, arch: &str) -> Result<Vec<&'static crate::sources::Family>> {
    let mut out = vec![sources::qgemv(&suffix(enc), act_suffix(dtype)?)?, &QUANT];
    if matches!(enc, Encoding::Q4_0 | Encoding::Q4_1 | Encoding::Q4K | Encoding::Q6K | Encoding::Q8_0) {
        out.push(&QGEMV_MMA);
    }
    if arch == "sm_90a" {
        out.push(crate::sources::qgemm(&suffix(enc))?);
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

/// Runs `launch(lhs, parts, res, rows)` for each group of at most `group` rows of lhs [m, k]
/// (`dtype`), with each part's output ([m, n] of `dtype`) and `res` (0: none) moved to the
/// group's first row: the GEMV kernels' row variants give a row the same sums whatever rows
/// share its launch, so a batch of any size gets, row by row, what each row gets alone.
#[allow(clippy::too_many_arguments)]
pub(super) fn row_groups(
    dtype: DType,
    k: usize,
    lhs: u64,
    parts: &[(u64, u64, usize)],
    res: u64,
    m: usize,
    group: usize,
    mut launch: impl FnMut(u64, &[(u64, u64, usize)], u64, usize) -> Result<()>,
) -> Result<()> {
    let es = dtype.size_in_bytes() as u64;
    let mut moved = parts.to_vec();
    for r0 in (0..m).step_by(group.max(1)) {
        let r = r0 as u64;
        for (dst, &(w, out, n)) in moved.iter_mut().zip(parts) {
            *dst = (w, out + r * n as u64 * es, n);
        }
        let res_at = if res == 0 { 0 } else { res + r * parts[0].2 as u64 * es };
        launch(lhs + r * k as u64 * es, &moved, res_at, (m - r0).min(group))?;
    }
    Ok(())
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
    consts: bool,
) -> Result<()> {
    qmatmul_add(stream, enc, dtype, ptrs, 0, dims, consts)
}

/// [`qmatmul`] plus `res` (`dtype` [m, n], 0 for none) added to the result: a residual
/// connection fused into the product (the GEMV kernels add it as they store, before rounding
/// to `dtype`; the GEMM paths in their store). `consts`: no kernel of the program writes `w`
/// (QFold::consts).
pub fn qmatmul_add(
    stream: &Arc<CudaStream>,
    enc: Encoding,
    dtype: DType,
    (lhs, w, out): (u64, u64, u64),
    res: u64,
    (m, n, k, row_bytes): (usize, usize, usize, usize),
    consts: bool,
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
    let path = select_path(&problem, arch_major(stream)?, &tuning);
    match path {
        QPath::Mma => {
            let parts = [(w, out, n)];
            let fold = QFold { consts, ..QFold::default() };
            return qgemv_mma(stream, enc, t, lhs, &parts, res, fold, (m, k, row_bytes), &tuning);
        }
        QPath::MmaTile => {
            let ptrs = (lhs, w, out, res);
            return qgemv_mma_tile(stream, t, ptrs, (n, k, row_bytes), (QNorm::default(), consts), &tuning);
        }
        QPath::Stream | QPath::General => {
            // More than GEMV_MAX_ROWS rows come here only batch-invariant (select_path): one
            // launch per group of rows, each row's sums those it gets alone.
            let streaming = path == QPath::Stream;
            let parts = [(w, out, n)];
            return row_groups(dtype, k, lhs, &parts, res, m, GEMV_MAX_ROWS, |lhs, parts, res, rows| {
                let (w, out, n) = parts[0];
                qgemv(stream, enc, t, (lhs, w, out, res), (rows, n, k, row_bytes), (streaming, consts), &tuning)
            });
        }
        QPath::Wgmma => {
            return super::qmatmul_sm90::qmatmul(stream, enc, t, (lhs, w, out), res, (m, n, k, row_bytes));
        }
        QPath::Qgemm => {
            return super::qgemm_sm90::qgemm(stream, enc, t, lhs, &[(w, out, n)], res, false, (m, k, row_bytes));
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

/// The device's compute capability major version (9 on Hopper).
pub(super) fn arch_major(stream: &Arc<CudaStream>) -> Result<u32> {
    let arch = crate::modules::arch_name(stream.context())?;
    Ok(arch.trim_start_matches("sm_").trim_end_matches('a').parse::<u32>().unwrap_or(0) / 10)
}

/// Shared-memory stages of a qgemv.cu launch (Qv::ST for `mr`): only those of K's chunks are
/// ever touched, so a short K (a vocabulary projection of K = 576 takes one) gets fewer and more
/// blocks stay resident.
pub(super) fn qv_stages(mr: usize, k: usize) -> usize {
    let ring = match mr {
        1 | 2 => 4,
        4 => 3,
        _ => 2,
    };
    ring.min(k.div_ceil(QV_CHUNK).max(1))
}

/// qmatmul for m <= 8 lhs rows: qgemv.cu (one block per 16 weight rows) or qgemv_stream.cu.
fn qgemv(
    stream: &Arc<CudaStream>,
    enc: Encoding,
    dtype: DType,
    (lhs, w, out, res): (u64, u64, u64, u64),
    (m, n, k, row_bytes): (usize, usize, usize, usize),
    (streaming, consts): (bool, bool),
    tuning: &max_tuning::Tuning,
) -> Result<()> {
    if streaming {
        let norm = (QNorm::default(), consts);
        qgemv_stream(stream, enc, dtype, (lhs, w, out, res), (m, n, k, row_bytes), norm, tuning)?;
        return Ok(());
    }
    let mr = rows_variant(m);
    let name = format!("qgemv_{}_m{mr}{}", suffix(enc), act_suffix(dtype)?);
    let f = function(stream.context(), sources::qgemv(&suffix(enc), act_suffix(dtype)?)?, &name)?;
    let (elems, bytes) = enc.block();
    let slot = (QV_CHUNK / elems * bytes + 32).next_multiple_of(16);
    // A ring of stages, each the lhs chunk and the weight slots of the block's rows (Qv in
    // qgemv.cu).
    let lhs_bytes = mr * 32 * lhs_ld(dtype) * dtype.size_in_bytes();
    let smem = (qv_stages(mr, k) * (lhs_bytes + QV_ROWS_PER_BLOCK * slot)) as u32;
    crate::allow_smem(stream.context(), &f, smem)?;
    let blocks = n.div_ceil(QV_ROWS_PER_BLOCK);
    if blocks > i32::MAX as usize {
        return Err(Error::Unsupported(format!("qmatmul with {n} weight rows")));
    }
    let cfg = LaunchConfig { grid_dim: (blocks as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: smem };
    let segs = QvSegs::new(&[(w, out, n)], res, QNorm::default());
    let family = sources::qgemv(&suffix(enc), act_suffix(dtype)?)?;
    // SAFETY: lhs holds m x k of dtype, w n rows of row_bytes (k elements), out (and res) m x n
    // of dtype.
    let args = (lhs, segs, m as i64, k as i64, row_bytes as i64);
    let (pdl, early) = unsafe { launch_qv(stream, (family, &name, &f), cfg, (args, consts), tuning) }?;
    super::record::record("qgemv", || {
        let (pdl, early) = (pdl as i64, early as i64);
        let fields = vec![
            ("mma", 0),
            ("streaming", 0),
            ("blocks", blocks as i64),
            ("segments", 1),
            ("pdl", pdl),
            ("early", early),
        ];
        (name.clone(), fields)
    });
    Ok(())
}

/// Launches a qgemv.cu kernel with its arguments (lhs, segments, m, k, row bytes) under PDL
/// where the knobs allow it (`launch.pdl`, `qgemv.pdl`), its first weight stages copied before
/// the wait where the weights are constants (`consts`) and `qgemv.early_weights` allows it;
/// returns whether PDL was on, and whether the early copies were.
///
/// # Safety
/// `segs` describes weights of `row_bytes` rows and outputs that `cfg`'s grid covers, lhs holds
/// m x k of the kernel's activation type.
unsafe fn launch_qv(
    stream: &Arc<CudaStream>,
    (family, name, f): (&sources::Family, &str, &CudaFunction),
    cfg: LaunchConfig,
    ((lhs, segs, m, k, row_bytes), consts): ((u64, QvSegs, i64, i64, i64), bool),
    tuning: &max_tuning::Tuning,
) -> Result<(bool, bool)> {
    // Every qgemv.cu kernel waits (griddepcontrol.wait) before it reads the lhs or stores; only
    // its first stages' weight copies (the weights are constants; `qgemv.early_weights`), or
    // L2 prefetches of them, come before.
    let pdl = super::pdl::Pdl::with(tuning, family, name, Some(max_tuning::Knob::QgemvPdl));
    let mut segs = segs;
    segs.early = (pdl.on() && consts && tuning.flag_or(max_tuning::Knob::QgemvEarlyWeights, true)) as i32;
    let (mut lhs, mut m, mut k, mut rb, mut magic) = (lhs, m, k, row_bytes, MAGIC);
    let mut params: [*mut std::ffi::c_void; 6] = [
        &mut lhs as *mut u64 as *mut _,
        &mut segs as *mut QvSegs as *mut _,
        &mut m as *mut i64 as *mut _,
        &mut k as *mut i64 as *mut _,
        &mut rb as *mut i64 as *mut _,
        &mut magic as *mut u32 as *mut _,
    ];
    let dims = (cfg.grid_dim.0, cfg.block_dim.0, cfg.shared_mem_bytes);
    // SAFETY: the parameters match the kernel's (lhs, QvSegs, m, k, row_bytes, magic) by value
    // and live across the call (the driver copies them); the caller's contract for the memory.
    unsafe { super::launch_ex(stream, f, dims, &mut params, pdl, "cuLaunchKernelEx(qgemv)") }?;
    Ok((pdl.on(), segs.early != 0))
}

/// 2^23's bit pattern, as an argument rather than a constant (see byte_float in qgemv.cu).
const MAGIC: u32 = 0x4B00_0000;

/// Blocks of 256 threads with `smem` bytes of this kernel that fit on the device at once (per
/// SM times SMs): the persistent grid.
fn resident_blocks(stream: &Arc<CudaStream>, f: &CudaFunction, name: &str, smem: u32) -> Result<usize> {
    super::resident_blocks(stream, f, name, 256, smem)
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
    use super::*;

    #[test]
    fn the_general_gemv_gets_only_the_stages_of_its_chunks() {
        // rings of 4, 3 and 2 stages of 1024 elements for 1-2, 4 and 8 lhs rows
        assert_eq!([576, 1024, 1025, 4096, 14336].map(|k| qv_stages(1, k)), [1, 1, 2, 4, 4]);
        assert_eq!([qv_stages(4, 2048), qv_stages(4, 4096), qv_stages(8, 14336), qv_stages(2, 0)], [2, 3, 2, 1]);
    }

    #[test]
    fn row_groups_move_each_part_to_the_group() {
        let mut seen = vec![];
        let parts = [(0x100, 0x1_0000, 10), (0x200, 0x2_0000, 6)];
        row_groups(DType::BFloat16, 32, 0x5000, &parts, 0x9000, 19, 8, |lhs, p, res, rows| {
            seen.push((lhs, p.to_vec(), res, rows));
            Ok(())
        })
        .unwrap();
        assert_eq!(seen.len(), 3);
        assert_eq!(seen[0], (0x5000, parts.to_vec(), 0x9000, 8));
        // rows 8.. of lhs (32 bf16 each), of each output (10 and 6 columns) and of the residual
        assert_eq!(
            seen[1],
            (0x5000 + 8 * 64, vec![(0x100, 0x1_0000 + 8 * 20, 10), (0x200, 0x2_0000 + 8 * 12, 6)], 0x9000 + 8 * 20, 8)
        );
        assert_eq!((seen[2].0, seen[2].3), (0x5000 + 16 * 64, 3));
        let mut none = 0;
        row_groups(DType::Float32, 32, 0, &parts, 0, 5, 8, |_, _, res, rows| {
            none += 1;
            assert_eq!((res, rows), (0, 5));
            Ok(())
        })
        .unwrap();
        assert_eq!(none, 1);
    }
}
