//! Launching attention_prefill.cu (mma.sync) and attention_prefill_sm90.cu (wgmma, Hopper):
//! paged_attention on tensor cores for batches of long prompts. [`prefill_plan`] decides, without
//! a device, whether a call takes one of these kernels, which, and how its grid is shaped;
//! [`launch`] runs it. `paged_attention` (launch/attention.rs) dispatches here.

use std::sync::Arc;

use cudarc::driver::sys::CUtensorMapSwizzle;
use cudarc::driver::{CudaStream, DeviceRepr, LaunchConfig, PushKernelArg};
use max_graph::DType;
use max_graph::ops::attention::CacheLayout;
use max_tuning::{Knob, Tuning};

use super::attention::AttnArgs;
use super::tma::{self, TmaMap};
use crate::sources::{ATTENTION_PREFILL, ATTENTION_PREFILL_SM90};
use crate::{Error, Result, function};

/// Query rows per CTA (PF_ROWS in attention_prefill.cu).
const ROWS: usize = 64;
/// Threads per CTA (PF_THREADS).
const THREADS: u32 = 128;
/// Head dims the kernels are compiled for.
pub const HEAD_DIMS: [usize; 2] = [64, 128];
/// Query rows per CTA of the wgmma kernel (FA_ROWS in attention_prefill_sm90.cu).
const ROWS_SM90: usize = 128;
/// Keys per tile of the wgmma kernel (FA_KEYS).
const KEYS_SM90: usize = 128;
/// Threads per CTA of the wgmma kernel: a producer and two consumer warpgroups.
const THREADS_SM90: u32 = 384;
/// Query rows per sequence from which a call counts as a prefill (knob `attention.prefill_rows`):
/// below it a CTA's 64-row tile is mostly padding and the decode kernels' key splits fill the
/// GPU better.
const DEFAULT_ROWS_PER_SEQ: usize = 8;

#[repr(C)]
#[derive(Clone, Copy)]
struct PrefillArgs {
    a: AttnArgs,
    slots: i64,
}
// SAFETY: plain-old-data with the layout of the kernel's `PrefillArgs`.
unsafe impl DeviceRepr for PrefillArgs {}

/// The wgmma kernel's one parameter (a grid constant): the TMA producer's tensor maps over the
/// cache and Q (zeros when the cp.async producer runs), then the arguments.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct PrefillArgsSm90 {
    kv: TmaMap,
    q: TmaMap,
    a: AttnArgs,
    slots: i64,
    tma: i32,
    pad: i32,
}
// SAFETY: plain-old-data with the layout of attention_prefill_sm90.cu's `PrefillArgs`.
unsafe impl DeviceRepr for PrefillArgsSm90 {}

/// How a prefill call is launched: the kernel and the grid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrefillPlan {
    pub kernel: String,
    /// The wgmma kernel (attention_prefill_sm90.cu) rather than the mma.sync one.
    pub wgmma: bool,
    /// The wgmma kernel's producer loads K and V by TMA (pages of a multiple of 64 keys, under
    /// `attention.prefill_tma`) rather than by cp.async.
    pub tma: bool,
    /// Tile slots per query head: `tokens / rows + batch` for the kernel's `rows` per CTA (64,
    /// or 128 for the wgmma kernel; the kernel maps each slot to a sequence's tile through the
    /// offsets, which only the device holds).
    pub slots: usize,
    /// CTAs: `slots * q_heads`.
    pub blocks: usize,
    /// Threads per CTA.
    pub threads: u32,
    /// Dynamic shared memory: the Q tile, the K and V stages, and the mma.sync kernel's key
    /// flags or the wgmma kernel's barriers, row offsets and 1024 bytes of alignment slack.
    pub smem: usize,
}

/// Stages of the wgmma kernel's (K, V) ring for head dim `d` (FaStages).
fn stages_sm90(d: usize) -> usize {
    if d == 128 { 2 } else { 3 }
}

/// Tiles of key offsets the wgmma kernel's producer keeps (FA_ROWOFF).
const ROWOFF_SM90: usize = 4;

/// Dynamic shared memory of the wgmma kernel for head dim `d`: alignment slack, the Q tile, the
/// stages, then per stage four barriers (K and V full and empty) and the Q barrier, and the
/// producer's ring of u64 key offsets.
fn smem_sm90(d: usize) -> usize {
    let s = stages_sm90(d);
    1024 + ROWS_SM90 * d * 2 + s * 2 * KEYS_SM90 * d * 2 + (4 * s + 1) * 8 + ROWOFF_SM90 * KEYS_SM90 * 8
}

