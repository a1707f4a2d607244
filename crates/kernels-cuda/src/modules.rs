//! Loaded kernels per device: each family's cubin is loaded once per device, and each function
//! handle is looked up once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::driver::sys::{CUdevice_attribute, CUfunction_attribute};
use cudarc::driver::{CudaContext, CudaFunction, CudaModule};
use cudarc::nvrtc::Ptx;

use crate::cache::compiled;
use crate::{Error, Result, Target, sources::Family};

type Modules = HashMap<(usize, &'static str), Arc<CudaModule>>;
/// Each function handle with the carveout last asked for it (None: the driver's choice).
type Functions = HashMap<(usize, String), (CudaFunction, Option<u32>)>;
static MODULES: Mutex<Option<Modules>> = Mutex::new(None);
static FUNCTIONS: Mutex<Option<Functions>> = Mutex::new(None);

/// The NVRTC architecture for a device: `sm_90a` on Hopper (wgmma, TMA, setmaxnreg need the
/// `a` variant), `sm_100a` on Blackwell, plain `sm_XY` elsewhere.
pub fn arch_name(ctx: &CudaContext) -> Result<String> {
    let major = ctx
        .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
        .map_err(Error::driver("cuDeviceGetAttribute"))?;
    let minor = ctx
        .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
        .map_err(Error::driver("cuDeviceGetAttribute"))?;
    let suffix = if major >= 9 && minor == 0 { "a" } else { "" };
    Ok(format!("sm_{major}{minor}{suffix}"))
}

fn module(ctx: &Arc<CudaContext>, family: &Family) -> Result<Arc<CudaModule>> {
    let key = (ctx.ordinal(), family.name);
    let lock = || MODULES.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(m) = lock().get_or_insert_with(HashMap::new).get(&key) {
        return Ok(m.clone());
    }
    // Compiled without holding MODULES, so that a family's compile never stalls another
    // family's first launch (the cache itself compiles each image once).
    let image = compiled(family, &arch_name(ctx)?, Target::Cubin)?;
    let m = ctx.load_module(Ptx::from_binary(image.as_ref().clone())).map_err(Error::driver("cuModuleLoadData"))?;
    // A thread that loaded the same module meanwhile wins; this copy is dropped.
    Ok(lock().get_or_insert_with(HashMap::new).entry(key).or_insert(m).clone())
}

/// The kernel `name` of `family` on the device of `ctx`, compiling and loading on first use,
/// with the preferred shared-memory carveout of `launch.smem_carveout` (asked again when the
/// knob changed since: a scoped override in a benchmark's comparison).
pub fn function(ctx: &Arc<CudaContext>, family: &Family, name: &str) -> Result<CudaFunction> {
    // Generated families reuse kernel names (`fused`), so the family is part of the key.
    let key = (ctx.ordinal(), format!("{}::{name}", family.name));
    let carveout = function_carveout(&max_tuning::current(), family, name);
    let lock = || FUNCTIONS.lock().unwrap_or_else(|p| p.into_inner());
    let known = lock().get_or_insert_with(HashMap::new).get(&key).cloned();
    let f = match known {
        Some((f, applied)) if applied == carveout => return Ok(f),
        Some((f, _)) => f,
        // (loaded without holding FUNCTIONS: a first use may compile the family)
        None => module(ctx, family)?.load_function(name).map_err(Error::driver("cuModuleGetFunction"))?,
    };
    // The attribute is set and recorded under one lock, so what the cache says is what the
    // function has, whichever thread got here first; a new entry has the driver's choice.
    let mut functions = lock();
    let entry = functions.get_or_insert_with(HashMap::new).entry(key).or_insert((f, None));
    if entry.1 != carveout {
        // -1: cudaSharedmemCarveoutDefault
        let value = carveout.map_or(-1, |c| c as i32);
        entry
            .0
            .set_attribute(CUfunction_attribute::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, value)
            .map_err(Error::driver("cuFuncSetAttribute"))?;
        entry.1 = carveout;
    }
    Ok(entry.0.clone())
}

/// The carveout (percent of the most shared memory an SM gives) that `launch.smem_carveout`
/// asks for the function `name` of `family`: 100 for every kernel under `shared`, and under
/// `one_row` for the one-row GEMVs ([`one_row_gemv`]); None (the driver's choice) otherwise.
pub fn function_carveout(tuning: &max_tuning::Tuning, family: &Family, name: &str) -> Option<u32> {
    match tuning.choice(max_tuning::Knob::LaunchSmemCarveout) {
        Some("shared") => Some(100),
        Some("one_row") if one_row_gemv(family, name) => Some(100),
        _ => None,
    }
}

/// The GEMV kernels that take one lhs row and nothing else (`_m1` in their names: gemv_nt.cu's
/// `skinny_nt_*_m1_*`, gemm_skinny.cu's `skinny_simt_*_m1_*`, qgemv.cu's and qgemv_stream.cu's
/// `qgemv_*_m1`, qgemv_mma.cu's `qgemv_mma_*_m1`, quant.cu's `gptq_gemv_m1`): the products of a
/// decode step at one sequence.
pub fn one_row_gemv(family: &Family, name: &str) -> bool {
    use crate::sources::{GEMM_SKINNY, GEMV_NT, QUANT};
    let gemv = [GEMV_NT.name, GEMM_SKINNY.name, QUANT.name].contains(&family.name) || family.name.starts_with("qgemv_");
    gemv && (name.ends_with("_m1") || name.contains("_m1_"))
}

/// A launch's own carveout for a kernel of one query row beside the one-row GEMVs (the decode
/// attention at one sequence): 100 under `one_row`, so that it shares SMs with them as under
/// `shared`; None (the function's) otherwise.
pub fn one_row_carveout(tuning: &max_tuning::Tuning) -> Option<u32> {
    (tuning.choice(max_tuning::Knob::LaunchSmemCarveout) == Some("one_row")).then_some(100)
}

/// A launch's own carveout for a kernel that keeps its reuse in L1 while its function asks for
/// all of the shared memory ([`function_carveout`]): 0 (all L1, or the least shared memory the
/// launch needs) there, None (the function's, the driver's choice) otherwise.
pub fn l1_carveout(tuning: &max_tuning::Tuning, family: &Family, name: &str) -> Option<u32> {
    function_carveout(tuning, family, name).map(|_| 0)
}

/// Lets `f` launch with `smem` bytes of dynamic shared memory. Past the 48 KiB any kernel may
/// take, the kernel's allowance is raised to the most the device gives one block (less the
/// kernel's static shared memory): one value per kernel whatever the launch asks, so threads
/// launching the same kernel with different sizes never lower it under each other's launches.
/// The 48 KiB hold static and dynamic shared memory together: a kernel with 16 bytes of
/// `__shared__` variables launched with exactly 48 KiB of dynamic shared memory needs the
/// raised allowance too (without it cuLaunchKernel fails with CUDA_ERROR_INVALID_VALUE).
pub fn allow_smem(ctx: &Arc<CudaContext>, f: &CudaFunction, smem: u32) -> Result<()> {
    if smem == 0 {
        return Ok(());
    }
    let fixed = f.shared_size_bytes().map_err(Error::driver("cuFuncGetAttribute"))?;
    if i64::from(smem) + i64::from(fixed) <= 48 * 1024 {
        return Ok(());
    }
    let optin = ctx
        .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
        .map_err(Error::driver("cuDeviceGetAttribute"))?;
    let most = optin.saturating_sub(fixed);
    if i64::from(smem) > i64::from(most) {
        return Err(Error::Unsupported(format!(
            "a launch asking for {smem} bytes of shared memory; the device gives a block at most {most}"
        )));
    }
    f.set_attribute(CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, most)
        .map_err(Error::driver("cuFuncSetAttribute"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::{ATTENTION_DECODE, GEMV_MMA, GEMV_NT, QGEMV_MMA};

    #[test]
    fn the_knob_picks_the_functions_that_ask_for_the_shared_memory() {
        let t = |spec: &str| max_tuning::Tuning::parse(spec).unwrap();
        let (shared, one_row, driver) =
            (t("launch.smem_carveout=shared"), t("launch.smem_carveout=one_row"), t("launch.smem_carveout=driver"));
        let (q4, q4_bf16) =
            (crate::sources::qgemv("q4_1", "").unwrap(), crate::sources::qgemv("q4_1", "_bf16").unwrap());
        for (family, name, one) in [
            (&GEMV_NT, "skinny_nt_bf16_m1_vec_postnorm_rope", true),
            (&GEMV_NT, "skinny_nt_bf16_m1_vec", true),
            (&GEMV_NT, "skinny_nt_bf16_m2_any", false),
            (&GEMV_NT, "skinny_nt_bf16_m16_any", false),
            (&crate::sources::GEMM_SKINNY, "skinny_simt_f32_m1_vec", true),
            (&crate::sources::GEMM_SKINNY, "skinny_simt_f32_m16_vec", false),
            (&crate::sources::QUANT, "gptq_gemv_m1", true),
            (&crate::sources::QUANT, "dequantize_q4_1", false),
            (q4, "qgemv_q4_1_m1", true),
            (q4_bf16, "qgemv_s_q4_1_m1_bf16", true),
            (q4, "qgemv_q4_1_m8", false),
            (&QGEMV_MMA, "qgemv_mma_q4_0_m16_bf16", false),
            (&QGEMV_MMA, "qgemv_mma_q4_0_m1", true),
            (&QGEMV_MMA, "qgemv_mma_q4_0_m4", false),
            (&GEMV_MMA, "gemv_mma_bf16_n1", false),
            (&ATTENTION_DECODE, "paged_decode_mma_d128_bf16", false),
            (&crate::sources::GEMM_SM90P_BF16, "gemm_sm90p_bf16_t_m64_n128", false),
        ] {
            assert_eq!(function_carveout(&shared, family, name), Some(100), "{name}");
            assert_eq!(function_carveout(&one_row, family, name), one.then_some(100), "{name}");
            assert_eq!(function_carveout(&driver, family, name), None, "{name}");
            assert_eq!(l1_carveout(&one_row, family, name), one.then_some(0), "{name}");
        }
        assert_eq!(
            (one_row_carveout(&one_row), one_row_carveout(&shared), one_row_carveout(&driver)),
            (Some(100), None, None)
        );
        assert_eq!(one_row_carveout(&t("")), Some(100), "one_row is the default");
    }
}
