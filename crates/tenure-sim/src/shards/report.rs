//! What one sharded-tier run found, and the summary over many.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use crate::elector::report::gap_line;
use crate::faults::{FaultCounts, FaultKind};
use crate::report::{
    add_counts, by_reason, fault_lines, row, simulated_time, violations_line, RunRecord, Totals,
};
use crate::tier::{TierReport, TierSummary};

/// A change of the tail after which the set must settle.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// Every member started at the same instant (even seeds), before the
    /// fault phase.
    Start,
    /// Every fault of the fault phase has healed.
    Settle,
    /// A member holding shards crashed.
    Crash,
    /// A new member joined.
    Join,
    /// A member holding shards left gracefully.
    Leave,
}

impl Phase {
    /// Every phase of the tail, in the order it runs them (the
    /// simultaneous start is not one: it opens even seeds only).
    pub const ALL: [Phase; 4] = [Phase::Settle, Phase::Crash, Phase::Join, Phase::Leave];
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Phase::Start => "simultaneous start",
            Phase::Settle => "heal of every fault",
            Phase::Crash => "crash",
            Phase::Join => "join",
            Phase::Leave => "graceful leave",
        })
    }
}

/// How the set settled after one change of the tail.
#[derive(Clone, Debug, PartialEq)]
pub struct Settling {
    /// The change.
    pub phase: Phase,
    /// From the change to the last shard's current work starting, if the
    /// set had settled (every shard held, every member agreeing on the
    /// members) when checked.
    pub took: Option<Duration>,
    /// The bound it was checked against.
    pub bound: Duration,
    /// Shards whose holder changed (not counted for [`Phase::Settle`] and
    /// [`Phase::Start`]).
    pub moved: usize,
    /// The fewest that had to move: the crashed or leaving member's shards,
    /// or the newcomer's share.
    pub minimum: usize,
}

/// Everything one seed's sharded-tier run found.
#[derive(Clone, Debug)]
pub struct ShardReport {
    /// The seed, the simulated span, the skew bound, the violations, the
    /// digest of the changes, faults and the terms' work, and the trace of
    /// them.
    pub run: RunRecord,
    /// Member ids that ran.
    pub members: usize,
    /// Shards in the set.
    pub shards: usize,
    /// Whether every member started at the same instant.
    pub started_together: bool,
    /// Members whose views of the store notified.
    pub notifying: usize,
    /// What the run counted.
    pub counts: ShardCounts,
    /// How the set settled after each change of the tail.
    pub settlings: Vec<Settling>,
    /// The library's documented crash bound, for comparison with the
    /// derived one in [`settlings`](Self::settlings).
    pub documented_crash_bound: Duration,
}

impl fmt::Display for ShardReport {
    /// The run in a line, and how the set settled after each change of the
    /// tail in a second one.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = &self.run;
        let settled: Vec<String> = self
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
        write!(
            f,
            "seed {}: {} shards over {} member ids ({} notified), skew bound {:?}, {} terms, digest {:016x}\n  settled after {}",
            r.seed,
            self.shards,
            self.members,
            self.notifying,
            r.skew_bound,
            self.counts.terms,
            r.digest,
            settled.join("; ")
        )
    }
}

impl TierReport for ShardReport {
    fn record(&self) -> &RunRecord {
        &self.run
    }
}

/// What a sharded-tier run counts; a summary sums them over its runs.
#[derive(Clone, Debug, Default)]
pub struct ShardCounts {
    /// Terms worked, over all shards.
    pub terms: u64,
    /// `ShardEvent::Acquired` events.
    pub acquisitions: u64,
    /// Terms ended, by [`tenure::EndReason::label`], from
    /// `ShardEvent::Released`.
    pub releases: BTreeMap<&'static str, u64>,
    /// `ShardEvent::MembersChanged` events.
    pub views: u64,
    /// Processes started (first starts and restarts).
    pub incarnations: u64,
    /// New members that joined.
    pub joins: u64,
    /// Changes of a changing catalog's source (splits, merges, shards
    /// added and removed).
    pub reshards: u64,
    /// Parents marked finished by their holders.
    pub finished: u64,
    /// Hostile catalog faults injected (`catalog_hostile`): part 0s
    /// planted, sources failing on one member.
    pub hostile: u64,
    /// Catalog part reads by every member.
    pub catalog_reads: u64,
    /// Faults injected, by kind (graceful leaves count as shutdowns).
    pub faults: FaultCounts,
}

