//! Launching attention.cu: rope, kv_cache_store (also both at once) and paged_attention. Every tensor is contiguous
//! and of one activation dtype (f32, f16 or bf16); index tensors are uint32 (see the kernels'
//! comment for what out-of-range indices do). paged_attention of prompts goes to the
//! tensor-core kernels of attention_prefill.rs ([`prefill_plan`]: 16-bit on wgmma on sm_90,
//! mma.sync elsewhere; f32 on mma.sync, rounded to bf16); decode steps stay here.

use std::sync::Arc;

use cudarc::driver::{CudaStream, DeviceRepr, LaunchConfig, PushKernelArg};
use max_graph::DType;
use max_graph::ops::attention::{AttentionParams, CacheLayout, Mask};

use super::attention_prefill::{self as prefill, PrefillPlan};
use crate::sources::ATTENTION;
use crate::{Error, Result, function};

/// The largest head dim paged_attention takes (32 lanes x MAXV dims in attention.cu).
pub const MAX_HEAD_DIM: usize = 256;
/// Warps per paged_attention block (one block per (row, head); ATT_WARPS in attention.cu).
const WARPS: usize = 8;

pub(super) fn short(dtype: DType) -> Result<&'static str> {
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
struct RopeStoreArgs {
    q: u64,
    q_out: u64,
    k: u64,
    v: u64,
    blocks: u64,
    slots: u64,
    freqs: u64,
    pos: u64,
    tokens: i64,
    q_heads: i64,
    kv_heads: i64,
    dim: i64,
    rot: i64,
    npos: i64,
    page_size: i64,
    layers: i64,
    pages: i64,
    layer: i64,
    interleaved: i32,
    freqs_f32: i32,
    vec: i32,
    early_next: i32,
}
// SAFETY: plain-old-data with the layout of the kernel's `RopeStoreArgs`.
unsafe impl DeviceRepr for RopeStoreArgs {}

/// The device pointers of a [`rope_kv_store`]: q [tokens, q_heads, dim] and its rotated copy
/// `q_out`, k and v [tokens, kv_heads, dim], the cache, and the slots, freqs_cis and positions.
#[derive(Clone, Copy, Debug)]
pub struct RopeStorePtrs {
    pub q: u64,
    pub q_out: u64,
    pub k: u64,
    pub v: u64,
    pub blocks: u64,
    pub slots: u64,
    pub freqs: u64,
    pub positions: u64,
}

/// How a [`rope_kv_store`] rotates and launches: the rotation's layout, whether freqs_cis is f32
/// (else q's type), and `early_next`: the next kernel may launch before this one waits for the
/// one before it (`KvStoreParams::early_next`: what that kernel reads before its own wait, no
/// unfinished kernel writes).
#[derive(Clone, Copy, Debug, Default)]
pub struct RopeStoreFlags {
    pub interleaved: bool,
    pub freqs_f32: bool,
    pub early_next: bool,
}

