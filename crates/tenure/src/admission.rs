//! How many of the engine's deferrable operations (acquisitions and polls)
//! may be in flight: a window sized by the store's measured service time,
//! additive increase and multiplicative decrease (AIMD) as TCP does.
//!
//! Renewals, releases and a leader's verifying reads are never held back
//! here: they keep terms that are already held, and holding fewer terms
//! well beats holding more of them badly. What the window limits is the
//! work that *adds* load: a candidate's attempt to take a lease it does not
//! hold, and its polls. Past the store's capacity (or while it is slow) the
//! window shrinks until the batches come back within their target again,
//! so the groups already led keep their renewals' headroom and the rest
//! wait, with jitter, instead of everyone's operations timing out together
//! (the metastable collapse a fixed rate of attempts leads to).
//!
//! The rules, with the instants passed in (no clock reads, no I/O):
//!
//! * A batch whose reply took longer than the target, or that failed as a
//!   whole, is congestion: the window halves, at most once per target
//!   interval (one burst of slow replies is one signal, not many), and
//!   never below [`MIN_WINDOW`].
//! * Until the first congestion the window grows by each timely batch's
//!   size (a slow start: 100,000 groups starting at once on an idle store
//!   are admitted in a few round trips); after it, by an eighth of the
//!   initial window per timely batch.

use std::time::Duration;

use crate::clock::MonoTime;

/// The fewest deferrable operations the window ever lets through at once:
/// a store that is slow for everyone still sees candidates make progress.
pub(crate) const MIN_WINDOW: usize = 8;

/// The admission window of one engine.
#[derive(Debug)]
pub(crate) struct Admission {
    window: usize,
    max_window: usize,
    step: usize,
    in_flight: usize,
    slow_start: bool,
    last_cut: Option<MonoTime>,
}

impl Admission {
    /// A window that starts at `initial` operations and never grows past
    /// `max_window`.
    pub(crate) fn new(initial: usize, max_window: usize) -> Admission {
        let max_window = max_window.max(MIN_WINDOW);
        Admission {
            window: initial.clamp(MIN_WINDOW, max_window),
            max_window,
            step: (initial / 8).max(1),
            in_flight: 0,
            slow_start: true,
            last_cut: None,
        }
    }

    /// How many more deferrable operations may be sent now.
    pub(crate) fn room(&self) -> usize {
        self.window.saturating_sub(self.in_flight)
    }

    /// The window now, for monitoring.
    pub(crate) fn window(&self) -> usize {
        self.window
    }

    /// `n` deferrable operations were sent.
    pub(crate) fn sent(&mut self, n: usize) {
        self.in_flight = self.in_flight.saturating_add(n);
    }

    /// `n` deferrable operations came back (or were abandoned).
    pub(crate) fn returned(&mut self, n: usize) {
        self.in_flight = self.in_flight.saturating_sub(n);
    }

    /// A batch of `ops` operations, of any kind, came back at `now` after
    /// `latency`, or failed as a whole (`failed`): the store's service
    /// time, against `target`.
    pub(crate) fn observe(
        &mut self,
        now: MonoTime,
        latency: Duration,
        failed: bool,
        ops: usize,
        target: Duration,
    ) {
        if failed || latency > target {
            let recently = self.last_cut.is_some_and(|t| now < t + target);
            if !recently {
                self.window = (self.window / 2).max(MIN_WINDOW);
                self.slow_start = false;
                self.last_cut = Some(now);
            }
            return;
        }
        let grow = if self.slow_start {
            ops.max(1)
        } else {
            self.step
        };
        self.window = self.window.saturating_add(grow).min(self.max_window);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TARGET: Duration = Duration::from_millis(100);

    fn at(ms: u64) -> MonoTime {
        MonoTime::from_nanos(ms * 1_000_000)
    }

    fn fast() -> Duration {
        TARGET / 4
    }

    fn slow() -> Duration {
        TARGET * 2
    }

    #[test]
    fn grows_by_whole_batches_until_the_first_congestion_then_by_steps() {
        let mut a = Admission::new(1024, 1 << 20);
        a.observe(at(0), fast(), false, 1024, TARGET);
        assert_eq!(a.window(), 2048);
        a.observe(at(1), slow(), false, 1024, TARGET);
        assert_eq!(a.window(), 1024);
        a.observe(at(200), fast(), false, 1024, TARGET);
        assert_eq!(a.window(), 1024 + 128, "additive after the first cut");
    }

    #[test]
    fn a_burst_of_slow_replies_halves_the_window_once() {
        let mut a = Admission::new(4096, 1 << 20);
        for ms in 0..10 {
            a.observe(at(ms), slow(), false, 4096, TARGET);
        }
        assert_eq!(a.window(), 2048);
        a.observe(at(150), slow(), false, 4096, TARGET);
        assert_eq!(a.window(), 1024, "a later slow reply cuts again");
    }

    #[test]
    fn a_failed_batch_is_congestion_and_the_window_keeps_a_floor() {
        let mut a = Admission::new(64, 1 << 20);
        for i in 0..20 {
            a.observe(at(i * 1000), fast(), true, 64, TARGET);
        }
        assert_eq!(a.window(), MIN_WINDOW);
        assert_eq!(a.room(), MIN_WINDOW);
    }

    #[test]
    fn room_counts_what_is_in_flight_and_never_exceeds_the_cap() {
        let mut a = Admission::new(100, 150);
        a.sent(60);
        assert_eq!(a.room(), 40);
        a.sent(60);
        assert_eq!(a.room(), 0, "over the window: no room, no underflow");
        a.returned(120);
        for _ in 0..10 {
            a.observe(at(0), fast(), false, 100, TARGET);
        }
        assert_eq!(a.window(), 150);
        a.returned(1);
        assert_eq!(a.room(), 150);
    }
}
