//! A candidate's processes: starting one with its application (work loop,
//! pulses, event listener), the faults that strike it, and its work.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tenure::{Elector, Event, Metadata, Role, Term};
use tenure_testkit::{SpanGuard, TermLog};

use super::behaviour::Behaviour;
use super::*;

/// The error of a work that fails (or of an elector that stopped for good,
/// which `run_while_leader` reports through it).
#[derive(Debug)]
struct WorkFailed;

impl From<tenure::ElectorError> for WorkFailed {
    fn from(_: tenure::ElectorError) -> Self {
        WorkFailed
    }
}

/// What a candidate's work in one group needs.
#[derive(Clone)]
struct WorkCtx {
    node: usize,
    group: usize,
    name: String,
    clock: Arc<SimClock>,
    log: TermLog,
    findings: Arc<Mutex<Findings>>,
    rng: Arc<Mutex<StdRng>>,
    term: Duration,
    /// Work quits or fails on its own only before the fault-free tail.
    fault_end: SimTime,
}

/// A term's work in progress: its span in the work log, and the check that
/// it does not outlive the term.
struct WorkSpan {
    _span: SpanGuard,
    term: Term,
    ctx: WorkCtx,
}

impl Drop for WorkSpan {
    fn drop(&mut self) {
        let t = self.ctx.clock.real_now();
        let deadline = self.term.deadline_mono();
        let until = self.ctx.clock.model().real_at(deadline);
        let token = self.term.token();
        let mut f = lock(&self.ctx.findings);
        let g = self.ctx.group;
        f.trace.event(
            t,
            Some(self.ctx.node),
            "work end",
            &[g as u64, token],
            || format!("{}: the work of token {token} stops", group_name(g)),
        );
        let who = (self.ctx.node, self.ctx.name.as_str());
        f.work_ends(t, until, who, &format!("group {}", group_name(g)), token);
    }
}

impl WorkCtx {
    /// The work of `term` starts now, behaving as `behaviour`.
    fn begin(&self, term: &Term, behaviour: Behaviour) -> WorkSpan {
        let t = self.clock.real_now();
        let until = self.clock.model().real_at(term.deadline_mono());
        let token = term.token();
        let mut f = lock(&self.findings);
        let g = self.group;
        f.trace
            .event(t, Some(self.node), "WORK", &[g as u64, token], || {
                format!(
                    "{}: the work of token {token} starts: {behaviour:?}",
                    group_name(g)
                )
            });
        let who = (self.node, self.name.as_str());
        f.work_starts(t, until, who, &format!("group {}", group_name(g)), token);
        drop(f);
        WorkSpan {
            _span: self.log.open(self.name.clone(), term.token()),
            term: term.clone(),
            ctx: self.clone(),
        }
    }

    fn draw(&self) -> Behaviour {
        let now = self.clock.real_now();
        Behaviour::draw(&mut lock(&self.rng), self.term, now, self.fault_end)
    }
}

async fn work(ctx: WorkCtx, term: Term) -> Result<(), WorkFailed> {
    let behaviour = ctx.draw();
    let _span = ctx.begin(&term, behaviour);
    behaviour.act(&term, tokio::time::sleep, WorkFailed).await
}

/// The application: runs the work of every term until the elector stops,
/// standing again when a work fails.
async fn app(elector: Elector, ctx: WorkCtx) {
    loop {
        let run = elector
            .run_while_leader(|term| work(ctx.clone(), term))
            .await;
        if run.is_ok() {
            return;
        }
    }
}

/// Pulses every elector of the process every quarter of the liveness
/// timeout, unless stalled, until they have all stopped.
async fn pulses(
    electors: Vec<Elector>,
    clock: Arc<SimClock>,
    stalled: Arc<AtomicU64>,
    every: Duration,
) {
    loop {
        if clock.real_now().as_nanos() >= stalled.load(Ordering::Relaxed) {
            for e in &electors {
                e.pulse();
            }
        }
        tokio::time::sleep(every).await;
        if electors.iter().all(|e| matches!(e.role(), Role::Stopped)) {
            return;
        }
    }
}

/// Counts what the elector reports; a candidate that gives up for good is a
/// violation (the token cannot run out here).
async fn listen(
    mut events: tenure::EventStream,
    node: usize,
    group: usize,
    clock: Arc<SimClock>,
    findings: Arc<Mutex<Findings>>,
) {
    let g = group as u64;
    while let Some(event) = events.next().await {
        let t = clock.real_now();
        let mut f = lock(&findings);
        match event {
            Event::Elected { token } => {
                f.elections += 1;
                f.trace.event(t, Some(node), "ELECTED", &[g, token], || {
                    format!("{}: token {token}", group_name(group))
                });
            }
            Event::Ousted { token, reason } => {
                *f.end_reasons.entry(reason.label()).or_insert(0) += 1;
                f.trace.event(t, Some(node), "ousted", &[g, token], || {
                    format!("{}: token {token}: {reason}", group_name(group))
                });
            }
            Event::StoreHealth { message: Some(_) } => f.store_alarms += 1,
            Event::Failed { fault } => f.violations.add(
                ViolationKind::Contract,
                t,
                vec![node],
                vec![],
                format!(
                    "group {}: node {node} gave up for good: {fault}",
                    group_name(group)
                ),
            ),
            _ => {}
        }
    }
}

