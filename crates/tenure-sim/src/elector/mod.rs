//! The elector tier: the real [`tenure::Elector`]s of every candidate (the
//! engine that runs their machines, its batched operations and change feed,
//! the publisher, the terms) over one [`tenure::MemoryStore`], each
//! candidate process seeing the store through its own [`tenure::Faults`],
//! all on tokio's paused clock.
//!
//! The machine tier drives [`tenure::machine::Machine`] directly; this tier
//! checks the async shell around it, which the machine tier cannot see.
//! Each candidate process stands in one to a few groups at once (drawn per
//! seed), on one store handle, so its engine batches and coalesces the
//! groups' operations; every group is checked on its own.
//!
//! * **Clocks**: each candidate has its own drifting, offset
//!   [`NodeClock`](crate::NodeClock) (as in the machine tier), read on
//!   tokio's paused timeline, which is the run's real time. Tokio's timers
//!   fire on whole milliseconds, up to 1 ms after the instant asked for.
//! * **Faults**, planned from the seed: crashes (the application and its
//!   work stop at once, the process never reaches the store again, a new
//!   incarnation starts later), windows in which one candidate's operations
//!   hang (partition), are slow (often past the operation timeout), fail,
//!   or apply with their replies lost; resignations; graceful shutdowns and
//!   restarts; stalled liveness pulses; and in some seeds a storm that cuts
//!   every candidate off until the fault phase ends. Some candidates' views
//!   of the store send change notifications, others poll.
//! * **Work**: each candidate's application runs
//!   [`Elector::run_while_leader`](tenure::Elector::run_while_leader) in a
//!   loop for each group; each term's work is drawn from the seed: it stops
//!   when told (after lingering a while), ignores the cancellation until it
//!   is dropped, quits early, or fails. Resignations hit one group; crashes,
//!   shutdowns and stalls the whole process.
//! * **Checker**, per group: every term's work records when it started and
//!   when it stopped ([`tenure_testkit::TermLog::open`]), and so does every
//!   term an elector publishes ([`tenure_testkit::TermLog::add`]); no two
//!   spans of either log may overlap, and tokens must rise. No work may
//!   start on a term past its deadline, nor run past the deadline (beyond
//!   the timer's millisecond). No candidate may busy-wait (see the clock
//!   module). Once every fault has healed every group must have a valid
//!   term within the heal bound, and keep it; after a crash of a leader in
//!   the tail its groups must have a new term within the crash bound
//!   ([`LivenessBounds`]).
//! * **Priorities** (`--priorities`, [`ElectorTier::priorities`]): each
//!   candidate is built with a priority drawn from the seed (levels 0 to
//!   3, some none, so ties are common) and the seed's preemption delay
//!   (the default term, zero, or up to two terms), and higher priorities
//!   preempt lower ones throughout the faults. In half the seeds the
//!   highest-priority candidates crash a term before the faults end and
//!   come back as they end, so the tail starts with a climb. With every
//!   fault healed and membership stable, each group's leader must be a
//!   live candidate of the highest priority within `heal + hops·hop`
//!   after the heal ([`ViolationKind::Priority`]; `hop`, one preemption,
//!   is derived in the `priority` module: observe the term, the delay, the
//!   request, the leader's next renewal noticing it, the drain, the
//!   reserved release taken; `hops` is the number of distinct priorities
//!   above the heal leader's among the live candidates); after the heal
//!   bound leadership may move only to a strictly higher priority, and not
//!   at all once the group's bound has passed, until the tail's crash
//!   ([`ViolationKind::Oscillation`]), while stale transfer requests (a
//!   priority not above the leader's) are written into leaders' records
//!   and must be declined. A hand-over under way at the heal check counts
//!   as a term for the heal bound.
//!
//! The fault schedule, the clocks, latencies and the work's behaviour all
//! derive from the seed; the candidates' retry jitter and incarnations are
//! drawn by the electors themselves, so a seed run again follows the same
//! schedule but may differ in detail.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tenure::{Config, Elector, MemoryStore, Timing};
use tenure_testkit::TermLog;

