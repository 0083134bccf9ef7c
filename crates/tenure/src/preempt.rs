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
//! delay (and a term at least) after each request. A candidate that flaps
//! (up for less than the delay) never takes leadership by preemption, and
//! equal priorities never preempt each other. A candidate that could not
//! take the lease (its liveness pulse has lapsed) does not ask, and one
//! that stops withdraws its request if it is still in the record: a
//! request that nobody takes up costs the reservation (a term) with no
//! leader.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::clock::{Clock, MonoTime};
use crate::error::StoreError;
use crate::record::{GroupName, PRIORITY_KEY, TRANSFER_PRIORITY_KEY, TRANSFER_TO_KEY};
use crate::role::{LeaderInfo, Role};
use crate::store::{bounded, CasOutcome, LeaseStore};

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
    /// The bound on each store operation.
    pub(crate) op_timeout: Duration,
    /// How often a live leader renews: a record unchanged for longer is a
    /// dead (or cut off) leader's, and gets no request.
    pub(crate) renew_interval: Duration,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) role: watch::Receiver<Role>,
    /// Whether this candidate may take the lease now (its liveness pulse
    /// has not lapsed): one that may not must not ask for it.
    pub(crate) live: Box<dyn Fn() -> bool + Send + Sync>,
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
        // The term whose record holds this candidate's request, if one was
        // written and this candidate has not taken over since.
        let mut asked: Option<LeaderInfo> = None;
        loop {
            let role = self.role.borrow_and_update().clone();
            if !matches!(role, Role::Follower { .. }) {
                if let (Role::Stopped, Some(leader)) = (&role, asked.take()) {
                    self.withdraw(&leader).await;
                }
                asked = None;
            }
            let lower = match &role {
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
                    if let Some(leader) = lower.as_ref().filter(|_| (self.live)()) {
                        let request = self.request(leader);
                        let limit = self.renew_interval + self.op_timeout * 5;
                        match bounded(&*self.clock, limit, request).await {
                            Ok(true) => {
                                tracing::info!(
                                    group = %self.group,
                                    leader = %leader.candidate,
                                    priority = self.priority,
                                    "asked the leader of lower priority to hand over"
                                );
                                asked = Some(leader.clone());
                            }
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
    /// term seen, renews it (a write of the record's since this candidate
    /// first looked, within a renewal interval: a request written into a
    /// dead leader's record would make every follower's takeover wait
    /// start again) and no request of at least this priority is there.
    /// Returns whether a request naming this candidate is in the record.
    async fn request(&self, leader: &LeaderInfo) -> Result<bool, StoreError> {
        let Some(first) = self.store.read(&self.group).await? else {
            return Ok(false);
        };
        let look = self.clock.now().mono + self.renew_interval + self.op_timeout;
        self.clock.sleep_until(look).await;
        for _ in 0..ATTEMPTS {
            let Some(current) = self.store.read(&self.group).await? else {
                return Ok(false);
            };
            if current.version == first.version {
                // Not renewed for a renewal interval: not a live leader.
                return Ok(false);
            }
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
                tracing::warn!(
                    group = %self.group,
                    "the leader's metadata leaves no room for a preemption request; it is not asked"
                );
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

impl Preemption {
    /// Takes this candidate's request out of `leader`'s record if it is
    /// still there (this candidate stops, and would not take the lease
    /// reserved for it). Best effort: a request that stays costs one
    /// reservation.
    async fn withdraw(&self, leader: &LeaderInfo) {
        let attempt = async {
            for _ in 0..ATTEMPTS {
                let Some(current) = self.store.read(&self.group).await? else {
                    return Ok(());
                };
                let record = &current.record;
                if record.holder_id() != Some(leader.candidate.as_str())
                    || record.token != leader.token
                    || record.transfer_to() != Some(self.me.as_str())
                {
                    return Ok(());
                }
                let mut withdrawn = record.clone();
                withdrawn.metadata.remove(TRANSFER_TO_KEY);
                withdrawn.metadata.remove(TRANSFER_PRIORITY_KEY);
                if let CasOutcome::Applied(_) = self
                    .store
                    .compare_and_swap(&self.group, Some(current.version), &withdrawn)
                    .await?
                {
                    return Ok(());
                }
            }
            Ok::<(), StoreError>(())
        };
        if let Err(e) = bounded(&*self.clock, self.op_timeout * 4, attempt).await {
            tracing::warn!(group = %self.group, error = %e, "the preemption request could not be withdrawn");
        }
    }
}

async fn sleep_until(clock: &dyn Clock, at: Option<MonoTime>) {
    match at {
        Some(at) => clock.sleep_until(at).await,
        None => std::future::pending().await,
    }
}
