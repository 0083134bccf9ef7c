//! What an elector-tier run is made of.

use std::ops::RangeInclusive;
use std::time::Duration;

use crate::faults::check_intervals;
use crate::params::{check_range, faults_flag, range_flag, Shared, SimError};
use crate::tier::Tier;

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

impl ElectorFaultRates {
    /// No faults at all.
    pub fn none() -> Self {
        ElectorFaultRates {
            crash_every: None,
            store_trouble: StoreTroubleRates::none(),
            resign_every: None,
            shutdown_every: None,
            stall_every: None,
            storms: false,
        }
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
/// the test suite and `tenure-sim --elector` run unless told otherwise.
#[derive(Clone, Debug, PartialEq)]
pub struct ElectorParams {
    /// How many candidates, drawn per seed from this range (2 to 20).
    pub nodes: RangeInclusive<usize>,
    /// How many groups every candidate stands in, on one store handle (so
    /// one engine runs them all), drawn per seed from this range (1 to 16).
    pub groups: RangeInclusive<usize>,
    /// The settings every tier has: term, clocks, notifications (drawn
    /// per candidate), liveness pulses, fault phase, latency (each
    /// incarnation draws its own) and trace.
    pub shared: Shared,
    /// How often each kind of fault happens.
    pub faults: ElectorFaultRates,
}

impl Default for ElectorParams {
    fn default() -> Self {
        ElectorParams {
            nodes: 2..=5,
            groups: 1..=3,
            shared: Shared::default(),
            faults: ElectorFaultRates::default(),
        }
    }
}

impl Tier for ElectorParams {
    type Report = ElectorReport;
    type Summary = ElectorSummary;

    fn check(&self) -> Result<(), SimError> {
        check_range("node count", &self.nodes, 2, 20)?;
        check_range("group count", &self.groups, 1, 16)?;
        check_intervals(self.faults.kinds(true))?;
        self.shared.check(Duration::from_millis(1))
    }

    fn run(&self, seed: u64) -> Result<ElectorReport, SimError> {
        super::run_seed(seed, self)
    }

    fn replay_command(&self, seed: u64) -> String {
        let mut cmd =
            format!("cargo run -p tenure-sim --release -- --elector --seed {seed} --trace");
        let d = ElectorParams::default();
        cmd += &range_flag("nodes", &self.nodes, &d.nodes);
        cmd += &range_flag("groups", &self.groups, &d.groups);
        cmd += &self.shared.flags(&d.shared);
        let how = "elector::run_seed and the same ElectorParams";
        cmd += &faults_flag(&self.faults, &ElectorFaultRates::none(), &d.faults, how);
        cmd
    }
}
