//! Launching paged_attention's decode form (attention_decode.cu's CUDA-core kernel,
//! attention_decode_mma.cu's tensor-core kernel for f16/bf16 rows of 16 to 256 dims and f32
//! rows of up to 128 read as bf16, `AttentionParams::f32_as_bf16`): the plan
//! (the kernel, lanes per key row, its head group, keys per step, splits) is a pure function of
//! the call's shapes, so a CUDA graph keeps one grid whatever the sequences' lengths; the kernel
//! itself works out how many of the splits each sequence needs.

use std::sync::Arc;

use cudarc::driver::{CudaStream, DeviceRepr};
use max_graph::DType;
use max_graph::ops::attention::CacheLayout;

use super::attention::AttnArgs;
use super::pdl::Pdl;
use crate::sources::ATTENTION_DECODE;
use crate::{Result, function};

/// Query heads one block serves (DEC_MAXG in attention_decode.cu).
const MAX_GROUP: usize = 8;
/// Threads of a block (DEC_THREADS): the tensor-core kernel's and the 16-bit CUDA-core ones'.
const THREADS: usize = 128;
/// Threads of the f32 CUDA-core kernels' blocks (DEC_THREADS_F32).
const THREADS_F32: usize = 512;
/// Page sizes from this on take the general form (the decode form's key offsets within a
/// window of DEC_WINDOW pages are 32-bit).
const MAX_PAGE_SIZE: usize = 1 << 22;
/// The most splits of one (row, kv head) (DEC_MAX_SPLITS), whatever `attention.splits` says.
const MAX_SPLITS: usize = 64;
/// The most splits per (row, kv head) when the knob leaves it to the plan: enough blocks to
/// keep every SM of an H100/H200 streaming (two or more each) at one sequence, while the merge,
/// which one block does at the end, stays short.
const DEFAULT_SPLITS: usize = 32;
/// Threads worth launching for the CUDA-core kernels: about 512 per SM of an H100/H200 (four
/// 128-thread blocks, one of the f32 kernels' 512). More (row, kv head) pairs than this takes
/// per split do not split their keys further. An H200, SmolLM2-135M Q4_1 (the 512-thread f32
/// kernel, one block per SM), decode tok/s by the splits of 8 and 64 sequences: at 8, 11
/// (264 blocks) 3,937, 6 (144) 4,212; at 64, 3 (576) 15,088, 2 (384) 16,286, 1 (192) 15,835.
const TARGET_THREADS: usize = 132 * 512;
/// SMs of an H100/H200: the tensor-core kernel's splits fill one wave of resident blocks.
const SMS: usize = 132;
/// Keys per tile of the tensor-core kernel (DM_KEYS) and tiles in each warp's ring (DM_STAGES).
const MMA_KEYS: usize = 16;
const MMA_STAGES: usize = 3;
/// Shared memory of an SM, and what the tensor-core kernel holds beyond its dynamic part
/// (decode_split's and decode_finish's arrays) plus the 1 KiB the driver keeps per block.
const SMEM_PER_SM: usize = 228 * 1024;
const MMA_SMEM_EXTRA: usize = MAX_GROUP * MAX_SPLITS * 4 + 64 + 1024;
/// Steps of keys (THREADS / 32 warps x MMA_KEYS) a split of the tensor-core kernel takes at
/// least in a call of one query row, so that each warp of a whole split walks two tiles: a
/// sequence shorter than the plan's splits x 2 steps uses fewer splits (the rest of the grid
/// leaves at once). An H200, decode at one sequence after 512-token prompts (513-576 keys: 5
/// splits of 128 keys instead of 9-10 of 64), this rule against one step, two processes each:
/// SmolLM2-135M Q4_1 1,859 / 1,867 tok/s against 1,815 / 1,828, Llama-3.2-1B-shaped bf16 1,074
/// / 1,075 against 1,069 / 1,065. At 8 sequences it cost SmolLM2 0.6-0.7% (4,789 against 4,822:
/// 120 blocks instead of 240), so more rows keep one step. Rows of more than
/// MMA_MIN_STEPS_DIM dims keep one step too: the Llama-3-8B-shaped Q4_0 model (128 dims, f32
/// cache) decoded at 433.5 / 434.4 tok/s with two steps and 439.2 / 440.1 with one; and four
/// steps at 64 dims cost the 1B-shaped model 2.7% (1,042 / 1,047 against 1,071 / 1,075).
const MMA_MIN_STEPS: usize = 2;
const MMA_MIN_STEPS_DIM: usize = 64;
/// The most tensor-core blocks an SM holds (registers: see the ptxas table).
const MMA_MOST_PER_SM: usize = 4;