impl ShardCounts {
    /// Adds another run's counts.
    pub fn add(&mut self, other: &ShardCounts) {
        self.terms += other.terms;
        self.acquisitions += other.acquisitions;
        add_counts(&mut self.releases, &other.releases);
        self.views += other.views;
        self.incarnations += other.incarnations;
        self.joins += other.joins;
        self.reshards += other.reshards;
        self.finished += other.finished;
        self.hostile += other.hostile;
        self.catalog_reads += other.catalog_reads;
        self.faults.add(&other.faults);
    }
}

/// Totals over many sharded-tier runs, for the binary's table.
#[derive(Clone, Debug, Default)]
pub struct ShardSummary {
    /// Seeds, simulated time, violations.
    pub runs: Totals,
    /// Shards checked, over all seeds.
    pub shards: u64,
    /// Member ids, over all seeds.
    pub members: u64,
    /// The runs' counts, summed.
    pub counts: ShardCounts,
    /// Runs whose members started at the same instant.
    pub started_together: u64,
    /// Per phase, each settling time with its bound.
    pub gaps: BTreeMap<Phase, Vec<(Duration, Duration)>>,
    /// Per phase, shards moved and the minimum, summed.
    pub moves: BTreeMap<Phase, (u64, u64)>,
    /// The documented crash bound (the same for every seed of one run).
    pub documented_crash_bound: Option<Duration>,
}

impl TierSummary<ShardReport> for ShardSummary {
    fn add(&mut self, r: &ShardReport) {
        self.runs.add(&r.run);
        self.shards += r.shards as u64;
        self.members += r.members as u64;
        self.started_together += u64::from(r.started_together);
        self.counts.add(&r.counts);
        for s in &r.settlings {
            if let Some(took) = s.took {
                self.gaps.entry(s.phase).or_default().push((took, s.bound));
            }
            if !matches!(s.phase, Phase::Settle | Phase::Start) {
                let m = self.moves.entry(s.phase).or_default();
                m.0 += s.moved as u64;
                m.1 += s.minimum as u64;
            }
        }
        self.documented_crash_bound = Some(r.documented_crash_bound);
    }

    fn totals(&self) -> &Totals {
        &self.runs
    }
}

impl fmt::Display for ShardSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        row(f, "seeds run (sharded tier)", self.runs.seeds)?;
        row(f, "shards checked", self.shards)?;
        row(f, "member ids", self.members)?;
        simulated_time(f, self.runs.sim_time)?;
        let c = &self.counts;
        row(f, "processes started", c.incarnations)?;
        row(f, "new members joined", c.joins)?;
        if c.reshards > 0 {
            row(
                f,
                "catalog changes (splits, merges, adds, removals)",
                c.reshards,
            )?;
            row(f, "parents marked finished", c.finished)?;
            row(f, "catalog part reads", c.catalog_reads)?;
        }
        if c.hostile > 0 {
            row(
                f,
                "hostile catalog faults (part 0s planted, sources failing)",
                c.hostile,
            )?;
        }
        row(f, "shard terms acquired", c.acquisitions)?;
        row(f, "terms worked", c.terms)?;
        row(f, "member-list changes seen", c.views)?;
        by_reason(f, "shard terms ended, by reason", &c.releases)?;
        // A member's graceful leave is counted as a shutdown.
        fault_lines(f, &c.faults, true, |k| match k {
            FaultKind::Shutdown => "graceful leave",
            _ => k.label(),
        })?;
        writeln!(f, "settled after (every shard held, balanced)")?;
        for phase in std::iter::once(Phase::Start).chain(Phase::ALL) {
            let gaps = self.gaps.get(&phase).map_or(&[][..], Vec::as_slice);
            gap_line(f, &format!("the {phase}"), gaps)?;
        }
        if let Some(d) = self.documented_crash_bound {
            writeln!(f, "  {:<38} {d:.3?}", "documented crash bound")?;
        }
        writeln!(f, "shards moved (minimum)")?;
        for (phase, (moved, minimum)) in &self.moves {
            writeln!(f, "  {:<38} {moved} ({minimum})", format!("by the {phase}"))?;
        }
        violations_line(f, &self.runs.violations)
    }
}
