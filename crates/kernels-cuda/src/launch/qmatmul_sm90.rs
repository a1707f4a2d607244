//! qmatmul on many lhs rows on Hopper (prefill): the weights are dequantized into a bf16 scratch
//! [nc, k] as stored (kernels/quant.cu, `dequant_rows_bf16_*`), the f32 lhs rows are rounded to
//! bf16, and the wgmma GEMM (kernels/gemm_sm90p.cu, its `_f32` kernels, which read W K-major
//! without a transpose) writes the f32 result with the residual added in its epilogue.
//!
//! Precision: bf16 operands, f32 accumulation. The weights lose their bits past bf16's 8 (a
//! 4-bit quant times an f16 scale needs up to 14), the activations theirs past 8: each product
//! within about 2^-8 of its exact value. That is the trade llama.cpp makes with its 8-bit
//! activations for the same products; the f32 SIMT GEMM before measured 1.2 s of a 1.3 s
//! 512-token prefill of a Llama-3-8B-shaped model on an H200.
//!
//! Scratch: the weights of `nc` rows at a time (all of them up to [`WEIGHT_BUDGET`]: every
//! matrix of an 8B model but its vocabulary projection) and the bf16 lhs of `mc` rows, both
//! stream-ordered allocations as the other scratch of this crate.

use std::sync::Arc;

use cudarc::driver::{CudaStream, PushKernelArg};
use max_graph::DType;

use super::conv::{Scratch, grid};
use super::epilogue::{Act, Epilogue};
use super::quant::Encoding;
use crate::sources::QUANT;
use crate::{Error, Result, function};

/// Bytes of bf16 weights dequantized at once.
pub const WEIGHT_BUDGET: usize = 256 << 20;
/// Bytes of bf16 lhs rows converted at once.
pub const LHS_BUDGET: usize = 64 << 20;

/// (weight rows per chunk, lhs rows per chunk) for an [m, k] x [n, k]^T product: chunks of
/// weight rows are whole 256-column tiles of the GEMM (when there is more than one chunk), and
/// every chunk keeps at least one tile's worth of rows.
pub fn chunks(m: usize, n: usize, k: usize) -> (usize, usize) {
    let per_w = (WEIGHT_BUDGET / (2 * k.max(1))) / 256 * 256;
    let nc = per_w.max(256).min(n.max(1));
    let mc = (LHS_BUDGET / (2 * k.max(1))).max(128).min(m.max(1));
    (nc, mc)
}