use crate::checker::LivenessBounds;
use crate::clock::SimTime;
use crate::faults::FaultCounts;
use crate::params::SimError;
use crate::paused::{self, lock, run_paused, Findings, Stage};
use crate::report::ViolationKind;

pub(crate) mod behaviour;
mod chain;
pub(crate) mod clock;
mod node;
mod params;
pub(crate) mod plan;
mod priority;
pub(crate) mod report;
pub(crate) mod windows;

pub use params::{ElectorFaultRates, ElectorParams, ElectorTier};
pub use report::{CheckedGaps, ElectorCounts, ElectorReport, ElectorSummary};
pub use windows::StoreTroubleRates;

use clock::SimClock;
use plan::Planned;
use priority::Priorities;
pub use priority::PriorityOutcome;

/// The name of the `g`-th group.
fn group_name(g: usize) -> String {
    format!("sim-{g}")
}

/// Runs one seed of the elector tier to the end and reports what the
/// checker found.
///
/// Fails only if the parameters are invalid or the runtime cannot start;
/// broken invariants are in the report's
/// [`RunRecord::violations`](crate::RunRecord::violations).
///
/// ```
/// use tenure_sim::elector::{run_seed, ElectorParams};
/// let mut params = ElectorParams::default();
/// params.shared.fault_phase = std::time::Duration::from_secs(20);
/// let report = run_seed(7, &params)?;
/// assert!(report.counts.terms > 0);
/// assert!(report.run.violations.is_empty(), "{:?}", report.run.violations);
/// # Ok::<(), tenure_sim::SimError>(())
/// ```
pub fn run_seed(seed: u64, params: &ElectorParams) -> Result<ElectorReport, SimError> {
    params.check()?;
    run_paused(async { Ok(Cluster::new(seed, params)?.run().await) })
}

/// One process of a candidate: one elector per group, on clones of one
/// store handle.
type Incarnation = paused::Incarnation<Vec<Elector>>;

#[derive(Debug)]
enum Ev {
    Start(usize),
    Inject(Planned),
    Storm,
    TailStart,
    HealCheck,
    /// The priority bound of a group has passed.
    PriorityCheck(usize),
    /// A stale transfer request is written into a group's record.
    Forge(usize),
    /// The highest-priority candidates crash, to start again as the fault
    /// phase ends.
    TopCrash,
    /// With priorities, in half the seeds: the candidates above the lowest
    /// priority crash, to come back one by one under a leader of the lowest.
    ChainStart,
    /// That leader crashes while they look for its renewals.
    ChainKill,
    /// The chain's control: an unmarked request into a group's record.
    ChainForge(usize),
    TailCrash,
    CrashCheck,
    End,
}

/// One seed's cluster.
struct Cluster {
    params: ElectorParams,
    config: Config,
    timing: Timing,
    rng: StdRng,
    store: MemoryStore,
    /// The candidates, their processes and the timeline.
    stage: Stage<Ev, Vec<Elector>>,
    /// Per candidate, the real instant (ns) before which its application
    /// does not pulse.
    stalled_until: Vec<Arc<AtomicU64>>,
    /// Per group, spans of every term's work.
    work: Vec<TermLog>,
    /// Per group, spans of every term the electors published.
    published: Vec<TermLog>,
    faults: FaultCounts,
    bounds: LivenessBounds,
    /// Per group, the leader when the heal bound had passed.
    heal_leaders: Vec<Option<(usize, u64)>>,
    /// When the tail's leader crashed, and the groups it led then.
    tail_crash: Option<(SimTime, Vec<usize>)>,
    /// With `--priorities`: every candidate's priority, the delay and the
    /// hop bound.
    priorities: Option<Priorities>,
    /// Per group, when its priority bound passes (set at the heal check).
    priority_due: Vec<Option<SimTime>>,
    /// Per group, the leader when its priority bound had passed.
    priority_leaders: Vec<Option<(usize, u64)>>,
    /// What the priority checks measured.
    priority: PriorityOutcome,
    /// With priorities: the chain's own random stream, in the seeds that
    /// run it.
    chain_rng: Option<StdRng>,
    /// When the chain began (the end of the stable tail).
    chain_started: Option<SimTime>,
}

