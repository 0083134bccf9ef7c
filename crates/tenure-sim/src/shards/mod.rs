//! The sharded tier: real [`tenure::Shards`] members of one set over one
//! [`tenure::MemoryStore`], each member process seeing the store through
//! its own [`tenure::Faults`] (so running its own engine, as separate
//! processes do), each with its own drifting clock, all on tokio's paused
//! clock, modelled on the [`elector`](crate::elector) tier.
//!
//! * **Members** start with the set (2 to 5 by default, over 4 to 24
//!   shards); during the fault phase new members join, members leave
//!   gracefully ([`Shards::shutdown`]) and most come back under the same
//!   id, crash (the process never reaches the store again and its work
//!   stops at once; it comes back later as a new process under the same
//!   id), pause (the whole process frozen, its clock counting on: 70 % of
//!   pauses outlast the term), and suffer windows of store trouble
//!   (partitions, slow or failing operations, lost replies). Some members'
//!   views of the store notify, others poll.
//! * **Work**: each member's application runs
//!   [`Shards::run_per_shard`] (again whenever a work fails); each term's
//!   work, drawn from the seed, stops when told (after lingering), ignores
//!   the cancellation until it is dropped, quits early, or fails.
//! * **Checker**, per shard: every term's work records when it started and
//!   stopped, and every term when it was first worked and when it ended
//!   ([`TermLog`]); no two spans of either log may overlap and tokens must
//!   rise. A frozen process does nothing: a span its process was frozen
//!   under, and which ends as the process thaws (or dies), ends where the
//!   process froze. No work may start after its term's deadline or run past
//!   it. No two members may report a valid term on one shard at once.
//! * **Tail**: after the fault phase the set must settle within
//!   [`ShardBounds::settle`]: every shard held by a running member, every
//!   member holding `⌊N/M⌋` or `⌈N/M⌉` shards, every member seeing the same
//!   members. Then, one at a time, a member holding shards crashes, a new
//!   member joins, and a member leaves gracefully; after each the set must
//!   settle again within [`ShardBounds::crash`], [`ShardBounds::join`] and
//!   [`ShardBounds::leave`], having moved exactly the shards it had to (the
//!   crashed or leaving member's, or the newcomer's share). Between changes
//!   a settled assignment must not change at all.
//!
//! Everything derives from the seed, what the library draws itself too
//! (retry jitter, incarnations, the member task's listing jitter: each
//! node's clock draws them from the seed, see `Clock::random_u64`), and
//! every `select!` is biased, so a seed run again is the same run, byte for
//! byte (`tests/replay.rs`).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tenure::{
    Config, GroupName, LeaseRecord, LeaseStore, LeaseView, MemoryStore, Metadata, Shards, Timing,
    WallTime,
};
use tenure_testkit::TermLog;

use crate::clock::SimTime;
use crate::faults::{FaultCounts, FaultKind};
use crate::params::SimError;
use crate::paused::{self, lock, run_paused, Findings, Stage};
use crate::report::ViolationKind;

mod bounds;
mod catalog;
mod member;
mod params;
mod pause;
mod plan;
mod report;

pub use bounds::ShardBounds;
pub use params::{ShardFaultRates, ShardParams, ShardTier, HOSTILE_READS_PER_MEMBER};
pub use report::{Phase, Settling, ShardCounts, ShardReport, ShardSummary};

use catalog::{CatalogSim, Hostile};
use pause::Pause;
use plan::{pause_length, Planned};

/// The set's name.
const SET: &str = "sim";

/// Runs one seed of the sharded tier to the end and reports what the
/// checker found.
///
/// Fails only if the parameters are invalid or the runtime cannot start;
/// broken invariants are in the report's
/// [`RunRecord::violations`](crate::RunRecord::violations).
///
/// ```
/// use tenure_sim::shards::{run_seed, ShardParams};
/// let mut params = ShardParams::default();
/// params.shared.fault_phase = std::time::Duration::from_secs(20);
/// let report = run_seed(7, &params)?;
/// assert!(report.counts.terms > 0);
/// assert!(report.run.violations.is_empty(), "{:?}", report.run.violations);
/// # Ok::<(), tenure_sim::SimError>(())
/// ```
pub fn run_seed(seed: u64, params: &ShardParams) -> Result<ShardReport, SimError> {
    params.check()?;
    run_paused(async { Ok(Set::new(seed, params)?.run().await) })
}