/// The plan of a call of `tokens` query rows of `q_heads` heads from `batch` sequences, or
/// None when the call stays on the decode kernels: not f16/bf16/f32, a head dim without a
/// compiled kernel, query heads that are not a multiple of the kv heads, tensors that are not
/// 16-byte aligned, fewer than `attention.prefill_rows` rows per sequence on average, the
/// kernels turned off (`attention.prefill`), or a grid too large for one launch.
/// On an sm_90 device (`sm90`) the wgmma kernel takes every such call (its `_cap` form when
/// `softcap`, else its `_pp` form under `attention.prefill_pingpong`) unless
/// `attention.prefill_wgmma` is off, loading K and V by TMA where [`tma_fits`] and
/// `attention.prefill_tma` allow; elsewhere the mma.sync kernel does.
pub fn prefill_plan(
    dtype: DType,
    cache: &CacheLayout,
    (tokens, q_heads, batch): (usize, usize, usize),
    aligned: bool,
    (sm90, softcap): (bool, bool),
    tuning: &Tuning,
) -> Option<PrefillPlan> {
    let ty = match dtype {
        DType::BFloat16 => "bf16",
        DType::Float16 => "f16",
        // (f32: the mma.sync kernel's `_f32` form, Q, K and V rounded to bf16 as it stages them)
        DType::Float32 => "f32",
        _ => return None,
    };
    let d = cache.head_dim;
    let rows_per_seq = tuning.int(Knob::AttentionPrefillRows).unwrap_or(DEFAULT_ROWS_PER_SEQ);
    // Batch-invariant: whether this kernel runs depends on the other sequences of the call
    // (tokens per sequence), and a row's result on the kernel; the decode kernels run every call.
    let usable = tuning.flag_or(Knob::AttentionPrefill, true)
        && (dtype != DType::Float32 || tuning.flag_or(Knob::AttentionPrefillF32, true))
        && !tuning.batch_invariant()
        && HEAD_DIMS.contains(&d)
        && cache.kv_heads > 0
        && q_heads % cache.kv_heads == 0
        && aligned
        && batch > 0
        && tokens >= rows_per_seq.saturating_mul(batch);
    if !usable {
        return None;
    }
    let wgmma = sm90 && dtype != DType::Float32 && tuning.flag_or(Knob::AttentionPrefillWgmma, true);
    let slots = tokens / if wgmma { ROWS_SM90 } else { ROWS } + batch;
    let blocks = slots.checked_mul(q_heads)?;
    if blocks > i32::MAX as usize {
        return None;
    }
    if wgmma {
        let form = if softcap {
            "_cap"
        } else if tuning.flag_or(Knob::AttentionPrefillPingpong, false) {
            "_pp"
        } else {
            ""
        };
        return Some(PrefillPlan {
            kernel: format!("attention_prefill_sm90_d{d}_{ty}{form}"),
            wgmma,
            tma: tuning.flag_or(Knob::AttentionPrefillTma, true) && tma_fits(cache, tokens),
            slots,
            blocks,
            threads: THREADS_SM90,
            smem: smem_sm90(d),
        });
    }
    Some(PrefillPlan {
        kernel: format!("attention_prefill_d{d}_{ty}"),
        wgmma,
        tma: false,
        slots,
        blocks,
        threads: THREADS,
        smem: 5 * ROWS * d * 2 + 2 * ROWS,
    })
}

/// Whether the wgmma kernel's TMA producer can load this cache: pages of a multiple of 64 keys
/// (each 64-key half of a 128-key tile is one box of one page), and slab and row coordinates
/// (page * 2 * layers + kv * layers + layer; query rows) that fit an int.
pub fn tma_fits(cache: &CacheLayout, tokens: usize) -> bool {
    let slabs = cache.pages.saturating_mul(2 * cache.layers);
    cache.page_size > 0
        && cache.page_size.is_multiple_of(64)
        && (1..=i32::MAX as usize).contains(&slabs)
        && (1..=(i32::MAX as usize - 256)).contains(&tokens)
}

