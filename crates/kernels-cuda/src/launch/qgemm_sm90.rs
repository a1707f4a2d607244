//! qmatmul with up to [`MAX_ROWS`] lhs rows (9 and more; from 4 by default for large weights:
//! qgemv_path.rs) over GGUF block weights on Hopper (sm_90a):
//! kernels/qgemm_sm90.cu decodes the quants into the tensor-core MMA's register operand in its
//! mainloop (mma.sync up to 32 lhs rows, wgmma at 64), where the path before
//! ([`super::qmatmul_sm90`]) dequantized whole matrices into a bf16 scratch and ran the GEMM
//! on it. The lhs is rounded to bf16 first (in place when it is bf16);
//! the result and residual keep the activations' type.
//!
//! Work: blocks of 128 weight rows, each over a run of K's 256-element chunks; split-K where
//! the weight rows alone leave SMs idle (a layer's k and v projections, its output and down
//! projections at 8B shapes), the parts summed in order by the last block of each tile.

use std::sync::Arc;

use cudarc::driver::{CudaStream, result, sys};
use max_graph::DType;

use super::conv::Scratch;
use super::quant::Encoding;
use super::tma::{self, TmaMap};
use crate::{Error, Result, function};

/// The most lhs rows one launch takes (the kernel's wgmma N).
pub const MAX_ROWS: usize = 64;
/// K elements per stage, weight rows per block, most stages (qgemm_sm90.cu's QG_BK, 2 x
/// QG_ROWS, the bound of Qg::STAGES).
const BK: usize = 256;
const BLOCK_ROWS: usize = 128;
const MAX_STAGES: usize = 4;

/// The kernel's lhs rows (wgmma's N: 16, 32 or 64) for `m` rows: the fewest that hold them.
fn tile_rows(m: usize) -> usize {
    match m {
        0..=16 => 16,
        17..=32 => 32,
        _ => 64,
    }
}

/// Whether the kernel takes a product of `m` rows over `w` [n, row_bytes] of `enc` (every GGUF
/// block encoding): K whole blocks (and not zero), rows of whole 16 bytes at a 16-byte aligned
/// address (TMA; Q4_0 and Q8_0: K a multiple of 256, Q6_K of 2048), at most MAX_ROWS rows,
/// sizes within i32 (K with its last chunk's coordinates).
pub fn takes(enc: Encoding, m: usize, n: usize, k: usize, row_bytes: usize, w: u64) -> bool {
    use Encoding::*;
    let (elems, bytes) = enc.block();
    let kernel = matches!(enc, Q4_0 | Q4_1 | Q8_0 | Q4K | Q5K | Q6K);
    kernel
        && (1..=MAX_ROWS).contains(&m)
        && k > 0
        && k.is_multiple_of(elems)
        && row_bytes == k / elems * bytes
        && row_bytes.is_multiple_of(16)
        && w.is_multiple_of(16)
        && n < i32::MAX as usize
        && k <= i32::MAX as usize - BK
        && row_bytes <= i32::MAX as usize - slot(enc)
}

/// A weight row's bytes in one stage, the box it is read in (qgemm_sm90.cu's QgChunk::SLOT):
/// the chunk's bytes, plus the most a chunk starts into the 16 bytes at or below it (Q6_K's
/// 210-byte super-blocks: 14, a 224-byte box).
fn slot(enc: Encoding) -> usize {
    let (elems, bytes) = enc.block();
    let chunk = BK / elems * bytes;
    let align = [16, 8, 4, 2].into_iter().find(|a| chunk.is_multiple_of(*a)).unwrap_or(1);
    (chunk + 16 - align).next_multiple_of(16)
}

/// Dynamic shared memory for `nl` lhs rows: the stages (lhs boxes and both consumers' weight
/// rows, whole KiB), the alignment slack and the barriers.
fn smem_bytes(enc: Encoding, nl: usize) -> usize {
    let stage = (nl * BK * 2 + BLOCK_ROWS * slot(enc)).next_multiple_of(1024);
    stages(enc, nl, stage) * stage + 1024 + 128
}