/// What the set drives a member's process through.
struct Member {
    shards: Shards,
    /// Whether the process is frozen.
    pause: Pause,
}

/// One process of a member.
type Incarnation = paused::Incarnation<Member>;

#[derive(Debug)]
enum Ev {
    Start(usize),
    Inject(Planned),
    Thaw {
        node: usize,
        life: u32,
    },
    /// Every member that is to run has started: make sure at least two do.
    TailStart,
    /// The set must have settled after the change under way.
    Check,
    /// A settled assignment must still be what it was.
    Sample,
    /// The next change of the tail.
    Tail(Phase),
    /// The source of a set that follows a catalog changes.
    Reshard,
    /// A hostile catalog part 0 is planted (`catalog_hostile`).
    Plant,
    /// The catalog part reads since a plant must be few.
    CostCheck {
        /// The reads counted when it was planted.
        before: usize,
        /// The members running then.
        members: usize,
    },
    End,
}

/// Who holds each shard (by index) with a valid term: a member (by slot).
type Holders = BTreeMap<usize, usize>;

/// A change (the simultaneous start, or one of the tail) and what the set
/// looked like before it.
struct Change {
    phase: Phase,
    at: SimTime,
    before: Holders,
    /// The member that crashed, joined or left.
    member: Option<usize>,
    bound: Duration,
}

/// One seed's sharded set.
struct Set {
    params: ShardParams,
    config: Config,
    timing: Timing,
    rng: StdRng,
    store: MemoryStore,
    /// The members, their processes and the timeline.
    stage: Stage<Ev, Member>,
    /// Per shard, spans of every term's work.
    work: Arc<Vec<TermLog>>,
    /// Per shard, spans of every term from its first work to its end.
    terms: Arc<Vec<TermLog>>,
    faults: FaultCounts,
    joins: u64,
    /// `MembersChanged` events seen.
    views: Arc<AtomicU64>,
    skew: Option<Duration>,
    bounds: ShardBounds,
    /// Crashed processes' handles, kept so that they do not leave
    /// gracefully when dropped.
    zombies: Vec<Shards>,
    /// Whether every member starts at the same instant (even seeds) rather
    /// than spread over half a term.
    together: bool,
    /// The change under way (the simultaneous start, or one of the tail).
    change: Option<Change>,
    /// The settled assignment, while it must hold.
    settled: Option<Holders>,
    /// Conflicting holders already reported: (shard, member, member).
    conflicts: HashSet<(usize, usize, usize)>,
    settlings: Vec<Settling>,
    /// The changing source, for a set that follows a catalog.
    catalog: Option<CatalogSim>,
    /// Catalog part reads by every member, so far.
    catalog_reads: Arc<AtomicUsize>,
    /// Draws for the hostile catalog faults, apart from `rng`.
    hostile_rng: StdRng,
    /// When hostile part 0s are planted.
    plants: Vec<Duration>,
    /// Hostile catalog faults injected.
    hostile_faults: u64,
}

