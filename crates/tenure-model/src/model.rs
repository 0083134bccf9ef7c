//! The stateright [`Model`]: real machines, one linearizable register, a
//! network that delays, reorders and loses, and an adversary that injects
//! faults until a given instant.
//!
//! # Time
//!
//! Time is discrete and moves only by [`Step::Advance`]. A node's timers
//! are *urgent*: time never moves past the instant at which a running,
//! unpaused node's clock reaches its `next_wake`, its outstanding
//! operation's deadline, or its ended term's work deadline, before the node
//! has been stepped there. Messages are urgent too: each arrives within the
//! latency bound `L` unless a fault loses it or makes it slow. Between those
//! instants time moves by the quantum `δ` while anything is in flight, so
//! each hop takes 0, δ, … up to `L`, and otherwise jumps straight to the
//! next urgent instant (or to a paused node's wake-up, or to the end of the
//! faults). Everything else (which message arrives first, which due node
//! steps first, whether a fault strikes) is a nondeterministic choice.
//!
//! # What a step is
//!
//! * `Tick`: a due node's driver feeds [`Input::Tick`].
//! * `Timeout`: the outstanding operation's deadline passed without a
//!   reply: the driver feeds a [`StoreError::Timeout`]; a reply arriving
//!   later is discarded, as the elector does.
//! * `Apply`: a request reaches the register and takes effect there; its
//!   reply starts back (unless its sender has given up on it).
//! * `Deliver`: a reply reaches its node.
//! * `Drain`: an ended term's work is gone ([`Input::Drained`]); at the
//!   latest at its work deadline, when the elector drops it.
//! * Faults, while allowed: `Lose`, `Delay`, `Crash`, `Pause`; and
//!   recoveries: `Resume` (forced by the end of the faults), `Restart`.
//! * Graceful releases: `Resign`, `Shutdown` of a leader.

use std::collections::BTreeSet;
use std::fmt;
use std::time::Duration;

use stateright::{Model, Property};
use tenure::machine::{Action, Input, Machine, Phase, WritePurpose};
use tenure::store::CasOutcome;
use tenure::{Holder, LeaseRecord, Metadata, StoreError, Timing, Version, Versioned};

use crate::clock;
use crate::params::{FaultKind, ModelBounds, Params, ParamsError, ReleaseKind};
use crate::properties;
use crate::state::{
    Body, Flaw, Ghost, GhostTerm, MachineCell, Msg, Node, Pending, Process, ReleaseWatch, State,
    Stored,
};

/// One nondeterministic step of the model.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// Node `n` is due: feed it a tick.
    Tick(u8),
    /// Node `n`'s operation timed out.
    Timeout(u8),
    /// Node `n`'s ended term's work is gone.
    Drain(u8),
    /// The request at this index of the network reaches the store.
    Apply(u8),
    /// The reply at this index of the network reaches its node.
    Deliver(u8),
    /// Real time moves to this instant (nanoseconds).
    Advance(u64),
    /// A fault: the message at this index is lost.
    Lose(u8),
    /// A fault: the message at this index becomes slow.
    Delay(u8),
    /// A fault: node `n` crashes.
    Crash(u8),
    /// A fault: node `n` pauses.
    Pause(u8),
    /// Node `n` resumes.
    Resume(u8),
    /// Node `n` starts again as a new incarnation.
    Restart(u8),
    /// Leader `n` resigns.
    Resign(u8),
    /// Leader `n` shuts down.
    Shutdown(u8),
}

