//! The tightest timing among the engine's groups: what its batches, its
//! feed and its reading of a late wake-up are bounded by.

use std::time::Duration;

use crate::config::Timing;

/// The shortest operation timeout, retry interval and renewal margin of
/// the groups that have joined (never loosened when a group leaves: a
/// bound a little tight for a while is safe, one too loose is not).
pub(super) struct Limits {
    /// The shortest operation timeout among the groups.
    op_timeout: Duration,
    /// The shortest retry interval among the groups that have joined.
    retry_min: Duration,
    /// The least time any group's renewal may go out after falling due and
    /// still have its whole operation timeout before the term's end (the
    /// leader's validity less the renew interval, the stop grace and the
    /// operation timeout): what a late wake-up of the engine eats into.
    renew_margin: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            op_timeout: Duration::MAX,
            retry_min: Duration::MAX,
            renew_margin: Duration::MAX,
        }
    }
}

impl Limits {
    /// A group of `timing` joined.
    pub(super) fn join(&mut self, timing: &Timing) {
        self.op_timeout = self.op_timeout.min(timing.op_timeout);
        self.retry_min = self.retry_min.min(timing.retry_interval);
        let spent = timing
            .renew_interval
            .saturating_add(timing.stop_grace)
            .saturating_add(timing.op_timeout);
        self.renew_margin = self
            .renew_margin
            .min(timing.leader_validity.saturating_sub(spent));
    }

    /// The shortest operation timeout among the groups.
    pub(super) fn op_timeout(&self) -> Duration {
        self.op_timeout
    }

    /// The batch latency the admission window aims under: a quarter of the
    /// shortest operation timeout (a batch that takes longer is
    /// congestion).
    pub(super) fn congestion(&self) -> Duration {
        self.op_timeout / 4
    }

    /// The least time any group's renewal may go out after falling due and
    /// still have its whole operation timeout before the term's end.
    pub(super) fn renew_margin(&self) -> Duration {
        self.renew_margin
    }

    /// The shortest retry interval among the groups that have joined (one
    /// second before any has), for re-subscribing and the feed check.
    pub(super) fn retry_interval(&self) -> Duration {
        if self.retry_min == Duration::MAX {
            Duration::from_secs(1)
        } else {
            self.retry_min
        }
    }
}
