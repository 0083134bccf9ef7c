//! What one run found, and the summary over many runs.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use tenure::Timing;
use tenure_testkit::{TermLog, TermProblem, TermSpan};
use tokio::time::Instant;

use crate::clock::SimTime;
use crate::faults::{FaultCounts, FaultKind};
use crate::tier::{TierReport, TierSummary};
use crate::trace::Trace;

/// The kind of a broken invariant.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ViolationKind {
    /// Two terms were valid at the same real instant.
    Overlap,
    /// A token did not rise across elections, changed on renewal, or the
    /// stored token fell.
    TokenOrder,
    /// No term started within a bound that should have held.
    Liveness,
    /// The machine broke its own contract (elected twice, renewed a term it
    /// does not hold, wrote a record that does not decode).
    Contract,
    /// A node asked to be woken at an instant already past, and a tick there
    /// changed nothing, over and over: a driver that sleeps until the
    /// machine's next wake-up would spin at 100 % CPU.
    BusyWait,
    /// A term's work was allowed to run past the term's deadline: the end of
    /// a term gave the work more time than the term had left (or, in the
    /// elector tier, the work was still running after its deadline).
    WorkPastDeadline,
    /// A sharded set broke its assignment's promises: a settled member held
    /// more than `⌈shards / members⌉` shards, a membership change moved more
    /// shards than it had to, or a settled assignment changed with no
    /// membership change.
    Balance,
    /// A set following a changing catalog worked a child shard before its
    /// parents were marked finished.
    ParentOrder,
    /// With candidate priorities (the elector tier's `--priorities`), once
    /// every fault had healed and membership was stable, a group's leader
    /// was not a live candidate of the highest priority within the derived
    /// bound.
    Priority,
    /// With candidate priorities, leadership moved in the stable tail other
    /// than to a strictly higher priority, or moved again once a candidate
    /// of the highest priority led.
    Oscillation,
}

impl fmt::Display for ViolationKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ViolationKind::Overlap => "overlap",
            ViolationKind::TokenOrder => "token order",
            ViolationKind::Liveness => "liveness",
            ViolationKind::Contract => "contract",
            ViolationKind::BusyWait => "busy wait",
            ViolationKind::WorkPastDeadline => "work past deadline",
            ViolationKind::Balance => "balance",
            ViolationKind::ParentOrder => "parent order",
            ViolationKind::Priority => "priority",
            ViolationKind::Oscillation => "oscillation",
        })
    }
}

/// One broken invariant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The seed that produced it.
    pub seed: u64,
    /// What was broken.
    pub kind: ViolationKind,
    /// The real (simulated) instant it was detected.
    pub at: SimTime,
    /// The nodes involved.
    pub nodes: Vec<usize>,
    /// The tokens involved, in the order of `nodes` where that applies.
    pub tokens: Vec<u64>,
    /// A sentence with the particulars.
    pub detail: String,
}

/// The violations one run finds, each naming the run's seed.
#[derive(Debug)]
pub(crate) struct Violations {
    seed: u64,
    found: Vec<Violation>,
}

impl Violations {
    /// None yet, in run `seed`.
    pub(crate) fn new(seed: u64) -> Self {
        Violations {
            seed,
            found: Vec::new(),
        }
    }

    /// Records a violation found at `at`.
    pub(crate) fn add(
        &mut self,
        kind: ViolationKind,
        at: SimTime,
        nodes: Vec<usize>,
        tokens: Vec<u64>,
        detail: String,
    ) {
        self.found
            .push(Violation::new(self.seed, kind, at, nodes, tokens, detail));
    }

    /// Takes the violations found so far, for the run's report.
    pub(crate) fn take(&mut self) -> Vec<Violation> {
        std::mem::take(&mut self.found)
    }

    /// The violations found, for the run's report.
    pub(crate) fn into_vec(self) -> Vec<Violation> {
        self.found
    }
}

impl std::ops::Deref for Violations {
    type Target = [Violation];

    fn deref(&self) -> &[Violation] {
        &self.found
    }
}

