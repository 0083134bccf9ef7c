//! The election as a pure state machine: no I/O and no clock reads.
//!
//! Time and store replies come in as [`Input`]s with the current [`Now`];
//! decisions go out as [`Action`]s for the caller to carry out (the
//! [`Elector`](crate::Elector) in production, the simulator in `tenure-sim`).
//! After every step the caller asks [`Machine::next_wake`] when to tick next.
//!
//! At most one store operation is outstanding at a time; a reply carries the
//! [`OpId`] of its request and stale replies are ignored. The caller enforces
//! each operation's deadline and reports a miss as [`StoreError::Timeout`].
//! Every operation says what it is for ([`ReadPurpose`], [`WritePurpose`]),
//! so a caller never has to guess from the record.
//! The timing rules are explained in [`crate::config`].

use std::time::Duration;

use rand::rngs::StdRng;
use rand::SeedableRng;

use crate::clock::{MonoTime, Now};
use crate::config::Timing;
use crate::error::StoreError;
use crate::record::{Holder, LeaseRecord, Metadata, Version, Versioned};
use crate::store::CasOutcome;

#[cfg(test)]
mod tests;

mod candidate;
#[cfg(feature = "model")]
mod fingerprint;
mod io;
mod leader;
mod observation;
mod preempt;
mod release;
mod takeover;
mod timers;

use candidate::Standing;
pub use io::{Action, EndReason, Fault, Input, OpId, Phase, ReadPurpose, WritePurpose};
use leader::{Lead, Renewal, Written};
use observation::Observed;
use preempt::{Preempt, Withdraw};
use release::{After, Release};

/// The role, with what only that role holds.
#[derive(Clone, Debug, Hash)]
enum State {
    /// Standing (or waiting to): polling, watching the feed, acquiring.
    Candidate,
    /// Holding a term and renewing it.
    Leader(Lead),
    /// The term ended; its work is told to stop and the lease is kept
    /// until the work drains or the term's deadline passes.
    Draining {
        /// The ended term.
        lead: Lead,
        /// What follows the release: stand again, or stop.
        then: After,
        /// The work reported itself gone ([`Input::Drained`]).
        drained: bool,
        /// The candidate the release reserves the lease for, if any.
        successor: Option<String>,
    },
    /// Clearing this node from the record.
    Releasing(Release),
    /// Stopping: taking this candidate's preemption request out of the
    /// leader's record.
    Withdrawing(Withdraw),
    /// Stopped for good: every input is ignored.
    Stopped,
}

/// What the operation in flight is, so its reply is read for that.
#[derive(Clone, Debug, Hash)]
enum OpKind {
    /// A read, and what it is for.
    Read(ReadPurpose),
    /// A compare-and-swap, what it is for, and the record it writes.
    Write(WritePurpose, LeaseRecord),
    /// A leader's renewal, kept as what it changes in the term's record
    /// (see [`Renewal`]); made a [`OpKind::Write`] if the term ends while
    /// it is in flight.
    Renew(Renewal),
}

/// The store operation in flight.
#[derive(Clone, Debug, Hash)]
struct Pending {
    /// Its id; a reply carrying another is stale and ignored.
    id: OpId,
    /// What it is.
    kind: OpKind,
    /// When it was sent: a write's validity counts from here.
    sent: MonoTime,
}

/// A write's reply, with what judging it takes.
struct WriteReply {
    /// The record the write carried (stored, if it applied).
    record: LeaseRecord,
    /// When it was sent: its validity counts from here.
    sent: MonoTime,
    /// What the store answered.
    result: Result<CasOutcome, StoreError>,
}

