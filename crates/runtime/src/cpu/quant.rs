//! Host kernels of the quantized ops: dequantize (GGUF blocks to float32) and qmatmul,
//! `lhs[..., K] @ dequantize(rhs)^T` with rhs `[N, K_bytes]`, or GPTQ (see quant/gptq.rs).
//!
//! qmatmul never materialises the whole dequantized matrix: the N weight rows are decoded in
//! tiles (a few dozen rows, about a megabyte), each multiplied with gemm into its columns of
//! the result; tiles run in parallel.

mod blocks;
mod dot;
#[cfg(target_arch = "x86_64")]
mod dot_avx2;
#[cfg(target_arch = "x86_64")]
mod dot_avx512;
#[cfg(test)]
mod dot_bench;
#[cfg(target_arch = "x86_64")]
mod dot_panel;
#[cfg(target_arch = "x86_64")]
mod dot_panel_k;
mod dot_scalar;
#[cfg(test)]
mod dot_tests;
mod gptq;
mod q8act;
#[cfg(test)]
mod tests;

use std::borrow::Cow;

use gemm::{Parallelism, gemm};
use max_graph::DType;
use max_graph::ops::Op;
use rayon::prelude::*;

pub use blocks::{Decode, Encoding};

use super::cast::{Canon, Elem};
use super::indexing::{bytes, bytes_mut};
use crate::operands::{GptqCall, QuantCall, dequantize_geometry, gptq_call, lhs_rows, qmatmul_geometry, quant_call};
use crate::{Buffer, Error, Result};

pub fn run(op: &Op, inputs: &[Buffer], outputs: &[Buffer]) -> Result<()> {
    match quant_call(op, inputs, outputs, "CPU")? {
        (QuantCall::Dequantize { enc, x }, out) => dequantize(op, enc, x, out),
        (QuantCall::Gptq, out) => qmatmul_gptq(op, inputs, out),
        (QuantCall::Block { enc, lhs, rhs }, out) => qmatmul(op, enc, lhs, rhs, out),
    }
}

/// A host buffer's f32 values, borrowed when aligned.
fn f32s(b: &Buffer) -> Cow<'_, [f32]> {
    let raw = bytes(b);
    if (b.addr() as usize).is_multiple_of(std::mem::align_of::<f32>()) {
        // SAFETY: aligned, and raw holds raw.len() / 4 whole f32 values.
        Cow::Borrowed(unsafe { std::slice::from_raw_parts(raw.as_ptr().cast::<f32>(), raw.len() / 4) })
    } else {
        Cow::Owned(raw.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
    }
}

/// Runs `f` on the output's f32 values (through a temporary when it is not aligned).
fn with_f32_out(out: &Buffer, f: impl FnOnce(&mut [f32])) {
    // SAFETY: out is this step's own output buffer.
    let raw = unsafe { bytes_mut(out) };
    if (out.addr() as usize).is_multiple_of(std::mem::align_of::<f32>()) {
        // SAFETY: aligned, and raw holds raw.len() / 4 whole f32 values.
        f(unsafe { std::slice::from_raw_parts_mut(raw.as_mut_ptr().cast::<f32>(), raw.len() / 4) });
    } else {
        let mut tmp = vec![0f32; raw.len() / 4];
        f(&mut tmp);
        for (c, v) in raw.chunks_exact_mut(4).zip(tmp) {
            c.copy_from_slice(&v.to_le_bytes());
        }
    }
}

/// float32 values of quantized uint8 `[..., K_bytes]` as `[..., K]`; blocks decode in parallel.
fn dequantize(op: &Op, enc: Encoding, x: &Buffer, out: &Buffer) -> Result<()> {
    dequantize_geometry(op, enc, x, out)?;
    let (elems, nbytes) = enc.block();
    let src = bytes(x);
    with_f32_out(out, |dst| {
        const PER_TASK: usize = 64; // blocks
        if dst.len() < 1 << 15 {
            enc.decode_blocks(src, dst);
        } else {
            dst.par_chunks_mut(elems * PER_TASK)
                .zip(src.par_chunks(nbytes * PER_TASK))
                .for_each(|(o, s)| enc.decode_blocks(s, o));
        }
    });
    Ok(())
}