impl Violation {
    /// A violation found in run `seed`.
    pub(crate) fn new(
        seed: u64,
        kind: ViolationKind,
        at: SimTime,
        nodes: Vec<usize>,
        tokens: Vec<u64>,
        detail: String,
    ) -> Self {
        Violation {
            seed,
            kind,
            at,
            nodes,
            tokens,
            detail,
        }
    }
}

/// The violations a term log of the elector or sharded tier shows (two
/// terms at once, tokens out of order), each naming `place` (`group g0`,
/// `shard 3`) and `what` the log records. `node` tells a span's candidate
/// by number; `sim_time` turns the tier's tokio instants into simulated
/// time.
pub(crate) fn term_violations(
    seed: u64,
    log: &TermLog,
    place: &str,
    what: &str,
    node: impl Fn(&TermSpan) -> usize,
    sim_time: impl Fn(Instant) -> SimTime,
) -> Vec<Violation> {
    log.problems()
        .into_iter()
        .map(|p| {
            let (kind, a, b) = match &p {
                TermProblem::Overlap { first, second } => (ViolationKind::Overlap, first, second),
                TermProblem::TokenOrder { earlier, later } => {
                    (ViolationKind::TokenOrder, earlier, later)
                }
            };
            let end = |span: &TermSpan| {
                span.ended
                    .map_or("still running".into(), |e| format!("to {}", sim_time(e)))
            };
            Violation::new(
                seed,
                kind,
                sim_time(b.elected),
                vec![node(a), node(b)],
                vec![a.token, b.token],
                format!(
                    "{place}: {what}: {p}: {} from {} {}, {} from {} {}",
                    a.candidate,
                    sim_time(a.elected),
                    end(a),
                    b.candidate,
                    sim_time(b.elected),
                    end(b)
                ),
            )
        })
        .collect()
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "seed {}: {} violation at {}: nodes {:?}, tokens {:?}: {}",
            self.seed, self.kind, self.at, self.nodes, self.tokens, self.detail
        )
    }
}

/// What every tier's report of one seed's run holds: the seed that
/// replays it, the simulated span, the skew bound and liveness timeout the
/// seed drew, the invariants it broke, and the digest and trace that tell
/// one run from another.
#[derive(Clone, Debug)]
pub struct RunRecord {
    /// The seed that replays the run.
    pub seed: u64,
    /// The simulated span.
    pub sim_time: Duration,
    /// The skew bound this seed configured, if any.
    pub skew_bound: Option<Duration>,
    /// The liveness timeout this seed configured, if any (never in the
    /// sharded tier, whose members do not pulse).
    pub liveness_timeout: Option<Duration>,
    /// Broken invariants.
    pub violations: Vec<Violation>,
    /// A digest of the run's trace (kept or not), for replay comparisons.
    pub digest: u64,
    /// The human-readable trace, if asked for.
    pub trace: Vec<String>,
}

impl RunRecord {
    /// The record of run `seed`, which ended at `end` and ran with `timing`
    /// (its skew bound and liveness timeout), with its `trace`.
    pub(crate) fn new(
        seed: u64,
        end: SimTime,
        timing: &Timing,
        violations: Vec<Violation>,
        trace: Trace,
    ) -> Self {
        RunRecord {
            seed,
            sim_time: end.as_duration(),
            skew_bound: timing.max_clock_skew,
            liveness_timeout: timing.liveness_timeout,
            violations,
            digest: trace.digest(),
            trace: trace.into_lines(),
        }
    }
}

/// What every tier's summary totals over its runs: how many, how much
/// simulated time, and every violation.
#[derive(Clone, Debug, Default)]
pub struct Totals {
    /// Seeds run.
    pub seeds: u64,
    /// Total simulated time.
    pub sim_time: Duration,
    /// Every violation.
    pub violations: Vec<Violation>,
}

impl Totals {
    /// Adds one run.
    pub fn add(&mut self, run: &RunRecord) {
        self.seeds += 1;
        self.sim_time += run.sim_time;
        self.violations.extend(run.violations.iter().cloned());
    }
}