impl Cluster {
    /// Starts a new process of candidate `n`, unless one is running: an
    /// elector for every group on one store handle, and its application.
    pub(super) fn start(&mut self, n: usize) {
        let latency = self.params.shared.latency;
        let Some(new) = self.stage.next_process(n, &mut self.rng, latency) else {
            return;
        };
        let slot = &self.stage.slots[n];
        let store = new.view.faults.wrap(self.store.clone(), slot.name.clone());
        let mut electors = Vec::new();
        // The control that leaves priorities unset builds the electors
        // as if priorities were off; the checker still expects them.
        let priority = self
            .priorities
            .as_ref()
            .filter(|_| !self.params.tier.priorities_unset);
        for g in 0..self.work.len() {
            let mut builder = Elector::builder(store.clone(), group_name(g))
                .candidate_id(slot.name.clone())
                .config(self.config.clone())
                .metadata(Metadata::address(format!("10.0.0.{n}:8080")))
                .clock(slot.clock.clone());
            if let Some(p) = priority {
                if let Some(level) = p.of[n] {
                    builder = builder.priority(level);
                }
                if let Some(delay) = p.delay {
                    builder = builder.preempt_after(delay);
                }
            }
            let started = builder.start();
            match started {
                Ok(e) => electors.push(e),
                Err(e) => {
                    let detail = format!("node {n} could not start its elector: {e}");
                    self.stage
                        .violation(ViolationKind::Contract, vec![n], vec![], detail);
                    return;
                }
            }
        }
        self.stage.incarnations += 1;
        let rng = Arc::new(Mutex::new(StdRng::seed_from_u64(new.work_seed)));
        let mut tasks = Vec::new();
        for (g, elector) in electors.iter().enumerate() {
            self.published[g].add(elector);
            let ctx = WorkCtx {
                node: n,
                group: g,
                name: slot.name.clone(),
                clock: slot.clock.clone(),
                log: self.work[g].clone(),
                findings: self.stage.findings.clone(),
                rng: rng.clone(),
                term: self.timing.term,
                fault_end: self.stage.fault_end,
            };
            tasks.push(tokio::spawn(app(elector.clone(), ctx)));
            tasks.push(tokio::spawn(listen(
                elector.events(),
                n,
                g,
                slot.clock.clone(),
                self.stage.findings.clone(),
            )));
        }
        if let Some(timeout) = self.timing.liveness_timeout {
            tasks.push(tokio::spawn(pulses(
                electors.clone(),
                slot.clock.clone(),
                self.stalled_until[n].clone(),
                timeout / 4,
            )));
        }
        let inc = Incarnation {
            life: new.life,
            handle: electors,
            view: new.view,
            tasks,
        };
        self.stage.started(n, inc);
    }

    /// A random candidate with a process, and a random group: the group's
    /// leader with probability `p_leader`.
    fn target(&mut self, p_leader: f64) -> Option<(usize, usize)> {
        let g = self.rng.gen_range(0..self.work.len());
        if let Some((l, _)) = self.leader(g) {
            if self.rng.gen_bool(p_leader) {
                return Some((l, g));
            }
        }
        let up = self.stage.running();
        if up.is_empty() {
            return None;
        }
        Some((up[self.rng.gen_range(0..up.len())], g))
    }

    pub(super) fn inject(&mut self, kind: Planned) {
        let t = self.stage.now;
        let term = self.timing.term;
        let p_leader = match kind {
            Planned::Resign => 0.8,
            Planned::Stall => 0.7,
            _ => 0.5,
        };
        let Some((n, g)) = self.target(p_leader) else {
            return;
        };
        self.faults[kind.kind()] += 1;
        match kind {
            Planned::Crash => {
                self.crash(n);
                self.stage
                    .restart(&mut self.rng, (term / 5, term * 3), Ev::Start(n));
            }
            Planned::Shutdown => {
                let Some(inc) = self.stage.slots[n].current.take() else {
                    return;
                };
                self.stage
                    .event(Some(n), "SHUTDOWN", &[], || "asked to shut down".into());
                // The application's tasks end once the electors have stopped.
                for e in inc.handle {
                    tokio::spawn(async move { e.shutdown().await });
                }
                self.stage
                    .restart(&mut self.rng, (term / 5, term * 2), Ev::Start(n));
            }
            Planned::Resign => {
                self.stage.event(Some(n), "RESIGN", &[g as u64], || {
                    format!("{}: asked to resign", group_name(g))
                });
                if let Some(e) = self.stage.slots[n]
                    .current
                    .as_ref()
                    .and_then(|i| i.handle.get(g))
                {
                    e.resign();
                }
            }
            Planned::Stall => {
                let d = kind.window(&mut self.rng, term);
                self.stage
                    .event(Some(n), "STALL", &[d.as_nanos() as u64], || {
                        format!("application stops pulsing for {d:?}")
                    });
                let until = t.after(d).as_nanos();
                self.stalled_until[n].fetch_max(until, Ordering::Relaxed);
            }
            Planned::Partition | Planned::Slow | Planned::Failing | Planned::LostReplies => {
                let latency = self.params.shared.latency;
                self.stage
                    .trouble(n, kind, &mut self.rng, latency, &self.timing);
            }
        }
    }

    /// Every candidate is cut off from the store until the fault phase ends.
    pub(super) fn storm(&mut self) {
        self.stage.event(None, "STORM", &[], || {
            "every candidate cut off until the fault phase ends".into()
        });
        for n in 0..self.stage.slots.len() {
            if self.stage.slots[n].current.is_some() {
                self.faults[Planned::Partition.kind()] += 1;
                self.stage
                    .window(n, Planned::Partition, self.stage.fault_end, Duration::ZERO);
            }
        }
    }

    /// Candidate `n`'s process dies: its application and work stop at
    /// once, and it never reaches the store again (its elector, left to
    /// itself, times out and stops).
    pub(super) fn crash(&mut self, n: usize) {
        let Some(_electors) = self.stage.crash(n) else {
            return;
        };
        self.stage
            .event(Some(n), "CRASH", &[], || "process crashes".into());
    }
}
