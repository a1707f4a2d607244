//! The CPU worker pools models run their host steps on: one per thread count for the whole
//! process, shared by every model asking for that count, so loading many models does not start
//! a pool of one thread per core for each. Pools live as long as the process. Models running at
//! once share their pool's threads, and a worker waiting inside a parallel step may run another
//! model's steps meanwhile (rayon's work stealing): no lock may be held across a parallel call.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use rayon::ThreadPool;

use crate::{Error, Result};

static POOLS: Mutex<Option<HashMap<usize, Arc<ThreadPool>>>> = Mutex::new(None);

/// The pool of `threads` workers (None or 0: one per core), started on first use.
pub(crate) fn pool(threads: Option<usize>) -> Result<Arc<ThreadPool>> {
    let count = threads.unwrap_or(0);
    let mut pools = POOLS.lock().unwrap_or_else(|p| p.into_inner());
    let pools = pools.get_or_insert_with(HashMap::new);
    if let Some(p) = pools.get(&count) {
        return Ok(p.clone());
    }
    let p =
        rayon::ThreadPoolBuilder::new().num_threads(count).thread_name(|i| format!("max-cpu-{i}")).build().map_err(
            |e| {
                let what = if count == 0 { "one per core".to_string() } else { count.to_string() };
                Error::Value(format!("could not start the CPU worker threads ({what}): {e}"))
            },
        )?;
    let p = Arc::new(p);
    pools.insert(count, p.clone());
    Ok(p)
}

/// How long a worker kept awake by `run_awake` spins without finding work before it sleeps.
const MAX_IDLE_SPIN: std::time::Duration = std::time::Duration::from_micros(100);

/// Pools in which a `run_awake` is under way (by address): one at a time per pool.
static AWAKE: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// Runs `f` on one worker of `pool` while the pool's other workers stay awake, taking the
/// parallel work `f` spawns as soon as it appears, instead of sleeping between steps and being
/// woken (a system call and a context switch each time, several microseconds in a VM) by every
/// parallel step: a decode step of a small model runs a few hundred of them. The other workers
/// spin only while `f` runs, and go back to sleep after `MAX_IDLE_SPIN` without work. Where a
/// run is already under way in the pool, or the pool has one thread, `f` runs as a plain
/// `install`.
pub(crate) fn run_awake<R: Send>(pool: &ThreadPool, f: impl FnOnce() -> R + Send) -> R {
    let key = pool as *const ThreadPool as usize;
    let claimed = pool.current_num_threads() > 1 && {
        let mut awake = AWAKE.lock().unwrap_or_else(|p| p.into_inner());
        !awake.contains(&key) && {
            awake.push(key);
            true
        }
    };
    if !claimed {
        return pool.install(f);
    }
    let release = Release(key);
    let (task, result, done) = (Mutex::new(Some(f)), Mutex::new(None), AtomicBool::new(false));
    pool.broadcast(|ctx| {
        if ctx.index() == 0 {
            let f = task.lock().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(f) = f {
                // Set even if `f` panics, so that the others stop.
                struct Done<'a>(&'a AtomicBool);
                impl Drop for Done<'_> {
                    fn drop(&mut self) {
                        self.0.store(true, Ordering::Release);
                    }
                }
                let _done = Done(&done);
                let r = f();
                *result.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
            }
            return;
        }
        let mut last = std::time::Instant::now();
        let mut idle = 0u32;
        while !done.load(Ordering::Acquire) {
            if let Some(rayon::Yield::Executed) = rayon::yield_now() {
                (last, idle) = (std::time::Instant::now(), 0);
                continue;
            }
            idle += 1;
            std::hint::spin_loop();
            // Long without work (a serial stretch, or a busy machine that keeps this thread
            // off the core): back to rayon's sleep, woken by new work as usual.
            if idle.is_multiple_of(64) && last.elapsed() > MAX_IDLE_SPIN {
                return;
            }
        }
    });
    drop(release);
    let r = result.into_inner().unwrap_or_else(|p| p.into_inner());
    r.expect("run_awake: the pool's worker 0 ran the task")
}

/// Ends a pool's claim on `run_awake` (also on unwinding).
struct Release(usize);

impl Drop for Release {
    fn drop(&mut self) {
        AWAKE.lock().unwrap_or_else(|p| p.into_inner()).retain(|&k| k != self.0);
    }
}
