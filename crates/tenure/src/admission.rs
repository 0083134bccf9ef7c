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
//! * The store's round trip with no queue is the fastest reply of the
//!   last 10 to 20 seconds (a sliding minimum, so that a store that became
//!   slower for good is learned). A batch whose reply took longer than the target (or than
//!   twice that round trip, on a store whose round trip alone exceeds the
//!   target), or that failed as a whole, is congestion: the window halves,
//!   at most once per target interval (one burst of slow replies is one
//!   signal, not many), and never below [`MIN_WINDOW`].
//! * A slow or failed batch of *renewals* also pauses admission for one
//!   target interval: the terms already held are what the store is failing
//!   to keep, so nothing that adds load goes out until a renewal batch
//!   comes back in time (or the pause ends, so that an engine that has
//!   lost every term still probes).
//! * Until the first congestion the window grows by each timely batch's
//!   size (a slow start: it doubles every round trip, so 100,000 groups
//!   starting at once on an idle store are admitted in a few); after it,
//!   by [`MIN_WINDOW`] per timely batch.
//! * A renewal the engine did not send because the store could not have
//!   answered it in time is congestion as well (the batches that went may
//!   all have come back in time: the excess is what never went).
//!   It drops the window to its floor, as TCP does after a timeout: held
//!   terms are being lost, not merely slowed.
//! * The engine's own lag is *not* evidence about the store: a host whose
//!   CPU other processes take wakes the engine late while the store could
//!   serve everything at once, and shrinking the window on it starves
//!   elections the store would serve (a busy host elected 100,000 groups
//!   in 16 s instead of 3.6 s, and under heavier contention a fifth of
//!   them in 100 s). The window moves on the store's replies alone. A late
//!   wake-up only pauses admission, without touching the window, while it
//!   puts held terms at risk: when it ate a quarter of the margin a renewal has
//!   between falling due and the last instant it could still be sent with
//!   its whole operation timeout before the term's end
//!   ([`Admission::late_wake`]). Then what the process can do goes to the
//!   renewals of the terms it holds.
//! * The store's cost of one operation is learned from every batch of at
//!   least [`MIN_WINDOW`] operations: what its latency exceeds the round
//!   trip by, over its size (smoothed); a smaller batch is too noisy to
//!   raise that cost, but one that came back sooner lowers it, so that a
//!   cost learned while the store was slow is unlearned even by an engine
//!   whose batches are now all small. No batch of any kind is made larger
//!   than the target allows at that cost: a batch the store cannot answer
//!   within its timeout is work it does for nobody.

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
    paused_until: Option<MonoTime>,
    /// The store's smoothed cost of one operation beyond the round trip,
    /// once learned.
    per_op: Option<Duration>,
    /// The store's round trip with no queue: the fastest reply of the
    /// current and the previous [`BASE_EPOCH`], and when the current one
    /// began (a sliding minimum: a store that became slower for good is
    /// learned within two epochs, while a queue that builds up for less
    /// never passes for the round trip).
    base: Option<Duration>,
    base_previous: Option<Duration>,
    epoch_began: Option<MonoTime>,
}

/// How long one epoch of the round-trip minimum lasts.
const BASE_EPOCH: Duration = Duration::from_secs(10);

impl Admission {
    /// A window that starts at `initial` operations and never grows past
    /// `max_window`.
    pub(crate) fn new(initial: usize, max_window: usize) -> Admission {
        let max_window = max_window.max(MIN_WINDOW);
        Admission {
            window: initial.clamp(MIN_WINDOW, max_window),
            max_window,
            step: MIN_WINDOW,
            in_flight: 0,
            slow_start: true,
            last_cut: None,
            paused_until: None,
            per_op: None,
            base: None,
            base_previous: None,
            epoch_began: None,
        }
    }

    /// How many more deferrable operations may be sent at `now`.
    pub(crate) fn room(&self, now: MonoTime) -> usize {
        if self.paused_until.is_some_and(|t| now < t) {
            return 0;
        }
        self.window.saturating_sub(self.in_flight)
    }

    /// Until when admission is paused, if it is at `now`: the engine wakes
    /// then to send what waits.
    pub(crate) fn paused_until(&self, now: MonoTime) -> Option<MonoTime> {
        self.paused_until.filter(|t| now < *t)
    }