/// A crash of a node that held a valid term, and how long until the next
/// election.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CrashGap {
    /// When the leader crashed.
    pub at: SimTime,
    /// The crashed leader.
    pub node: usize,
    /// The crashed leader's token, to tell its term from the next.
    pub token: u64,
    /// Time from the crash to the next election, if one came.
    pub gap: Option<Duration>,
    /// Nothing else went wrong around it, so it was checked against the
    /// crash failover bound.
    pub clean: bool,
    /// The deliberate crash in the fault-free tail.
    pub tail: bool,
}

/// Everything one seed's run found.
#[derive(Clone, Debug)]
pub struct SimReport {
    /// The seed, the simulated span, the skew bound, the violations, the
    /// digest of every event and action, and the trace.
    pub run: RunRecord,
    /// How many candidates ran.
    pub nodes: usize,
    /// Whether the store sent change notifications.
    pub notify: bool,
    /// `Action::Elected` events.
    pub elections: u64,
    /// Elections of a different node than the previous election's.
    pub handovers: u64,
    /// `Action::Renewed` events.
    pub renewals: u64,
    /// Faults injected, by kind.
    pub faults: FaultCounts,
    /// Leader crashes and the gaps that followed.
    pub crash_gaps: Vec<CrashGap>,
    /// The crash failover bound checked (see [`crate::LivenessBounds`]).
    pub crash_bound: Duration,
    /// The heal bound checked.
    pub heal_bound: Duration,
    /// Time from the last fault healing to a valid term.
    pub heal_gap: Option<Duration>,
    /// The least real time from the end of one term's validity to the next
    /// election: how close the run came to an overlap.
    pub closest_handover: Option<Duration>,
    /// Allowed but noteworthy machine behaviour, counted.
    pub notes: BTreeMap<&'static str, u64>,
    /// Terms ended, by [`tenure::machine::EndReason::label`].
    pub end_reasons: BTreeMap<&'static str, u64>,
    /// Takeovers allowed by the wall-clock rule before the monotonic
    /// takeover wait had passed since the challenger first saw the record
    /// (only in seeds with a skew bound).
    pub early_takeovers: u64,
    /// The most any early takeover came before the monotonic wait would
    /// have ended, on the challenger's clock.
    pub earliest_takeover: Option<Duration>,
    /// Events processed.
    pub events: u64,
}

impl fmt::Display for SimReport {
    /// The run in one line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = &self.run;
        write!(
            f,
            "seed {}: {} nodes, skew bound {:?}, liveness timeout {:?}, notifications {}, digest {:016x}",
            r.seed, self.nodes, r.skew_bound, r.liveness_timeout, self.notify, r.digest
        )
    }
}

impl TierReport for SimReport {
    fn record(&self) -> &RunRecord {
        &self.run
    }
}

/// Totals over many runs, for the binary's table.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// Seeds, simulated time, violations.
    pub runs: Totals,
    /// Total elections.
    pub elections: u64,
    /// Total hand-overs.
    pub handovers: u64,
    /// Total renewals.
    pub renewals: u64,
    /// Total events.
    pub events: u64,
    /// Faults by kind.
    pub faults: FaultCounts,
    /// Gaps after checked (undisturbed) leader crashes, with their bound.
    pub clean_gaps: Vec<(Duration, Duration)>,
    /// Gaps after every leader crash, disturbed or not.
    pub all_gaps: Vec<Duration>,
    /// Leader crashes with no election before the run ended.
    pub unresolved_crashes: u64,
    /// Gaps from healing to a valid term, with their bound.
    pub heal_gaps: Vec<(Duration, Duration)>,
    /// The least time from a term's end to the next election, and its seed.
    pub closest_handover: Option<(Duration, u64)>,
    /// Notes by kind.
    pub notes: BTreeMap<&'static str, u64>,
    /// Terms ended, by reason.
    pub end_reasons: BTreeMap<&'static str, u64>,
    /// Seeds with a skew bound (the early takeover on).
    pub skew_seeds: u64,
    /// Seeds with a skew bound in which some early takeover happened.
    pub skew_seeds_with_early_takeover: u64,
    /// Early takeovers in all.
    pub early_takeovers: u64,
    /// The most any early takeover came before the monotonic wait.
    pub earliest_takeover: Option<Duration>,
}

