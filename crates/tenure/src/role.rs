//! What an elector is, and what happened to it.

use std::time::SystemTime;

use crate::machine::{EndReason, Fault};
use crate::record::{Metadata, Versioned};
use crate::term::Term;

/// Who leads a group, as published in its record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderInfo {
    /// The leader's candidate id.
    pub candidate: String,
    /// The fencing token of its term.
    pub token: u64,
    /// What it publishes (its address, for instance).
    pub metadata: Metadata,
    /// When it last renewed, by its wall clock.
    pub renewed_at: SystemTime,
    /// When its lease expires unless renewed, by its wall clock.
    pub expires_at: SystemTime,
}

impl LeaderInfo {
    /// The leader described by a record, if the record is held.
    pub fn from_record(v: &Versioned) -> Option<Self> {
        let holder = v.record.holder.as_ref()?;
        Some(LeaderInfo {
            candidate: holder.id.clone(),
            token: v.record.token,
            metadata: v.record.metadata.clone(),
            renewed_at: v.record.renewed_at.to_system_time(),
            expires_at: v.record.expires_at.to_system_time(),
        })
    }
}

/// The role of an elector, published through a watch channel.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Role {
    /// Standing, with no leader known.
    Candidate,
    /// Leading this term.
    Leader(Term),
    /// Standing, while another candidate leads.
    Follower {
        /// The leader.
        leader: LeaderInfo,
    },
    /// Shut down.
    Stopped,
}

impl Role {
    /// The term, if leading.
    pub fn term(&self) -> Option<&Term> {
        match self {
            Role::Leader(t) => Some(t),
            _ => None,
        }
    }

    /// Whether this is [`Role::Leader`].
    pub fn is_leader(&self) -> bool {
        matches!(self, Role::Leader(_))
    }
}

/// Something that happened to an elector. Events are only sent for what
/// happened: a process that never led never gets [`Event::Ousted`].
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Event {
    /// This candidate became leader.
    Elected {
        /// The new term's fencing token.
        token: u64,
    },
    /// This candidate's term ended.
    Ousted {
        /// The ended term's token.
        token: u64,
        /// Why it ended.
        reason: EndReason,
    },
    /// Another candidate leads now, or (with `None`) nobody visibly does.
    LeaderChanged {
        /// The new leader.
        leader: Option<LeaderInfo>,
    },
    /// The store failed, or recovered (`message` is then `None`); sent when
    /// the kind of failure changes, not for every failed operation.
    StoreHealth {
        /// The error, without secrets, or `None` once the store answers again.
        message: Option<String>,
    },
    /// A run of a periodic duty failed
    /// ([`Elector::run_periodic`](crate::Elector::run_periodic)); the next
    /// period runs anyway.
    DutyFailed {
        /// The term it ran in.
        token: u64,
        /// The duty's error, as it displays.
        error: String,
    },
    /// This candidate can never lead in the group again and has stopped;
    /// [`Elector::wait_for_leadership`](crate::Elector::wait_for_leadership)
    /// returns [`ElectorError::Failed`](crate::ElectorError::Failed) from now on.
    Failed {
        /// What makes leading impossible (a token at its maximum, one gone back, …).
        fault: Fault,
    },
}
