//! The live timeline: one line per event, stamped with the time since the
//! demo started, as things happen. With `--json` it goes to stderr so that
//! stdout carries only the summary.

use std::io::{self, Write};

/// Prints timeline lines.
pub struct Timeline {
    t0: u64,
    to_stderr: bool,
}

impl Timeline {
    /// A timeline starting at `t0` (nanoseconds on the shared clock).
    pub fn new(t0: u64, to_stderr: bool) -> Self {
        Timeline { t0, to_stderr }
    }

    /// Prints `text` stamped with `at`.
    pub fn at(&self, at: u64, text: &str) {
        let secs = at.saturating_sub(self.t0) as f64 / 1e9;
        self.line(&format!("[{secs:>7.3}s] {text}"));
    }

    /// Prints an unstamped line.
    pub fn line(&self, text: &str) {
        // A closed terminal or pipe must not abort the demo: its candidates
        // still need stopping and its scratch directory removing.
        let _ = if self.to_stderr {
            writeln!(io::stderr(), "{text}")
        } else {
            writeln!(io::stdout(), "{text}")
        };
    }
}
