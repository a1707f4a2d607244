//! Which kernel a qmatmul takes (a child of quant.rs): the tensor-core GEMV, the streaming or
//! general CUDA-core GEMVs, or a dequantize + GEMM path, by encoding, rows, weight size,
//! alignment, device and tuning knobs.

use super::*;

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
    /// qgemv_mma.cu: integer tensor cores, 1-8 rows of Q4_0/Q4_1/Q4_K, one of Q6_K (`qgemv.mma`).
    Mma,
    /// qgemv_mma_tile.cu: integer tensor cores, one row of Q8_0 whose rows of K <= 960 (off 16
    /// bytes too) go 16 at a time in one bulk copy (`qgemv.mma`).
    MmaTile,
    /// qgemv_stream.cu: persistent, bulk copies, word-decoded encodings over rows of whole 4-byte
    /// words (off 16 bytes for large weights only; `qgemv.stream`).
    Stream,
    /// qgemv.cu: every encoding, up to 8 rows.
    General,
    /// Dequantize to bf16 scratch, then the wgmma GEMM (more than 8 rows on sm_90:
    /// qmatmul_sm90.rs; `qmatmul.wgmma`).
    Wgmma,
    /// Dequantize to f32 scratch, then the f32 GEMM (more than 8 rows elsewhere).
    Gemm,
    /// qgemm_sm90.cu: the quants decoded in a tensor-core GEMM's mainloop (9-64 rows of every
    /// GGUF encoding in 16-byte rows on sm_90, 4-8 of large weights; `qmatmul.qgemm`,
    /// `qmatmul.qgemm_min_rows`).
    Qgemm,
}

/// Weights (n x k) below which 1-2 rows take qgemv.cu by default. An H200, gpu_qmatmul.py
/// --shapes, Q4_0 and Q4_1 alike at M = 1, us a call (tensor-core / streaming / qgemv.cu):
/// 1536 x 1536 3.9 / 6.2 / 3.4, 2048 x 2048 4.0 / 6.5 / 3.6, 1024 x 4096 4.8 / 8.5 / 4.9,
/// 3072 x 2048 4.1 / 6.9 / 4.7, 4096 x 4096 5.9 / 9.9 / 9.5; SmolLM2-135M's Q4_1 down
/// projection (576 x 1536) on qgemv.cu instead of the tensor cores: decode 1,063 -> 1,241 tok/s.
pub(super) const SMALL_WEIGHTS: usize = 3072 * 2048;
/// The same for one row of Q6_K, whose tensor-core kernel joins 6-bit quants from two words
/// and scales every 16 elements: an H200 at M = 1, us a call (tensor-core / qgemv.cu): 4096 x
/// 4096 9.3 / 11.3, 4096 x 14336 (a down projection) 21.7 / 34.3, 128256 x 4096 (an 8B
/// model's output projection) 124 / 294 (before its stage read each word once: 12.3 / 10.9,
/// 29.9 / 34.0, 182 / 291, and the bound was 4096 x 6144). Smaller weights were not measured
/// against each other since, and stay on qgemv.cu.
pub(super) const SMALL_WEIGHTS_Q6K: usize = 4096 * 4096;

/// Weights (n x k) below which 33-64 rows keep the bf16 dequantize + GEMM path instead of
/// qgemm_sm90.cu, whose 64-row kernel has more fixed cost a launch (its split-K sums, a block an
/// SM): an H200, SmolLM2-135M Q4_1 (its 576 x 1536 down projection the only one of 16-byte
/// rows) at 64 sequences 19,490 tok/s with the dequantize path, 19,007 with qgemm (at 16
/// sequences 5,704 and 5,939); an 8B model's 1024 x 4096 k/v projections at 64 rows 21.3 us
/// against 17.6.
pub(super) const QGEMM_SMALL_WEIGHTS: usize = 1536 * 1536;

/// The fewest rows that take qgemm_sm90.cu by default (`qmatmul.qgemm_min_rows`; below 9 rows
/// only weights of at least QGEMM_SMALL_WEIGHTS). An H200, `llm_gpu.py --compare
/// 'qmatmul.qgemm_min_rows=2;qmatmul.qgemm_min_rows=4'` against the GEMVs, tok/s: 8B-shaped Q4_0
/// at 2 sequences 609 / 545 (qgemm from 2), at 4 974 / 1,048 / 1,056, at 8 1,259 / 2,001 /
/// 1,985; 8B-shaped Q4_K at 4 844 / 908, at 8 1,059 / 1,746; SmolLM2-135M Q4_1 (its 576 x 1536
/// down projection, small weights) at 4 3,235 / 3,085 on qgemm, hence the size rule.
pub(super) const QGEMM_MIN_ROWS: usize = 4;

