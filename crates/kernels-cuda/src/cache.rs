//! The compiled-kernel cache: in memory for this process, on disk across processes.
//!
//! The key is a SHA-256 of everything that changes the output: this crate's version, NVRTC's
//! version, the architecture, the target, the options and the full source. The directory is
//! `MAX_KERNEL_CACHE_DIR` if set, else `$XDG_CACHE_HOME/max-engine/kernels`, else
//! `~/.cache/max-engine/kernels`. A cache that cannot be read or written only costs a compile.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use sha2::{Digest, Sha256};

use crate::compile::{Target, compile, options};
use crate::{Result, library::nvrtc_version, sources::Family};

static MEMORY_HITS: AtomicU64 = AtomicU64::new(0);
static DISK_HITS: AtomicU64 = AtomicU64::new(0);
static COMPILES: AtomicU64 = AtomicU64::new(0);

/// One slot per key, each with its own lock: a compile holds only its own slot's, so families
/// compile concurrently (see [`prefetch`]), and a second asker of the same key waits for the
/// first one's image instead of compiling it again.
type Slot = Arc<Mutex<Option<Arc<Vec<u8>>>>>;
static MEMORY: Mutex<Option<HashMap<String, Slot>>> = Mutex::new(None);

/// What the cache has done in this process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub memory_hits: u64,
    pub disk_hits: u64,
    pub compiles: u64,
}

pub fn cache_stats() -> CacheStats {
    CacheStats {
        memory_hits: MEMORY_HITS.load(Ordering::Relaxed),
        disk_hits: DISK_HITS.load(Ordering::Relaxed),
        compiles: COMPILES.load(Ordering::Relaxed),
    }
}

/// Where compiled kernels are kept, if anywhere.
pub fn cache_dir() -> Option<PathBuf> {
    if let Some(dir) = max_tuning::current().text(max_tuning::Knob::KernelCacheDir).filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("max-engine").join("kernels"))
}

fn key(family: &Family, arch: &str, target: Target, nvrtc: (i32, i32)) -> String {
    let mut h = Sha256::new();
    h.update(env!("CARGO_PKG_VERSION"));
    h.update(format!("nvrtc {}.{} {arch} {target:?}", nvrtc.0, nvrtc.1));
    for opt in options(arch, target) {
        h.update(opt);
        h.update([0u8]);
    }
    h.update(family.full_source());
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

fn write_atomically(path: &PathBuf, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

/// The compiled image of `family` for `arch`, from memory, disk, or a fresh compile.
pub(crate) fn compiled(family: &Family, arch: &str, target: Target) -> Result<Arc<Vec<u8>>> {
    let k = key(family, arch, target, nvrtc_version()?);
    let slot = {
        let mut memory = MEMORY.lock().unwrap_or_else(|p| p.into_inner());
        memory.get_or_insert_with(HashMap::new).entry(k.clone()).or_default().clone()
    };
    let mut slot = slot.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(image) = slot.as_ref() {
        MEMORY_HITS.fetch_add(1, Ordering::Relaxed);
        return Ok(image.clone());
    }
    let ext = match target {
        Target::Cubin => "cubin",
        Target::Ptx => "ptx",
    };
    let file = cache_dir().map(|d| d.join(format!("{}-{k}.{ext}", family.name)));
    let from_disk = file.as_ref().and_then(|f| std::fs::read(f).ok()).filter(|b| !b.is_empty());
    let image = match from_disk {
        Some(bytes) => {
            DISK_HITS.fetch_add(1, Ordering::Relaxed);
            bytes
        }
        None => {
            let bytes = {
                let _flight = Flight::enter(); // (an exit's settle waits for it)
                compile(family, arch, target)?
            };
            COMPILES.fetch_add(1, Ordering::Relaxed);
            if let Some(f) = &file {
                // A read-only or full disk only means the next process compiles again.
                let _ = write_atomically(f, &bytes);
            }
            bytes
        }
    };
    let image = Arc::new(image);
    *slot = Some(image.clone());
    Ok(image)
}

/// Compiles (or finds in the cache) the kernel families named in `only`, or every family when
/// `only` is `None`, for `arch`, so later processes start without compiling. Needs NVRTC but
/// no GPU. An unknown name is an error listing the known ones.
pub fn warm_cache(arch: &str, only: Option<&[String]>) -> Result<()> {
    for family in crate::sources::select(only)? {
        compiled(family, arch, Target::Cubin)?;
    }
    Ok(())
}

/// Starts compiling `families` for `arch` into the cache, one background thread each, and
/// returns at once: a model's loader calls it with the families its kernels will need, so that
/// NVRTC runs while the weights load rather than at each family's first launch. A caller that
/// drops the handles drops the errors too: the first launch then compiles again and reports.
///
/// A process should call [`settle`] before it exits (the Python package does, from an `atexit`
/// handler): NVRTC torn down under a running compile crashed exits (SIGSEGV, LLVM's "out of
/// memory", glibc's "free(): invalid pointer") after short runs.
pub fn prefetch(arch: &str, families: &[&'static Family]) -> Vec<std::thread::JoinHandle<Result<()>>> {
    let spawn = |family: &'static Family| {
        let arch = arch.to_string();
        let flight = Flight::enter();
        std::thread::Builder::new().name(format!("nvrtc-{}", family.name)).spawn(move || {
            let _flight = flight;
            if STOPPING.load(Ordering::Acquire) {
                return Ok(());
            }
            compiled(family, &arch, Target::Cubin).map(drop)
        })
    };
    // A family whose thread cannot start compiles at its first launch, as it would have anyway.
    families.iter().filter_map(|f| spawn(f).ok()).collect()
}

/// Compiles in flight (on [`prefetch`]'s threads, or at a family's first launch); [`settle`]
/// waits until there are none.
static IN_FLIGHT: Mutex<usize> = Mutex::new(0);
static SETTLED: Condvar = Condvar::new();
/// Set by [`settle`]: background threads that have not started compiling leave at once.
static STOPPING: AtomicBool = AtomicBool::new(false);
/// One compile counted in IN_FLIGHT while it lasts (a prefetch's from before its thread starts:
/// dropped on the thread, or with the closure if the thread never started).
struct Flight;

impl Flight {
    fn enter() -> Flight {
        *IN_FLIGHT.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        Flight
    }
}

impl Drop for Flight {
    fn drop(&mut self) {
        let mut n = IN_FLIGHT.lock().unwrap_or_else(|p| p.into_inner());
        *n -= 1;
        if *n == 0 {
            SETTLED.notify_all();
        }
    }
}

/// Stops [`prefetch`]'s threads from starting compiles and waits for the compiles in flight
/// (prefetched or at a first launch) to finish, for a process about to exit: later prefetches
/// compile nothing (their families compile at their first launch). The wait gives up after
/// SETTLE_LIMIT (an interrupted process stays interruptible; a child forked mid-compile, whose
/// count no thread brings down, does not hang).
pub fn settle() {
    STOPPING.store(true, Ordering::Release);
    let deadline = std::time::Instant::now() + SETTLE_LIMIT;
    let mut n = IN_FLIGHT.lock().unwrap_or_else(|p| p.into_inner());
    while *n > 0 {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return;
        }
        n = SETTLED.wait_timeout(n, left).unwrap_or_else(|p| p.into_inner()).0;
    }
}

/// How long [`settle`] waits at most: past one family's compile on a few cores.
const SETTLE_LIMIT: std::time::Duration = std::time::Duration::from_secs(90);
