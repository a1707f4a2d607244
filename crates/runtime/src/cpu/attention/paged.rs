//! paged_attention: each query row of a ragged batch attends to its sequence's keys in the paged
//! cache (see crates/graph/src/ops/attention.rs for the layout and the mask rule). One task per
//! query row (or per share of its keys, for a decode step over a long cache), all heads at once
//! so that the cache's rows are read whole and in order: scaled scores over the visible keys,
//! optional tanh soft-capping, a softmax with the maximum subtracted, the probability-weighted
//! sum of the values; shares combine by rescaling to their common maximum.

use max_graph::ops::Op;
use max_graph::ops::attention::{AttentionParams, CacheLayout};
use rayon::prelude::*;

use super::{Act, indices, slice, slice_mut, with_act};
use crate::operands::{fits_cache, query_shape};
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
    /// Whether a sequence's table holds a page id past the cache among the pages it uses: those
    /// keys are left out (as the GPU kernels leave them out; a way to mask keys).
    pub holes: Vec<bool>,
}

/// Checks the ragged batch against `tokens` query rows and the cache, as the CUDA kernel's
/// caller does too: offsets ascending from 0 to `tokens` and every sequence's pages within the
/// table. A page id past the cache holds no keys: its positions are skipped.
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
    let mut holes = Vec::with_capacity(batch);
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
        holes.push(table_v[b * width..b * width + pages].iter().any(|&p| p as usize >= c.pages));
        seq_of_row.extend(std::iter::repeat_n(b as u32, q_len));
    }
    Ok(Batch { offsets: offsets_v, lengths: lengths_v, table: table_v, width, seq_of_row, holes })
}

/// `sum(a[i] * b[i])` in eight partial sums (vectorisable).
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
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

/// `dot` in AVX2 FMA: two independent chains of 8 lanes.
///
/// Safety: the CPU has AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let d = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let (mut s0, mut s1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let mut c = 0;
    // SAFETY: c + 16 (or c + 8) <= d elements of both slices.
    unsafe {
        while c + 16 <= d {
            s0 = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(c)), _mm256_loadu_ps(pb.add(c)), s0);
            s1 = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(c + 8)), _mm256_loadu_ps(pb.add(c + 8)), s1);
            c += 16;
        }
        if c + 8 <= d {
            s0 = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(c)), _mm256_loadu_ps(pb.add(c)), s0);
            c += 8;
        }
    }
    let s = _mm256_add_ps(s0, s1);
    let h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps::<1>(s));
    let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    let h = _mm_add_ss(h, _mm_movehdup_ps(h));
    _mm_cvtss_f32(h) + (c..d).map(|i| a[i] * b[i]).sum::<f32>()
}

/// `out[i] += w * v[i]`.
#[inline(always)]
fn axpy(out: &mut [f32], w: f32, v: &[f32]) {
    out.iter_mut().zip(v).for_each(|(o, x)| *o = w.mul_add(*x, *o));
}

/// `e^x` for `x <= 0` (a score less the row maximum), branch-free so that loops over it
/// vectorise: `x = n ln2 + r` with `|r| <= ln2 / 2`, a degree-6 polynomial for `e^r` (relative
/// error below 3e-7) and `2^n` built in the exponent bits. Zero below -87 (where f32 turns
/// subnormal); NaN stays NaN.
#[inline(always)]
fn exp_nonpositive(x: f32) -> f32 {
    const ROUND: f32 = 12_582_912.0; // 1.5 * 2^23: adding it rounds to an integer
    let under = x < -87.0;
    let x = if under { -87.0 } else { x };
    let n = (x * std::f32::consts::LOG2_E + ROUND) - ROUND;
    let r = (x - n * 0.693_145_75) - n * 1.428_606_8e-6;
    let p = 1.0 + r * (1.0 + r * (0.5 + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0))))));
    let scale = f32::from_bits(((n as i32 + 127) as u32) << 23);
    if under { 0.0 } else { p * scale }
}

