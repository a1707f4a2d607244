//! Memory a buffer views: allocated here (host, page-locked host, or CUDA device memory) or
//! owned by someone else (a numpy array, a DLPack producer) and kept alive by a handle.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use cudarc::driver::{CudaStream, result};

use crate::cuda::CudaDevice;
use crate::{Device, Error, Result};

/// Host allocations are aligned for any vector width the kernels use.
pub const HOST_ALIGN: usize = 64;
/// From this size on, zero-filled host buffers are anonymous mappings (page aligned, zeroed
/// lazily by the kernel).
const LAZY_ZERO_BYTES: usize = 4 << 20;

/// Something that keeps externally owned memory alive; dropped when the storage is.
pub type External = Box<dyn Send + Sync>;

enum Owner {
    Host(Layout),
    Recycled(Layout),
    Pinned(Arc<CudaDevice>),
    Cuda(Arc<CudaDevice>, Arc<CudaStream>),
    External(#[allow(dead_code)] External),
    Empty,
}

pub struct Storage {
    /// Host pointer or CUDA device pointer, as an address.
    addr: u64,
    nbytes: usize,
    device: Device,
    owner: Owner,
    /// Set once a DLPack consumer may hold the memory on its own stream: freeing then waits for
    /// the device to be idle, since the consumer's stream is not ours to order against.
    exported: AtomicBool,
    /// Set when the memory holds a loaded model's constants or weights, which nothing writes
    /// again: kernels may then keep forms derived from its bytes (see `derived`).
    frozen: AtomicBool,
    derived: std::sync::Mutex<std::collections::HashMap<DerivedKey, Arc<dyn std::any::Any + Send + Sync>>>,
}

/// A derived form's key: the byte range it was made from and its type.
type DerivedKey = (usize, usize, std::any::TypeId);

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Storage({} bytes on {:?})", self.nbytes, self.device)
    }
}

/// Asks the kernel to back a large anonymous mapping with huge pages where it allows them on
/// request (Linux's transparent huge pages in `madvise` mode): a KV cache or repacked weights
/// read at every step then cost a few TLB entries instead of thousands. Only advice; refusals
/// are ignored.
pub(crate) fn huge_pages(map: &memmap2::MmapMut) {
    #[cfg(target_os = "linux")]
    let _ = map.advise(memmap2::Advice::HugePage);
    #[cfg(not(target_os = "linux"))]
    let _ = map;
}

impl Storage {
    fn new(addr: u64, nbytes: usize, device: Device, owner: Owner) -> Storage {
        Storage {
            addr,
            nbytes,
            device,
            owner,
            exported: AtomicBool::new(false),
            frozen: AtomicBool::new(false),
            derived: Default::default(),
        }
    }

    /// Marks the memory as never written again (a loaded model's constants and weights).
    pub fn freeze(&self) {
        self.frozen.store(true, std::sync::atomic::Ordering::Release);
    }

    pub fn is_frozen(&self) -> bool {
        self.frozen.load(std::sync::atomic::Ordering::Acquire)
    }

    /// A form derived from bytes `offset..offset + len` of frozen memory (a kernel's repacked
    /// weights), made once by `make` and kept as long as the memory; None when the memory is not
    /// frozen (its bytes may still change).
    pub fn derived<T: std::any::Any + Send + Sync>(
        &self,
        offset: usize,
        len: usize,
        make: impl FnOnce() -> T,
    ) -> Option<Arc<T>> {
        if !self.is_frozen() {
            return None;
        }
        let key = (offset, len, std::any::TypeId::of::<T>());
        let mut map = self.derived.lock().unwrap_or_else(|p| p.into_inner());
        let entry = map.entry(key).or_insert_with(|| Arc::new(make()) as Arc<dyn std::any::Any + Send + Sync>);
        entry.clone().downcast::<T>().ok()
    }

