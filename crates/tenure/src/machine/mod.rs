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
//! The timing rules are explained in [`crate::config`].

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::clock::{MonoTime, Now};
use crate::config::Timing;
use crate::error::StoreError;
use crate::record::{Holder, LeaseRecord, Metadata, Version, Versioned};
use crate::store::CasOutcome;

#[cfg(test)]
mod tests;

/// Identifies one store operation requested by the machine.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct OpId(pub u64);

/// Something that happened: time passed, a store replied, the user asked.
#[derive(Debug)]
pub enum Input {
    /// Time passed; re-evaluate timers.
    Tick,
    /// The application showed it is alive at `at` (see
    /// [`Config::liveness_timeout`](crate::Config::liveness_timeout)).
    Pulse {
        /// When it pulsed, on this node's clock.
        at: MonoTime,
    },
    /// The store hinted that the record may have changed.
    Changed,
    /// A [`Action::Read`] finished.
    ReadDone {
        /// The request.
        op: OpId,
        /// The record, or why the read failed.
        result: Result<Option<Versioned>, StoreError>,
    },
    /// An [`Action::Cas`] finished.
    CasDone {
        /// The request.
        op: OpId,
        /// Whether it was applied, or why it failed.
        result: Result<CasOutcome, StoreError>,
    },
    /// All work of the term with this token has finished.
    Drained {
        /// The term's token.
        token: u64,
    },
    /// Give up leadership now, and stand again after a back-off.
    Resign,
    /// Drain, release and stop for good.
    Shutdown,
}

/// Why a term ended.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EndReason {
    /// The application resigned.
    Resigned,
    /// The elector is shutting down.
    Shutdown,
    /// The application stopped pulsing for longer than the liveness timeout.
    LivenessLost,
    /// Renewals kept failing until the term was about to end.
    RenewalFailed,
    /// A coordinated leader stopped hearing its own heartbeats (NELI's
    /// fence): it may be cut off, so it stops acting until they return.
    Fenced,
    /// A coordinator took the assignment that made this candidate leader.
    Revoked,
    /// Another write replaced the leader's record: another candidate (named,
    /// if any) took over, or an operator forced a release.
    Superseded {
        /// The new holder, if the record is held.
        by: Option<String>,
    },
}

impl std::fmt::Display for EndReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EndReason::Resigned => f.write_str("resigned"),
            EndReason::Shutdown => f.write_str("shutdown"),
            EndReason::LivenessLost => f.write_str("liveness lost"),
            EndReason::RenewalFailed => f.write_str("renewal failed"),
            EndReason::Fenced => f.write_str("fenced: own heartbeats stopped returning"),
            EndReason::Revoked => f.write_str("assignment revoked"),
            EndReason::Superseded { by: Some(by) } => write!(f, "superseded by {by}"),
            EndReason::Superseded { by: None } => f.write_str("released by another writer"),
        }
    }
}

impl EndReason {
    /// A short label for metrics.
    pub fn label(&self) -> &'static str {
        match self {
            EndReason::Resigned => "resigned",
            EndReason::Shutdown => "shutdown",
            EndReason::LivenessLost => "liveness_lost",
            EndReason::RenewalFailed => "renewal_failed",
            EndReason::Fenced => "fenced",
            EndReason::Revoked => "revoked",
            EndReason::Superseded { .. } => "superseded",
        }
    }
}

