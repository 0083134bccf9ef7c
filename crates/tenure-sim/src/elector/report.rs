//! What one elector-tier run found, and the summary over many.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use crate::faults::{FaultCounts, FaultKind};
use crate::report::{
    add_counts, by_reason, fault_lines, keep_closest, row, simulated_time, violations_line,
    RunRecord, Totals,
};
use crate::tier::{TierReport, TierSummary};

use super::PriorityOutcome;

/// Everything one seed's elector-tier run found.
#[derive(Clone, Debug)]
pub struct ElectorReport {
    /// The seed, the simulated span, the skew bound, the violations, the
    /// digest of the faults and the terms' work, and the trace of them.
    pub run: RunRecord,
    /// How many candidates ran.
    pub nodes: usize,
    /// How many groups each stood in.
    pub groups: usize,
    /// How many of them saw change notifications.
    pub notifying: usize,
    /// What the run counted.
    pub counts: ElectorCounts,
    /// Per group, time from the last fault healing to a term's work
    /// running, and the heal bound.
    pub heal: CheckedGaps,
    /// For each group the tail's crashed leader led, time from the crash to
    /// the next term's work, and the crash failover bound.
    pub crash: CheckedGaps,
    /// The least time from one candidate's work stopping to another's
    /// starting.
    pub closest_handover: Option<Duration>,
    /// With candidate priorities, what their checks measured.
    pub priority: Option<PriorityOutcome>,
}

impl fmt::Display for ElectorReport {
    /// The run in one line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = &self.run;
        write!(
            f,
            "seed {}: {} nodes ({} notified) in {} groups, skew bound {:?}, liveness timeout {:?}, {} terms, digest {:016x}",
            r.seed,
            self.nodes,
            self.notifying,
            self.groups,
            r.skew_bound,
            r.liveness_timeout,
            self.counts.terms,
            r.digest
        )
    }
}

impl TierReport for ElectorReport {
    fn record(&self) -> &RunRecord {
        &self.run
    }
}

/// Leaderless gaps a run measured, and the bound they were checked against.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckedGaps {
    /// The gaps.
    pub gaps: Vec<Duration>,
    /// The bound each had to keep.
    pub bound: Duration,
}

impl CheckedGaps {
    /// Each gap with its bound, as a summary keeps them.
    fn with_bound(&self) -> impl Iterator<Item = (Duration, Duration)> + '_ {
        self.gaps.iter().map(|&gap| (gap, self.bound))
    }
}

/// What an elector-tier run counts; a summary sums them over its runs.
#[derive(Clone, Debug, Default)]
pub struct ElectorCounts {
    /// Terms whose work ran, over all groups (a term's work run again after
    /// it failed counts again).
    pub terms: u64,
    /// `Event::Elected` events.
    pub elections: u64,
    /// Successive works of different candidates in a group.
    pub handovers: u64,
    /// Processes started (first starts and restarts).
    pub incarnations: u64,
    /// Terms ended, by [`tenure::EndReason::label`], from `Event::Ousted`.
    pub end_reasons: BTreeMap<&'static str, u64>,
    /// `Event::StoreHealth` events reporting a failure.
    pub store_alarms: u64,
    /// Faults injected, by kind.
    pub faults: FaultCounts,
}

impl ElectorCounts {
    /// Adds another run's counts.
    pub fn add(&mut self, other: &ElectorCounts) {
        self.terms += other.terms;
        self.elections += other.elections;
        self.handovers += other.handovers;
        self.incarnations += other.incarnations;
        add_counts(&mut self.end_reasons, &other.end_reasons);
        self.store_alarms += other.store_alarms;
        self.faults.add(&other.faults);
    }
}

/// Totals over many elector-tier runs, for the binary's table.
#[derive(Clone, Debug, Default)]
pub struct ElectorSummary {
    /// Seeds, simulated time, violations.
    pub runs: Totals,
    /// Groups checked, over all seeds.
    pub groups: u64,
    /// The runs' counts, summed.
    pub counts: ElectorCounts,
    /// Heal gaps with their bound.
    pub heal_gaps: Vec<(Duration, Duration)>,
    /// Tail crash gaps with their bound.
    pub crash_gaps: Vec<(Duration, Duration)>,
    /// The least hand-over time, and its seed.
    pub closest_handover: Option<(Duration, u64)>,
    /// Seeds run with candidate priorities.
    pub priority_seeds: u64,
    /// Their climbs to the highest priority, with their bounds and the
    /// preemptions the bounds allowed for.
    pub climbs: Vec<(Duration, Duration, usize)>,
    /// Groups checked for priority, by how many preemptions their bound
    /// allowed for.
    pub hops: BTreeMap<usize, u64>,
    /// Stale transfer requests written into leaders' records.
    pub forged: u64,
    /// Chains of priorities run under a leader that then crashed (its
    /// fail-over judged by the crash check).
    pub chains: u64,
}