/// The path for `p` on a device of compute capability `arch_major` under the tuning knobs.
///
/// Batch-invariant (`numerics.batch_invariant`), every row count takes qgemv_stream.cu or
/// qgemv.cu (the same per-row sums, fixed whatever MR: quant.rs's `row_groups` runs more
/// than GEMV_MAX_ROWS rows in groups), never qgemv_mma.cu (its lhs goes through fixed point
/// and its K split follows the grid) nor the dequantize + GEMM paths (bf16 weights, a
/// different order).
pub fn select_path(p: &QProblem, arch_major: u32, t: &max_tuning::Tuning) -> QPath {
    let aligned = (p.lhs | p.w).is_multiple_of(16) && p.row_bytes.is_multiple_of(16);
    let invariant = t.batch_invariant();
    // Unless the knobs say otherwise: 1-8 rows of at least SMALL_WEIGHTS weights take the
    // tensor-core kernel; 1-2 rows of fewer take qgemv.cu (the tensor-core kernel's lhs
    // preparation and short tile walks, and the streaming kernel's setup, cost more than
    // qgemv.cu's whole run there); 3-8 rows of fewer keep the streaming kernel.
    let few = p.n.saturating_mul(p.k) < SMALL_WEIGHTS;
    let small = p.m <= 2 && few;
    // (qgemm_sm90.cu from QGEMM_MIN_ROWS rows, as past 8 rows below)
    let qgemm_from = t.int(max_tuning::Knob::QmatmulQgemmMinRows).unwrap_or(QGEMM_MIN_ROWS);
    if !invariant && (qgemm_from..=GEMV_MAX_ROWS).contains(&p.m) && qgemm_takes(p, arch_major, t) {
        return QPath::Qgemm;
    }
    let few_mma = if p.enc == Encoding::Q6K { p.n.saturating_mul(p.k) < SMALL_WEIGHTS_Q6K } else { few };
    let wanted = t.flag(max_tuning::Knob::QgemvMma).unwrap_or(!few_mma);
    let mma = !invariant
        && p.m <= 8
        && (matches!(p.enc, Encoding::Q4_0 | Encoding::Q4_1 | Encoding::Q4K) || (p.enc == Encoding::Q6K && p.m == 1))
        && aligned
        && p.n < i32::MAX as usize
        && mma_gemv_smem(p.enc, p.m, p.k, 2).0 <= QM_PREP_BUDGET
        && wanted
        && arch_major >= 9;
    if mma {
        return QPath::Mma;
    }
    if !invariant && super::mma_tile::takes(p, arch_major, t) {
        return QPath::MmaTile;
    }
    if p.m > GEMV_MAX_ROWS && !invariant {
        // (The wgmma kernels exist for sm_90a only; K is whole blocks, a multiple of 8.)
        let wgmma = arch_major == 9 && p.k.is_multiple_of(8) && t.flag_or(max_tuning::Knob::QmatmulWgmma, true);
        return if qgemm_takes(p, arch_major, t) {
            QPath::Qgemm
        } else if wgmma {
            QPath::Wgmma
        } else {
            QPath::Gemm
        };
    }
    // The streaming kernel copies rows of whole 4-byte words too (their heads and tails off 16
    // bytes word by word), but takes such rows for large weights only (a vocabulary projection
    // of K = 576, Q8_0 rows of 612 bytes, where qgemv.cu's block per 16 rows ran in several
    // waves of round trips to memory); small ones keep qgemv.cu whatever `qgemv.stream` says.
    let words = (p.lhs | p.w).is_multiple_of(16) && p.row_bytes.is_multiple_of(4) && !few;
    let stream = matches!(p.enc, Encoding::Q4_0 | Encoding::Q4_1 | Encoding::Q8_0 | Encoding::Q4K)
        && (aligned || words)
        && p.n < i32::MAX as usize
        && p.k < i32::MAX as usize
        && t.flag(max_tuning::Knob::QgemvStream).unwrap_or(!small)
        && arch_major >= 9;
    if stream { QPath::Stream } else { QPath::General }
}