impl TierSummary<SimReport> for Summary {
    fn add(&mut self, r: &SimReport) {
        self.runs.add(&r.run);
        self.elections += r.elections;
        self.handovers += r.handovers;
        self.renewals += r.renewals;
        self.events += r.events;
        self.faults.add(&r.faults);
        for c in &r.crash_gaps {
            match c.gap {
                Some(g) => {
                    self.all_gaps.push(g);
                    if c.clean {
                        self.clean_gaps.push((g, r.crash_bound));
                    }
                }
                None => self.unresolved_crashes += 1,
            }
        }
        if let Some(g) = r.heal_gap {
            self.heal_gaps.push((g, r.heal_bound));
        }
        keep_closest(&mut self.closest_handover, r.closest_handover, r.run.seed);
        add_counts(&mut self.notes, &r.notes);
        add_counts(&mut self.end_reasons, &r.end_reasons);
        if r.run.skew_bound.is_some() {
            self.skew_seeds += 1;
            if r.early_takeovers > 0 {
                self.skew_seeds_with_early_takeover += 1;
            }
        }
        self.early_takeovers += r.early_takeovers;
        if let Some(e) = r.earliest_takeover {
            self.earliest_takeover = Some(self.earliest_takeover.map_or(e, |x| x.max(e)));
        }
    }

    fn totals(&self) -> &Totals {
        &self.runs
    }
}

fn median(v: &mut [Duration]) -> Option<Duration> {
    v.sort();
    v.get(v.len() / 2).copied()
}

fn gap_line(f: &mut fmt::Formatter<'_>, what: &str, gaps: &[(Duration, Duration)]) -> fmt::Result {
    let mut g: Vec<Duration> = gaps.iter().map(|x| x.0).collect();
    let max = g.iter().max().copied();
    let med = median(&mut g);
    let worst_ratio = gaps
        .iter()
        .map(|(g, b)| g.as_secs_f64() / b.as_secs_f64())
        .fold(0.0, f64::max);
    let bounds: Vec<Duration> = gaps.iter().map(|x| x.1).collect();
    let (bmin, bmax) = (bounds.iter().min(), bounds.iter().max());
    match (max, med, bmin, bmax) {
        (Some(max), Some(med), Some(bmin), Some(bmax)) => writeln!(
            f,
            "  {what:<38} n={:<6} median {med:>9.3?}  max {max:>9.3?}  bound {bmin:.3?}..{bmax:.3?}  worst gap/bound {:.0}%",
            gaps.len(),
            worst_ratio * 100.0
        ),
        _ => writeln!(f, "  {what:<38} n=0"),
    }
}

/// One line of a summary: a label in a column of 40, then the value.
pub(crate) fn row(
    f: &mut fmt::Formatter<'_>,
    label: &str,
    value: impl fmt::Display,
) -> fmt::Result {
    writeln!(f, "{label:<40} {value}")
}

/// The summary line of the simulated time, in hours and seconds.
pub(crate) fn simulated_time(f: &mut fmt::Formatter<'_>, time: Duration) -> fmt::Result {
    let secs = time.as_secs_f64();
    row(
        f,
        "simulated time",
        format!("{:.1} h ({secs:.0} s)", secs / 3600.0),
    )
}

/// The summary's last line: how many violations, and of which kinds.
pub(crate) fn violations_line(f: &mut fmt::Formatter<'_>, violations: &[Violation]) -> fmt::Result {
    let mut by_kind: BTreeMap<String, usize> = BTreeMap::new();
    for v in violations {
        *by_kind.entry(v.kind.to_string()).or_insert(0) += 1;
    }
    write!(f, "{:<40} {}", "violations", violations.len())?;
    for (k, n) in by_kind {
        write!(f, "  [{k}: {n}]")?;
    }
    writeln!(f)
}