/// The election of 1 to 3 real machines over one register.
pub struct ElectionModel {
    /// What is explored.
    pub params: Params,
    /// The machines' timing.
    pub timing: Timing,
    /// The liveness bounds.
    pub bounds: ModelBounds,
    horizon: u64,
    fault_end: u64,
    latency: u64,
    quantum: u64,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl ElectionModel {
    /// A model of `params`.
    pub fn new(params: Params) -> Result<Self, ParamsError> {
        let timing = params.validate()?;
        let bounds = params.bounds(&timing);
        Ok(ElectionModel {
            horizon: nanos(params.horizon(&bounds)),
            fault_end: nanos(params.fault_end),
            latency: nanos(params.latency),
            quantum: nanos(params.quantum),
            params,
            timing,
            bounds,
        })
    }

    /// The last real instant explored, in nanoseconds.
    pub fn horizon(&self) -> u64 {
        self.horizon
    }

    /// The end of the faults, in nanoseconds.
    pub fn fault_end(&self) -> u64 {
        self.fault_end
    }

    /// Whether the nodes have priorities and preempt.
    pub fn preempts(&self) -> bool {
        self.params.preempt_after.is_some()
    }

    /// Whether the horizon reaches the heal bound past the faults' end, so
    /// that the liveness properties can be judged at all.
    pub fn judges_liveness(&self) -> bool {
        self.horizon >= self.fault_end.saturating_add(nanos(self.bounds.heal))
    }

    fn machine(&self, i: usize, incarnation: u64, node: &Node, t: u64) -> MachineCell {
        let me = Holder {
            id: format!("n{i}"),
            incarnation,
        };
        let now = clock::now(node, i, t);
        let metadata = match self.params.preempt_after {
            Some(_) => Metadata::new().with(tenure::record::PRIORITY_KEY, i.to_string()),
            None => Metadata::new(),
        };
        let mut m = Machine::new(self.timing.clone(), me, metadata, i as u64, now);
        if let Some(delay) = self.params.preempt_after {
            m.preempt_after(delay, now);
        }
        if self.params.anchor_at_receive {
            m.anchor_deadlines_at_receive();
        }
        MachineCell::new(m)
    }

    fn faults_allowed(&self, s: &State, kind: FaultKind) -> bool {
        s.now < self.fault_end && self.params.faults.allows(s.faults_used, kind)
    }

    /// Nodes that are gone for good or for now: crashed, or shutting down.
    fn gone(&self, s: &State) -> usize {
        s.nodes
            .iter()
            .enumerate()
            .filter(|(i, n)| n.process.is_none() || s.ghost.shut_down & (1 << i) != 0)
            .count()
    }

    /// A running, unpaused node's process.
    fn active(node: &Node) -> Option<&Process> {
        node.process.as_ref().filter(|p| !p.paused)
    }

    /// Node `i`'s machine is due for a tick at `s.now`.
    fn tick_due(&self, s: &State, i: usize) -> bool {
        let node = &s.nodes[i];
        Self::active(node).is_some_and(|p| {
            let now = clock::now(node, i, s.now);
            p.machine
                .get()
                .next_wake(now)
                .is_some_and(|w| w <= now.mono)
        })
    }

    fn timeout_due(&self, s: &State, i: usize) -> bool {
        let node = &s.nodes[i];
        Self::active(node)
            .and_then(|p| p.pending)
            .is_some_and(|p| p.deadline <= clock::mono(node, i, s.now))
    }

    /// Node `i`'s ended term whose work is still running.
    fn undrained(s: &State, i: usize) -> Option<&GhostTerm> {
        let inc = s.nodes[i].incarnation;
        s.ghost.terms.iter().find(|t| {
            usize::from(t.node) == i
                && t.incarnation == inc
                && t.work_deadline.is_some()
                && !t.drained
        })
    }

    /// The earliest instant time must stop at: a due timer, deadline or
    /// message, or the end of the faults while a node is paused.
    fn urgent(&self, s: &State) -> Option<u64> {
        let mut at: Option<u64> = None;
        let mut add = |t: Option<u64>| {
            if let Some(t) = t {
                at = Some(at.map_or(t, |a| a.min(t)));
            }
        };
        for (i, node) in s.nodes.iter().enumerate() {
            let Some(p) = Self::active(node) else {
                continue;
            };
            let now = clock::now(node, i, s.now);
            if let Some(w) = p.machine.get().next_wake(now) {
                add(clock::real_at(node, i, w, s.now));
            }
            if let Some(op) = p.pending {
                add(clock::real_at(node, i, op.deadline, s.now));
            }
            if let Some(w) = Self::undrained(s, i).and_then(|t| t.work_deadline) {
                add(clock::real_at(node, i, w, s.now));
            }
        }
        for m in &s.net {
            let to = &s.nodes[usize::from(m.node)];
            let receiving = !m.is_reply() || Self::active(to).is_some();
            if receiving {
                add(Some(m.due.max(s.now)));
            }
        }
        let paused = s
            .nodes
            .iter()
            .any(|n| n.process.as_ref().is_some_and(|p| p.paused));
        // A pause ends with the faults: time stops there until it does.
        if paused && s.now <= self.fault_end {
            add(Some(self.fault_end));
        }
        at
    }

    /// The instants time may move to next.
    fn advances(&self, s: &State) -> BTreeSet<u64> {
        let urgent = self.urgent(s);
        let mut to = BTreeSet::new();
        if urgent == Some(s.now) {
            return to;
        }
        let cap = |t: u64| urgent.map_or(t, |u| t.min(u));
        if let Some(u) = urgent {
            to.insert(u);
        }
        if !s.net.is_empty() {
            to.insert(cap(s.now + self.quantum));
        }
        if s.now < self.fault_end {
            to.insert(cap(self.fault_end));
        }
        // A paused node's timers are not urgent, but pausing past them is
        // what a pause is for.
        for (i, node) in s.nodes.iter().enumerate() {
            let Some(p) = node.process.as_ref().filter(|p| p.paused) else {
                continue;
            };
            let now = clock::now(node, i, s.now);
            let wake = p.machine.get().next_wake(now);
            let deadline = p.pending.map(|op| op.deadline);
            for w in [wake, deadline].into_iter().flatten() {
                if let Some(t) = clock::real_at(node, i, w, s.now) {
                    to.insert(cap(t));
                }
            }
        }
        to.retain(|&t| t > s.now);
        to
    }

    /// Feeds `input` to node `i` and carries out what it decides.
    fn step(&self, s: &mut State, i: usize, input: Input) -> Vec<Action> {
        let node = &s.nodes[i];
        let now = clock::now(node, i, s.now);
        let Some(p) = s.nodes[i].process.as_mut() else {
            return Vec::new();
        };
        let out = p.machine.update(|m| m.step(now, input));
        for a in &out {
            self.act(s, i, a);
        }
        out
    }

    fn act(&self, s: &mut State, i: usize, action: &Action) {
        let node = &s.nodes[i];
        let (inc, mono) = (node.incarnation, clock::mono(node, i, s.now));
        let n = i as u8;
        match action {
            Action::Read { op, deadline, .. } | Action::Cas { op, deadline, .. } => {
                let read = matches!(action, Action::Read { .. });
                if let Some(p) = s.nodes[i].process.as_mut() {
                    p.pending = Some(Pending {
                        op: *op,
                        deadline: *deadline,
                        read,
                    });
                }
                let body = match action {
                    Action::Cas {
                        purpose,
                        expected,
                        record,
                        ..
                    } => Body::Cas {
                        purpose: *purpose,
                        expected: *expected,
                        record: record.clone(),
                    },
                    _ => Body::Read,
                };
                self.send(
                    s,
                    Msg {
                        node: n,
                        incarnation: inc,
                        op: *op,
                        due: s.now + self.latency,
                        slow: false,
                        body,
                    },
                );
            }
            Action::Elected { token, deadline } => {
                let g = &mut s.ghost;
                if g.terms
                    .iter()
                    .any(|t| t.node == n && t.incarnation == inc && t.open)
                    || *deadline <= mono
                {
                    g.flaw(Flaw::Contract);
                }
                if let Some((last_node, last)) = g.last_elected {
                    if *token <= last {
                        g.flaw(Flaw::TokenOrder);
                    }
                    if last_node != n {
                        g.handover = true;
                    }
                }
                g.last_elected = Some((n, *token));
                if let Some(w) = g.release {
                    if w.by != n {
                        g.release = None;
                    } else if !w.stopping {
                        g.resigner_retook = true;
                        g.release = None;
                    }
                }
                g.terms.push(GhostTerm {
                    node: n,
                    incarnation: inc,
                    token: *token,
                    deadline: *deadline,
                    work_deadline: None,
                    drained: false,
                    open: true,
                });
            }
            Action::Renewed {
                token, deadline, ..
            } => {
                let g = &mut s.ghost;
                match g.open_term(n, inc) {
                    None => g.flaw(Flaw::Contract),
                    Some(t) => {
                        let changed = t.token != *token;
                        t.deadline = t.deadline.max(*deadline);
                        if changed {
                            g.flaw(Flaw::RenewToken);
                        }
                    }
                }
            }
            Action::EndTerm {
                token,
                work_deadline,
                reason,
            } => {
                let g = &mut s.ghost;
                if matches!(reason, tenure::machine::EndReason::Transferred { .. }) {
                    g.preempted = true;
                }
                match g.open_term(n, inc) {
                    Some(t) if t.token == *token => {
                        t.open = false;
                        t.work_deadline = Some(*work_deadline);
                        if *work_deadline > t.deadline {
                            g.flaw(Flaw::WorkPastDeadline);
                        }
                    }
                    _ => g.flaw(Flaw::Contract),
                }
            }
            Action::Failed { .. } => s.ghost.flaw(Flaw::Contract),
            Action::LeaderChanged { .. } | Action::Stopped => {}
        }
    }

    fn send(&self, s: &mut State, msg: Msg) {
        let at = s.net.partition_point(|m| m.key() < msg.key());
        s.net.insert(at, msg);
    }

    /// Applies a request at the register and returns its reply.
    fn apply(&self, s: &mut State, i: usize, body: &Body) -> Body {
        match body {
            Body::Read => match &s.store {
                None => Body::ReadReply(None),
                Some(stored) => match &stored.decoded {
                    Ok(record) => Body::ReadReply(Some(Versioned {
                        record: record.clone(),
                        version: stored.version,
                    })),
                    Err(_) => {
                        s.ghost.flaw(Flaw::Contract);
                        Body::ReadReply(None)
                    }
                },
            },
            Body::Cas {
                purpose,
                expected,
                record,
            } => {
                let current = s.store.as_ref().map(|st| st.version);
                if current != *expected {
                    return Body::CasReply(None);
                }
                let stored_token = s
                    .store
                    .as_ref()
                    .and_then(|st| st.decoded.as_ref().ok())
                    .map_or(0, |r| r.token);
                if record.token < stored_token {
                    s.ghost.flaw(Flaw::StoreToken);
                }
                let version = Version(current.map_or(1, |v| v.0 + 1));
                let bytes = record.encode();
                let decoded = LeaseRecord::decode(&bytes).map_err(|e| e.to_string());
                s.store = Some(Stored {
                    version,
                    bytes,
                    decoded,
                });
                if *purpose == WritePurpose::Release && record.holder.is_none() {
                    self.watch_release(s, i);
                }
                Body::CasReply(Some(version))
            }
            Body::ReadReply(_) | Body::CasReply(_) => unreachable_reply(),
        }
    }

    /// A graceful release applied: time the next election, if nothing went
    /// wrong for long enough before it that the bound applies.
    fn watch_release(&self, s: &mut State, i: usize) {
        s.ghost.released = true;
        let quiet = nanos(self.bounds.quiet);
        let settled = s
            .ghost
            .last_fault
            .is_none_or(|f| s.now >= f.saturating_add(quiet));
        s.ghost.release = settled.then_some(ReleaseWatch {
            at: s.now,
            by: i as u8,
            stopping: s.ghost.shut_down & (1 << i) != 0,
        });
    }

    fn fault(&self, s: &mut State) {
        s.faults_used += 1;
        s.ghost.last_fault = Some(s.now);
        // A release followed by a fault is no longer a clean hand-over.
        s.ghost.release = None;
    }

    /// Housekeeping after every step: drop terms that can never be valid
    /// again, note leadership after the faults, and, when time moved,
    /// check the stop grace.
    fn settle(&self, s: &mut State, time_moved: bool) {
        let now = s.now;
        let nodes = &s.nodes;
        s.ghost.terms.retain(|t| {
            let i = usize::from(t.node);
            t.open || properties::term_valid(t, &nodes[i], i, now)
        });
        if now >= self.fault_end && properties::valid_terms(s) > 0 {
            s.ghost.led_after_faults = true;
        }
        // A running leader must have been told to stop by its deadline
        // minus the stop grace. Ticks are urgent, so its clock reads at
        // most one nanosecond past that instant (rounding of the real
        // instant) before it is stepped there. Judged when time moves: a
        // node resuming from a pause past that instant is stepped (at
        // once, since it is then due) before time moves on.
        let grace = self.timing.stop_grace;
        let late = time_moved
            && s.ghost.terms.iter().any(|t| {
                let i = usize::from(t.node);
                let node = &s.nodes[i];
                t.open
                    && node.incarnation == t.incarnation
                    && Self::active(node).is_some()
                    && clock::mono(node, i, now) > t.deadline - grace + Duration::from_nanos(1)
            });
        if late {
            s.ghost.flaw(Flaw::LateStop);
        }
    }

    fn reply_input(pending: Pending, body: Option<Body>, timeout: Duration) -> Input {
        let op = pending.op;
        match body {
            Some(Body::ReadReply(v)) => Input::ReadDone { op, result: Ok(v) },
            Some(Body::CasReply(Some(v))) => Input::CasDone {
                op,
                result: Ok(CasOutcome::Applied(v)),
            },
            Some(Body::CasReply(None)) => Input::CasDone {
                op,
                result: Ok(CasOutcome::Conflict),
            },
            _ if pending.read => Input::ReadDone {
                op,
                result: Err(StoreError::Timeout(timeout)),
            },
            _ => Input::CasDone {
                op,
                result: Err(StoreError::Timeout(timeout)),
            },
        }
    }

    /// Whether the reply `m` can reach its node now: it runs, is not paused,
    /// and still waits for that operation.
    fn deliverable(s: &State, m: &Msg) -> bool {
        let node = &s.nodes[usize::from(m.node)];
        m.is_reply()
            && node.incarnation == m.incarnation
            && Self::active(node)
                .and_then(|p| p.pending)
                .is_some_and(|p| p.op == m.op)
    }
}

fn unreachable_reply() -> Body {
    // Only requests are applied; `actions` never offers a reply.
    Body::CasReply(None)
}

impl Model for ElectionModel {
    type State = State;
    type Action = Step;