/// The election state machine of one candidate.
///
/// With the `model` feature it is `Clone` and `Hash`, so a model checker
/// (`tenure-model`) can keep whole machines in its states and tell states
/// apart by their fingerprints.
#[derive(Debug)]
#[cfg_attr(feature = "model", derive(Clone))]
pub struct Machine {
    /// The validated timing rules (see [`crate::config`]).
    timing: Timing,
    /// Who this candidate is (id and process instance).
    me: Holder,
    /// What the next record this node writes publishes.
    metadata: Metadata,
    /// The retry jitter's source, seeded so a simulation replays.
    rng: StdRng,
    /// The role and what it holds.
    state: State,
    /// The one store operation in flight; a reply for any other is stale.
    op: Option<Pending>,
    /// The id the next operation gets.
    next_op: u64,
    /// What this node last knew of the record; `None` once that is
    /// unknown (a failed write, a resync) and a read must look again.
    observed: Option<Observed>,
    /// The term of the last held record this node saw, until it sees a
    /// released one. A held record that then reads as missing was lost by
    /// the store, not released: its holder may still be working, so it is
    /// waited out like the record itself.
    last_held_term: Option<Duration>,
    /// The candidate's own state: when it looks, until when it holds off,
    /// what its ended term and its writes leave it owing (see
    /// [`Standing`] for why it sits beside the role, not in it).
    stand: Standing,
    /// The latest instant the application showed it is alive.
    last_pulse: MonoTime,
    /// The other leader last reported with `LeaderChanged` (holder, token,
    /// metadata), so each change is reported once.
    reported: Option<(Holder, u64, Metadata)>,
    /// The highest token this node has seen in any record: a new term's
    /// token exceeds it even if the store lost its data meanwhile.
    max_token: u64,
    /// What the record the current (or last) term replaced published.
    predecessor: Metadata,
    /// The metadata changed since the last renewal was sent: renew now.
    metadata_dirty: bool,
    /// Candidate priority: when to ask a lower-priority leader to hand
    /// over; `None` when preemption is off.
    preempt: Option<Preempt>,
    /// Test-only mutation: anchor deadlines at the reply instead of the send
    /// (see [`Machine::anchor_deadlines_at_receive`]).
    anchor_at_receive: bool,
    /// A record this machine wrote, given back once sent
    /// ([`Machine::recycle`]): the next record it writes reuses its holder
    /// id's buffer and, where unchanged, its metadata. A buffer, not
    /// state: no decision reads it, and the fingerprint leaves it out.
    spare: Option<LeaseRecord>,
}

/// `next_read` when no poll is scheduled (the feed reports every write).
const NEVER: MonoTime = MonoTime::from_nanos(u64::MAX);

impl Machine {
    /// A candidate `me` with validated `timing`, publishing `metadata`.
    /// `seed` drives the retry jitter, so a simulation replays exactly.
    pub fn new(timing: Timing, me: Holder, metadata: Metadata, seed: u64, now: Now) -> Self {
        Machine {
            timing,
            me,
            metadata,
            rng: StdRng::seed_from_u64(seed),
            state: State::Candidate,
            op: None,
            next_op: 0,
            observed: None,
            last_held_term: None,
            stand: Standing::new(now.mono),
            last_pulse: now.mono,
            reported: None,
            max_token: 0,
            predecessor: Metadata::new(),
            metadata_dirty: false,
            preempt: None,
            anchor_at_receive: false,
            spare: None,
        }
    }

    /// A deliberately broken machine for negative controls: deadlines are
    /// anchored at the instant a write's reply is *received* instead of the
    /// instant it was sent, which the timing argument in [`crate::config`]
    /// forbids. The simulation's checker must catch the overlaps this
    /// causes; nothing else should call it.
    #[cfg(feature = "model")]
    #[doc(hidden)]
    pub fn anchor_deadlines_at_receive(&mut self) {
        self.anchor_at_receive = true;
    }

    /// Who this candidate is.
    pub fn holder(&self) -> &Holder {
        &self.me
    }

    /// The timing in force.
    pub fn timing(&self) -> &Timing {
        &self.timing
    }

    /// The current phase.
    pub fn phase(&self) -> Phase {
        match &self.state {
            State::Candidate => Phase::Candidate,
            State::Leader(l) => Phase::Leader { token: l.token },
            State::Draining { lead, .. } => Phase::Draining { token: lead.token },
            State::Releasing(_) | State::Withdrawing(_) => Phase::Releasing,
            State::Stopped => Phase::Stopped,
        }
    }