impl TierSummary<ElectorReport> for ElectorSummary {
    fn add(&mut self, r: &ElectorReport) {
        self.runs.add(&r.run);
        self.groups += r.groups as u64;
        self.counts.add(&r.counts);
        self.heal_gaps.extend(r.heal.with_bound());
        self.crash_gaps.extend(r.crash.with_bound());
        keep_closest(&mut self.closest_handover, r.closest_handover, r.run.seed);
        if let Some(p) = &r.priority {
            self.priority_seeds += 1;
            self.climbs.extend(p.climbs.iter().copied());
            for &h in &p.hops {
                *self.hops.entry(h).or_insert(0) += 1;
            }
            self.forged += p.forged;
            self.chains += p.chains;
        }
    }

    fn totals(&self) -> &Totals {
        &self.runs
    }
}

pub(crate) fn gap_line(
    f: &mut fmt::Formatter<'_>,
    what: &str,
    gaps: &[(Duration, Duration)],
) -> fmt::Result {
    let mut g: Vec<Duration> = gaps.iter().map(|x| x.0).collect();
    g.sort();
    let worst = gaps
        .iter()
        .map(|(g, b)| g.as_secs_f64() / b.as_secs_f64())
        .fold(0.0, f64::max);
    match (g.get(g.len() / 2), g.last(), gaps.first()) {
        (Some(med), Some(max), Some((_, bound))) => writeln!(
            f,
            "  {what:<38} n={:<6} median {med:>9.3?}  max {max:>9.3?}  bound {bound:.3?}  worst gap/bound {:.0}%",
            gaps.len(),
            worst * 100.0
        ),
        _ => writeln!(f, "  {what:<38} n=0"),
    }
}

impl fmt::Display for ElectorSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        row(f, "seeds run (elector tier)", self.runs.seeds)?;
        row(f, "groups checked", self.groups)?;
        simulated_time(f, self.runs.sim_time)?;
        let c = &self.counts;
        row(f, "processes started", c.incarnations)?;
        row(f, "elections", c.elections)?;
        row(f, "terms whose work ran", c.terms)?;
        row(f, "hand-overs (new leader)", c.handovers)?;
        by_reason(f, "terms ended, by reason", &c.end_reasons)?;
        row(f, "store alarms", c.store_alarms)?;
        fault_lines(f, &c.faults, true, FaultKind::label)?;
        writeln!(f, "leaderless gaps")?;
        gap_line(f, "after the tail's leader crashed", &self.crash_gaps)?;
        gap_line(f, "after every fault healed", &self.heal_gaps)?;
        if let Some((c, seed)) = self.closest_handover {
            writeln!(
                f,
                "{:<40} {c:.3?} (seed {seed}): least time from one candidate's work to the next's",
                "closest hand-over"
            )?;
        }
        if self.priority_seeds > 0 {
            self.priority_lines(f)?;
        }
        violations_line(f, &self.runs.violations)
    }
}

impl ElectorSummary {
    /// The priority checks' lines: groups by the preemptions their bound
    /// allowed for, the climbs against their bounds, the stale requests.
    fn priority_lines(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let groups: u64 = self.hops.values().sum();
        let by_hops: Vec<String> = self
            .hops
            .iter()
            .map(|(h, n)| format!("{n} with {h}"))
            .collect();
        row(
            f,
            "priority: groups checked",
            format!(
                "{groups} in {} seeds (preemptions allowed for: {})",
                self.priority_seeds,
                by_hops.join(", ")
            ),
        )?;
        let already: Vec<_> = self.climbs.iter().filter(|c| c.2 == 0).collect();
        let preempted: Vec<_> = self.climbs.iter().filter(|c| c.2 > 0).collect();
        climb_line(f, "highest leads, no preemption needed", &already)?;
        climb_line(f, "highest leads, after preemption", &preempted)?;
        row(f, "  stale transfer requests written", self.forged)?;
        row(
            f,
            "  chains of priorities under a crashed leader",
            self.chains,
        )
    }
}

/// One line of climbs: how many, median and max, the range of their
/// bounds, and the worst climb against its bound.
fn climb_line(
    f: &mut fmt::Formatter<'_>,
    what: &str,
    climbs: &[&(Duration, Duration, usize)],
) -> fmt::Result {
    let mut took: Vec<Duration> = climbs.iter().map(|c| c.0).collect();
    took.sort();
    let worst = climbs
        .iter()
        .map(|c| c.0.as_secs_f64() / c.1.as_secs_f64())
        .fold(0.0, f64::max);
    let lo = climbs.iter().map(|c| c.1).min();
    let hi = climbs.iter().map(|c| c.1).max();
    match (took.get(took.len() / 2), took.last(), lo, hi) {
        (Some(med), Some(max), Some(lo), Some(hi)) => writeln!(
            f,
            "  {what:<38} n={:<6} median {med:>9.3?}  max {max:>9.3?}  bound {lo:.3?}..{hi:.3?}  worst climb/bound {:.0}%",
            took.len(),
            worst * 100.0
        ),
        _ => writeln!(f, "  {what:<38} n=0"),
    }
}