impl Set {
    fn new(seed: u64, params: &ShardParams) -> Result<Self, SimError> {
        let mut rng = StdRng::seed_from_u64(seed);
        let members = rng.gen_range(params.tier.members.clone());
        let shards = rng.gen_range(params.tier.shards.clone());
        // Members do not pulse.
        let (skew, config, timing) = params.shared.draw_election(&mut rng, false)?;
        let bounds = ShardBounds::new(&timing, params.shared.latency);
        // A set that follows a catalog keeps logs for the shards its
        // source may add.
        let logs = if params.tier.catalog {
            shards * 3
        } else {
            shards
        };
        let forgets = params.tier.catalog_forgets_parents;
        // Hostile faults are drawn from a generator of their own: the rest
        // of the run is drawn as without them.
        let mut hostile_rng = StdRng::seed_from_u64(seed ^ 0x39ca_7a10_9000_0039);
        let hostile = if params.tier.catalog_hostile {
            let mut h = Hostile {
                escaped_names: hostile_rng.gen_bool(0.5),
                many_parents: hostile_rng.gen_bool(0.5),
                broken_source: hostile_rng.gen_bool(0.5),
                expects_left_out: params.tier.catalog_expects_left_out,
                broken_everywhere: params.tier.catalog_source_fails_everywhere,
            };
            // The controls need their fault; every seed has one at least.
            h.many_parents |= h.expects_left_out;
            h.broken_source |= h.broken_everywhere;
            if !(h.escaped_names || h.many_parents || h.broken_source) {
                h.broken_source = true;
            }
            h
        } else {
            Hostile::default()
        };
        let plants: Vec<Duration> = if params.tier.catalog_hostile {
            let fault = params.shared.fault_phase;
            let mut at: Vec<Duration> = (0..hostile_rng.gen_range(1..=3))
                .map(|_| fault.mul_f64(hostile_rng.gen_range(0.2..0.9)))
                .collect();
            at.sort();
            at
        } else {
            Vec::new()
        };
        // The shard added at the tail's start and the shard that cannot be
        // published have logs of their own.
        let logs_with = logs + CatalogSim::extra_logs(&hostile);
        let catalog = params
            .tier
            .catalog
            .then(|| CatalogSim::new(shards, logs, forgets, hostile));
        let logs = logs_with;
        let mut set = Set {
            params: params.clone(),
            config,
            timing,
            rng,
            store: MemoryStore::new(),
            stage: Stage::new(seed, params.shared.fault_phase, params.shared.trace),
            // Not `vec![..; shards]`: clones of a log share its spans.
            work: Arc::new((0..logs).map(|_| TermLog::default()).collect()),
            terms: Arc::new((0..logs).map(|_| TermLog::default()).collect()),
            faults: FaultCounts::default(),
            joins: 0,
            views: Arc::default(),
            skew,
            bounds,
            zombies: Vec::new(),
            together: seed % 2 == 0,
            change: None,
            settled: None,
            conflicts: HashSet::new(),
            settlings: Vec::new(),
            catalog,
            catalog_reads: Arc::default(),
            hostile_rng,
            plants,
            hostile_faults: 0,
        };
        for _ in 0..members {
            set.add_slot();
        }
        if let Some(c) = &set.catalog {
            if set.params.tier.catalog_hostile {
                let h = c.hostile.clone();
                let plants = set.plants.len();
                set.stage.event(None, "HOSTILE", &[], || {
                    format!(
                        "escaped names: {}, a shard of 300 parents: {}, part 0s planted: {plants}, the leader's source fails at the tail: {}",
                        h.escaped_names, h.many_parents, h.broken_source
                    )
                });
            }
        }
        set.plan();
        Ok(set)
    }

    fn plan(&mut self) {
        let term = self.timing.term;
        let kinds = self.params.faults.kinds();
        if self.together {
            // Every member at the same instant; the set must settle within
            // the bound before the first fault.
            let settle = self.settle_bound() + term / 10;
            self.stage.push_opening(
                &mut self.rng,
                term,
                (Duration::ZERO, settle),
                kinds,
                Ev::Start,
                Ev::Inject,
            );
            self.change = Some(Change {
                phase: Phase::Start,
                at: SimTime::from_duration(Duration::ZERO),
                before: Holders::new(),
                member: None,
                bound: self.settle_bound(),
            });
            self.stage
                .push(SimTime::from_duration(self.settle_bound()), Ev::Check);
        } else {
            // Starts spread over half a term; a term to settle first.
            self.stage.push_opening(
                &mut self.rng,
                term,
                (term / 2, term),
                kinds,
                Ev::Start,
                Ev::Inject,
            );
        }
        // Restarts planned for the end of the fault phase come first.
        self.stage.push(
            self.stage.fault_end.after(Duration::from_millis(1)),
            Ev::TailStart,
        );
        self.stage
            .push(self.stage.fault_end.after(self.settle_bound()), Ev::Check);
        if self.catalog.is_some() {
            // The source changes every one to four terms in the fault
            // phase, after a simultaneous start has been checked.
            let mut at = if self.together {
                self.settle_bound() + term / 10
            } else {
                Duration::ZERO
            };
            loop {
                at += self.rng.gen_range(term..term * 4);
                let when = SimTime::from_duration(at);
                if when >= self.stage.fault_end {
                    break;
                }
                self.stage.push(when, Ev::Reshard);
            }
        }
        for at in self.plants.clone() {
            self.stage.push(SimTime::from_duration(at), Ev::Plant);
        }
    }

