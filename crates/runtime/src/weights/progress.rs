//! A progress bar on stderr for slow loads: silent for the first second (most loads end
//! sooner), then redrawn at most ten times a second. Off when stderr is not a terminal or
//! when the `no_progress` setting (MAX_NO_PROGRESS=1) asks.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

const QUIET_FOR: Duration = Duration::from_secs(1);
const REDRAW_EVERY: Duration = Duration::from_millis(100);
const WIDTH: usize = 30;

pub struct Progress {
    label: String,
    total: u64,
    done: u64,
    start: Instant,
    last: Option<Instant>,
    enabled: bool,
}

/// Whether bars are drawn in this process.
pub fn progress_enabled() -> bool {
    let disabled = max_tuning::current().flag_or(max_tuning::Knob::NoProgress, false);
    !disabled && std::io::stderr().is_terminal()
}

impl Progress {
    pub fn new(label: impl Into<String>, total_bytes: u64) -> Progress {
        Progress::with_output(label, total_bytes, progress_enabled())
    }

    /// A bar that draws (or not) regardless of the terminal, for tests.
    pub fn with_output(label: impl Into<String>, total_bytes: u64, enabled: bool) -> Progress {
        Progress { label: label.into(), total: total_bytes, done: 0, start: Instant::now(), last: None, enabled }
    }

    pub fn advance(&mut self, bytes: u64) {
        self.done = self.done.saturating_add(bytes);
        if !self.enabled {
            return;
        }
        let now = Instant::now();
        let due = match self.last {
            None => now.duration_since(self.start) >= QUIET_FOR,
            Some(t) => now.duration_since(t) >= REDRAW_EVERY,
        };
        if due {
            self.last = Some(now);
            self.draw(false);
        }
    }

    /// The line as drawn (without the carriage return).
    pub fn line(&self) -> String {
        let frac = if self.total == 0 { 1.0 } else { (self.done as f64 / self.total as f64).min(1.0) };
        let filled = (frac * WIDTH as f64) as usize;
        let secs = self.start.elapsed().as_secs_f64().max(1e-9);
        format!(
            "{} [{}{}] {:.1}/{:.1} MB {:.2} GB/s",
            self.label,
            "#".repeat(filled),
            ".".repeat(WIDTH - filled),
            self.done as f64 / 1e6,
            self.total as f64 / 1e6,
            self.done as f64 / secs / 1e9
        )
    }

    fn draw(&self, last: bool) {
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r{}{}", self.line(), if last { "\n" } else { "" });
        let _ = err.flush();
    }

    /// Ends the bar: a final line if anything was drawn.
    pub fn finish(&mut self) {
        if self.enabled && self.last.is_some() {
            self.draw(true);
        }
        self.enabled = false;
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_shows_the_fraction_done() {
        let mut p = Progress::with_output("loading weights", 200_000_000, false);
        p.advance(50_000_000);
        let line = p.line();
        assert!(line.starts_with("loading weights [#######........"), "{line}");
        assert!(line.contains("50.0/200.0 MB"), "{line}");
        p.advance(u64::MAX);
        assert!(p.line().contains(&"#".repeat(WIDTH)));
    }

    #[test]
    fn a_quick_load_draws_nothing() {
        let mut p = Progress::with_output("x", 10, true);
        p.advance(10);
        assert!(p.last.is_none());
        p.finish();
    }
}
