//! Recycled host memory for the engine's own outputs and arenas.
//!
//! Executing a model allocates its host arena and every host result afresh. A fresh allocation
//! of a few megabytes costs zero-filling (and, when the allocator maps new pages, a page fault
//! per 4 KiB) — as much as 5% of a 1024³ float32 matmul. Blocks the engine allocated go back to
//! this pool when their buffers are dropped and are handed out again for the same size, so a
//! model executed in a loop touches no new memory.
//!
//! A recycled block holds whatever its previous user wrote: the engine's kernels write every
//! element of their outputs, and intermediate values are written before they are read. The
//! bytes are always initialised (a block is zero-filled when first allocated), so handing them
//! out is sound. The tuning knob `host_pool.poison` fills every recycled block with 0xFF bytes
//! (NaN for floats) to expose a kernel that would rely on zeroed outputs.
//!
//! The pool keeps at most `host_pool_mb` MiB (`MAX_HOST_POOL_MB`, default 256; 0 turns
//! recycling off; read once) in at most
//! `MAX_BLOCKS` blocks, handing the oldest back to the system allocator beyond that. Blocks under
//! `MIN_BLOCK` bytes are not kept: the allocator serves those quickly and zero-filling them is
//! cheap, and leaving them out keeps the pool's lookup a short scan.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::collections::VecDeque;
use std::sync::{Mutex, OnceLock};

const MIN_BLOCK: usize = 64 << 10;
const MAX_BLOCKS: usize = 256;

struct Pool {
    blocks: VecDeque<(usize, Layout)>,
    bytes: usize,
}

/// The pool's size limit in bytes (read once: the pool's contents depend on it).
fn limit() -> usize {
    static LIMIT: OnceLock<usize> = OnceLock::new();
    *LIMIT.get_or_init(|| limit_of(&max_tuning::current()))
}

/// The limit the `host_pool_mb` setting gives.
fn limit_of(t: &max_tuning::Tuning) -> usize {
    t.int(max_tuning::Knob::HostPoolMb).unwrap_or(256).saturating_mul(1 << 20)
}

/// Whether a block of `size` bytes is kept for reuse under `limit`.
fn kept(size: usize, limit: usize) -> bool {
    size >= MIN_BLOCK && size <= limit / 4
}

fn pool() -> &'static Mutex<Pool> {
    static POOL: OnceLock<Mutex<Pool>> = OnceLock::new();
    POOL.get_or_init(|| Mutex::new(Pool { blocks: VecDeque::new(), bytes: 0 }))
}

/// A block of exactly `layout`, recycled when one is free, else freshly zero-filled; null when
/// the system is out of memory.
pub(crate) fn take(layout: Layout) -> *mut u8 {
    if limit() > 0 && layout.size() >= MIN_BLOCK {
        let found = {
            let mut p = pool().lock().unwrap_or_else(|e| e.into_inner());
            let at = p.blocks.iter().position(|&(_, l)| l == layout);
            at.and_then(|i| p.blocks.remove(i)).map(|(addr, l)| {
                p.bytes -= l.size();
                addr
            })
        };
        if let Some(addr) = found {
            let ptr = addr as *mut u8;
            if max_tuning::current().flag_or(max_tuning::Knob::HostPoolPoison, false) {
                // SAFETY: the block is `layout.size()` bytes we own.
                unsafe { std::ptr::write_bytes(ptr, 0xFF, layout.size()) };
            }
            return ptr;
        }
    }
    // SAFETY: callers pass layouts of non-zero size.
    unsafe { alloc_zeroed(layout) }
}

/// Returns a block from `take` (or any `alloc` of `layout`) to the pool or the system.
///
/// # Safety
/// `ptr` must have been allocated with `layout` and not be used again by the caller.
pub(crate) unsafe fn give(ptr: *mut u8, layout: Layout) {
    let limit = limit();
    if kept(layout.size(), limit) {
        let mut evicted = Vec::new();
        {
            let mut p = pool().lock().unwrap_or_else(|e| e.into_inner());
            p.blocks.push_back((ptr as usize, layout));
            p.bytes += layout.size();
            while p.bytes > limit || p.blocks.len() > MAX_BLOCKS {
                let Some((addr, l)) = p.blocks.pop_front() else { break };
                p.bytes -= l.size();
                evicted.push((addr, l));
            }
        }
        for (addr, l) in evicted {
            // SAFETY: every pooled block was allocated with its recorded layout.
            unsafe { dealloc(addr as *mut u8, l) };
        }
        return;
    }
    // SAFETY: per this function's contract.
    unsafe { dealloc(ptr, layout) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_pool_mb_sets_what_is_kept() {
        let at = |spec: &str| limit_of(&max_tuning::Tuning::parse(spec).unwrap());
        assert_eq!(at(""), 256 << 20);
        assert!(kept(1 << 20, at("")) && !kept(1 << 20, at("host_pool_mb=0")));
        assert!(!kept(100 << 20, at("")) && kept(100 << 20, at("host_pool_mb=1024")));
        assert!(!kept(MIN_BLOCK - 1, at("host_pool_mb=1024")));
    }

    #[test]
    fn poison_fills_recycled_blocks() {
        let layout = Layout::from_size_align(12347 * 64, 64).unwrap();
        let a = take(layout);
        unsafe { give(a, layout) };
        let b = {
            let _poison = max_tuning::scoped("host_pool.poison=1").unwrap();
            take(layout)
        };
        assert_eq!(a, b, "the block was recycled");
        let bytes = unsafe { std::slice::from_raw_parts(b, layout.size()) };
        assert!(bytes.iter().all(|&x| x == 0xFF));
        unsafe { b.write(0) };
        unsafe { give(b, layout) };
        let c = take(layout);
        assert_eq!(unsafe { c.read() }, 0, "not poisoned by default");
        unsafe { give(c, layout) };
    }

    #[test]
    fn a_freed_block_is_handed_out_again_for_the_same_layout() {
        let layout = Layout::from_size_align(12345 * 64, 64).unwrap();
        let a = take(layout);
        assert!(!a.is_null());
        unsafe { a.write(7) };
        unsafe { give(a, layout) };
        let b = take(layout);
        assert_eq!(a, b);
        let other = Layout::from_size_align(12346 * 64, 64).unwrap();
        let c = take(other);
        assert_ne!(b, c);
        unsafe {
            give(b, layout);
            give(c, other);
        }
    }
}
