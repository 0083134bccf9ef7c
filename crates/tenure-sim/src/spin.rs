//! Busy-wait detection, shared by both tiers: a node that keeps asking to
//! be woken at once, with nothing changing in between, would spin at 100 %
//! CPU under a real driver. A few such wake-ups in a row are harmless (a
//! timer and a reply can fall on the same instant in either order); past a
//! limit the episode is reported once and the node is woken after an
//! exponential back-off instead, so the simulation neither spins nor loses
//! the node's timers.

use std::time::Duration;

/// The first back-off.
const MIN_BACKOFF: Duration = Duration::from_millis(1);
/// The longest back-off: short against every timer of the machine.
const MAX_BACKOFF: Duration = Duration::from_millis(64);

/// When to wake a node that asked to be woken at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wake {
    /// At once, as asked: not (yet) a busy wait.
    Now,
    /// Later, by this much: the node is busy-waiting. `first` is set for the
    /// wake-up that starts an episode, the one to report.
    BackOff {
        /// How long to hold the wake-up back.
        by: Duration,
        /// This wake-up starts the episode.
        first: bool,
    },
}

/// One node's run of immediate wake-ups that changed nothing.
#[derive(Clone, Debug)]
pub(crate) struct Spin {
    limit: u32,
    count: u32,
    backoff: Duration,
}

impl Spin {
    /// Tolerates `limit` immediate wake-ups in a row.
    pub(crate) fn new(limit: u32) -> Self {
        Spin {
            limit,
            count: 0,
            backoff: Duration::ZERO,
        }
    }

    /// The node asked, once more, to be woken at once although nothing
    /// changed since its last wake-up.
    pub(crate) fn again(&mut self) -> Wake {
        self.count = self.count.saturating_add(1);
        if self.count <= self.limit {
            return Wake::Now;
        }
        let first = self.backoff.is_zero();
        self.backoff = (self.backoff * 2).clamp(MIN_BACKOFF, MAX_BACKOFF);
        Wake::BackOff {
            by: self.backoff,
            first,
        }
    }

    /// Something happened or time moved on: the run is over.
    pub(crate) fn reset(&mut self) {
        self.count = 0;
        self.backoff = Duration::ZERO;
    }

    /// Immediate wake-ups in the current run.
    pub(crate) fn count(&self) -> u32 {
        self.count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_few_immediate_wakes_pass_then_one_episode_is_reported_and_backed_off() {
        let mut s = Spin::new(3);
        for _ in 0..3 {
            assert_eq!(s.again(), Wake::Now);
        }
        let ms = Duration::from_millis;
        assert_eq!(
            s.again(),
            Wake::BackOff {
                by: ms(1),
                first: true
            }
        );
        let backoffs: Vec<Wake> = (0..8).map(|_| s.again()).collect();
        let expected: Vec<Wake> = [2, 4, 8, 16, 32, 64, 64, 64]
            .into_iter()
            .map(|b| Wake::BackOff {
                by: ms(b),
                first: false,
            })
            .collect();
        assert_eq!(backoffs, expected, "reported once, backed off up to 64 ms");
        assert_eq!(s.count(), 12);
        s.reset();
        assert_eq!(s.again(), Wake::Now);
    }
}
