//! What goes in and out of the machine: the [`Input`]s it is fed, the
//! [`Action`]s it returns, what each store operation is for, why a term
//! ended, why the machine stopped, and the [`Phase`] it reports.

use std::time::Duration;

use crate::clock::MonoTime;
use crate::error::StoreError;
use crate::record::{LeaseRecord, Metadata, Version, Versioned};
use crate::store::CasOutcome;

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
    /// A waiting candidate of higher priority writes a request to hand
    /// over into the leader's record (holder, token and times kept).
    Request,
    /// A candidate that stops takes its request out of the leader's record.
    Withdraw,
}

impl WritePurpose {
    /// A short label for logs and metrics.
    pub fn label(self) -> &'static str {
        match self {
            WritePurpose::Acquire => "acquire",
            WritePurpose::Renew => "renew",
            WritePurpose::Release => "release",
            WritePurpose::Request => "request",
            WritePurpose::Withdraw => "withdraw",
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