/// A decision for the caller to carry out.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Read the record; report [`Input::ReadDone`] by `deadline`.
    Read {
        /// The request.
        op: OpId,
        /// Report a timeout if no reply came by then.
        deadline: MonoTime,
    },
    /// Compare-and-swap; report [`Input::CasDone`] by `deadline`.
    Cas {
        /// The request.
        op: OpId,
        /// The version the store must still have.
        expected: Option<Version>,
        /// The record to write.
        record: LeaseRecord,
        /// Report a timeout if no reply came by then.
        deadline: MonoTime,
    },
    /// This candidate leads, with this token, until `deadline` unless renewed.
    Elected {
        /// The fencing token.
        token: u64,
        /// The term's deadline on this node's clock.
        deadline: MonoTime,
    },
    /// The term was renewed.
    Renewed {
        /// The fencing token (unchanged).
        token: u64,
        /// The new deadline.
        deadline: MonoTime,
        /// Time from sending the renewal to its reply.
        latency: Duration,
    },
    /// The term is ending: tell the work to stop now. It must be gone by
    /// `work_deadline`, which never lies past the term's deadline.
    EndTerm {
        /// The term's token.
        token: u64,
        /// Why.
        reason: EndReason,
        /// When the work must be gone.
        work_deadline: MonoTime,
    },
    /// Another candidate leads now (`Some`), or nobody visibly does (`None`).
    LeaderChanged {
        /// The leader's record.
        leader: Option<Versioned>,
    },
    /// The machine stopped for good.
    Stopped,
}

#[derive(Clone, Debug)]
struct Observed {
    current: Option<Versioned>,
    /// When this node first saw `current`'s version (reply receipt).
    since: MonoTime,
}

#[derive(Clone, Debug)]
struct Lead {
    token: u64,
    version: Version,
    record: LeaseRecord,
    deadline: MonoTime,
    next_renew: MonoTime,
    /// A renewal conflicted; a read is checking whether it was our own
    /// earlier write that applied after its reply was lost.
    verifying: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum After {
    Stand,
    Stop,
}

#[derive(Clone, Debug)]
enum State {
    Candidate,
    Leader(Lead),
    Draining {
        lead: Lead,
        then: After,
        drained: bool,
        /// A renewal in flight conflicted: the record is not ours to release.
        lost: bool,
    },
    Releasing {
        then: After,
    },
    Stopped,
}

#[derive(Clone, Debug)]
enum OpKind {
    Read,
    Acquire(LeaseRecord),
    Renew(LeaseRecord),
    Release(LeaseRecord),
}

#[derive(Clone, Debug)]
struct Pending {
    id: OpId,
    kind: OpKind,
    sent: MonoTime,
}

/// The role as the machine sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Standing, not leading.
    Candidate,
    /// Leading with this token.
    Leader {
        /// The fencing token.
        token: u64,
    },
    /// The term ended; draining the work, then releasing.
    Draining {
        /// The fencing token.
        token: u64,
    },
    /// Releasing the lease.
    Releasing,
    /// Stopped for good.
    Stopped,
}