/// Stages of `stage` bytes (qgemm_sm90.cu's Qg::STAGES): with two blocks an SM as many as let
/// them share it (113 KiB each with the alignment slack and barriers), with one as many as fit
/// 227 KiB; at most MAX_STAGES.
fn stages(enc: Encoding, nl: usize, stage: usize) -> usize {
    let kib = if blocks_per_sm(enc, nl) == 1 { 227 } else { 113 };
    ((kib * 1024 - 1152) / stage).min(MAX_STAGES)
}

/// Blocks an SM holds at once (qgemm_sm90.cu's Qg::BLOCKS, its launch bound): one at 64 lhs
/// rows, and for Q5_K at 32 (their registers exceed two blocks' 80 a thread).
fn blocks_per_sm(enc: Encoding, nl: usize) -> usize {
    if nl == 64 || (nl == 32 && enc == Encoding::Q5K) { 1 } else { 2 }
}

/// (K parts, chunks per part) for `tiles` blocks of weight rows over `chunks` chunks of K with
/// `slots` blocks resident at once: enough parts to fill them, at most one per chunk.
pub fn plan(tiles: usize, chunks: usize, slots: usize) -> (usize, usize) {
    let want = (slots / tiles.max(1)).clamp(1, chunks.max(1));
    let per = chunks.div_ceil(want).max(1);
    (chunks.div_ceil(per).max(1), per)
}

/// The TMA map of `n` weight rows of `row_bytes` (a multiple of 16) read in boxes of `rows` rows
/// x `slot` bytes: qgemv_mma's 2-D map of bytes, or where the box is wider than TMA's 256
/// elements (Q8_0's 272 bytes) a 3-D map of the same bytes as [n][row_bytes / 16][16]
/// (qgemm_sm90.cu's qg_load_w).
fn weight_map(w: u64, row_bytes: usize, n: usize, slot: usize, rows: usize) -> Result<TmaMap> {
    if slot <= 256 {
        return super::quant::weight_map(w, row_bytes, n, slot as u32, rows as u32);
    }
    tma::tiled(
        sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_UINT8,
        w,
        &[16, (row_bytes / 16) as u64, n as u64],
        &[16, row_bytes as u64],
        &[16, (slot / 16) as u32, rows as u32],
        sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_NONE,
    )
    .map_err(Error::driver("cuTensorMapEncodeTiled(qgemm weights)"))
}

/// Sibling products in one launch (qgemm_sm90.cu's QG_SEGS).
pub const SEGS: usize = 3;

/// The kernel's arguments (qgemm_sm90.cu's QgArgs).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct QgArgs {
    out: [u64; SEGS],
    res: u64,
    ws: u64,
    counters: u64,
    n: [i32; SEGS],
    first: [i32; SEGS + 1],
    count: i32,
    m: i32,
    chunks: i32,
    splits: i32,
    per: i32,
}

/// The weight maps of a launch (qgemm_sm90.cu's QgMaps).
#[repr(C)]
struct QgMaps([TmaMap; SEGS]);

