//! Candidate priority: a waiting candidate of higher priority than the
//! leader asks it to hand over.
//!
//! The request is the one an operator makes with `tenure release --to`:
//! the leader's own record rewritten with holder, token and expiry kept,
//! naming this candidate ([`TRANSFER_TO_KEY`]) and its priority
//! ([`TRANSFER_PRIORITY_KEY`]). It is a hint, never authority: the leader
//! reads its record, honours the request only if the priority named is
//! above its own, and then hands over through the transfer path (its work
//! drained, the lease released reserved for this candidate for one term).
//! Tokens rise and the stop-first rule holds as for any hand-over.
//!
//! Hysteresis: a candidate asks only once it has stood for the preemption
//! delay while one lower-priority leader's term went on, and again only a
//! delay after each request. A candidate that flaps (up for less than the
//! delay) never takes leadership by preemption, and equal priorities never
//! preempt each other.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::clock::{Clock, MonoTime};
use crate::error::StoreError;
use crate::record::{GroupName, PRIORITY_KEY, TRANSFER_PRIORITY_KEY, TRANSFER_TO_KEY};
use crate::role::{LeaderInfo, Role};
use crate::store::{CasOutcome, LeaseStore};

/// How many times a request is written again after a conflict (the leader
/// renews every third of its term, so the version read may be gone).
const ATTEMPTS: usize = 3;

/// What the preemption task needs.
pub(crate) struct Preemption {
    pub(crate) store: Arc<dyn LeaseStore>,
    pub(crate) group: GroupName,
    pub(crate) me: String,
    pub(crate) priority: u32,
    pub(crate) delay: Duration,
    /// The term: requests are at least a term apart, whatever the delay
    /// (a zero delay must not make a declined request a busy loop).
    pub(crate) term: Duration,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) role: watch::Receiver<Role>,
}

/// The priority a leader published; 0 without one (or if it is no
/// number).
fn priority_of(leader: &LeaderInfo) -> u32 {
    leader
        .metadata
        .get(PRIORITY_KEY)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0)
}

impl Preemption {
    /// Runs until the elector stops.
    pub(crate) async fn run(mut self) {
        // The lower-priority term this candidate waits under, and when it
        // asks (on this process's monotonic clock).
        let mut waiting: Option<((String, u64), MonoTime)> = None;
        loop {
            let lower = match &*self.role.borrow_and_update() {
                Role::Stopped => return,
                Role::Follower { leader }
                    if leader.candidate != self.me && priority_of(leader) < self.priority =>
                {
                    Some(leader.clone())
                }
                _ => None,
            };
            let now = self.clock.now().mono;
            waiting = match (lower.as_ref(), waiting) {
                (Some(l), Some((key, due))) if key == (l.candidate.clone(), l.token) => {
                    Some((key, due))
                }
                (Some(l), _) => Some(((l.candidate.clone(), l.token), now + self.delay)),
                (None, _) => None,
            };
            let due = waiting.as_ref().map(|(_, due)| *due);
            tokio::select! {
                changed = self.role.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
                () = sleep_until(&*self.clock, due) => {
                    if let Some(leader) = &lower {
                        match self.request(leader).await {
                            Ok(true) => tracing::info!(
                                group = %self.group,
                                leader = %leader.candidate,
                                priority = self.priority,
                                "asked the leader of lower priority to hand over"
                            ),
                            Ok(false) => {}
                            Err(e) => tracing::warn!(
                                group = %self.group,
                                error = %e,
                                "the preemption request was not written; asking again after the delay"
                            ),
                        }
                    }
                    // Whatever came of it, the next request waits another
                    // delay, and a term at least: a declined or lost
                    // request is not repeated in a loop.
                    let next = self.clock.now().mono + self.delay.max(self.term);
                    waiting = waiting.map(|(key, _)| (key, next));
                }
            }
        }
    }

    /// Writes the request into `leader`'s record, if it still holds the
    /// term seen and no request of at least this priority is there.
    /// Returns whether a request naming this candidate is in the record.
    async fn request(&self, leader: &LeaderInfo) -> Result<bool, StoreError> {
        for _ in 0..ATTEMPTS {
            let Some(current) = self.store.read(&self.group).await? else {
                return Ok(false);
            };
            let record = &current.record;
            if record.holder_id() != Some(leader.candidate.as_str())
                || record.token != leader.token
                || record.priority() >= self.priority
            {
                return Ok(false);
            }
            if let Some(to) = record.transfer_to() {
                if to == self.me {
                    return Ok(true);
                }
                // An operator's request, or another candidate's of at
                // least this priority, stays.
                let theirs = record
                    .metadata
                    .get(TRANSFER_PRIORITY_KEY)
                    .and_then(|p| p.parse::<u32>().ok());
                if theirs.is_none_or(|p| p >= self.priority) {
                    return Ok(false);
                }
            }
            let mut asked = record.clone();
            asked.metadata.insert(TRANSFER_TO_KEY, self.me.clone());
            asked
                .metadata
                .insert(TRANSFER_PRIORITY_KEY, self.priority.to_string());
            if asked.metadata.validate().is_err() {
                // The leader's metadata leaves no room for the request.
                return Ok(false);
            }
            match self
                .store
                .compare_and_swap(&self.group, Some(current.version), &asked)
                .await?
            {
                CasOutcome::Applied(_) => return Ok(true),
                CasOutcome::Conflict => {}
            }
        }
        Ok(false)
    }
}

async fn sleep_until(clock: &dyn Clock, at: Option<MonoTime>) {
    match at {
        Some(at) => clock.sleep_until(at).await,
        None => std::future::pending().await,
    }
}