    /// The bound on settling from a start or from the faults' heal: for a
    /// set that follows a catalog, also the time for a parent's holder to
    /// mark it finished, the leader to drop it at its next refresh, and the
    /// members to read that and take the children over.
    ///
    /// With a source failing on the catalog leader only (`catalog_hostile`),
    /// also the time for that leader to hand the duty on: its next refresh
    /// (at most half a term away), three retries a quarter term apart, its
    /// release taken over within a poll, and the new leader's write
    /// followed within a poll: 3 terms.
    fn settle_bound(&self) -> Duration {
        let term = self.timing.term;
        match &self.catalog {
            Some(c) if c.hostile.broken_source => {
                self.bounds.settle + CatalogSim::refresh(term) * 2 + term * 5
            }
            Some(_) => self.bounds.settle + CatalogSim::refresh(term) * 2 + term * 2,
            None => self.bounds.settle,
        }
    }

    /// Plants a hostile catalog part 0 claiming 65,536 parts (under the
    /// control, with every one of 4,096 parts it claims), written by hand
    /// under the highest token; schedules the check of what reading it
    /// cost.
    async fn plant(&mut self) {
        let whole = self.params.tier.catalog_plants_whole;
        let n: u64 = if whole { 4096 } else { 65_536 };
        let written = if whole { n } else { 1 };
        let at = WallTime::from_millis(0);
        let record = LeaseRecord {
            holder: None,
            token: u64::MAX,
            term: self.timing.term,
            renewed_at: at,
            expires_at: at,
            metadata: Metadata::new()
                .with("tenure.catalog", format!("{{\"g\":1,\"n\":{n},\"s\":[]}}")),
        };
        for k in 0..written {
            let Ok(group) = GroupName::new(format!("{SET}/catalog/{k}")) else {
                continue;
            };
            let current = self.store.read(&group).await.ok().flatten();
            let _ = self
                .store
                .compare_and_swap(&group, current.map(|v| v.version), &record)
                .await;
        }
        self.hostile_faults += 1;
        self.stage.event(None, "PLANT", &[n], || {
            format!("a hostile catalog part 0 claiming {n} parts ({written} written)")
        });
        let before = self
            .catalog_reads
            .load(std::sync::atomic::Ordering::Relaxed);
        let members = self.stage.running().len().max(1);
        self.stage.push(
            self.stage.now.after(self.timing.term / 2),
            Ev::CostCheck { before, members },
        );
    }

    /// The catalog part reads since a plant must be few: a reader follows
    /// no part 0 claiming more parts than a catalog may have.
    fn cost_check(&mut self, before: usize, members: usize) {
        let reads = self
            .catalog_reads
            .load(std::sync::atomic::Ordering::Relaxed)
            .saturating_sub(before);
        let bound = HOSTILE_READS_PER_MEMBER * members;
        if reads > bound {
            self.stage.violation(
                ViolationKind::Liveness,
                vec![],
                vec![],
                format!(
                    "{reads} catalog part reads in the half term after a hostile part 0 was planted, over the bound of {bound} ({HOSTILE_READS_PER_MEMBER} for each of {members} members)"
                ),
            );
        }
    }

    /// The source changes.
    fn reshard(&mut self) {
        let Some(catalog) = self.catalog.as_mut() else {
            return;
        };
        if let Some(what) = catalog.reshard(&mut self.rng) {
            self.stage.event(None, "RESHARD", &[], || what);
        }
    }

