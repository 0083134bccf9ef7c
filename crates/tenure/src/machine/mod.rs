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
use rand::{Rng, SeedableRng};

use crate::clock::{MonoTime, Now};
use crate::config::Timing;
use crate::error::StoreError;
use crate::record::{
    Holder, LeaseRecord, Metadata, Version, Versioned, DUTY_PREFIX, TRANSFER_TO_KEY,
};
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
        /// The operation this replies to; a reply to any other is ignored.
        op: OpId,
        /// The record, or why the read failed.
        result: Result<Option<Versioned>, StoreError>,
    },
    /// An [`Action::Cas`] finished.
    CasDone {
        /// The operation this replies to; a reply to any other is ignored.
        op: OpId,
        /// Whether it was applied, or why it failed.
        result: Result<CasOutcome, StoreError>,
    },
    /// All work of the term with this token has finished.
    Drained {
        /// The term's token.
        token: u64,
    },
    /// The store's change feed delivered the group's record. It is a hint,
    /// never authority (anyone who may publish on the feed can forge one):
    /// it may make a candidate wait (a renewal seen) or look (a release
    /// seen), but an acquisition, the token it chooses and a refusal to
    /// stand wait for a read that shows the same record, and a leader ends
    /// its term or hands over only on what a read shows.
    Observed {
        /// The record and its version.
        current: Versioned,
    },
    /// The store's change feed is up (`true`) or down (`false`). While it
    /// is up a waiting candidate learns of every write from it and does not
    /// poll; the takeover instant still wakes it.
    Feed {
        /// Whether the feed delivers the group's writes.
        live: bool,
    },
    /// Renew now if leading and a renewal is scheduled, even before its
    /// time: a caller batching the renewals of many groups pulls nearly-due
    /// ones forward. Never unsafe: a renewal sent earlier anchors an
    /// earlier, never a later, deadline.
    RenewEarly,
    /// Poll now if waiting and a poll is scheduled, even before its time
    /// (as [`Input::RenewEarly`], for reads).
    PollEarly,
    /// Hand the lease to the candidate with this id: drain the work, then
    /// release the lease reserved for that candidate for one term (after
    /// which anyone may take it). Ignored when not leading.
    TransferTo {
        /// The successor's candidate id.
        to: String,
    },
    /// Publish this metadata from now on; a leader writes it at once.
    SetMetadata {
        /// The new metadata (checked by the caller).
        metadata: Metadata,
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
    /// The backend failed for good (see [`Fault`]).
    Failed,
    /// The lease was handed to the named candidate.
    Transferred {
        /// The successor.
        to: String,
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
            EndReason::Failed => f.write_str("the backend failed for good"),
            EndReason::Transferred { to } => write!(f, "handed over to {to}"),
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
            EndReason::Failed => "failed",
            EndReason::Transferred { .. } => "transferred",
        }
    }
}

/// Why a read is made.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum ReadPurpose {
    /// A candidate looks at the record (a poll, or after a change hint).
    Poll,
    /// A write's outcome is unknown or conflicted: is the record still this
    /// node's (its own earlier write applied after the reply was lost), or
    /// did another writer take it?
    Verify,
}

impl ReadPurpose {
    /// A short label for logs and metrics.
    pub fn label(self) -> &'static str {
        match self {
            ReadPurpose::Poll => "read",
            ReadPurpose::Verify => "verify",
        }
    }
}

/// Why a compare-and-swap is made.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum WritePurpose {
    /// Start a new term with a raised token.
    Acquire,
    /// Extend the current term, keeping its token.
    Renew,
    /// Clear the holder, keeping the token, so the next candidate can take
    /// over at once.
    Release,
}

impl WritePurpose {
    /// A short label for logs and metrics.
    pub fn label(self) -> &'static str {
        match self {
            WritePurpose::Acquire => "acquire",
            WritePurpose::Renew => "renew",
            WritePurpose::Release => "release",
        }
    }
}

/// A condition under which this candidate can never lead again in the group.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// The group's fencing token has reached `u64::MAX`, so no new term can
    /// get a greater one.
    TokenExhausted {
        /// The highest token seen.
        token: u64,
    },
    /// The store's tokens went backwards: the next term would get `next`
    /// although `highest` may already have been handed out, because the
    /// store lost or replaced its state (a deleted and recreated Kafka
    /// leader topic, a restored database). Resources that remember
    /// `highest` would refuse every new leader, and fencing no longer
    /// orders the terms.
    TokenRegressed {
        /// The highest token that may have been handed out.
        highest: u64,
        /// The token the store offers now.
        next: u64,
    },
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::TokenExhausted { token } => write!(
                f,
                "token space exhausted: the group's fencing token is {token} and cannot rise; the group needs a new name"
            ),
            Fault::TokenRegressed { highest, next } => write!(
                f,
                "the store's tokens went backwards (to {next}, after {highest} may have been handed out): its data was deleted, recreated or restored; fencing cannot hold, so this candidate stopped. Move the group to a fresh name, or restore the store, before standing again"
            ),
        }
    }
}