/// The TMA producer's tensor maps: the cache at `blocks` as [slabs, page_size, kv_heads, d]
/// (slab = page * 2 * layers + kv * layers + layer) and Q at `q` as [tokens, q_heads, d], both in
/// boxes of 64 dims x 1 head x 64 rows with the 128-byte swizzle (the wgmma tiles' layout).
fn tma_maps(
    dtype: DType,
    cache: &CacheLayout,
    (q, blocks): (u64, u64),
    (tokens, q_heads): (usize, usize),
) -> Result<(TmaMap, TmaMap)> {
    let d = cache.head_dim as u64;
    let (kvh, ps) = (cache.kv_heads as u64, cache.page_size as u64);
    let slabs = (cache.pages * 2 * cache.layers) as u64;
    let sw = CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B;
    let kv = tma::tiled(
        tma::half_type(dtype),
        blocks,
        &[d, kvh, ps, slabs],
        &[d * 2, kvh * d * 2, ps * kvh * d * 2],
        &[64, 1, 64, 1],
        sw,
    )
    .map_err(Error::driver("cuTensorMapEncodeTiled(attention_prefill kv)"))?;
    let qm = tma::tiled(
        tma::half_type(dtype),
        q,
        &[d, q_heads as u64, tokens as u64],
        &[d * 2, q_heads as u64 * d * 2],
        &[64, 1, 64],
        sw,
    )
    .map_err(Error::driver("cuTensorMapEncodeTiled(attention_prefill q)"))?;
    Ok((kv, qm))
}

/// Whether the stream's device is sm_90 (Hopper: the wgmma kernel's architecture).
pub(super) fn is_sm90(stream: &Arc<CudaStream>) -> Result<bool> {
    Ok(crate::modules::arch_name(stream.context())? == "sm_90a")
}

/// Runs `plan` with the call's arguments (built once by `attention::paged_attention`) over a
/// cache of `cache`'s layout holding `dtype`.
pub(super) fn launch(
    stream: &Arc<CudaStream>,
    plan: &PrefillPlan,
    a: AttnArgs,
    dtype: DType,
    cache: &CacheLayout,
) -> Result<()> {
    super::record::record("attention_prefill", || {
        let fields = vec![("slots", plan.slots as i64), ("blocks", plan.blocks as i64), ("tma", plan.tma as i64)];
        (plan.kernel.clone(), fields)
    });
    let family = if plan.wgmma { &ATTENTION_PREFILL_SM90 } else { &ATTENTION_PREFILL };
    let f = function(stream.context(), family, &plan.kernel)?;
    crate::allow_smem(stream.context(), &f, plan.smem as u32)?;
    let config = LaunchConfig {
        grid_dim: (plan.blocks as u32, 1, 1),
        block_dim: (plan.threads, 1, 1),
        shared_mem_bytes: plan.smem as u32,
    };
    let mut launch = stream.launch_builder(&f);
    let args = PrefillArgs { a, slots: plan.slots as i64 };
    let args_sm90;
    if plan.wgmma {
        let (kv, q) = if plan.tma {
            tma_maps(dtype, cache, (a.q, a.blocks), (a.tokens as usize, a.q_heads as usize))?
        } else {
            (TmaMap([0; 16]), TmaMap([0; 16]))
        };
        args_sm90 = PrefillArgsSm90 { kv, q, a, slots: plan.slots as i64, tma: plan.tma as i32, pad: 0 };
        launch.arg(&args_sm90);
    } else {
        launch.arg(&args);
    }
    // SAFETY: the #[repr(C)] twin of the kernel's argument struct, with device pointers to
    // buffers holding the elements the shapes describe (the caller's contract).
    unsafe { launch.launch(config) }.map_err(Error::driver("cuLaunchKernel(attention_prefill)"))?;
    Ok(())
}

/// Every kernel this module launches: (family, name, bytes of its argument struct), for the
/// compile checks in tests/.
#[doc(hidden)]
pub fn kernels() -> Vec<(crate::sources::Family, String, usize)> {
    let mut all = Vec::new();
    for d in HEAD_DIMS {
        for ty in ["bf16", "f16", "f32"] {
            all.push((ATTENTION_PREFILL, format!("attention_prefill_d{d}_{ty}"), size_of::<PrefillArgs>()));
        }
    }
    all
}