impl Cluster {
    fn new(seed: u64, params: &ElectorParams) -> Result<Self, SimError> {
        let mut rng = StdRng::seed_from_u64(seed);
        let n = rng.gen_range(params.tier.nodes.clone());
        let groups = rng.gen_range(params.tier.groups.clone());
        let (skew, config, timing) = params.shared.draw_election(&mut rng, true)?;
        // Slow windows make operations take up to 1.5 operation timeouts.
        let slow = LivenessBounds::slow_op(&timing);
        let bounds = LivenessBounds::new(&timing, params.shared.latency, slow);
        let priorities = params
            .tier
            .priorities
            .then(|| Priorities::draw(seed, n, &timing, params.shared.latency));
        let mut stage = Stage::new(seed, params.shared.fault_phase, params.shared.trace);
        for i in 0..n {
            stage.add_slot(format!("node-{i}"), &mut rng, &params.shared, skew);
        }
        let mut cluster = Cluster {
            params: params.clone(),
            config,
            timing,
            rng,
            store: MemoryStore::new(),
            stage,
            stalled_until: (0..n).map(|_| Arc::new(AtomicU64::new(0))).collect(),
            // Not `vec![..; groups]`: clones of a log share its spans.
            work: (0..groups).map(|_| TermLog::default()).collect(),
            published: (0..groups).map(|_| TermLog::default()).collect(),
            faults: FaultCounts::default(),
            bounds,
            heal_leaders: vec![None; groups],
            tail_crash: None,
            priorities,
            priority_due: vec![None; groups],
            priority_leaders: vec![None; groups],
            priority: PriorityOutcome::default(),
            chain_rng: params.tier.priorities.then(|| chain::draw(seed)).flatten(),
            chain_started: None,
        };
        cluster.plan();
        Ok(cluster)
    }

    fn plan(&mut self) {
        let term = self.timing.term;
        let pulses = self.timing.liveness_timeout.is_some();
        // Give the cluster half a term to elect its first leader.
        let kinds = self.params.faults.kinds(pulses);
        self.stage.push_opening(
            &mut self.rng,
            term,
            (term / 2, term / 2),
            kinds,
            Ev::Start,
            Ev::Inject,
        );
        if self.params.faults.storms && self.rng.gen_range(0..4) == 0 {
            self.stage
                .push(self.stage.fault_end.before(term * 5 / 2), Ev::Storm);
        }
        let b = self.bounds;
        let mut tail_crash = self.stage.fault_end.after(b.heal.max(b.quiet) + term / 2);
        if let Some(p) = &self.priorities {
            // Room for the longest climb (a hop per priority above the
            // lowest), then a hop more in which a further move would show.
            let n = self.stage.slots.len();
            let lowest = (0..n).map(|i| p.level(i)).min().unwrap_or(0);
            let hops = p.levels_above(0..n, lowest) as u32;
            let settled = self.stage.fault_end.after(b.heal + p.hop * (hops + 1));
            tail_crash = tail_crash.max(settled);
            // In half the seeds the tail begins with a climb: the
            // highest-priority candidates crash a term before the fault
            // phase ends and come back as it ends, under a leader of lower
            // priority.
            self.stage
                .push(self.stage.fault_end.before(term), Ev::TopCrash);
        }
        self.stage.push(self.stage.fault_end, Ev::TailStart);
        self.stage
            .push(self.stage.fault_end.after(b.heal), Ev::HealCheck);
        self.plan_tail_end(tail_crash);
    }

