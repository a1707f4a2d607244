//! Programmatic dependent launch (PDL): which kernels may start while the stream's previous
//! kernel drains. A grid launched under programmatic stream serialization begins before the
//! kernel ahead of it has finished, so it must execute griddepcontrol.wait (prelude.cuh's
//! `pdl_wait`) in every thread before it reads anything an earlier kernel may write and before
//! its first global store; a kernel without the wait must never get the attribute. Before the
//! wait a kernel reads constants only, or what the engine's passes/mark_early_index.rs marks as
//! final (a decode attention's index inputs and keys of earlier steps). Kernels let the next one
//! launch after their wait, except rope_kv_store where that pass marks `early_next`.
//!
//! That rule is structural: the launch helpers ([`super::launch_ex`], [`launch_pdl`]) take a
//! [`Pdl`], and the only way to make one that is on is [`Pdl::of`], which consults
//! [`DECLARED`], the list of kernels whose sources wait. tests/pdl_decl.rs compiles every
//! family and checks that the kernels declared here are exactly those whose code executes
//! griddepcontrol.wait.
//!
//! The `launch.pdl` knob turns PDL off for every kernel; `conv.pdl`, `gemm.pdl`, `qgemv.pdl`
//! and `attention.pdl` turn it off for their families only.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaStream, DeviceRepr, LaunchConfig};
use max_tuning::{Knob, Tuning};

use crate::Result;
use crate::sources::Family;

/// (family name, kernel name prefixes): the kernels that execute griddepcontrol.wait before
/// their first dependent read and first global write, and may launch under PDL.
pub const DECLARED: &[(&str, &[&str])] = &[
    // all variants: first weight loads, then the wait (gemv_nt.cu)
    ("gemv_nt", &["skinny_nt_"]),
    // the same for the tensor-core GEMV of 2-16 rows (gemv_mma.cu); both read their weights
    // before the wait, so they launch under PDL only with constant weights (launch_weights_early)
    ("gemv_mma", &["gemv_mma_"]),
    // rope + KV-cache store of a decode step
    ("attention", &["rope_kv_store_"]),
    ("attention_decode", &["paged_decode_", "attention_combine_"]),
    ("qgemv_mma", &["qgemv_mma_"]),
    // the CUDA-core quantized GEMVs (qgemv.cu, one family per encoding and activation type,
    // and qgemv_stream.cu's qgemv_s_ for the word-decoded encodings; before the wait they copy
    // only constant weights (QvSegs::early, qgemv_s's `early`), else prefetch them into L2)
    ("qgemv_q4_0_f32", &["qgemv_q4_0_m", "qgemv_s_q4_0_m"]),
    ("qgemv_q4_0_bf16", &["qgemv_q4_0_m", "qgemv_s_q4_0_m"]),
    ("qgemv_q4_0_f16", &["qgemv_q4_0_m", "qgemv_s_q4_0_m"]),
    ("qgemv_q4_1_f32", &["qgemv_q4_1_m", "qgemv_s_q4_1_m"]),
    ("qgemv_q4_1_bf16", &["qgemv_q4_1_m", "qgemv_s_q4_1_m"]),
    ("qgemv_q4_1_f16", &["qgemv_q4_1_m", "qgemv_s_q4_1_m"]),
    ("qgemv_q8_0_f32", &["qgemv_q8_0_m", "qgemv_s_q8_0_m"]),
    ("qgemv_q8_0_bf16", &["qgemv_q8_0_m", "qgemv_s_q8_0_m"]),
    ("qgemv_q8_0_f16", &["qgemv_q8_0_m", "qgemv_s_q8_0_m"]),
    ("qgemv_q4_k_f32", &["qgemv_q4_k_m", "qgemv_s_q4_k_m"]),
    ("qgemv_q4_k_bf16", &["qgemv_q4_k_m", "qgemv_s_q4_k_m"]),
    ("qgemv_q4_k_f16", &["qgemv_q4_k_m", "qgemv_s_q4_k_m"]),
    ("qgemv_q5_k_f32", &["qgemv_q5_k_m"]),
    ("qgemv_q5_k_bf16", &["qgemv_q5_k_m"]),
    ("qgemv_q5_k_f16", &["qgemv_q5_k_m"]),
    ("qgemv_q6_k_f32", &["qgemv_q6_k_m"]),
    ("qgemv_q6_k_bf16", &["qgemv_q6_k_m"]),
    ("qgemv_q6_k_f16", &["qgemv_q6_k_m"]),
    // the Hopper GEMM (all entries: barrier setup, then the wait when args.pdl is set; with
    // args.early_b, which the launcher sets for constant weights only, their first stages first)
    ("gemm_sm90p_bf16", &["gemm_sm90p_"]),
    ("gemm_sm90p_f16", &["gemm_sm90p_"]),
    ("conv_sm90_bf16", &["conv_sm90_"]),
    ("conv_sm90_f16", &["conv_sm90_"]),
    ("conv_sm90_pp_bf16", &["conv_sm90_"]),
    ("conv_sm90_pp_f16", &["conv_sm90_"]),
    // a layer's norms where they do not fold into the products (more than 4 rows, f32 rows
    // past fusion.norm_gemv_max_k, fusion.norm_gemv off)
    ("norm", &["rms_norm_"]),
    // the peer-to-peer allreduce of a decode step (waits before it reads its input)
    ("allreduce_p2p", &["allreduce_p2p_"]),
    // a decode step's sampler, after its output projection (waits before it reads anything)
    ("sampling", &["sample_tokens"]),
];

