//! The model's state: real time, the nodes (each a real [`Machine`] with its
//! clock and its driver's view of the outstanding operation), the store's
//! register, the messages in flight, the fault budget, and the ghost state
//! the properties read.

use std::collections::hash_map::DefaultHasher;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use tenure::machine::{Machine, OpId, WritePurpose};
use tenure::{LeaseRecord, MonoTime, Version, Versioned};

use crate::params::Rate;

/// One state of the cluster. Everything in it is hashed into the state's
/// fingerprint, so two states are merged only if they behave alike.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// Real time, in nanoseconds since the start.
    pub now: u64,
    /// The candidates.
    pub nodes: Vec<Node>,
    /// The store: one group's register.
    pub store: Option<Stored>,
    /// Requests on their way to the store and replies on their way back,
    /// sorted so that the same messages always make the same state.
    pub net: Vec<Msg>,
    /// Faults injected so far.
    pub faults_used: u8,
    /// Graceful releases asked for so far.
    pub releases_used: u8,
    /// What the properties judge.
    pub ghost: Ghost,
}

/// What the register holds: the version and the encoded record, as a
/// store keeps them, with the record decoded once when it was written.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Stored {
    /// The store's version.
    pub version: Version,
    /// The record as stored.
    pub bytes: Vec<u8>,
    /// `bytes`, decoded (or why they do not decode).
    pub decoded: Result<LeaseRecord, String>,
}

/// One candidate: its clock and, while it runs, its process.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Node {
    /// Its monotonic clock's rate.
    pub rate: Rate,
    /// Its wall clock's offset from true time, in milliseconds.
    pub wall_offset_ms: i64,
    /// The incarnation of its current (or last) process.
    pub incarnation: u64,
    /// The process, unless crashed.
    pub process: Option<Process>,
}

/// A running elector: the machine and the driver around it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Process {
    /// The real machine.
    pub machine: MachineCell,
    /// Paused: receives nothing, and no timer fires.
    pub paused: bool,
    /// The outstanding store operation, as the driver sees it.
    pub pending: Option<Pending>,
}

/// The operation the driver waits on, and when it gives up.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Pending {
    /// The machine's id for it.
    pub op: OpId,
    /// When to report a timeout, on the node's clock.
    pub deadline: MonoTime,
    /// A read (else a compare-and-swap).
    pub read: bool,
}

/// A machine with its fingerprint, computed once per step. Shared between
/// states until one of them steps it.
#[derive(Clone)]
pub struct MachineCell(Arc<(Machine, u64)>);

impl MachineCell {
    /// Wraps a machine.
    pub fn new(machine: Machine) -> Self {
        let fp = fingerprint(&machine);
        MachineCell(Arc::new((machine, fp)))
    }

    /// The machine.
    pub fn get(&self) -> &Machine {
        &self.0 .0
    }

    /// The machine's fingerprint.
    pub fn fingerprint(&self) -> u64 {
        self.0 .1
    }

    /// Runs `f` on the machine (copied if shared) and refreshes the
    /// fingerprint.
    pub fn update<R>(&mut self, f: impl FnOnce(&mut Machine) -> R) -> R {
        let cell = Arc::make_mut(&mut self.0);
        let r = f(&mut cell.0);
        cell.1 = fingerprint(&cell.0);
        r
    }
}

fn fingerprint(m: &Machine) -> u64 {
    let mut h = DefaultHasher::new();
    m.hash(&mut h);
    h.finish()
}

impl PartialEq for MachineCell {
    fn eq(&self, other: &Self) -> bool {
        self.fingerprint() == other.fingerprint()
    }
}

impl Eq for MachineCell {}

impl Hash for MachineCell {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.fingerprint().hash(h);
    }
}

impl fmt::Debug for MachineCell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.get().phase())
    }
}

/// A message in flight.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Msg {
    /// The node that sent the request.
    pub node: u8,
    /// Its incarnation then.
    pub incarnation: u64,
    /// The operation it answers or asks, to match reply and request.
    pub op: OpId,
    /// The real instant by which it arrives, unless lost.
    pub due: u64,
    /// A fault made it slow.
    pub slow: bool,
    /// What it carries.
    pub body: Body,
}

impl Msg {
    /// The key the network is sorted by: unique, since an operation has at
    /// most one request and one reply in flight.
    pub fn key(&self) -> (u8, u64, u64, bool) {
        (self.node, self.incarnation, self.op.0, self.is_reply())
    }