    async fn run(mut self) -> ElectorReport {
        while let Some(ev) = self.stage.next().await {
            match ev {
                Ev::Start(n) => self.start(n),
                Ev::Inject(kind) => self.inject(kind),
                Ev::Storm => self.storm(),
                Ev::TailStart => self
                    .stage
                    .event(None, "tail", &[], || "faults healed".into()),
                Ev::HealCheck => self.heal_check(),
                Ev::PriorityCheck(g) => self.priority_check(g),
                Ev::Forge(g) => self.forge(g).await,
                Ev::TopCrash => self.top_crash(),
                Ev::ChainStart => self.chain_start(),
                Ev::ChainKill => self.chain_kill(),
                Ev::ChainForge(g) => self.chain_forge(g).await,
                Ev::TailCrash => self.tail_crash(),
                Ev::CrashCheck => self.crash_check(),
                Ev::End => break,
            }
        }
        self.report()
    }

    /// The candidate leading group `g` with a valid term now, and its
    /// token.
    fn leader(&self, g: usize) -> Option<(usize, u64)> {
        self.stage.slots.iter().enumerate().find_map(|(i, slot)| {
            let term = slot.current.as_ref()?.handle.get(g)?.current_term()?;
            Some((i, term.token()))
        })
    }

    fn groups(&self) -> usize {
        self.work.len()
    }

    /// Records a liveness violation in group `g`, found now.
    fn liveness_violation(&self, g: usize, nodes: Vec<usize>, tokens: Vec<u64>, what: String) {
        let detail = format!("group {}: {what}", group_name(g));
        self.stage
            .violation(ViolationKind::Liveness, nodes, tokens, detail);
    }

    fn heal_check(&mut self) {
        for g in 0..self.groups() {
            self.heal_leaders[g] = self.leader(g);
            if self.heal_leaders[g].is_none() && self.priorities.is_some() {
                // A preemption's hand-over (drain, release, take) may be
                // under way now: a term valid since the faults healed is
                // enough, and the checks of the climb take it from there.
                self.heal_leaders[g] = self.term_since_heal(g);
            }
            if self.heal_leaders[g].is_none() {
                let bound = self.bounds.heal;
                let what = format!(
                    "no valid term {bound:.3?} (the heal bound) after every fault had healed"
                );
                self.liveness_violation(g, vec![], vec![], what);
            }
        }
        if self.priorities.is_some() {
            self.plan_priority_checks();
        }
    }

    /// The last term of group `g` the electors published that began by now
    /// and was valid at some instant since every fault healed, if any.
    fn term_since_heal(&self, g: usize) -> Option<(usize, u64)> {
        let fault_end = self.stage.fault_end;
        let s = self.published[g].spans().into_iter().rev().find(|s| {
            self.stage.sim_time(s.elected) <= self.stage.now
                && s.ended.is_none_or(|e| self.stage.sim_time(e) >= fault_end)
        })?;
        Some((self.stage.slot_index(&s.candidate)?, s.token))
    }

    /// Checks that the leaders found at the heal check kept their terms,
    /// then crashes the leader of the first group (and so every group it
    /// leads).
    fn tail_crash(&mut self) {
        self.check_kept();
        self.crash_leader();
    }

    /// Checks that the leaders found at the heal check (or the priority
    /// check) kept their terms through the stable tail.
    fn check_kept(&mut self) {
        for g in 0..self.groups() {
            let leader = self.leader(g);
            // With priorities the heal leader may be preempted: the leader
            // the priority check found must have kept its term.
            let kept = match self.priorities {
                Some(_) => self.priority_leaders[g],
                None => self.heal_leaders[g],
            };
            if let Some((node, token)) = kept {
                if leader != Some((node, token)) {
                    let what = format!(
                        "node {node} led with token {token} in the fault-free tail but lost its term without a fault (now: {leader:?})"
                    );
                    self.liveness_violation(g, vec![node], vec![token], what);
                }
            }
        }
    }