/// out [m, n] = lhs [m, k] @ dequantize(w)^T (+ res [m, n], 0 for none) for each part `(w, out,
/// n)` of `parts` (1 to [`SEGS`] siblings of one lhs, one launch; `res` with one part only);
/// `gated`: two parts of equal n, silu(lhs @ w0^T) * (lhs @ w1^T) into the first part's out.
/// lhs, outputs and res of `dtype` (f32, bf16, f16); each part passes [`takes`].
pub fn qgemm(
    stream: &Arc<CudaStream>,
    enc: Encoding,
    dtype: DType,
    lhs: u64,
    parts: &[(u64, u64, usize)],
    res: u64,
    gated: bool,
    (m, k, row_bytes): (usize, usize, usize),
) -> Result<()> {
    let bad_pair = gated && (parts.len() != 2 || parts[0].2 != parts[1].2 || res != 0);
    let fits = parts.iter().all(|&(w, _, n)| takes(enc, m, n, k, row_bytes, w));
    if parts.is_empty() || parts.len() > SEGS || (res != 0 && parts.len() > 1) || bad_pair || !fits {
        let what = format!("{} with {m} rows, {} parts of {k} columns", enc.name(), parts.len());
        return Err(Error::Unsupported(format!("qgemm_sm90: {what}")));
    }
    super::quant::act_suffix(dtype)?;
    let tname = super::cast_name(dtype).unwrap_or_default();
    let nl = tile_rows(m);
    let gt = if gated { "_gt" } else { "" };
    let name = format!("qgemm_sm90_{}_n{nl}{gt}_{tname}", enc.name().to_ascii_lowercase());
    let f = function(stream.context(), crate::sources::qgemm(&enc.name().to_ascii_lowercase())?, &name)?;
    let smem = smem_bytes(enc, nl) as u32;
    crate::allow_smem(stream.context(), &f, smem)?;
    // Blocks of BLOCK_ROWS weight rows of each segment (gated: BLOCK_ROWS / 2 of each weight).
    let segs = if gated { &parts[..1] } else { parts };
    let block_rows = if gated { BLOCK_ROWS / 2 } else { BLOCK_ROWS };
    let mut first = [0i32; SEGS + 1];
    let mut tiles = 0usize;
    for (i, &(_, _, n)) in segs.iter().enumerate() {
        first[i] = tiles as i32;
        tiles += n.div_ceil(block_rows);
    }
    first[segs.len()..].fill(tiles as i32);
    let chunks = k.div_ceil(BK);
    let (splits, per) = plan(tiles, chunks, super::sm_count(stream)? * blocks_per_sm(enc, nl));
    // Split-K needs a ticket counter per tile (the stream's, else zeroed in the workspace).
    let tickets = if splits > 1 { super::tickets::for_stream(stream, tiles)? } else { None };
    let counters_bytes = if splits > 1 && tickets.is_none() { (tiles * 4).next_multiple_of(256) } else { 0 };
    // Workspace: the bf16 lhs (unless read in place), then the counters and f32 partials (a
    // partial tile: nl lhs rows x BLOCK_ROWS weight rows).
    let in_place = dtype == DType::BFloat16 && lhs.is_multiple_of(16);
    let lhs_bytes = if in_place { 0 } else { (m * k * 2).next_multiple_of(256) };
    let part_bytes = if splits > 1 { tiles * splits * nl * BLOCK_ROWS * 4 } else { 0 };
    let ws_bytes = lhs_bytes + counters_bytes + part_bytes;
    let shared = if ws_bytes > 0 { super::scratch::for_stream(stream, ws_bytes)? } else { None };
    let own = if ws_bytes > 0 && shared.is_none() { Some(Scratch::new(stream, ws_bytes)?) } else { None };
    let ws = shared.or(own.as_ref().map(Scratch::ptr)).unwrap_or(0);
    let a = if in_place { lhs } else { ws };
    if !in_place {
        super::cast(stream, lhs, dtype, a, DType::BFloat16, (m * k) as u64)?;
    }
    let counters = match tickets {
        Some(t) => t,
        None if counters_bytes > 0 => {
            let at = ws + lhs_bytes as u64;
            // SAFETY: the counters lie inside the workspace, which holds ws_bytes.
            unsafe { result::memset_d8_async(at, 0, counters_bytes, stream.cu_stream()) }
                .map_err(Error::driver("cuMemsetD8Async"))?;
            at
        }
        None => 0,
    };
    let mut map_l = tma::tiled(
        tma::half_type(DType::BFloat16),
        a,
        &[k as u64, m as u64],
        &[(k * 2) as u64],
        &[64, nl as u32],
        sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
    )
    .map_err(Error::driver("cuTensorMapEncodeTiled(qgemm lhs)"))?;
    // Boxes of a consumer's rows: 64 of one weight, or 32 of each of a gated pair.
    let box_rows = if gated { BLOCK_ROWS / 4 } else { BLOCK_ROWS / 2 };
    let mut maps = QgMaps([TmaMap([0; 16]); SEGS]);
    for (map, &(w, _, n)) in maps.0.iter_mut().zip(parts) {
        *map = weight_map(w, row_bytes, n, slot(enc), box_rows)?;
    }
    let (mut out, mut n) = ([0u64; SEGS], [0i32; SEGS]);
    for (i, &(_, o, rows)) in segs.iter().enumerate() {
        (out[i], n[i]) = (o, rows as i32);
    }
    let mut args = QgArgs {
        out,
        res,
        ws: if part_bytes > 0 { ws + (lhs_bytes + counters_bytes) as u64 } else { 0 },
        counters,
        n,
        first,
        count: segs.len() as i32,
        m: m as i32,
        chunks: chunks as i32,
        splits: splits as i32,
        per: per as i32,
    };
    let mut params: [*mut std::ffi::c_void; 3] =
        [&mut map_l as *mut TmaMap as *mut _, &mut maps as *mut QgMaps as *mut _, &mut args as *mut QgArgs as *mut _];
    let grid = tiles * splits;
    // SAFETY: the parameters match the kernel's (the lhs map, QgMaps, QgArgs) by value and live
    // across the call; the lhs map covers m x k bf16 (a 16-byte aligned allocation of the caller
    // or the workspace, rows of k % 8 == 0 elements), each weight map its part's n rows of
    // row_bytes; each out (and res) holds m x n of dtype; the workspace holds the partials and
    // counters of the `tiles` blocks of rows.
    unsafe {
        super::launch_ex(
            stream,
            &f,
            (grid as u32, 384, smem),
            &mut params,
            super::pdl::Pdl::OFF,
            "cuLaunchKernelEx(qgemm_sm90)",
        )
    }?;
    drop(own);
    super::record::record("qgemm", || {
        let fields = vec![
            ("splits", splits as i64),
            ("blocks", grid as i64),
            ("rows", nl as i64),
            ("segments", segs.len() as i64),
            ("gated", gated as i64),
            ("in_place", in_place as i64),
        ];
        (name.clone(), fields)
    });
    Ok(())
}

