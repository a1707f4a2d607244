//! Pinned staging for small host-to-device copies.
//!
//! A copy from pageable host memory lets the driver wait for everything already queued on the
//! stream before it stages the bytes, so the host could never queue a decode step's inputs
//! while the GPU still ran the step before: the GPU idled through the host's whole per-step
//! work (about 0.3 ms a token on an H200). Small copies (up to [`MAX_STAGED`] bytes) are instead
//! copied by the host into a ring of page-locked memory owned by the device, and the device
//! copy reads them from there asynchronously; the call returns at once. Each region stays
//! reserved until the event recorded after its copy has completed; a reservation that would
//! overlap a region still in use waits for it (so the host runs at most the ring's size ahead).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaEvent, CudaStream, result, sys};

use crate::{CudaDevice, Error, Result};

/// Pinned bytes per device.
const RING_BYTES: usize = 8 << 20;
/// The largest copy staged; larger ones go through the driver (they are rare and long anyway).
pub(crate) const MAX_STAGED: usize = 1 << 20;
/// Regions start on this many bytes (the device copy engines' preferred alignment).
const ALIGN: usize = 256;

/// Something that tells when the copy reading a region is done.
trait Done {
    /// Waits until it is.
    fn wait(&self) -> Result<()>;
    /// Whether it is, without waiting.
    fn done(&self) -> bool;
}

impl Done for CudaEvent {
    fn wait(&self) -> Result<()> {
        self.synchronize().map_err(Error::cuda("cuEventSynchronize"))
    }
    fn done(&self) -> bool {
        // an error (a sticky one from an earlier launch) keeps the region: waiting reports it
        self.try_is_complete().unwrap_or(false)
    }
}

/// Reservations in a ring of `cap` bytes: the next region starts at `head` (or at 0 when it
/// would run past the end); `pending` holds the regions [start, end) still read by queued
/// copies, oldest first.
struct Ring<D> {
    cap: usize,
    head: usize,
    pending: VecDeque<(usize, usize, D)>,
}

impl<D: Done> Ring<D> {
    fn new(cap: usize) -> Self {
        Ring { cap, head: 0, pending: VecDeque::new() }
    }

    /// The offset of a free region of `n` bytes (n <= cap), after waiting for the copies that
    /// still read any part of it (and those queued before them).
    fn reserve(&mut self, n: usize) -> Result<usize> {
        while self.pending.front().is_some_and(|p| p.2.done()) {
            self.pending.pop_front();
        }
        let n = n.max(1).next_multiple_of(ALIGN);
        let start = if self.head + n > self.cap { 0 } else { self.head };
        let end = start + n;
        if let Some(last) = self.pending.iter().rposition(|&(a, b, _)| a < end && start < b) {
            for _ in 0..=last {
                // a failed wait keeps its entry (and the later ones): their copies may still read
                self.pending.front().map_or(Ok(()), |p| p.2.wait())?;
                self.pending.pop_front();
            }
        }
        self.head = end;
        Ok(start)
    }

    /// Marks [at, at + n) as read until `done`.
    fn hold(&mut self, at: usize, n: usize, done: D) {
        self.pending.push_back((at, at + n.max(1).next_multiple_of(ALIGN), done));
    }
}

/// A device's ring: its page-locked memory and reservations.
struct Staging {
    base: usize,
    ring: Ring<CudaEvent>,
}

/// The rings by device ordinal (allocated on first use, kept for the process's life), each under
/// its own lock; None where the pinned allocation failed (copies then go through the driver).
type Rings = HashMap<usize, Option<Arc<Mutex<Staging>>>>;

fn rings() -> &'static Mutex<Rings> {
    static RINGS: std::sync::OnceLock<Mutex<Rings>> = std::sync::OnceLock::new();
    RINGS.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The device's ring, made on first use.
fn ring_of(dev: &CudaDevice) -> Option<Arc<Mutex<Staging>>> {
    let mut all = rings().lock().unwrap_or_else(|p| p.into_inner());
    all.entry(dev.ordinal)
        .or_insert_with(|| {
            // SAFETY: a plain allocation call; the memory is never freed (the ring lives as
            // long as the process), so no copy can outlive it.
            let base = unsafe { result::malloc_host(RING_BYTES, sys::CU_MEMHOSTALLOC_PORTABLE) }.ok()?;
            Some(Arc::new(Mutex::new(Staging { base: base as usize, ring: Ring::new(RING_BYTES) })))
        })
        .clone()
}