    /// The largest batch worth sending, of at most `max_batch`: as many
    /// operations as the store serves within `target` at its learned cost.
    pub(crate) fn batch_cap(&self, max_batch: usize, target: Duration) -> usize {
        let Some(per_op) = self.per_op.filter(|d| !d.is_zero()) else {
            return max_batch;
        };
        let base = self.base_rtt();
        let room = self.limit(target).saturating_sub(base);
        let fits = room.as_nanos() / per_op.as_nanos();
        usize::try_from(fits)
            .unwrap_or(usize::MAX)
            .clamp(MIN_WINDOW.min(max_batch), max_batch)
    }

    /// The store's round trip with no queue, as far as it is known.
    pub(crate) fn base_rtt(&self) -> Duration {
        match (self.base, self.base_previous) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b).unwrap_or(Duration::ZERO),
        }
    }

    /// How long the store should take to answer a batch of `ops` sent
    /// behind `ahead` operations in flight: the round trip and the learned
    /// per-batch cost of each. That cost already includes a batch's wait
    /// behind others, so on a serial store this overestimates the wait by
    /// up to the number of batches in flight; the margin is deliberate. The
    /// cost is smoothed and lags a store that suddenly slows down, and a
    /// renewal held back that could have made it costs one term, while
    /// renewals sent that cannot make it cost every term in the queue (an
    /// exact estimate, tried on the overload test, lost every term while
    /// the store was twice as slow).
    pub(crate) fn expected(&self, ops: usize, ahead: usize) -> Duration {
        let per_op = self.per_op.unwrap_or(Duration::ZERO);
        let queued = u32::try_from(ops.saturating_add(ahead)).unwrap_or(u32::MAX);
        self.base_rtt()
            .saturating_add(per_op.saturating_mul(queued))
    }

    /// The latency past which a batch is congestion.
    fn limit(&self, target: Duration) -> Duration {
        target.max(self.base_rtt().saturating_mul(2))
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

    /// The engine woke at `now`, `lag` after the earliest timer it slept
    /// for, while holding terms whose renewals have `margin` to spare
    /// between falling due and the last instant they could be sent with a
    /// whole operation timeout before their term ends (`None`: it holds no
    /// term). A lag past a quarter of that margin puts held terms at risk:
    /// admission pauses for `target` (or the lag, if longer), so the
    /// process's time goes to its renewals. The
    /// window is left alone whatever the lag: a late wake-up says the host
    /// is busy, not that the store is (see the module docs).
    pub(crate) fn late_wake(
        &mut self,
        now: MonoTime,
        lag: Duration,
        margin: Option<Duration>,
        target: Duration,
    ) {
        if margin.is_some_and(|m| lag > m / 4) {
            // As long as it was late, at least a target interval: the
            // renewals it delayed go out first.
            let until = now + target.max(lag);
            self.paused_until = Some(self.paused_until.map_or(until, |t| t.max(until)));
        }
    }

    /// Terms already held could not all be kept at `now` (a renewal or
    /// release was not sent, as the store could not have answered it in
    /// time at its measured service time): the window drops to its floor and, if the
    /// engine holds any term (`holding`), admission pauses for `target` or
    /// until a renewal batch comes back in time. An engine that holds none
    /// is not paused: no renewal would end the pause, and candidates must
    /// still make progress at the floor.
    pub(crate) fn overloaded(&mut self, now: MonoTime, target: Duration, holding: bool) {
        if holding {
            self.paused_until = Some(now + target);
        }
        // As TCP after a timeout: start again from the floor. Halving
        // leaves enough acquisitions in flight to keep crowding out the
        // renewals they compete with.
        self.window = MIN_WINDOW;
        self.slow_start = false;
        self.last_cut = Some(now);
    }

    /// A batch of `ops` operations came back at `now` after `latency`, or
    /// failed as a whole (`failed`): the store's service time, against
    /// `target`. `renewals` says whether the batch kept held terms.
    pub(crate) fn observe(
        &mut self,
        now: MonoTime,
        latency: Duration,
        failed: bool,
        ops: usize,
        target: Duration,
        renewals: bool,
    ) {
        if !failed {
            if self.epoch_began.is_none_or(|t| now >= t + BASE_EPOCH) {
                self.base_previous = self.base.take();
                self.epoch_began = Some(now);
            }
            self.base = Some(self.base.map_or(latency, |b| b.min(latency)));
        }
        let base = self.base_rtt();
        if !failed && ops > 0 {
            let excess = latency.saturating_sub(base);
            let cost = excess / u32::try_from(ops).unwrap_or(u32::MAX);
            // Smoothed by an eighth of each sample, as TCP smooths its
            // round-trip time.
            let smoothed = |c: Duration| c.saturating_mul(7).saturating_add(cost) / 8;
            self.per_op = match self.per_op {
                // A batch this small says little about a queue (its
                // latency is mostly the round trip's noise), so it never
                // raises the cost; but it bounds it, and only such
                // batches may come back: a cost learned while the store
                // was slow, over the few renewals an engine holds, makes
                // every renewal batch look too late to send, and without
                // this the cost was never learned again (tenure-sim
                // --shards --catalog seed 89: a member whose store had
                // been slow for 4 s shed every renewal for good).
                Some(c) if ops < MIN_WINDOW => Some(if cost < c { smoothed(c) } else { c }),
                None if ops < MIN_WINDOW => None,
                known => Some(known.map_or(cost, smoothed)),
            };
        }
        let congested = failed || latency > self.limit(target);
        if renewals {
            self.paused_until = congested.then_some(now + target);
        }
        if congested {
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
        a.observe(at(0), Duration::ZERO, false, 1, TARGET, false);
        let mut a = Admission { window: 1024, ..a };
        a.observe(at(0), fast(), false, 1024, TARGET, false);
        assert_eq!(a.window(), 2048);
        a.observe(at(1), slow(), false, 1024, TARGET, false);
        assert_eq!(a.window(), 1024);
        a.observe(at(200), fast(), false, 1024, TARGET, false);
        assert_eq!(
            a.window(),
            1024 + MIN_WINDOW,
            "additive after the first cut"
        );
    }

    #[test]
    fn a_burst_of_slow_replies_halves_the_window_once() {
        let mut a = Admission::new(4096, 1 << 20);
        a.observe(at(0), Duration::ZERO, false, 1, TARGET, false);
        let mut a = Admission { window: 4096, ..a };
        for ms in 0..10 {
            a.observe(at(ms), slow(), false, 4096, TARGET, false);
        }
        assert_eq!(a.window(), 2048);
        a.observe(at(150), slow(), false, 4096, TARGET, false);
        assert_eq!(a.window(), 1024, "a later slow reply cuts again");
    }

    #[test]
    fn a_failed_batch_is_congestion_and_the_window_keeps_a_floor() {
        let mut a = Admission::new(64, 1 << 20);
        for i in 0..20 {
            a.observe(at(i * 1000), fast(), true, 64, TARGET, false);
        }
        assert_eq!(a.window(), MIN_WINDOW);
        assert_eq!(a.room(at(0)), MIN_WINDOW);
    }

    #[test]
    fn room_counts_what_is_in_flight_and_never_exceeds_the_cap() {
        let mut a = Admission::new(100, 150);
        a.sent(60);
        assert_eq!(a.room(at(0)), 40);
        a.sent(60);
        assert_eq!(a.room(at(0)), 0, "over the window: no room, no underflow");
        a.returned(120);
        for _ in 0..10 {
            a.observe(at(0), fast(), false, 100, TARGET, false);
        }
        assert_eq!(a.window(), 150);
        a.returned(1);
        assert_eq!(a.room(at(0)), 150);
    }

    #[test]
    fn a_slow_renewal_batch_pauses_admission_until_one_comes_back_in_time() {
        let mut a = Admission::new(64, 1 << 20);
        a.observe(at(0), Duration::ZERO, false, 1, TARGET, false);
        let mut a = Admission { window: 64, ..a };
        a.observe(at(0), slow(), false, 64, TARGET, true);
        assert_eq!(a.room(at(50)), 0, "paused");
        assert_eq!(a.paused_until(at(50)), Some(at(100)));
        assert_eq!(a.room(at(100)), 32, "the pause ends by itself");
        a.observe(at(10), slow(), false, 64, TARGET, true);
        assert_eq!(a.room(at(20)), 0);
        a.observe(at(30), fast(), false, 64, TARGET, true);
        assert!(a.room(at(30)) > 0, "a timely renewal batch ends the pause");
    }

    #[test]
    fn a_late_wake_up_never_shrinks_the_window() {
        let margin = Some(TARGET * 20);
        let mut a = Admission::new(64, 1 << 20);
        a.late_wake(at(0), TARGET * 5, margin, TARGET);
        assert_eq!(
            a.room(at(0)),
            64,
            "a quarter of the margin late: no risk, no change"
        );
        for ms in 0..50 {
            a.late_wake(at(ms * 10), TARGET * 4, margin, TARGET);
        }
        assert_eq!(a.room(at(500)), 64, "a busy host is not a slow store");
        a.observe(at(500), fast(), false, 64, TARGET, false);
        assert_eq!(a.window(), 128, "and the slow start goes on");
    }

    #[test]
    fn a_late_wake_up_that_puts_held_terms_at_risk_pauses_admission_only() {
        let margin = Some(TARGET * 20);
        let mut a = Admission::new(64, 1 << 20);
        a.late_wake(at(0), TARGET * 6, margin, TARGET);
        assert_eq!(a.room(at(50)), 0, "paused while terms are at risk");
        assert_eq!(
            a.paused_until(at(50)),
            Some(at(600)),
            "for as long as it was late"
        );
        assert_eq!(
            a.room(at(600)),
            64,
            "the pause ends by itself, window intact"
        );
        a.late_wake(at(600), TARGET * 6, None, TARGET);
        assert_eq!(
            a.room(at(600)),
            64,
            "an engine that holds no term is never paused"
        );
    }

    #[test]
    fn batches_are_capped_at_what_the_store_serves_within_the_target() {
        let ms = Duration::from_millis;
        let mut a = Admission::new(64, 1 << 20);
        assert_eq!(a.batch_cap(4096, TARGET), 4096, "nothing learned yet");
        // A round trip of 10 ms, then 100 operations in 60 ms: half a
        // millisecond each beyond it.
        a.observe(at(0), ms(10), false, 8, TARGET, false);
        for i in 0..40 {
            a.observe(at(1 + i), ms(60), false, 100, TARGET, false);
        }
        // (100 ms − the round trip) / 0.5 ms.
        let cap = a.batch_cap(4096, TARGET);
        assert!((170..=185).contains(&cap), "{cap}");
        assert_eq!(a.batch_cap(100, TARGET), 100);
    }

    #[test]
    fn a_long_round_trip_alone_is_not_congestion_nor_cost() {
        let ms = Duration::from_millis;
        let mut a = Admission::new(64, 1 << 20);
        // Every reply takes 300 ms, more than the 100 ms target, whatever
        // the batch's size: the store is far away, not overloaded.
        for i in 0..20 {
            a.observe(at(i * 400), ms(300), false, 64, TARGET, true);
        }
        assert!(a.window() > 64, "the window grew: {}", a.window());
        assert!(a.room(at(8000)) > 0, "not paused");
        assert_eq!(
            a.batch_cap(4096, TARGET),
            4096,
            "no cost beyond the round trip"
        );
    }

    /// A cost learned while the store was slow (120 ms an operation) must
    /// come down once small batches come back fast: an engine holding six
    /// terms with 500 ms of operation timeout otherwise judged every
    /// renewal batch too late to send (732 ms expected), shed it, and
    /// never sent a batch of [`MIN_WINDOW`] again to learn from (seen to
    /// fail before: the cost stayed 120 ms).
    #[test]
    fn a_cost_learned_while_slow_comes_down_on_small_fast_batches() {
        let ms = Duration::from_millis;
        let mut a = Admission::new(64, 1 << 20);
        a.observe(at(0), ms(13), false, 1, TARGET, false);
        a.observe(at(1), ms(13 + 8 * 120), false, 8, TARGET, false);
        assert!(a.expected(6, 0) > ms(500), "{:?}", a.expected(6, 0));
        for i in 0..20 {
            a.observe(at(2 + i), ms(14), false, 2, TARGET, false);
        }
        assert!(
            a.expected(6, 0) < ms(100),
            "still expecting {:?} for 6 operations",
            a.expected(6, 0)
        );
        // A small batch that is slow (its round trip's noise) never raises
        // the cost.
        let before = a.expected(6, 0);
        a.observe(at(30), ms(400), false, 1, TARGET, false);
        assert_eq!(a.expected(6, 0), before);
    }

    #[test]
    fn the_batch_cap_recovers_after_one_slow_batch() {
        let ms = Duration::from_millis;
        let mut a = Admission::new(64, 1 << 20);
        a.observe(at(0), ms(5), false, 8, TARGET, false);
        // One batch of 40 held up for a second (a lock wait).
        a.observe(at(1), ms(1000), false, 40, TARGET, false);
        let low = a.batch_cap(4096, TARGET);
        for i in 0..200 {
            let n = a.batch_cap(4096, TARGET);
            a.observe(at(2 + i), ms(5), false, n, TARGET, false);
        }
        assert!(a.batch_cap(4096, TARGET) > low * 10, "stuck at {low}");
    }
}
