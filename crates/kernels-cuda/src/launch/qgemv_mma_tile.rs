//! One lhs row over Q8_0 weights of short rows (K up to 960, rows off 16 bytes allowed) on
//! integer tensor cores (kernels/qgemv_mma_tile.cu, in the qgemv_mma family): which products it
//! takes, its stages and grid, and the launch under PDL. A child of quant.rs.

use super::*;

/// Warps of a block (QT_WARPS in qgemv_mma_tile.cu), and the bytes of a stage (a tile of 16
/// weight rows) at most.
const QT_WARPS: usize = 8;
const QT_MAX_TILE: usize = 16 * 1024;

/// Whether `p` (not batch-invariant: the caller checks) takes the tile kernel on a device of
/// compute capability `arch_major`: where it fits (`fits`), on sm_90 and later with a block's
/// shared memory for one stage (`block_smem`), for weights of at least SMALL_WEIGHTS
/// (`qgemv.mma` forces it either way).
pub(super) fn takes(p: &QProblem, arch_major: u32, t: &max_tuning::Tuning) -> bool {
    let few = p.n.saturating_mul(p.k) < SMALL_WEIGHTS;
    fits(p)
        && arch_major >= 9
        && smem(p.k, p.row_bytes, 1) <= block_smem(arch_major)
        && t.flag(max_tuning::Knob::QgemvMma).unwrap_or(!few)
}

/// The dynamic shared memory a block of the tile kernel may ask for on a device of compute
/// capability `arch_major`, with room for its static part: 227 KiB on sm_90 and sm_100, 99 KiB
/// on the others (sm_120's 101,376 bytes a block; a stage at K = 768 or more does not fit there).
fn block_smem(arch_major: u32) -> usize {
    (if matches!(arch_major, 9 | 10) { 227 * 1024 } else { 99 * 1024 }) - 64
}

/// Whether the kernel can run `p`: one lhs row of Q8_0 whose rows are whole blocks of a K that
/// is a multiple of 64 (rows of whole 4-byte words) with 16 rows in a stage, lhs and weights on
/// 16 bytes, the rows in i32.
fn fits(p: &QProblem) -> bool {
    p.enc == Encoding::Q8_0
        && p.m == 1
        && p.k > 0
        && p.k.is_multiple_of(64)
        && p.row_bytes == p.k / 32 * 34
        && 16 * p.row_bytes <= QT_MAX_TILE
        && (p.lhs | p.w).is_multiple_of(16)
        && p.n < i32::MAX as usize - 16
}

/// Shared memory of the tile kernel for K = `k` and `stages` stages per warp: the lhs
/// fragments and per-unit terms, 128 zero bytes, then (128-byte aligned) the warps' stages of
/// 16 rows of `row_bytes` and their mbarriers.
fn smem(k: usize, row_bytes: usize, stages: usize) -> usize {
    ((k / 32) * 112 + 128).next_multiple_of(128) + QT_WARPS * stages * (16 * row_bytes + 8)
}

