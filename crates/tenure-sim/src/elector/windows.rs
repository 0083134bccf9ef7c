//! One process's view of the store ([`Faults`]), with its ordinary latency
//! and its windows of store trouble: a partition, slow operations, failing
//! operations, lost replies. Shared by the elector and sharded tiers.

use std::time::Duration;

use rand::Rng;
use tenure::Faults;

use crate::clock::SimTime;

use super::plan::Planned;

/// The kinds of store trouble that come in windows.
const KINDS: [Planned; 4] = [
    Planned::Partition,
    Planned::Slow,
    Planned::Failing,
    Planned::LostReplies,
];

/// How often each kind of store trouble opens a window on one process's
/// view of the store, in the elector and sharded tiers: mean intervals of
/// exponential distributions over all processes; `None` turns a kind off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreTroubleRates {
    /// A process is cut off from the store (its operations hang until they
    /// time out) for a while.
    pub partition_every: Option<Duration>,
    /// A process's store operations are slow, often past the operation
    /// timeout, for a while.
    pub slow_every: Option<Duration>,
    /// The store fails a process's operations for a while.
    pub failing_every: Option<Duration>,
    /// A process's writes apply but their replies are lost, for a while.
    pub lost_replies_every: Option<Duration>,
}

impl StoreTroubleRates {
    /// No store trouble at all.
    pub fn none() -> Self {
        StoreTroubleRates {
            partition_every: None,
            slow_every: None,
            failing_every: None,
            lost_replies_every: None,
        }
    }

    /// Every kind of window with its mean interval, in the order of
    /// [`KINDS`] (the order a run's plan draws them in).
    pub(crate) fn kinds(&self) -> [(Planned, Option<Duration>); 4] {
        [
            (Planned::Partition, self.partition_every),
            (Planned::Slow, self.slow_every),
            (Planned::Failing, self.failing_every),
            (Planned::LostReplies, self.lost_replies_every),
        ]
    }
}

/// One process's view of the store, and until when each kind of window
/// lasts on it.
pub(crate) struct StoreView {
    /// The view: the store as this process sees it.
    pub(crate) faults: Faults,
    /// Its ordinary latency, restored when a slow window closes.
    pub(crate) latency: Duration,
    until: [SimTime; 4],
}

impl StoreView {
    /// A new process's view, with an ordinary latency drawn from `rng`
    /// (1 ms up to `max`), sending change notifications if `notify`.
    pub(crate) fn new(rng: &mut impl Rng, max: Duration, notify: bool) -> StoreView {
        let max_ms = u64::try_from(max.as_millis()).unwrap_or(u64::MAX);
        let latency = Duration::from_millis(rng.gen_range(1..=max_ms));
        let faults = Faults::new();
        faults.set_latency(latency);
        faults.set_no_notifications(!notify);
        StoreView {
            faults,
            latency,
            until: [SimTime::default(); 4],
        }
    }

    /// Opens (or extends) a window of `kind` until `until` on the view of
    /// the process named `name`; `slow` is a slow operation's latency.
    /// Returns `false` if `kind` is not a window.
    pub(crate) fn open(
        &mut self,
        name: &str,
        kind: Planned,
        until: SimTime,
        slow: Duration,
    ) -> bool {
        let Some(i) = KINDS.iter().position(|&k| k == kind) else {
            return false;
        };
        self.until[i] = self.until[i].max(until);
        let faults = &self.faults;
        match kind {
            Planned::Partition => faults.partition(name),
            Planned::Slow => faults.set_latency(slow),
            Planned::Failing => faults.set_failing(true),
            Planned::LostReplies => faults.set_lose_replies(true),
            _ => {}
        }
        true
    }

    /// Closes the window of `kind` if it has run its course by `now` (a
    /// later window of the same kind may have extended it), restoring the
    /// ordinary latency. Returns whether it closed.
    pub(crate) fn close(&mut self, name: &str, kind: Planned, now: SimTime) -> bool {
        let Some(i) = KINDS.iter().position(|&k| k == kind) else {
            return false;
        };
        if now < self.until[i] {
            return false;
        }
        let faults = &self.faults;
        match kind {
            Planned::Partition => faults.heal(name),
            Planned::Slow => faults.set_latency(self.latency),
            Planned::Failing => faults.set_failing(false),
            Planned::LostReplies => faults.set_lose_replies(false),
            _ => {}
        }
        true
    }
}
