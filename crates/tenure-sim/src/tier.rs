//! One interface over the three tiers (machines, electors, sharded sets),
//! for loops over seeds: the binary's and the tests'.

use crate::elector::{self, ElectorParams, ElectorReport, ElectorSummary};
use crate::shards::{self, ShardParams, ShardReport, ShardSummary};
use crate::{run_seed, SimError, SimParams, SimReport, Summary, Violation};

/// One tier of the simulation, as a loop over seeds sees it: the binary's
/// and the tests'. Each tier's parameters are its tier.
pub trait Tier {
    /// What one seed's run found.
    type Report;
    /// The totals over many runs, printed as a table.
    type Summary: Default + std::fmt::Display;
    /// Checks the parameters.
    fn check(&self) -> Result<(), SimError>;
    /// Runs one seed to the end.
    fn run(&self, seed: u64) -> Result<Self::Report, SimError>;
    /// The trace lines and a one-line description of a single seed's run.
    fn describe(&self, report: &Self::Report) -> (Vec<String>, String);
    /// The invariants the run broke.
    fn violations<'a>(&self, report: &'a Self::Report) -> &'a [Violation];
    /// The command that runs `seed` again with these parameters.
    fn replay_command(&self, seed: u64) -> String;
    /// Adds one run to the totals.
    fn add(&self, summary: &mut Self::Summary, report: &Self::Report);
    /// How many invariants the runs broke in all.
    fn violation_count(&self, summary: &Self::Summary) -> usize;
}

impl Tier for SimParams {
    type Report = SimReport;
    type Summary = Summary;
    fn check(&self) -> Result<(), SimError> {
        SimParams::check(self)
    }
    fn run(&self, seed: u64) -> Result<SimReport, SimError> {
        run_seed(seed, self)
    }
    fn describe(&self, r: &SimReport) -> (Vec<String>, String) {
        let line = format!(
            "seed {}: {} nodes, skew bound {:?}, liveness timeout {:?}, notifications {}, digest {:016x}",
            r.seed, r.nodes, r.skew_bound, r.liveness_timeout, r.notify, r.digest
        );
        (r.trace.clone(), line)
    }
    fn violations<'a>(&self, r: &'a SimReport) -> &'a [Violation] {
        &r.violations
    }
    fn replay_command(&self, seed: u64) -> String {
        SimParams::replay_command(self, seed)
    }
    fn add(&self, summary: &mut Summary, r: &SimReport) {
        summary.add(r);
    }
    fn violation_count(&self, summary: &Summary) -> usize {
        summary.violations.len()
    }
}

impl Tier for ElectorParams {
    type Report = ElectorReport;
    type Summary = ElectorSummary;
    fn check(&self) -> Result<(), SimError> {
        ElectorParams::check(self)
    }
    fn run(&self, seed: u64) -> Result<ElectorReport, SimError> {
        elector::run_seed(seed, self)
    }
    fn describe(&self, r: &ElectorReport) -> (Vec<String>, String) {
        let line = format!(
            "seed {}: {} nodes ({} notified) in {} groups, skew bound {:?}, liveness timeout {:?}, {} terms, digest {:016x}",
            r.seed,
            r.nodes,
            r.notifying,
            r.groups,
            r.skew_bound,
            r.liveness_timeout,
            r.counts.terms,
            r.digest
        );
        (r.trace.clone(), line)
    }
    fn violations<'a>(&self, r: &'a ElectorReport) -> &'a [Violation] {
        &r.violations
    }
    fn replay_command(&self, seed: u64) -> String {
        ElectorParams::replay_command(self, seed)
    }
    fn add(&self, summary: &mut ElectorSummary, r: &ElectorReport) {
        summary.add(r);
    }
    fn violation_count(&self, summary: &ElectorSummary) -> usize {
        summary.violations.len()
    }
}

impl Tier for ShardParams {
    type Report = ShardReport;
    type Summary = ShardSummary;
    fn check(&self) -> Result<(), SimError> {
        ShardParams::check(self)
    }
    fn run(&self, seed: u64) -> Result<ShardReport, SimError> {
        shards::run_seed(seed, self)
    }
    fn describe(&self, r: &ShardReport) -> (Vec<String>, String) {
        let settled: Vec<String> = r
            .settlings
            .iter()
            .map(|s| {
                let took = s.took.map_or("not settled".into(), |t| format!("{t:.3?}"));
                format!(
                    "{}: {took} (bound {:.3?}), moved {} ({})",
                    s.phase, s.bound, s.moved, s.minimum
                )
            })
            .collect();
        let line = format!(
            "seed {}: {} shards over {} member ids ({} notified), skew bound {:?}, {} terms, digest {:016x}\n  settled after {}",
            r.seed,
            r.shards,
            r.members,
            r.notifying,
            r.skew_bound,
            r.counts.terms,
            r.digest,
            settled.join("; ")
        );
        (r.trace.clone(), line)
    }
    fn violations<'a>(&self, r: &'a ShardReport) -> &'a [Violation] {
        &r.violations
    }
    fn replay_command(&self, seed: u64) -> String {
        ShardParams::replay_command(self, seed)
    }
    fn add(&self, summary: &mut ShardSummary, r: &ShardReport) {
        summary.add(r);
    }
    fn violation_count(&self, summary: &ShardSummary) -> usize {
        summary.violations.len()
    }
}
