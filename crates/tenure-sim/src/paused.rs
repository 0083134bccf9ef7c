//! What the two tiers on tokio's paused clock (the elector tier and the
//! sharded tier) share: the runtime they run on, what their tasks find, and
//! the stage of one seed: the timeline of planned events and the processes
//! of its candidates or members, with their windows of store trouble.
//!
//! The two tiers differ in what a process runs (one elector per group, or
//! one [`tenure::Shards`] member) and in what they check; how a process
//! starts, crashes and suffers store trouble is the same in both, and lives
//! here once.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rand::Rng;
use tenure::Timing;
use tenure_testkit::TermLog;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::clock::SimTime;
use crate::elector::clock::{SimClock, TIMER_RESOLUTION};
use crate::elector::plan::Planned as Window;
use crate::elector::windows::StoreView;
use crate::faults::{self, between, PlannedKind};
use crate::params::{Shared, SimError};
use crate::report::{term_violations, RunRecord, Violation, ViolationKind, Violations};
use crate::scheduler::Queue;
use crate::trace::Trace;

/// Runs `run` to the end on a new single-threaded tokio runtime whose clock
/// starts paused, as the elector and sharded tiers run.
pub(crate) fn run_paused<T>(
    run: impl std::future::Future<Output = Result<T, SimError>>,
) -> Result<T, SimError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .map_err(SimError::Runtime)?;
    runtime.block_on(run)
}

/// What the candidates' or members' tasks find while the run goes on.
pub(crate) struct Findings {
    pub(crate) violations: Violations,
    /// Terms that began (`Event::Elected`, `ShardEvent::Acquired`).
    pub(crate) elections: u64,
    /// Terms that ended (`Event::Ousted`, `ShardEvent::Released`), by
    /// reason.
    pub(crate) end_reasons: BTreeMap<&'static str, u64>,
    /// `Event::StoreHealth` reporting a failure (elector tier).
    pub(crate) store_alarms: u64,
    /// Faults, elections, ends and the terms' work, as they happen.
    pub(crate) trace: Trace,
}

impl Findings {
    pub(crate) fn new(seed: u64, keep_lines: bool) -> Self {
        Findings {
            violations: Violations::new(seed),
            elections: 0,
            end_reasons: BTreeMap::new(),
            store_alarms: 0,
            trace: Trace::new(keep_lines),
        }
    }

    /// Takes what the run found for its report: the violations and the
    /// trace.
    pub(crate) fn take(&mut self) -> (Vec<Violation>, Trace) {
        let violations = self.violations.take();
        let trace = std::mem::replace(&mut self.trace, Trace::new(false));
        (violations, trace)
    }

    /// Checks a term's work that starts at `at`, by `who` (slot `node`) at
    /// `place` (a group or a shard): no work may start once its term's
    /// deadline (`until`, real time) has passed.
    pub(crate) fn work_starts(
        &mut self,
        at: SimTime,
        until: SimTime,
        (node, who): (usize, &str),
        place: &str,
        token: u64,
    ) {
        if at >= until {
            self.violations.add(
                ViolationKind::WorkPastDeadline,
                at,
                vec![node],
                vec![token],
                format!(
                    "{place}: {who} started the work of token {token} at {at}, after the term's deadline ({until})"
                ),
            );
        }
    }