    async fn run(mut self) -> ShardReport {
        while let Some(ev) = self.stage.next().await {
            match ev {
                Ev::Start(n) => self.start(n),
                Ev::Inject(kind) => self.inject(kind),
                Ev::Thaw { node, life } => {
                    if self.stage.slots[node]
                        .current
                        .as_ref()
                        .is_some_and(|i| i.life == life)
                    {
                        self.stage
                            .event(Some(node), "thaw", &[], || "the process runs again".into());
                    }
                }
                Ev::TailStart => self.tail_start(),
                Ev::Check => self.check(),
                Ev::Sample => self.sample(),
                Ev::Tail(phase) => self.tail(phase),
                Ev::Reshard => self.reshard(),
                Ev::Plant => self.plant().await,
                Ev::CostCheck { before, members } => self.cost_check(before, members),
                Ev::End => break,
            }
        }
        self.report()
    }

    /// Who holds each shard with a valid term, as the running members
    /// report it; two members reporting one shard is an overlap.
    fn holders(&mut self) -> Holders {
        let mut out = Holders::new();
        let mut conflicts = Vec::new();
        for (i, slot) in self.stage.slots.iter().enumerate() {
            let Some(inc) = &slot.current else { continue };
            for (shard, term) in inc.handle.shards.held() {
                let Some(s) = catalog::shard_index(&shard) else {
                    continue;
                };
                if let Some(other) = out.insert(s, i) {
                    conflicts.push((s, other, i, term.token()));
                }
            }
        }
        for (s, a, b, token) in conflicts {
            if self.conflicts.insert((s, a, b)) {
                let detail = format!(
                    "shard {s}: {} and {} both report a valid term (the latter with token {token})",
                    self.stage.slots[a].name, self.stage.slots[b].name
                );
                self.stage
                    .violation(ViolationKind::Overlap, vec![a, b], vec![], detail);
            }
        }
        out
    }

    /// At least two members run in the tail, so that one can crash; the
    /// set must settle from the heal of every fault.
    fn tail_start(&mut self) {
        self.stage
            .event(None, "tail", &[], || "faults healed".into());
        self.change = Some(Change {
            phase: Phase::Settle,
            at: self.stage.fault_end,
            before: Holders::new(),
            member: None,
            bound: self.settle_bound(),
        });
        while self.stage.running().len() < 2 {
            self.joins += 1;
            let n = self.add_slot();
            self.start(n);
        }
        self.break_source();
    }

    /// At the tail's start (`catalog_hostile`, if drawn): the source of the
    /// member that listed it last (the catalog leader, unless it is gone;
    /// then any running member's) fails on that member only, and a shard
    /// is added, so that the catalog must be written again by a member
    /// whose source works. Healed once the set was checked settled.
    fn break_source(&mut self) {
        let running = self.stage.running();
        let Some(c) = self.catalog.as_mut() else {
            return;
        };
        if !c.hostile.broken_source || running.is_empty() {
            return;
        }
        let node = match c.last_lister() {
            Some(n) if running.contains(&n) => n,
            _ => running[self.hostile_rng.gen_range(0..running.len())],
        };
        let what = c.break_source(node);
        let added = c.add_one();
        self.hostile_faults += 1;
        self.stage.event(Some(node), "SOURCE FAILS", &[], || {
            format!("{what}; {}", added.unwrap_or_default())
        });
    }

