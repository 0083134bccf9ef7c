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

use std::collections::BTreeMap;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tenure::machine::{Action, Input, Machine, OpId, WritePurpose};
use tenure::store::CasOutcome;
use tenure::{
    GroupName, Holder, LeaseRecord, MemoryStore, Metadata, MonoTime, StoreError, Timing, Version,
    Versioned,
};

use crate::checker::{Checker, LivenessBounds};
use crate::clock::{NodeClock, SimTime};
use crate::faults::{self, between, FaultCounts, FaultKind, OpFate, Planned};
use crate::params::{SimError, SimParams};
use crate::report::{RunRecord, SimReport};
use crate::scheduler::Queue;
use crate::spin::{Spin, Wake};
use crate::trace::Trace;

mod inject;
mod net;
mod node;

/// The fastest one-way trip between a node and the store.
const MIN_LATENCY: Duration = Duration::from_micros(500);

/// After this many wake-ups in a row that change nothing and ask for another
/// at once, a machine is busy-waiting; the simulator reports a violation and
/// backs off (see [`Spin`]).
const SPIN_LIMIT: u32 = 3;

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
    spin: Spin,
    /// The incarnation of the running process (its holder is `name` with
    /// this incarnation).
    incarnation: u64,
    /// What the latest read delivered to the machine showed, to tell an
    /// early takeover from one by the monotonic rule.
    seen: Option<Seen>,
}

/// A version of the record as one node saw it.
#[derive(Clone, Debug)]
struct Seen {
    version: Version,
    /// The record's term, if another holder (or an earlier incarnation of
    /// this node) held it: a takeover of it must wait that term out unless
    /// the wall-clock rule allows it earlier.
    held_by_other: Option<Duration>,
    /// When the node first saw this version, on its clock.
    first: tenure::MonoTime,
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
    queue: Queue<Ev>,
    now: SimTime,
    checker: Checker,
    trace: Trace,
    faults: FaultCounts,
    events: u64,
    fault_end: SimTime,
    notify: bool,
    bounds: LivenessBounds,
    slow: Duration,
    heal_leader: Option<(usize, u64)>,
    end_reasons: BTreeMap<&'static str, u64>,
    early_takeovers: u64,
    earliest_takeover: Option<Duration>,
}

impl World {
    pub(crate) fn new(seed: u64, params: &SimParams) -> Result<Self, SimError> {
        params.check()?;
        let mut rng = StdRng::seed_from_u64(seed);
        let n = rng.gen_range(params.tier.nodes.clone());
        let skew = params.shared.skew.draw(&mut rng);
        let notify = params.shared.notify.draw(&mut rng);
        let liveness = params.shared.draw_liveness(&mut rng);
        let timing = params.shared.timing(skew, liveness)?;
        let group = GroupName::new("sim")?;
        // Slow requests and replies take up to 1.5 operation timeouts, so
        // some writes apply after their sender has given up on them.
        let slow = LivenessBounds::slow_op(&timing);
        let bounds = LivenessBounds::new(&timing, params.shared.latency, slow);
        let clocks: Vec<NodeClock> = (0..n)
            .map(|_| params.shared.draw_clock(&mut rng, skew))
            .collect();
        let fault_end = SimTime::from_duration(params.shared.fault_phase);
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
                spin: Spin::new(SPIN_LIMIT),
                incarnation: 0,
                seen: None,
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
            queue: Queue::new(),
            now: SimTime(0),
            checker,
            trace: Trace::new(params.shared.trace),
            faults: FaultCounts::default(),
            events: 0,
            fault_end,
            notify,
            bounds,
            slow,
            heal_leader: None,
            end_reasons: BTreeMap::new(),
            early_takeovers: 0,
            earliest_takeover: None,
        };
        // Nodes come up at staggered instants in the first half term.
        for i in 0..n {
            let at = SimTime::from_duration(between(&mut world.rng, Duration::ZERO, term / 2));
            world.push(at, Ev::Restart { node: i });
        }
        let pulses = world.timing.liveness_timeout.is_some();
        // Give the cluster half a term to elect its first leader.
        let start = SimTime::from_duration(term / 2);
        let kinds = params.faults.kinds(pulses);
        for (at, kind) in faults::schedule(&mut world.rng, kinds, start, fault_end, term) {
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
        self.queue.push(at, ev);
    }

    fn deliver_at(&mut self, at: SimTime, node: usize, msg: Msg) {
        let life = self.nodes[node].life;
        self.push(at, Ev::Deliver { node, life, msg });
    }

    fn latency(&mut self, slow: bool) -> Duration {
        if slow {
            between(&mut self.rng, self.params.shared.latency, self.slow)
        } else {
            between(&mut self.rng, MIN_LATENCY, self.params.shared.latency)
        }
    }

    fn count(&mut self, kind: FaultKind) {
        self.faults[kind] += 1;
    }

    pub(crate) fn run(mut self) -> SimReport {
        while let Some((at, ev)) = self.queue.pop() {
            self.now = at;
            self.events += 1;
            match ev {
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
        let violations = checker.violations.into_vec();
        SimReport {
            run: RunRecord::new(self.seed, self.now, &self.timing, violations, self.trace),
            nodes: self.nodes.len(),
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
            notes: checker.notes,
            end_reasons: self.end_reasons,
            early_takeovers: self.early_takeovers,
            earliest_takeover: self.earliest_takeover,
            events: self.events,
        }
    }
}
