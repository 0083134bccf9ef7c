//! One interface over the three tiers (machines, electors, sharded sets),
//! for loops over seeds: the binary's and the tests'.

use std::fmt;

use crate::report::{RunRecord, Totals};
use crate::SimError;

/// One tier of the simulation, as a loop over seeds sees it: the binary's
/// and the tests'. Each tier's parameters are its tier.
pub trait Tier {
    /// What one seed's run found.
    type Report: TierReport;
    /// The totals over many runs, printed as a table.
    type Summary: TierSummary<Self::Report>;
    /// Checks the parameters that the election configuration does not.
    fn check(&self) -> Result<(), SimError>;
    /// Runs one seed to the end.
    fn run(&self, seed: u64) -> Result<Self::Report, SimError>;
    /// The command that runs `seed` again with these parameters, with a
    /// trace.
    fn replay_command(&self, seed: u64) -> String;
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
