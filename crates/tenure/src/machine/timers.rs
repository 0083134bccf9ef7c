//! How long the machine waits: the poll interval with its jitter, the
//! back-off after busy answers, a leader's retries, where a write's
//! validity counts from, and the blocks (a back-off, an ended term's work,
//! a missing pulse) that keep a candidate from acting.

use std::time::Duration;

use rand::Rng;

use super::Machine;
use crate::clock::{MonoTime, Now};
use crate::error::StoreError;

impl Machine {
    pub(super) fn poll_delay(&mut self) -> Duration {
        let jitter = u64::try_from(self.timing.retry_jitter.as_nanos()).unwrap_or(u64::MAX);
        if jitter == 0 {
            // Nothing to draw: the generator stays where it is, so machines
            // without jitter differ only in what they did.
            return self.timing.retry_interval;
        }
        self.timing.retry_interval + Duration::from_nanos(self.rng.gen_range(0..=jitter))
    }

    /// The poll delay after a candidate's operation came back with
    /// `result`: doubled for each busy answer in a row, up to eight times
    /// the delay, so that candidates the store (or the engine's admission)
    /// keeps turning away come back less and less often instead of as a
    /// steady storm; any other answer starts over.
    pub(super) fn busy_backoff<T>(&mut self, result: &Result<T, StoreError>) -> Duration {
        let delay = self.poll_delay();
        delay.saturating_mul(self.stand.busy_factor(result.as_ref().err()))
    }

    /// How soon a leader retries a failed renewal (or release): half the
    /// retry interval, but never more than half the renew interval, so a
    /// long poll interval (chosen to poll less) still leaves a leader
    /// several tries before its term must stop.
    pub(super) fn leader_retry(&self) -> Duration {
        (self.timing.retry_interval / 2)
            .min(self.timing.renew_interval / 2)
            .max(Duration::from_millis(1))
    }

    /// [`leader_retry`](Self::leader_retry) with up to a quarter more drawn
    /// at random (within the retry jitter), for a failed renewal: the
    /// leaders of many groups whose renewals failed together (a store that
    /// stalled) spread their retries instead of arriving as one burst.
    pub(super) fn renewal_retry(&mut self) -> Duration {
        let retry = self.leader_retry();
        let spread = (retry / 4).min(self.timing.retry_jitter);
        let spread = u64::try_from(spread.as_nanos()).unwrap_or(u64::MAX);
        if spread == 0 {
            return retry;
        }
        retry + Duration::from_nanos(self.rng.gen_range(0..=spread))
    }

    /// Where a write's validity counts from: its send (the rule), or its
    /// reply under the test-only mutation.
    pub(super) fn anchor(&self, sent: MonoTime, now: Now) -> MonoTime {
        if self.anchor_at_receive {
            now.mono
        } else {
            sent
        }
    }

    pub(super) fn is_live(&self, now: Now) -> bool {
        self.liveness_deadline().is_none_or(|t| now.mono < t)
    }

    pub(super) fn liveness_deadline(&self) -> Option<MonoTime> {
        self.timing.liveness_timeout.map(|t| self.last_pulse + t)
    }
}