#[repr(C)]
#[derive(Clone, Copy)]
struct DecodeArgs {
    a: AttnArgs,
    partial: u64,
    counters: u64,
    splits: i64,
    lpk: i32,
    group: i32,
    early: i32,
    min_steps: i32,
}
// SAFETY: plain-old-data with the layout of the kernel's `DecodeArgs`.
unsafe impl DeviceRepr for DecodeArgs {}

/// How the decode form divides a call. None when the general form must run (rows that are not
/// whole 16-byte pieces for at most a warp, more than MAX_GROUP query heads per kv head).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitPlan {
    /// Lanes per key row (16 bytes each).
    pub lpk: usize,
    /// Query heads per kv head.
    pub group: usize,
    /// The kernel's head group: `group` rounded up to a power of two.
    pub kernel_group: usize,
    /// Keys a block takes per step (its threads / lpk lane groups, each loading the keys of
    /// `block_plan`).
    pub step: usize,
    /// Splits of each (row, kv head): the grid is rows x kv heads x splits.
    pub splits: usize,
    /// The tensor-core kernel (f16/bf16 rows of 16 to 256 dims, f32 ones of up to 128 with
    /// `attention.decode_f32_mma`) rather than the CUDA-core one.
    pub mma: bool,
    /// Steps a split takes at least (MMA_MIN_STEPS for the tensor-core kernel at one query
    /// row of up to MMA_MIN_STEPS_DIM dims, else 1): a sequence uses as many of the splits as
    /// that leaves it.
    pub min_steps: usize,
}

/// Dynamic shared memory of the tensor-core kernel for `elem`-byte cache elements: per warp a
/// ring of tiles of keys and values (rows padded by 16 bytes, f32 keys by 32) and a 16 x 8 tile
/// of probabilities.
fn mma_smem(dim: usize, elem: usize) -> usize {
    let (key_row, value_row) = (dim * elem + if elem == 4 { 32 } else { 16 }, dim * elem + 16);
    (THREADS / 32) * (MMA_STAGES * MMA_KEYS * (key_row + value_row) + MMA_KEYS * 16)
}

/// The most head dims of the f32 tensor-core kernels (a warp copies a row in one pass).
const MMA_F32_MAX_DIM: usize = 128;

/// Threads of a CUDA-core kernel's block, the keys (and values) each of its lane groups loads
/// at once (NT and U in attention_decode.cu's DECODE) and its name's dtype part: fewer keys
/// where the heads' queries and accumulators take more registers; the f32 kernels for rows of
/// up to 16 lanes have four (at eight heads two) times the threads, each group as many times
/// fewer keys (the same keys per step); f32 rows of a whole warp keep 128 threads
/// (`_f32_wide`: measured faster there).
fn block_plan(dtype: DType, kernel_group: usize, lpk: usize) -> (usize, usize, &'static str) {
    let keys = match (kernel_group, dtype.size_in_bytes()) {
        (8, 4) => 4,
        (8, _) => 3,
        (4, 4) => 8,
        (4, _) => 6,
        _ => 8,
    };
    match (kernel_group, dtype.size_in_bytes()) {
        (_, 4) if lpk == 32 => (THREADS, keys, "f32_wide"),
        (8, 4) => (THREADS_F32 / 2, keys / 2, "f32"), // registers: 512 threads would spill
        (_, 4) => (THREADS_F32, keys / 4, "f32"),
        _ => (THREADS, keys, if dtype == DType::Float16 { "f16" } else { "bf16" }),
    }
}

