//! The faults the simulator injects, how often, and how long they last.
//!
//! Process-level faults (crash, pause, partition, resign, shutdown) are
//! planned up front as arrival times of a Poisson process per kind; the
//! target node is chosen when the fault fires (half the time the current
//! leader, since faults of the leader are the ones that test safety).
//! Network faults strike single store operations with a fixed probability.
//! Every fault is healed before the fault phase ends, so the run finishes
//! with a fault-free tail.

use std::fmt;
use std::ops::{Index, IndexMut};
use std::time::Duration;

use rand::Rng;

use crate::clock::SimTime;
use crate::params::SimError;
use crate::tier::FaultPlan;

/// A kind of fault.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    /// The process dies; it restarts later as a new incarnation.
    Crash,
    /// The process stops running (GC, swap, SIGSTOP) for longer than a term;
    /// its clock keeps counting.
    LongPause,
    /// The same for less than a term.
    ShortPause,
    /// The node cannot reach the store: requests and replies are lost.
    Partition,
    /// A write was applied but its reply never came.
    LostReply,
    /// A request was lost before it reached the store.
    DroppedRequest,
    /// The store answered with a transient error without applying anything.
    StoreFailure,
    /// A request or reply took longer than the operation timeout allows,
    /// so a write may apply after its sender gave up on it.
    SlowOp,
    /// The application asked the leader (or a candidate) to resign.
    Resign,
    /// The application shut a node down; it is redeployed later.
    Shutdown,
    /// The application stopped pulsing (hung work loop) for a while; with
    /// a liveness timeout configured, a leader resigns and a candidate does
    /// not stand.
    Stall,
}

impl FaultKind {
    /// Every kind, in report order.
    pub const ALL: [FaultKind; 11] = [
        FaultKind::Crash,
        FaultKind::LongPause,
        FaultKind::ShortPause,
        FaultKind::Partition,
        FaultKind::LostReply,
        FaultKind::DroppedRequest,
        FaultKind::StoreFailure,
        FaultKind::SlowOp,
        FaultKind::Resign,
        FaultKind::Shutdown,
        FaultKind::Stall,
    ];

    /// A short label.
    pub fn label(self) -> &'static str {
        match self {
            FaultKind::Crash => "crash",
            FaultKind::LongPause => "pause > term",
            FaultKind::ShortPause => "pause < term",
            FaultKind::Partition => "partition",
            FaultKind::LostReply => "lost reply",
            FaultKind::DroppedRequest => "dropped request",
            FaultKind::StoreFailure => "store failure",
            FaultKind::SlowOp => "slow op",
            FaultKind::Resign => "resign",
            FaultKind::Shutdown => "shutdown",
            FaultKind::Stall => "pulse stall",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// How many faults of each kind were injected.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FaultCounts([u64; FaultKind::ALL.len()]);

impl FaultCounts {
    /// Adds another run's counts.
    pub fn add(&mut self, other: &FaultCounts) {
        for (a, b) in self.0.iter_mut().zip(other.0.iter()) {
            *a += b;
        }
    }

    /// The total over all kinds.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
}

impl Index<FaultKind> for FaultCounts {
    type Output = u64;
    fn index(&self, k: FaultKind) -> &u64 {
        &self.0[k.index()]
    }
}

impl IndexMut<FaultKind> for FaultCounts {
    fn index_mut(&mut self, k: FaultKind) -> &mut u64 {
        &mut self.0[k.index()]
    }
}

/// How often faults strike. Intervals are means of exponential
/// distributions over the whole cluster; `None` turns a kind off.
#[derive(Clone, Debug, PartialEq)]
pub struct FaultRates {
    /// Mean time between crashes.
    pub crash_every: Option<Duration>,
    /// Mean time between pauses (70 % longer than a term).
    pub pause_every: Option<Duration>,
    /// Mean time between partitions.
    pub partition_every: Option<Duration>,
    /// Mean time between resignations.
    pub resign_every: Option<Duration>,
    /// Mean time between shutdowns.
    pub shutdown_every: Option<Duration>,
    /// Mean time between pulse stalls (only in seeds with a liveness
    /// timeout).
    pub stall_every: Option<Duration>,
    /// How likely each fault of a single store operation is.
    pub per_op: OpFaultOdds,
    /// End the fault phase, in half of the seeds, with a storm of 2.5
    /// terms that partitions or pauses every node at once.
    pub storms: bool,
}

impl Default for FaultRates {
    fn default() -> Self {
        FaultRates {
            crash_every: Some(Duration::from_secs(12)),
            pause_every: Some(Duration::from_secs(10)),
            partition_every: Some(Duration::from_secs(10)),
            resign_every: Some(Duration::from_secs(15)),
            shutdown_every: Some(Duration::from_secs(25)),
            stall_every: Some(Duration::from_secs(15)),
            per_op: OpFaultOdds {
                lost_reply: 0.02,
                dropped_request: 0.02,
                store_failure: 0.01,
                slow_op: 0.02,
            },
            storms: true,
        }
    }
}

impl FaultPlan for FaultRates {
    fn none() -> Self {
        FaultRates {
            crash_every: None,
            pause_every: None,
            partition_every: None,
            resign_every: None,
            shutdown_every: None,
            stall_every: None,
            per_op: OpFaultOdds::none(),
            storms: false,
        }
    }

    fn check(&self) -> Result<(), SimError> {
        self.per_op.check()?;
        check_intervals(self.kinds(true))
    }

    /// `--crash-only` for [`FaultRates::crash_only`].
    fn flag(&self) -> Option<&'static str> {
        (*self == FaultRates::crash_only()).then_some("--crash-only")
    }
}

impl FaultRates {
    /// Crashes only, spaced so that most failovers happen undisturbed and
    /// are checked against the crash failover bound.
    pub fn crash_only() -> Self {
        FaultRates {
            crash_every: Some(Duration::from_secs(15)),
            ..FaultRates::none()
        }
    }