    /// What the record that the current (or last) term replaced published:
    /// the previous leader's metadata, or what a release carried forward
    /// (a periodic duty's last run). Empty if the term started on an empty
    /// store.
    pub fn predecessor(&self) -> &Metadata {
        &self.predecessor
    }

    /// When this leader's next renewal is scheduled, if one is (leading, no
    /// operation in flight). A caller batching many groups uses it to pull
    /// nearly-due renewals forward with [`Input::RenewEarly`].
    pub fn renew_due(&self) -> Option<MonoTime> {
        match &self.state {
            State::Leader(lead) if self.op.is_none() && !lead.verifying => Some(lead.next_renew),
            _ => None,
        }
    }

    /// When this candidate's next poll is scheduled, if one is (waiting, no
    /// operation in flight, not blocked); see [`Input::PollEarly`].
    pub fn poll_due(&self) -> Option<MonoTime> {
        match &self.state {
            State::Candidate if self.op.is_none() && self.stand.next_read != NEVER => {
                Some(self.stand.next_read.max(self.stand.blocked_until()))
            }
            _ => None,
        }
    }

    /// Feeds one input at `now` and returns what to do.
    pub fn step(&mut self, now: Now, input: Input) -> Vec<Action> {
        let mut out = Vec::new();
        self.step_into(now, input, &mut out);
        out
    }

    /// As [`step`](Self::step), appending what to do to `out`: a caller
    /// stepping many machines reuses one buffer instead of allocating one
    /// per step (the engine steps a leader twice per renewal).
    pub fn step_into(&mut self, now: Now, input: Input, out: &mut Vec<Action>) {
        if matches!(self.state, State::Stopped) {
            return;
        }
        match input {
            Input::Tick => {}
            Input::Pulse { at } => self.last_pulse = self.last_pulse.max(at),
            Input::Changed => {
                self.stand.reread = true;
                // Something may have been missed (a resync): what only the
                // feed showed can no longer be dated by its deliveries.
                if !self.observation_confirmed() {
                    self.observed = None;
                }
            }
            Input::ReadDone { op, result } => {
                if let Some(p) = self.take_op(op) {
                    if let OpKind::Read(purpose) = p.kind {
                        self.on_read(now, purpose, result, out);
                    }
                }
            }
            Input::CasDone { op, result } => {
                if let Some(p) = self.take_op(op) {
                    match p.kind {
                        OpKind::Write(purpose, record) => {
                            self.on_write(now, purpose, record, p.sent, result, out);
                        }
                        OpKind::Renew(renewal) => {
                            let written = Written::Renewal(renewal);
                            self.on_renew(now, written, p.sent, result, out);
                        }
                        OpKind::Read(_) => {}
                    }
                }
            }
            Input::Drained { token } => {
                if let State::Draining { lead, drained, .. } = &mut self.state {
                    if lead.token == token {
                        *drained = true;
                    }
                }
                if self.stand.ended.is_some_and(|(t, _)| t == token) {
                    self.stand.ended = None;
                }
            }
            Input::Observed { current } => self.on_observed(now, current, out),
            Input::Feed { live } => {
                self.stand.feed_live = live;
                // Up: what happened before it came up was not reported, so
                // look once. Down: resume polling at once.
                self.stand.reread = true;
            }
            Input::RenewEarly => {
                if let State::Leader(lead) = &mut self.state {
                    if self.op.is_none() && !lead.verifying {
                        lead.next_renew = lead.next_renew.min(now.mono);
                    }
                }
            }
            Input::PollEarly => {
                if matches!(self.state, State::Candidate) && self.op.is_none() {
                    self.stand.next_read = self.stand.next_read.min(now.mono);
                }
            }
            Input::TransferTo { to } => self.transfer(to, out),
            Input::SetMetadata { metadata } => {
                self.metadata = metadata;
                self.metadata_dirty = true;
            }
            Input::Resign => self.begin_drain(EndReason::Resigned, After::Stand, out),
            Input::Shutdown => self.shutdown(now, out),
        }
        self.advance(now, out);
    }

