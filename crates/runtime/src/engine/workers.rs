//! The CPU worker pools models run their host steps on: one per thread count for the whole
//! process, shared by every model asking for that count, so loading many models does not start
//! a pool of one thread per core for each. Pools live as long as the process. Models running at
//! once share their pool's threads, and a worker waiting inside a parallel step may run another
//! model's steps meanwhile (rayon's work stealing): no lock may be held across a parallel call.

use std::collections::HashMap;
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