    /// Crashes the leader of the first group (and so every group it
    /// leads), to start again half a term later; the groups it led, if
    /// anyone led.
    fn crash_leader(&mut self) -> Option<Vec<usize>> {
        let (n, _) = self.leader(0)?;
        let led: Vec<usize> = (0..self.groups())
            .filter(|&g| self.leader(g).is_some_and(|(l, _)| l == n))
            .collect();
        self.crash(n);
        self.tail_crash = Some((self.stage.now, led.clone()));
        let at = self.stage.now.after(self.timing.term / 2);
        self.stage.push(at, Ev::Start(n));
        Some(led)
    }

    /// The groups the crashed leader led must each have a new term by now.
    fn crash_check(&mut self) {
        let Some((at, led)) = self.tail_crash.clone() else {
            return;
        };
        for g in led {
            let restarted = self.work[g]
                .spans()
                .iter()
                .any(|s| self.stage.sim_time(s.elected) >= at);
            if !restarted {
                let bound = self.bounds.crash;
                let what = format!(
                    "the leader crashed at {at} with nothing else going wrong, and no term's work started within the crash failover bound {bound:.3?}"
                );
                self.liveness_violation(g, vec![], vec![], what);
            }
        }
    }

    fn report(self) -> ElectorReport {
        let mut violations = Vec::new();
        let mut terms = 0;
        let mut handovers = 0;
        let mut closest: Option<Duration> = None;
        let mut heal_gaps = Vec::new();
        for g in 0..self.groups() {
            let place = format!("group {}", group_name(g));
            violations.extend(
                self.stage
                    .term_problems(&self.work[g], &place, "work of two terms"),
            );
            violations.extend(self.stage.term_problems(
                &self.published[g],
                &place,
                "two published terms",
            ));
            let spans = self.work[g].spans();
            terms += spans.len() as u64;
            for w in spans.windows(2) {
                if w[0].candidate != w[1].candidate {
                    handovers += 1;
                    if let Some(end) = w[0].ended {
                        let gap = w[1].elected.saturating_duration_since(end);
                        closest = Some(closest.map_or(gap, |c| c.min(gap)));
                    }
                }
            }
            let fault_end = self.stage.fault_end;
            let heal_gap = spans.iter().find_map(|s| {
                let start = self.stage.sim_time(s.elected);
                let end = s
                    .ended
                    .map_or(SimTime(u64::MAX), |e| self.stage.sim_time(e));
                (end > fault_end).then(|| start.since(fault_end))
            });
            heal_gaps.extend(heal_gap);
        }
        let crash_gaps = self.tail_crash.iter().flat_map(|(at, led)| {
            led.iter().filter_map(|&g| {
                self.work[g]
                    .spans()
                    .iter()
                    .map(|s| self.stage.sim_time(s.elected))
                    .find(|&start| start >= *at)
                    .map(|start| start.since(*at))
            })
        });
        let crash_gaps = crash_gaps.collect();
        violations.extend(self.oscillations());
        let run = self.stage.record(&self.timing, violations);
        let f = lock(&self.stage.findings);
        ElectorReport {
            run,
            nodes: self.stage.slots.len(),
            groups: self.groups(),
            notifying: self.stage.slots.iter().filter(|s| s.notify).count(),
            counts: ElectorCounts {
                terms,
                elections: f.elections,
                handovers,
                incarnations: self.stage.incarnations,
                end_reasons: f.end_reasons.clone(),
                store_alarms: f.store_alarms,
                faults: self.faults.clone(),
            },
            heal: CheckedGaps {
                gaps: heal_gaps,
                bound: self.bounds.heal,
            },
            crash: CheckedGaps {
                gaps: crash_gaps,
                bound: self.bounds.crash,
            },
            closest_handover: closest,
            priority: self.priorities.is_some().then(|| self.priority.clone()),
        }
    }
}