    /// Every planned kind with its mean interval, in the order a run's plan
    /// draws them in; pulse stalls only if the application `pulses`.
    pub(crate) fn kinds(&self, pulses: bool) -> [(Planned, Option<Duration>); 6] {
        [
            (Planned::Crash, self.crash_every),
            (Planned::Pause, self.pause_every),
            (Planned::Partition, self.partition_every),
            (Planned::Resign, self.resign_every),
            (Planned::Shutdown, self.shutdown_every),
            (Planned::Stall, self.stall_every.filter(|_| pulses)),
        ]
    }
}

/// How likely each fault of a single store operation is, in the machine
/// tier: probabilities, drawn afresh for every operation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OpFaultOdds {
    /// That a write's reply is lost after it applied.
    pub lost_reply: f64,
    /// That a request is lost before the store.
    pub dropped_request: f64,
    /// That the store fails an operation transiently.
    pub store_failure: f64,
    /// That a request or reply is slower than the timeout.
    pub slow_op: f64,
}

impl OpFaultOdds {
    /// No operation ever fails.
    pub fn none() -> Self {
        OpFaultOdds {
            lost_reply: 0.0,
            dropped_request: 0.0,
            store_failure: 0.0,
            slow_op: 0.0,
        }
    }

    /// Checks that each is a probability of at most one half, and that
    /// together they are at most 1: an operation has one fate, drawn from
    /// these odds in turn, so larger ones would not be the odds drawn.
    fn check(&self) -> Result<(), SimError> {
        let odds = [
            ("lost reply", self.lost_reply),
            ("dropped request", self.dropped_request),
            ("store failure", self.store_failure),
            ("slow op", self.slow_op),
        ];
        for (name, p) in odds {
            if !(p.is_finite() && (0.0..=0.5).contains(&p)) {
                return Err(SimError::Params(format!(
                    "{name} probability {p} is outside [0, 0.5]"
                )));
            }
        }
        let total: f64 = odds.iter().map(|(_, p)| p).sum();
        if total > 1.0 {
            return Err(SimError::Params(format!(
                "the per-operation fault probabilities add up to {total}, more than 1: \
                 an operation has one fate, so lower some of them"
            )));
        }
        Ok(())
    }
}

/// Checks that no kind of planned fault that is on has a mean interval
/// under 100 ms, the least every tier accepts.
pub(crate) fn check_intervals<K: fmt::Debug>(
    kinds: impl IntoIterator<Item = (K, Option<Duration>)>,
) -> Result<(), SimError> {
    for (kind, every) in kinds {
        if every.is_some_and(|d| d < Duration::from_millis(100)) {
            return Err(SimError::Params(format!(
                "mean interval between {kind:?} faults must be at least 100 ms"
            )));
        }
    }
    Ok(())
}

/// A process-level fault to inject at a planned instant; the target is
/// chosen when it fires.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Planned {
    /// Crash a node.
    Crash,
    /// Pause a node.
    Pause,
    /// Cut a node off from the store.
    Partition,
    /// Ask a node to resign.
    Resign,
    /// Ask a node to shut down.
    Shutdown,
    /// Stop a node's application pulses.
    Stall,
}

