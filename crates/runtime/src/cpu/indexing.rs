//! Host kernels of the indexing ops. gather and gather_nd read by index (here); scatter,
//! scatter_nd and masked_scatter write by index, and nonzero lists coordinates (in
//! `indexing/scatter.rs`). Data moves as element bytes, so every dtype is supported.
//!
//! Indices may be negative and then count from the end of their dimension (`-dim..dim-1`; MAX's
//! docs are silent, this follows numpy). Every index is checked before anything is written: one
//! out of range is an `Error::Value` naming the op, the index and the dimension.

mod scatter;
#[cfg(test)]
mod tests;

use max_graph::ops::{Op, OpKind};
use rayon::prelude::*;

pub(crate) use crate::operands::{axis_of, int_attr, read_indices, resolve};
use crate::{Buffer, Error, Result};

pub use scatter::nonzero_dynamic;

pub fn run(op: &Op, inputs: &[Buffer], outputs: &[Buffer]) -> Result<()> {
    let name = op.kind.name();
    let want = match op.kind {
        OpKind::Gather | OpKind::GatherNd => 2,
        OpKind::NonZero => 1,
        _ => 3,
    };
    if inputs.len() != want || outputs.len() != 1 {
        return Err(Error::Value(format!(
            "{name}: expected {want} inputs and 1 output, got {} and {}",
            inputs.len(),
            outputs.len()
        )));
    }
    let out = &outputs[0];
    match op.kind {
        OpKind::Gather => gather(op, &inputs[0], &inputs[1], out),
        OpKind::GatherNd => gather_nd(op, &inputs[0], &inputs[1], out),
        OpKind::Scatter => scatter::scatter(op, &inputs[0], &inputs[1], &inputs[2], out),
        OpKind::ScatterNd => scatter::scatter_nd(op, &inputs[0], &inputs[1], &inputs[2], out),
        OpKind::MaskedScatter => scatter::masked_scatter(op, &inputs[0], &inputs[1], &inputs[2], out),
        OpKind::NonZero => scatter::nonzero_into(op, &inputs[0], out),
        _ => Err(Error::Value(format!("{name}: no CPU kernel for this op"))),
    }
}

/// The bytes of a contiguous host buffer.
pub(crate) fn bytes(b: &Buffer) -> &[u8] {
    if b.nbytes() == 0 {
        return &[];
    }
    // SAFETY: kernel buffers are contiguous host buffers of nbytes() bytes from addr().
    unsafe { std::slice::from_raw_parts(b.addr() as *const u8, b.nbytes()) }
}

/// The bytes of a kernel's output buffer, for writing.
///
/// # Safety
/// `b` must be a contiguous host buffer that no other live slice refers to while the result is
/// in use (a step's outputs never share memory with its inputs).
#[allow(clippy::mut_from_ref)]
pub(crate) unsafe fn bytes_mut(b: &Buffer) -> &mut [u8] {
    if b.nbytes() == 0 {
        return &mut [];
    }
    // SAFETY: see the function's contract.
    unsafe { std::slice::from_raw_parts_mut(b.addr() as *mut u8, b.nbytes()) }
}

/// Fills `dst`, made of whole rows of `row` bytes, by calling `f(first_row, chunk)` on chunks of
/// rows: in parallel when there is enough to copy.
pub(crate) fn for_rows(dst: &mut [u8], row: usize, f: impl Fn(usize, &mut [u8]) + Sync) {
    if row == 0 || dst.is_empty() {
        return;
    }
    const CHUNK: usize = 1 << 16;
    if dst.len() <= 2 * CHUNK || rayon::current_num_threads() == 1 {
        f(0, dst);
        return;
    }
    let per = (CHUNK / row).max(1);
    dst.par_chunks_mut(per * row).enumerate().for_each(|(c, chunk)| f(c * per, chunk));
}

fn check_out(op: &Op, out: &Buffer, want: usize) -> Result<()> {
    if out.nbytes() != want {
        return Err(Error::Value(format!(
            "{}: the result buffer has {} bytes but {want} are needed (shape {:?})",
            op.kind.name(),
            out.nbytes(),
            out.shape()
        )));
    }
    Ok(())
}

