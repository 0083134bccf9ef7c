//! A member's processes: starting one with its application (the work of
//! every shard it holds, run by `run_per_shard`, and an event listener),
//! and the changes and faults that strike it.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tenure::{Clock, Metadata, ShardEvent, Shards, Term};
use tenure_testkit::{SpanGuard, TermLog};

use crate::elector::behaviour::Behaviour;
use crate::elector::clock::TIMER_RESOLUTION;

use super::pause::{PausedClock, PausedStore};
use super::*;

/// Why a member's `run_per_shard` returned an error.
#[derive(Debug)]
enum WorkFailed {
    /// A work failed, as drawn.
    Drawn,
    /// A shard's elector stopped for good (the token cannot run out here,
    /// so this is a violation).
    Fatal(tenure::ElectorError),
}

impl From<tenure::ElectorError> for WorkFailed {
    fn from(e: tenure::ElectorError) -> Self {
        WorkFailed::Fatal(e)
    }
}

/// What a member process's work needs.
#[derive(Clone)]
struct WorkCtx {
    node: usize,
    /// The member id and the process's life, as `m3#2`.
    label: String,
    clock: Arc<PausedClock>,
    /// Per shard, spans of every term's work.
    work: Arc<Vec<TermLog>>,
    /// Per shard, spans of every term's validity.
    terms: Arc<Vec<TermLog>>,
    /// The (shard, token) pairs whose validity span this process opened.
    seen: Arc<Mutex<HashSet<(usize, u64)>>>,
    findings: Arc<Mutex<Findings>>,
    rng: Arc<Mutex<StdRng>>,
    term: Duration,
    /// Work quits or fails on its own only from `rough_from` (the check of
    /// a simultaneous start, which is about the library's convergence, not
    /// the application's failures) until the tail.
    rough_from: SimTime,
    fault_end: SimTime,
}

/// A span of one shard's work or term, kept open while it lasts. Dropped
/// after its process was frozen and seen again only as it thawed, it ends
/// where the process froze: nothing ran under it in between.
struct Span {
    guard: Option<SpanGuard>,
    began: SimTime,
    clock: Arc<PausedClock>,
}

impl Span {
    fn open(log: &TermLog, label: &str, token: u64, clock: &Arc<PausedClock>) -> Span {
        Span {
            guard: Some(log.open(label, token)),
            began: clock.inner.real_now(),
            clock: clock.clone(),
        }
    }

    /// When the span ends if it ends now.
    fn end(&self) -> SimTime {
        let now = self.clock.inner.real_now();
        self.clock
            .pause
            .frozen_since(self.began, now, TIMER_RESOLUTION)
            .unwrap_or(now)
    }
}

impl Drop for Span {
    fn drop(&mut self) {
        let end = self.end();
        if let Some(guard) = self.guard.take() {
            guard.end_at(self.clock.pause.instant(end));
        }
    }
}

/// A term's work in progress on one shard: its span, and the check that it
/// does not outlive the term.
struct WorkSpan {
    span: Span,
    shard: usize,
    term: Term,
    ctx: WorkCtx,
}

impl Drop for WorkSpan {
    fn drop(&mut self) {
        let end = self.span.end();
        let until = self
            .ctx
            .clock
            .inner
            .model()
            .real_at(self.term.deadline_mono());
        let token = self.term.token();
        let s = self.shard;
        let mut f = lock(&self.ctx.findings);
        let t = self.ctx.clock.inner.real_now();
        f.trace.event(
            t,
            Some(self.ctx.node),
            "work end",
            &[s as u64, token],
            || format!("shard {s}: the work of token {token} stops (as of {end})"),
        );
        let who = (self.ctx.node, self.ctx.label.as_str());
        f.work_ends(end, until, who, &format!("shard {s}"), token);
    }
}