    /// When the caller should feed the next [`Input::Tick`], if ever. Never
    /// an instant at which a tick would change nothing: a caller that
    /// sleeps until it never spins.
    pub fn next_wake(&self, now: Now) -> Option<MonoTime> {
        let mut wake: Option<MonoTime> = None;
        let mut at = |t: MonoTime| wake = Some(wake.map_or(t, |w| w.min(t)));
        match &self.state {
            State::Candidate => {
                let blocked = self.stand.blocked_until();
                if blocked > now.mono {
                    at(blocked);
                } else if self.op.is_none() {
                    if self.stand.next_read != NEVER {
                        at(self.stand.next_read);
                    }
                    // A candidate that may not stand (no pulse) has nothing
                    // to do at the takeover instant, nor a request to make;
                    // waking there would spin.
                    if self.is_live(now) {
                        if let Some(t) = self.takeover_wake(now) {
                            at(t);
                        }
                        if let Some(t) = self.preempt_wake() {
                            at(t);
                        }
                    }
                }
            }
            State::Leader(lead) => {
                at(lead.deadline - self.timing.stop_grace);
                if self.op.is_none() {
                    at(lead.next_renew);
                }
                if let Some(t) = self.liveness_deadline() {
                    at(t);
                }
            }
            State::Draining { lead, .. } => at(lead.deadline),
            State::Releasing(r) => {
                if self.op.is_none() {
                    at(self.release_at(r));
                }
            }
            State::Withdrawing(w) => {
                if self.op.is_none() {
                    at(Self::withdraw_at(w));
                }
            }
            State::Stopped => {}
        }
        wake
    }

    fn take_op(&mut self, id: OpId) -> Option<Pending> {
        match &self.op {
            Some(p) if p.id == id => self.op.take(),
            _ => None,
        }
    }

    fn new_op(&mut self, kind: OpKind, now: Now) -> OpId {
        self.next_op += 1;
        let id = OpId(self.next_op);
        self.op = Some(Pending {
            id,
            kind,
            sent: now.mono,
        });
        id
    }

    fn read(&mut self, purpose: ReadPurpose, now: Now, deadline: MonoTime, out: &mut Vec<Action>) {
        let op = self.new_op(OpKind::Read(purpose), now);
        out.push(Action::Read {
            op,
            purpose,
            deadline,
        });
    }

    fn write(
        &mut self,
        purpose: WritePurpose,
        expected: Option<Version>,
        record: LeaseRecord,
        now: Now,
        deadline: MonoTime,
        out: &mut Vec<Action>,
    ) {
        let op = self.new_op(OpKind::Write(purpose, record.clone()), now);
        out.push(Action::Cas {
            op,
            purpose,
            expected,
            record,
            deadline,
        });
    }

    /// The record a write of this node's term `token` sends at `now`,
    /// built in the [`spare`](Machine::recycle) if there is one: a leader
    /// writes one per renewal, and copying its holder id (and metadata)
    /// into new allocations each time was a twentieth of what a renewal
    /// cost the engine at 100,000 groups.
    fn lease_record(&mut self, token: u64, now: Now) -> LeaseRecord {
        let (term, renewed_at) = (self.timing.term, now.wall);
        let expires_at = renewed_at + term;
        let Some(mut record) = self.spare.take() else {
            return LeaseRecord {
                holder: Some(self.me.clone()),
                token,
                term,
                renewed_at,
                expires_at,
                metadata: self.metadata.clone(),
            };
        };
        match &mut record.holder {
            Some(holder) => {
                holder.id.clone_from(&self.me.id);
                holder.incarnation = self.me.incarnation;
            }
            None => record.holder = Some(self.me.clone()),
        }
        if record.metadata != self.metadata {
            record.metadata.clone_from(&self.metadata);
        }
        record.token = token;
        record.term = term;
        record.renewed_at = renewed_at;
        record.expires_at = expires_at;
        record
    }