/// Every kernel name the launcher can form for the encoding `enc` (`q4_0`, ...: its family's),
/// with the byte sizes of its three parameters (the lhs map, the weight maps, the arguments):
/// for the compile tests.
pub fn kernels(enc: &str) -> Vec<(String, [usize; 3])> {
    let sizes = [size_of::<TmaMap>(), size_of::<QgMaps>(), size_of::<QgArgs>()];
    let mut all = Vec::new();
    for nl in [16, 32, 64] {
        for gt in ["", "_gt"] {
            for t in ["f32", "bf16", "f16"] {
                all.push((format!("qgemm_sm90_{enc}_n{nl}{gt}_{t}"), sizes));
            }
        }
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_k_fills_the_sms_with_whole_chunks() {
        // An 8B layer on 132 SMs: q / o (32 blocks of 16 chunks), k / v (8 of 16), gate / up
        // (112 of 16), down (32 of 56).
        assert_eq!(plan(32, 16, 132), (4, 4));
        assert_eq!(plan(8, 16, 132), (16, 1));
        assert_eq!(plan(112, 16, 132), (1, 16));
        assert_eq!(plan(32, 56, 132), (4, 14));
        // never more parts than chunks, nor an empty part
        assert_eq!(plan(1, 3, 132), (3, 1));
        assert_eq!(plan(5, 5, 132), (5, 1));
        let (splits, per) = plan(3, 10, 16);
        assert!(splits * per >= 10 && (splits - 1) * per < 10, "{splits} x {per}");
    }

    #[test]
    fn the_stages_fit_a_block() {
        for enc in Encoding::ALL {
            for m in [9, 16, 17, 32, 33, 64] {
                // two blocks an SM (228 KiB, 1 KiB reserved a block) below 33 rows, two stages
                // at least; one block of 227 KiB at most above
                let nl = tile_rows(m);
                let blocks = blocks_per_sm(enc, nl);
                assert!(blocks * (smem_bytes(enc, nl) + 1024) <= 228 * 1024, "{enc:?} {m}");
                assert!(smem_bytes(enc, nl) <= 227 * 1024, "{enc:?} {m}");
                assert!(stages(enc, nl, (nl * BK * 2 + BLOCK_ROWS * slot(enc)).next_multiple_of(1024)) >= 2);
            }
        }
        assert_eq!((tile_rows(9), tile_rows(16), tile_rows(17), tile_rows(33), tile_rows(64)), (16, 16, 32, 64, 64));
        assert_eq!(slot(Encoding::Q4_0), 144);
        assert_eq!(slot(Encoding::Q4_1), 160);
        assert_eq!(slot(Encoding::Q4K), 144);
        assert_eq!((slot(Encoding::Q5K), slot(Encoding::Q8_0)), (176, 272));
        // 210 bytes starting up to 14 bytes into a 16-byte aligned box
        assert_eq!(slot(Encoding::Q6K), 224);
        let q6k_64 = (64 * BK * 2 + BLOCK_ROWS * 224).next_multiple_of(1024);
        let q6k_16 = (16 * BK * 2 + BLOCK_ROWS * 224).next_multiple_of(1024);
        assert_eq!((stages(Encoding::Q6K, 64, q6k_64), stages(Encoding::Q6K, 16, q6k_16)), (3, 3));
    }

    #[test]
    fn arguments_match_the_kernel_layout() {
        // qgemm_sm90.cu's QgArgs: out[3], res, ws, counters, n[3], first[4], count, m, chunks,
        // splits, per; QgMaps: three 128-byte maps
        assert_eq!(std::mem::offset_of!(QgArgs, n), 48);
        assert_eq!(std::mem::offset_of!(QgArgs, first), 60);
        assert_eq!(std::mem::offset_of!(QgArgs, per), 92);
        assert_eq!(size_of::<QgArgs>(), 96);
        assert_eq!((size_of::<QgMaps>(), std::mem::align_of::<QgMaps>()), (384, 64));
    }

    #[test]
    fn rows_of_whole_16_bytes_only() {
        let q40 = |k: usize| k / 32 * 18;
        assert!(takes(Encoding::Q4_0, 64, 4096, 4096, q40(4096), 0x1000));
        assert!(!takes(Encoding::Q4_0, 65, 4096, 4096, q40(4096), 0x1000));
        assert!(!takes(Encoding::Q4_0, 16, 576, 576, q40(576), 0x1000));
        assert!(!takes(Encoding::Q4_0, 16, 4096, 4096, q40(4096), 0x1008));
        assert!(takes(Encoding::Q4_1, 16, 300, 384, 384 / 32 * 20, 0x1000));
        assert!(takes(Encoding::Q4K, 16, 4096, 4096, 4096 / 256 * 144, 0x1000));
        assert!(takes(Encoding::Q4K, 16, 4096, 1280, 1280 / 256 * 144, 0x1000));
        // Q6_K: rows of whole 16 bytes from K = 2048 (8 super-blocks) on
        assert!(takes(Encoding::Q6K, 64, 128_256, 4096, 4096 / 256 * 210, 0x1000));
        assert!(takes(Encoding::Q6K, 9, 4096, 14336, 14336 / 256 * 210, 0x1000));
        assert!(!takes(Encoding::Q6K, 16, 4096, 1280, 1280 / 256 * 210, 0x1000));
        assert!(takes(Encoding::Q8_0, 16, 4096, 4096, 4096 / 32 * 34, 0x1000));
        assert!(!takes(Encoding::Q8_0, 16, 4096, 4000, 4000 / 32 * 34, 0x1000));
        assert!(takes(Encoding::Q5K, 40, 1024, 512, 512 / 256 * 176, 0x1000));
        // K of whole blocks only, and not zero
        assert!(!takes(Encoding::Q4_0, 16, 4096, 4104, q40(4096), 0x1000));
        assert!(!takes(Encoding::Q4_0, 16, 4096, 0, 0, 0x1000));
    }
}
