//! CUDA devices through cudarc. The driver library is probed once, before anything else touches
//! CUDA: cudarc panics when a library is missing, so the probe runs under `catch_unwind` and a
//! machine without a driver simply has zero accelerators, with the reason kept for the error
//! `Accelerator()` raises.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{CudaContext, CudaStream, result, sys};

use crate::{Error, Result};

/// One GPU: its primary context and the stream work goes to unless a caller names another.
pub struct CudaDevice {
    pub ordinal: usize,
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    pub arch: String,
    pub name: String,
}

impl CudaDevice {
    /// Whether the wgmma kernels (the Hopper GEMMs and convolution) run here: they use sm_90a's
    /// features (wgmma, setmaxnreg) and trap on any other target, later ones included.
    pub fn wgmma(&self) -> bool {
        wgmma_arch(&self.arch)
    }
}

/// [`CudaDevice::wgmma`] for an architecture name as `arch_name` spells it.
pub fn wgmma_arch(arch: &str) -> bool {
    arch == "sm_90a"
}

impl std::fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaDevice({}, {}, {})", self.ordinal, self.name, self.arch)
    }
}

fn probe() -> std::result::Result<usize, String> {
    // SAFETY: opens and closes the driver library; no symbol is called.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err("the NVIDIA driver library libcuda.so could not be loaded (no NVIDIA driver \
                    is installed on this machine)"
            .into());
    }
    result::init().map_err(|e| format!("the CUDA driver failed to initialise: {e}"))?;
    let n = result::device::get_count().map_err(|e| format!("cuDeviceGetCount failed: {e}"))?;
    Ok(n.max(0) as usize)
}

fn status() -> &'static std::result::Result<usize, String> {
    static STATUS: OnceLock<std::result::Result<usize, String>> = OnceLock::new();
    STATUS.get_or_init(|| {
        catch_unwind(probe)
            .unwrap_or_else(|_| Err("the CUDA driver library is present but unusable (missing symbols)".into()))
    })
}

/// How many CUDA devices this process can use (0 without a driver).
pub fn accelerator_count() -> usize {
    match status() {
        Ok(n) => *n,
        Err(_) => 0,
    }
}

/// Why there is no accelerator, when there is none.
pub fn cuda_unavailable_reason() -> Option<String> {
    match status() {
        Ok(0) => Some("the CUDA driver is installed but reports no devices (check CUDA_VISIBLE_DEVICES)".into()),
        Ok(_) => None,
        Err(reason) => Some(reason.clone()),
    }
}

fn open(ordinal: usize) -> Result<Arc<CudaDevice>> {
    let ctx = CudaContext::new(ordinal).map_err(Error::cuda("cuDevicePrimaryCtxRetain"))?;
    // Buffers here are raw allocations ordered by our own streams; cudarc's per-slice event
    // tracking is not used and must not add synchronisation.
    // SAFETY: no cudarc CudaSlice is ever created on this context.
    unsafe { ctx.disable_event_tracking() };
    let stream = ctx.new_stream().map_err(Error::cuda("cuStreamCreate"))?;
    if ctx.has_async_alloc() {
        keep_pool_memory(&ctx)?;
    }
    let arch = max_kernels_cuda::arch_name(&ctx)?;
    let name = ctx.name().map_err(Error::cuda("cuDeviceGetName"))?;
    Ok(Arc::new(CudaDevice { ordinal, ctx, stream, arch, name }))
}

/// Stream-ordered allocations come from the device's default memory pool, which by default
/// hands memory back to the driver at every synchronisation; a pool that keeps it makes a
/// freed-then-reallocated buffer cost a pointer bump instead of a page mapping.
fn keep_pool_memory(ctx: &CudaContext) -> Result<()> {
    use cudarc::driver::sys;
    let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
    let mut threshold = u64::MAX;
    // SAFETY: valid device handle and out-pointers for the duration of the calls.
    unsafe {
        sys::cuDeviceGetDefaultMemPool(&mut pool, ctx.cu_device())
            .result()
            .map_err(Error::cuda("cuDeviceGetDefaultMemPool"))?;
        sys::cuMemPoolSetAttribute(
            pool,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            (&mut threshold as *mut u64).cast(),
        )
        .result()
        .map_err(Error::cuda("cuMemPoolSetAttribute"))
    }
}

/// The device with this ordinal, opened once per process.
pub fn cuda_device(ordinal: usize) -> Result<Arc<CudaDevice>> {
    let count = accelerator_count();
    if count == 0 {
        let reason = cuda_unavailable_reason().unwrap_or_default();
        return Err(Error::Device(format!("no accelerator is available: {reason}")));
    }
    if ordinal >= count {
        return Err(Error::Device(format!(
            "accelerator id {ordinal} does not exist: this machine has {count} accelerator(s), \
             ids 0..{}",
            count - 1
        )));
    }
    static OPEN: Mutex<Option<HashMap<usize, Arc<CudaDevice>>>> = Mutex::new(None);
    let mut guard = OPEN.lock().unwrap_or_else(|p| p.into_inner());
    let map = guard.get_or_insert_with(HashMap::new);
    if let Some(d) = map.get(&ordinal) {
        return Ok(d.clone());
    }
    let dev = catch_unwind(AssertUnwindSafe(|| open(ordinal))).unwrap_or_else(|_| {
        Err(Error::Device(format!("opening accelerator {ordinal} failed inside the CUDA driver")))
    })?;
    map.insert(ordinal, dev.clone());
    Ok(dev)
}

