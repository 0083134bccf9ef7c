//! The candidate's room: polling the record, standing for the lease once
//! the takeover rule allows it, and what an acquisition's reply means.

use super::{Action, Fault, Lead, Machine, ReadPurpose, State, WritePurpose, WriteReply, NEVER};
use crate::clock::{MonoTime, Now};
use crate::error::StoreError;
use crate::record::Versioned;
use crate::store::CasOutcome;

/// A candidate's own state: when it looks at the record next, until when
/// it holds off, and what its last term and its writes leave it owing.
///
/// It sits on the machine beside the role, not inside `State::Candidate`
/// as a leader's [`Lead`] does, because the other roles set it for the
/// candidate that follows them: a term that ends notes when its work is
/// gone, a finished release holds the next stand off, a leader's renewal
/// that comes back after its term counts as a write of this node that
/// came too late, and the feed comes up or goes down whatever the role.
/// Kept apart from the role, none of that is lost at a change of role.
#[derive(Clone, Debug, Hash)]
pub(super) struct Standing {
    /// When a waiting candidate polls next ([`NEVER`] while the feed
    /// reports every write).
    pub(super) next_read: MonoTime,
    /// A look is owed at once (the feed came up, went down or resynced).
    pub(super) reread: bool,
    /// Until when a candidate backs off (a busy store, a write of unknown
    /// fate, a release just done).
    pub(super) hold_off_until: MonoTime,
    /// The last ended term's token and when its work must be gone; this
    /// node stands again only after that work is gone.
    pub(super) ended: Option<(u64, MonoTime)>,
    /// Writes of this node that failed or came back too late to use since
    /// it last led. Its own record is taken back at once only after the
    /// first: a node whose replies keep arriving late would otherwise
    /// rewrite the record forever and no one else would ever see it
    /// unchanged long enough to take over.
    pub(super) own_write_failures: u32,
    /// The store's change feed delivers this group's writes: no polling.
    pub(super) feed_live: bool,
    /// Busy answers in a row to this candidate's operations (at most 4),
    /// for its back-off.
    busy_streak: u32,
}

impl Standing {
    /// A candidate that may look at once (`now`) and owes nothing.
    pub(super) fn new(now: MonoTime) -> Standing {
        Standing {
            next_read: now,
            reread: false,
            hold_off_until: now,
            ended: None,
            own_write_failures: 0,
            feed_live: false,
            busy_streak: 0,
        }
    }

    /// Until when this candidate must not act: a back-off, or the ended
    /// term's work still winding down.
    pub(super) fn blocked_until(&self) -> MonoTime {
        self.hold_off_until
            .max(self.work_gone_at(self.hold_off_until))
    }

    /// When the last ended term's work is gone (or `otherwise` if it is
    /// already): until then this node neither stands nor releases, since
    /// either would let another candidate start while that work runs.
    pub(super) fn work_gone_at(&self, otherwise: MonoTime) -> MonoTime {
        self.ended.map_or(otherwise, |(_, t)| t)
    }

    /// What the poll delay is multiplied by after an operation that failed
    /// with `error` (or succeeded): doubled for each busy answer in a row,
    /// up to 8 times the delay after the fourth; any other answer starts
    /// over at 1.
    pub(super) fn busy_factor(&mut self, error: Option<&StoreError>) -> u32 {
        match error {
            Some(e) if e.not_applied() => {
                self.busy_streak = self.busy_streak.saturating_add(1).min(4);
                1 << (self.busy_streak - 1)
            }
            _ => {
                self.busy_streak = 0;
                1
            }
        }
    }
}