/// `lhs` [1, k] times the Q8_0 weights `w` (n rows of `row_bytes`) into `out` [1, n], plus `res`
/// unless 0; `norm` (gamma 0: none) normalises the lhs first; `consts`: no kernel of the
/// program writes `w`, so its first stages are copied before the PDL wait. lhs, out, res and
/// the norm weight are of `dtype` (f32, bf16, f16).
pub(super) fn qgemv_mma_tile(
    stream: &Arc<CudaStream>,
    dtype: DType,
    (lhs, w, out, res): (u64, u64, u64, u64),
    (n, k, row_bytes): (usize, usize, usize),
    (norm, consts): (QNorm, bool),
    tuning: &max_tuning::Tuning,
) -> Result<()> {
    let problem = QProblem { enc: Encoding::Q8_0, m: 1, n, k, row_bytes, lhs, w };
    if !fits(&problem) || (norm.gamma != 0 && !norm.gamma.is_multiple_of(16)) {
        return Err(Error::Unsupported(format!(
            "qgemv_mma_tile: 1 x {n} x {k} of Q8_0 rows of {row_bytes} bytes (K a multiple of 64 up to 960, \
             lhs, weights and a norm's weight on 16 bytes)"
        )));
    }
    let name = format!("qgemv_mma_tile_q8_0_m1{}", act_suffix(dtype)?);
    let f = function(stream.context(), &QGEMV_MMA, &name)?;
    // One stage a warp (`qgemv.stages` 2 where a block holds them): at K = 576 two blocks an SM
    // then, whose 16 warps each have a tile in flight, against one block of 8 warps with two
    // each. An H200, SmolLM2-135M Q4_1 at one sequence, three alternating rounds in one process:
    // 1,878.9 / 1,860.7 / 1,876.9 tok/s against 1,858.6 / 1,853.6 / 1,809.5 with two stages;
    // 49152 x 576 alone 10.9 us against 11.3.
    let holds = |st: usize| crate::allow_smem(stream.context(), &f, smem(k, row_bytes, st) as u32).is_ok();
    let stages = tuning.int(max_tuning::Knob::QgemvStages).filter(|st| (1..=2).contains(st) && holds(*st)).unwrap_or(1);
    let bytes = smem(k, row_bytes, stages) as u32;
    crate::allow_smem(stream.context(), &f, bytes)?;
    let tiles = n.div_ceil(16);
    let cap = tuning.int(max_tuning::Knob::QgemvGrid).unwrap_or(usize::MAX);
    let blocks = tiles.div_ceil(QT_WARPS).min(resident_blocks(stream, &f, &name, bytes)?).min(cap).max(1);
    let pdl = super::super::pdl::Pdl::with(tuning, &QGEMV_MMA, &name, Some(max_tuning::Knob::QgemvPdl));
    let early = pdl.on() && consts && tuning.flag_or(max_tuning::Knob::QgemvEarlyWeights, true);
    let (mut w, mut out, mut lhs, mut res, mut norm) = (w, out, lhs, res, norm);
    let (mut ns, mut ks, mut rb, mut st, mut ea) = (n as i32, k as i32, row_bytes as i32, stages as i32, early as i32);
    let mut params: [*mut std::ffi::c_void; 10] = [
        &mut w as *mut u64 as *mut _,
        &mut out as *mut u64 as *mut _,
        &mut lhs as *mut u64 as *mut _,
        &mut res as *mut u64 as *mut _,
        &mut ns as *mut i32 as *mut _,
        &mut ks as *mut i32 as *mut _,
        &mut rb as *mut i32 as *mut _,
        &mut st as *mut i32 as *mut _,
        &mut ea as *mut i32 as *mut _,
        &mut norm as *mut QNorm as *mut _,
    ];
    // SAFETY: the parameters match qgemv_mma_tile_q8_0_m1's (w, out, lhs, res, n, k, row_bytes,
    // stages, early, QNorm) by value and live across the call; w holds n rows of row_bytes
    // (k elements of Q8_0, checked by `fits`), lhs k values of dtype, out (and res) n; the
    // shared memory is `smem`'s layout for these stages.
    unsafe {
        super::super::launch_ex(
            stream,
            &f,
            (blocks as u32, 256, bytes),
            &mut params,
            pdl,
            "cuLaunchKernelEx(qgemv_mma_tile)",
        )
    }?;
    super::super::record::record("qgemv", || {
        let fields = vec![
            ("mma", 1),
            ("tile", 1),
            ("blocks", blocks as i64),
            ("stages", stages as i64),
            ("segments", 1),
            ("norm", (norm.gamma != 0) as i64),
            ("pdl", pdl.on() as i64),
            ("early", early as i64),
        ];
        (name.clone(), fields)
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use max_tuning::Tuning;

    use super::*;

    fn head(n: usize, k: usize) -> QProblem {
        QProblem { enc: Encoding::Q8_0, m: 1, n, k, row_bytes: k / 32 * 34, lhs: 0x1000, w: 0x10_0000 }
    }

    #[test]
    fn one_row_of_short_q8_0_rows_of_large_weights() {
        let t = Tuning::parse("").unwrap();
        // SmolLM2's output projection (49152 x 576, 612-byte rows), Qwen2.5-0.5B's (K = 896)
        assert!(takes(&head(49152, 576), 9, &t));
        assert!(takes(&head(151_936, 896), 9, &t));
        assert!(takes(&head(12289, 960), 9, &t));
        // K past a stage, K not a multiple of 64, small weights, more rows, other encodings,
        // weights off 16 bytes, an older device, the knob off
        assert!(!takes(&head(49152, 1024), 9, &t));
        assert!(!takes(&head(49152, 608), 9, &t));
        assert!(!takes(&head(1000, 576), 9, &t));
        assert!(takes(&head(1000, 576), 9, &Tuning::parse("qgemv.mma=1").unwrap()));
        assert!(!takes(&QProblem { m: 2, ..head(49152, 576) }, 9, &t));
        assert!(!takes(&QProblem { enc: Encoding::Q4_0, row_bytes: 18 * 18, ..head(49152, 576) }, 9, &t));
        assert!(!takes(&QProblem { w: 0x10_0008, ..head(49152, 576) }, 9, &t));
        assert!(!takes(&head(49152, 576), 8, &t));
        // a device of 99 KiB a block (sm_120): K = 576 fits one stage, 768 and more do not
        assert!(takes(&head(49152, 576), 12, &t));
        assert!(!takes(&head(49152, 768), 12, &t));
        assert!(takes(&head(49152, 960), 10, &t));
        assert!(!takes(&head(49152, 576), 9, &Tuning::parse("qgemv.mma=0").unwrap()));
    }

    #[test]
    fn stages_of_sixteen_rows() {
        // K = 576: two stages of 9792 bytes a warp fit a block (227 KiB), K = 960 one; one
        // stage at K = 576 leaves room for two blocks an SM
        assert_eq!(smem(576, 612, 2), 2176 + 8 * 2 * (9792 + 8));
        assert!(smem(576, 612, 2) <= 227 * 1024);
        assert!(smem(960, 1020, 2) > 227 * 1024 && smem(960, 1020, 1) <= 227 * 1024);
        assert!(2 * (smem(576, 612, 1) + 1024) <= 228 * 1024);
    }
}
