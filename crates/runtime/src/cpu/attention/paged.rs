//! paged_attention: each query row of a ragged batch attends to its sequence's keys in the paged
//! cache (see crates/graph/src/ops/attention.rs for the layout and the mask rule). One task per
//! (row, query head): scaled scores over the visible keys, optional tanh soft-capping, a softmax
//! with the row max subtracted, then the probability-weighted sum of the values.

use max_graph::ops::Op;
use max_graph::ops::attention::{AttentionParams, CacheLayout};
use rayon::prelude::*;

use super::{Act, indices, slice, slice_mut, with_act};
use crate::{Buffer, Error, Result};

/// The checked geometry of one call: which sequence each row belongs to, and where it starts.
pub(crate) struct Batch<'a> {
    pub offsets: &'a [u32],
    pub lengths: &'a [u32],
    pub table: &'a [u32],
    /// Page ids per sequence (the lookup table's width).
    pub width: usize,
    /// The sequence of each query row.
    pub seq_of_row: Vec<u32>,
}

/// Checks the ragged batch against `tokens` query rows and the cache, as the CUDA kernel's
/// caller does too: offsets ascending from 0 to `tokens`, every sequence's pages within the
/// table and every page id within the cache.
pub(crate) fn batch<'a>(
    name: &str,
    tokens: usize,
    c: &CacheLayout,
    offsets: &'a Buffer,
    lengths: &'a Buffer,
    table: &'a Buffer,
) -> Result<Batch<'a>> {
    let offsets_v = indices(name, "input_row_offsets", offsets)?;
    let lengths_v = indices(name, "cache_lengths", lengths)?;
    let table_v = indices(name, "lookup_table", table)?;
    let batch =
        offsets_v.len().checked_sub(1).ok_or_else(|| Error::Value(format!("{name}: input_row_offsets is empty")))?;
    if lengths_v.len() != batch {
        return Err(Error::Value(format!("{name}: {} cache lengths for {batch} sequences", lengths_v.len())));
    }
    let &[rows, width] = table.shape() else {
        return Err(Error::Value(format!("{name}: lookup_table must be [batch, pages], got {:?}", table.shape())));
    };
    if rows != batch {
        return Err(Error::Value(format!("{name}: lookup_table has {rows} rows for {batch} sequences")));
    }
    if offsets_v[0] != 0 || offsets_v[batch] as usize != tokens || offsets_v.windows(2).any(|w| w[0] > w[1]) {
        return Err(Error::Value(format!(
            "{name}: input_row_offsets must rise from 0 to the {tokens} query rows, got {offsets_v:?}"
        )));
    }
    let mut seq_of_row = Vec::with_capacity(tokens);
    for b in 0..batch {
        let q_len = (offsets_v[b + 1] - offsets_v[b]) as usize;
        let total = lengths_v[b] as usize + q_len;
        let pages = total.div_ceil(c.page_size.max(1));
        if pages > width {
            return Err(Error::Value(format!(
                "{name}: sequence {b} holds {total} tokens, more than its {width} pages of {} tokens",
                c.page_size
            )));
        }
        if let Some(&bad) = table_v[b * width..b * width + pages].iter().find(|&&p| p as usize >= c.pages) {
            return Err(Error::Value(format!("{name}: sequence {b} uses page {bad} of a cache of {} pages", c.pages)));
        }
        seq_of_row.extend(std::iter::repeat_n(b as u32, q_len));
    }
    Ok(Batch { offsets: offsets_v, lengths: lengths_v, table: table_v, width, seq_of_row })
}