/// A kind of fault (or membership change) that a tier plans up front, at
/// instants [`schedule`] draws.
pub(crate) trait PlannedKind: Copy {
    /// The longest a fault of this kind takes to heal (or a change to play
    /// out) with a term of `term`: faults are planned only early enough to
    /// heal before the tail.
    fn heal_time(self, term: Duration) -> Duration;
}

impl PlannedKind for Planned {
    fn heal_time(self, term: Duration) -> Duration {
        match self {
            // Down for up to 3 terms.
            Planned::Crash => term * 3,
            // Up to 3 terms.
            Planned::Pause => term * 3,
            // Up to 4 terms.
            Planned::Partition => term * 4,
            // Draining lasts at most one term, the release one timeout.
            Planned::Resign => term * 2,
            // Drain and release, then down for up to 2 terms.
            Planned::Shutdown => term * 4,
            // Up to 3 terms.
            Planned::Stall => term * 3,
        }
    }
}

/// The instants each kind of fault strikes, a Poisson process per kind
/// with mean interval `every` (none for a kind that is off), from `start`
/// until the kind's [`PlannedKind::heal_time`] (with a term of `term`)
/// before `fault_end`; sorted by time with a stable sort, so that equal
/// instants keep the order of `kinds` and runs stay deterministic.
pub(crate) fn schedule<K: PlannedKind>(
    rng: &mut impl Rng,
    kinds: impl IntoIterator<Item = (K, Option<Duration>)>,
    start: SimTime,
    fault_end: SimTime,
    term: Duration,
) -> Vec<(SimTime, K)> {
    let mut out = Vec::new();
    for (kind, every) in kinds {
        let Some(every) = every else { continue };
        let end = fault_end.before(kind.heal_time(term));
        out.extend(
            arrivals(rng, every, start, end)
                .into_iter()
                .map(|t| (t, kind)),
        );
    }
    out.sort_by_key(|(t, _)| *t);
    out
}

/// The arrival instants in `[start, end)` of a Poisson process with mean
/// inter-arrival time `every`.
pub(crate) fn arrivals(
    rng: &mut impl Rng,
    every: Duration,
    start: SimTime,
    end: SimTime,
) -> Vec<SimTime> {
    let mut out = Vec::new();
    let mut t = start;
    loop {
        // Exponential inter-arrival time with the given mean.
        let u: f64 = rng.gen_range(f64::EPSILON..1.0);
        t = t.after(every.mul_f64(-u.ln()));
        if t >= end {
            return out;
        }
        out.push(t);
    }
}

/// A uniformly random duration in `[lo, hi]`.
pub(crate) fn between(rng: &mut impl Rng, lo: Duration, hi: Duration) -> Duration {
    let lo_ns = u64::try_from(lo.as_nanos()).unwrap_or(u64::MAX);
    let hi_ns = u64::try_from(hi.as_nanos()).unwrap_or(u64::MAX).max(lo_ns);
    Duration::from_nanos(rng.gen_range(lo_ns..=hi_ns))
}

/// What happens to one store operation on the way.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum OpFate {
    /// Ordinary latency both ways.
    Normal,
    /// Lost before the store.
    DroppedRequest,
    /// Applied, reply lost.
    LostReply,
    /// Failed by the store without applying.
    StoreFailure,
    /// The request is slow (it may apply after the sender timed out).
    SlowRequest,
    /// The reply is slow (it may arrive after the sender timed out).
    SlowReply,
}

impl OpFate {
    /// Draws the fate of one operation.
    pub(crate) fn draw(rng: &mut impl Rng, rates: &OpFaultOdds) -> OpFate {
        let x: f64 = rng.gen();
        let mut edge = rates.dropped_request;
        if x < edge {
            return OpFate::DroppedRequest;
        }
        edge += rates.lost_reply;
        if x < edge {
            return OpFate::LostReply;
        }
        edge += rates.store_failure;
        if x < edge {
            return OpFate::StoreFailure;
        }
        edge += rates.slow_op;
        if x < edge {
            return if rng.gen_bool(0.5) {
                OpFate::SlowRequest
            } else {
                OpFate::SlowReply
            };
        }
        OpFate::Normal
    }

    /// The fault kind to count, if any.
    pub(crate) fn kind(self) -> Option<FaultKind> {
        match self {
            OpFate::Normal => None,
            OpFate::DroppedRequest => Some(FaultKind::DroppedRequest),
            OpFate::LostReply => Some(FaultKind::LostReply),
            OpFate::StoreFailure => Some(FaultKind::StoreFailure),
            OpFate::SlowRequest | OpFate::SlowReply => Some(FaultKind::SlowOp),
        }
    }
}