    /// Gives back a record this machine sent in a write, once the store is
    /// done with it: while it leads, its next renewal is built in the
    /// record's buffers (see `lease_record`); otherwise it is dropped (a
    /// candidate writes rarely, and 100,000 of them need not each keep a
    /// record). Pure reuse of memory: what is written does not change.
    pub(crate) fn recycle(&mut self, record: LeaseRecord) {
        if record.holder.is_some() && matches!(self.state, State::Leader(_)) {
            self.spare = Some(record);
        }
    }

    fn is_mine(&self, record: &LeaseRecord) -> bool {
        record.holder.as_ref() == Some(&self.me)
    }

    fn stop(&mut self, out: &mut Vec<Action>) {
        self.op = None;
        self.state = State::Stopped;
        out.push(Action::Stopped);
    }

    fn fail(&mut self, fault: Fault, out: &mut Vec<Action>) {
        out.push(Action::Failed { fault });
        self.stop(out);
    }

    fn on_read(
        &mut self,
        now: Now,
        purpose: ReadPurpose,
        result: Result<Option<Versioned>, StoreError>,
        out: &mut Vec<Action>,
    ) {
        match (&self.state, purpose) {
            (State::Candidate, _) => self.on_poll(now, result, out),
            (State::Leader(lead), ReadPurpose::Verify) if lead.verifying => {
                self.on_verify(now, lead.token, result, out)
            }
            (State::Releasing(_), ReadPurpose::Verify) => self.on_release_verify(now, result, out),
            (State::Withdrawing(_), _) => self.on_withdraw_read(now, result, out),
            _ => {}
        }
    }

    /// A record delivered by the change feed.
    fn on_observed(&mut self, now: Now, current: Versioned, out: &mut Vec<Action>) {
        match &self.state {
            State::Candidate => self.observe_from(now, Some(current), true, out),
            State::Leader(_) => self.on_delivery_while_leading(now, &current),
            // A release (and a withdrawal) verifies with reads of its own.
            State::Draining { .. }
            | State::Releasing(_)
            | State::Withdrawing(_)
            | State::Stopped => {}
        }
    }

    fn on_write(
        &mut self,
        now: Now,
        purpose: WritePurpose,
        record: LeaseRecord,
        sent: MonoTime,
        result: Result<CasOutcome, StoreError>,
        out: &mut Vec<Action>,
    ) {
        if let State::Releasing(_) = self.state {
            return self.on_release_write(now, purpose, result, out);
        }
        if let State::Withdrawing(_) = self.state {
            return self.on_withdraw_write(now, purpose, result, out);
        }
        let reply = || WriteReply {
            record,
            sent,
            result,
        };
        match purpose {
            WritePurpose::Acquire => self.on_acquire(now, reply(), out),
            WritePurpose::Renew => {
                let WriteReply {
                    record,
                    sent,
                    result,
                } = reply();
                self.on_renew(now, Written::Record(record), sent, result, out);
            }
            WritePurpose::Request => {
                let WriteReply { record, result, .. } = reply();
                self.on_request(now, record, result, out);
            }
            // A release is only ever in flight while releasing, a
            // withdrawal while withdrawing.
            WritePurpose::Release | WritePurpose::Withdraw => {}
        }
    }

    /// Timer-driven decisions, made after every input.
    fn advance(&mut self, now: Now, out: &mut Vec<Action>) {
        match &self.state {
            State::Stopped => {}
            State::Candidate => self.advance_candidate(now, out),
            State::Leader(_) => self.advance_leader(now, out),
            State::Draining { .. } => self.advance_draining(now, out),
            State::Releasing(_) => self.advance_releasing(now, out),
            State::Withdrawing(_) => self.advance_withdrawing(now, out),
        }
    }
}