/// Whether `kernel` of the family named `family` is declared to wait (see [`DECLARED`]).
pub fn declared(family: &str, kernel: &str) -> bool {
    DECLARED.iter().any(|(f, prefixes)| *f == family && prefixes.iter().any(|p| kernel.starts_with(p)))
}

/// Whether one launch goes under programmatic stream serialization. It is on only when made by
/// [`Pdl::of`] / [`Pdl::with`] for a declared kernel with the knobs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pdl(bool);

impl Pdl {
    /// A plain launch.
    pub const OFF: Pdl = Pdl(false);

    /// [`Pdl::with`] under the process's current tuning.
    pub fn of(family: &Family, kernel: &str, family_knob: Option<Knob>) -> Pdl {
        Pdl::with(&max_tuning::current(), family, kernel, family_knob)
    }

    /// On when `kernel` of `family` is declared to wait, `launch.pdl` is on and so is the
    /// family's own knob, if it has one.
    pub fn with(tuning: &Tuning, family: &Family, kernel: &str, family_knob: Option<Knob>) -> Pdl {
        Pdl(declared(family.name, kernel)
            && tuning.flag_or(Knob::LaunchPdl, true)
            && family_knob.is_none_or(|k| tuning.flag_or(k, true)))
    }

    pub fn on(self) -> bool {
        self.0
    }
}

/// Launches `kernel` of `family`, which takes one argument struct `args`, under PDL where it
/// is declared and the knobs allow it (`family_knob`: the family's own switch, if any); returns
/// whether it did.
///
/// # Safety
/// `args` is the #[repr(C)] twin of the kernel's one parameter, and the memory it describes
/// holds what the kernel reads and writes for `cfg`'s grid.
pub(crate) unsafe fn launch_pdl<A: DeviceRepr + Copy>(
    stream: &Arc<CudaStream>,
    (family, kernel, f): (&Family, &str, &CudaFunction),
    cfg: LaunchConfig,
    args: &A,
    family_knob: Option<Knob>,
    what: &'static str,
) -> Result<bool> {
    // SAFETY: the caller's contract.
    unsafe { launch_pdl_carveout(stream, (family, kernel, f), cfg, args, (family_knob, None), what) }
}

/// [`launch_pdl`] with the launch's own preferred shared-memory carveout (None: the
/// function's).
///
/// # Safety
/// As for [`launch_pdl`].
pub(crate) unsafe fn launch_pdl_carveout<A: DeviceRepr + Copy>(
    stream: &Arc<CudaStream>,
    (family, kernel, f): (&Family, &str, &CudaFunction),
    cfg: LaunchConfig,
    args: &A,
    (family_knob, carveout): (Option<Knob>, Option<u32>),
    what: &'static str,
) -> Result<bool> {
    // SAFETY: the caller's contract.
    unsafe { launch_as(stream, f, cfg, args, (Pdl::of(family, kernel, family_knob), carveout), what) }
}