/// A row of the cache as f32: the slice itself for f32, else converted into `buf`.
#[inline(always)]
fn as_f32<'a, T: Act>(row: &'a [T], buf: &'a mut Vec<f32>) -> &'a [f32] {
    if std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>() {
        // SAFETY: T is f32 (checked through its TypeId), so the slice is the same memory.
        return unsafe { std::slice::from_raw_parts(row.as_ptr().cast::<f32>(), row.len()) };
    }
    buf.clear();
    buf.extend(row.iter().map(|v| v.load()));
    buf
}

/// One call's operands and geometry, shared by its tasks.
struct Call<'a, T> {
    p: AttentionParams,
    c: CacheLayout,
    bt: Batch<'a>,
    q: &'a [T],
    cache: &'a [T],
    heads: usize,
    group: usize,
}

impl<T: Act> Call<'_, T> {
    /// The cache offset of position `j`'s row of kv head 0 in sequence `b`, keys (`kv` 0) or
    /// values (1).
    #[inline(always)]
    fn at(&self, b: usize, j: usize, kv: usize) -> usize {
        let page = self.bt.table[b * self.bt.width + j / self.c.page_size] as usize;
        self.c.offset(page, kv, self.p.layer) + (j % self.c.page_size) * self.c.kv_heads * self.c.head_dim
    }

    /// Calls `f(jj, row)` for positions `lo + jj` in `lo..hi` of sequence `b` with the whole
    /// cache row of keys (`kv` 0) or values (1): page by page (one table lookup each), asking
    /// for rows `AHEAD` positions on within the page if `ahead`; positions whose page id is past
    /// the cache are skipped.
    #[inline(always)]
    fn rows(&self, b: usize, lo: usize, hi: usize, kv: usize, ahead: bool, mut f: impl FnMut(usize, &[T])) {
        let (ps, row) = (self.c.page_size, self.c.kv_heads * self.c.head_dim);
        let mut j = lo;
        while j < hi {
            let end = ((j / ps + 1) * ps).min(hi);
            if self.bt.table[b * self.bt.width + j / ps] as usize >= self.c.pages {
                j = end;
                continue;
            }
            let base = self.at(b, j, kv);
            let page = &self.cache[base..base + (end - j) * row];
            for (t, r) in page.chunks_exact(row).enumerate() {
                if let Some(next) = page.get((t + AHEAD) * row..(t + AHEAD + 1) * row).filter(|_| ahead) {
                    prefetch(next);
                }
                f(j - lo + t, r);
            }
            j = end;
        }
    }

    /// Query row `i` over share `part` of `parts` of its visible keys, every head: each key and
    /// value row (all kv heads, contiguous in the cache) is read once. For each query head h,
    /// `acc[h * d..]` gets the sum of the value rows weighted by e^(score - m_h), `ml[h]` the
    /// scores' maximum m_h (-inf over no keys) and `ml[heads + h]` the weights' sum.
    #[inline(always)]
    fn partial(&self, i: usize, part: usize, parts: usize, acc: &mut [f32], ml: &mut [f32], fast: bool) {
        let (p, bt, d, group, heads) = (&self.p, &self.bt, self.c.head_dim, self.group, self.heads);
        let b = bt.seq_of_row[i] as usize;
        let q_len = (bt.offsets[b + 1] - bt.offsets[b]) as usize;
        let total = bt.lengths[b] as usize + q_len;
        let pos = bt.lengths[b] as usize + (i - bt.offsets[b] as usize);
        let (lo, hi) = p.mask.range(pos, total);
        let share = hi.saturating_sub(lo).div_ceil(parts);
        let (lo, hi) = ((lo + part * share).min(hi), (lo + (part + 1) * share).min(hi));
        let keys = hi - lo;
        acc.fill(0.0);
        ml[..heads].fill(f32::NEG_INFINITY);
        ml[heads..].fill(0.0);
        if keys == 0 {
            return;
        }
        let qv: Vec<f32> = self.q[i * heads * d..][..heads * d].iter().map(|v| v.load()).collect();
        // keys without a page keep a score of -inf (weight 0)
        let holes = bt.holes[b];
        let mut scores = vec![if holes { f32::NEG_INFINITY } else { 0f32 }; heads * keys];
        #[cfg(target_arch = "x86_64")]
        let rows = |kv: usize| {
            let mut rows = Vec::with_capacity(keys);
            self.rows(b, lo, hi, kv, false, |_, r| rows.push(r.as_ptr().cast::<f32>()));
            rows
        };
        // float32 caches on AVX2: the blocked loops of paged_avx2.rs.
        #[cfg(target_arch = "x86_64")]
        let blocked = fast && !holes && d % 8 == 0 && std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>();
        #[cfg(not(target_arch = "x86_64"))]
        let blocked = false;
        let mut buf = Vec::new();
        #[cfg(target_arch = "x86_64")]
        if blocked {
            // SAFETY: `fast` only when the CPU has AVX2 and FMA; the rows are whole f32 cache rows.
            unsafe { super::paged_avx2::scores(&qv, &rows(0), heads, group, d, p.scale, &mut scores) };
        }
        if !blocked {
            self.rows(b, lo, hi, 0, true, |jj, krow| {
                let krow = as_f32(krow, &mut buf);
                for h in 0..heads {
                    let (q, k) = (&qv[h * d..][..d], &krow[h / group * d..][..d]);
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: `fast` only when the CPU has AVX2 and FMA.
                    let s = if fast { unsafe { dot_avx2(q, k) } } else { dot(q, k) };
                    #[cfg(not(target_arch = "x86_64"))]
                    let s = dot(q, k);
                    scores[h * keys + jj] = s * p.scale;
                }
            });
        }
        if p.softcap > 0.0 {
            // (keys without a page stay at -inf)
            scores
                .iter_mut()
                .filter(|s| **s != f32::NEG_INFINITY)
                .for_each(|s| *s = p.softcap * (*s / p.softcap).tanh());
        }
        for (h, s) in scores.chunks_exact_mut(keys).enumerate() {
            let m = s.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            if m == f32::NEG_INFINITY {
                s.fill(0.0); // every key of the share left out: no weight (ml keeps -inf, 0)
                continue;
            }
            s.iter_mut().for_each(|s| *s = exp_nonpositive(*s - m));
            (ml[h], ml[heads + h]) = (m, s.iter().sum());
        }
        #[cfg(target_arch = "x86_64")]
        if blocked {
            // SAFETY: as above.
            unsafe { super::paged_avx2::weighted_sum(&scores, &rows(1), heads, group, d, acc) };
            return;
        }
        self.rows(b, lo, hi, 1, true, |jj, vrow| {
            let vrow = as_f32(vrow, &mut buf);
            for h in 0..heads {
                axpy(&mut acc[h * d..(h + 1) * d], scores[h * keys + jj], &vrow[h / group * d..][..d]);
            }
        });
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    fn partial_avx2(&self, i: usize, part: usize, parts: usize, acc: &mut [f32], ml: &mut [f32]) {
        self.partial(i, part, parts, acc, ml, true)
    }

    /// `partial` for task `t` = (row, part) into `out` (`partial_len` values).
    fn run_partial(&self, t: usize, parts: usize, out: &mut [f32]) {
        let (i, part) = (t / parts, t % parts);
        let (acc, ml) = out.split_at_mut(self.heads * self.c.head_dim);
        #[cfg(target_arch = "x86_64")]
        if avx2() {
            // SAFETY: the CPU has AVX2 and FMA (checked once in `avx2`).
            return unsafe { self.partial_avx2(i, part, parts, acc, ml) };
        }
        self.partial(i, part, parts, acc, ml, false)
    }

    /// Values per partial result: `heads * head_dim` sums, then `heads` maxima and `heads` sums.
    fn partial_len(&self) -> usize {
        self.heads * (self.c.head_dim + 2)
    }

    /// The outputs `o` of one row from its `parts` partial results (rescaled to the largest
    /// maximum, then divided by the total weight).
    fn combine(&self, partials: &[f32], o: &mut [T]) {
        let (heads, d, len) = (self.heads, self.c.head_dim, self.partial_len());
        for h in 0..heads {
            let m = partials.chunks_exact(len).map(|p| p[heads * d + h]).fold(f32::NEG_INFINITY, f32::max);
            let mut out = vec![0f32; d];
            let mut sum = 0f32;
            if m > f32::NEG_INFINITY {
                for p in partials.chunks_exact(len) {
                    let scale = (p[heads * d + h] - m).exp();
                    sum += scale * p[heads * d + heads + h];
                    out.iter_mut().zip(&p[h * d..(h + 1) * d]).for_each(|(o, a)| *o += scale * a);
                }
            }
            let inv = if sum > 0.0 { 1.0 / sum } else { 0.0 };
            for (o, a) in o[h * d..(h + 1) * d].iter_mut().zip(&out) {
                *o = T::store(a * inv);
            }
        }
    }
}