    /// The set must have settled after the change under way.
    fn check(&mut self) {
        let Some(change) = self.change.take() else {
            return;
        };
        if change.phase == Phase::Settle {
            // The source that failed at the tail's start works again once
            // this check has looked (below, with the state as it is now).
            if let Some(c) = &self.catalog {
                c.heal_sources();
            }
        }
        let holders = self.holders();
        let running = self.stage.running();
        // Sorted as the library sorts members: by id.
        let mut names: Vec<String> = running
            .iter()
            .map(|&i| self.stage.slots[i].name.clone())
            .collect();
        names.sort();
        let expected: BTreeSet<usize> = match &self.catalog {
            Some(c) => c.ready(),
            None => (0..self.work.len()).collect(),
        };
        let (n, m) = (expected.len(), running.len());
        let mut unsettled = Vec::new();
        let mut unbalanced = Vec::new();
        let unheld: Vec<usize> = expected
            .iter()
            .copied()
            .filter(|s| !holders.contains_key(s))
            .collect();
        if !unheld.is_empty() {
            unsettled.push(format!("shards {unheld:?} are held by nobody"));
        }
        let stray: Vec<usize> = holders
            .keys()
            .copied()
            .filter(|s| !expected.contains(s))
            .collect();
        if !stray.is_empty() {
            unsettled.push(format!(
                "shards {stray:?} are held ({holders:?}), and not among the catalog's ready shards {expected:?}"
            ));
        }
        for &i in &running {
            let seen: Vec<String> = self.stage.slots[i]
                .current
                .as_ref()
                .map(|inc| {
                    inc.handle
                        .shards
                        .members()
                        .into_iter()
                        .map(|m| m.id)
                        .collect()
                })
                .unwrap_or_default();
            if seen != names {
                unsettled.push(format!(
                    "{} sees members {seen:?}, the running ones are {names:?}",
                    self.stage.slots[i].name
                ));
            }
        }
        let (lo, hi) = (n / m.max(1), n.div_ceil(m.max(1)));
        for &i in &running {
            let load = holders.values().filter(|&&h| h == i).count();
            if load < lo || load > hi {
                unbalanced.push(format!(
                    "{} holds {load} shards, {n} over {m} members must be {lo} to {hi} each",
                    self.stage.slots[i].name
                ));
            }
        }
        let moved: BTreeSet<usize> = change
            .before
            .iter()
            .filter(|(s, h)| holders.get(s) != Some(h))
            .map(|(&s, _)| s)
            .chain(
                holders
                    .keys()
                    .filter(|s| !change.before.contains_key(s))
                    .copied(),
            )
            .collect();
        let must_move: BTreeSet<usize> = match (change.phase, change.member) {
            (Phase::Crash | Phase::Leave, Some(x)) => change
                .before
                .iter()
                .filter(|(_, &h)| h == x)
                .map(|(&s, _)| s)
                .collect(),
            (Phase::Join, Some(x)) => holders
                .iter()
                .filter(|(_, &h)| h == x)
                .map(|(&s, _)| s)
                .collect(),
            _ => moved.clone(),
        };
        if moved != must_move {
            unbalanced.push(format!(
                "the {} moved shards {moved:?}, it had to move exactly {must_move:?}",
                change.phase
            ));
        }
        let took = self.took(change.at);
        let settled = unsettled.is_empty() && unbalanced.is_empty();
        let counted = !matches!(change.phase, Phase::Settle | Phase::Start);
        self.settlings.push(Settling {
            phase: change.phase,
            took: unsettled.is_empty().then_some(took),
            bound: change.bound,
            moved: if counted { moved.len() } else { 0 },
            minimum: if counted { must_move.len() } else { 0 },
        });
        let nodes = change.member.into_iter().collect::<Vec<_>>();
        if !unsettled.is_empty() {
            self.stage.violation(
                ViolationKind::Liveness,
                nodes.clone(),
                vec![],
                format!(
                    "not settled {:.3?} (the bound) after the {} at {}: {}",
                    change.bound,
                    change.phase,
                    change.at,
                    unsettled.join("; ")
                ),
            );
        }
        if !unbalanced.is_empty() {
            self.stage.violation(
                ViolationKind::Balance,
                nodes,
                vec![],
                format!(
                    "after the {} at {}: {}",
                    change.phase,
                    change.at,
                    unbalanced.join("; ")
                ),
            );
        }
        self.stage
            .event(None, "settled", &[moved.len() as u64], || {
                format!(
                    "after the {}: {} shards moved in {took:.3?}, settled: {settled}",
                    change.phase,
                    moved.len()
                )
            });
        if change.phase == Phase::Start {
            // The fault phase follows, not the tail.
            return;
        }
        if settled {
            self.settled = Some(holders);
            self.stage
                .push(self.stage.now.after(self.sample_every()), Ev::Sample);
        }
        let next = match change.phase {
            Phase::Start | Phase::Settle => Some(Phase::Crash),
            Phase::Crash => Some(Phase::Join),
            Phase::Join => Some(Phase::Leave),
            Phase::Leave => None,
        };
        let at = self.stage.now.after(self.timing.term);
        self.stage.push(at, next.map_or(Ev::End, Ev::Tail));
    }

    fn sample_every(&self) -> Duration {
        self.timing.term / 10
    }