impl WorkCtx {
    /// The work of `term` on shard `s` starts now, behaving as
    /// `behaviour`; the first work of a term also opens the term's
    /// validity span, which ends when the term does.
    fn begin(&self, s: usize, term: &Term, behaviour: Behaviour) -> WorkSpan {
        let t = self.clock.inner.real_now();
        let until = self.clock.inner.model().real_at(term.deadline_mono());
        let token = term.token();
        let mut f = lock(&self.findings);
        f.trace
            .event(t, Some(self.node), "WORK", &[s as u64, token], || {
                format!("shard {s}: the work of token {token} starts: {behaviour:?}")
            });
        let who = (self.node, self.label.as_str());
        f.work_starts(t, until, who, &format!("shard {s}"), token);
        drop(f);
        if lock(&self.seen).insert((s, token)) {
            let span = Span::open(&self.terms[s], &self.label, token, &self.clock);
            let term = term.clone();
            // Not one of the process's tasks: a crash does not end a term;
            // its deadline does.
            tokio::spawn(async move {
                tokio::select! {
                    biased;
                    _ = term.ended() => {}
                    _ = term.expired() => {}
                }
                drop(span);
            });
        }
        WorkSpan {
            span: Span::open(&self.work[s], &self.label, token, &self.clock),
            shard: s,
            term: term.clone(),
            ctx: self.clone(),
        }
    }

    fn draw(&self) -> Behaviour {
        let now = self.clock.inner.real_now();
        // Calm before `rough_from`: drawn as if the tail began now.
        let rough_until = if now < self.rough_from {
            now
        } else {
            self.fault_end
        };
        Behaviour::draw(&mut lock(&self.rng), self.term, now, rough_until)
    }

    /// Sleeps `d` on the member's clock (so not while it is frozen).
    async fn sleep(&self, d: Duration) {
        let at = self.clock.inner.mono() + d;
        self.clock.sleep_until(at).await;
    }
}

async fn work(ctx: WorkCtx, shard: String, term: Term) -> Result<(), WorkFailed> {
    let Some(s) = super::catalog::shard_index(&shard) else {
        let t = ctx.clock.inner.real_now();
        lock(&ctx.findings).violations.add(
            ViolationKind::Contract,
            t,
            vec![ctx.node],
            vec![term.token()],
            format!(
                "run_per_shard handed {} a shard named {shard:?}, not one of the set's",
                ctx.label
            ),
        );
        return Err(WorkFailed::Drawn);
    };
    let behaviour = ctx.draw();
    let _span = ctx.begin(s, &term, behaviour);
    behaviour
        .act(&term, |d| ctx.sleep(d), WorkFailed::Drawn)
        .await
}

/// For a set that follows a catalog: every quarter term, the member marks
/// the parents it holds finished (a stream consumer that has read a closed
/// shard to its end says so, whatever its work is doing); a refused mark
/// (the term just ended) is made again by the next holder.
async fn mark_parents(shards: Shards, finishing: super::catalog::Finishing, ctx: WorkCtx) {
    loop {
        for (shard, term) in shards.held() {
            if super::catalog::shard_index(&shard).is_some_and(|s| finishing.to_mark(s)) {
                let result = shards.mark_finished(&shard, &term).await;
                let t = ctx.clock.inner.real_now();
                lock(&ctx.findings).trace.event(
                    t,
                    Some(ctx.node),
                    "finished",
                    &[term.token()],
                    || format!("shard {shard}: marked finished: {result:?}"),
                );
            }
        }
        ctx.sleep(ctx.term / 4).await;
    }
}

/// The application: runs the work of every shard the member holds until it
/// stops, calling `run_per_shard` again when a work fails.
async fn app(shards: Shards, ctx: WorkCtx) {
    loop {
        let c = ctx.clone();
        let run = shards
            .run_per_shard(move |shard, term| work(c.clone(), shard, term))
            .await;
        match run {
            Ok(()) => return,
            Err(WorkFailed::Drawn) => {}
            Err(WorkFailed::Fatal(e)) => {
                let t = ctx.clock.inner.real_now();
                lock(&ctx.findings).violations.add(
                    ViolationKind::Contract,
                    t,
                    vec![ctx.node],
                    vec![],
                    format!("{}: a shard's elector gave up for good: {e}", ctx.label),
                );
                return;
            }
        }
    }
}