/// The faults injected: a heading with their total, then one indented line
/// per kind, named by `label`: every kind, or with `injected_only` those
/// injected at least once.
pub(crate) fn fault_lines(
    f: &mut fmt::Formatter<'_>,
    faults: &FaultCounts,
    injected_only: bool,
    label: impl Fn(FaultKind) -> &'static str,
) -> fmt::Result {
    writeln!(f, "faults injected ({} in all)", faults.total())?;
    for k in FaultKind::ALL {
        if !injected_only || faults[k] > 0 {
            writeln!(f, "  {:<38} {}", label(k), faults[k])?;
        }
    }
    Ok(())
}

/// Adds one run's counts, by reason or kind, to the totals.
pub(crate) fn add_counts(
    totals: &mut BTreeMap<&'static str, u64>,
    run: &BTreeMap<&'static str, u64>,
) {
    for (k, v) in run {
        *totals.entry(k).or_insert(0) += v;
    }
}

/// Keeps the closest hand-over over many runs, and its seed: `run`'s, from
/// seed `seed`, if it is closer.
pub(crate) fn keep_closest(best: &mut Option<(Duration, u64)>, run: Option<Duration>, seed: u64) {
    if let Some(c) = run {
        if best.is_none_or(|(b, _)| c < b) {
            *best = Some((c, seed));
        }
    }
}

/// A heading, then one indented line per reason and its count.
pub(crate) fn by_reason(
    f: &mut fmt::Formatter<'_>,
    heading: &str,
    counts: &BTreeMap<&'static str, u64>,
) -> fmt::Result {
    writeln!(f, "{heading}")?;
    for (k, v) in counts {
        writeln!(f, "  {k:<38} {v}")?;
    }
    Ok(())
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        row(f, "seeds run", self.runs.seeds)?;
        simulated_time(f, self.runs.sim_time)?;
        row(f, "events processed", self.events)?;
        row(f, "elections", self.elections)?;
        row(f, "hand-overs (new leader)", self.handovers)?;
        row(f, "renewals", self.renewals)?;
        by_reason(f, "terms ended, by reason", &self.end_reasons)?;
        fault_lines(f, &self.faults, false, FaultKind::label)?;
        writeln!(f, "leaderless gaps")?;
        gap_line(f, "after an undisturbed leader crash", &self.clean_gaps)?;
        let mut all = self.all_gaps.clone();
        match (all.iter().max().copied(), median(&mut all)) {
            (Some(max), Some(med)) => writeln!(
                f,
                "  {:<38} n={:<6} median {med:>9.3?}  max {max:>9.3?}  (not bounded: other faults overlap)",
                "after any leader crash",
                all.len()
            )?,
            _ => writeln!(f, "  {:<38} n=0", "after any leader crash")?,
        }
        if self.unresolved_crashes > 0 {
            writeln!(
                f,
                "  {:<38} {}",
                "leader crashes with no later election", self.unresolved_crashes
            )?;
        }
        gap_line(f, "after every fault healed", &self.heal_gaps)?;
        write!(
            f,
            "{:<40} {} in {} of {} seeds with a skew bound",
            "early takeovers (wall-clock rule)",
            self.early_takeovers,
            self.skew_seeds_with_early_takeover,
            self.skew_seeds
        )?;
        match self.earliest_takeover {
            Some(e) => writeln!(f, ", up to {e:.3?} before the monotonic wait")?,
            None => writeln!(f)?,
        }
        if let Some((c, seed)) = self.closest_handover {
            writeln!(
                f,
                "{:<40} {c:.3?} (seed {seed}): least time from a term's end to the next election",
                "closest hand-over"
            )?;
        }
        if !self.notes.is_empty() {
            writeln!(f, "notes (allowed, worth knowing)")?;
            for (k, v) in &self.notes {
                writeln!(f, "  {k:<70} {v}")?;
            }
        }
        violations_line(f, &self.runs.violations)
    }
}