/// A decision for the caller to carry out.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Read the record; report [`Input::ReadDone`] by `deadline`.
    Read {
        /// Echoed in the reply.
        op: OpId,
        /// Why the record is read.
        purpose: ReadPurpose,
        /// Report a timeout if no reply came by then.
        deadline: MonoTime,
    },
    /// Compare-and-swap; report [`Input::CasDone`] by `deadline`.
    Cas {
        /// Echoed in the reply.
        op: OpId,
        /// What the write does to the lease.
        purpose: WritePurpose,
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
        /// Why the term ends, for the work and the logs.
        reason: EndReason,
        /// When the work must be gone.
        work_deadline: MonoTime,
    },
    /// Another candidate leads now (`Some`), or nobody visibly does
    /// (`None`), or the leader published new metadata.
    LeaderChanged {
        /// The leader's record.
        leader: Option<Versioned>,
    },
    /// This candidate can never lead in this group again; [`Action::Stopped`]
    /// follows.
    Failed {
        /// What makes leading impossible.
        fault: Fault,
    },
    /// The machine stopped for good.
    Stopped,
}

#[derive(Clone, Debug, Hash)]
struct Observed {
    current: Option<Versioned>,
    /// When this node first saw `current`'s version (reply receipt).
    since: MonoTime,
    /// Whether a read (or this node's own write) showed `current`. A
    /// record that only the change feed delivered is a hint: it may make
    /// the candidate wait or look, but an acquisition, the token it
    /// chooses and a refusal to stand all wait for a read that shows the
    /// same record (a forged feed message could name any version, token
    /// or holder).
    confirmed: bool,
}

#[derive(Clone, Debug, Hash)]
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

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum After {
    Stand,
    Stop,
}

/// Clearing this node's holder from the record, retried until it is done,
/// the record turns out not to be ours, or `until` passes.
#[derive(Clone, Debug, Hash)]
struct Release {
    then: After,
    /// Only a record with this node as holder and this token is ours to
    /// clear; anything else is left alone.
    token: u64,
    /// The term written into the released record.
    term: Duration,
    /// The candidate the released record reserves the lease for.
    successor: Option<String>,
    /// Reserved metadata the release carries forward to the next term (a
    /// periodic duty's last run).
    carried: Metadata,
    /// The version to clear; `None` until a verifying read finds it.
    version: Option<Version>,
    /// The next attempt, after a failed one.
    retry_at: MonoTime,
    /// When to give up (the lease then lapses on its own).
    until: MonoTime,
}

#[derive(Clone, Debug, Hash)]
enum State {
    Candidate,
    Leader(Lead),
    Draining {
        lead: Lead,
        then: After,
        drained: bool,
        /// The candidate the release reserves the lease for, if any.
        successor: Option<String>,
    },
    Releasing(Release),
    Stopped,
}

#[derive(Clone, Debug, Hash)]
enum OpKind {
    Read(ReadPurpose),
    Write(WritePurpose, LeaseRecord),
}

#[derive(Clone, Debug, Hash)]
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
///
/// With the `testkit` feature it is `Clone` and `Hash`, so a model checker
/// (`tenure-model`) can keep whole machines in its states and tell states
/// apart by their fingerprints.
#[derive(Debug)]
#[cfg_attr(feature = "testkit", derive(Clone))]
pub struct Machine {
    timing: Timing,
    me: Holder,
    metadata: Metadata,
    rng: StdRng,
    state: State,
    op: Option<Pending>,
    next_op: u64,
    observed: Option<Observed>,
    /// The term of the last held record this node saw, until it sees a
    /// released one. A held record that then reads as missing was lost by
    /// the store, not released: its holder may still be working, so it is
    /// waited out like the record itself.
    last_held_term: Option<Duration>,
    next_read: MonoTime,
    reread: bool,
    hold_off_until: MonoTime,
    /// The last ended term's token and when its work must be gone; this
    /// node stands again only after that work is gone.
    ended: Option<(u64, MonoTime)>,
    last_pulse: MonoTime,
    reported: Option<(Holder, u64, Metadata)>,
    /// The highest token this node has seen in any record: a new term's
    /// token exceeds it even if the store lost its data meanwhile.
    max_token: u64,
    /// Writes of this node that failed or came back too late to use since
    /// it last led. Its own record is taken back at once only after the
    /// first: a node whose replies keep arriving late would otherwise
    /// rewrite the record forever and no one else would ever see it
    /// unchanged long enough to take over.
    own_write_failures: u32,
    /// The store's change feed delivers this group's writes: no polling.
    feed_live: bool,
    /// Busy answers in a row to this candidate's operations (at most 4),
    /// for its back-off.
    busy_streak: u32,
    /// What the record the current (or last) term replaced published.
    predecessor: Metadata,
    /// The metadata changed since the last renewal was sent: renew now.
    metadata_dirty: bool,
    /// Test-only mutation: anchor deadlines at the reply instead of the send
    /// (see [`Machine::anchor_deadlines_at_receive`]).
    anchor_at_receive: bool,
}