/// `out[p, i, q] = input[p, indices[i], q]` for `input` split as `[pre, dim, post]` at `axis`.
fn gather(op: &Op, input: &Buffer, indices: &Buffer, out: &Buffer) -> Result<()> {
    let shape = input.shape();
    let axis = axis_of(op, input.rank())?;
    let dim = shape[axis];
    let outer: usize = shape[..axis].iter().product();
    let row = shape[axis + 1..].iter().product::<usize>() * input.dtype().size_in_bytes();
    let idx: Vec<usize> = read_indices(op, indices)?
        .into_iter()
        .map(|i| resolve(op, i, dim, &|| format!("axis {axis}")))
        .collect::<Result<_>>()?;
    let n = idx.len();
    check_out(op, out, outer * n * row)?;
    let src = bytes(input);
    // SAFETY: out is this step's own output buffer.
    let dst = unsafe { bytes_mut(out) };
    for_rows(dst, row, |first, chunk| {
        for (r, to) in chunk.chunks_exact_mut(row).enumerate() {
            let (o, j) = ((first + r) / n, (first + r) % n);
            let from = (o * dim + idx[j]) * row;
            to.copy_from_slice(&src[from..from + row]);
        }
    });
    Ok(())
}

/// `out[b, g, r] = input[b, indices[b, g, :], r]`: after `batch_dims` shared dims, each index
/// vector (the last dim of `indices`, length k) addresses the next k dims of `input`.
fn gather_nd(op: &Op, input: &Buffer, indices: &Buffer, out: &Buffer) -> Result<()> {
    let name = op.kind.name();
    let (shape, ishape) = (input.shape(), indices.shape());
    let batch = usize::try_from(int_attr(op, "batch_dims")?)
        .map_err(|_| Error::Value(format!("{name}: batch_dims must be non-negative")))?;
    let Some((&k, gdims)) = ishape.split_last() else {
        return Err(Error::Value(format!("{name}: indices must have at least one dimension")));
    };
    if gdims.len() < batch || batch + k > shape.len() {
        return Err(Error::Value(format!(
            "{name}: indices of shape {ishape:?} with batch_dims={batch} cannot index an input of shape {shape:?}"
        )));
    }
    if shape[..batch] != gdims[..batch] {
        return Err(Error::Value(format!(
            "{name}: the batch dimensions differ: input {shape:?}, indices {ishape:?} (batch_dims={batch})"
        )));
    }
    let nbatch: usize = shape[..batch].iter().product();
    let per_batch: usize = gdims[batch..].iter().product();
    let sdims = &shape[batch..batch + k];
    let slices: usize = sdims.iter().product();
    let row = shape[batch + k..].iter().product::<usize>() * input.dtype().size_in_bytes();
    let raw = read_indices(op, indices)?;
    let mut starts = Vec::with_capacity(nbatch * per_batch);
    for (r, vector) in raw.chunks_exact(k.max(1)).take(nbatch * per_batch).enumerate() {
        let mut lin = 0usize;
        for (t, (&i, &d)) in vector.iter().zip(sdims).enumerate().take(k) {
            lin = lin * d + resolve(op, i, d, &|| format!("dimension {} of the input", batch + t))?;
        }
        starts.push(((r / per_batch) * slices + lin) * row);
    }
    if k == 0 {
        // Empty index vectors each select the whole remaining slice of their batch.
        starts = (0..nbatch * per_batch).map(|r| (r / per_batch.max(1)) * row).collect();
    }
    check_out(op, out, starts.len() * row)?;
    let src = bytes(input);
    // SAFETY: out is this step's own output buffer.
    let dst = unsafe { bytes_mut(out) };
    for_rows(dst, row, |first, chunk| {
        for (r, to) in chunk.chunks_exact_mut(row).enumerate() {
            let from = starts[first + r];
            to.copy_from_slice(&src[from..from + row]);
        }
    });
    Ok(())
}