    /// Zero-filled host memory. Large buffers (a KV cache, a converted weight) are anonymous
    /// mappings, whose pages the kernel zeroes lazily on first touch, so allocating them costs
    /// nothing up front; small ones come from the allocator.
    pub fn host(nbytes: usize) -> Result<Storage> {
        if nbytes == 0 {
            return Ok(Storage::new(0, 0, Device::Cpu, Owner::Empty));
        }
        if nbytes >= LAZY_ZERO_BYTES {
            let mut map = memmap2::MmapMut::map_anon(nbytes)
                .map_err(|e| Error::OutOfMemory(format!("could not map {nbytes} bytes of host memory: {e}")))?;
            huge_pages(&map);
            let addr = map.as_mut_ptr() as u64;
            return Ok(Storage::new(addr, nbytes, Device::Cpu, Owner::External(Box::new(map))));
        }
        let layout = Layout::from_size_align(nbytes, HOST_ALIGN)
            .map_err(|_| Error::Value(format!("a host buffer of {nbytes} bytes is too large")))?;
        // SAFETY: layout has non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(Error::OutOfMemory(format!("could not allocate {nbytes} bytes of host memory")));
        }
        Ok(Storage::new(ptr as u64, nbytes, Device::Cpu, Owner::Host(layout)))
    }

    /// Host memory for the engine's own results: recycled from earlier results of the same size
    /// (with their old contents; see host_pool.rs), else zero-filled.
    pub fn host_recycled(nbytes: usize) -> Result<Storage> {
        if nbytes == 0 {
            return Ok(Storage::new(0, 0, Device::Cpu, Owner::Empty));
        }
        let layout = Layout::from_size_align(nbytes, HOST_ALIGN)
            .map_err(|_| Error::Value(format!("a host buffer of {nbytes} bytes is too large")))?;
        let ptr = crate::host_pool::take(layout);
        if ptr.is_null() {
            return Err(Error::OutOfMemory(format!("could not allocate {nbytes} bytes of host memory")));
        }
        Ok(Storage::new(ptr as u64, nbytes, Device::Cpu, Owner::Recycled(layout)))
    }

    /// Page-locked host memory, registered with the CUDA driver for fast async copies.
    pub fn pinned(nbytes: usize, dev: &Arc<CudaDevice>) -> Result<Storage> {
        if nbytes == 0 {
            return Ok(Storage::new(0, 0, Device::Cpu, Owner::Empty));
        }
        dev.bind()?;
        // SAFETY: a plain allocation call; the pointer is freed once, in Drop.
        let ptr = unsafe { result::malloc_host(nbytes, 0) }.map_err(Error::cuda("cuMemHostAlloc"))?;
        // SAFETY: ptr points at nbytes of fresh host memory.
        unsafe { std::ptr::write_bytes(ptr as *mut u8, 0, nbytes) };
        Ok(Storage::new(ptr as u64, nbytes, Device::Cpu, Owner::Pinned(dev.clone())))
    }

    /// Uninitialised device memory, allocated (and later freed) in the order of `stream`.
    pub fn cuda(nbytes: usize, dev: &Arc<CudaDevice>, stream: &Arc<CudaStream>) -> Result<Storage> {
        let device = Device::Cuda(dev.clone());
        if nbytes == 0 {
            return Ok(Storage::new(0, 0, device, Owner::Empty));
        }
        dev.bind()?;
        // SAFETY: allocation calls; the pointer is freed once, in Drop.
        let ptr = unsafe {
            if dev.ctx.has_async_alloc() {
                result::malloc_async(stream.cu_stream(), nbytes)
            } else {
                result::malloc_sync(nbytes)
            }
        }
        .map_err(Error::cuda("cuMemAlloc"))?;
        Ok(Storage::new(ptr, nbytes, device, Owner::Cuda(dev.clone(), stream.clone())))
    }

    /// Memory owned elsewhere: `addr..addr+nbytes` stays valid while `keep` lives.
    ///
    /// # Safety
    /// The range must be valid memory on `device` for as long as `keep` is alive.
    pub unsafe fn external(addr: u64, nbytes: usize, device: Device, keep: External) -> Storage {
        Storage::new(addr, nbytes, device, Owner::External(keep))
    }

    pub fn addr(&self) -> u64 {
        self.addr
    }

    pub fn nbytes(&self) -> usize {
        self.nbytes
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    pub fn is_pinned(&self) -> bool {
        matches!(self.owner, Owner::Pinned(_))
    }

    pub fn mark_exported(&self) {
        self.exported.store(true, Ordering::Relaxed);
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        // Errors cannot propagate out of drop; a failed free leaks rather than aborting.
        match &self.owner {
            // SAFETY: allocated with exactly this layout in Storage::host.
            Owner::Host(layout) => unsafe { dealloc(self.addr as *mut u8, *layout) },
            // SAFETY: allocated with exactly this layout in Storage::host_recycled.
            Owner::Recycled(layout) => unsafe { crate::host_pool::give(self.addr as *mut u8, *layout) },
            Owner::Pinned(dev) => {
                if dev.bind().is_ok() {
                    // SAFETY: allocated by cuMemHostAlloc in Storage::pinned.
                    let _ = unsafe { result::free_host(self.addr as *mut std::ffi::c_void) };
                }
            }
            Owner::Cuda(dev, stream) => {
                if dev.bind().is_err() {
                    return;
                }
                if self.exported.load(Ordering::Relaxed) {
                    let _ = dev.ctx.synchronize();
                }
                // SAFETY: allocated in Storage::cuda on this device; freed in the order of its
                // stream, after all work already queued there.
                let _ = unsafe {
                    if dev.ctx.has_async_alloc() {
                        result::free_async(self.addr, stream.cu_stream())
                    } else {
                        result::free_sync(self.addr)
                    }
                };
            }
            Owner::External(_) | Owner::Empty => {}
        }
    }
}