/// Counts and traces what the member reports.
async fn listen(
    shards: Shards,
    node: usize,
    clock: Arc<PausedClock>,
    findings: Arc<Mutex<Findings>>,
    views: Arc<AtomicU64>,
) {
    let mut events = shards.events();
    drop(shards);
    while let Some(event) = events.next().await {
        let t = clock.inner.real_now();
        let mut f = lock(&findings);
        match event {
            ShardEvent::Acquired { shard, token } => {
                f.elections += 1;
                f.trace.event(t, Some(node), "ACQUIRED", &[token], || {
                    format!("shard {shard}: token {token}")
                });
            }
            ShardEvent::Released {
                shard,
                token,
                reason,
            } => {
                *f.end_reasons.entry(reason.label()).or_insert(0) += 1;
                f.trace.event(t, Some(node), "released", &[token], || {
                    format!("shard {shard}: token {token}: {reason}")
                });
            }
            ShardEvent::MembersChanged { members } => {
                views.fetch_add(1, Ordering::Relaxed);
                let ids: Vec<String> = members.into_iter().map(|m| m.id).collect();
                f.trace
                    .event(t, Some(node), "members", &[ids.len() as u64], || {
                        format!("sees {ids:?}")
                    });
            }
            ShardEvent::ShardsChanged { generation, shards } => {
                f.trace.event(t, Some(node), "catalog", &[generation], || {
                    format!("generation {generation}: ready {shards:?}")
                });
            }
            ShardEvent::CatalogFailed { error } => {
                f.trace
                    .event(t, Some(node), "catalog failed", &[], || error);
            }
            _ => {}
        }
    }
}

impl Set {
    /// A new member slot (an id never used before), with its own clock.
    pub(super) fn add_slot(&mut self) -> usize {
        let name = format!("m{}", self.stage.slots.len());
        let shared = self.params.shared;
        self.stage.add_slot(name, &mut self.rng, &shared, self.skew)
    }

    /// Starts a new process of member `n`, unless one is running: its
    /// [`Shards`] member on its own view of the store, and its application.
    pub(super) fn start(&mut self, n: usize) {
        let latency = self.params.shared.latency;
        let Some(new) = self.stage.next_process(n, &mut self.rng, latency) else {
            return;
        };
        let slot = &self.stage.slots[n];
        let pause = Pause::new(self.stage.origin);
        let store = PausedStore::new(
            new.view.faults.wrap(self.store.clone(), slot.name.clone()),
            pause.clone(),
            self.catalog_reads.clone(),
        );
        let clock = Arc::new(PausedClock {
            inner: slot.clock.clone(),
            pause: pause.clone(),
        });
        let builder = Shards::builder(store, SET).member_id(slot.name.clone());
        let builder = match &self.catalog {
            Some(c) => builder.catalog(c.member_source(n), CatalogSim::refresh(self.timing.term)),
            None => builder.shards(self.work.len()),
        };
        let started = builder
            .config(self.config.clone())
            .metadata(Metadata::address(format!("10.0.0.{n}:8080")))
            .clock(clock.clone())
            .start();
        let shards = match started {
            Ok(s) => s,
            Err(e) => {
                let detail = format!("member {} could not start: {e}", slot.name);
                self.stage
                    .violation(ViolationKind::Contract, vec![n], vec![], detail);
                return;
            }
        };
        self.stage.incarnations += 1;
        let ctx = WorkCtx {
            node: n,
            label: format!("{}#{}", slot.name, new.life),
            clock: clock.clone(),
            work: self.work.clone(),
            terms: self.terms.clone(),
            seen: Arc::default(),
            findings: self.stage.findings.clone(),
            rng: Arc::new(Mutex::new(StdRng::seed_from_u64(new.work_seed))),
            term: self.timing.term,
            rough_from: if self.together {
                SimTime::from_duration(self.bounds.settle)
            } else {
                SimTime::from_duration(Duration::ZERO)
            },
            fault_end: self.stage.fault_end,
        };
        let mut tasks = Vec::new();
        if let Some(c) = &self.catalog {
            let marking = mark_parents(shards.clone(), c.finishing.clone(), ctx.clone());
            tasks.push(tokio::spawn(marking));
        }
        tasks.extend([
            tokio::spawn(app(shards.clone(), ctx)),
            tokio::spawn(listen(
                shards.clone(),
                n,
                clock,
                self.stage.findings.clone(),
                self.views.clone(),
            )),
        ]);
        let inc = Incarnation {
            life: new.life,
            handle: Member { shards, pause },
            view: new.view,
            tasks,
        };
        self.stage.started(n, inc);
    }