    fn init_states(&self) -> Vec<State> {
        let n = self.params.nodes;
        let offsets: Vec<i64> = match self.params.skew {
            Some(skew) => {
                let ms = i64::try_from(skew.offset.as_millis()).unwrap_or(i64::MAX);
                vec![-ms, ms]
            }
            None => vec![0],
        };
        // Every assignment of a rate and a wall offset to every node.
        let choices: Vec<(usize, usize)> = (0..self.params.rates.len())
            .flat_map(|r| (0..offsets.len()).map(move |o| (r, o)))
            .collect();
        let mut states = Vec::new();
        let total = choices.len().pow(n as u32);
        for mut k in 0..total {
            let mut nodes = Vec::with_capacity(n);
            for _ in 0..n {
                let (r, o) = choices[k % choices.len()];
                k /= choices.len();
                nodes.push(Node {
                    rate: self.params.rates[r],
                    wall_offset_ms: offsets[o],
                    incarnation: 1,
                    process: None,
                });
            }
            for (i, node) in nodes.iter_mut().enumerate() {
                let machine = self.machine(i, 1, node, 0);
                node.process = Some(Process {
                    machine,
                    paused: false,
                    pending: None,
                });
            }
            states.push(State {
                now: 0,
                nodes,
                store: None,
                net: Vec::new(),
                faults_used: 0,
                releases_used: 0,
                ghost: Ghost::default(),
            });
        }
        states
    }