/// Copies `src` to device memory at `dst` on `stream` of `dev` (bound by the caller) through
/// the device's ring, returning at once; Ok(false), doing nothing, when `src` is larger than
/// [`MAX_STAGED`] or the device has no ring.
pub(crate) fn copy_to_device(dev: &Arc<CudaDevice>, stream: &Arc<CudaStream>, dst: u64, src: &[u8]) -> Result<bool> {
    if src.is_empty() || src.len() > MAX_STAGED {
        return Ok(false);
    }
    let Some(ring) = ring_of(dev) else {
        return Ok(false);
    };
    let mut staging = ring.lock().unwrap_or_else(|p| p.into_inner());
    let at = staging.ring.reserve(src.len())?;
    // SAFETY: [at, at + len) lies in the ring (reserve keeps regions inside it) and no queued
    // copy reads it any more; src is a live host slice that does not overlap pinned memory
    // this module owns.
    let staged = unsafe {
        let p = (staging.base + at) as *mut u8;
        std::ptr::copy_nonoverlapping(src.as_ptr(), p, src.len());
        std::slice::from_raw_parts(p as *const u8, src.len())
    };
    // SAFETY: dst is device memory of src.len() bytes (the caller's); the staged bytes stay
    // untouched until the event recorded after this copy completes (hold below).
    unsafe { result::memcpy_htod_async(dst, staged, stream.cu_stream()) }.map_err(Error::cuda("cuMemcpyHtoDAsync"))?;
    match stream.record_event(None) {
        Ok(done) => staging.ring.hold(at, src.len(), done),
        Err(e) => {
            // Without an event the region cannot be held: the copy must end before it is reused.
            let _ = stream.synchronize();
            return Err(Error::cuda("cuEventRecord")(e));
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::rc::Rc;

    use super::*;

    /// A copy that completes when the test says so, counting the waits on it.
    struct Fake {
        done: Rc<Cell<bool>>,
        waits: Rc<Cell<usize>>,
    }

    impl Done for Fake {
        fn wait(&self) -> Result<()> {
            self.waits.set(self.waits.get() + 1);
            if self.waits.get() > 100 {
                return Err(Error::Value("the device failed".into()));
            }
            self.done.set(true);
            Ok(())
        }
        fn done(&self) -> bool {
            self.done.get()
        }
    }

    /// Reserves `n` bytes and holds them until the returned flag is set (or waited on).
    fn take(ring: &mut Ring<Fake>, waits: &Rc<Cell<usize>>, n: usize) -> (usize, Rc<Cell<bool>>) {
        let at = ring.reserve(n).unwrap();
        let done = Rc::new(Cell::new(false));
        ring.hold(at, n, Fake { done: done.clone(), waits: waits.clone() });
        (at, done)
    }

    #[test]
    fn regions_follow_each_other_and_wrap_waiting_only_for_overlaps() {
        let waits = Rc::new(Cell::new(0));
        let mut ring = Ring::new(4 * ALIGN);
        let (a, first) = take(&mut ring, &waits, 10);
        let (b, second) = take(&mut ring, &waits, ALIGN + 1);
        let (c, third) = take(&mut ring, &waits, ALIGN);
        assert_eq!((a, b, c), (0, ALIGN, 3 * ALIGN));
        assert_eq!(waits.get(), 0, "nothing overlapped yet");
        // The next region wraps to 0 and overlaps the first copy only.
        let (d, _) = take(&mut ring, &waits, ALIGN);
        assert_eq!(d, 0);
        assert_eq!(waits.get(), 1);
        assert!(first.get() && !second.get() && !third.get());
        // The second copy finishes by itself: its region is reused without a wait.
        second.set(true);
        let (e, _) = take(&mut ring, &waits, 2 * ALIGN);
        assert_eq!((e, waits.get()), (ALIGN, 1));
        // A region as large as the ring waits for the three copies still pending.
        let (f, _) = take(&mut ring, &waits, 4 * ALIGN);
        assert_eq!((f, waits.get()), (0, 4));
        assert!(third.get());
        assert_eq!(ring.pending.len(), 1);
    }

    #[test]
    fn a_failed_wait_keeps_the_regions_still_read() {
        let waits = Rc::new(Cell::new(100)); // the next wait fails
        let mut ring = Ring::new(2 * ALIGN);
        let (a, _) = take(&mut ring, &waits, ALIGN);
        let (b, _) = take(&mut ring, &waits, ALIGN);
        assert_eq!((a, b), (0, ALIGN));
        assert!(ring.reserve(2 * ALIGN).is_err());
        assert_eq!(ring.pending.len(), 2, "both copies may still read their regions");
    }

    #[test]
    fn completed_copies_leave_the_queue_without_waits() {
        let waits = Rc::new(Cell::new(0));
        let mut ring = Ring::new(64 * ALIGN);
        for _ in 0..1000 {
            let at = ring.reserve(100).unwrap();
            ring.hold(at, 100, Fake { done: Rc::new(Cell::new(true)), waits: waits.clone() });
        }
        assert!(ring.pending.len() <= 1);
        assert_eq!(waits.get(), 0);
    }
}