/// `out[i, j] = sum_k lhs[i, k] * w_j[k]` for `lhs` `[m, k]` and `out` `[m, n]`, where
/// `column(j, buf)` writes the k weights `w_j`. Tiles of columns are decoded and multiplied
/// in parallel, each with one gemm into its columns of `out`.
fn matmul_columns(
    lhs: &[f32],
    m: usize,
    k: usize,
    n: usize,
    out: &mut [f32],
    column: impl Fn(usize, &mut [f32]) + Sync,
) {
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        out.fill(0.0);
        return;
    }
    let threads = rayon::current_num_threads().max(1);
    // Tiles of about a megabyte of decoded weights, at least two per thread when n allows.
    let tile = (262_144 / k).clamp(4, 64).min(n.div_ceil(2 * threads)).max(1);
    let tiles = n.div_ceil(tile);
    let inner = if tiles >= threads || threads == 1 { Parallelism::None } else { Parallelism::Rayon(threads) };
    let dst = out.as_mut_ptr() as usize;
    let body = |t: usize| {
        let (j0, cols) = (t * tile, tile.min(n - t * tile));
        let mut w = vec![0f32; cols * k];
        for (c, row) in w.chunks_exact_mut(k).enumerate() {
            column(j0 + c, row);
        }
        // SAFETY: lhs is [m, k] row-major, w holds `cols` rows of k (read as a [k, cols] matrix
        // with column stride k), and this tile writes only columns j0..j0+cols of the [m, n]
        // output, which no other tile touches.
        unsafe {
            gemm(
                m,
                cols,
                k,
                (dst as *mut f32).add(j0),
                1,
                n as isize,
                false,
                lhs.as_ptr(),
                1,
                k as isize,
                w.as_ptr(),
                k as isize,
                1,
                0.0f32,
                1.0f32,
                false,
                false,
                false,
                inner,
            )
        };
    };
    if tiles == 1 || threads == 1 {
        (0..tiles).for_each(body);
    } else {
        (0..tiles).into_par_iter().for_each(body);
    }
}

/// Leading rows of lhs `[..., k]` (its last dim must be `k`).
fn qmatmul(op: &Op, enc: Encoding, lhs: &Buffer, rhs: &Buffer, out: &Buffer) -> Result<()> {
    // The block products here are float32 only (16-bit activations are the GPU's).
    if lhs.dtype() != DType::Float32 {
        return Err(Error::Value(format!(
            "{}: lhs must be float32 on the CPU, got {} (bfloat16 and float16 lhs run on the GPU only)",
            op.kind.name(),
            lhs.dtype()
        )));
    }
    let (m, n, k, row_bytes) = qmatmul_geometry(op, enc, lhs, rhs, out)?;
    let (a, w) = (f32s(lhs), bytes(rhs));
    let path = dot::best_path();
    if dot::preferred(enc, m, row_bytes, path) {
        // A loaded model's weights are repacked for the kernels once, on first use.
        let pre = rhs.derived(|| dot::prepack(path, enc, w, n, row_bytes));
        let pre = pre.as_deref().and_then(Option::as_ref);
        with_f32_out(out, |dst| dot::qmatmul(path, enc, &a, m, k, w, n, row_bytes, dst, pre));
        return Ok(());
    }
    with_f32_out(out, |dst| {
        matmul_columns(&a, m, k, n, dst, |j, row| enc.decode_blocks(&w[j * row_bytes..(j + 1) * row_bytes], row))
    });
    Ok(())
}

/// GPTQ: bfloat16 lhs `[..., K]` times the dequantized `[K, N]` weights, accumulated in f32 and
/// rounded once to bfloat16.
fn qmatmul_gptq(op: &Op, inputs: &[Buffer], out: &Buffer) -> Result<()> {
    let name = op.kind.name();
    let GptqCall { group, lhs, rhs, perm } = gptq_call(op, inputs)?;
    let k = lhs.shape().last().copied().unwrap_or(0);
    let w = gptq::Gptq::new(op, rhs, perm, k, group)?;
    let n = rhs.shape()[1];
    let m = lhs_rows(op, lhs, k)?;
    if out.dtype() != DType::BFloat16 || out.num_elements() != m * n {
        return Err(Error::Value(format!("{name}: the result must be bfloat16 [{m}, {n}]")));
    }
    let a: Vec<f32> = bytes(lhs).chunks_exact(2).map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32()).collect();
    let mut acc = vec![0f32; m * n];
    matmul_columns(&a, m, k, n, &mut acc, |j, col| w.column(j, col));
    // SAFETY: out is this step's own output buffer.
    let dst = unsafe { bytes_mut(out) };
    dst.par_chunks_mut(2).zip(acc.par_iter()).for_each(|(o, &v)| {
        o.copy_from_slice(&half::bf16::from_canon(Canon::F(v as f64)).to_le_bytes());
    });
    Ok(())
}