    fn actions(&self, s: &State, actions: &mut Vec<Step>) {
        let n = s.nodes.len();
        for i in 0..n {
            let b = i as u8;
            if self.tick_due(s, i) {
                actions.push(Step::Tick(b));
            }
            if self.timeout_due(s, i) {
                actions.push(Step::Timeout(b));
            }
            if Self::active(&s.nodes[i]).is_some() && Self::undrained(s, i).is_some() {
                actions.push(Step::Drain(b));
            }
        }
        for (k, m) in s.net.iter().enumerate() {
            let k = k as u8;
            if !m.is_reply() {
                actions.push(Step::Apply(k));
            } else if Self::deliverable(s, m) {
                actions.push(Step::Deliver(k));
            }
        }
        for t in self.advances(s) {
            actions.push(Step::Advance(t));
        }
        if self.faults_allowed(s, FaultKind::Lose) {
            actions.extend((0..s.net.len()).map(|k| Step::Lose(k as u8)));
        }
        if self.faults_allowed(s, FaultKind::Delay) {
            let late = self.fault_end + self.latency;
            for (k, m) in s.net.iter().enumerate() {
                if !m.slow && m.due < late {
                    actions.push(Step::Delay(k as u8));
                }
            }
        }
        let gone = self.gone(s);
        for i in 0..n {
            let b = i as u8;
            let node = &s.nodes[i];
            match &node.process {
                None => {
                    // A restart is part of a fault scenario: it counts.
                    if self.faults_allowed(s, FaultKind::Crash) {
                        actions.push(Step::Restart(b));
                    }
                }
                Some(p) => {
                    let leaving = s.ghost.shut_down & (1 << i) != 0;
                    if !leaving && gone + 1 < n && self.faults_allowed(s, FaultKind::Crash) {
                        actions.push(Step::Crash(b));
                    }
                    if p.paused {
                        actions.push(Step::Resume(b));
                    } else if self.faults_allowed(s, FaultKind::Pause) {
                        actions.push(Step::Pause(b));
                    }
                    let leads = matches!(p.machine.get().phase(), Phase::Leader { .. });
                    let may_release = |kind| {
                        s.now < self.fault_end && self.params.releases.allows(s.releases_used, kind)
                    };
                    if leads && !p.paused {
                        if may_release(ReleaseKind::Resign) {
                            actions.push(Step::Resign(b));
                        }
                        if may_release(ReleaseKind::Shutdown) && gone + 1 < n {
                            actions.push(Step::Shutdown(b));
                        }
                    }
                }
            }
        }
    }