/// `sum(a[i] * b[i])` in eight partial sums (vectorisable).
#[inline(always)]
fn dot_body(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ac.remainder().iter().zip(bc.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in ac.zip(bc) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// `out[i] += w * v[i]`.
#[inline(always)]
fn axpy_body(out: &mut [f32], w: f32, v: &[f32]) {
    out.iter_mut().zip(v).for_each(|(o, x)| *o += w * x);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
    dot_body(a, b)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn axpy_avx2(out: &mut [f32], w: f32, v: &[f32]) {
    axpy_body(out, w, v)
}

fn avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *HAS.get_or_init(|| is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if avx2() {
        // SAFETY: the CPU has AVX2 and FMA (checked once above).
        return unsafe { dot_avx2(a, b) };
    }
    dot_body(a, b)
}

fn axpy(out: &mut [f32], w: f32, v: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if avx2() {
        // SAFETY: as in `dot`.
        return unsafe { axpy_avx2(out, w, v) };
    }
    axpy_body(out, w, v)
}

/// A row of the cache as f32: the slice itself for f32, else converted into `buf`.
fn as_f32<'a, T: Act>(row: &'a [T], buf: &'a mut Vec<f32>) -> &'a [f32] {
    if std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>() {
        // SAFETY: T is f32 (checked through its TypeId), so the slice is the same memory.
        return unsafe { std::slice::from_raw_parts(row.as_ptr().cast::<f32>(), row.len()) };
    }
    buf.clear();
    buf.extend(row.iter().map(|v| v.load()));
    buf
}

/// Work (key-dims visited) below which a call stays on the calling thread.
const PAR_WORK: usize = 1 << 20;

pub(super) fn run(
    op: &Op,
    q: &Buffer,
    blocks: &Buffer,
    offsets: &Buffer,
    lengths: &Buffer,
    table: &Buffer,
    out: &Buffer,
) -> Result<()> {
    let name = op.kind.name();
    let p = AttentionParams::from_attrs(&op.attrs).map_err(|m| Error::Value(format!("{name}: {m}")))?;
    let c = CacheLayout::from_shape(blocks.shape()).map_err(|m| Error::Value(format!("{name}: {m}")))?;
    let &[tokens, hq, d] = q.shape() else {
        return Err(Error::Value(format!("{name}: q must be [tokens, heads, head_dim], got {:?}", q.shape())));
    };
    if d != c.head_dim || c.kv_heads == 0 || hq % c.kv_heads != 0 || p.layer >= c.layers {
        return Err(Error::Value(format!(
            "{name}: q {:?} does not fit a cache of {} layers, {} kv heads of {} dims (layer {})",
            q.shape(),
            c.layers,
            c.kv_heads,
            c.head_dim,
            p.layer
        )));
    }
    if q.dtype() != blocks.dtype() {
        return Err(Error::Value(format!("{name}: q is {} but the cache holds {}", q.dtype(), blocks.dtype())));
    }
    let bt = batch(name, tokens, &c, offsets, lengths, table)?;
    if tokens == 0 || hq == 0 || d == 0 {
        return Ok(());
    }
    let group = hq / c.kv_heads;
    let row = c.kv_heads * c.head_dim;
    with_act!(name, q.dtype(), T, {
        let qs = slice::<T>(name, q)?;
        let cache = slice::<T>(name, blocks)?;
        let dst = slice_mut::<T>(name, out)?;
        // The cache offset of position j's row of kv head 0, keys (kv 0) or values (1).
        let at = |b: usize, j: usize, kv: usize| {
            let page = bt.table[b * bt.width + j / c.page_size] as usize;
            c.offset(page, kv, p.layer) + (j % c.page_size) * row
        };
        // One task per (row, kv head): the group of query heads that share it reads each key
        // and value row once.
        let work = |(task, o): (usize, &mut [T])| {
            let (i, g) = (task / c.kv_heads, task % c.kv_heads);
            let b = bt.seq_of_row[i] as usize;
            let q_len = (bt.offsets[b + 1] - bt.offsets[b]) as usize;
            let total = bt.lengths[b] as usize + q_len;
            let pos = bt.lengths[b] as usize + (i - bt.offsets[b] as usize);
            let (lo, hi) = p.mask.range(pos, total);
            let keys = hi.saturating_sub(lo);
            let qv: Vec<f32> = qs[(i * hq + g * group) * d..][..group * d].iter().map(|v| v.load()).collect();
            let mut scores = vec![0f32; group * keys];
            let mut buf = Vec::new();
            for (jj, j) in (lo..hi).enumerate() {
                let k = as_f32(&cache[at(b, j, 0) + g * d..][..d], &mut buf);
                for h in 0..group {
                    let s = dot(&qv[h * d..][..d], k) * p.scale;
                    scores[h * keys + jj] = if p.softcap > 0.0 { p.softcap * (s / p.softcap).tanh() } else { s };
                }
            }
            let mut sums = vec![0f32; group];
            for h in 0..group {
                let row = &mut scores[h * keys..(h + 1) * keys];
                let m = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                for s in row.iter_mut() {
                    *s = (*s - m).exp();
                    sums[h] += *s;
                }
            }
            let mut acc = vec![0f32; group * d];
            for (jj, j) in (lo..hi).enumerate() {
                let v = as_f32(&cache[at(b, j, 1) + g * d..][..d], &mut buf);
                for h in 0..group {
                    axpy(&mut acc[h * d..(h + 1) * d], scores[h * keys + jj], v);
                }
            }
            for h in 0..group {
                let inv = if sums[h] > 0.0 { 1.0 / sums[h] } else { 0.0 };
                for (o, a) in o[h * d..(h + 1) * d].iter_mut().zip(&acc[h * d..(h + 1) * d]) {
                    *o = T::store(a * inv);
                }
            }
        };
        let visited: usize = (0..tokens).map(|i| {
            let b = bt.seq_of_row[i] as usize;
            bt.lengths[b] as usize + (i - bt.offsets[b] as usize) + 1
        }).sum::<usize>() * hq * d;
        if visited >= PAR_WORK && tokens * c.kv_heads > 1 {
            dst.par_chunks_mut(group * d).enumerate().for_each(work);
        } else {
            dst.chunks_mut(group * d).enumerate().for_each(work);
        }
        Ok(())
    })
}