/// The reserved metadata a release carries forward to the next term: what
/// must survive a hand-over (a periodic duty's last run), not the leader's
/// own address or a transfer's successor.
fn carried_forward(metadata: &Metadata) -> Metadata {
    metadata
        .iter()
        .filter(|(k, _)| k.starts_with(DUTY_PREFIX))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// `next_read` when no poll is scheduled (the feed reports every write).
const NEVER: MonoTime = MonoTime::from_nanos(u64::MAX);

/// Every field that decides what the machine does next, so two machines
/// that hash alike behave alike. The timing is left out (a model runs all
/// its machines with one), and the random generator enters as its next
/// output: a fingerprint of its position in the stream, since `StdRng`
/// offers no `Hash`; with zero jitter it is never drawn from, so it is
/// left out too.
#[cfg(feature = "testkit")]
impl std::hash::Hash for Machine {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        use rand::RngCore;
        // Destructured, so that a new field cannot be forgotten here.
        let Machine {
            timing: _,
            me,
            metadata,
            rng,
            state,
            op,
            next_op,
            observed,
            last_held_term,
            next_read,
            reread,
            hold_off_until,
            ended,
            last_pulse,
            reported,
            max_token,
            own_write_failures,
            feed_live,
            busy_streak,
            predecessor,
            metadata_dirty,
            anchor_at_receive,
        } = self;
        me.hash(h);
        metadata.hash(h);
        if !self.timing.retry_jitter.is_zero() {
            rng.clone().next_u64().hash(h);
        }
        state.hash(h);
        op.hash(h);
        next_op.hash(h);
        observed.hash(h);
        last_held_term.hash(h);
        next_read.hash(h);
        reread.hash(h);
        hold_off_until.hash(h);
        ended.hash(h);
        last_pulse.hash(h);
        reported.hash(h);
        max_token.hash(h);
        own_write_failures.hash(h);
        feed_live.hash(h);
        busy_streak.hash(h);
        predecessor.hash(h);
        metadata_dirty.hash(h);
        anchor_at_receive.hash(h);
    }
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
            last_held_term: None,
            next_read: now.mono,
            reread: false,
            hold_off_until: now.mono,
            ended: None,
            last_pulse: now.mono,
            reported: None,
            max_token: 0,
            own_write_failures: 0,
            feed_live: false,
            busy_streak: 0,
            predecessor: Metadata::new(),
            metadata_dirty: false,
            anchor_at_receive: false,
        }
    }

    /// A deliberately broken machine for negative controls: deadlines are
    /// anchored at the instant a write's reply is *received* instead of the
    /// instant it was sent, which the timing argument in [`crate::config`]
    /// forbids. The simulation's checker must catch the overlaps this
    /// causes; nothing else should call it.
    #[cfg(feature = "testkit")]
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
            State::Releasing(_) => Phase::Releasing,
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
            State::Candidate if self.op.is_none() && self.next_read != NEVER => {
                Some(self.next_read.max(self.blocked_until()))
            }
            _ => None,
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
            Input::Changed => {
                self.reread = true;
                // Something may have been missed (a resync): what only the
                // feed showed can no longer be dated by its deliveries.
                if !self.observation_confirmed() {
                    self.observed = None;
                }
            }
            Input::ReadDone { op, result } => {
                if let Some(p) = self.take_op(op) {
                    if let OpKind::Read(purpose) = p.kind {
                        self.on_read(now, purpose, result, &mut out);
                    }
                }
            }
            Input::CasDone { op, result } => {
                if let Some(p) = self.take_op(op) {
                    if let OpKind::Write(purpose, record) = p.kind {
                        self.on_write(now, purpose, record, p.sent, result, &mut out);
                    }
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
            Input::Observed { current } => self.on_observed(now, current, &mut out),
            Input::Feed { live } => {
                self.feed_live = live;
                // Up: what happened before it came up was not reported, so
                // look once. Down: resume polling at once.
                self.reread = true;
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
                    self.next_read = self.next_read.min(now.mono);
                }
            }
            Input::TransferTo { to } => self.transfer(to, &mut out),
            Input::SetMetadata { metadata } => {
                self.metadata = metadata;
                self.metadata_dirty = true;
            }
            Input::Resign => self.begin_drain(EndReason::Resigned, After::Stand, &mut out),
            Input::Shutdown => self.shutdown(now, &mut out),
        }
        self.advance(now, &mut out);
        out
    }

    /// When the caller should feed the next [`Input::Tick`], if ever. Never
    /// an instant at which a tick would change nothing: a caller that
    /// sleeps until it never spins.
    pub fn next_wake(&self, now: Now) -> Option<MonoTime> {
        let mut wake: Option<MonoTime> = None;
        let mut at = |t: MonoTime| wake = Some(wake.map_or(t, |w| w.min(t)));
        match &self.state {
            State::Candidate => {
                let blocked = self.blocked_until();
                if blocked > now.mono {
                    at(blocked);
                } else if self.op.is_none() {
                    if self.next_read != NEVER {
                        at(self.next_read);
                    }
                    // A candidate that may not stand (no pulse) has nothing
                    // to do at the takeover instant; waking there would spin.
                    if self.is_live(now) {
                        if let Some(t) = self.takeover_wake(now) {
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

    fn poll_delay(&mut self) -> Duration {
        let jitter = u64::try_from(self.timing.retry_jitter.as_nanos()).unwrap_or(u64::MAX);
        if jitter == 0 {
            // Nothing to draw: the generator stays where it is, so machines
            // without jitter differ only in what they did.
            return self.timing.retry_interval;
        }
        self.timing.retry_interval + Duration::from_nanos(self.rng.gen_range(0..=jitter))
    }

    /// The poll delay after a candidate's operation came back with
    /// `result`: doubled for each busy answer in a row, up to 16 times, so
    /// that candidates the store (or the engine's admission) keeps turning
    /// away come back less and less often instead of as a steady storm;
    /// any other answer starts over.
    fn busy_backoff<T>(&mut self, result: &Result<T, StoreError>) -> Duration {
        let delay = self.poll_delay();
        match result {
            Err(e) if e.not_applied() => {
                self.busy_streak = self.busy_streak.saturating_add(1).min(4);
                delay.saturating_mul(1 << (self.busy_streak - 1))
            }
            _ => {
                self.busy_streak = 0;
                delay
            }
        }
    }

    /// How soon a leader retries a failed renewal (or release): half the
    /// retry interval, but never more than half the renew interval, so a
    /// long poll interval (chosen to poll less) still leaves a leader
    /// several tries before its term must stop.
    fn leader_retry(&self) -> Duration {
        (self.timing.retry_interval / 2)
            .min(self.timing.renew_interval / 2)
            .max(Duration::from_millis(1))
    }

    /// [`leader_retry`](Self::leader_retry) with up to a quarter more drawn
    /// at random (within the retry jitter), for a failed renewal: the
    /// leaders of many groups whose renewals failed together (a store that
    /// stalled) spread their retries instead of arriving as one burst.
    fn renewal_retry(&mut self) -> Duration {
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
    fn anchor(&self, sent: MonoTime, now: Now) -> MonoTime {
        if self.anchor_at_receive {
            now.mono
        } else {
            sent
        }
    }

    /// Until when this candidate must not act: a back-off, or the ended
    /// term's work still winding down.
    fn blocked_until(&self) -> MonoTime {
        self.hold_off_until
            .max(self.work_gone_at(self.hold_off_until))
    }

    /// When the last ended term's work is gone (or `otherwise` if it is
    /// already): until then this node neither stands nor releases, since
    /// either would let another candidate start while that work runs.
    fn work_gone_at(&self, otherwise: MonoTime) -> MonoTime {
        self.ended.map_or(otherwise, |(_, t)| t)
    }

    /// When a release may go out: once asked to, and once the ended term's
    /// work is gone; never later than the point of giving up.
    fn release_at(&self, r: &Release) -> MonoTime {
        r.retry_at.max(self.work_gone_at(r.retry_at)).min(r.until)
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

    /// The token a new term would get: above the record's and every token
    /// this node has seen. `None` once that cannot rise any more.
    fn next_token(&self) -> Option<u64> {
        let stored = self
            .observed
            .as_ref()
            .and_then(|o| o.current.as_ref())
            .map_or(0, |v| v.record.token);
        stored.max(self.max_token).checked_add(1)
    }

    /// The instant from which the observed record may be taken over by the
    /// monotonic rule; `None` without a usable observation.
    fn free_at(&self) -> Option<MonoTime> {
        let obs = self.observed.as_ref()?;
        let Some(v) = &obs.current else {
            // Nothing stored. If a held record was seen before, the store
            // lost it: its holder may still be working, so wait it out.
            return Some(match self.last_held_term {
                Some(term) => obs.since + self.timing.takeover_wait(term),
                None => obs.since,
            });
        };
        let rec = &v.record;
        if rec.holder.is_none() {
            return Some(match rec.transfer_to() {
                // Reserved for another candidate: waited out like a held
                // record, then anyone may take it.
                Some(to) if to != self.me.id => obs.since + self.timing.takeover_wait(rec.term),
                _ => obs.since,
            });
        }
        if self.is_mine(rec) && self.own_write_failures <= 1 {
            return Some(obs.since);
        }
        Some(obs.since + self.timing.takeover_wait(rec.term))
    }

    /// The observed held record, if the optional early takeover by the wall
    /// clock applies to it.
    fn wall_candidate(&self) -> Option<&LeaseRecord> {
        self.timing.max_clock_skew?;
        let v = self.observed.as_ref()?.current.as_ref()?;
        v.record.holder.as_ref()?;
        Some(&v.record)
    }

    /// Whether the record's wall-clock expiry lies more than the skew bound
    /// in the past (the optional early takeover; see [`crate::config`]).
    fn wall_expired(&self, now: Now) -> bool {
        match (self.wall_candidate(), self.timing.max_clock_skew) {
            (Some(rec), Some(skew)) => now.wall > rec.expires_at + skew,
            _ => false,
        }
    }

    /// When to wake for a takeover: the monotonic rule, or earlier, the
    /// first whole millisecond after the wall-clock expiry plus the skew
    /// bound, as the wall clock advances with the monotonic one; `now` once
    /// the wall clock is past it. (A wake "one millisecond on" from there
    /// would recede each time it is asked for, so a caller that asks again
    /// before ticking would never take over by the wall clock.)
    fn takeover_wake(&self, now: Now) -> Option<MonoTime> {
        let rule = self.free_at()?;
        if self.wall_expired(now) {
            return Some(now.mono);
        }
        let wall = self
            .wall_candidate()
            .zip(self.timing.max_clock_skew)
            .map(|(rec, skew)| {
                let wall_ok = (rec.expires_at + skew).as_millis();
                let wait_ms = wall_ok.saturating_sub(now.wall.as_millis());
                now.mono + Duration::from_millis(wait_ms) + Duration::from_millis(1)
            });
        Some(wall.map_or(rule, |w| w.min(rule)))
    }

    /// Whether what this node last observed was shown by a read (or its
    /// own write), not only by the change feed.
    fn observation_confirmed(&self) -> bool {
        self.observed.as_ref().is_none_or(|o| o.confirmed)
    }

    /// Whether the observed record may be taken over right now.
    fn may_take(&self, now: Now) -> bool {
        self.free_at().is_some_and(|t| now.mono >= t) || self.wall_expired(now)
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

    /// Records what a reply showed. The observation's anchor moves only when
    /// the version changes: an unchanged version has been unchanged since it
    /// was first seen.
    fn observe(&mut self, now: Now, current: Option<Versioned>, out: &mut Vec<Action>) {
        self.observe_from(now, current, false, out);
    }

    /// Records an observation. A feed's report of a version older than one
    /// already seen is a late report and is dropped; a read's reply is
    /// always taken in, a lower version then being a store whose versions
    /// restarted (it lost its data), and a new sighting. An observation is
    /// the same as the last only if version *and* record match: a restarted
    /// store can reach an old version number again with another record.
    fn observe_from(
        &mut self,
        now: Now,
        current: Option<Versioned>,
        from_feed: bool,
        out: &mut Vec<Action>,
    ) {
        // Lateness is judged against what a read showed: a forged record
        // with the highest version must not make every genuine one look
        // late.
        let confirmed = self
            .observed
            .as_ref()
            .filter(|o| o.confirmed)
            .and_then(|o| o.current.as_ref());
        if let (true, Some(seen), Some(v)) = (from_feed, confirmed, &current) {
            if v.version < seen.version {
                return;
            }
        }
        // Only a read (never a hint) raises the token floor or says how
        // long a lost record's holder may still work.
        if let (false, Some(v)) = (from_feed, &current) {
            self.max_token = self.max_token.max(v.record.token);
            self.last_held_term = v.record.holder.as_ref().map(|_| v.record.term);
        }
        match &mut self.observed {
            // The feed delivered the same record again: what only the feed
            // showed counts from its latest delivery, so that a copy
            // published ahead of the real write (a forger who guessed it)
            // cannot move the takeover earlier than the real write's own
            // delivery.
            Some(o) if from_feed && !o.confirmed && o.current.as_ref() == current.as_ref() => {
                o.since = now.mono;
            }
            Some(o) if o.current.as_ref() == current.as_ref() => o.confirmed |= !from_feed,
            _ => {
                self.observed = Some(Observed {
                    current,
                    since: now.mono,
                    confirmed: !from_feed,
                });
            }
        }
        self.report_leader(out);
    }

    /// Records this node's own write, seen at `now`.
    fn observe_own(&mut self, now: Now, record: LeaseRecord, version: Version) {
        self.max_token = self.max_token.max(record.token);
        self.last_held_term = Some(record.term);
        self.observed = Some(Observed {
            current: Some(Versioned { record, version }),
            since: now.mono,
            confirmed: true,
        });
    }

    /// Emits `LeaderChanged` when the visible leader (another holder) changes.
    fn report_leader(&mut self, out: &mut Vec<Action>) {
        let visible = self
            .observed
            .as_ref()
            .and_then(|o| o.current.as_ref())
            .filter(|v| v.record.holder.is_some() && !self.is_mine(&v.record));
        // Metadata counts too: a leader that publishes a new address is news
        // for everyone who follows it.
        let key = visible.and_then(|v| {
            v.record
                .holder
                .clone()
                .map(|h| (h, v.record.token, v.record.metadata.clone()))
        });
        if key != self.reported {
            self.reported = key;
            out.push(Action::LeaderChanged {
                leader: visible.cloned(),
            });
        }
    }

    /// Ends a term. Its work must be gone by `work_deadline` (never after
    /// the term's own deadline); this node stands again only once that work
    /// has drained or `old_deadline` has passed, so two of its terms never
    /// overlap, even when the work is cut short because the lease was taken.
    fn end_term(
        &mut self,
        token: u64,
        reason: EndReason,
        work_deadline: MonoTime,
        old_deadline: MonoTime,
        out: &mut Vec<Action>,
    ) {
        let work_deadline = work_deadline.min(old_deadline);
        self.ended = Some((token, old_deadline));
        out.push(Action::EndTerm {
            token,
            reason,
            work_deadline,
        });
    }

    fn begin_drain(&mut self, reason: EndReason, then: After, out: &mut Vec<Action>) {
        self.drain_to(reason, then, None, out);
    }

    fn drain_to(
        &mut self,
        reason: EndReason,
        then: After,
        successor: Option<String>,
        out: &mut Vec<Action>,
    ) {
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
            successor,
        };
    }

    /// Hands the lease to `to`: drain, then a release reserved for it.
    fn transfer(&mut self, to: String, out: &mut Vec<Action>) {
        if to == self.me.id {
            return; // Handing the lease to oneself changes nothing.
        }
        let reason = EndReason::Transferred { to: to.clone() };
        self.drain_to(reason, After::Stand, Some(to), out);
    }

    fn shutdown(&mut self, now: Now, out: &mut Vec<Action>) {
        match &mut self.state {
            State::Candidate => {
                // A write in flight may apply after this node has gone and
                // leave the lease held for a whole crash fail-over: wait for
                // it, and release what it wrote.
                let in_flight = match self.op.as_ref().map(|p| &p.kind) {
                    Some(OpKind::Write(_, record)) => Some((record.token, record.term)),
                    _ => None,
                };
                match in_flight {
                    Some((token, term)) => {
                        self.state = State::Releasing(Release {
                            then: After::Stop,
                            token,
                            term,
                            successor: None,
                            carried: Metadata::new(),
                            version: None,
                            retry_at: now.mono,
                            until: now.mono + self.timing.op_timeout * 2,
                        });
                    }
                    None => self.stop(out),
                }
            }
            State::Leader(_) => self.begin_drain(EndReason::Shutdown, After::Stop, out),
            State::Draining { then, .. } => *then = After::Stop,
            State::Releasing(r) => r.then = After::Stop,
            State::Stopped => {}
        }
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
            (State::Candidate, _) => {
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
            (State::Leader(lead), ReadPurpose::Verify) if lead.verifying => {
                self.on_verify(now, lead.token, result, out)
            }
            (State::Releasing(_), ReadPurpose::Verify) => self.on_release_verify(now, result, out),
            _ => {}
        }
    }

    /// A record delivered by the change feed.
    fn on_observed(&mut self, now: Now, current: Versioned, out: &mut Vec<Action>) {
        match &self.state {
            State::Candidate => self.observe_from(now, Some(current), true, out),
            State::Leader(lead) => {
                let ours = self.is_mine(&current.record) && current.record.token == lead.token;
                // Our record rewritten by someone else keeping holder and
                // token (a transfer request), or replaced by another
                // writer. A feed can be forged (a foreign publisher on the
                // channel), so neither hands over nor ends the term by
                // itself: a read decides (`on_verify`), as a renewal's
                // conflict would have.
                let request = ours && current.record.transfer_to().is_some();
                if (request || !ours) && current.version > lead.version && !lead.verifying {
                    if let State::Leader(lead) = &mut self.state {
                        lead.verifying = true;
                        if self.op.is_none() {
                            lead.next_renew = now.mono;
                        }
                    }
                }
            }
            // A release verifies with reads of its own.
            State::Draining { .. } | State::Releasing(_) | State::Stopped => {}
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
        let retry = match &result {
            Err(_) => self.renewal_retry(),
            Ok(_) => Duration::ZERO,
        };
        let old_deadline = match &self.state {
            State::Leader(lead) => lead.deadline,
            _ => now.mono,
        };
        match result {
            Ok(Some(v)) if self.is_mine(&v.record) && v.record.token == token => {
                let request = v.record.transfer_to().map(str::to_owned);
                if let State::Leader(lead) = &mut self.state {
                    lead.version = v.version;
                    lead.record = v.record;
                    lead.verifying = false;
                    lead.next_renew = now.mono;
                }
                // An operator asked this leader to hand over.
                if let Some(to) = request {
                    self.transfer(to, out);
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
        match purpose {
            WritePurpose::Acquire => self.on_acquire(now, record, sent, result, out),
            WritePurpose::Renew => self.on_renew(now, record, sent, result, out),
            // A release is only ever in flight while releasing.
            WritePurpose::Release => {}
        }
    }

    fn on_acquire(
        &mut self,
        now: Now,
        record: LeaseRecord,
        sent: MonoTime,
        result: Result<CasOutcome, StoreError>,
        out: &mut Vec<Action>,
    ) {
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

    fn on_renew(
        &mut self,
        now: Now,
        record: LeaseRecord,
        sent: MonoTime,
        result: Result<CasOutcome, StoreError>,
        out: &mut Vec<Action>,
    ) {
        // Drawn only for a failure, so that the jitter's stream moves only
        // when a retry uses it.
        let retry = match &result {
            Err(_) => self.renewal_retry(),
            Ok(_) => Duration::ZERO,
        };
        let anchor = self.anchor(sent, now);
        match &mut self.state {
            State::Leader(lead) => match result {
                Ok(CasOutcome::Applied(version)) => {
                    lead.version = version;
                    lead.record = record;
                    lead.deadline = lead.deadline.max(anchor + self.timing.leader_validity);
                    lead.next_renew = sent + self.timing.renew_interval;
                    out.push(Action::Renewed {
                        token: lead.token,
                        deadline: lead.deadline,
                        latency: now.mono.saturating_since(sent),
                    });
                }
                Ok(CasOutcome::Conflict) => {
                    lead.verifying = true;
                    lead.next_renew = now.mono;
                }
                Err(_) => lead.next_renew = now.mono + retry,
            },
            // The term already ended; the release that follows verifies
            // what is stored, so only a known new version matters here.
            State::Draining { lead, .. } => {
                if let Ok(CasOutcome::Applied(version)) = result {
                    lead.version = version;
                    lead.record = record;
                }
            }
            State::Candidate => match result {
                Ok(CasOutcome::Applied(version)) => {
                    // A renewal that outlived its term still wrote our
                    // record: a write that came back too late.
                    self.own_write_failures = self.own_write_failures.saturating_add(1);
                    self.observe_own(now, record, version);
                }
                _ => self.next_read = now.mono,
            },
            State::Releasing(_) | State::Stopped => {}
        }
    }

    /// A write's reply while releasing: the release itself, or a write that
    /// was in flight when shutdown began.
    fn on_release_write(
        &mut self,
        now: Now,
        purpose: WritePurpose,
        result: Result<CasOutcome, StoreError>,
        out: &mut Vec<Action>,
    ) {
        let retry = self.leader_retry();
        let State::Releasing(r) = &mut self.state else {
            return;
        };
        match result {
            Ok(CasOutcome::Applied(_)) if purpose == WritePurpose::Release => {
                let then = r.then;
                self.finish_release(now, then, out);
            }
            Ok(CasOutcome::Applied(version)) => {
                // A write in flight at shutdown applied: release it.
                r.version = Some(version);
                r.retry_at = now.mono;
            }
            Ok(CasOutcome::Conflict) => {
                // Not the version we thought: is the record still ours?
                r.version = None;
                r.retry_at = now.mono;
            }
            Err(_) => {
                r.version = None;
                r.retry_at = now.mono + retry;
            }
        }
    }

    fn on_release_verify(
        &mut self,
        now: Now,
        result: Result<Option<Versioned>, StoreError>,
        out: &mut Vec<Action>,
    ) {
        let retry = self.leader_retry();
        let mine = self.me.clone();
        let State::Releasing(r) = &mut self.state else {
            return;
        };
        match result {
            Ok(Some(v)) if v.record.holder.as_ref() == Some(&mine) && v.record.token == r.token => {
                r.version = Some(v.version);
                r.retry_at = now.mono;
            }
            Ok(current) => {
                // Released already, or taken by another: nothing of ours
                // to clear.
                let then = r.then;
                self.finish_release(now, then, out);
                if then == After::Stand {
                    self.observe(now, current, out);
                }
            }
            Err(_) => r.retry_at = now.mono + retry,
        }
    }

    fn finish_release(&mut self, now: Now, then: After, out: &mut Vec<Action>) {
        match then {
            After::Stop => self.stop(out),
            After::Stand => {
                self.state = State::Candidate;
                self.reported = None;
                self.observed = None;
                // Give polling peers one full poll period to see the release
                // before this node stands again.
                let hold = self.timing.retry_interval + self.timing.retry_jitter;
                self.hold_off_until = now.mono + hold;
                self.next_read = self.hold_off_until;
            }
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
        }
    }

    fn advance_candidate(&mut self, now: Now, out: &mut Vec<Action>) {
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
        // A failed read leaves `observed` empty but moves `next_read`, so a
        // store that keeps failing is polled, not spun on.
        if self.reread || now.mono >= self.next_read {
            self.reread = false;
            let deadline = now.mono + self.timing.op_timeout;
            self.read(ReadPurpose::Poll, now, deadline, out);
        }
    }

    fn advance_leader(&mut self, now: Now, out: &mut Vec<Action>) {
        let State::Leader(lead) = &self.state else {
            return;
        };
        let (token, deadline, version) = (lead.token, lead.deadline, lead.version);
        let (next_renew, verifying) = (lead.next_renew, lead.verifying);
        if now.mono >= deadline - self.timing.stop_grace {
            let (record, version) = (lead.record.clone(), lead.version);
            self.end_term(token, EndReason::RenewalFailed, deadline, deadline, out);
            self.state = State::Candidate;
            self.observe_own(now, record, version);
            self.next_read = now.mono;
            return;
        }
        if !self.is_live(now) {
            self.begin_drain(EndReason::LivenessLost, After::Stand, out);
            return self.advance_draining(now, out);
        }
        if self.op.is_some() || (now.mono < next_renew && !self.metadata_dirty) {
            return;
        }
        let op_deadline = (now.mono + self.timing.op_timeout).min(deadline);
        if verifying {
            self.read(ReadPurpose::Verify, now, op_deadline, out);
        } else {
            self.metadata_dirty = false;
            let record = self.lease_record(token, now);
            self.write(
                WritePurpose::Renew,
                Some(version),
                record,
                now,
                op_deadline,
                out,
            );
        }
    }

    fn advance_draining(&mut self, now: Now, out: &mut Vec<Action>) {
        let State::Draining {
            lead,
            then,
            drained,
            successor,
        } = &self.state
        else {
            return;
        };
        if !(*drained || now.mono >= lead.deadline) || self.op.is_some() {
            return;
        }
        // Keep trying while the lease is still ours to give up, and at
        // least twice.
        let until = lead.deadline.max(now.mono + self.timing.op_timeout * 2);
        self.state = State::Releasing(Release {
            then: *then,
            token: lead.token,
            term: lead.record.term,
            successor: successor.clone(),
            carried: carried_forward(&lead.record.metadata),
            version: Some(lead.version),
            retry_at: now.mono,
            until,
        });
        self.advance_releasing(now, out);
    }

    fn advance_releasing(&mut self, now: Now, out: &mut Vec<Action>) {
        let State::Releasing(r) = &self.state else {
            return;
        };
        if self.op.is_some() || now.mono < self.release_at(r) {
            return;
        }
        if now.mono >= r.until {
            let then = r.then;
            return self.finish_release(now, then, out);
        }
        let deadline = (now.mono + self.timing.op_timeout).min(r.until);
        match r.version {
            Some(version) => {
                let mut metadata = r.carried.clone();
                if let Some(to) = &r.successor {
                    metadata.insert(TRANSFER_TO_KEY, to.clone());
                }
                let record = LeaseRecord {
                    holder: None,
                    token: r.token,
                    term: r.term,
                    renewed_at: now.wall,
                    // A reservation lasts one term; a plain release ends now.
                    expires_at: if r.successor.is_some() {
                        now.wall + r.term
                    } else {
                        now.wall
                    },
                    metadata,
                };
                self.write(
                    WritePurpose::Release,
                    Some(version),
                    record,
                    now,
                    deadline,
                    out,
                );
            }
            None => self.read(ReadPurpose::Verify, now, deadline, out),
        }
    }
}