impl CudaDevice {
    /// Makes this device's context current on the calling thread (every entry point calls it:
    /// Python may call from any thread).
    pub fn bind(&self) -> Result<()> {
        self.ctx.bind_to_thread().map_err(Error::cuda("cuCtxSetCurrent"))
    }

    /// (free, total) device memory in bytes.
    pub fn memory_info(&self) -> Result<(usize, usize)> {
        self.bind()?;
        self.ctx.mem_get_info().map_err(Error::cuda("cuMemGetInfo"))
    }

    pub fn synchronize(&self) -> Result<()> {
        self.bind()?;
        self.ctx.synchronize().map_err(Error::cuda("cuCtxSynchronize"))
    }

    pub fn can_access_peer(&self, other: &CudaDevice) -> Result<bool> {
        if self.ordinal == other.ordinal {
            return Ok(true);
        }
        let (a, b) = (self.ctx.cu_device(), other.ctx.cu_device());
        let mut can = 0i32;
        // SAFETY: both are valid device handles from cuDeviceGet.
        unsafe { cudarc::driver::sys::cuDeviceCanAccessPeer(&mut can, a, b) }
            .result()
            .map_err(Error::cuda("cuDeviceCanAccessPeer"))?;
        Ok(can != 0)
    }
}

thread_local! {
    /// Set while this thread records a CUDA graph (engine/cuda_graphs.rs).
    static CAPTURING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks this thread as recording a CUDA graph until the guard drops.
/// Whether `dev` may read and write `peer`'s memory directly, enabling it on first use of an
/// ordered pair (where the hardware allows). Copies between such a pair are plain copies over
/// unified addresses, which CUDA graphs can also hold (a peer copy call cannot be captured).
pub(crate) fn peer_access(dev: &CudaDevice, peer: &CudaDevice) -> bool {
    static KNOWN: std::sync::Mutex<Vec<((usize, usize), bool)>> = std::sync::Mutex::new(Vec::new());
    let key = (dev.ordinal, peer.ordinal);
    let mut known = KNOWN.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, ok)) = known.iter().find(|(k, _)| *k == key) {
        return *ok;
    }
    if capturing() {
        return false;
    }
    let mut can = 0;
    // SAFETY: plain queries and a context call with `dev`'s context bound.
    let ok = unsafe {
        sys::cuDeviceCanAccessPeer(&mut can, dev.ctx.cu_device(), peer.ctx.cu_device()) == sys::CUresult::CUDA_SUCCESS
            && can != 0
            && dev.bind().is_ok()
            && matches!(
                sys::cuCtxEnablePeerAccess(peer.ctx.cu_ctx(), 0),
                sys::CUresult::CUDA_SUCCESS | sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
            )
            && pool_access(dev, peer)
    };
    known.push((key, ok));
    ok
}

/// Grants `dev` access to memory of `peer`'s default pool (stream-ordered allocations, which
/// context peer access does not cover). True when granted or when `peer` has no such pool.
///
/// # Safety
/// A plain driver call on live devices.
unsafe fn pool_access(dev: &CudaDevice, peer: &CudaDevice) -> bool {
    if !peer.ctx.has_async_alloc() {
        return true;
    }
    let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
    let desc = sys::CUmemAccessDesc {
        location: sys::CUmemLocation {
            type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
            id: dev.ordinal as i32,
        },
        flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
    };
    // SAFETY: out-pointer and a one-entry access list, both valid for the calls.
    unsafe {
        sys::cuDeviceGetDefaultMemPool(&mut pool, peer.ctx.cu_device()) == sys::CUresult::CUDA_SUCCESS
            && sys::cuMemPoolSetAccess(pool, &desc, 1) == sys::CUresult::CUDA_SUCCESS
    }
}

pub(crate) struct CaptureScope;

impl CaptureScope {
    pub(crate) fn enter() -> CaptureScope {
        crate::nccl::take_captured();
        CAPTURING.with(|c| c.set(true));
        CaptureScope
    }

    /// The NCCL communicators whose collectives this capture recorded.
    pub(crate) fn take_comms(&self) -> Vec<std::sync::Arc<crate::nccl::Comms>> {
        crate::nccl::take_captured()
    }
}

impl Drop for CaptureScope {
    fn drop(&mut self) {
        CAPTURING.with(|c| c.set(false));
    }
}

/// Whether this thread is recording a CUDA graph.
pub(crate) fn capturing() -> bool {
    CAPTURING.with(|c| c.get())
}

/// Fails, before any CUDA call, when this thread is recording a CUDA graph: host<->device
/// copies and stream synchronisation cannot be captured, and attempting them would invalidate
/// the capture with a driver error. The engine then runs the plan step by step instead.
pub(crate) fn forbid_in_capture(what: &str) -> Result<()> {
    if CAPTURING.with(|c| c.get()) {
        return Err(Error::Value(format!("{what} needs the host and cannot be part of a CUDA graph")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn wgmma_kernels_take_sm_90a_only() {
        assert!(super::wgmma_arch("sm_90a"));
        for other in ["sm_80", "sm_89", "sm_100a", "sm_103a", "sm_120"] {
            assert!(!super::wgmma_arch(other), "{other}");
        }
    }
}