/// The election state machine of one candidate.
#[derive(Debug)]
pub struct Machine {
    timing: Timing,
    me: Holder,
    metadata: Metadata,
    rng: StdRng,
    state: State,
    op: Option<Pending>,
    next_op: u64,
    observed: Option<Observed>,
    next_read: MonoTime,
    reread: bool,
    hold_off_until: MonoTime,
    /// The last ended term's token and when its work must be gone; this
    /// node stands again only after that work is gone.
    ended: Option<(u64, MonoTime)>,
    last_pulse: MonoTime,
    reported: Option<(Holder, u64)>,
    /// The highest token this node has seen in any record: a new term's
    /// token exceeds it even if the store lost its data meanwhile.
    max_token: u64,
}

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
            next_read: now.mono,
            reread: false,
            hold_off_until: now.mono,
            ended: None,
            last_pulse: now.mono,
            reported: None,
            max_token: 0,
        }
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
            State::Releasing { .. } => Phase::Releasing,
            State::Stopped => Phase::Stopped,
        }
    }

    /// Feeds one input at `now` and returns what to do.
    pub fn step(&mut self, now: Now, input: Input) -> Vec<Action> {
        let mut out = Vec::new();
        if matches!(self.state, State::Stopped) {
            return out;
        }
        match input {
            Input::Tick => {}
            Input::Pulse { at } => self.last_pulse = self.last_pulse.max(at),
            Input::Changed => self.reread = true,
            Input::ReadDone { op, result } => {
                if let Some(p) = self.take_op(op) {
                    let _ = p;
                    self.on_read(now, result, &mut out);
                }
            }
            Input::CasDone { op, result } => {
                if let Some(p) = self.take_op(op) {
                    self.on_cas(now, p, result, &mut out);
                }
            }
            Input::Drained { token } => {
                if let State::Draining { lead, drained, .. } = &mut self.state {
                    if lead.token == token {
                        *drained = true;
                    }
                }
                if self.ended.is_some_and(|(t, _)| t == token) {
                    self.ended = None;
                }
            }
            Input::Resign => self.begin_drain(EndReason::Resigned, After::Stand, &mut out),
            Input::Shutdown => self.shutdown(&mut out),
        }
        self.advance(now, &mut out);
        out
    }

    /// When the caller should feed the next [`Input::Tick`], if ever.
    pub fn next_wake(&self, now: Now) -> Option<MonoTime> {
        let mut wake: Option<MonoTime> = None;
        let mut at = |t: MonoTime| wake = Some(wake.map_or(t, |w| w.min(t)));
        match &self.state {
            State::Candidate => {
                let blocked = self.blocked_until();
                if blocked > now.mono {
                    at(blocked);
                } else if self.op.is_none() {
                    at(self.next_read);
                    // A candidate that may not stand (no pulse) has nothing
                    // to do at the takeover instant; waking there would spin.
                    if self.is_live(now) {
                        if let Some(t) = self.takeover_instant(now) {
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
            State::Releasing { .. } | State::Stopped => {}
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

    fn poll_delay(&mut self) -> Duration {
        let jitter = u64::try_from(self.timing.retry_jitter.as_nanos()).unwrap_or(u64::MAX);
        self.timing.retry_interval + Duration::from_nanos(self.rng.gen_range(0..=jitter))
    }

    fn leader_retry(&self) -> Duration {
        (self.timing.retry_interval / 2).max(Duration::from_millis(1))
    }

    /// Until when this candidate must not act: a back-off, or the ended
    /// term's work still winding down.
    fn blocked_until(&self) -> MonoTime {
        let work = self.ended.map_or(self.hold_off_until, |(_, t)| t);
        self.hold_off_until.max(work)
    }

    fn is_live(&self, now: Now) -> bool {
        self.liveness_deadline().is_none_or(|t| now.mono < t)
    }

    fn liveness_deadline(&self) -> Option<MonoTime> {
        self.timing.liveness_timeout.map(|t| self.last_pulse + t)
    }

    fn is_mine(&self, record: &LeaseRecord) -> bool {
        record.holder.as_ref() == Some(&self.me)
    }

    /// When the observed record may be taken over, if it is held by another.
    fn takeover_instant(&self, now: Now) -> Option<MonoTime> {
        let obs = self.observed.as_ref()?;
        let v = obs.current.as_ref()?;
        let rec = &v.record;
        rec.holder.as_ref()?;
        let mut t = obs.since + self.timing.takeover_wait(rec.term);
        if let Some(skew) = self.timing.max_clock_skew {
            let wall_ok = rec.expires_at + skew;
            let wait_ms = wall_ok.as_millis().saturating_sub(now.wall.as_millis());
            t = t.min(now.mono + Duration::from_millis(wait_ms) + Duration::from_millis(1));
        }
        Some(t)
    }

    /// Whether the observed record may be taken over right now.
    fn may_acquire(&self, now: Now) -> Option<(Option<Version>, u64)> {
        let obs = self.observed.as_ref()?;
        let Some(v) = &obs.current else {
            return Some((None, self.max_token.checked_add(1)?));
        };
        let rec = &v.record;
        let next_token = rec.token.max(self.max_token).checked_add(1)?;
        let free = match &rec.holder {
            None => true,
            Some(_) if self.is_mine(rec) => true,
            Some(_) => {
                let waited = now.mono >= obs.since + self.timing.takeover_wait(rec.term);
                let wall_expired = self
                    .timing
                    .max_clock_skew
                    .is_some_and(|skew| now.wall > rec.expires_at + skew);
                waited || wall_expired
            }
        };
        free.then_some((Some(v.version), next_token))
    }

    fn lease_record(&self, token: u64, now: Now) -> LeaseRecord {
        LeaseRecord {
            holder: Some(self.me.clone()),
            token,
            term: self.timing.term,
            renewed_at: now.wall,
            expires_at: now.wall + self.timing.term,
            metadata: self.metadata.clone(),
        }
    }

    fn observe(&mut self, now: Now, current: Option<Versioned>, out: &mut Vec<Action>) {
        if let Some(v) = &current {
            self.max_token = self.max_token.max(v.record.token);
        }
        let same = self.observed.as_ref().is_some_and(|o| {
            o.current.as_ref().map(|v| v.version) == current.as_ref().map(|v| v.version)
        });
        if !same {
            self.observed = Some(Observed {
                current,
                since: now.mono,
            });
        }
        self.report_leader(out);
    }

    /// Emits `LeaderChanged` when the visible leader (another holder) changes.
    fn report_leader(&mut self, out: &mut Vec<Action>) {
        let visible = self
            .observed
            .as_ref()
            .and_then(|o| o.current.as_ref())
            .filter(|v| v.record.holder.is_some() && !self.is_mine(&v.record));
        let key = visible.and_then(|v| v.record.holder.clone().map(|h| (h, v.record.token)));
        if key != self.reported {
            self.reported = key;
            out.push(Action::LeaderChanged {
                leader: visible.cloned(),
            });
        }
    }

    /// Ends a term. Its work must be gone by `work_deadline`; this node
    /// stands again only once that work has drained or `old_deadline` (the
    /// term's own deadline) has passed, so two of its terms never overlap,
    /// even when the work is cut short because the lease was taken.
    fn end_term(
        &mut self,
        token: u64,
        reason: EndReason,
        work_deadline: MonoTime,
        old_deadline: MonoTime,
        out: &mut Vec<Action>,
    ) {
        self.ended = Some((token, old_deadline.max(work_deadline)));
        out.push(Action::EndTerm {
            token,
            reason,
            work_deadline,
        });
    }

    fn begin_drain(&mut self, reason: EndReason, then: After, out: &mut Vec<Action>) {
        let State::Leader(lead) = &self.state else {
            return;
        };
        let lead = lead.clone();
        let deadline = lead.deadline;
        self.end_term(lead.token, reason, deadline, deadline, out);
        self.state = State::Draining {
            lead,
            then,
            drained: false,
            lost: false,
        };
    }

    fn shutdown(&mut self, out: &mut Vec<Action>) {
        match &mut self.state {
            State::Candidate => {
                self.op = None;
                self.state = State::Stopped;
                out.push(Action::Stopped);
            }
            State::Leader(_) => self.begin_drain(EndReason::Shutdown, After::Stop, out),
            State::Draining { then, .. } | State::Releasing { then } => *then = After::Stop,
            State::Stopped => {}
        }
    }

    fn on_read(
        &mut self,
        now: Now,
        result: Result<Option<Versioned>, StoreError>,
        out: &mut Vec<Action>,
    ) {
        match &self.state {
            State::Candidate => {
                let delay = self.poll_delay();
                self.next_read = now.mono + delay;
                if let Ok(current) = result {
                    self.observe(now, current, out);
                }
            }
            State::Leader(lead) if lead.verifying => self.on_verify(now, lead.token, result, out),
            _ => {}
        }
    }

    /// A renewal conflicted and this read tells whether the record is still
    /// ours (an earlier renewal applied after its reply was lost) or taken.
    fn on_verify(
        &mut self,
        now: Now,
        token: u64,
        result: Result<Option<Versioned>, StoreError>,
        out: &mut Vec<Action>,
    ) {
        let retry = self.leader_retry();
        let old_deadline = match &self.state {
            State::Leader(lead) => lead.deadline,
            _ => now.mono,
        };
        match result {
            Ok(Some(v)) if self.is_mine(&v.record) && v.record.token == token => {
                if let State::Leader(lead) = &mut self.state {
                    lead.version = v.version;
                    lead.record = v.record;
                    lead.verifying = false;
                    lead.next_renew = now.mono;
                }
            }
            Ok(current) => {
                let by = current
                    .as_ref()
                    .and_then(|v| v.record.holder_id().map(str::to_owned));
                self.end_term(
                    token,
                    EndReason::Superseded { by },
                    now.mono,
                    old_deadline,
                    out,
                );
                self.state = State::Candidate;
                self.reported = None;
                let delay = self.poll_delay();
                self.next_read = now.mono + delay;
                self.observe(now, current, out);
            }
            Err(_) => {
                if let State::Leader(lead) = &mut self.state {
                    lead.next_renew = now.mono + retry;
                }
            }
        }
    }

    fn on_cas(
        &mut self,
        now: Now,
        p: Pending,
        result: Result<CasOutcome, StoreError>,
        out: &mut Vec<Action>,
    ) {
        match p.kind {
            OpKind::Read => {}
            OpKind::Acquire(record) => {
                if !matches!(self.state, State::Candidate) {
                    return;
                }
                match result {
                    Ok(CasOutcome::Applied(version)) => {
                        let deadline = p.sent + self.timing.leader_validity;
                        let versioned = Versioned {
                            record: record.clone(),
                            version,
                        };
                        if now.mono >= deadline - self.timing.stop_grace {
                            // The reply came too late to use the term; the
                            // record is ours, so a fresh attempt may follow.
                            self.observed = Some(Observed {
                                current: Some(versioned),
                                since: now.mono,
                            });
                            return;
                        }
                        self.observed = Some(Observed {
                            current: Some(versioned),
                            since: now.mono,
                        });
                        self.reported = None;
                        let token = record.token;
                        self.max_token = self.max_token.max(token);
                        self.state = State::Leader(Lead {
                            token,
                            version,
                            record,
                            deadline,
                            next_renew: p.sent + self.timing.renew_interval,
                            verifying: false,
                        });
                        out.push(Action::Elected { token, deadline });
                    }
                    Ok(CasOutcome::Conflict) => {
                        // Someone wrote first: what we saw is stale.
                        self.observed = None;
                        self.next_read = now.mono;
                    }
                    Err(_) => {
                        // Unknown whether it applied: back off, then re-read.
                        self.observed = None;
                        let delay = self.poll_delay();
                        self.hold_off_until = now.mono + delay;
                        self.next_read = self.hold_off_until;
                    }
                }
            }
            OpKind::Renew(record) => {
                let retry = self.leader_retry();
                match &mut self.state {
                    State::Leader(lead) => match result {
                        Ok(CasOutcome::Applied(version)) => {
                            lead.version = version;
                            lead.record = record;
                            lead.deadline = lead.deadline.max(p.sent + self.timing.leader_validity);
                            lead.next_renew = p.sent + self.timing.renew_interval;
                            out.push(Action::Renewed {
                                token: lead.token,
                                deadline: lead.deadline,
                                latency: now.mono.saturating_since(p.sent),
                            });
                        }
                        Ok(CasOutcome::Conflict) => {
                            lead.verifying = true;
                            lead.next_renew = now.mono;
                        }
                        Err(_) => lead.next_renew = now.mono + retry,
                    },
                    State::Draining { lead, lost, .. } => match result {
                        Ok(CasOutcome::Applied(version)) => {
                            lead.version = version;
                            lead.record = record;
                        }
                        Ok(CasOutcome::Conflict) => *lost = true,
                        Err(_) => {}
                    },
                    State::Candidate => match result {
                        Ok(CasOutcome::Applied(version)) => {
                            // A renewal that outlived its term still wrote our
                            // record; it is ours to take again.
                            self.observed = Some(Observed {
                                current: Some(Versioned { record, version }),
                                since: now.mono,
                            });
                        }
                        _ => self.next_read = now.mono,
                    },
                    _ => {}
                }
            }
            OpKind::Release(record) => {
                if let State::Releasing { then } = self.state {
                    let released = match result {
                        Ok(CasOutcome::Applied(version)) => Some(Versioned { record, version }),
                        _ => None,
                    };
                    self.finish_release(now, then, released, out);
                }
            }
        }
    }

    fn finish_release(
        &mut self,
        now: Now,
        then: After,
        released: Option<Versioned>,
        out: &mut Vec<Action>,
    ) {
        match then {
            After::Stop => {
                self.state = State::Stopped;
                self.op = None;
                out.push(Action::Stopped);
            }
            After::Stand => {
                self.state = State::Candidate;
                self.reported = None;
                // Give polling peers one full poll period to see the release
                // before this node stands again.
                let hold = self.timing.retry_interval + self.timing.retry_jitter;
                self.hold_off_until = now.mono + hold;
                self.next_read = self.hold_off_until;
                self.observed = released.map(|v| Observed {
                    current: Some(v),
                    since: now.mono,
                });
            }
        }
    }

    /// Timer-driven decisions, made after every input.
    fn advance(&mut self, now: Now, out: &mut Vec<Action>) {
        match &self.state {
            State::Stopped | State::Releasing { .. } => {}
            State::Candidate => self.advance_candidate(now, out),
            State::Leader(_) => self.advance_leader(now, out),
            State::Draining { .. } => self.advance_draining(now, out),
        }
    }

    fn advance_candidate(&mut self, now: Now, out: &mut Vec<Action>) {
        if self.op.is_some() || now.mono < self.blocked_until() {
            return;
        }
        if self.is_live(now) {
            if let Some((expected, token)) = self.may_acquire(now) {
                let record = self.lease_record(token, now);
                let op = self.new_op(OpKind::Acquire(record.clone()), now);
                out.push(Action::Cas {
                    op,
                    expected,
                    record,
                    deadline: now.mono + self.timing.op_timeout,
                });
                return;
            }
        }
        // A failed read leaves `observed` empty but moves `next_read`, so a
        // store that keeps failing is polled, not spun on.
        if self.reread || now.mono >= self.next_read {
            self.reread = false;
            let op = self.new_op(OpKind::Read, now);
            out.push(Action::Read {
                op,
                deadline: now.mono + self.timing.op_timeout,
            });
        }
    }

    fn advance_leader(&mut self, now: Now, out: &mut Vec<Action>) {
        let State::Leader(lead) = &self.state else {
            return;
        };
        let (token, deadline, version) = (lead.token, lead.deadline, lead.version);
        let (next_renew, verifying) = (lead.next_renew, lead.verifying);
        if now.mono >= deadline - self.timing.stop_grace {
            let last = Versioned {
                record: lead.record.clone(),
                version,
            };
            self.end_term(token, EndReason::RenewalFailed, deadline, deadline, out);
            self.state = State::Candidate;
            self.observed = Some(Observed {
                current: Some(last),
                since: now.mono,
            });
            self.next_read = now.mono;
            return;
        }
        if !self.is_live(now) {
            self.begin_drain(EndReason::LivenessLost, After::Stand, out);
            return self.advance_draining(now, out);
        }
        if self.op.is_some() || now.mono < next_renew {
            return;
        }
        let op_deadline = (now.mono + self.timing.op_timeout).min(deadline);
        if verifying {
            let op = self.new_op(OpKind::Read, now);
            out.push(Action::Read {
                op,
                deadline: op_deadline,
            });
        } else {
            let record = self.lease_record(token, now);
            let op = self.new_op(OpKind::Renew(record.clone()), now);
            out.push(Action::Cas {
                op,
                expected: Some(version),
                record,
                deadline: op_deadline,
            });
        }
    }

    fn advance_draining(&mut self, now: Now, out: &mut Vec<Action>) {
        let State::Draining {
            lead,
            then,
            drained,
            lost,
        } = &self.state
        else {
            return;
        };
        if !(*drained || now.mono >= lead.deadline) || self.op.is_some() {
            return;
        }
        let then = *then;
        if *lost {
            self.finish_release(now, then, None, out);
            return;
        }
        let record = LeaseRecord {
            holder: None,
            token: lead.token,
            term: lead.record.term,
            renewed_at: now.wall,
            expires_at: now.wall,
            metadata: Metadata::new(),
        };
        let expected = Some(lead.version);
        self.state = State::Releasing { then };
        let op = self.new_op(OpKind::Release(record.clone()), now);
        out.push(Action::Cas {
            op,
            expected,
            record,
            deadline: now.mono + self.timing.op_timeout,
        });
    }
}
