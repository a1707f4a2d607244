//! Launching attention.cu: rope, kv_cache_store and paged_attention. Every tensor is contiguous
//! and of one activation dtype (f32, f16 or bf16); index tensors are uint32 (see the kernels'
//! comment for what out-of-range indices do). paged_attention of 16-bit prompts goes to the
//! tensor-core kernel of attention_prefill.rs ([`prefill_plan`]); decode steps stay here.

use std::sync::Arc;

use cudarc::driver::{CudaStream, DeviceRepr, LaunchConfig, PushKernelArg};
use max_graph::DType;
use max_graph::ops::attention::{AttentionParams, CacheLayout, Mask};

use super::attention_prefill::{self as prefill, PrefillPlan, PrefillPtrs};
use crate::sources::ATTENTION;
use crate::{Error, Result, function};

/// The largest head dim paged_attention takes (32 lanes x MAXV dims in attention.cu).
pub const MAX_HEAD_DIM: usize = 256;
/// Warps per paged_attention block (one block per (row, head); ATT_WARPS in attention.cu).
const WARPS: usize = 8;

fn short(dtype: DType) -> Result<&'static str> {
    match dtype {
        DType::Float32 => Ok("f32"),
        DType::Float16 => Ok("f16"),
        DType::BFloat16 => Ok("bf16"),
        other => Err(Error::Unsupported(format!("attention kernels take float32, float16 or bfloat16, not {other}"))),
    }
}