/// The plan of a call of `tokens` query rows of `q_heads` heads over lookup-table rows of
/// `width` pages (the most keys a sequence can hold is `width * page_size`).
///
/// Batch-invariant (`numerics.batch_invariant`): one split. A split's keys are a share of the
/// sequence's length over the call's split count, which follows the batch (rows x kv heads)
/// and the table's width; unsplit, a (row, kv head) block walks its keys in one fixed order
/// and writes the output directly, whatever else is in the batch. f32 rows go to the tensor
/// cores only where the call allows reading them as bf16 (`AttentionParams::f32_as_bf16`) and
/// `attention.decode_f32_mma` is on.
pub fn split_plan(
    dtype: DType,
    cache: &CacheLayout,
    q_heads: usize,
    tokens: usize,
    width: usize,
    f32_as_bf16: bool,
) -> Option<SplitPlan> {
    let t = max_tuning::current();
    let chosen = if t.batch_invariant() { Some(1) } else { t.int(max_tuning::Knob::AttentionSplits) };
    let f32_mma = f32_as_bf16 && t.flag_or(max_tuning::Knob::AttentionDecodeF32Mma, true);
    plan_with(dtype, cache, q_heads, tokens, width, (chosen, f32_mma))
}

/// [`split_plan`] with `chosen` splits (clamped to 1..=MAX_SPLITS), or the plan's own number
/// for None, never more than the table holds steps; f32 rows on the tensor cores when
/// `f32_mma` (`attention.decode_f32_mma`).
fn plan_with(
    dtype: DType,
    cache: &CacheLayout,
    q_heads: usize,
    tokens: usize,
    width: usize,
    (chosen, f32_mma): (Option<usize>, bool),
) -> Option<SplitPlan> {
    let bytes = cache.head_dim * dtype.size_in_bytes();
    let lpk = bytes / 16;
    let group = q_heads / cache.kv_heads.max(1);
    if !bytes.is_multiple_of(16) || !lpk.is_power_of_two() || lpk > 32 || group == 0 || group > MAX_GROUP {
        return None;
    }
    // Key offsets within a window are 32-bit, and so is the kernels' index arithmetic over a
    // sequence's keys (lookup tables of fewer than 2^31 keys).
    if cache.page_size >= MAX_PAGE_SIZE || width.saturating_mul(cache.page_size) > i32::MAX as usize {
        return None;
    }
    if group * cache.kv_heads != q_heads {
        return None;
    }
    let f32_mma = f32_mma && dtype == DType::Float32 && cache.head_dim <= MMA_F32_MAX_DIM;
    let mma = (dtype.size_in_bytes() == 2 || f32_mma) && cache.head_dim.is_multiple_of(16);
    let max_keys = (width * cache.page_size).max(1);
    let pairs = (tokens * cache.kv_heads).max(1);
    let (kernel_group, step, wanted) = if mma {
        // As many splits as keep one wave of resident blocks: a second, partial wave would
        // stream with a fraction of the bytes in flight.
        let smem = mma_smem(cache.head_dim, dtype.size_in_bytes()) + MMA_SMEM_EXTRA;
        let per_sm = (SMEM_PER_SM / smem).clamp(1, MMA_MOST_PER_SM);
        (MAX_GROUP, THREADS / 32 * MMA_KEYS, (SMS * per_sm / pairs).max(1))
    } else {
        let kernel_group = group.next_power_of_two();
        let (threads, keys, _) = block_plan(dtype, kernel_group, lpk);
        (kernel_group, threads / lpk * keys, (TARGET_THREADS / threads).div_ceil(pairs))
    };
    // Splits need ticket counters for the merge (tickets::CAPACITY of them) or a combine.
    let splits = if pairs > super::tickets::CAPACITY {
        1
    } else {
        let splits = chosen.map_or(wanted.min(DEFAULT_SPLITS), |n| n.clamp(1, MAX_SPLITS));
        max_keys.div_ceil(step).min(splits).max(1)
    };
    let min_steps = if mma && tokens == 1 && cache.head_dim <= MMA_MIN_STEPS_DIM { MMA_MIN_STEPS } else { 1 };
    Some(SplitPlan { lpk, group, kernel_group, step, splits, mma, min_steps })
}