    /// A reply (else a request).
    pub fn is_reply(&self) -> bool {
        matches!(self.body, Body::ReadReply(_) | Body::CasReply(_))
    }
}

/// What a message carries.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Body {
    /// Read the record.
    Read,
    /// Compare-and-swap.
    Cas {
        /// What the machine means by the write (acquire, renew, release), for traces.
        purpose: WritePurpose,
        /// The version the store must have.
        expected: Option<Version>,
        /// The record to write.
        record: LeaseRecord,
    },
    /// A read's reply.
    ReadReply(Option<Versioned>),
    /// A compare-and-swap's reply: the new version, or `None` for a
    /// conflict.
    CasReply(Option<Version>),
}

/// What the properties judge: the terms that may still be valid, what was
/// elected last, and the flaws seen along the way.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Ghost {
    /// Terms that may be valid now or later.
    pub terms: Vec<GhostTerm>,
    /// The node and token of the last election.
    pub last_elected: Option<(u8, u64)>,
    /// Contract breaches seen on the way (see [`Flaw`]).
    pub flaws: u16,
    /// Leadership passed from one node to another at least once.
    pub handover: bool,
    /// A term was valid at some instant after the faults stopped.
    pub led_after_faults: bool,
    /// A graceful release applied at the store and no one has led since.
    pub release: Option<ReleaseWatch>,
    /// A graceful release applied at least once.
    pub released: bool,
    /// A resigning node took its own released lease back before the
    /// waiting node could.
    pub resigner_retook: bool,
    /// Nodes asked to shut down (a bit each).
    pub shut_down: u8,
    /// When the last fault happened.
    pub last_fault: Option<u64>,
    /// A leader handed over to a candidate of higher priority that asked
    /// (only with priorities: nothing else transfers in the model).
    pub preempted: bool,
}

/// One term, as the properties judge it: valid from its election while its
/// holder's own clock reads before its deadline (and before the work
/// deadline once ended), until its work is drained.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GhostTerm {
    /// The holder.
    pub node: u8,
    /// The holder's incarnation.
    pub incarnation: u64,
    /// The fencing token.
    pub token: u64,
    /// The deadline on the holder's clock, as last renewed.
    pub deadline: MonoTime,
    /// Set by `EndTerm`.
    pub work_deadline: Option<MonoTime>,
    /// The work reported `Drained`.
    pub drained: bool,
    /// Not ended, and the holder runs: renewals may still extend it.
    pub open: bool,
}

/// A graceful release being timed.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct ReleaseWatch {
    /// When it applied at the store.
    pub at: u64,
    /// The releasing node.
    pub by: u8,
    /// The releasing node is shutting down (else it resigned and may
    /// stand again).
    pub stopping: bool,
}

/// A breach of the machine's contract, recorded in [`Ghost::flaws`] when it
/// happens (a transition), so the `always` properties can see it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum Flaw {
    /// An election's token was not above the previous election's.
    TokenOrder = 1,
    /// A renewal changed the term's token.
    RenewToken = 1 << 1,
    /// A write lowered the stored token.
    StoreToken = 1 << 2,
    /// A running leader's clock passed `deadline − stop_grace` with its
    /// term not ended.
    LateStop = 1 << 3,
    /// An `EndTerm` gave the work a deadline past the term's.
    WorkPastDeadline = 1 << 4,
    /// A tick at a due wake-up changed nothing: the driver would spin.
    BusyWait = 1 << 5,
    /// Elected while holding a term, elected with a deadline already past,
    /// renewed or ended a term not held, failed for good, or read a record
    /// it could not decode.
    Contract = 1 << 6,
}

impl Ghost {
    /// Records a flaw.
    pub fn flaw(&mut self, f: Flaw) {
        self.flaws |= f as u16;
    }

    /// Whether a flaw was recorded.
    pub fn has(&self, f: Flaw) -> bool {
        self.flaws & f as u16 != 0
    }

    /// The open term of `node`'s process `incarnation`, if it holds one:
    /// the term its renewals extend and its `EndTerm` ends.
    pub fn open_term(&mut self, node: u8, incarnation: u64) -> Option<&mut GhostTerm> {
        self.terms
            .iter_mut()
            .find(|t| t.node == node && t.incarnation == incarnation && t.open)
    }
}
