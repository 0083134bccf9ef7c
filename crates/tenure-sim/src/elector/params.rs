//! What an elector-tier run is made of.

use std::ops::RangeInclusive;
use std::time::Duration;

use crate::faults::check_intervals;
use crate::params::{check_range, range_flag, SimError};
use crate::tier::{FaultPlan, Params, Tier};

use super::plan::Planned;
use super::report::{ElectorReport, ElectorSummary};
use super::windows::StoreTroubleRates;

/// How often each fault strikes in the elector tier: mean intervals of
/// exponential distributions over the whole cluster; `None` turns a kind
/// off. Windows of store trouble hit one candidate's view of the store
/// ([`tenure::Faults`] of that candidate).
#[derive(Clone, Debug, PartialEq)]
pub struct ElectorFaultRates {
    /// A candidate's process dies: its application and work stop at once,
    /// it never reaches the store again, and a new incarnation starts later.
    pub crash_every: Option<Duration>,
    /// Windows in which a candidate's view of the store is cut off, slow,
    /// failing or losing replies.
    pub store_trouble: StoreTroubleRates,
    /// The application resigns (the leader, mostly).
    pub resign_every: Option<Duration>,
    /// The application shuts its elector down gracefully and starts a new
    /// one later.
    pub shutdown_every: Option<Duration>,
    /// The application stops pulsing for a while (only with a liveness
    /// timeout).
    pub stall_every: Option<Duration>,
    /// End the fault phase, in a quarter of the seeds, by cutting every
    /// candidate off for 2.5 terms.
    pub storms: bool,
}

impl Default for ElectorFaultRates {
    fn default() -> Self {
        ElectorFaultRates {
            crash_every: Some(Duration::from_secs(15)),
            store_trouble: StoreTroubleRates {
                partition_every: Some(Duration::from_secs(10)),
                slow_every: Some(Duration::from_secs(10)),
                failing_every: Some(Duration::from_secs(15)),
                lost_replies_every: Some(Duration::from_secs(12)),
            },
            resign_every: Some(Duration::from_secs(12)),
            shutdown_every: Some(Duration::from_secs(20)),
            stall_every: Some(Duration::from_secs(15)),
            storms: true,
        }
    }
}

impl FaultPlan for ElectorFaultRates {
    fn none() -> Self {
        ElectorFaultRates {
            crash_every: None,
            store_trouble: StoreTroubleRates::none(),
            resign_every: None,
            shutdown_every: None,
            stall_every: None,
            storms: false,
        }
    }

    fn check(&self) -> Result<(), SimError> {
        check_intervals(self.kinds(true))
    }

    fn flag(&self) -> Option<&'static str> {
        (*self == Self::without_partitions()).then_some("--no-partitions")
    }
}

impl ElectorFaultRates {
    /// The default rates without partitions or storms (`--no-partitions`):
    /// every store operation then completes or fails, late at worst, so a
    /// caller without a timeout of its own is never left waiting for good.
    pub fn without_partitions() -> Self {
        let mut rates = Self::default();
        rates.store_trouble.partition_every = None;
        rates.storms = false;
        rates
    }

    /// Every kind with its mean interval, in the order a run's plan draws
    /// them in; pulse stalls only if the application `pulses`.
    pub(crate) fn kinds(&self, pulses: bool) -> impl Iterator<Item = (Planned, Option<Duration>)> {
        let application = [
            (Planned::Resign, self.resign_every),
            (Planned::Shutdown, self.shutdown_every),
            (Planned::Stall, self.stall_every.filter(|_| pulses)),
        ];
        [(Planned::Crash, self.crash_every)]
            .into_iter()
            .chain(self.store_trouble.kinds())
            .chain(application)
    }
}

/// The parameters of an elector-tier run; [`ElectorParams::default`] is what
/// the test suite and `tenure-sim --elector` run unless told otherwise. Of
/// its shared settings, notifications are drawn per candidate and latency
/// per incarnation.
pub type ElectorParams = Params<ElectorTier>;