/// Bytes of f32 scratch the decode form needs for a call (0 with one split): every share's
/// values and its (max, sum).
pub fn split_scratch_bytes(plan: &SplitPlan, tokens: usize, q_heads: usize, dim: usize) -> usize {
    if plan.splits <= 1 { 0 } else { tokens * q_heads * plan.splits * (2 + dim) * 4 }
}

/// Launches the decode form for `a` (its query and cache 16-byte aligned), with `partial`
/// scratch of [`split_scratch_bytes`] when the plan splits. `early`: the row offsets, cache
/// lengths and lookup table may be read before the kernel waits for the stream's previous
/// kernel (`AttentionParams::early_index`).
pub(super) fn launch(
    stream: &Arc<CudaStream>,
    dtype: DType,
    a: AttnArgs,
    plan: SplitPlan,
    partial: u64,
    early: bool,
) -> Result<()> {
    let dt = super::attention::short(dtype)?;
    let dim = a.dim as usize;
    let pairs = a.tokens as usize * a.kv_heads as usize;
    let blocks = pairs * plan.splits;
    if blocks > i32::MAX as usize {
        return Err(crate::Error::Unsupported(format!("paged_attention: {blocks} blocks are too many for one launch")));
    }
    // The CUDA-core kernel's dynamic shared memory holds the warps' (max, sum, values) for
    // its heads; the tensor-core kernel's its warps' rings (red at the end).
    let (name, smem, threads) = if plan.mma {
        (format!("paged_decode_mma_d{dim}_{dt}"), mma_smem(dim, dtype.size_in_bytes()), THREADS)
    } else {
        let (threads, _, kind) = block_plan(dtype, plan.kernel_group, plan.lpk);
        (
            format!("paged_decode_{kind}_g{}", plan.kernel_group),
            (threads / 32) * plan.kernel_group * (2 + dim) * 4,
            threads,
        )
    };
    // The last split of each (row, kv head) merges the shares when the stream has ticket
    // counters for them; otherwise attention_combine does.
    let counters = if plan.splits > 1 { super::tickets::for_stream(stream, pairs)?.unwrap_or(0) } else { 0 };
    let mut args = DecodeArgs {
        a,
        partial,
        counters,
        splits: plan.splits as i64,
        lpk: plan.lpk as i32,
        group: plan.group as i32,
        early: early as i32,
        min_steps: plan.min_steps as i32,
    };
    let pdl = Pdl::of(&ATTENTION_DECODE, &name, Some(max_tuning::Knob::AttentionPdl));
    let f = function(stream.context(), &ATTENTION_DECODE, &name)?;
    crate::allow_smem(stream.context(), &f, smem as u32)?;
    // One query row (a decode step at one sequence) sits between one-row GEMVs, which ask for
    // all of the shared memory under `launch.smem_carveout=one_row`: so does this launch.
    let carveout = if a.tokens == 1 { crate::modules::one_row_carveout(&max_tuning::current()) } else { None };
    let mut params: [*mut std::ffi::c_void; 1] = [&mut args as *mut DecodeArgs as *mut _];
    // SAFETY: the one parameter is the #[repr(C)] twin of the kernel's DecodeArgs, live across
    // the call (the driver copies it); its pointers describe buffers holding what the shapes
    // say, `partial` holds split_scratch_bytes when the plan splits, and the kernel waits
    // (griddepcontrol.wait) before reading anything.
    unsafe {
        super::launch_ex_carveout(
            stream,
            &f,
            (blocks as u32, threads as u32, smem as u32),
            &mut params,
            (pdl, 1),
            carveout,
            "cuLaunchKernelEx(paged_decode)",
        )
    }?;
    super::record::record("attention", || {
        let fields = vec![
            ("splits", plan.splits as i64),
            ("group", plan.kernel_group as i64),
            ("pdl", pdl.on() as i64),
            ("early", early as i64),
        ];
        (name.clone(), fields)
    });
    if plan.splits > 1 && counters == 0 {
        let combine = format!("attention_combine_{dt}");
        let f = function(stream.context(), &ATTENTION_DECODE, &combine)?;
        let pdl = Pdl::of(&ATTENTION_DECODE, &combine, Some(max_tuning::Knob::AttentionPdl));
        // SAFETY: as above; one block per (row, kv head), no dynamic shared memory.
        unsafe {
            super::launch_ex(
                stream,
                &f,
                (pairs as u32, THREADS as u32, 0),
                &mut params,
                pdl,
                "cuLaunchKernelEx(attention_combine)",
            )
        }?;
    }
    Ok(())
}

