//! Launching attention_prefill.cu: paged_attention on tensor cores for batches of long prompts.
//! [`prefill_plan`] decides, without a device, whether a call takes this kernel and how its grid
//! is shaped; [`launch`] runs it. `paged_attention` (launch/attention.rs) dispatches here.

use std::sync::Arc;

use cudarc::driver::{CudaStream, DeviceRepr, LaunchConfig, PushKernelArg};
use max_graph::DType;
use max_graph::ops::attention::CacheLayout;
use max_tuning::{Knob, Tuning};

use super::attention::AttnArgs;
use crate::sources::ATTENTION_PREFILL;
use crate::{Error, Result, function};

/// Query rows per CTA (PF_ROWS in attention_prefill.cu).
const ROWS: usize = 64;
/// Threads per CTA (PF_THREADS).
const THREADS: u32 = 128;
/// Head dims the kernel is compiled for.
pub const HEAD_DIMS: [usize; 2] = [64, 128];
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

/// How a prefill call is launched: the kernel and the grid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrefillPlan {
    pub kernel: String,
    /// Tile slots per query head: `tokens / 64 + batch` (the kernel maps each slot to a
    /// sequence's tile through the offsets, which only the device holds).
    pub slots: usize,
    /// CTAs: `slots * q_heads`.
    pub blocks: usize,
    /// Dynamic shared memory: the Q tile, two K and two V tiles, two stages of key flags.
    pub smem: usize,
}

/// The plan of a call of `tokens` query rows of `q_heads` heads from `batch` sequences, or
/// None when the call stays on the decode kernels: not f16/bf16, a head dim without a
/// compiled kernel, query heads that are not a multiple of the kv heads, tensors that are not
/// 16-byte aligned, fewer than `attention.prefill_rows` rows per sequence on average, the
/// kernel turned off (`attention.prefill`), or a grid too large for one launch.
pub fn prefill_plan(
    dtype: DType,
    cache: &CacheLayout,
    (tokens, q_heads, batch): (usize, usize, usize),
    aligned: bool,
    tuning: &Tuning,
) -> Option<PrefillPlan> {
    let ty = match dtype {
        DType::BFloat16 => "bf16",
        DType::Float16 => "f16",
        _ => return None,
    };
    let d = cache.head_dim;
    let rows_per_seq = tuning.int(Knob::AttentionPrefillRows).unwrap_or(DEFAULT_ROWS_PER_SEQ);
    let usable = tuning.flag_or(Knob::AttentionPrefill, true)
        && HEAD_DIMS.contains(&d)
        && cache.kv_heads > 0
        && q_heads % cache.kv_heads == 0
        && aligned
        && batch > 0
        && tokens >= rows_per_seq.saturating_mul(batch);
    if !usable {
        return None;
    }
    let slots = tokens / ROWS + batch;
    let blocks = slots.checked_mul(q_heads)?;
    if blocks > i32::MAX as usize {
        return None;
    }
    Some(PrefillPlan {
        kernel: format!("attention_prefill_d{d}_{ty}"),
        slots,
        blocks,
        smem: 5 * ROWS * d * 2 + 2 * ROWS,
    })
}