/// The elector tier's own settings.
#[derive(Clone, Debug, PartialEq)]
pub struct ElectorTier {
    /// How many candidates, drawn per seed from this range (2 to 20).
    pub nodes: RangeInclusive<usize>,
    /// How many groups every candidate stands in, on one store handle (so
    /// one engine runs them all), drawn per seed from this range (1 to 16).
    pub groups: RangeInclusive<usize>,
    /// Candidate priorities (`--priorities`): each candidate is built with
    /// a priority drawn from the seed (few levels, so ties are common;
    /// some set none, some an explicit 0) and the seed's preemption delay,
    /// so higher priorities preempt lower ones throughout the run. The
    /// checker adds, per group: once every fault has healed the leader is
    /// a live candidate of the highest priority within a derived bound
    /// ([`ViolationKind::Priority`](crate::ViolationKind::Priority)), and
    /// leadership only ever moves to a higher priority after the heal
    /// bound, and not at all once the highest leads, until the tail's
    /// crash ([`ViolationKind::Oscillation`](crate::ViolationKind::Oscillation)),
    /// while stale transfer requests (a priority not above the leader's)
    /// are written into leaders' records and must be declined.
    pub priorities: bool,
    /// A negative control for `priorities`: the electors are built without
    /// their priorities (no candidate publishes one or asks), while the
    /// checker still expects the highest to lead; it must report
    /// [`ViolationKind::Priority`](crate::ViolationKind::Priority).
    pub priorities_unset: bool,
    /// A negative control for `priorities`: the transfer requests the tail
    /// writes name a priority above the leader's (a forgery the leader
    /// cannot tell from a real request, so it hands over to a candidate of
    /// no higher priority); the checker must report
    /// [`ViolationKind::Oscillation`](crate::ViolationKind::Oscillation).
    pub priorities_forge_above: bool,
    /// A negative control for the chain of priorities under a dead leader
    /// (`--priorities`, half the seeds): requests are written into the
    /// dead leader's record without the rewrite mark, each restarting every
    /// candidate's takeover wait; the tail's crash check must report
    /// [`ViolationKind::Liveness`](crate::ViolationKind::Liveness).
    pub priorities_chain_unmarked: bool,
}

impl Default for ElectorTier {
    fn default() -> Self {
        ElectorTier {
            nodes: 2..=5,
            groups: 1..=3,
            priorities: false,
            priorities_unset: false,
            priorities_forge_above: false,
            priorities_chain_unmarked: false,
        }
    }
}

impl Tier for ElectorTier {
    type Faults = ElectorFaultRates;
    type Report = ElectorReport;
    type Summary = ElectorSummary;

    const FLAG: Option<&'static str> = Some("--elector");
    const MIN_LATENCY: Duration = Duration::from_millis(1);
    const REPLAY_WITH: &'static str = "elector::run_seed and the same ElectorParams";

    fn check(&self) -> Result<(), SimError> {
        check_range("node count", &self.nodes, 2, 20)?;
        check_range("group count", &self.groups, 1, 16)?;
        if (self.priorities_unset || self.priorities_forge_above || self.priorities_chain_unmarked)
            && !self.priorities
        {
            return Err(SimError::Params(
                "the priority controls need priorities on".into(),
            ));
        }
        Ok(())
    }

    fn flags(&self, default: &Self) -> String {
        let mut flags = range_flag("nodes", &self.nodes, &default.nodes)
            + &range_flag("groups", &self.groups, &default.groups);
        if self.priorities {
            flags += " --priorities";
        }
        flags
    }

    fn control_flags(&self) -> String {
        let mut flags = String::new();
        if self.priorities_unset {
            flags += " --priorities-unset";
        }
        if self.priorities_forge_above {
            flags += " --priorities-forge-above";
        }
        if self.priorities_chain_unmarked {
            flags += " --priorities-chain-unmarked";
        }
        flags
    }

    fn run(params: &ElectorParams, seed: u64) -> Result<ElectorReport, SimError> {
        super::run_seed(seed, params)
    }
}
