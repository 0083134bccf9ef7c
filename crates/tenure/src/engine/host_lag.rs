//! How late the engine has lately run its own timers: the host's share of
//! a batch's latency, which is no evidence about the store.

use std::time::Duration;

use crate::clock::MonoTime;

/// How long a lag of the engine behind its own timers counts as the host's.
const HOST_LAG_MEMORY: Duration = Duration::from_secs(1);

/// The largest lag of the engine behind its own timers in the last
/// [`HOST_LAG_MEMORY`].
pub(super) struct HostLag {
    lag: Duration,
    noted_at: MonoTime,
}

impl HostLag {
    /// No lag yet, as of `now`.
    pub(super) fn new(now: MonoTime) -> HostLag {
        HostLag {
            lag: Duration::ZERO,
            noted_at: now,
        }
    }

    /// Notes that the engine ran `lag` behind its own timers at `now`: the
    /// largest lag of the last [`HOST_LAG_MEMORY`] is kept.
    pub(super) fn note(&mut self, now: MonoTime, lag: Duration) {
        if lag >= self.lag || now >= self.noted_at + HOST_LAG_MEMORY {
            self.lag = lag;
            self.noted_at = now;
        }
    }

    /// The share of a batch's latency at `now` that the host, not the
    /// store, may have caused: how late the engine ran its own timers
    /// lately. On a host whose CPU others take, the reply to a batch lands
    /// (is read, parsed, and its task run) as late as the engine's own
    /// wake-ups, and that wait is no evidence about the store: the
    /// admission window judges the store by the latency less this lag.
    pub(super) fn at(&self, now: MonoTime) -> Duration {
        if now < self.noted_at + HOST_LAG_MEMORY {
            self.lag
        } else {
            Duration::ZERO
        }
    }
}