/// rope of q into `q_out` and of k into the cache of `layer`, v copied beside it, in one launch:
/// what rope, rope and kv_cache_store compute one after the other (`s.heads` is q's head count;
/// k and v have the cache's).
pub fn rope_kv_store(
    stream: &Arc<CudaStream>,
    dtype: DType,
    p: RopeStorePtrs,
    s: RopeShape,
    cache: CacheLayout,
    layer: usize,
    flags: RopeStoreFlags,
) -> Result<()> {
    let RopeStoreFlags { interleaved, freqs_f32, early_next } = flags;
    let n = s.tokens * (s.heads + 2 * cache.kv_heads) * s.dim;
    if n == 0 {
        return Ok(());
    }
    let ve = 16 / dtype.size_in_bytes().max(1);
    let vec = vec_ok(ve, s.dim, s.rot, interleaved, &[p.q, p.q_out, p.k, p.v, p.blocks, p.freqs]);
    // the vector form's threads: a piece of VE elements each, or a pair of pieces of a rotation
    let threads = if vec {
        let per_head = if interleaved { s.rot / ve } else { s.rot / (2 * ve) } + (s.dim - s.rot) / ve;
        s.tokens * ((s.heads + cache.kv_heads) * per_head + cache.kv_heads * s.dim / ve)
    } else {
        n
    };
    let args = RopeStoreArgs {
        q: p.q,
        q_out: p.q_out,
        k: p.k,
        v: p.v,
        blocks: p.blocks,
        slots: p.slots,
        freqs: p.freqs,
        pos: p.positions,
        tokens: s.tokens as i64,
        q_heads: s.heads as i64,
        kv_heads: cache.kv_heads as i64,
        dim: s.dim as i64,
        rot: s.rot as i64,
        npos: s.positions as i64,
        page_size: cache.page_size as i64,
        layers: cache.layers as i64,
        pages: cache.pages as i64,
        layer: layer as i64,
        interleaved: interleaved as i32,
        freqs_f32: freqs_f32 as i32,
        vec: vec as i32,
        early_next: early_next as i32,
    };
    let name = format!("rope_kv_store_{}", short(dtype)?);
    let f = function(stream.context(), &ATTENTION, &name)?;
    // SAFETY: RopeStoreArgs is the kernel's argument struct; its pointers describe buffers
    // holding what the shapes say (the caller's contract); the kernel waits before reading.
    unsafe {
        super::pdl::launch_pdl(
            stream,
            (&ATTENTION, &name, &f),
            elementwise(threads),
            &args,
            None,
            "cuLaunchKernelEx(rope_kv_store)",
        )
    }?;
    super::record::record("rope_kv_store", || (name.clone(), vec![("vec", vec as i64)]));
    Ok(())
}

/// Whether rope_kv_store can move whole 16-byte pieces of `ve` elements: every head row and
/// each half of the rotary dims (interleaved: the rotary dims) are whole pieces, and every
/// buffer starts on 16 bytes.
fn vec_ok(ve: usize, dim: usize, rot: usize, interleaved: bool, ptrs: &[u64]) -> bool {
    let rot_piece = if interleaved { ve } else { 2 * ve };
    dim.is_multiple_of(ve) && rot.is_multiple_of(rot_piece) && rot <= dim && ptrs.iter().all(|p| p % 16 == 0)
}

#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct AttnArgs {
    pub(super) q: u64,
    pub(super) blocks: u64,
    pub(super) offsets: u64,
    pub(super) lengths: u64,
    pub(super) table: u64,
    pub(super) out: u64,
    pub(super) tokens: i64,
    pub(super) batch: i64,
    pub(super) width: i64,
    pub(super) q_heads: i64,
    pub(super) kv_heads: i64,
    pub(super) dim: i64,
    pub(super) page_size: i64,
    pub(super) layers: i64,
    pub(super) pages: i64,
    pub(super) layer: i64,
    pub(super) window: i64,
    pub(super) scale: f32,
    pub(super) softcap: f32,
    pub(super) mask: i32,
    pub(super) pad: i32,
}
// SAFETY: plain-old-data with the layout of the kernel's `AttnArgs`.
unsafe impl DeviceRepr for AttnArgs {}

pub use super::attention_decode::{SplitPlan, split_plan, split_scratch_bytes};

/// The tensor-core prefill plan of a call over tensors at `q`, `blocks` and `out` (under the
/// current tuning), or None when the decode kernels take it; `(sm90, softcap)` pick among the
/// prefill kernels (whether one runs does not depend on them). f32 calls take it only where
/// they may be read as bf16 (`f32_as_bf16`, `AttentionParams::f32_as_bf16`).
pub fn prefill_plan(
    dtype: DType,
    cache: &CacheLayout,
    (tokens, q_heads, batch): (usize, usize, usize),
    (q, blocks, out): (u64, u64, u64),
    (sm90, softcap): (bool, bool),
    f32_as_bf16: bool,
) -> Option<PrefillPlan> {
    if dtype == DType::Float32 && !f32_as_bf16 {
        return None;
    }
    let aligned = (q | blocks) % 16 == 0 && out % 4 == 0;
    prefill::prefill_plan(dtype, cache, (tokens, q_heads, batch), aligned, (sm90, softcap), &max_tuning::current())
}

