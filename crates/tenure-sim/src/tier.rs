//! What every tier (machines, electors, sharded sets) has in one shape:
//! its parameters ([`Params`]: the shared settings, the tier's fault rates
//! and the tier's own settings), and one interface for loops over seeds:
//! the binary's and the tests'.

use std::fmt;
use std::time::Duration;

use crate::params::Shared;
use crate::report::{RunRecord, Totals};
use crate::SimError;

/// One tier of the simulation: its own settings (how many candidates,
/// groups, members or shards; its negative controls), which [`Params`]
/// holds next to what every tier has, and how a loop over seeds runs it.
pub trait Tier: Clone + fmt::Debug + PartialEq + Default {
    /// How often each kind of the tier's faults strikes.
    type Faults: FaultPlan;
    /// What one seed's run found.
    type Report: TierReport;
    /// The totals over many runs, printed as a table.
    type Summary: TierSummary<Self::Report>;
    /// The flag that picks the tier on the command line, if it is not the
    /// default one.
    const FLAG: Option<&'static str>;
    /// The least ordinary store latency bound the tier simulates.
    const MIN_LATENCY: Duration;
    /// How to replay a run whose fault rates no flag sets: the tier's
    /// `run_seed` and the type of its parameters.
    const REPLAY_WITH: &'static str;
    /// The shared settings of the tier's default parameters.
    fn default_shared() -> Shared {
        Shared::default()
    }
    /// Checks the tier's own settings.
    fn check(&self) -> Result<(), SimError>;
    /// The flags that set the tier's own settings where they differ from
    /// `default`'s, for a replay command (before the shared settings').
    fn flags(&self, default: &Self) -> String;
    /// The flags of the tier's negative controls that are on, for a replay
    /// command (after the shared settings'); none unless the tier has some.
    fn control_flags(&self) -> String {
        String::new()
    }
    /// Runs one seed with `params` to the end.
    fn run(params: &Params<Self>, seed: u64) -> Result<Self::Report, SimError>;
}

/// A tier's fault rates, as [`Params`] checks them and a replay command
/// names them.
pub trait FaultPlan: Clone + fmt::Debug + PartialEq + Default {
    /// No faults at all (`--no-faults`).
    fn none() -> Self;
    /// Checks what the tier's plan cannot draw from.
    fn check(&self) -> Result<(), SimError>;
    /// The flag other than `--no-faults` that sets these rates, if one does.
    fn flag(&self) -> Option<&'static str> {
        None
    }
}

/// The parameters of one tier's runs: what every tier has (the shared
/// settings and the tier's fault rates) and the tier's own settings.
/// `Params::default()` is what the test suite and the binary run unless
/// told otherwise.
#[derive(Clone, Debug, PartialEq)]
pub struct Params<T: Tier> {
    /// The tier's own settings: how many candidates (and groups, or members
    /// and shards) a seed draws, and the tier's negative controls.
    pub tier: T,
    /// The settings every tier has: term, clocks, notifications, liveness
    /// pulses, fault phase, latency and trace.
    pub shared: Shared,
    /// How often each kind of fault happens.
    pub faults: T::Faults,
}

impl<T: Tier> Default for Params<T> {
    fn default() -> Self {
        Params {
            tier: T::default(),
            shared: T::default_shared(),
            faults: T::Faults::default(),
        }
    }
}

impl<T: Tier> Params<T> {
    /// Checks the parameters that the election configuration does not.
    pub fn check(&self) -> Result<(), SimError> {
        self.tier.check()?;
        self.faults.check()?;
        self.shared.check(T::MIN_LATENCY)
    }

    /// Runs one seed to the end.
    pub fn run(&self, seed: u64) -> Result<T::Report, SimError> {
        T::run(self, seed)
    }

    /// The command that runs `seed` again with these parameters, with a
    /// trace: every setting that differs from the default's has its flag.
    pub fn replay_command(&self, seed: u64) -> String {
        let mut cmd = String::from("cargo run -p tenure-sim --release --");
        if let Some(flag) = T::FLAG {
            cmd += &format!(" {flag}");
        }
        cmd += &format!(" --seed {seed} --trace");
        let d = Self::default();
        cmd += &self.tier.flags(&d.tier);
        cmd += &self.shared.flags(&d.shared);
        cmd += &self.tier.control_flags();
        if self.faults == T::Faults::none() {
            cmd += " --no-faults";
        } else if let Some(flag) = self.faults.flag() {
            cmd += &format!(" {flag}");
        } else if self.faults != d.faults {
            cmd += &format!(" (custom fault rates: replay with {})", T::REPLAY_WITH);
        }
        cmd
    }
}

/// One seed's report, as a loop over seeds reads it; its `Display` is the
/// run in a line.
pub trait TierReport: fmt::Display {
    /// The seed, the violations, the digest and the trace.
    fn record(&self) -> &RunRecord;
}

/// A tier's totals over many runs; its `Display` is the table the binary
/// prints.
pub trait TierSummary<R>: Default + fmt::Display {
    /// Adds one run.
    fn add(&mut self, report: &R);
    /// The seeds run, the simulated time and every violation.
    fn totals(&self) -> &Totals;
}
