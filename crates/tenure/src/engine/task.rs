//! The engine's task: one per engine, holding a `Machine` per candidate.
//! It feeds each machine its inputs and carries out the actions it returns;
//! it never decides anything itself.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::AbortHandle;

use crate::admission::Admission;
use crate::clock::{Clock, MonoTime, Now};
use crate::coordinator::{Command, Session};
use crate::error::StoreError;
use crate::machine::{Action, Input, Machine, OpId, ReadPurpose, WritePurpose};
use crate::record::{GroupName, Version};
use crate::role::LeaderInfo;
use crate::store::{CasRequest, LeaseStore};

use super::batch::{Batches, Priority, Queued};
use super::feed::{feed_pulse, following, next_change, Feed, Feeds};
use super::host_lag::HostLag;
use super::limits::Limits;
use super::schedule::{sleep_until, Filed, Schedule};
use super::shared::Counters;
use super::{EngineOptions, GroupId, Joining, ToEngine};

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum OpKind {
    Read(ReadPurpose),
    Write(WritePurpose),
}

impl OpKind {
    /// The machine's input for operation `op` of this kind failing with
    /// `error`.
    pub(super) fn failed(self, op: OpId, error: StoreError) -> Input {
        match self {
            OpKind::Read(_) => Input::ReadDone {
                op,
                result: Err(error),
            },
            OpKind::Write(_) => Input::CasDone {
                op,
                result: Err(error),
            },
        }
    }

    pub(super) fn label(self) -> &'static str {
        match self {
            OpKind::Read(p) => p.label(),
            OpKind::Write(p) => p.label(),
        }
    }
}

/// The operations one batch in flight carries: all of them, the
/// deferrable ones (acquisitions, polls) and the renewals among them.
#[derive(Clone, Copy)]
pub(super) struct InFlight {
    pub(super) all: usize,
    pub(super) deferrable: usize,
    pub(super) renewals: usize,
}

/// A group's operation in flight.
#[derive(Clone, Copy)]
pub(super) struct Current {
    pub(super) op: OpId,
    pub(super) kind: OpKind,
    /// Whether its batch has gone out; one that never did cannot have
    /// applied.
    pub(super) sent: bool,
}

/// Hashes the engine's own group ids (sequential numbers it hands out, no
/// input from outside) with one multiplication instead of SipHash: the
/// slots are looked up a dozen times per store operation.
#[derive(Clone, Copy, Default)]
pub(super) struct IdHash;

impl std::hash::BuildHasher for IdHash {
    type Hasher = IdHasher;
    fn build_hasher(&self) -> IdHasher {
        IdHasher(0)
    }
}

