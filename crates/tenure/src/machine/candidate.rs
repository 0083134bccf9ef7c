//! The candidate's room: polling the record, standing for the lease once
//! the takeover rule allows it, and what an acquisition's reply means.

use super::{Action, Fault, Lead, Machine, ReadPurpose, State, WritePurpose, WriteReply, NEVER};
use crate::clock::Now;
use crate::error::StoreError;
use crate::record::Versioned;
use crate::store::CasOutcome;

impl Machine {
    pub(super) fn advance_candidate(&mut self, now: Now, out: &mut Vec<Action>) {
        if self.op.is_some() || now.mono < self.blocked_until() {
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
        if self.reread || now.mono >= self.next_read {
            self.reread = false;
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
                    self.own_write_failures = self.own_write_failures.saturating_add(1);
                    return;
                }
                self.own_write_failures = 0;
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
                self.next_read = now.mono;
            }
            Err(e) if e.not_applied() => {
                // Nothing was written (the store or the engine was busy):
                // what was known still holds; try again after a back-off.
                let delay = self.busy_backoff(&Err::<(), _>(e));
                self.hold_off_until = now.mono + delay;
            }
            Err(_) => {
                // Unknown whether it applied: back off, then re-read.
                self.own_write_failures = self.own_write_failures.saturating_add(1);
                self.observed = None;
                let delay = self.poll_delay();
                self.hold_off_until = now.mono + delay;
                self.next_read = self.hold_off_until;
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
        self.next_read = match (&result, self.feed_live) {
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