    fn next_state(&self, last: &State, step: Step) -> Option<State> {
        let mut s = last.clone();
        let time_moved = matches!(step, Step::Advance(_));
        match step {
            Step::Tick(b) => {
                let i = usize::from(b);
                let before = s.nodes[i].process.as_ref()?.machine.fingerprint();
                let out = self.step(&mut s, i, Input::Tick);
                let after = s.nodes[i].process.as_ref()?.machine.fingerprint();
                if out.is_empty() && before == after {
                    s.ghost.flaw(Flaw::BusyWait);
                }
            }
            Step::Timeout(b) => {
                let i = usize::from(b);
                let (node, inc) = (b, s.nodes[i].incarnation);
                let pending = s.nodes[i].process.as_mut()?.pending.take()?;
                s.net.retain(|m| {
                    !(m.is_reply() && m.node == node && m.incarnation == inc && m.op == pending.op)
                });
                let input = Self::reply_input(pending, None, self.timing.op_timeout);
                self.step(&mut s, i, input);
            }
            Step::Drain(b) => {
                let i = usize::from(b);
                let inc = s.nodes[i].incarnation;
                let term = s.ghost.terms.iter_mut().find(|t| {
                    t.node == b && t.incarnation == inc && t.work_deadline.is_some() && !t.drained
                })?;
                term.drained = true;
                let token = term.token;
                self.step(&mut s, i, Input::Drained { token });
            }
            Step::Apply(k) => {
                let m = s.net.remove(usize::from(k));
                let i = usize::from(m.node);
                let reply = self.apply(&mut s, i, &m.body);
                let waiting = s.nodes[i].incarnation == m.incarnation
                    && s.nodes[i]
                        .process
                        .as_ref()
                        .and_then(|p| p.pending)
                        .is_some_and(|p| p.op == m.op);
                if waiting {
                    let due = if m.slow { m.due } else { s.now + self.latency };
                    self.send(
                        &mut s,
                        Msg {
                            due,
                            body: reply,
                            ..m
                        },
                    );
                }
            }
            Step::Deliver(k) => {
                let m = s.net.remove(usize::from(k));
                let i = usize::from(m.node);
                let pending = s.nodes[i].process.as_mut()?.pending.take()?;
                let input = Self::reply_input(pending, Some(m.body), self.timing.op_timeout);
                self.step(&mut s, i, input);
            }
            Step::Advance(t) => s.now = t,
            Step::Lose(k) => {
                s.net.remove(usize::from(k));
                self.fault(&mut s);
            }
            Step::Delay(k) => {
                let late = self.fault_end + self.latency;
                let m = &mut s.net[usize::from(k)];
                m.slow = true;
                m.due = m.due.max(late);
                self.fault(&mut s);
            }
            Step::Crash(b) => {
                let i = usize::from(b);
                let inc = s.nodes[i].incarnation;
                s.nodes[i].process = None;
                s.net
                    .retain(|m| !(m.is_reply() && m.node == b && m.incarnation == inc));
                // Its term stays valid until its deadline: the work may
                // outlive what the machine knew.
                for t in s.ghost.terms.iter_mut().filter(|t| t.node == b) {
                    t.open = false;
                }
                self.fault(&mut s);
            }
            Step::Pause(b) => {
                s.nodes[usize::from(b)].process.as_mut()?.paused = true;
                self.fault(&mut s);
            }
            Step::Resume(b) => {
                s.nodes[usize::from(b)].process.as_mut()?.paused = false;
            }
            Step::Restart(b) => {
                let i = usize::from(b);
                s.nodes[i].incarnation += 1;
                let inc = s.nodes[i].incarnation;
                let machine = self.machine(i, inc, &s.nodes[i], s.now);
                s.nodes[i].process = Some(Process {
                    machine,
                    paused: false,
                    pending: None,
                });
                self.fault(&mut s);
            }
            Step::Resign(b) => {
                s.releases_used += 1;
                self.step(&mut s, usize::from(b), Input::Resign);
            }
            Step::Shutdown(b) => {
                s.releases_used += 1;
                s.ghost.shut_down |= 1 << b;
                self.step(&mut s, usize::from(b), Input::Shutdown);
            }
        }
        self.settle(&mut s, time_moved);
        Some(s)
    }

    fn within_boundary(&self, s: &State) -> bool {
        s.now <= self.horizon
    }

    fn properties(&self) -> Vec<Property<Self>> {
        properties::all()
    }

    fn format_action(&self, step: &Step) -> String {
        format!("{step:?}")
    }
}

impl fmt::Debug for ElectionModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ElectionModel({})", self.params)
    }
}