    /// How long after `at` the last shard's current work began.
    fn took(&self, at: SimTime) -> Duration {
        self.work
            .iter()
            .filter_map(|log| {
                let spans = log.spans();
                let current = spans.iter().rev().find(|s| s.ended.is_none())?;
                Some(self.stage.sim_time(current.elected))
            })
            .map(|t| if t > at { t.since(at) } else { Duration::ZERO })
            .max()
            .unwrap_or(Duration::ZERO)
    }

    /// A settled assignment must not change while membership does not.
    fn sample(&mut self) {
        let Some(settled) = self.settled.clone() else {
            return;
        };
        let now = self.holders();
        if now != settled {
            self.settled = None;
            let changed: Vec<String> = (0..self.work.len())
                .filter(|s| now.get(s) != settled.get(s))
                .map(|s| {
                    let name = |h: Option<&usize>| {
                        h.map_or("nobody", |&i| self.stage.slots[i].name.as_str())
                    };
                    format!(
                        "shard {s}: {} -> {}",
                        name(settled.get(&s)),
                        name(now.get(&s))
                    )
                })
                .collect();
            self.stage.violation(
                ViolationKind::Balance,
                vec![],
                vec![],
                format!(
                    "the settled assignment changed with no membership change: {}",
                    changed.join(", ")
                ),
            );
            return;
        }
        self.stage
            .push(self.stage.now.after(self.sample_every()), Ev::Sample);
    }

    /// The next change of the tail, from a settled set.
    fn tail(&mut self, phase: Phase) {
        self.sample();
        self.settled = None;
        let before = self.holders();
        let pick = |set: &mut Set| -> Option<usize> {
            let held: Vec<usize> = before.values().copied().collect();
            (!held.is_empty()).then(|| held[set.rng.gen_range(0..held.len())])
        };
        let (member, bound) = match phase {
            Phase::Start | Phase::Settle => return,
            Phase::Crash => {
                let Some(x) = pick(self) else { return };
                self.crash(x);
                (x, self.bounds.crash)
            }
            Phase::Join => {
                self.joins += 1;
                let x = self.add_slot();
                self.stage
                    .event(Some(x), "JOIN", &[], || "a new member joins".into());
                self.start(x);
                (x, self.bounds.join)
            }
            Phase::Leave => {
                let Some(x) = pick(self) else { return };
                self.leave(x);
                (x, self.bounds.leave)
            }
        };
        self.change = Some(Change {
            phase,
            at: self.stage.now,
            before,
            member: Some(member),
            bound,
        });
        self.stage.push(self.stage.now.after(bound), Ev::Check);
    }

    fn report(self) -> ShardReport {
        let mut violations = Vec::new();
        let mut terms = 0;
        for s in 0..self.work.len() {
            let place = format!("shard {s}");
            violations.extend(
                self.stage
                    .term_problems(&self.work[s], &place, "work of two terms"),
            );
            violations.extend(
                self.stage
                    .term_problems(&self.terms[s], &place, "two valid terms"),
            );
            terms += self.terms[s].spans().len() as u64;
        }
        if let Some(catalog) = &self.catalog {
            for (_, token, detail) in catalog.order_problems(&self.work) {
                self.stage
                    .violation(ViolationKind::ParentOrder, vec![], vec![token], detail);
            }
        }
        let run = self.stage.record(&self.timing, violations);
        let f = lock(&self.stage.findings);
        ShardReport {
            run,
            members: self.stage.slots.len(),
            shards: self.work.len(),
            started_together: self.together,
            notifying: self.stage.slots.iter().filter(|s| s.notify).count(),
            counts: ShardCounts {
                terms,
                acquisitions: f.elections,
                releases: f.end_reasons.clone(),
                views: self.views.load(std::sync::atomic::Ordering::Relaxed),
                incarnations: self.stage.incarnations,
                joins: self.joins,
                reshards: self.catalog.as_ref().map_or(0, |c| c.reshards),
                finished: self.catalog.as_ref().map_or(0, CatalogSim::finished),
                hostile: self.hostile_faults,
                catalog_reads: self
                    .catalog_reads
                    .load(std::sync::atomic::Ordering::Relaxed)
                    as u64,
                faults: self.faults.clone(),
            },
            settlings: self.settlings.clone(),
            documented_crash_bound: self.bounds.documented_crash,
        }
    }
}
