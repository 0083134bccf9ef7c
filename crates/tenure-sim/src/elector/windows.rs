//! Windows of store trouble on one process's view of the store
//! ([`Faults`]): a partition, slow operations, failing operations, lost
//! replies. Shared by the elector and sharded tiers.

use std::time::Duration;

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

/// Until when each kind of window lasts on one process's view of the store.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Windows {
    until: [SimTime; 4],
}

impl Windows {
    /// Opens (or extends) a window of `kind` until `until` on `faults`, the
    /// view of the process named `name`; `slow` is a slow operation's
    /// latency. Returns `false` if `kind` is not a window.
    pub(crate) fn open(
        &mut self,
        faults: &Faults,
        name: &str,
        kind: Planned,
        until: SimTime,
        slow: Duration,
    ) -> bool {
        let Some(i) = KINDS.iter().position(|&k| k == kind) else {
            return false;
        };
        self.until[i] = self.until[i].max(until);
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
    /// ordinary `latency`. Returns whether it closed.
    pub(crate) fn close(
        &mut self,
        faults: &Faults,
        name: &str,
        kind: Planned,
        now: SimTime,
        latency: Duration,
    ) -> bool {
        let Some(i) = KINDS.iter().position(|&k| k == kind) else {
            return false;
        };
        if now < self.until[i] {
            return false;
        }
        match kind {
            Planned::Partition => faults.heal(name),
            Planned::Slow => faults.set_latency(latency),
            Planned::Failing => faults.set_failing(false),
            Planned::LostReplies => faults.set_lose_replies(false),
            _ => {}
        }
        true
    }
}