/// [`launch_pdl`] for the GEMVs that read their weights before griddepcontrol.wait (gemv_nt.cu,
/// gemv_mma.cu): under PDL only when `weights_constant` (nothing an earlier kernel writes them);
/// otherwise a plain launch, which starts once the previous kernel has finished, so those early
/// reads see what it wrote. `carveout`: the launch's own preferred shared-memory carveout
/// (percent; None: the function's).
///
/// # Safety
/// As for [`launch_pdl`].
pub(crate) unsafe fn launch_weights_early<A: DeviceRepr + Copy>(
    stream: &Arc<CudaStream>,
    (family, kernel, f): (&Family, &str, &CudaFunction),
    cfg: LaunchConfig,
    args: &A,
    (weights_constant, carveout): (bool, Option<u32>),
    what: &'static str,
) -> Result<bool> {
    let pdl = if weights_constant { Pdl::of(family, kernel, None) } else { Pdl::OFF };
    // SAFETY: the caller's contract.
    unsafe { launch_as(stream, f, cfg, args, (pdl, carveout), what) }
}

/// One launch of `f` with its argument struct, under `pdl`, with `carveout` (None: the
/// function's); returns whether PDL was on.
///
/// # Safety
/// As for [`launch_pdl`]; `pdl` on only for a kernel that waits.
unsafe fn launch_as<A: DeviceRepr + Copy>(
    stream: &Arc<CudaStream>,
    f: &CudaFunction,
    cfg: LaunchConfig,
    args: &A,
    (pdl, carveout): (Pdl, Option<u32>),
    what: &'static str,
) -> Result<bool> {
    let mut copy = *args;
    let mut params: [*mut std::ffi::c_void; 1] = [&mut copy as *mut A as *mut _];
    debug_assert_eq!((cfg.grid_dim.1, cfg.grid_dim.2, cfg.block_dim.1, cfg.block_dim.2), (1, 1, 1, 1));
    // SAFETY: the caller's contract; `copy` lives across the call (the driver copies it).
    unsafe {
        let dims = (cfg.grid_dim.0, cfg.block_dim.0, cfg.shared_mem_bytes);
        super::launch_ex_carveout(stream, f, dims, &mut params, (pdl, 1), carveout, what)
    }?;
    Ok(pdl.on())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::{ATTENTION, CAST, GEMV_NT, NORM};

    #[test]
    fn only_declared_kernels_get_pdl() {
        let t = Tuning::parse("").unwrap();
        assert!(Pdl::with(&t, &GEMV_NT, "skinny_nt_bf16_m1_vec_norm", None).on());
        assert!(Pdl::with(&t, &ATTENTION, "rope_kv_store_bf16", None).on());
        assert!(!Pdl::with(&t, &ATTENTION, "rope_bf16", None).on());
        assert!(!Pdl::with(&t, &ATTENTION, "paged_attention_bf16", None).on());
        assert!(!Pdl::with(&t, &CAST, "cast_f32_bf16", None).on());
        assert!(Pdl::with(&t, &NORM, "rms_norm_bf16", None).on());
    }

    #[test]
    fn the_knobs_turn_it_off() {
        let off = Tuning::parse("launch.pdl=0").unwrap();
        assert!(!Pdl::with(&off, &GEMV_NT, "skinny_nt_bf16_m1_vec", None).on());
        assert!(!Pdl::with(&off, &GEMV_NT, "skinny_nt_bf16_m1_vec", Some(Knob::QgemvPdl)).on());
        let family_off = Tuning::parse("attention.pdl=0").unwrap();
        assert!(!Pdl::with(&family_off, &ATTENTION, "rope_kv_store_f16", Some(Knob::AttentionPdl)).on());
        assert!(Pdl::with(&family_off, &GEMV_NT, "skinny_nt_f16_m2_any", None).on());
    }
}
