//! What the launchers chose, for tests and benchmarks. While recording is on (a [`Recording`]
//! is alive; Python: `max.tuning.record_launches()`), each launch of a family whose launcher
//! selects a configuration appends its kernel entry and that configuration; off, a launch pays
//! one atomic load.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// One launch: the launcher's family (`conv_sm90`, `gemm_sm90p`, `qgemv`, ...), the kernel
/// entry, and the configuration as (field, value) pairs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchRecord {
    pub family: &'static str,
    pub kernel: String,
    pub config: Vec<(&'static str, i64)>,
}

impl LaunchRecord {
    /// A field of the configuration.
    pub fn get(&self, field: &str) -> Option<i64> {
        self.config.iter().find(|(k, _)| *k == field).map(|(_, v)| *v)
    }
}

/// The most records kept (older ones are dropped first).
const MAX_RECORDS: usize = 1 << 16;

static DEPTH: AtomicUsize = AtomicUsize::new(0);
static LOG: Mutex<Vec<LaunchRecord>> = Mutex::new(Vec::new());

/// Recording on until dropped (nests).
#[must_use = "recording stops when this is dropped"]
pub struct Recording(());

impl Drop for Recording {
    fn drop(&mut self) {
        DEPTH.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Turns recording on (the log is kept until [`clear`]).
pub fn start() -> Recording {
    DEPTH.fetch_add(1, Ordering::Relaxed);
    Recording(())
}

pub fn recording() -> bool {
    DEPTH.load(Ordering::Relaxed) > 0
}

/// Appends a launch while recording is on; `what` gives the kernel entry and configuration.
pub fn record(family: &'static str, what: impl FnOnce() -> (String, Vec<(&'static str, i64)>)) {
    if !recording() {
        return;
    }
    let (kernel, config) = what();
    let mut log = LOG.lock().unwrap_or_else(|e| e.into_inner());
    if log.len() >= MAX_RECORDS {
        log.drain(..MAX_RECORDS / 2);
    }
    log.push(LaunchRecord { family, kernel, config });
}

/// The records kept, oldest first.
pub fn records() -> Vec<LaunchRecord> {
    LOG.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// The last launch of `family` recorded.
pub fn last_launch_config(family: &str) -> Option<LaunchRecord> {
    LOG.lock().unwrap_or_else(|e| e.into_inner()).iter().rev().find(|r| r.family == family).cloned()
}

pub fn clear() {
    LOG.lock().unwrap_or_else(|e| e.into_inner()).clear();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_only_while_recording() {
        record("test_family", || ("off".into(), vec![]));
        {
            let _on = start();
            record("test_family", || ("k1".into(), vec![("bn", 128)]));
            record("other_family", || ("k2".into(), vec![]));
        }
        record("test_family", || ("off again".into(), vec![]));
        let last = last_launch_config("test_family").unwrap();
        assert_eq!((last.kernel.as_str(), last.get("bn")), ("k1", Some(128)));
        assert!(records().iter().all(|r| !r.kernel.starts_with("off")));
    }
}