/// The decode form's kernels: (family, name, bytes of the argument struct), for the compile
/// checks in tests/.
#[doc(hidden)]
pub fn kernels() -> Vec<(crate::sources::Family, String, usize)> {
    let mut all = Vec::new();
    for dt in ["f32", "f16", "bf16"] {
        for g in [1, 2, 4, 8] {
            all.push((ATTENTION_DECODE, format!("paged_decode_{dt}_g{g}"), size_of::<DecodeArgs>()));
        }
        all.push((ATTENTION_DECODE, format!("attention_combine_{dt}"), size_of::<DecodeArgs>()));
    }
    for g in [1, 2, 4, 8] {
        all.push((ATTENTION_DECODE, format!("paged_decode_f32_wide_g{g}"), size_of::<DecodeArgs>()));
    }
    for dt in ["f16", "bf16", "f32"] {
        for d in [16, 32, 64, 128, 256].into_iter().filter(|&d| dt != "f32" || d <= MMA_F32_MAX_DIM) {
            all.push((ATTENTION_DECODE, format!("paged_decode_mma_d{d}_{dt}"), size_of::<DecodeArgs>()));
        }
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(kv_heads: usize, head_dim: usize, page_size: usize) -> CacheLayout {
        CacheLayout { pages: 100, layers: 2, page_size, kv_heads, head_dim }
    }

    fn plan(dtype: DType, c: &CacheLayout, q_heads: usize, tokens: usize, width: usize) -> Option<SplitPlan> {
        plan_with(dtype, c, q_heads, tokens, width, (None, false))
    }

    #[test]
    fn one_sequence_splits_by_the_table_width() {
        // 8B-shaped decode over an 8k table: the tensor-core kernel, 4 warps of 16-key tiles.
        let p = plan(DType::BFloat16, &cache(8, 128, 128), 32, 1, 64).unwrap();
        let want = SplitPlan { lpk: 16, group: 4, kernel_group: 8, step: 64, splits: 32, mma: true, min_steps: 1 };
        assert_eq!(p, want);
        // 64 dims at one row: splits of two steps at least; more query rows: one (two cost 8
        // sequences of SmolLM2 0.6%).
        assert_eq!(plan(DType::BFloat16, &cache(8, 64, 128), 32, 1, 64).unwrap().min_steps, 2);
        // SmolLM2's GGUF: f32 rows read as bf16; its f32 rows on the CUDA-core kernel: one.
        assert_eq!(plan_with(DType::Float32, &cache(3, 64, 16), 9, 1, 64, (None, true)).unwrap().min_steps, 2);
        assert_eq!(plan(DType::Float32, &cache(3, 64, 16), 9, 1, 64).unwrap().min_steps, 1);
        assert_eq!(plan(DType::BFloat16, &cache(8, 64, 128), 32, 8, 64).unwrap().min_steps, 1);
        // A table of 192 keys: no more splits than steps.
        assert_eq!(plan(DType::BFloat16, &cache(8, 128, 16), 32, 1, 12).unwrap().splits, 3);
        // SmolLM2-shaped: 3 kv heads of 64 dims, 9 query heads; 16 steps in the table.
        let p = plan(DType::BFloat16, &cache(3, 64, 16), 9, 1, 64).unwrap();
        assert_eq!((p.lpk, p.group, p.kernel_group, p.step, p.splits, p.mma), (8, 3, 8, 64, 16, true));
        // f32 rows of 128 take a warp of the CUDA-core kernel; 8 heads per kv head load 4 keys
        // at a time.
        let p = plan(DType::Float32, &cache(1, 128, 16), 8, 1, 4).unwrap();
        assert_eq!((p.lpk, p.kernel_group, p.step, p.mma), (32, 8, 16, false));
    }

    #[test]
    fn batches_split_to_one_wave_and_large_ones_not_at_all() {
        let c = cache(8, 128, 128);
        // Two blocks of 103 KiB fit an SM: 8 sequences make 64 pairs, 4 splits 256 blocks of
        // the 264 resident ones; 32 sequences fill the wave unsplit.
        assert_eq!(plan(DType::BFloat16, &c, 32, 8, 64).unwrap().splits, 4);
        assert_eq!(plan(DType::BFloat16, &c, 32, 32, 64).unwrap().splits, 1);
        // A prefill chunk of 600 rows: more pairs than ticket counters, one split.
        assert_eq!(plan(DType::BFloat16, &c, 32, 600, 64).unwrap().splits, 1);
        assert_eq!(split_scratch_bytes(&plan(DType::BFloat16, &c, 32, 600, 64).unwrap(), 600, 32, 128), 0);
        let p = plan(DType::BFloat16, &c, 32, 1, 64).unwrap();
        assert_eq!(split_scratch_bytes(&p, 1, 32, 128), 32 * 32 * 130 * 4);
        // The CUDA-core kernels aim at about 512 threads per SM: four 128-thread blocks (f32
        // rows of a warp: 64 pairs, 9 splits), one 512-thread block (SmolLM2's f32 rows: 8
        // sequences make 24 pairs, 6 splits; 64 make 192, unsplit).
        assert_eq!(plan(DType::Float32, &c, 32, 8, 64).unwrap().splits, 9);
        let small = cache(3, 64, 16);
        assert_eq!(plan(DType::Float32, &small, 9, 8, 64).unwrap().splits, 6);
        assert_eq!(plan(DType::Float32, &small, 9, 64, 64).unwrap().splits, 1);
    }

    #[test]
    fn f32_blocks_have_four_times_the_threads_and_the_same_step() {
        // 128-thread blocks loading 8, 8, 8 and 4 keys a lane group at G = 1, 2, 4, 8 before
        let f32: Vec<_> = [1, 2, 4, 8].map(|g| block_plan(DType::Float32, g, 16)).to_vec();
        let n = THREADS_F32;
        assert_eq!(f32, [(n, 2, "f32"), (n, 2, "f32"), (n, 2, "f32"), (n / 2, 2, "f32")]);
        assert_eq!(block_plan(DType::Float32, 4, 32), (THREADS, 8, "f32_wide"));
        assert_eq!([4, 8].map(|g| block_plan(DType::BFloat16, g, 1)), [(THREADS, 6, "bf16"), (THREADS, 3, "bf16")]);
        assert_eq!(block_plan(DType::Float16, 2, 1), (THREADS, 8, "f16"));
        // SmolLM2's f32 rows: 16 lanes a key, 32 lane groups of 2 keys: 64 keys a step.
        let p = plan(DType::Float32, &cache(3, 64, 128), 9, 1, 5).unwrap();
        assert_eq!((p.lpk, p.kernel_group, p.step, p.splits, p.mma), (16, 4, 64, 10, false));
        // Pages too large for the 32-bit offsets of a window take the general form, and so do
        // tables of 2^31 keys or more.
        assert!(plan(DType::Float32, &cache(3, 64, MAX_PAGE_SIZE), 9, 1, 1).is_none());
        assert!(plan(DType::Float32, &cache(3, 64, 1 << 16), 9, 1, 1 << 15).is_none());
        assert!(plan(DType::Float32, &cache(3, 64, 1 << 16), 9, 1, (1 << 15) - 1).is_some());
    }

    #[test]
    fn the_knob_bounds_the_splits() {
        let c = cache(8, 128, 128);
        assert_eq!(plan_with(DType::BFloat16, &c, 32, 1, 64, (Some(4), false)).unwrap().splits, 4);
        // The knob sets the count, past one wave of blocks too (8 sequences: 4 of the plan's).
        assert_eq!(plan_with(DType::BFloat16, &c, 32, 8, 64, (Some(12), false)).unwrap().splits, 12);
        assert_eq!(plan_with(DType::BFloat16, &c, 32, 1, 1024, (Some(1000), false)).unwrap().splits, MAX_SPLITS);
        assert_eq!(plan_with(DType::BFloat16, &c, 32, 1, 64, (Some(0), false)).unwrap().splits, 1);
        // Never more splits than steps in the table (192 keys: 3 steps of 64).
        assert_eq!(plan_with(DType::BFloat16, &cache(8, 128, 16), 32, 1, 12, (Some(64), false)).unwrap().splits, 3);
    }

    #[test]
    fn sixteen_bit_rows_of_whole_k_steps_take_the_tensor_cores() {
        for d in [16, 32, 64, 128, 256] {
            for dt in [DType::BFloat16, DType::Float16] {
                assert!(plan(dt, &cache(2, d, 16), 8, 1, 4).unwrap().mma, "{dt:?} d{d}");
            }
            assert!(!plan(DType::Float32, &cache(2, d, 16), 8, 1, 4).is_some_and(|p| p.mma));
            // f32 rows of up to 128 dims with `attention.decode_f32_mma`
            let f32 = plan_with(DType::Float32, &cache(2, d, 16), 8, 1, 4, (None, true));
            assert_eq!(f32.is_some_and(|p| p.mma), d <= MMA_F32_MAX_DIM, "f32 d{d}");
        }
        assert!(!plan(DType::BFloat16, &cache(2, 8, 16), 2, 1, 4).unwrap().mma);
        // Every head dim's rings fit a block (227 KiB with the static arrays).
        assert!(mma_smem(256, 2) + MMA_SMEM_EXTRA - 1024 <= 227 * 1024);
        assert!(mma_smem(MMA_F32_MAX_DIM, 4) + MMA_SMEM_EXTRA - 1024 <= 227 * 1024);
        assert_eq!(mma_smem(128, 2), 4 * (3 * 2 * 16 * 272 + 256));
        assert_eq!(mma_smem(128, 4), 4 * (3 * 16 * (544 + 528) + 256));
        // The 8B shape's f32 rows: one block an SM, so 16 splits of 8 pairs fill the wave;
        // SmolLM2's: two an SM, as many splits as the table's 16 steps.
        let p = plan_with(DType::Float32, &cache(8, 128, 128), 32, 1, 64, (None, true)).unwrap();
        assert_eq!((p.step, p.splits, p.mma), (64, 16, true));
        let p = plan_with(DType::Float32, &cache(3, 64, 16), 9, 1, 64, (None, true)).unwrap();
        assert_eq!((p.step, p.splits, p.mma), (64, 16, true));
    }

    #[test]
    fn rows_that_are_not_whole_pieces_or_large_groups_take_the_general_form() {
        assert!(plan(DType::Float32, &cache(1, 256, 16), 8, 1, 4).is_none()); // 64 lanes a row
        assert!(plan(DType::BFloat16, &cache(1, 80, 16), 8, 1, 4).is_none()); // 10 lanes a row
        assert!(plan(DType::BFloat16, &cache(1, 64, 16), 12, 1, 4).is_none()); // 12 heads per kv head
        assert!(plan(DType::BFloat16, &cache(1, 4, 16), 1, 1, 4).is_none()); // 8 bytes a row
        assert_eq!(plan(DType::BFloat16, &cache(1, 256, 16), 8, 1, 4).unwrap().lpk, 32);
        assert_eq!(plan(DType::BFloat16, &cache(2, 8, 16), 2, 1, 4).unwrap().lpk, 1);
    }
}