/// Cache rows fetched this many positions ahead of their use: each task reads one head's
/// slice of rows strided by all heads, which the hardware prefetchers follow poorly.
const AHEAD: usize = 12;

/// Asks for the cache lines of `row` (a no-op off x86-64).
#[inline(always)]
fn prefetch<T>(row: &[T]) {
    #[cfg(target_arch = "x86_64")]
    {
        let bytes = std::mem::size_of_val(row);
        let p = row.as_ptr().cast::<i8>();
        for off in (0..bytes).step_by(64) {
            // SAFETY: a prefetch of an address inside `row`; it reads nothing architecturally.
            unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.add(off)) };
        }
    }
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

/// Work (key-dims visited) below which a call stays on the calling thread.
const PAR_WORK: usize = 1 << 17;

/// The fewest keys in one share of a split (row, kv head).
const MIN_SHARE: usize = 64;

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
    let [tokens, hq, d] = query_shape(name, q)?;
    if !fits_cache(&c, hq, d, p.layer) {
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
    with_act!(name, q.dtype(), T, {
        let dst = slice_mut::<T>(name, out)?;
        let visited: usize = (0..tokens)
            .map(|i| {
                let b = bt.seq_of_row[i] as usize;
                bt.lengths[b] as usize + (i - bt.offsets[b] as usize) + 1
            })
            .sum::<usize>()
            * hq
            * d;
        let longest = bt.lengths.iter().map(|&l| l as usize).max().unwrap_or(0) + tokens;
        let call = Call { p, c, bt, q: slice::<T>(name, q)?, cache: slice::<T>(name, blocks)?, heads: hq, group };
        // Each row split into `parts` shares of its keys, enough tasks for every thread when a
        // call is large enough to spread (a decode step's few rows and long caches), combined
        // once all are done.
        let tasks = tokens;
        let threads = rayon::current_num_threads().max(1);
        let spread = visited >= PAR_WORK && threads > 1;
        let parts = if spread { (2 * threads).div_ceil(tasks).min(longest / MIN_SHARE).max(1) } else { 1 };
        let len = call.partial_len();
        let mut partials = vec![0f32; tasks * parts * len];
        if spread {
            partials.par_chunks_mut(len).enumerate().for_each(|(t, out)| call.run_partial(t, parts, out));
            dst.par_chunks_mut(hq * d).zip(partials.par_chunks(parts * len)).for_each(|(o, p)| call.combine(p, o));
        } else {
            partials.chunks_mut(len).enumerate().for_each(|(t, out)| call.run_partial(t, parts, out));
            dst.chunks_mut(hq * d).zip(partials.chunks(parts * len)).for_each(|(o, p)| call.combine(p, o));
        }
        Ok(())
    })
}