fn elementwise(n: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (n.div_ceil(256).clamp(1, 1 << 16) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

fn go<A: DeviceRepr>(stream: &Arc<CudaStream>, name: &str, args: &A, config: LaunchConfig) -> Result<()> {
    let f = function(stream.context(), &ATTENTION, name)?;
    let mut launch = stream.launch_builder(&f);
    launch.arg(args);
    // SAFETY: each caller passes the #[repr(C)] twin of its kernel's argument struct, with device
    // pointers to buffers holding the elements its shapes describe.
    unsafe { launch.launch(config) }.map_err(Error::driver("cuLaunchKernel(attention)"))?;
    Ok(())
}

#[repr(C)]
#[derive(Clone, Copy)]
struct RopeArgs {
    x: u64,
    out: u64,
    freqs: u64,
    pos: u64,
    tokens: i64,
    heads: i64,
    dim: i64,
    rot: i64,
    npos: i64,
    interleaved: i32,
    freqs_f32: i32,
}
// SAFETY: plain-old-data with the layout of the kernel's `RopeArgs`.
unsafe impl DeviceRepr for RopeArgs {}

/// The shapes of a rope call: `x` [tokens, heads, dim], `freqs_cis` [positions, rot].
#[derive(Clone, Copy, Debug)]
pub struct RopeShape {
    pub tokens: usize,
    pub heads: usize,
    pub dim: usize,
    pub rot: usize,
    pub positions: usize,
}

/// rope of `x` into `out` (both `dtype`); `freqs` is float32 when `freqs_f32`, else `dtype`.
pub fn rope(
    stream: &Arc<CudaStream>,
    dtype: DType,
    (x, freqs, positions, out): (u64, u64, u64, u64),
    s: RopeShape,
    interleaved: bool,
    freqs_f32: bool,
) -> Result<()> {
    let n = s.tokens * s.heads * s.dim;
    if n == 0 {
        return Ok(());
    }
    let args = RopeArgs {
        x,
        out,
        freqs,
        pos: positions,
        tokens: s.tokens as i64,
        heads: s.heads as i64,
        dim: s.dim as i64,
        rot: s.rot as i64,
        npos: s.positions as i64,
        interleaved: interleaved as i32,
        freqs_f32: freqs_f32 as i32,
    };
    go(stream, &format!("rope_{}", short(dtype)?), &args, elementwise(n))
}

#[repr(C)]
#[derive(Clone, Copy)]
struct StoreArgs {
    blocks: u64,
    k: u64,
    v: u64,
    slots: u64,
    tokens: i64,
    row: i64,
    page_size: i64,
    layers: i64,
    pages: i64,
    layer: i64,
}
// SAFETY: plain-old-data with the layout of the kernel's `StoreArgs`.
unsafe impl DeviceRepr for StoreArgs {}

/// Writes `tokens` rows of `k` and `v` ([tokens, kv_heads, head_dim]) into `blocks` at `slots`.
pub fn kv_cache_store(
    stream: &Arc<CudaStream>,
    dtype: DType,
    (blocks, k, v, slots): (u64, u64, u64, u64),
    cache: CacheLayout,
    tokens: usize,
    layer: usize,
) -> Result<()> {
    let row = cache.kv_heads * cache.head_dim;
    if tokens * row == 0 {
        return Ok(());
    }
    let args = StoreArgs {
        blocks,
        k,
        v,
        slots,
        tokens: tokens as i64,
        row: row as i64,
        page_size: cache.page_size as i64,
        layers: cache.layers as i64,
        pages: cache.pages as i64,
        layer: layer as i64,
    };
    go(stream, &format!("kv_cache_store_{}", short(dtype)?), &args, elementwise(tokens * row))
}

#[repr(C)]
#[derive(Clone, Copy)]
struct AttnArgs {
    q: u64,
    blocks: u64,
    offsets: u64,
    lengths: u64,
    table: u64,
    out: u64,
    tokens: i64,
    batch: i64,
    width: i64,
    q_heads: i64,
    kv_heads: i64,
    dim: i64,
    page_size: i64,
    layers: i64,
    pages: i64,
    layer: i64,
    window: i64,
    scale: f32,
    softcap: f32,
    mask: i32,
    pad: i32,
}
// SAFETY: plain-old-data with the layout of the kernel's `AttnArgs`.
unsafe impl DeviceRepr for AttnArgs {}

#[repr(C)]
#[derive(Clone, Copy)]
struct SplitArgs {
    a: AttnArgs,
    partial: u64,
    counters: u64,
    splits: i64,
    keys_per_split: i64,
    lpk: i32,
    group: i32,
}
// SAFETY: plain-old-data with the layout of the kernel's `SplitArgs`.
unsafe impl DeviceRepr for SplitArgs {}

#[repr(C)]
#[derive(Clone, Copy)]
struct CombineArgs {
    partial: u64,
    out: u64,
    tasks: i64,
    splits: i64,
    dim: i64,
}
// SAFETY: plain-old-data with the layout of the kernel's `CombineArgs`.
unsafe impl DeviceRepr for CombineArgs {}

/// Keys per chunk of the split form (CHUNK in attention.cu); splits are whole chunks.
const CHUNK: usize = 128;
/// Query heads one block of the split form serves (MAXG).
const MAX_GROUP: usize = 8;
/// Threads of a split-form block (SPLIT_THREADS).
const SPLIT_THREADS: usize = 128;
/// Blocks worth launching for a decode step: about two per SM of an H100/H200; fewer (row, kv
/// head) pairs than this split their keys across blocks.
const TARGET_BLOCKS: usize = 264;
/// The most splits of one (row, kv head).
const MAX_SPLITS: usize = 32;

/// How the split form divides a call: lanes per key row, query heads per kv head, splits and
/// keys per split. None when the general form must run (rows that are not whole 16-byte chunks
/// for at most a warp, more than MAX_GROUP query heads per kv head, unaligned tensors).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitPlan {
    pub lpk: usize,
    pub group: usize,
    pub splits: usize,
    pub keys_per_split: usize,
}

/// The split plan of a call of `tokens` query rows of `q_heads` heads over lookup-table rows
/// of `width` pages (the most keys a sequence can hold is `width * page_size`).
pub fn split_plan(dtype: DType, cache: &CacheLayout, q_heads: usize, tokens: usize, width: usize) -> Option<SplitPlan> {
    let bytes = cache.head_dim * dtype.size_in_bytes();
    let lpk = bytes / 16;
    let group = q_heads / cache.kv_heads.max(1);
    if bytes % 16 != 0 || !lpk.is_power_of_two() || lpk > 32 || group == 0 || group > MAX_GROUP {
        return None;
    }
    let max_keys = (width * cache.page_size).max(1);
    let pairs = tokens * cache.kv_heads;
    let splits = if pairs >= TARGET_BLOCKS {
        1
    } else {
        max_keys.div_ceil(CHUNK).min(TARGET_BLOCKS.div_ceil(pairs.max(1))).clamp(1, MAX_SPLITS)
    };
    let keys_per_split = max_keys.div_ceil(splits).div_ceil(CHUNK) * CHUNK;
    Some(SplitPlan { lpk, group, splits: max_keys.div_ceil(keys_per_split), keys_per_split })
}

/// Bytes of f32 scratch the split form needs for a call (0 with one split).
pub fn split_scratch_bytes(plan: &SplitPlan, tokens: usize, q_heads: usize, dim: usize) -> usize {
    if plan.splits <= 1 { 0 } else { tokens * q_heads * plan.splits * (2 + dim) * 4 }
}

/// The tensor-core prefill plan of a call over tensors at `q`, `blocks` and `out` (under the
/// current tuning), or None when the decode kernels take it.
pub fn prefill_plan(
    dtype: DType,
    cache: &CacheLayout,
    (tokens, q_heads, batch): (usize, usize, usize),
    (q, blocks, out): (u64, u64, u64),
) -> Option<PrefillPlan> {
    let aligned = (q | blocks) % 16 == 0 && out % 4 == 0;
    prefill::prefill_plan(dtype, cache, (tokens, q_heads, batch), aligned, &max_tuning::current())
}

/// Bytes of scratch [`paged_attention`] needs for a call (`AttentionPtrs::partial`): none when
/// the prefill kernel or a single split runs it.
pub fn scratch_bytes(
    dtype: DType,
    cache: &CacheLayout,
    (tokens, q_heads, batch, width): (usize, usize, usize, usize),
    (q, blocks, out): (u64, u64, u64),
) -> usize {
    if prefill_plan(dtype, cache, (tokens, q_heads, batch), (q, blocks, out)).is_some() {
        return 0;
    }
    split_plan(dtype, cache, q_heads, tokens, width)
        .map_or(0, |plan| split_scratch_bytes(&plan, tokens, q_heads, cache.head_dim))
}

/// The device tensors of a paged_attention call.
#[derive(Clone, Copy, Debug)]
pub struct AttentionPtrs {
    pub q: u64,
    pub blocks: u64,
    pub offsets: u64,
    pub lengths: u64,
    pub table: u64,
    pub out: u64,
    /// f32 scratch of `split_scratch_bytes` for the split form's partial results (0: none;
    /// a call that needs scratch and has none runs the general form).
    pub partial: u64,
}

/// Attention of `tokens` query rows of `q_heads` heads over the cache, for a batch of `batch`
/// sequences whose lookup-table rows hold `width` page ids.
#[allow(clippy::too_many_arguments)]
pub fn paged_attention(
    stream: &Arc<CudaStream>,
    dtype: DType,
    ptrs: AttentionPtrs,
    cache: CacheLayout,
    p: &AttentionParams,
    (tokens, q_heads, batch, width): (usize, usize, usize, usize),
) -> Result<()> {
    if cache.head_dim > MAX_HEAD_DIM {
        return Err(Error::Unsupported(format!(
            "paged_attention takes head dims up to {MAX_HEAD_DIM} on the GPU, got {}",
            cache.head_dim
        )));
    }
    if tokens * q_heads == 0 || batch == 0 {
        return Ok(());
    }
    if let Some(plan) = prefill_plan(dtype, &cache, (tokens, q_heads, batch), (ptrs.q, ptrs.blocks, ptrs.out)) {
        let AttentionPtrs { q, blocks, offsets, lengths, table, out, .. } = ptrs;
        let ptrs = PrefillPtrs { q, blocks, offsets, lengths, table, out };
        return prefill::launch(stream, &plan, ptrs, cache, p, (tokens, q_heads, batch, width));
    }
    let (mask, window) = match p.mask {
        Mask::Causal => (0, 0),
        Mask::SlidingWindow(w) => (1, w as i64),
        Mask::Null => (2, 0),
    };
    let args = AttnArgs {
        q: ptrs.q,
        blocks: ptrs.blocks,
        offsets: ptrs.offsets,
        lengths: ptrs.lengths,
        table: ptrs.table,
        out: ptrs.out,
        tokens: tokens as i64,
        batch: batch as i64,
        width: width as i64,
        q_heads: q_heads as i64,
        kv_heads: cache.kv_heads as i64,
        dim: cache.head_dim as i64,
        page_size: cache.page_size as i64,
        layers: cache.layers as i64,
        pages: cache.pages as i64,
        layer: p.layer as i64,
        window,
        scale: p.scale,
        softcap: p.softcap,
        mask,
        pad: 0,
    };
    let tasks = tokens * q_heads;
    let aligned = [ptrs.q, ptrs.blocks].iter().all(|p| p % 16 == 0);
    if let Some(plan) = split_plan(dtype, &cache, q_heads, tokens, width).filter(|_| aligned) {
        let scratch = split_scratch_bytes(&plan, tokens, q_heads, cache.head_dim);
        if scratch == 0 || ptrs.partial != 0 {
            return paged_attention_split(stream, dtype, args, plan, ptrs.partial, tasks);
        }
    }
    if tasks > u32::MAX as usize {
        return Err(Error::Unsupported(format!(
            "paged_attention: {tasks} (row, head) pairs are too many for one launch"
        )));
    }
    let config = LaunchConfig {
        grid_dim: (tasks as u32, 1, 1),
        block_dim: (32 * WARPS as u32, 1, 1),
        shared_mem_bytes: ((cache.head_dim + WARPS * (2 + cache.head_dim)) * 4) as u32,
    };
    go(stream, &format!("paged_attention_{}", short(dtype)?), &args, config)
}

fn paged_attention_split(
    stream: &Arc<CudaStream>,
    dtype: DType,
    a: AttnArgs,
    plan: SplitPlan,
    partial: u64,
    tasks: usize,
) -> Result<()> {
    let dim = a.dim as usize;
    let blocks = a.tokens as usize * a.kv_heads as usize * plan.splits;
    if blocks > i32::MAX as usize {
        return Err(Error::Unsupported(format!("paged_attention: {blocks} blocks are too many for one launch")));
    }
    let smem =
        (plan.group * (dim + CHUNK) + 3 * MAX_GROUP + (SPLIT_THREADS / 32) * plan.group * dim) * 4 + CHUNK * 8 + 8;
    // The last split of each (row, kv head) merges the shares when the stream has ticket
    // counters for them; otherwise attention_combine does.
    let pairs = a.tokens as usize * a.kv_heads as usize;
    let counters = if plan.splits > 1 { super::tickets::for_stream(stream, pairs)?.unwrap_or(0) } else { 0 };
    let args = SplitArgs {
        a,
        partial,
        counters,
        splits: plan.splits as i64,
        keys_per_split: plan.keys_per_split as i64,
        lpk: plan.lpk as i32,
        group: plan.group as i32,
    };
    let config = LaunchConfig {
        grid_dim: (blocks as u32, 1, 1),
        block_dim: (SPLIT_THREADS as u32, 1, 1),
        shared_mem_bytes: smem as u32,
    };
    go(stream, &format!("paged_attention_split_{}", short(dtype)?), &args, config)?;
    if plan.splits > 1 && counters == 0 {
        let c = CombineArgs { partial, out: a.out, tasks: tasks as i64, splits: plan.splits as i64, dim: dim as i64 };
        let config = LaunchConfig { grid_dim: (tasks as u32, 1, 1), block_dim: (128, 1, 1), shared_mem_bytes: 0 };
        go(stream, &format!("attention_combine_{}", short(dtype)?), &c, config)?;
    }
    Ok(())
}

/// Every kernel these wrappers launch: (family, name, bytes of its argument struct), for the
/// compile checks in tests/.
#[doc(hidden)]
pub fn kernels() -> Vec<(crate::sources::Family, String, usize)> {
    let mut all = Vec::new();
    for dt in ["f32", "f16", "bf16"] {
        all.push((ATTENTION, format!("rope_{dt}"), size_of::<RopeArgs>()));
        all.push((ATTENTION, format!("kv_cache_store_{dt}"), size_of::<StoreArgs>()));
        all.push((ATTENTION, format!("paged_attention_{dt}"), size_of::<AttnArgs>()));
        all.push((ATTENTION, format!("paged_attention_split_{dt}"), size_of::<SplitArgs>()));
        all.push((ATTENTION, format!("attention_combine_{dt}"), size_of::<CombineArgs>()));
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(kv_heads: usize, head_dim: usize, page_size: usize) -> CacheLayout {
        CacheLayout { pages: 100, layers: 2, page_size, kv_heads, head_dim }
    }

    #[test]
    fn decode_splits_the_keys_and_large_batches_do_not() {
        // SmolLM2-shaped decode: 3 kv heads of 64 dims, 9 query heads, 1024 keys at most.
        let p = split_plan(DType::BFloat16, &cache(3, 64, 16), 9, 1, 64).unwrap();
        assert_eq!(p, SplitPlan { lpk: 8, group: 3, splits: 8, keys_per_split: 128 });
        // 8B-shaped at an 8k table: 8 kv heads of 128 dims; 33 splits of 256 keys.
        let p = split_plan(DType::BFloat16, &cache(8, 128, 128), 32, 1, 64).unwrap();
        assert_eq!((p.lpk, p.group, p.splits, p.keys_per_split), (16, 4, 32, 256));
        assert!(p.splits * p.keys_per_split >= 64 * 128);
        // 64 sequences (or a prefill) fill the GPU without splitting.
        assert_eq!(split_plan(DType::BFloat16, &cache(8, 128, 128), 32, 64, 64).unwrap().splits, 1);
        assert_eq!(
            split_scratch_bytes(&SplitPlan { lpk: 16, group: 4, splits: 1, keys_per_split: 8192 }, 64, 32, 128),
            0
        );
    }

    #[test]
    fn rows_that_are_not_whole_chunks_or_large_groups_take_the_general_form() {
        assert_eq!(split_plan(DType::Float32, &cache(1, 128, 16), 8, 1, 4).unwrap().lpk, 32);
        assert!(split_plan(DType::Float32, &cache(1, 256, 16), 8, 1, 4).is_none()); // 64 lanes a row
        assert!(split_plan(DType::BFloat16, &cache(1, 80, 16), 8, 1, 4).is_none()); // 10 lanes a row
        assert!(split_plan(DType::BFloat16, &cache(1, 64, 16), 12, 1, 4).is_none()); // 12 heads per kv head
        assert!(split_plan(DType::BFloat16, &cache(1, 4, 16), 1, 1, 4).is_none()); // 8 bytes a row
    }
}