/// See [`IdHash`].
pub(super) struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, n: u64) {
        // Fibonacci hashing: the high bits, which hashbrown uses for its
        // control bytes, depend on every bit of the id.
        self.0 = (self.0 ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

pub(super) struct Slot {
    pub(super) group: GroupName,
    pub(super) machine: Machine,
    pub(super) session: Session,
    /// The last pulse fed to the machine.
    pub(super) fed_pulse: u64,
    /// The operation in flight, if any.
    pub(super) op: Option<Current>,
    /// The newest version of the group's record this engine has seen, by
    /// the feed, a read or its own write (what the feed check compares).
    pub(super) seen: Option<Version>,
    /// The newest version the store reported applying for this group's
    /// own writes, as handed to its machine: a leader's own write coming
    /// back on the feed at or below it tells the machine nothing (see
    /// `Task::on_change`).
    pub(super) wrote: Option<Version>,
    /// The largest batch this group's operations may go in: unbounded
    /// while healthy; after a failure half the batch it failed in (down to
    /// one), until one succeeds.
    pub(super) isolate: usize,
    /// Where the group stands in the engine's [`Schedule`].
    pub(super) filed: Filed,
    /// The per-group hint forwarder, for stores without a store-wide feed.
    pub(super) hints: Option<AbortHandle>,
}

/// The engine's task. Each concern keeps its state in a room of its own
/// (the schedule, the batches, the admission window, the feeds, the
/// timing bounds, the host's lag); the task holds the groups and moves
/// inputs and actions between them and the rooms.
pub(super) struct Task {
    pub(super) store: Arc<dyn LeaseStore>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) options: EngineOptions,
    pub(super) counters: Arc<Counters>,
    pub(super) rx: mpsc::UnboundedReceiver<ToEngine>,
    pub(super) rx_open: bool,
    pub(super) slots: HashMap<GroupId, Slot, IdHash>,
    pub(super) by_group: HashMap<GroupName, Vec<GroupId>>,
    /// When each group wakes, when replies are due, and the coalescing of
    /// nearly-due renewals and polls.
    pub(super) schedule: Schedule,
    /// Operations waiting by priority and the batches in flight.
    pub(super) batches: Batches,
    /// How many acquisitions and polls may be in flight.
    pub(super) admission: Admission,
    /// The store-wide feed, its check and taps, and per-group hints.
    pub(super) feed: Feeds,
    /// The tightest timing among the groups.
    pub(super) limits: Limits,
    /// How late the engine has lately run its own timers: the host's share
    /// of a batch's latency.
    pub(super) host_lag: HostLag,
    /// The buffer a step's actions are collected in (see `Task::step`).
    pub(super) actions: Vec<Action>,
}

impl Task {
    pub(super) fn new(
        store: Arc<dyn LeaseStore>,
        clock: Arc<dyn Clock>,
        options: EngineOptions,
        counters: Arc<Counters>,
        rx: mpsc::UnboundedReceiver<ToEngine>,
    ) -> Task {
        let now = clock.now().mono;
        Task {
            store,
            clock,
            options,
            counters,
            rx,
            rx_open: true,
            slots: HashMap::default(),
            by_group: HashMap::new(),
            schedule: Schedule::default(),
            batches: Batches::default(),
            admission: Admission::new(
                options.max_batch / 64,
                options.max_batch.saturating_mul(options.max_in_flight),
            ),
            feed: Feeds::new(now),
            limits: Limits::default(),
            host_lag: HostLag::new(now),
            actions: Vec::new(),
        }
    }

    pub(super) async fn run(mut self) {
        loop {
            self.subscribe_if_due();
            let wake = self.next_wake();
            let clock = self.clock.clone();
            let asleep = clock.now().mono;
            tokio::select! {
                biased;
                msg = self.rx.recv(), if self.rx_open => match msg {
                    Some(msg) => self.handle(msg),
                    None => self.rx_open = false,
                },
                Some(reply) = self.batches.running.join_next_with_id() => {
                    let task = match &reply {
                        Ok((task, _)) => *task,
                        Err(e) => e.id(),
                    };
                    if let Some(batch) = self.batches.returned(task) {
                        self.admission.returned(batch.deferrable);
                    }
                    if let Ok((_, reply)) = reply {
                        self.on_batch(reply);
                    }
                }
                change = next_change(&mut self.feed.state) => self.on_change(change),
                Some(subscribed) = self.feed.subscribing.join_next() => {
                    self.on_subscribed(subscribed.unwrap_or(Ok(None)));
                }
                Some(id) = self.feed.hints.recv() => self.step(id, Input::Changed),
                Some(read) = self.feed.check.reading.join_next() => {
                    if let Ok((id, result)) = read {
                        self.on_check_read(id, result);
                    }
                }
                _ = sleep_until(&clock, wake) => self.woke(wake, asleep),
            }
            // Take in everything else that is ready, so one turn batches it.
            while let Ok(msg) = self.rx.try_recv() {
                self.handle(msg);
            }
            if let Feed::Up(feed) = &mut self.feed.state {
                let mut ready = Vec::new();
                while let Some(change) = feed.try_next() {
                    ready.push(change);
                }
                for change in ready {
                    self.on_change(Some(change));
                }
            }
            self.feed.taps.settle();
            self.fire_timers();
            self.run_feed_check();
            self.coalesce();
            self.flush();
            self.compact_heaps();
            if !self.rx_open && self.slots.is_empty() {
                return;
            }
        }
    }

    /// The engine's sleep for `wake` (begun at `asleep`) ended: how late,
    /// measured before any work of this turn, against a wake-up that was
    /// still ahead when it went to sleep (one already due is work, not
    /// lateness). A busy host, not a slow store: admission pauses only if
    /// the lag puts the terms held at risk (see `Admission::late_wake`).
    pub(super) fn woke(&mut self, wake: Option<MonoTime>, asleep: MonoTime) {
        let Some(wake) = wake.filter(|w| *w > asleep) else {
            return;
        };
        let now = self.clock.now().mono;
        self.ran_late(now, now.saturating_since(wake));
    }

    /// The engine ran `lag` behind its own timers at `now`: the host's lag
    /// is noted, and admission pauses if it puts the terms held at risk.
    pub(super) fn ran_late(&mut self, now: MonoTime, lag: Duration) {
        self.host_lag.note(now, lag);
        let margin = self.holding().then_some(self.limits.renew_margin());
        self.admission
            .late_wake(now, lag, margin, self.limits.congestion());
    }

    /// Whether any group leads (has a renewal scheduled, queued or in
    /// flight): only then can a renewal batch end an admission pause. A
    /// renewal in flight counts: after a late wake-up that finds every
    /// leader's renewal out, the terms are as much at risk as when they
    /// are due.
    pub(super) fn holding(&self) -> bool {
        self.batches.renewing() || self.schedule.has_renewals()
    }

    pub(super) fn handle(&mut self, msg: ToEngine) {
        match msg {
            ToEngine::Join(joining) => self.join(*joining),
            ToEngine::Command(id, Command::Resign) => self.step(id, Input::Resign),
            ToEngine::Command(id, Command::Shutdown) => self.step(id, Input::Shutdown),
            ToEngine::Drained(id, token) => self.step(id, Input::Drained { token }),
            ToEngine::Pulse(id) => self.step(id, Input::Tick),
            ToEngine::TransferTo(id, to) => self.step(id, Input::TransferTo { to }),
            ToEngine::SetMetadata(id, metadata) => self.step(id, Input::SetMetadata { metadata }),
            ToEngine::Tap(to) => self.tap(to),
        }
    }

    pub(super) fn join(&mut self, joining: Joining) {
        let Joining {
            id,
            session,
            seed,
            preempt_after,
        } = joining;
        let now = self.clock.now();
        let mut machine = Machine::new(
            session.timing().clone(),
            session.candidate().clone(),
            session.metadata().clone(),
            seed,
            now,
        );
        if let Some(delay) = preempt_after {
            machine.preempt_after(delay, now);
        }
        let group = session.group().clone();
        self.by_group.entry(group.clone()).or_default().push(id);
        let timing = machine.timing();
        self.schedule.join(timing);
        self.limits.join(timing);
        self.slots.insert(
            id,
            Slot {
                group,
                machine,
                session,
                fed_pulse: 0,
                op: None,
                seen: None,
                wrote: None,
                isolate: usize::MAX,
                filed: Filed::default(),
                hints: None,
            },
        );
        self.counters.groups.fetch_add(1, Ordering::Relaxed);
        if self.feed.is_up() {
            self.step(id, Input::Feed { live: true });
        } else if self.feed.is_per_group() {
            self.subscribe_group(id);
            self.step(id, Input::Tick);
        } else {
            self.step(id, Input::Tick);
        }
    }

    pub(super) fn leave(&mut self, id: GroupId) {
        let Some(slot) = self.slots.remove(&id) else {
            return;
        };
        if let Some(hints) = slot.hints {
            hints.abort();
        }
        self.schedule.leave(id, &slot.filed);
        if let Some(ids) = self.by_group.get_mut(&slot.group) {
            ids.retain(|i| *i != id);
            if ids.is_empty() {
                self.by_group.remove(&slot.group);
            }
        }
        self.counters.groups.fetch_sub(1, Ordering::Relaxed);
    }

    /// Feeds one input to one group's machine and carries out what it says.
    pub(super) fn step(&mut self, id: GroupId, input: Input) {
        self.step_with(id, |_| Some(input));
    }

    /// Steps group `id` with the input `prepare` returns from its slot
    /// (which it may change first), if it returns one. The slot is looked
    /// up once for all of it: at 100,000 groups each lookup is a cache
    /// miss, and a renewal takes two steps.
    pub(super) fn step_with(
        &mut self,
        id: GroupId,
        prepare: impl FnOnce(&mut Slot) -> Option<Input>,
    ) {
        let Some(slot) = self.slots.get_mut(&id) else {
            return;
        };
        let Some(input) = prepare(slot) else {
            return;
        };
        let now = self.clock.now();
        let (schedule, batches) = (&mut self.schedule, &mut self.batches);
        let stopped = step_slot(id, slot, input, now, &mut self.actions, schedule, batches);
        if stopped {
            self.leave(id);
        } else if self.feed.is_parked() && following(slot) {
            self.unpark_feed(now.mono);
        }
    }
}

/// Steps the machine of group `id` (in `slot`) with `input` at `now`,
/// carries out its actions and files its next wake-up. `actions` is the
/// task's one buffer for a step's actions, left empty with its capacity.
/// Returns true once the group has stopped (the caller removes it).
fn step_slot(
    id: GroupId,
    slot: &mut Slot,
    input: Input,
    now: Now,
    actions: &mut Vec<Action>,
    schedule: &mut Schedule,
    batches: &mut Batches,
) -> bool {
    feed_pulse(slot, now, actions);
    slot.machine.step_into(now, input, actions);
    let stopped = carry_out(id, slot, actions.drain(..), schedule, batches);
    if !stopped {
        schedule.reschedule(id, slot, now);
    }
    stopped
}

/// Carries out the actions of group `id` (in `slot`): operations queued in
/// `batches` with their deadlines filed in `schedule`, events published.
/// Returns true once the group has stopped.
fn carry_out(
    id: GroupId,
    slot: &mut Slot,
    actions: impl Iterator<Item = Action>,
    schedule: &mut Schedule,
    batches: &mut Batches,
) -> bool {
    let mut stopped = false;
    for action in actions {
        match action {
            Action::Read {
                op,
                purpose,
                deadline,
            } => {
                let kind = OpKind::Read(purpose);
                slot.op = Some(Current {
                    op,
                    kind,
                    sent: false,
                });
                schedule.queued(false, purpose == ReadPurpose::Poll);
                let priority = Priority::of(kind, &slot.machine.phase());
                let (group, isolate) = (slot.group.clone(), slot.isolate);
                let queued = Queued {
                    id,
                    op,
                    deadline,
                    isolate,
                    item: group,
                };
                batches.reads.of(priority).push(queued);
                schedule.file_deadline(id, op, deadline);
            }
            Action::Cas {
                op,
                purpose,
                expected,
                record,
                deadline,
            } => {
                let kind = OpKind::Write(purpose);
                slot.op = Some(Current {
                    op,
                    kind,
                    sent: false,
                });
                schedule.queued(purpose == WritePurpose::Renew, false);
                let priority = Priority::of(kind, &slot.machine.phase());
                let request = CasRequest {
                    group: slot.group.clone(),
                    expected,
                    record,
                };
                let isolate = slot.isolate;
                let queued = Queued {
                    id,
                    op,
                    deadline,
                    isolate,
                    item: request,
                };
                batches.writes.of(priority).push(queued);
                schedule.file_deadline(id, op, deadline);
            }
            Action::Elected { token, deadline } => {
                let predecessor = slot.machine.predecessor().clone();
                slot.session
                    .publisher
                    .elected_after(token, deadline, predecessor);
            }
            Action::Renewed {
                deadline, latency, ..
            } => slot.session.publisher.renewed(deadline, latency),
            Action::EndTerm {
                reason,
                work_deadline,
                ..
            } => slot.session.publisher.end_term(reason, work_deadline),
            Action::LeaderChanged { leader } => {
                let info = leader.as_ref().and_then(LeaderInfo::from_record);
                slot.session.publisher.leader_changed(info);
            }
            Action::Failed { fault } => slot.session.publisher.failed(fault),
            Action::Stopped => {
                slot.session.publisher.stopped();
                stopped = true;
            }
        }
    }
    stopped
}
