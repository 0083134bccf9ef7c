//! What an elector-tier run is made of.

use std::ops::RangeInclusive;
use std::time::Duration;

use crate::params::{check_range, faults_flag, range_flag, Shared, SimError};

/// How often each fault strikes in the elector tier: mean intervals of
/// exponential distributions over the whole cluster; `None` turns a kind
/// off. Windows of store trouble hit one candidate's view of the store
/// ([`tenure::Faults`] of that candidate).
#[derive(Clone, Debug, PartialEq)]
pub struct ElectorFaultRates {
    /// A candidate's process dies: its application and work stop at once,
    /// it never reaches the store again, and a new incarnation starts later.
    pub crash_every: Option<Duration>,
    /// A candidate is cut off from the store (its operations hang until
    /// they time out) for a while.
    pub partition_every: Option<Duration>,
    /// A candidate's operations are slow, often slower than the operation
    /// timeout, for a while.
    pub slow_every: Option<Duration>,
    /// The store fails a candidate's operations for a while.
    pub failing_every: Option<Duration>,
    /// A candidate's writes apply but their replies are lost, for a while.
    pub lost_replies_every: Option<Duration>,
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
            partition_every: Some(Duration::from_secs(10)),
            slow_every: Some(Duration::from_secs(10)),
            failing_every: Some(Duration::from_secs(15)),
            lost_replies_every: Some(Duration::from_secs(12)),
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
            partition_every: None,
            slow_every: None,
            failing_every: None,
            lost_replies_every: None,
            resign_every: None,
            shutdown_every: None,
            stall_every: None,
            storms: false,
        }
    }

    /// Every kind with its mean interval.
    pub(crate) fn kinds(&self) -> [(super::plan::Planned, Option<Duration>); 8] {
        use super::plan::Planned;
        [
            (Planned::Crash, self.crash_every),
            (Planned::Partition, self.partition_every),
            (Planned::Slow, self.slow_every),
            (Planned::Failing, self.failing_every),
            (Planned::LostReplies, self.lost_replies_every),
            (Planned::Resign, self.resign_every),
            (Planned::Shutdown, self.shutdown_every),
            (Planned::Stall, self.stall_every),
        ]
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

impl ElectorParams {
    /// Checks the parameters that the election configuration does not.
    pub fn check(&self) -> Result<(), SimError> {
        check_range("node count", &self.nodes, 2, 20)?;
        check_range("group count", &self.groups, 1, 16)?;
        for (kind, every) in self.faults.kinds() {
            if every.is_some_and(|d| d < Duration::from_millis(100)) {
                return Err(SimError::Params(format!(
                    "mean interval between {kind:?} faults must be at least 100 ms"
                )));
            }
        }
        self.shared.check(Duration::from_millis(1))
    }

    /// The command that runs `seed` again with these parameters.
    pub fn replay_command(&self, seed: u64) -> String {
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