/// Runs `plan` with the call's arguments (built once by `attention::paged_attention`).
pub(super) fn launch(stream: &Arc<CudaStream>, plan: &PrefillPlan, a: AttnArgs) -> Result<()> {
    let args = PrefillArgs { a, slots: plan.slots as i64 };
    super::record::record("attention_prefill", || {
        (plan.kernel.clone(), vec![("slots", plan.slots as i64), ("blocks", plan.blocks as i64)])
    });
    let f = function(stream.context(), &ATTENTION_PREFILL, &plan.kernel)?;
    crate::allow_smem(stream.context(), &f, plan.smem as u32)?;
    let config = LaunchConfig {
        grid_dim: (plan.blocks as u32, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: plan.smem as u32,
    };
    let mut launch = stream.launch_builder(&f);
    launch.arg(&args);
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
        for ty in ["bf16", "f16"] {
            all.push((ATTENTION_PREFILL, format!("attention_prefill_d{d}_{ty}"), size_of::<PrefillArgs>()));
        }
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(kv_heads: usize, head_dim: usize) -> CacheLayout {
        CacheLayout { pages: 100, layers: 2, page_size: 16, kv_heads, head_dim }
    }

    #[test]
    fn prompts_take_the_tensor_core_kernel_and_decode_steps_do_not() {
        let t = Tuning::default();
        // An 8B-shaped 2048-token prompt: 32 tiles + 1 spare slot per head, 80 KiB of tiles.
        let p = prefill_plan(DType::BFloat16, &cache(8, 128), (2048, 32, 1), true, &t).unwrap();
        assert_eq!(
            p,
            PrefillPlan {
                kernel: "attention_prefill_d128_bf16".into(),
                slots: 33,
                blocks: 33 * 32,
                smem: 81_920 + 128
            }
        );
        // Ragged: 100 rows over 3 sequences; the slots cover any split of the rows.
        let p = prefill_plan(DType::Float16, &cache(2, 64), (100, 8, 3), true, &t).unwrap();
        assert_eq!((p.kernel.as_str(), p.slots, p.blocks), ("attention_prefill_d64_f16", 4, 32));
        // Decode (one row per sequence), f32, other head dims, unaligned tensors, GQA that
        // does not divide: the decode kernels.
        assert!(prefill_plan(DType::BFloat16, &cache(8, 128), (64, 32, 64), true, &t).is_none());
        assert!(prefill_plan(DType::Float32, &cache(8, 128), (2048, 32, 1), true, &t).is_none());
        assert!(prefill_plan(DType::BFloat16, &cache(8, 96), (2048, 32, 1), true, &t).is_none());
        assert!(prefill_plan(DType::BFloat16, &cache(8, 128), (2048, 32, 1), false, &t).is_none());
        assert!(prefill_plan(DType::BFloat16, &cache(3, 64), (2048, 8, 1), true, &t).is_none());
    }

    #[test]
    fn the_knobs_move_the_threshold_or_turn_the_kernel_off() {
        let c = cache(8, 128);
        let t = Tuning::parse("attention.prefill_rows=1").unwrap();
        assert!(prefill_plan(DType::BFloat16, &c, (64, 32, 64), true, &t).is_some());
        let t = Tuning::parse("attention.prefill_rows=16").unwrap();
        assert!(prefill_plan(DType::BFloat16, &c, (8 * 16 - 1, 32, 8), true, &t).is_none());
        assert!(prefill_plan(DType::BFloat16, &c, (8 * 16, 32, 8), true, &t).is_some());
        let t = Tuning::parse("attention.prefill=0").unwrap();
        assert!(prefill_plan(DType::BFloat16, &c, (2048, 32, 1), true, &t).is_none());
    }

    #[test]
    fn slots_cover_every_ragged_split() {
        // The kernel's slot map: sequence b owns slots offsets[b] / 64 + b .. that of b + 1;
        // enough for its rows, and the total within tokens / 64 + batch.
        let splits: [&[u32]; 4] = [&[0, 1, 65, 200], &[0, 63, 64, 127, 300], &[0, 0, 64, 64], &[0, 129]];
        for offsets in splits {
            let (batch, tokens) = (offsets.len() - 1, *offsets.last().unwrap() as usize);
            let first = |b: usize| offsets[b] as usize / ROWS + b;
            for b in 0..batch {
                let rows = (offsets[b + 1] - offsets[b]) as usize;
                assert!(first(b + 1) - first(b) >= rows.div_ceil(ROWS), "{offsets:?} sequence {b}");
            }
            assert!(first(batch) <= tokens / ROWS + batch);
        }
    }
}