/// out [m, n] = lhs [m, k] @ dequantize(w)^T (+ res [m, n], when nonzero), w [n, row_bytes];
/// lhs, out and res of `dtype`; k % 8 == 0 (whole blocks are multiples of 32 elements). f32 and
/// f16 lhs are rounded to bf16 in a scratch (bf16 lhs is read in place); a 16-bit result goes
/// through an f32 scratch of the chunk, stored rounded to `dtype` with the residual added.
pub fn qmatmul(
    stream: &Arc<CudaStream>,
    enc: Encoding,
    dtype: DType,
    (lhs, w, out): (u64, u64, u64),
    res: u64,
    (m, n, k, row_bytes): (usize, usize, usize, usize),
) -> Result<()> {
    if m == 0 || n == 0 {
        return Ok(());
    }
    let Some(tname) = super::cast_name(dtype).filter(|_| super::quant::act_suffix(dtype).is_ok()) else {
        return Err(Error::Unsupported(format!("qmatmul with {dtype} activations")));
    };
    let deq = function(stream.context(), &QUANT, &format!("dequant_rows_bf16_{}", enc.name().to_ascii_lowercase()))?;
    let (nc, mc) = chunks(m, n, k);
    let es = dtype.size_in_bytes();
    let w16 = Scratch::new(stream, nc * k * 2)?;
    // bf16 lhs (16-byte aligned; rows of k % 8 == 0 elements stay so) is the GEMM's A as it is.
    let in_place = dtype == DType::BFloat16 && lhs % 16 == 0;
    let a16 = Scratch::new(stream, if in_place { 16 } else { mc * k * 2 })?;
    let a_at = |m0: usize| if in_place { lhs + (m0 * k * 2) as u64 } else { a16.ptr() };
    let convert = |m0: usize, rows: usize| {
        if in_place {
            return Ok(());
        }
        super::cast(stream, lhs + (m0 * k * es) as u64, dtype, a16.ptr(), DType::BFloat16, (rows * k) as u64)
    };
    // 16-bit results: the f32 product of a chunk, then store_cols_<dtype> (plus the residual).
    let narrow = dtype != DType::Float32;
    let c32 = if narrow { Some(Scratch::new(stream, mc.min(m) * nc * 4)?) } else { None };
    let store = function(stream.context(), &QUANT, &format!("store_cols_{tname}"))?;
    let whole = mc >= m;
    if whole {
        convert(0, m)?;
    }
    if nc * k / 8 > i32::MAX as usize {
        return Err(Error::Unsupported(format!("qmatmul: a chunk of {nc} x {k} weights is too large")));
    }
    for n0 in (0..n).step_by(nc) {
        let ncur = (n - n0).min(nc);
        let (wp, rb, ki, n0i, nci) = (w16.ptr(), row_bytes as i64, k as i64, n0 as i64, ncur as i64);
        let mut l = stream.launch_builder(&deq);
        l.arg(&w).arg(&wp).arg(&rb).arg(&ki).arg(&n0i).arg(&nci);
        // SAFETY: w16 holds nc x k bf16 (16-byte aligned, k % 8 == 0); rows n0 .. n0 + ncur of w
        // exist, each of row_bytes holding k elements.
        unsafe { l.launch(grid((ncur * k / 8) as u64)) }.map_err(Error::driver("cuLaunchKernel(dequant_rows)"))?;
        for m0 in (0..m).step_by(mc) {
            let rows = (m - m0).min(mc);
            if !whole {
                convert(m0, rows)?;
            }
            let Some(c) = &c32 else {
                let at = ((m0 * n + n0) * 4) as u64;
                let epi = Epilogue::new(None, Act::None, (res != 0).then_some(res + at));
                super::gemm_sm90::gemm_bt_f32(stream, (a_at(m0), w16.ptr(), out + at), (rows, ncur, k), n, &epi)?;
                continue;
            };
            let epi = Epilogue::new(None, Act::None, None);
            super::gemm_sm90::gemm_bt_f32(stream, (a_at(m0), w16.ptr(), c.ptr()), (rows, ncur, k), ncur, &epi)?;
            let (cp, o) = (c.ptr(), out + (m0 * n * es) as u64);
            let r = if res == 0 { 0 } else { res + (m0 * n * es) as u64 };
            let (ri, nci, ni, n0i) = (rows as i64, ncur as i64, n as i64, n0 as i64);
            let mut l = stream.launch_builder(&store);
            l.arg(&cp).arg(&o).arg(&r).arg(&ri).arg(&nci).arg(&ni).arg(&n0i);
            // SAFETY: c holds rows x ncur f32; out (and res) rows m0 .. m0 + rows of n columns of
            // dtype.
            unsafe { l.launch(grid((rows * ncur) as u64)) }.map_err(Error::driver("cuLaunchKernel(store_cols)"))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_matrices_of_an_8b_model_take_one_chunk() {
        for (n, k) in [(4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336)] {
            assert_eq!(chunks(512, n, k), (n, 512), "{n} x {k}");
        }
    }

    #[test]
    fn a_vocabulary_projection_takes_chunks_of_whole_tiles() {
        let (nc, mc) = chunks(512, 128_256, 4096);
        assert_eq!(nc, 32768);
        assert_eq!(nc % 256, 0);
        assert!(nc * 4096 * 2 <= WEIGHT_BUDGET);
        assert_eq!(mc, 512);
    }

    #[test]
    fn long_prompts_convert_lhs_in_chunks_within_the_budget() {
        let (_, mc) = chunks(100_000, 4096, 14336);
        assert!(mc * 14336 * 2 <= LHS_BUDGET && mc >= 128 && mc < 100_000);
        // Huge K still gets a tile of rows of each.
        assert_eq!(chunks(1000, 1000, 1 << 30), (256, 128));
        assert_eq!(chunks(1, 1, 32), (1, 1));
    }
}