/// Whether qgemm_sm90.cu takes `p` (sm_90a, the Hopper paths on, `qmatmul.qgemm`; unless the
/// knob says otherwise, small weights at 33-64 rows keep the dequantize path and at 8 rows or
/// fewer the GEMVs: QGEMM_SMALL_WEIGHTS).
fn qgemm_takes(p: &QProblem, arch_major: u32, t: &max_tuning::Tuning) -> bool {
    let wgmma = arch_major == 9 && p.k.is_multiple_of(8) && t.flag_or(max_tuning::Knob::QmatmulWgmma, true);
    let any_size = (GEMV_MAX_ROWS + 1..=32).contains(&p.m);
    let wanted =
        t.flag(max_tuning::Knob::QmatmulQgemm).unwrap_or(any_size || p.n.saturating_mul(p.k) >= QGEMM_SMALL_WEIGHTS);
    wgmma && wanted && super::super::qgemm_sm90::takes(p.enc, p.m, p.n, p.k, p.row_bytes, p.w)
}

#[cfg(test)]
mod tests {
    use max_tuning::Tuning;

    use super::super::{QFold, fold_path};
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
        assert_eq!(path(&problem(Encoding::Q4_0, 3), 9, ""), QPath::Mma);
        // (4-8 rows of these weights take qgemm by default: the GEMVs' choices with it off)
        let gemv = "qmatmul.qgemm_min_rows=9";
        assert_eq!(path(&problem(Encoding::Q4_1, 4), 9, gemv), QPath::Mma);
        assert_eq!(path(&problem(Encoding::Q4_0, 5), 9, gemv), QPath::Mma);
        assert_eq!(path(&problem(Encoding::Q4K, 8), 9, gemv), QPath::Mma);
        // 8 rows of K = 14336 (an 8B model's down projection): the fragments exceed the budget
        let down = QProblem { k: 14336, row_bytes: 14336 / 32 * 18, ..problem(Encoding::Q4_0, 8) };
        assert_eq!(path(&down, 9, gemv), QPath::Stream);
        assert_eq!(path(&QProblem { m: 4, ..down }, 9, gemv), QPath::Stream);
        assert_eq!(path(&QProblem { m: 2, ..down }, 9, ""), QPath::Mma);
        assert_eq!(path(&problem(Encoding::Q4_0, 4), 9, "qgemv.mma=0,qmatmul.qgemm_min_rows=9"), QPath::Stream);
        assert_eq!(path(&problem(Encoding::Q8_0, 1), 9, ""), QPath::Stream);
        // one row of short Q8_0 rows (a vocabulary projection of K = 576): the tile kernel
        let head = QProblem { n: 49152, k: 576, row_bytes: 612, ..problem(Encoding::Q8_0, 1) };
        assert_eq!(path(&head, 9, ""), QPath::MmaTile);
        assert_eq!(path(&head, 9, "qgemv.mma=0"), QPath::Stream);
        assert_eq!(path(&QProblem { m: 2, ..head }, 9, ""), QPath::Stream);
        assert_eq!(path(&head, 9, "numerics.batch_invariant=1"), QPath::Stream);
        // Q6_K: one row of large weights on the tensor cores (rows of whole 16 bytes: 8
        // super-blocks), from 4096 x 4096 on; more rows or smaller weights on qgemv.cu
        let q6_out = QProblem { n: 128_256, ..problem(Encoding::Q6K, 1) };
        assert_eq!(path(&q6_out, 9, ""), QPath::Mma);
        assert_eq!(path(&QProblem { m: 2, ..q6_out }, 9, ""), QPath::General);
        assert_eq!(path(&problem(Encoding::Q6K, 1), 9, ""), QPath::Mma);
        let q6_kv = QProblem { n: 1024, ..problem(Encoding::Q6K, 1) };
        assert_eq!(path(&q6_kv, 9, ""), QPath::General);
        assert_eq!(path(&q6_kv, 9, "qgemv.mma=1"), QPath::Mma);
        assert_eq!(path(&problem(Encoding::Q6K, 1), 9, "qgemv.mma=0"), QPath::General);
        let q6_odd = QProblem { k: 4352, row_bytes: 17 * 210, ..q6_out };
        assert_eq!(path(&q6_odd, 9, ""), QPath::General);
        assert_eq!(path(&problem(Encoding::Q4_0, 1), 8, ""), QPath::General);
        assert_eq!(path(&problem(Encoding::Q4_0, 9), 9, ""), QPath::Qgemm);
        assert_eq!(path(&problem(Encoding::Q4_1, 64), 9, ""), QPath::Qgemm);
        assert_eq!(path(&problem(Encoding::Q4_0, 65), 9, ""), QPath::Wgmma);
        assert_eq!(path(&problem(Encoding::Q4K, 16), 9, ""), QPath::Qgemm);
        assert_eq!(path(&problem(Encoding::Q6K, 64), 9, ""), QPath::Qgemm);
        assert_eq!(path(&problem(Encoding::Q8_0, 16), 9, ""), QPath::Qgemm);
        let q6_odd = QProblem { k: 4352, row_bytes: 17 * 210, ..problem(Encoding::Q6K, 16) };
        assert_eq!(path(&q6_odd, 9, ""), QPath::Wgmma);
        assert_eq!(path(&problem(Encoding::Q4_0, 9), 9, "qmatmul.qgemm=0"), QPath::Wgmma);
        // from 4 rows (qmatmul.qgemm_min_rows) of weights of at least QGEMM_SMALL_WEIGHTS, not
        // batch-invariant
        assert_eq!(path(&problem(Encoding::Q4_0, 4), 9, ""), QPath::Qgemm);
        assert_eq!(path(&problem(Encoding::Q4K, 8), 9, ""), QPath::Qgemm);
        assert_eq!(path(&problem(Encoding::Q4_0, 3), 9, ""), QPath::Mma);
        assert_eq!(path(&problem(Encoding::Q4_0, 8), 9, "qmatmul.qgemm_min_rows=9"), QPath::Mma);
        let smol_down = QProblem { n: 576, k: 1536, row_bytes: 1536 / 32 * 20, ..problem(Encoding::Q4_1, 8) };
        assert_ne!(path(&smol_down, 9, ""), QPath::Qgemm);
        assert_eq!(path(&smol_down, 9, "qmatmul.qgemm=1"), QPath::Qgemm);
        assert_eq!(path(&problem(Encoding::Q6K, 1), 9, "qmatmul.qgemm_min_rows=1"), QPath::Qgemm);
        let spec = "qmatmul.qgemm_min_rows=1,numerics.batch_invariant=1";
        assert_eq!(path(&problem(Encoding::Q4_0, 1), 9, spec), QPath::Stream);
        // SmolLM2's down projection (576 x 1536, Q4_1): qgemm up to 32 rows only
        let down = QProblem { n: 576, k: 1536, row_bytes: 1536 / 32 * 20, ..problem(Encoding::Q4_1, 32) };
        assert_eq!(path(&down, 9, ""), QPath::Qgemm);
        assert_eq!(path(&QProblem { m: 64, ..down }, 9, ""), QPath::Wgmma);
        assert_eq!(path(&QProblem { m: 64, ..down }, 9, "qmatmul.qgemm=1"), QPath::Qgemm);
        assert_eq!(path(&problem(Encoding::Q6K, 512), 9, ""), QPath::Wgmma);
        assert_eq!(path(&problem(Encoding::Q4_0, 9), 8, ""), QPath::Gemm);
        assert_eq!(path(&problem(Encoding::Q4_0, 9), 10, ""), QPath::Gemm);
        assert_eq!(path(&problem(Encoding::Q4_0, 512), 9, "qmatmul.wgmma=0"), QPath::Gemm);
        let unaligned = QProblem { lhs: 0x1004, ..problem(Encoding::Q4_0, 1) };
        assert_eq!(path(&unaligned, 9, ""), QPath::General);
    }

    #[test]
    fn one_or_two_rows_of_small_weights_take_the_general_gemv_unless_told() {
        // SmolLM2's down projection (576 x 1536), and a 2048 x 2048 one: below SMALL_WEIGHTS.
        for (n, k) in [(576, 1536), (2048, 2048)] {
            let (elems, bytes) = Encoding::Q4_1.block();
            let p = QProblem { n, k, row_bytes: k / elems * bytes, ..problem(Encoding::Q4_1, 1) };
            assert_eq!(path(&p, 9, ""), QPath::General, "{n} x {k}");
            assert_eq!(path(&p, 9, "qgemv.mma=1"), QPath::Mma, "{n} x {k}");
            assert_eq!(path(&p, 9, "qgemv.mma=0,qgemv.stream=1"), QPath::Stream, "{n} x {k}");
            // three rows and more keep the streaming kernel
            assert_eq!(path(&QProblem { m: 3, ..p }, 9, ""), QPath::Stream, "{n} x {k}");
        }
        let p = QProblem { n: 3072, k: 2048, row_bytes: 2048 / 32 * 18, ..problem(Encoding::Q4_0, 2) };
        assert_eq!(path(&p, 9, ""), QPath::Mma);
        assert_eq!(path(&p, 9, "qgemv.mma=0"), QPath::Stream);
        let q8 = QProblem { n: 1024, k: 1024, row_bytes: 1024 / 32 * 34, ..problem(Encoding::Q8_0, 1) };
        assert_eq!(path(&q8, 9, ""), QPath::General);
    }

    #[test]
    fn large_weights_of_rows_off_16_bytes_stream_from_one_row() {
        // SmolLM2's Q8_0 output projection (49152 x 576, rows of 612 bytes): the streaming
        // kernel from two rows (one takes the tile kernel); its Q4_1 products (360-byte rows,
        // small) keep qgemv.cu
        let head = QProblem { n: 49152, k: 576, row_bytes: 612, ..problem(Encoding::Q8_0, 1) };
        for m in [2, 3, 8] {
            assert_eq!(path(&QProblem { m, ..head }, 9, ""), QPath::Stream, "{m} rows");
        }
        assert_eq!(path(&head, 9, "qgemv.mma=0"), QPath::Stream);
        assert_eq!(path(&head, 9, "qgemv.mma=0,qgemv.stream=0"), QPath::General);
        assert_eq!(path(&head, 8, ""), QPath::General);
        let small = QProblem { n: 576, k: 576, row_bytes: 360, ..problem(Encoding::Q4_1, 1) };
        for m in [1, 3, 8] {
            assert_eq!(path(&QProblem { m, ..small }, 9, "qmatmul.qgemm_min_rows=9"), QPath::General, "{m} rows");
        }
        // rows of whole 2-byte units only (Q4_0 at K = 32 x odd) never stream
        let odd = QProblem { n: 49152, k: 1056, row_bytes: 1056 / 32 * 18, ..problem(Encoding::Q4_0, 1) };
        assert_eq!(path(&QProblem { m: 1, ..odd }, 9, "qgemv.mma=0"), QPath::General);
        assert_eq!(path(&QProblem { m: 1, ..odd }, 9, "qgemv.mma=0,qgemv.stream=1"), QPath::General);
    }

    #[test]
    fn batch_invariant_rows_take_the_gemv_kernels_whatever_their_count() {
        let bi = "numerics.batch_invariant=1";
        for m in [1, 2, 3, 8, 9, 64, 512] {
            assert_eq!(path(&problem(Encoding::Q4_0, m), 9, bi), QPath::Stream, "m={m}");
            assert_eq!(path(&problem(Encoding::Q6K, m), 9, bi), QPath::General, "m={m}");
            assert_eq!(path(&problem(Encoding::Q4_1, m), 8, bi), QPath::General, "m={m}");
        }
        // (the two kernels give the same bits: a misaligned group may take the other one)
        let unaligned = QProblem { lhs: 0x1004, ..problem(Encoding::Q4_0, 64) };
        assert_eq!(path(&unaligned, 9, bi), QPath::General);
        let t = Tuning::parse(bi).unwrap();
        let fold = QFold { gated: true, ..QFold::default() };
        let pair = [(0x10_0000, 0x20_0000, 1536), (0x30_0000, 0, 1536)];
        assert_eq!(fold_path(Encoding::Q4_0, 0x1000, &fold, &pair, (1, 4096, 4096 / 32 * 18), 9, &t), None);
    }

    #[test]
    fn qgemv_knobs_change_the_path() {
        let p = problem(Encoding::Q4_0, 1);
        assert_eq!(path(&p, 9, "qgemv.mma=0"), QPath::Stream);
        assert_eq!(path(&p, 9, "qgemv.mma=0,qgemv.stream=0"), QPath::General);
        let q8 = problem(Encoding::Q8_0, 4);
        assert_eq!(path(&q8, 9, "qgemv.stream=off,qmatmul.qgemm_min_rows=9"), QPath::General);
    }
}
