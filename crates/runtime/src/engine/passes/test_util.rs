//! What the passes' tests share: the step names of a lowered program, and one lock for the
//! tests that lower graphs under the process-wide tuning snapshot (some override it for a
//! scope; holding the lock, no test sees another's override).

use crate::engine::program::Program;

/// Step names without the constants.
pub(super) fn names(p: &Program) -> Vec<String> {
    p.body.steps.iter().map(|s| s.name()).filter(|n| n != "constant").collect()
}

pub(super) fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}
