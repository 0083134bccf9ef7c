//! The discrete-event world: one real timeline, a queue of events on it,
//! the store, and the nodes with their machines, clocks and faults.
//!
//! Nothing here runs concurrently and nothing reads a real clock: events are
//! processed in (instant, sequence number) order, and every random choice
//! comes from one `StdRng` seeded by the run's seed, so a seed replays
//! exactly.
//!
//! How a node's environment is modelled, and why:
//!
//! * **Requests and replies** travel with a random latency; the store applies
//!   a request at the instant it arrives (a linearizable register). A
//!   request can be dropped (never applied), slowed past the operation
//!   timeout (so it may apply after its sender gave up), failed by the store,
//!   or applied with its reply lost.
//! * **Operation deadlines** are the machine's, on the node's clock: the
//!   simulator converts each to the real instant that clock reaches it and
//!   delivers `StoreError::Timeout` then, unless a reply came first. A reply
//!   arriving after the timeout is dropped (and the machine would ignore its
//!   stale `OpId` anyway).
//! * **A pause** (GC, SIGSTOP) holds every input of the node, timers
//!   included, until it ends, then delivers them in arrival order: a reply
//!   that arrived before its deadline is processed after it, with the clock
//!   showing the whole pause, as a real process would see it.
//! * **A crash** loses the machine, its queued inputs and its work; requests
//!   already sent still reach the store. The node restarts later as a new
//!   incarnation with the same id and the same (boot-time) clock.
//! * **Work**: on `EndTerm` the work stops after a random delay, never later
//!   than the work deadline and sometimes at once, then `Drained` is fed.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BinaryHeap};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tenure::machine::{Action, Input, Machine, OpId};
use tenure::{
    CasOutcome, GroupName, Holder, LeaseRecord, MemoryStore, Metadata, StoreError, Timing, Version,
    Versioned,
};

use crate::checker::{Checker, LivenessBounds};
use crate::clock::{NodeClock, SimTime};
use crate::faults::{self, between, FaultCounts, FaultKind, OpFate, Planned};
use crate::params::{Liveness, Notify, SimError, SimParams, SkewBound};
use crate::report::SimReport;
use crate::trace::Trace;

/// The fastest one-way trip between a node and the store.
const MIN_LATENCY: Duration = Duration::from_micros(500);

/// After this many wake-ups in a row that change nothing and ask for another
/// at once, a machine is busy-waiting; the simulator notes it and backs off.
const SPIN_LIMIT: u32 = 3;
/// The first busy-wait back-off.
const MIN_BACKOFF: Duration = Duration::from_millis(1);
/// The longest busy-wait back-off: short against every timer of the machine.
const MAX_BACKOFF: Duration = Duration::from_millis(64);

/// An input on its way to a node.
#[derive(Debug)]
enum Msg {
    /// The process (re)started.
    Start,
    /// A timer the machine asked for (stale unless `gen` is the latest).
    Tick(u64),
    ReadReply {
        op: OpId,
        result: Option<Versioned>,
    },
    CasReply {
        op: OpId,
        outcome: CasOutcome,
    },
    /// The store failed the operation transiently.
    Failed(OpId),
    /// The operation's deadline passed on the node's clock.
    Timeout(OpId),
    Drained(u64),
    Resign,
    Shutdown,
    Changed,
}

impl Msg {
    /// Whether it travels from the store (and is lost in a partition).
    fn travels_from_store(&self) -> bool {
        matches!(
            self,
            Msg::ReadReply { .. } | Msg::CasReply { .. } | Msg::Failed(_) | Msg::Changed
        )
    }
}

#[derive(Debug)]
enum Req {
    Read,
    Cas {
        expected: Option<Version>,
        record: LeaseRecord,
    },
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum OpKind {
    Read,
    Cas,
}

#[derive(Debug)]
enum Ev {
    Deliver {
        node: usize,
        life: u32,
        msg: Msg,
    },
    /// A request reaches the store.
    Arrive {
        node: usize,
        life: u32,
        op: OpId,
        req: Req,
        fate: OpFate,
    },
    Inject(Planned),
    /// Every node at once, until the fault phase ends.
    Storm(Storm),
    PauseEnd {
        node: usize,
        life: u32,
    },
    PartitionEnd,
    /// The application's periodic pulse.
    Pulse {
        node: usize,
        life: u32,
    },
    StallEnd,
    Restart {
        node: usize,
    },
    CrashDeadline(usize),
    TailStart,
    HealDeadline,
    TailCrash,
    End,
}

/// A fault of the whole cluster that ends exactly when the fault phase ends,
/// so the heal check starts from the worst state: no valid term, every
/// node with an operation lost or a backlog of inputs.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Storm {
    /// Every node loses the store.
    PartitionAll,
    /// Every node pauses past its deadline.
    PauseAll,
}