/// The wgmma kernels (attention_prefill_sm90.cu), as [`kernels`] lists the mma.sync ones.
#[doc(hidden)]
pub fn kernels_sm90() -> Vec<(crate::sources::Family, String, usize)> {
    let mut all = Vec::new();
    for d in HEAD_DIMS {
        for ty in ["bf16", "f16"] {
            for form in ["", "_cap", "_pp"] {
                all.push((
                    ATTENTION_PREFILL_SM90,
                    format!("attention_prefill_sm90_d{d}_{ty}{form}"),
                    size_of::<PrefillArgsSm90>(),
                ));
            }
        }
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A device that is not sm_90, no softcap.
    const MMA: (bool, bool) = (false, false);

    fn cache(kv_heads: usize, head_dim: usize) -> CacheLayout {
        CacheLayout { pages: 100, layers: 2, page_size: 16, kv_heads, head_dim }
    }

    #[test]
    fn prompts_take_the_tensor_core_kernel_and_decode_steps_do_not() {
        let t = Tuning::default();
        // An 8B-shaped 2048-token prompt: 32 tiles + 1 spare slot per head, 80 KiB of tiles.
        let p = prefill_plan(DType::BFloat16, &cache(8, 128), (2048, 32, 1), true, MMA, &t).unwrap();
        assert_eq!(
            p,
            PrefillPlan {
                kernel: "attention_prefill_d128_bf16".into(),
                wgmma: false,
                tma: false,
                slots: 33,
                blocks: 33 * 32,
                threads: 128,
                smem: 81_920 + 128
            }
        );
        // Ragged: 100 rows over 3 sequences; the slots cover any split of the rows.
        let p = prefill_plan(DType::Float16, &cache(2, 64), (100, 8, 3), true, MMA, &t).unwrap();
        assert_eq!((p.kernel.as_str(), p.slots, p.blocks), ("attention_prefill_d64_f16", 4, 32));
        // f32 prompts: the mma.sync kernel's _f32 form.
        let p = prefill_plan(DType::Float32, &cache(8, 128), (2048, 32, 1), true, MMA, &t).unwrap();
        assert_eq!((p.kernel.as_str(), p.wgmma), ("attention_prefill_d128_f32", false));
        // ... unless attention.prefill_f32 is off (16-bit prompts are not affected)
        let off = Tuning::parse("attention.prefill_f32=0").unwrap();
        assert!(prefill_plan(DType::Float32, &cache(8, 128), (2048, 32, 1), true, MMA, &off).is_none());
        assert!(prefill_plan(DType::BFloat16, &cache(8, 128), (2048, 32, 1), true, MMA, &off).is_some());
        // Decode (one row per sequence), other dtypes and head dims, unaligned tensors, GQA that
        // does not divide: the decode kernels.
        assert!(prefill_plan(DType::BFloat16, &cache(8, 128), (64, 32, 64), true, MMA, &t).is_none());
        assert!(prefill_plan(DType::Float64, &cache(8, 128), (2048, 32, 1), true, MMA, &t).is_none());
        assert!(prefill_plan(DType::BFloat16, &cache(8, 96), (2048, 32, 1), true, MMA, &t).is_none());
        assert!(prefill_plan(DType::BFloat16, &cache(8, 128), (2048, 32, 1), false, MMA, &t).is_none());
        assert!(prefill_plan(DType::BFloat16, &cache(3, 64), (2048, 8, 1), true, MMA, &t).is_none());
    }

    #[test]
    fn the_knobs_move_the_threshold_or_turn_the_kernel_off() {
        let c = cache(8, 128);
        let t = Tuning::parse("attention.prefill_rows=1").unwrap();
        assert!(prefill_plan(DType::BFloat16, &c, (64, 32, 64), true, MMA, &t).is_some());
        let t = Tuning::parse("attention.prefill_rows=16").unwrap();
        assert!(prefill_plan(DType::BFloat16, &c, (8 * 16 - 1, 32, 8), true, MMA, &t).is_none());
        assert!(prefill_plan(DType::BFloat16, &c, (8 * 16, 32, 8), true, MMA, &t).is_some());
        let t = Tuning::parse("attention.prefill=0").unwrap();
        assert!(prefill_plan(DType::BFloat16, &c, (2048, 32, 1), true, MMA, &t).is_none());
    }

    #[test]
    fn sm90_devices_take_the_wgmma_kernel_unless_it_is_turned_off() {
        let t = Tuning::default();
        let c = cache(8, 128);
        // An 8B-shaped 2048-token prompt: 16 tiles of 128 rows + 1 spare slot per head; the Q
        // tile, two stages of K and V, barriers, the producer's key offsets, alignment slack.
        let p = prefill_plan(DType::BFloat16, &c, (2048, 32, 1), true, (true, false), &t).unwrap();
        assert_eq!(
            p,
            PrefillPlan {
                kernel: "attention_prefill_sm90_d128_bf16".into(),
                wgmma: true,
                tma: false,
                slots: 17,
                blocks: 17 * 32,
                threads: 384,
                smem: 1024 + 32_768 + 131_072 + 72 + 4096
            }
        );
        assert!(p.smem <= 227 * 1024);
        // Softcap has its own kernels; head dim 64 has three stages.
        let p = prefill_plan(DType::Float16, &cache(2, 64), (100, 8, 3), true, (true, true), &t).unwrap();
        assert_eq!((p.kernel.as_str(), p.slots, p.blocks), ("attention_prefill_sm90_d64_f16_cap", 3, 24));
        assert_eq!(p.smem, 1024 + 16_384 + 3 * 32_768 + 104 + 4096);
        // Every other reason to stay off the prefill kernels still holds on sm_90.
        assert!(prefill_plan(DType::BFloat16, &c, (64, 32, 64), true, (true, false), &t).is_none());
        // (f32 prompts take the mma.sync kernel's _f32 form there too)
        let p = prefill_plan(DType::Float32, &c, (2048, 32, 1), true, (true, false), &t).unwrap();
        assert_eq!((p.kernel.as_str(), p.wgmma), ("attention_prefill_d128_f32", false));
        assert!(prefill_plan(DType::BFloat16, &cache(8, 96), (2048, 32, 1), true, (true, false), &t).is_none());
        assert!(prefill_plan(DType::BFloat16, &c, (2048, 32, 1), false, (true, false), &t).is_none());
        // attention.prefill_pingpong=1: the _pp form, except with softcap.
        let t = Tuning::parse("attention.prefill_pingpong=1").unwrap();
        let p = prefill_plan(DType::BFloat16, &c, (2048, 32, 1), true, (true, false), &t).unwrap();
        assert_eq!((p.kernel.as_str(), p.slots, p.smem), ("attention_prefill_sm90_d128_bf16_pp", 17, smem_sm90(128)));
        let p = prefill_plan(DType::BFloat16, &c, (2048, 32, 1), true, (true, true), &t).unwrap();
        assert_eq!(p.kernel, "attention_prefill_sm90_d128_bf16_cap");
        // attention.prefill_wgmma=0: the mma.sync kernel; attention.prefill=0: neither.
        let t = Tuning::parse("attention.prefill_wgmma=0").unwrap();
        let p = prefill_plan(DType::BFloat16, &c, (2048, 32, 1), true, (true, true), &t).unwrap();
        assert_eq!((p.kernel.as_str(), p.wgmma, p.slots, p.threads), ("attention_prefill_d128_bf16", false, 33, 128));
        let t = Tuning::parse("attention.prefill=0").unwrap();
        assert!(prefill_plan(DType::BFloat16, &c, (2048, 32, 1), true, (true, false), &t).is_none());
    }

    #[test]
    fn pages_of_a_multiple_of_64_keys_load_by_tma_unless_turned_off() {
        let t = Tuning::default();
        let at = |ps: usize, t: &Tuning| {
            let c = CacheLayout { pages: 100, layers: 2, page_size: ps, kv_heads: 8, head_dim: 128 };
            prefill_plan(DType::BFloat16, &c, (2048, 32, 1), true, (true, false), t).unwrap().tma
        };
        assert!(at(64, &t) && at(128, &t) && at(256, &t));
        assert!(!at(16, &t) && !at(32, &t) && !at(96, &t));
        assert!(!at(128, &Tuning::parse("attention.prefill_tma=0").unwrap()));
        // The mma.sync kernel never does; slab coordinates past an int do not.
        let c = CacheLayout { pages: 100, layers: 2, page_size: 128, kv_heads: 8, head_dim: 128 };
        assert!(!prefill_plan(DType::BFloat16, &c, (2048, 32, 1), true, MMA, &t).unwrap().tma);
        let huge = CacheLayout { pages: 1 << 30, ..c };
        assert!(!tma_fits(&huge, 2048) && tma_fits(&c, 2048));
    }

    #[test]
    fn slots_cover_every_ragged_split() {
        // The kernels' slot map: sequence b owns slots offsets[b] / rows + b .. that of b + 1;
        // enough for its rows, and the total within tokens / rows + batch (rows 64 or 128).
        let splits: [&[u32]; 5] =
            [&[0, 1, 65, 200], &[0, 63, 64, 127, 300], &[0, 0, 64, 64], &[0, 129], &[0, 127, 128, 383, 384, 1000]];
        for rows_per_cta in [ROWS, ROWS_SM90] {
            for offsets in splits {
                let (batch, tokens) = (offsets.len() - 1, *offsets.last().unwrap() as usize);
                let first = |b: usize| offsets[b] as usize / rows_per_cta + b;
                for b in 0..batch {
                    let rows = (offsets[b + 1] - offsets[b]) as usize;
                    assert!(first(b + 1) - first(b) >= rows.div_ceil(rows_per_cta), "{offsets:?} sequence {b}");
                }
                assert!(first(batch) <= tokens / rows_per_cta + batch);
            }
        }
    }
}