/// Bytes of scratch [`paged_attention`] needs for a call (`AttentionPtrs::partial`): none when
/// the prefill kernel or a single split runs it. `f32_as_bf16`: `AttentionParams::f32_as_bf16`.
pub fn scratch_bytes(
    dtype: DType,
    cache: &CacheLayout,
    (tokens, q_heads, batch, width): (usize, usize, usize, usize),
    (q, blocks, out): (u64, u64, u64),
    f32_as_bf16: bool,
) -> usize {
    if prefill_plan(dtype, cache, (tokens, q_heads, batch), (q, blocks, out), (false, false), f32_as_bf16).is_some() {
        return 0;
    }
    split_plan(dtype, cache, q_heads, tokens, width, f32_as_bf16)
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
    /// f32 scratch of `split_scratch_bytes` for the decode form's shares (0: none;
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
    // The device is asked for its architecture only when a prefill kernel takes the call.
    let ptrs3 = (ptrs.q, ptrs.blocks, ptrs.out);
    let rows = (tokens, q_heads, batch);
    if prefill_plan(dtype, &cache, rows, ptrs3, (false, false), p.f32_as_bf16).is_some() {
        let kind = (prefill::is_sm90(stream)?, p.softcap > 0.0);
        if let Some(plan) = prefill_plan(dtype, &cache, rows, ptrs3, kind, p.f32_as_bf16) {
            return prefill::launch(stream, &plan, args, dtype, &cache);
        }
    }
    let tasks = tokens * q_heads;
    let aligned = [ptrs.q, ptrs.blocks].iter().all(|p| p % 16 == 0);
    if let Some(plan) = split_plan(dtype, &cache, q_heads, tokens, width, p.f32_as_bf16).filter(|_| aligned) {
        let scratch = split_scratch_bytes(&plan, tokens, q_heads, cache.head_dim);
        if scratch == 0 || ptrs.partial != 0 {
            return super::attention_decode::launch(stream, dtype, args, plan, ptrs.partial, p.early_index);
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

/// Every kernel these wrappers launch from the attention family (the decode form's are
/// attention_decode::kernels): (family, name, bytes of its argument struct), for the compile
/// checks in tests/.
#[doc(hidden)]
pub fn kernels() -> Vec<(crate::sources::Family, String, usize)> {
    let mut all = Vec::new();
    for dt in ["f32", "f16", "bf16"] {
        all.push((ATTENTION, format!("rope_{dt}"), size_of::<RopeArgs>()));
        all.push((ATTENTION, format!("rope_kv_store_{dt}"), size_of::<RopeStoreArgs>()));
        all.push((ATTENTION, format!("kv_cache_store_{dt}"), size_of::<StoreArgs>()));
        all.push((ATTENTION, format!("paged_attention_{dt}"), size_of::<AttnArgs>()));
    }
    all
}

#[cfg(test)]
mod tests {
    use super::vec_ok;

    #[test]
    fn rope_store_pieces_need_whole_halves_and_aligned_buffers() {
        // bf16 (8 a piece): rot 128 halves into 64 + 64, rot 24 does not (12), interleaved does
        assert!(vec_ok(8, 128, 128, false, &[0, 256, 4096]));
        assert!(!vec_ok(8, 32, 24, false, &[0]) && vec_ok(8, 32, 24, true, &[0]));
        assert!(vec_ok(4, 32, 24, false, &[0]) && !vec_ok(4, 30, 24, false, &[0]));
        assert!(!vec_ok(8, 128, 128, false, &[0, 8]) && !vec_ok(8, 64, 128, true, &[0]));
    }
}