struct Scheduled {
    at: SimTime,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scheduled {
    /// Reversed, so the max-heap pops the earliest (instant, sequence) first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

struct Node {
    name: String,
    clock: NodeClock,
    machine: Option<Machine>,
    /// Bumped on every crash and stop, so inputs meant for an earlier
    /// process are dropped.
    life: u32,
    paused: bool,
    deferred: Vec<Msg>,
    partitioned_until: SimTime,
    /// The application sends no pulses until then.
    stalled_until: SimTime,
    /// Operations awaiting a reply or a timeout.
    ops: BTreeMap<u64, OpKind>,
    wake_gen: u64,
    /// Consecutive idle ticks at which the machine asked to wake at once.
    spins: u32,
    /// The current busy-wait back-off, zero when not busy-waiting.
    backoff: Duration,
}

impl Node {
    fn up(&self) -> bool {
        self.machine.is_some()
    }
}

/// One seed's world.
pub(crate) struct World {
    seed: u64,
    params: SimParams,
    timing: Timing,
    rng: StdRng,
    store: MemoryStore,
    group: GroupName,
    nodes: Vec<Node>,
    queue: BinaryHeap<Scheduled>,
    seq: u64,
    now: SimTime,
    checker: Checker,
    trace: Trace,
    faults: FaultCounts,
    events: u64,
    fault_end: SimTime,
    notify: bool,
    skew: Option<Duration>,
    bounds: LivenessBounds,
    slow: Duration,
    heal_leader: Option<(usize, u64)>,
    end_reasons: BTreeMap<&'static str, u64>,
}

impl World {
    pub(crate) fn new(seed: u64, params: &SimParams) -> Result<Self, SimError> {
        params.check()?;
        let mut rng = StdRng::seed_from_u64(seed);
        let n = rng.gen_range(params.nodes.clone());
        let skew = match params.skew {
            SkewBound::Off => None,
            SkewBound::On(d) => Some(d),
            SkewBound::Random(d) => rng.gen_bool(0.5).then_some(d),
        };
        let notify = match params.notify {
            Notify::Off => false,
            Notify::On => true,
            Notify::Random => rng.gen_bool(0.5),
        };
        let liveness = match params.liveness {
            Liveness::Off => None,
            Liveness::On(d) => Some(d),
            Liveness::Random(d) => rng.gen_bool(0.5).then_some(d),
        };
        let timing = params.timing(skew, liveness)?;
        let group = GroupName::new("sim")?;
        // Slow requests and replies take up to 1.5 operation timeouts, so
        // some writes apply after their sender has given up on them.
        let slow = timing.op_timeout.mul_f64(1.5);
        let bounds = LivenessBounds::new(&timing, params.latency, slow);
        let clocks: Vec<NodeClock> = (0..n)
            .map(|_| NodeClock::random(&mut rng, params.effective_drift(), params.drift, skew))
            .collect();
        let fault_end = SimTime::from_duration(params.fault_phase);
        let term = timing.term;
        // The tail: the heal check, then (once the cluster has been quiet
        // long enough for a crash to be judged) a deliberate leader crash,
        // then time for the failover and its check.
        let heal_check = fault_end.after(bounds.heal);
        let tail_crash = fault_end.after(bounds.heal.max(bounds.quiet) + term / 2);
        let end = tail_crash.after(bounds.crash + term);
        let nodes = clocks
            .iter()
            .enumerate()
            .map(|(i, clock)| Node {
                name: format!("node-{i}"),
                clock: clock.clone(),
                machine: None,
                life: 0,
                paused: false,
                deferred: Vec::new(),
                partitioned_until: SimTime(0),
                stalled_until: SimTime(0),
                ops: BTreeMap::new(),
                wake_gen: 0,
                spins: 0,
                backoff: Duration::ZERO,
            })
            .collect();
        let checker = Checker::new(seed, clocks, bounds);
        let mut world = World {
            seed,
            params: params.clone(),
            timing,
            rng,
            store: MemoryStore::new(),
            group,
            nodes,
            queue: BinaryHeap::new(),
            seq: 0,
            now: SimTime(0),
            checker,
            trace: Trace::new(params.trace),
            faults: FaultCounts::default(),
            events: 0,
            fault_end,
            notify,
            skew,
            bounds,
            slow,
            heal_leader: None,
            end_reasons: BTreeMap::new(),
        };
        // Nodes come up at staggered instants in the first half term.
        for i in 0..n {
            let at = SimTime::from_duration(between(&mut world.rng, Duration::ZERO, term / 2));
            world.push(at, Ev::Restart { node: i });
        }
        let pulses = world.timing.liveness_timeout.is_some();
        let planned = faults::plan(&mut world.rng, &params.faults, fault_end, term, pulses);
        for (at, kind) in planned {
            world.push(at, Ev::Inject(kind));
        }
        // Half of the seeds end the fault phase with a storm of 2.5 terms
        // (the other half end in whatever state the random faults left).
        if params.faults.storms {
            let storm = match world.rng.gen_range(0..4) {
                0 => Some(Storm::PartitionAll),
                1 => Some(Storm::PauseAll),
                _ => None,
            };
            if let Some(storm) = storm {
                world.push(fault_end.before(term * 5 / 2), Ev::Storm(storm));
            }
        }
        world.push(fault_end, Ev::TailStart);
        world.push(heal_check, Ev::HealDeadline);
        world.push(tail_crash, Ev::TailCrash);
        world.push(end, Ev::End);
        Ok(world)
    }

    fn push(&mut self, at: SimTime, ev: Ev) {
        self.seq += 1;
        self.queue.push(Scheduled {
            at,
            seq: self.seq,
            ev,
        });
    }

    fn deliver_at(&mut self, at: SimTime, node: usize, msg: Msg) {
        let life = self.nodes[node].life;
        self.push(at, Ev::Deliver { node, life, msg });
    }

    fn latency(&mut self, slow: bool) -> Duration {
        if slow {
            between(&mut self.rng, self.params.latency, self.slow)
        } else {
            between(&mut self.rng, MIN_LATENCY, self.params.latency)
        }
    }

    fn count(&mut self, kind: FaultKind) {
        self.faults[kind] += 1;
    }

    pub(crate) fn run(mut self) -> SimReport {
        while let Some(s) = self.queue.pop() {
            self.now = s.at;
            self.events += 1;
            match s.ev {
                Ev::Deliver { node, life, msg } => self.deliver(node, life, msg),
                Ev::Arrive {
                    node,
                    life,
                    op,
                    req,
                    fate,
                } => self.arrive(node, life, op, req, fate),
                Ev::Inject(kind) => self.inject(kind),
                Ev::Storm(storm) => self.storm(storm),
                Ev::PauseEnd { node, life } => self.pause_end(node, life),
                Ev::Pulse { node, life } => self.pulse(node, life),
                Ev::StallEnd => {
                    self.trace
                        .event(self.now, None, "heal", &[], || "a pulse stall ends".into());
                    self.checker.disturb(self.now);
                }
                Ev::PartitionEnd => {
                    self.trace
                        .event(self.now, None, "heal", &[], || "a partition ends".into());
                    self.checker.disturb(self.now);
                }
                Ev::Restart { node } => self.restart(node),
                Ev::CrashDeadline(idx) => self.checker.crash_deadline(self.now, idx),
                Ev::TailStart => {
                    self.trace
                        .event(self.now, None, "tail", &[], || "faults healed".into());
                    self.checker.tail_start(self.now);
                }
                Ev::HealDeadline => self.heal_leader = self.checker.heal_deadline(self.now),
                Ev::TailCrash => self.tail_crash(),
                Ev::End => break,
            }
        }
        self.report()
    }

    fn report(self) -> SimReport {
        let checker = self.checker;
        SimReport {
            seed: self.seed,
            nodes: self.nodes.len(),
            sim_time: self.now.as_duration(),
            skew_bound: self.skew,
            liveness_timeout: self.timing.liveness_timeout,
            notify: self.notify,
            elections: checker.elections,
            handovers: checker.handovers,
            renewals: checker.renewals,
            faults: self.faults,
            crash_gaps: checker.crashes,
            crash_bound: self.bounds.crash,
            heal_bound: self.bounds.heal,
            heal_gap: checker.heal_gap,
            closest_handover: checker.closest,
            violations: checker.violations,
            notes: checker.notes,
            end_reasons: self.end_reasons,
            events: self.events,
            digest: self.trace.digest(),
            trace: self.trace.into_lines(),
        }
    }

    // ----- nodes -------------------------------------------------------------

    fn restart(&mut self, n: usize) {
        if self.nodes[n].up() {
            return;
        }
        let t = self.now;
        let incarnation: u64 = self.rng.gen();
        let machine_seed: u64 = self.rng.gen();
        let node = &mut self.nodes[n];
        let now = node.clock.now(t);
        let me = Holder {
            id: node.name.clone(),
            incarnation,
        };
        let md = Metadata::address(format!("10.0.0.{n}:8080"));
        node.machine = Some(Machine::new(self.timing.clone(), me, md, machine_seed, now));
        node.paused = false;
        node.deferred.clear();
        node.ops.clear();
        self.trace.event(t, Some(n), "start", &[incarnation], || {
            format!("process starts, incarnation {incarnation:#x}")
        });
        self.deliver_at(t, n, Msg::Start);
        if self.timing.liveness_timeout.is_some() {
            let life = self.nodes[n].life;
            self.push(t, Ev::Pulse { node: n, life });
        }
    }

    /// The application of node `n` pulses, unless it is stalled or its
    /// process paused (a paused application cannot pulse; nothing is queued).
    fn pulse(&mut self, n: usize, life: u32) {
        let t = self.now;
        let Some(timeout) = self.timing.liveness_timeout else {
            return;
        };
        let node = &self.nodes[n];
        if node.life != life || !node.up() {
            return;
        }
        if !node.paused && node.stalled_until <= t {
            let at = node.clock.mono(t);
            self.step(n, Input::Pulse { at });
        }
        self.push(t.after(timeout / 4), Ev::Pulse { node: n, life });
    }

    /// Loses the node's process: machine, queued inputs, work.
    fn kill(&mut self, n: usize) {
        let node = &mut self.nodes[n];
        node.machine = None;
        node.life += 1;
        node.paused = false;
        node.deferred.clear();
        node.ops.clear();
        node.wake_gen += 1;
    }

    fn deliver(&mut self, n: usize, life: u32, msg: Msg) {
        let t = self.now;
        let node = &mut self.nodes[n];
        if node.life != life || !node.up() {
            return;
        }
        if msg.travels_from_store() && node.partitioned_until > t {
            self.trace.event(t, Some(n), "lost", &[], || {
                format!("{msg:?} lost: node is partitioned")
            });
            return;
        }
        if node.paused {
            node.deferred.push(msg);
            return;
        }
        self.handle(n, msg);
    }

    fn handle(&mut self, n: usize, msg: Msg) {
        let t = self.now;
        let op_timeout = self.timing.op_timeout;
        let node = &mut self.nodes[n];
        let input = match msg {
            Msg::Start => Input::Tick,
            Msg::Tick(gen) => {
                if gen != node.wake_gen {
                    return;
                }
                Input::Tick
            }
            Msg::ReadReply { op, result } => {
                if node.ops.remove(&op.0).is_none() {
                    self.trace.event(t, Some(n), "late", &[op.0], || {
                        format!("reply to read {} after its timeout: dropped", op.0)
                    });
                    return;
                }
                Input::ReadDone {
                    op,
                    result: Ok(result),
                }
            }
            Msg::CasReply { op, outcome } => {
                if node.ops.remove(&op.0).is_none() {
                    self.trace.event(t, Some(n), "late", &[op.0], || {
                        format!(
                            "reply to cas {} ({outcome:?}) after its timeout: dropped",
                            op.0
                        )
                    });
                    return;
                }
                Input::CasDone {
                    op,
                    result: Ok(outcome),
                }
            }
            Msg::Failed(op) | Msg::Timeout(op) => {
                let Some(kind) = node.ops.remove(&op.0) else {
                    // Answered before its deadline (or the failure reply came
                    // after the timeout): nothing to report.
                    return;
                };
                let err = || match msg {
                    Msg::Timeout(_) => StoreError::Timeout(op_timeout),
                    _ => StoreError::Unavailable {
                        message: "injected store failure".into(),
                        source: None,
                    },
                };
                match kind {
                    OpKind::Read => Input::ReadDone {
                        op,
                        result: Err(err()),
                    },
                    OpKind::Cas => Input::CasDone {
                        op,
                        result: Err(err()),
                    },
                }
            }
            Msg::Drained(token) => {
                self.checker.drained(t, n, token);
                Input::Drained { token }
            }
            Msg::Resign => Input::Resign,
            Msg::Shutdown => Input::Shutdown,
            Msg::Changed => Input::Changed,
        };
        self.step(n, input);
    }

    fn step(&mut self, n: usize, input: Input) {
        let t = self.now;
        let is_tick = matches!(input, Input::Tick);
        let (nums, text) = self.trace_input(&input);
        let node = &mut self.nodes[n];
        let now = node.clock.now(t);
        let Some(machine) = node.machine.as_mut() else {
            return;
        };
        let actions = machine.step(now, input);
        self.trace.event(t, Some(n), "input", &nums, || text);
        let quiet_tick = is_tick && actions.is_empty();
        for a in actions {
            self.act(n, a);
        }
        self.schedule_wake(n, quiet_tick);
    }

    fn trace_input(&self, input: &Input) -> (Vec<u64>, String) {
        match input {
            Input::ReadDone { op, result } => {
                let v = match result {
                    Ok(Some(v)) => v.version.0,
                    Ok(None) => 0,
                    Err(_) => u64::MAX,
                };
                let text = if self.params.trace {
                    match result {
                        Ok(Some(v)) => format!(
                            "read {} -> {} holder {:?} token {}",
                            op.0,
                            v.version,
                            v.record.holder.as_ref().map(|h| &h.id),
                            v.record.token
                        ),
                        Ok(None) => format!("read {} -> empty", op.0),
                        Err(e) => format!("read {} -> error: {e}", op.0),
                    }
                } else {
                    String::new()
                };
                (vec![1, op.0, v], text)
            }
            Input::CasDone { op, result } => {
                let v = match result {
                    Ok(CasOutcome::Applied(v)) => v.0,
                    Ok(CasOutcome::Conflict) => 0,
                    Err(_) => u64::MAX,
                };
                let text = if self.params.trace {
                    match result {
                        Ok(o) => format!("cas {} -> {o:?}", op.0),
                        Err(e) => format!("cas {} -> error: {e}", op.0),
                    }
                } else {
                    String::new()
                };
                (vec![2, op.0, v], text)
            }
            Input::Tick => (vec![3], self.text(|| "tick".into())),
            Input::Drained { token } => (
                vec![4, *token],
                self.text(|| format!("drained token {token}")),
            ),
            Input::Resign => (vec![5], self.text(|| "resign".into())),
            Input::Shutdown => (vec![6], self.text(|| "shutdown".into())),
            Input::Changed => (vec![7], self.text(|| "change hint".into())),
            Input::Pulse { at } => (vec![8, at.as_nanos()], self.text(|| "pulse".into())),
        }
    }

    /// Trace text, built only when a trace is kept.
    fn text(&self, f: impl FnOnce() -> String) -> String {
        if self.params.trace {
            f()
        } else {
            String::new()
        }
    }

    fn schedule_wake(&mut self, n: usize, quiet_tick: bool) {
        let t = self.now;
        let node = &mut self.nodes[n];
        let Some(machine) = node.machine.as_ref() else {
            return;
        };
        let now = node.clock.now(t);
        let Some(wake) = machine.next_wake(now) else {
            node.wake_gen += 1;
            return;
        };
        let mut at = node.clock.real_at(wake).max(t);
        if at == t && quiet_tick {
            // A tick that changed nothing, and the machine wants another at
            // once: it is busy-waiting (a real driver would spin). Allow a
            // few, then back off exponentially (1 ms up to 64 ms) so the
            // simulation neither spins nor loses the machine's timers.
            node.spins += 1;
            if node.spins > SPIN_LIMIT {
                if node.backoff.is_zero() {
                    self.checker.note(
                        "busy-wait episodes: next_wake in the past and a tick there does nothing",
                    );
                }
                node.backoff = (node.backoff * 2).clamp(MIN_BACKOFF, MAX_BACKOFF);
                at = t.after(node.backoff);
            }
        } else if at > t || !quiet_tick {
            node.spins = 0;
            node.backoff = Duration::ZERO;
        }
        node.wake_gen += 1;
        let gen = node.wake_gen;
        self.deliver_at(at, n, Msg::Tick(gen));
    }

    fn act(&mut self, n: usize, action: Action) {
        let t = self.now;
        match action {
            Action::Read { op, deadline } => {
                self.trace
                    .event(t, Some(n), "read", &[op.0, deadline.as_nanos()], || {
                        format!("read {} deadline {}", op.0, deadline.as_nanos())
                    });
                self.nodes[n].ops.insert(op.0, OpKind::Read);
                self.send(n, op, Req::Read, deadline);
            }
            Action::Cas {
                op,
                expected,
                record,
                deadline,
            } => {
                let exp = expected.map_or(0, |v| v.0);
                self.trace.event(
                    t,
                    Some(n),
                    "cas",
                    &[op.0, exp, record.token, u64::from(record.holder.is_some())],
                    || {
                        format!(
                            "cas {} expect {:?} token {} {} deadline {}",
                            op.0,
                            expected,
                            record.token,
                            if record.holder.is_some() {
                                "hold"
                            } else {
                                "release"
                            },
                            deadline.as_nanos()
                        )
                    },
                );
                self.nodes[n].ops.insert(op.0, OpKind::Cas);
                self.send(n, op, Req::Cas { expected, record }, deadline);
            }
            Action::Elected { token, deadline } => {
                let real = self.nodes[n].clock.real_at(deadline);
                self.trace
                    .event(t, Some(n), "ELECTED", &[token, deadline.as_nanos()], || {
                        format!("token {token} until {} (real {real})", deadline.as_nanos())
                    });
                self.checker.elected(t, n, token, deadline);
            }
            Action::Renewed {
                token, deadline, ..
            } => {
                let real = self.nodes[n].clock.real_at(deadline);
                self.trace
                    .event(t, Some(n), "renewed", &[token, deadline.as_nanos()], || {
                        format!("token {token} until {} (real {real})", deadline.as_nanos())
                    });
                self.checker.renewed(t, n, token, deadline);
            }
            Action::EndTerm {
                token,
                reason,
                work_deadline,
            } => {
                self.trace.event(
                    t,
                    Some(n),
                    "END_TERM",
                    &[token, work_deadline.as_nanos()],
                    || {
                        format!(
                            "token {token}: {reason}; work gone by {}",
                            work_deadline.as_nanos()
                        )
                    },
                );
                *self.end_reasons.entry(reason.label()).or_insert(0) += 1;
                self.checker.end_term(t, n, token, work_deadline);
                // The work stops on its own schedule, at the latest by the
                // work deadline, and a third of the time at once.
                let by = self.nodes[n].clock.real_at(work_deadline);
                let at = if by <= t || self.rng.gen_bool(0.3) {
                    t
                } else {
                    t.after(between(&mut self.rng, Duration::ZERO, by.since(t)))
                };
                self.deliver_at(at, n, Msg::Drained(token));
            }
            Action::LeaderChanged { leader } => {
                let (id, token) = leader.as_ref().map_or((String::new(), 0), |v| {
                    (
                        v.record.holder_id().unwrap_or_default().to_string(),
                        v.record.token,
                    )
                });
                self.trace.event(t, Some(n), "leader", &[token], || {
                    format!("sees leader {id:?} token {token}")
                });
            }
            Action::Stopped => {
                self.trace
                    .event(t, Some(n), "stopped", &[], || "machine stopped".into());
                self.kill(n);
                // Redeployed after a while, but before the tail begins.
                let term = self.timing.term;
                let down = between(&mut self.rng, term / 5, term * 2);
                let at = t.after(down).min(self.fault_end.max(t));
                self.push(at, Ev::Restart { node: n });
            }
        }
    }

    // ----- the network and the store ----------------------------------------

    fn send(&mut self, n: usize, op: OpId, req: Req, deadline: tenure::MonoTime) {
        let t = self.now;
        let timeout_at = self.nodes[n].clock.real_at(deadline).max(t);
        self.deliver_at(timeout_at, n, Msg::Timeout(op));
        if self.nodes[n].partitioned_until > t {
            self.trace.event(t, Some(n), "lost", &[op.0], || {
                format!("request {} lost: node is partitioned", op.0)
            });
            return;
        }
        let fate = if t < self.fault_end {
            OpFate::draw(&mut self.rng, &self.params.faults)
        } else {
            OpFate::Normal
        };
        if let Some(kind) = fate.kind() {
            self.count(kind);
            self.checker.disturb(t);
        }
        if fate == OpFate::DroppedRequest {
            self.trace.event(t, Some(n), "dropped", &[op.0], || {
                format!("request {} dropped before the store", op.0)
            });
            return;
        }
        let at = t.after(self.latency(fate == OpFate::SlowRequest));
        let life = self.nodes[n].life;
        self.push(
            at,
            Ev::Arrive {
                node: n,
                life,
                op,
                req,
                fate,
            },
        );
    }

    fn arrive(&mut self, n: usize, life: u32, op: OpId, req: Req, fate: OpFate) {
        let t = self.now;
        let msg = if fate == OpFate::StoreFailure {
            Msg::Failed(op)
        } else {
            match req {
                Req::Read => match self.store.read_now(&self.group) {
                    Ok(result) => Msg::ReadReply { op, result },
                    Err(e) => {
                        self.checker.bad_record(t, n, e.to_string());
                        Msg::Failed(op)
                    }
                },
                Req::Cas { expected, record } => {
                    let outcome = self
                        .store
                        .compare_and_swap_now(&self.group, expected, &record);
                    if let CasOutcome::Applied(v) = outcome {
                        self.trace
                            .event(t, Some(n), "APPLIED", &[v.0, record.token], || {
                                format!(
                                    "store {v}: holder {:?} token {} (op {})",
                                    record.holder.as_ref().map(|h| &h.id),
                                    record.token,
                                    op.0
                                )
                            });
                        self.checker.store_write(t, n, record.token);
                        if self.notify {
                            self.notify_all(t);
                        }
                    }
                    Msg::CasReply { op, outcome }
                }
            }
        };
        if fate == OpFate::LostReply {
            self.trace.event(t, Some(n), "lost", &[op.0], || {
                format!("reply to {} lost after the store handled it", op.0)
            });
            return;
        }
        let at = t.after(self.latency(fate == OpFate::SlowReply));
        self.push(at, Ev::Deliver { node: n, life, msg });
    }

    /// The store hints every node that the record changed.
    fn notify_all(&mut self, t: SimTime) {
        for i in 0..self.nodes.len() {
            if self.nodes[i].up() {
                let at = t.after(self.latency(false));
                self.deliver_at(at, i, Msg::Changed);
            }
        }
    }

    // ----- faults ------------------------------------------------------------

    /// A random node that is up and satisfies `ok`, preferring the leader
    /// with probability `p_leader`.
    fn target(&mut self, p_leader: f64, ok: impl Fn(&Node) -> bool) -> Option<usize> {
        let leader = self
            .checker
            .leader_at(self.now)
            .map(|(n, _)| n)
            .filter(|&n| self.nodes[n].up() && ok(&self.nodes[n]));
        if let Some(l) = leader {
            if self.rng.gen_bool(p_leader) {
                return Some(l);
            }
        }
        let eligible: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.nodes[i].up() && ok(&self.nodes[i]))
            .collect();
        if eligible.is_empty() {
            return None;
        }
        Some(eligible[self.rng.gen_range(0..eligible.len())])
    }

    fn inject(&mut self, kind: Planned) {
        let t = self.now;
        let term = self.timing.term;
        match kind {
            Planned::Crash => {
                let Some(n) = self.target(0.5, |_| true) else {
                    return;
                };
                self.count(FaultKind::Crash);
                self.crash(n, false);
                let down = between(&mut self.rng, term / 5, term * 3);
                let at = t.after(down).min(self.fault_end.max(t));
                self.push(at, Ev::Restart { node: n });
            }
            Planned::Pause => {
                let Some(n) = self.target(0.5, |node| !node.paused) else {
                    return;
                };
                let long = self.rng.gen_bool(0.7);
                let d = if long {
                    self.count(FaultKind::LongPause);
                    between(&mut self.rng, term, term * 3)
                } else {
                    self.count(FaultKind::ShortPause);
                    between(&mut self.rng, Duration::from_millis(1), term)
                };
                self.trace
                    .event(t, Some(n), "PAUSE", &[d.as_nanos() as u64], || {
                        format!("process paused for {d:?}")
                    });
                self.checker.disturb(t);
                self.nodes[n].paused = true;
                let life = self.nodes[n].life;
                self.push(t.after(d), Ev::PauseEnd { node: n, life });
            }
            Planned::Partition => {
                let Some(n) = self.target(0.5, |_| true) else {
                    return;
                };
                self.count(FaultKind::Partition);
                let d = between(&mut self.rng, term / 5, term * 4);
                self.trace
                    .event(t, Some(n), "PARTITION", &[d.as_nanos() as u64], || {
                        format!("cut off from the store for {d:?}")
                    });
                self.checker.disturb(t);
                let node = &mut self.nodes[n];
                node.partitioned_until = node.partitioned_until.max(t.after(d));
                self.push(t.after(d), Ev::PartitionEnd);
            }
            Planned::Resign => {
                let Some(n) = self.target(0.8, |_| true) else {
                    return;
                };
                self.count(FaultKind::Resign);
                self.checker.disturb(t);
                self.trace
                    .event(t, Some(n), "RESIGN", &[], || "asked to resign".into());
                self.deliver_at(t, n, Msg::Resign);
            }
            Planned::Stall => {
                let Some(n) = self.target(0.7, |_| true) else {
                    return;
                };
                self.count(FaultKind::Stall);
                let d = between(&mut self.rng, term / 2, term * 3);
                self.trace
                    .event(t, Some(n), "STALL", &[d.as_nanos() as u64], || {
                        format!("application stops pulsing for {d:?}")
                    });
                self.checker.disturb(t);
                let node = &mut self.nodes[n];
                node.stalled_until = node.stalled_until.max(t.after(d));
                self.push(t.after(d), Ev::StallEnd);
            }
            Planned::Shutdown => {
                let Some(n) = self.target(0.5, |_| true) else {
                    return;
                };
                self.count(FaultKind::Shutdown);
                self.checker.disturb(t);
                self.trace
                    .event(t, Some(n), "SHUTDOWN", &[], || "asked to shut down".into());
                self.deliver_at(t, n, Msg::Shutdown);
            }
        }
    }

    fn storm(&mut self, storm: Storm) {
        let t = self.now;
        let until = self.fault_end.max(t);
        self.trace
            .event(t, None, "STORM", &[], || format!("{storm:?} until {until}"));
        self.checker.disturb(t);
        for n in 0..self.nodes.len() {
            match storm {
                Storm::PartitionAll => {
                    self.count(FaultKind::Partition);
                    let node = &mut self.nodes[n];
                    node.partitioned_until = node.partitioned_until.max(until);
                }
                Storm::PauseAll => {
                    let node = &self.nodes[n];
                    if node.up() && !node.paused {
                        self.count(FaultKind::LongPause);
                        self.nodes[n].paused = true;
                        let life = self.nodes[n].life;
                        self.push(until, Ev::PauseEnd { node: n, life });
                    }
                }
            }
        }
        if storm == Storm::PartitionAll {
            self.push(until, Ev::PartitionEnd);
        }
    }

    /// Crashes node `n`; a crash of the leader starts a failover the checker
    /// times.
    fn crash(&mut self, n: usize, tail: bool) {
        let t = self.now;
        self.trace
            .event(t, Some(n), "CRASH", &[], || "process crashes".into());
        let leader_token = self.checker.crashed(t, n);
        self.kill(n);
        match leader_token {
            Some(token) => {
                // The bound needs one candidate that can act: up, running,
                // and able to reach the store.
                let healthy = (0..self.nodes.len()).any(|i| {
                    let o = &self.nodes[i];
                    i != n && o.up() && !o.paused && o.partitioned_until <= t
                });
                let idx = self.checker.leader_crash(t, n, token, healthy, tail);
                // Just past the bound, so an election exactly at the bound
                // counts as in time.
                let at = t.after(self.bounds.crash + Duration::from_nanos(1));
                self.push(at, Ev::CrashDeadline(idx));
            }
            None => self.checker.disturb(t),
        }
    }

    fn pause_end(&mut self, n: usize, life: u32) {
        let t = self.now;
        let node = &mut self.nodes[n];
        if node.life != life || !node.paused {
            return;
        }
        node.paused = false;
        let held = std::mem::take(&mut node.deferred);
        self.trace
            .event(t, Some(n), "RESUME", &[held.len() as u64], || {
                format!("process resumes with {} queued inputs", held.len())
            });
        self.checker.disturb(t);
        for msg in held {
            // An input can stop the machine; the rest are then moot.
            if !self.nodes[n].up() {
                break;
            }
            self.handle(n, msg);
        }
        // Timers are checked on resume, as a runtime would.
        self.step(n, Input::Tick);
    }

    fn tail_crash(&mut self) {
        let t = self.now;
        let leader = self.checker.leader_at(t);
        if let Some((node, token)) = self.heal_leader {
            if leader != Some((node, token)) {
                self.checker.unstable(t, node, token, leader);
            }
        }
        if let Some((n, _)) = leader {
            if self.nodes[n].up() {
                self.crash(n, true);
                let at = t.after(self.timing.term / 2);
                self.push(at, Ev::Restart { node: n });
            }
        }
    }
}
