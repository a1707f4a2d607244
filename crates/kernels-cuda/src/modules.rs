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
    let carveout = shared_carveout(&max_tuning::current());
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
/// asks of every kernel: 100 for `shared`, None (the driver's choice) for `driver`.
pub fn shared_carveout(tuning: &max_tuning::Tuning) -> Option<u32> {
    (tuning.choice(max_tuning::Knob::LaunchSmemCarveout) == Some("shared")).then_some(100)
}

/// A launch's own carveout for a kernel that keeps its reuse in L1 while every kernel asks for
/// all of the shared memory: 0 (all L1, or the least shared memory the launch needs) under
/// `shared`, None (the function's, the driver's choice) under `driver`.
pub fn l1_carveout(tuning: &max_tuning::Tuning) -> Option<u32> {
    shared_carveout(tuning).map(|_| 0)
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
