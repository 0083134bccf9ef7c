//! The record of a run: a digest of every event and action (always), and a
//! human-readable line per event (on request).
//!
//! The digest hashes numbers rather than formatted text, so keeping it costs
//! next to nothing and every seed of the test suite is digested.

use crate::clock::SimTime;

/// FNV-1a, 64 bit: tiny, stable across platforms and Rust versions (unlike
/// `DefaultHasher`), and good enough to tell two traces apart.
#[derive(Clone, Debug)]
pub(crate) struct Trace {
    hash: u64,
    lines: Option<Vec<String>>,
}

impl Trace {
    pub(crate) fn new(keep_lines: bool) -> Self {
        Trace {
            hash: 0xcbf2_9ce4_8422_2325,
            lines: keep_lines.then(Vec::new),
        }
    }

    fn mix(&mut self, x: u64) {
        for b in x.to_le_bytes() {
            self.hash ^= u64::from(b);
            self.hash = self.hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    fn mix_str(&mut self, s: &str) {
        for b in s.bytes() {
            self.hash ^= u64::from(b);
            self.hash = self.hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        self.mix(s.len() as u64);
    }

    /// Records one event: its instant, node (if any), a tag naming it, the
    /// numbers that identify it, and (only if lines are kept) a description.
    pub(crate) fn event(
        &mut self,
        t: SimTime,
        node: Option<usize>,
        tag: &'static str,
        nums: &[u64],
        text: impl FnOnce() -> String,
    ) {
        self.mix(t.as_nanos());
        self.mix(node.map_or(u64::MAX, |n| n as u64));
        self.mix_str(tag);
        for &n in nums {
            self.mix(n);
        }
        if let Some(lines) = &mut self.lines {
            let who = node.map_or_else(|| "  -".to_string(), |n| format!("n{n:<2}"));
            lines.push(format!("{t:>18} {who} {tag:<12} {}", text()));
        }
    }

    pub(crate) fn digest(&self) -> u64 {
        self.hash
    }

    pub(crate) fn into_lines(self) -> Vec<String> {
        self.lines.unwrap_or_default()
    }
}