impl Machine {
    pub(super) fn advance_candidate(&mut self, now: Now, out: &mut Vec<Action>) {
        if self.op.is_some() || now.mono < self.stand.blocked_until() {
            return;
        }
        if self.is_live(now) && self.may_take(now) {
            if !self.observation_confirmed() {
                // Only the feed showed this record: read it before acting.
                let deadline = now.mono + self.timing.op_timeout;
                return self.read(ReadPurpose::Poll, now, deadline, out);
            }
            let Some(token) = self.next_token() else {
                let token = self.max_token;
                return self.fail(Fault::TokenExhausted { token }, out);
            };
            let expected = self
                .observed
                .as_ref()
                .and_then(|o| o.current.as_ref())
                .map(|v| v.version);
            let record = self.lease_record(token, now);
            let deadline = now.mono + self.timing.op_timeout;
            return self.write(WritePurpose::Acquire, expected, record, now, deadline, out);
        }
        if self.is_live(now) && self.advance_preempt(now, out) {
            return;
        }
        // A failed read leaves `observed` empty but moves `next_read`, so a
        // store that keeps failing is polled, not spun on.
        if self.stand.reread || now.mono >= self.stand.next_read {
            self.stand.reread = false;
            let deadline = now.mono + self.timing.op_timeout;
            self.read(ReadPurpose::Poll, now, deadline, out);
        }
    }

    pub(super) fn on_acquire(&mut self, now: Now, reply: WriteReply, out: &mut Vec<Action>) {
        let WriteReply {
            record,
            sent,
            result,
        } = reply;
        if !matches!(self.state, State::Candidate) {
            return;
        }
        match result {
            Ok(CasOutcome::Applied(version)) => {
                let deadline = self.anchor(sent, now) + self.timing.leader_validity;
                let token = record.token;
                let replaced = self
                    .observed
                    .as_ref()
                    .and_then(|o| o.current.as_ref())
                    .map(|v| v.record.metadata.clone())
                    .unwrap_or_default();
                self.observe_own(now, record.clone(), version);
                if now.mono >= deadline - self.timing.stop_grace {
                    // The reply came too late to use the term. The record is
                    // ours, so one fresh attempt may follow at once.
                    self.stand.own_write_failures = self.stand.own_write_failures.saturating_add(1);
                    return;
                }
                self.stand.own_write_failures = 0;
                self.preempt_elected();
                self.predecessor = replaced;
                self.reported = None;
                self.state = State::Leader(Lead {
                    token,
                    version,
                    record,
                    deadline,
                    next_renew: sent + self.timing.renew_interval,
                    verifying: false,
                });
                out.push(Action::Elected { token, deadline });
            }
            Ok(CasOutcome::Conflict) => {
                // Someone wrote first: what we saw is stale.
                self.observed = None;
                self.stand.next_read = now.mono;
            }
            Err(e) if e.not_applied() => {
                // Nothing was written (the store or the engine was busy):
                // what was known still holds; try again after a back-off.
                let delay = self.busy_backoff(&Err::<(), _>(e));
                self.stand.hold_off_until = now.mono + delay;
            }
            Err(_) => {
                // Unknown whether it applied: back off, then re-read.
                self.stand.own_write_failures = self.stand.own_write_failures.saturating_add(1);
                self.observed = None;
                let delay = self.poll_delay();
                self.stand.hold_off_until = now.mono + delay;
                self.stand.next_read = self.stand.hold_off_until;
            }
        }
    }

    /// A poll's reply: what the record shows, and when to look next.
    pub(super) fn on_poll(
        &mut self,
        now: Now,
        result: Result<Option<Versioned>, StoreError>,
        out: &mut Vec<Action>,
    ) {
        self.preempt_read_done(now);
        let delay = self.busy_backoff(&result);
        self.stand.next_read = match (&result, self.stand.feed_live) {
            // The feed reports every later write.
            (Ok(_), true) => NEVER,
            _ => now.mono + delay,
        };
        match result {
            Ok(current) => self.observe(now, current, out),
            // What only the feed showed cannot be confirmed now:
            // forget it, and look again at the next poll.
            Err(_) if !self.observation_confirmed() => self.observed = None,
            Err(_) => {}
        }
    }
}