    /// Checks a term's work that ran until `end`, by `who` (slot `node`) at
    /// `place`: no work may run past its term's deadline (`until`, real
    /// time) by more than the timer's resolution.
    pub(crate) fn work_ends(
        &mut self,
        end: SimTime,
        until: SimTime,
        (node, who): (usize, &str),
        place: &str,
        token: u64,
    ) {
        if end > until.after(TIMER_RESOLUTION) {
            self.violations.add(
                ViolationKind::WorkPastDeadline,
                end,
                vec![node],
                vec![token],
                format!(
                    "{place}: {who} ran the work of token {token} until {end}, {:?} past the term's deadline ({until})",
                    end.since(until)
                ),
            );
        }
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One process of a candidate or member.
pub(crate) struct Incarnation<H> {
    /// Which process of its slot this is, from 1.
    pub(crate) life: u32,
    /// What the tier drives the process through: the candidate's electors
    /// (one per group), or the member's `Shards` handle.
    pub(crate) handle: H,
    /// This process's view of the store, with its windows of trouble.
    pub(crate) view: StoreView,
    /// Its application's tasks: stopped at once by a crash.
    pub(crate) tasks: Vec<JoinHandle<()>>,
}

/// One candidate or member id: its clock and its current process, if any.
pub(crate) struct Slot<H> {
    /// The id, the same for every process.
    pub(crate) name: String,
    pub(crate) clock: Arc<SimClock>,
    /// Whether its views of the store send change notifications.
    pub(crate) notify: bool,
    /// How many processes it has started.
    pub(crate) life: u32,
    pub(crate) current: Option<Incarnation<H>>,
}

/// A new process about to start: what [`Stage::next_process`] drew for it.
pub(crate) struct NewProcess {
    pub(crate) life: u32,
    pub(crate) view: StoreView,
    /// The seed of its work's choices.
    pub(crate) work_seed: u64,
}

/// An event on a stage's timeline: one the tier planned, or the end of a
/// window of store trouble, which the stage handles itself.
enum Planned<E> {
    Tier(E),
    /// The window of `kind` on process `life` of slot `node` ends.
    WindowEnd {
        node: usize,
        life: u32,
        kind: Window,
    },
}

/// One seed's stage: the timeline of planned events `E`, what the tasks
/// find, and the slots of the candidates or members whose processes the
/// tier drives through `H`.
pub(crate) struct Stage<E, H> {
    pub(crate) seed: u64,
    /// Real instant zero of the run.
    pub(crate) origin: Instant,
    queue: Queue<Planned<E>>,
    /// The real (simulated) instant of the event being handled.
    pub(crate) now: SimTime,
    pub(crate) findings: Arc<Mutex<Findings>>,
    pub(crate) slots: Vec<Slot<H>>,
    /// Processes started (first starts and restarts).
    pub(crate) incarnations: u64,
    /// When the fault phase ends: restarts planned in it happen by then.
    pub(crate) fault_end: SimTime,
}

impl<E, H> Stage<E, H> {
    /// An empty stage at real instant zero whose fault phase lasts
    /// `fault_phase`, keeping trace lines if `trace`.
    pub(crate) fn new(seed: u64, fault_phase: Duration, trace: bool) -> Self {
        Stage {
            seed,
            origin: Instant::now(),
            queue: Queue::new(),
            now: SimTime(0),
            findings: Arc::new(Mutex::new(Findings::new(seed, trace))),
            slots: Vec::new(),
            incarnations: 0,
            fault_end: SimTime::from_duration(fault_phase),
        }
    }

    /// Plans the tier's event `ev` at `at`.
    pub(crate) fn push(&mut self, at: SimTime, ev: E) {
        self.queue.push(at, Planned::Tier(ev));
    }

    /// Plans the restart `ev` at an instant drawn from `rng` between `min`
    /// and `max` from now, but no later than the end of the fault phase.
    pub(crate) fn restart(&mut self, rng: &mut impl Rng, (min, max): (Duration, Duration), ev: E) {
        let after = between(rng, min, max);
        self.push(self.now.after(after).min(self.fault_end), ev);
    }

    /// Plans how the run opens, drawing from `rng`: the first start of every
    /// slot, `start(i)` for slot `i`, each within `stagger` of the
    /// beginning (all at once for none); then the tier's faults, each kind with its mean interval
    /// (none for a kind that is off) striking as a Poisson process from
    /// `settle` on until its heal time before the fault phase ends, as the
    /// tier's event `inject(kind)`.
    pub(crate) fn push_opening<K: PlannedKind>(
        &mut self,
        rng: &mut impl Rng,
        term: Duration,
        (stagger, settle): (Duration, Duration),
        kinds: impl IntoIterator<Item = (K, Option<Duration>)>,
        start: impl Fn(usize) -> E,
        inject: impl Fn(K) -> E,
    ) {
        for i in 0..self.slots.len() {
            let at = SimTime::from_duration(between(rng, Duration::ZERO, stagger));
            self.push(at, start(i));
        }
        let settle = SimTime::from_duration(settle);
        for (at, kind) in faults::schedule(rng, kinds, settle, self.fault_end, term) {
            self.push(at, inject(kind));
        }
    }

    /// Sleeps until the next event the tier planned and returns it, or
    /// `None` once nothing is planned; closes the windows of store trouble
    /// that end on the way.
    pub(crate) async fn next(&mut self) -> Option<E> {
        loop {
            let (at, ev) = self.queue.pop()?;
            tokio::time::sleep_until(self.origin + at.as_duration()).await;
            self.now = at;
            match ev {
                Planned::Tier(ev) => return Some(ev),
                Planned::WindowEnd { node, life, kind } => self.window_end(node, life, kind),
            }
        }
    }

    /// Records an event of the run in the trace.
    pub(crate) fn event(
        &self,
        node: Option<usize>,
        tag: &'static str,
        nums: &[u64],
        text: impl FnOnce() -> String,
    ) {
        lock(&self.findings)
            .trace
            .event(self.now, node, tag, nums, text);
    }

    /// A tokio instant as real (simulated) time.
    pub(crate) fn sim_time(&self, t: Instant) -> SimTime {
        SimTime::from_duration(t.saturating_duration_since(self.origin))
    }

    /// Records a violation found now.
    pub(crate) fn violation(
        &self,
        kind: ViolationKind,
        nodes: Vec<usize>,
        tokens: Vec<u64>,
        detail: String,
    ) {
        lock(&self.findings)
            .violations
            .add(kind, self.now, nodes, tokens, detail);
    }

    /// The run's record once it is over, with `timing`'s skew bound and
    /// liveness timeout: what its tasks found and then what the tier's
    /// closing checks found (`closing`), sorted by when each was found
    /// (a stable sort: violations found at one instant keep that order),
    /// and the trace.
    pub(crate) fn record(&self, timing: &Timing, closing: Vec<Violation>) -> RunRecord {
        let (mut violations, trace) = lock(&self.findings).take();
        violations.extend(closing);
        violations.sort_by_key(|v| v.at);
        RunRecord::new(self.seed, self.now, timing, violations, trace)
    }

    /// The violations a term log of `place` (a group or a shard) shows.
    pub(crate) fn term_problems(&self, log: &TermLog, place: &str, what: &str) -> Vec<Violation> {
        let node = |span: &tenure_testkit::TermSpan| self.slot_of(&span.candidate);
        term_violations(self.seed, log, place, what, node, |t| self.sim_time(t))
    }

    /// The slot of a term's candidate, named by its id (a member process's
    /// label adds `#life` to it), or `usize::MAX` if none is.
    fn slot_of(&self, candidate: &str) -> usize {
        let id = candidate.split('#').next().unwrap_or(candidate);
        self.slots
            .iter()
            .position(|s| s.name == id)
            .unwrap_or(usize::MAX)
    }

    /// The slot whose id is `id` (a candidate's, as its records name it),
    /// if any.
    pub(crate) fn slot_index(&self, id: &str) -> Option<usize> {
        self.slots.iter().position(|s| s.name == id)
    }

    /// A new slot named `name`, its clock drawn from `rng` within `shared`'s
    /// drift bound and this seed's `skew` bound, and whether its views of
    /// the store notify after it; returns its index.
    pub(crate) fn add_slot(
        &mut self,
        name: String,
        rng: &mut impl Rng,
        shared: &Shared,
        skew: Option<Duration>,
    ) -> usize {
        let i = self.slots.len();
        let model = shared.draw_clock(rng, skew);
        let notify = shared.notify.draw(rng);
        self.slots.push(Slot {
            name,
            clock: Arc::new(
                SimClock::new(self.origin, model, i, self.findings.clone()).seeded(self.seed),
            ),
            notify,
            life: 0,
            current: None,
        });
        i
    }

    /// The slots with a running process, in order.
    pub(crate) fn running(&self) -> Vec<usize> {
        (0..self.slots.len())
            .filter(|&i| self.slots[i].current.is_some())
            .collect()
    }

    /// What a new process of slot `n` starts with, unless one is running:
    /// its view of the store (its ordinary latency drawn from `rng`, up to
    /// `latency`) and the seed of its work's choices.
    pub(crate) fn next_process(
        &mut self,
        n: usize,
        rng: &mut impl Rng,
        latency: Duration,
    ) -> Option<NewProcess> {
        if self.slots[n].current.is_some() {
            return None;
        }
        let view = StoreView::new(rng, latency, self.slots[n].notify);
        let work_seed: u64 = rng.gen();
        let slot = &mut self.slots[n];
        slot.life += 1;
        Some(NewProcess {
            life: slot.life,
            view,
            work_seed,
        })
    }

    /// Slot `n`'s new process `inc` has started.
    pub(crate) fn started(&mut self, n: usize, inc: Incarnation<H>) {
        let (life, latency) = (inc.life, inc.view.latency);
        self.slots[n].current = Some(inc);
        self.event(Some(n), "start", &[u64::from(life)], || {
            format!("process {life} starts, latency {latency:?}")
        });
    }

    /// Opens a window of store trouble of `kind` for slot `n`'s current
    /// process, as long as `kind`'s windows last (drawn from `rng`); a slow
    /// operation in it takes from the ordinary `latency` bound up to 1.5
    /// operation timeouts.
    pub(crate) fn trouble(
        &mut self,
        n: usize,
        kind: Window,
        rng: &mut impl Rng,
        latency: Duration,
        timing: &Timing,
    ) {
        let d = kind.window(rng, timing.term);
        let slow = between(rng, latency, timing.op_timeout * 3 / 2);
        self.window(n, kind, self.now.after(d), slow);
    }

    /// Opens a window of store trouble of `kind` for slot `n`'s current
    /// process until `until`; `slow` is the latency of a slow one.
    pub(crate) fn window(&mut self, n: usize, kind: Window, until: SimTime, slow: Duration) {
        let slot = &mut self.slots[n];
        let Some(inc) = slot.current.as_mut() else {
            return;
        };
        if !inc.view.open(&slot.name, kind, until, slow) {
            return;
        }
        let life = inc.life;
        self.event(Some(n), "WINDOW", &[kind as u64, until.as_nanos()], || {
            format!("{kind:?} until {until} (slow ops take {slow:?})")
        });
        let end = Planned::WindowEnd {
            node: n,
            life,
            kind,
        };
        self.queue.push(until, end);
    }

    /// Closes a window of store trouble, if the process it was opened on
    /// still runs.
    fn window_end(&mut self, n: usize, life: u32, kind: Window) {
        let t = self.now;
        let slot = &mut self.slots[n];
        let Some(inc) = slot.current.as_mut().filter(|inc| inc.life == life) else {
            return;
        };
        if inc.view.close(&slot.name, kind, t) {
            self.event(Some(n), "heal", &[kind as u64], || format!("{kind:?} ends"));
        }
    }

    /// Slot `n`'s process dies: its application and work stop at once, and
    /// it never reaches the store again. Returns its handle, if a process
    /// was running.
    pub(crate) fn crash(&mut self, n: usize) -> Option<H> {
        let slot = &mut self.slots[n];
        let inc = slot.current.take()?;
        inc.view.faults.partition(&slot.name);
        for task in &inc.tasks {
            task.abort();
        }
        Some(inc.handle)
    }
}