    /// A random member with a running process.
    fn pick(&mut self) -> Option<usize> {
        let up = self.stage.running();
        (!up.is_empty()).then(|| up[self.rng.gen_range(0..up.len())])
    }

    pub(super) fn inject(&mut self, kind: Planned) {
        let t = self.stage.now;
        let term = self.timing.term;
        if kind == Planned::Join {
            if self.stage.running().len() < self.params.tier.max_members {
                self.joins += 1;
                let n = self.add_slot();
                self.stage
                    .event(Some(n), "JOIN", &[], || "a new member joins".into());
                self.start(n);
            }
            return;
        }
        let Some(n) = self.pick() else {
            return;
        };
        match kind {
            Planned::Join => {}
            Planned::Crash => {
                self.faults[FaultKind::Crash] += 1;
                self.crash(n);
                self.stage
                    .restart(&mut self.rng, (term / 5, term * 3), Ev::Start(n));
            }
            Planned::Leave => {
                self.faults[FaultKind::Shutdown] += 1;
                self.leave(n);
                // Two in three come back under the same id.
                if self.rng.gen_range(0..3) > 0 {
                    self.stage
                        .restart(&mut self.rng, (term / 5, term * 2), Ev::Start(n));
                }
            }
            Planned::Pause => {
                let d = pause_length(&mut self.rng, term);
                let kind = if d > term {
                    FaultKind::LongPause
                } else {
                    FaultKind::ShortPause
                };
                self.faults[kind] += 1;
                let Some(inc) = self.stage.slots[n].current.as_ref() else {
                    return;
                };
                let until = t.after(d);
                inc.handle.pause.freeze(until);
                let life = inc.life;
                self.stage
                    .event(Some(n), "PAUSE", &[d.as_nanos() as u64], || {
                        format!("the process is frozen for {d:?}")
                    });
                self.stage.push(until, Ev::Thaw { node: n, life });
            }
            Planned::Window(w) => {
                self.faults[w.kind()] += 1;
                let latency = self.params.shared.latency;
                self.stage
                    .trouble(n, w, &mut self.rng, latency, &self.timing);
            }
        }
    }

    /// Member `n`'s process dies: its application and work stop at once,
    /// and it never reaches the store again. Its `Shards` handle is kept,
    /// so the member does not leave gracefully: its leases run out.
    pub(super) fn crash(&mut self, n: usize) {
        let Some(member) = self.stage.crash(n) else {
            return;
        };
        self.zombies.push(member.shards);
        self.stage
            .event(Some(n), "CRASH", &[], || "the process crashes".into());
    }

    /// Member `n` leaves gracefully: it drains and releases its shards,
    /// then its membership; its application ends once it has stopped.
    pub(super) fn leave(&mut self, n: usize) {
        let Some(inc) = self.stage.slots[n].current.take() else {
            return;
        };
        self.stage
            .event(Some(n), "LEAVE", &[], || "leaves gracefully".into());
        tokio::spawn(async move { inc.handle.shards.shutdown().await });
    }
}
