//! Batching: operations queued by priority, sent as `read_many` and
//! `compare_and_swap_many` within the store's admission, and each batch's
//! answer handed back to its machines (a failed batch retried one by one).

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::task::JoinSet;

use crate::clock::{Clock, MonoTime};
use crate::error::StoreError;
use crate::machine::{Input, OpId, Phase, ReadPurpose, WritePurpose};
use crate::record::{GroupName, Versioned};
use crate::store::spread;
use crate::store::{BatchResult, CasOutcome, CasRequest, LeaseStore};

use super::feed::saw;
use super::shared::Counters;
use super::task::{InFlight, OpKind, Slot, Task};
use super::GroupId;

/// What an operation is for, in the order the engine sends them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Priority {
    /// A leader's renewal, or its read verifying a conflicted one.
    Renewal,
    /// A release, or a releasing node's verifying read.
    Release,
    /// A candidate's attempt to take the lease.
    Acquisition,
    /// A candidate's look at the record.
    Poll,
}

impl Priority {
    pub(super) const ALL: [Priority; 4] = [
        Priority::Renewal,
        Priority::Release,
        Priority::Acquisition,
        Priority::Poll,
    ];

    pub(super) fn index(self) -> usize {
        self as usize
    }

    /// Whether the admission window bounds it (it adds load, and may wait).
    pub(super) fn deferrable(self) -> bool {
        matches!(self, Priority::Acquisition | Priority::Poll)
    }

    pub(super) fn of(kind: OpKind, phase: &Phase) -> Priority {
        match kind {
            OpKind::Write(WritePurpose::Renew) => Priority::Renewal,
            OpKind::Write(WritePurpose::Release) => Priority::Release,
            // A request adds load for a leader that may decline it, and a
            // withdrawal is best effort with no term at stake: both wait
            // for admission as an acquisition does (shedding one must not
            // read as a held term at risk).
            OpKind::Write(
                WritePurpose::Acquire | WritePurpose::Request | WritePurpose::Withdraw,
            ) => Priority::Acquisition,
            OpKind::Read(ReadPurpose::Poll) => Priority::Poll,
            OpKind::Read(ReadPurpose::Verify) => match phase {
                Phase::Leader { .. } => Priority::Renewal,
                _ => Priority::Release,
            },
        }
    }
}

/// Operations of one priority waiting for a batch: healthy groups' and
/// suspects' apart, each in the order they came.
pub(super) struct Lane<T> {
    pub(super) healthy: VecDeque<Queued<T>>,
    pub(super) suspects: VecDeque<Queued<T>>,
}

impl<T> Default for Lane<T> {
    fn default() -> Self {
        Lane {
            healthy: VecDeque::new(),
            suspects: VecDeque::new(),
        }
    }
}

impl<T> Lane<T> {
    pub(super) fn push(&mut self, q: Queued<T>) {
        if q.isolate == usize::MAX {
            self.healthy.push_back(q);
        } else {
            self.suspects.push_back(q);
        }
    }

    pub(super) fn len(&self) -> usize {
        self.healthy.len() + self.suspects.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.healthy.is_empty() && self.suspects.is_empty()
    }

    /// Moves the next batch of at most `room` into `chunk` (empty):
    /// suspects' operations if any wait and `suspects` allows, no more of
    /// them than the smallest bound among them (then it returns true);
    /// else healthy groups' operations.
    pub(super) fn take(&mut self, room: usize, suspects: bool, chunk: &mut Vec<Queued<T>>) -> bool {
        if suspects && !self.suspects.is_empty() {
            let mut limit = room;
            while let Some(q) = self.suspects.front() {
                let limit_with = limit.min(q.isolate);
                if chunk.len() >= limit_with {
                    break;
                }
                limit = limit_with;
                chunk.extend(self.suspects.pop_front());
            }
            return true;
        }
        let take = room.min(self.healthy.len());
        chunk.extend(self.healthy.drain(..take));
        false
    }
}

/// A group's operations waiting for a batch, by [`Priority`].
pub(super) struct Queues<T> {
    pub(super) by_priority: [Lane<T>; 4],
    /// The buffer a batch's operations are taken into, kept between
    /// batches: a batch of thousands allocated and freed anew each time
    /// made the allocator consolidate its free lists at every batch.
    taken: Vec<Queued<T>>,
}

impl<T> Default for Queues<T> {
    fn default() -> Self {
        Queues {
            by_priority: Default::default(),
            taken: Vec::new(),
        }
    }
}

impl<T> Queues<T> {
    pub(super) fn of(&mut self, priority: Priority) -> &mut Lane<T> {
        &mut self.by_priority[priority.index()]
    }
}

/// The batches: operations waiting by priority, the batches in flight and
/// what each carries, and what the replies taught (whether the store
/// works, which operations were held back this turn). It owns that state;
/// the task decides what goes out, asking the machines and the admission
/// window.
pub(super) struct Batches {
    pub(super) reads: Queues<GroupName>,
    pub(super) writes: Queues<CasRequest>,
    /// The batches in flight, each in a task of its own: spawned only by
    /// [`Batches::launch`], which records what each carries.
    pub(super) running: JoinSet<BatchReply>,
    /// What each batch in flight carries, by task.
    carried: HashMap<tokio::task::Id, InFlight>,
    /// Operations in flight in every batch: a batch sent now waits behind
    /// them.
    ops_in_flight: usize,
    /// Renewals (and leaders' verifying reads) in flight: terms held
    /// whose renewal is out are held all the same (see `Task::holding`).
    renewals_in_flight: usize,
    /// Batches of suspects in flight (at most one: a suspect whose request
    /// hangs must not hold every slot).
    suspects_in_flight: usize,
    /// When a batch of reads (`[0]`) and of writes (`[1]`) last came back
    /// with a success: a batch failing whole after that blames its items,
    /// before it the store.
    last_success: [Option<MonoTime>; 2],
    /// Operations answered without being sent, to step after the flush.
    pub(super) shedding: Vec<(GroupId, OpId)>,
}

impl Default for Batches {
    fn default() -> Self {
        Batches {
            reads: Queues::default(),
            writes: Queues::default(),
            running: JoinSet::new(),
            carried: HashMap::new(),
            ops_in_flight: 0,
            renewals_in_flight: 0,
            suspects_in_flight: 0,
            last_success: [None, None],
            shedding: Vec::new(),
        }
    }
}

impl Batches {
    /// Whether a renewal waits in a queue or is in flight: a term held.
    pub(super) fn renewing(&self) -> bool {
        self.renewals_in_flight > 0
            || !self.writes.by_priority[Priority::Renewal.index()].is_empty()
            || !self.reads.by_priority[Priority::Renewal.index()].is_empty()
    }

    /// Whether acquisitions or polls wait in the queues.
    pub(super) fn deferred_waiting(&self) -> bool {
        Priority::ALL.iter().filter(|p| p.deferrable()).any(|p| {
            !self.reads.by_priority[p.index()].is_empty()
                || !self.writes.by_priority[p.index()].is_empty()
        })
    }

    /// How many more batches may go out while `max_in_flight` is the bound.
    pub(super) fn free(&self, max_in_flight: usize) -> usize {
        max_in_flight.saturating_sub(self.running.len())
    }

    /// Whether a batch of suspects may go out now.
    pub(super) fn suspects_allowed(&self) -> bool {
        self.suspects_in_flight == 0
    }

    /// Operations in flight in every batch.
    pub(super) fn ops_in_flight(&self) -> usize {
        self.ops_in_flight
    }

    /// Sends a batch carrying `batch` (of suspects if `suspects`): `work`
    /// runs in a task of its own, and what it carries counts as in flight
    /// until [`Batches::returned`].
    fn launch(
        &mut self,
        work: impl Future<Output = BatchReply> + Send + 'static,
        batch: InFlight,
        suspects: bool,
    ) {
        let task = self.running.spawn(work).id();
        self.carried.insert(task, batch);
        self.ops_in_flight = self.ops_in_flight.saturating_add(batch.all);
        self.renewals_in_flight = self.renewals_in_flight.saturating_add(batch.renewals);
        if suspects {
            self.suspects_in_flight += 1;
        }
    }

    /// The batch of task `task` came back (or was abandoned): what it
    /// carried is in flight no more, and is returned.
    pub(super) fn returned(&mut self, task: tokio::task::Id) -> Option<InFlight> {
        let batch = self.carried.remove(&task)?;
        self.ops_in_flight = self.ops_in_flight.saturating_sub(batch.all);
        self.renewals_in_flight = self.renewals_in_flight.saturating_sub(batch.renewals);
        Some(batch)
    }

    /// A reply came back at `now`: its batch of suspects (if it was one) is
    /// in flight no more, a success is noted for its kind, and what is
    /// returned is the batch size its failed groups may go in next (see
    /// `Task::on_batch`).
    fn on_reply(&mut self, reply: &BatchReply, now: MonoTime) -> usize {
        if reply.suspects {
            self.suspects_in_flight = self.suspects_in_flight.saturating_sub(1);
        }
        // A group that failed while others in its batch succeeded may go
        // only alone next time; one that failed with its whole batch (or
        // with every item of it), with half as many, unless no batch of
        // the same kind has come back with a success since it went out:
        // then the store is failing everyone (an outage, a Redis that
        // refuses every lease for a while), and blaming the items would
        // only turn the recovery into batches of one.
        let outcome = reply.result.outcome();
        let kind = usize::from(matches!(reply.result, BatchResults::Writes(..)));
        let store_works = self.last_success[kind].is_some_and(|t| t >= reply.sent);
        if outcome != Outcome::AllFailed {
            self.last_success[kind] = Some(now);
        }
        match (outcome, store_works) {
            (Outcome::Mixed, _) => 1,
            (Outcome::AllFailed, true) => (reply.result.len() / 2).max(1),
            (Outcome::AllFailed, false) | (Outcome::AllApplied, _) => usize::MAX,
        }
    }
}

/// A queued store operation of one group: `item` is the group to read or
/// the compare-and-swap to make.
pub(super) struct Queued<T> {
    pub(super) id: GroupId,
    pub(super) op: OpId,
    pub(super) deadline: MonoTime,
    /// The group's batch-size bound when it was queued (see `Slot::isolate`).
    pub(super) isolate: usize,
    pub(super) item: T,
}

/// The operations of a batch about to be sent: whose they are, the latest
/// of their deadlines (the batch is abandoned once all have passed), and
/// what to send.
pub(super) struct Outgoing<T> {
    pub(super) ids: Vec<(GroupId, OpId)>,
    pub(super) deadline: MonoTime,
    pub(super) items: Vec<T>,
}

/// A finished batch, with the instant it was sent, what it was for and
/// whether it carried suspects.
pub(super) struct BatchReply {
    pub(super) sent: MonoTime,
    /// When the store's answer landed, read in the batch's own task: the
    /// engine's turn that handles it may come later on a busy host, and
    /// that wait is not the store's.
    pub(super) landed: MonoTime,
    pub(super) priority: Priority,
    pub(super) suspects: bool,
    pub(super) result: BatchResults,
}

/// How a batch's items fared, for failure isolation.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    AllApplied,
    Mixed,
    AllFailed,
}

/// The groups of a batch and their operations, in the order of its items.
pub(super) type BatchIds = Vec<(GroupId, OpId)>;

pub(super) enum BatchResults {
    Reads(BatchIds, BatchResult<Option<Versioned>>),
    /// With the requests sent, given back to be reused (none if the
    /// batch timed out).
    Writes(BatchIds, BatchResult<CasOutcome>, Vec<CasRequest>),
}

impl BatchResults {
    pub(super) fn len(&self) -> usize {
        match self {
            BatchResults::Reads(ids, _) | BatchResults::Writes(ids, _, _) => ids.len(),
        }
    }

    /// Whether every item failed (the batch as a whole or each on its
    /// own), some did, or none did; busy items (certainly not applied) are
    /// not failures.
    pub(super) fn outcome(&self) -> Outcome {
        fn of<R>(r: &BatchResult<R>) -> Outcome {
            let failed = |e: &StoreError| !e.not_applied();
            match r {
                Err(e) if failed(e) => Outcome::AllFailed,
                Err(_) => Outcome::AllApplied,
                Ok(items) => {
                    let bad = items
                        .iter()
                        .filter(|i| i.as_ref().err().is_some_and(failed))
                        .count();
                    if bad == 0 {
                        Outcome::AllApplied
                    } else if bad == items.len() {
                        Outcome::AllFailed
                    } else {
                        Outcome::Mixed
                    }
                }
            }
        }
        match self {
            BatchResults::Reads(_, r) => of(r),
            BatchResults::Writes(_, r, _) => of(r),
        }
    }

    /// Whether the store failed the batch as a whole (a batch it turned
    /// away as busy, certainly not applied, is not a failure of its items).
    pub(super) fn failed(&self) -> bool {
        let failed = |e: &StoreError| !e.not_applied();
        match self {
            BatchResults::Reads(_, r) => r.as_ref().err().is_some_and(failed),
            BatchResults::Writes(_, r, _) => r.as_ref().err().is_some_and(failed),
        }
    }
}

/// A store's answer to one operation.
pub(super) enum Reply {
    Read(Option<Versioned>),
    Write(CasOutcome),
}

impl Task {
    /// Sends queued operations as batches while there is room in flight,
    /// in the order of their priorities, then answers what it held back.
    pub(super) fn flush(&mut self) {
        loop {
            for priority in Priority::ALL {
                self.flush_queue(
                    priority,
                    |engine| &mut engine.batches.writes,
                    |counters| (&counters.write_batches, &counters.writes),
                    |store, requests| async move {
                        let result = store.compare_and_swap_many(&requests).await;
                        (result, requests)
                    },
                    BatchResults::Writes,
                );
                self.flush_queue(
                    priority,
                    |engine| &mut engine.batches.reads,
                    |counters| (&counters.read_batches, &counters.reads),
                    |store, groups| async move { (store.read_many(&groups).await, ()) },
                    |ids, result, ()| BatchResults::Reads(ids, result),
                );
            }
            let shed = std::mem::take(&mut self.batches.shedding);
            if shed.is_empty() {
                break;
            }
            for (id, op) in shed {
                Counters::add(&self.counters.shed, 1);
                self.hold_back(id, op);
            }
        }
        let window = self.admission.window() as u64;
        self.counters
            .admission_window
            .store(window, Ordering::Relaxed);
    }

    /// How many operations of `priority` may go out in the next batch: the
    /// batch size, within the admission window for deferrable ones, which
    /// also leave the last free slot to renewals and releases.
    pub(super) fn room_for(&self, priority: Priority) -> usize {
        let free = self.batches.free(self.options.max_in_flight);
        let cap = self
            .admission
            .batch_cap(self.options.max_batch, self.limits.congestion());
        if !priority.deferrable() {
            return if free > 0 { cap } else { 0 };
        }
        let reserved = usize::from(self.options.max_in_flight > 1);
        if free <= reserved {
            return 0;
        }
        let now = self.clock.now().mono;
        self.admission.room(now).min(cap)
    }

    /// Sends one priority's operations of one queue as batches while there
    /// is room, through `call`; `counted` names the counters of its batches
    /// and of its operations.
    pub(super) fn flush_queue<T, R, B, Fut>(
        &mut self,
        priority: Priority,
        queues: fn(&mut Self) -> &mut Queues<T>,
        counted: fn(&Counters) -> (&AtomicU64, &AtomicU64),
        call: impl Fn(Arc<dyn LeaseStore>, Vec<T>) -> Fut,
        results: fn(BatchIds, BatchResult<R>, B) -> BatchResults,
    ) where
        R: 'static,
        B: Default + Send + 'static,
        Fut: Future<Output = (BatchResult<R>, B)> + Send + 'static,
    {
        loop {
            if queues(self).of(priority).is_empty() {
                return;
            }
            let room = self.room_for(priority);
            if room == 0 {
                return;
            }
            let allow_suspects = self.batches.suspects_allowed();
            let queued = queues(self);
            let lane = &mut queued.by_priority[priority.index()];
            if lane.healthy.is_empty() && !allow_suspects {
                return;
            }
            let mut chunk = std::mem::take(&mut queued.taken);
            let suspects = lane.take(room, allow_suspects, &mut chunk);
            let out = self.still_current(&mut chunk, priority);
            queues(self).taken = chunk;
            let Some(out) = out else {
                continue;
            };
            let (batches, operations) = counted(&self.counters);
            Counters::add(batches, 1);
            Counters::add(operations, out.items.len());
            self.send(out, priority, suspects, &call, results);
        }
    }

    /// The operations of `chunk` (left empty) that are still their groups'
    /// operations in flight, as a batch to send (each marked sent); `None`
    /// if none is. A
    /// renewal or release whose deadline is nearer than the store's recent
    /// service time is not sent, but answered as held back.
    pub(super) fn still_current<T>(
        &mut self,
        chunk: &mut Vec<Queued<T>>,
        priority: Priority,
    ) -> Option<Outgoing<T>> {
        let now = self.clock.now().mono;
        // What the store should take for this batch, at its round trip and
        // learned cost per operation: an operation whose deadline comes
        // sooner would be answered too late, and the store's time spent on
        // it would be taken from the others.
        let expected = self
            .admission
            .expected(chunk.len(), self.batches.ops_in_flight());
        // An acquisition or poll that waited for admission until the store
        // could no longer answer it in time is not worth the store's time
        // either (a timeout would count against the store): it is answered
        // busy now, and its candidate backs off with jitter.
        let least = expected;
        // With nothing in flight the estimate stands on the learned cost
        // alone, which only a reply can correct: one operation goes out
        // whatever it says, as a probe. Else a cost learned wrongly (a
        // reply that waited out the process's own suspension, 4.7 s over
        // a batch of reads) held back every operation for good, and the
        // member stood for nothing ever after (tenure-sim --shards
        // --catalog seed 316).
        let mut probe = self.batches.ops_in_flight() == 0;
        // What goes out is listed straight into the batch's two lists.
        let mut ids = Vec::with_capacity(chunk.len());
        let mut items = Vec::with_capacity(chunk.len());
        let mut deadline = None;
        let mut go = |q: Queued<T>| {
            deadline = deadline.max(Some(q.deadline));
            ids.push((q.id, q.op));
            items.push(q.item);
        };
        for q in chunk.drain(..) {
            // Still its group's operation in flight (it may have timed out
            // while queued)? If it goes out, it is marked sent here: one
            // lookup of the group's slot for both.
            let current = self.slots.get_mut(&q.id).and_then(|s| s.op.as_mut());
            let Some(current) = current.filter(|c| c.op == q.op) else {
                continue;
            };
            if std::mem::take(&mut probe) {
                current.sent = true;
                go(q);
                continue;
            }
            if priority.deferrable() && q.deadline.saturating_since(now) < least {
                self.batches.shedding.push((q.id, q.op));
                continue;
            }
            if !priority.deferrable() && q.deadline.saturating_since(now) < expected {
                // Held terms are being given up for want of time: nothing
                // that adds load may go out, from this very flush on, until
                // the store keeps up again. A renewal held back is a term
                // held, even a lone leader's whose renewal is the only one
                // (taken out of the queue for this batch, it is counted
                // nowhere else).
                let holding = priority == Priority::Renewal || self.holding();
                self.admission
                    .overloaded(now, self.limits.congestion(), holding);
                self.batches.shedding.push((q.id, q.op));
                continue;
            }
            current.sent = true;
            go(q);
        }
        Some(Outgoing {
            deadline: deadline?,
            ids,
            items,
        })
    }

    /// Sends a batch through `call` in a task of its own, its reply made
    /// by `results`; at its deadline the batch is abandoned (every operation
    /// in it has timed out) and fails as a whole.
    pub(super) fn send<T, R, B, Fut>(
        &mut self,
        out: Outgoing<T>,
        priority: Priority,
        suspects: bool,
        call: impl FnOnce(Arc<dyn LeaseStore>, Vec<T>) -> Fut,
        results: fn(BatchIds, BatchResult<R>, B) -> BatchResults,
    ) where
        R: 'static,
        B: Default + Send + 'static,
        Fut: Future<Output = (BatchResult<R>, B)> + Send + 'static,
    {
        let clock = self.clock.clone();
        let sent = clock.now().mono;
        let waited = out.deadline.saturating_since(sent);
        let (ids, deadline) = (out.ids, out.deadline);
        let count = ids.len();
        let request = call(self.store.clone(), out.items);
        let work = async move {
            let (result, back) = tokio::select! {
                biased;
                r = request => r,
                _ = clock.sleep_until(deadline) => (Err(StoreError::Timeout(waited)), B::default()),
            };
            BatchReply {
                sent,
                landed: clock.now().mono,
                priority,
                suspects,
                result: results(ids, result, back),
            }
        };
        let deferrable = if priority.deferrable() { count } else { 0 };
        let renewals = if priority == Priority::Renewal {
            count
        } else {
            0
        };
        let batch = InFlight {
            all: count,
            deferrable,
            renewals,
        };
        self.batches.launch(work, batch, suspects);
        self.admission.sent(deferrable);
    }

    pub(super) fn on_batch(&mut self, reply: BatchReply) {
        let now = self.clock.now().mono;
        // The store's latency, less what the host may have added: a reply
        // lands as late as the engine's own timers fire on a busy host.
        let latency = reply
            .landed
            .saturating_since(reply.sent)
            .saturating_sub(self.host_lag.at(now));
        let (count, failed) = (reply.result.len(), reply.result.failed());
        let target = self.limits.congestion();
        let renewals = reply.priority == Priority::Renewal;
        self.admission
            .observe(now, latency, failed, count, target, renewals);
        let isolate = self.batches.on_reply(&reply, now);
        match reply.result {
            BatchResults::Reads(ids, result) => {
                for ((id, op), result) in spread(ids.into_iter(), result) {
                    self.answer(id, op, result.map(Reply::Read), isolate);
                }
            }
            BatchResults::Writes(ids, result, requests) => {
                // The records sent go back to their machines first, so
                // that a write the answer prompts is built in them.
                for (&(id, _), request) in ids.iter().zip(requests) {
                    if let Some(slot) = self.slots.get_mut(&id) {
                        slot.machine.recycle(request.record);
                    }
                }
                for ((id, op), result) in spread(ids.into_iter(), result) {
                    self.answer(id, op, result.map(Reply::Write), isolate);
                }
            }
        }
    }

    /// Files a group as healthy after a success, or as a suspect to be
    /// sent in batches of at most `isolate` after a failure.
    fn judge<T>(slot: &mut Slot, result: &Result<T, StoreError>, isolate: usize) {
        slot.isolate = match result {
            Ok(_) => usize::MAX,
            // Held back, not failed.
            Err(e) if e.not_applied() => slot.isolate,
            Err(_) if isolate == usize::MAX => slot.isolate,
            Err(_) => slot.isolate.min(isolate),
        };
    }

    /// Answers a group's operation that the engine did not send because it
    /// could not have been answered before its deadline: busy, certainly not
    /// applied, and no report on the store's health (it did not fail).
    pub(super) fn hold_back(&mut self, id: GroupId, op: OpId) {
        self.step_with(id, |slot| {
            let current = slot.op.filter(|c| c.op == op)?;
            slot.op = None;
            let error = StoreError::busy(
                "not sent: the store could not have answered before the operation's deadline",
            );
            Some(current.kind.failed(op, error))
        });
    }

    /// Hands a group its operation's outcome, if `op` is still the one it
    /// waits for, after judging the group by it (see [`Task::judge`], with
    /// the batch's `isolate`). A read's outcome answers a read, a write's
    /// a write; an error answers either.
    pub(super) fn answer(
        &mut self,
        id: GroupId,
        op: OpId,
        result: Result<Reply, StoreError>,
        isolate: usize,
    ) {
        self.step_with(id, |slot| {
            Self::judge(slot, &result, isolate);
            let current = slot.op.filter(|c| c.op == op)?;
            slot.op = None;
            match &result {
                Ok(Reply::Read(Some(v))) => saw(slot, v.version),
                Ok(Reply::Write(CasOutcome::Applied(version))) => {
                    saw(slot, *version);
                    slot.wrote = Some(slot.wrote.map_or(*version, |w| w.max(*version)));
                }
                _ => {}
            }
            let health = result
                .as_ref()
                .err()
                .map(|e| (e.kind().to_owned(), e.to_string()));
            slot.session
                .publisher
                .store_health(current.kind.label(), health);
            Some(match (current.kind, result) {
                (_, Ok(Reply::Read(read))) => Input::ReadDone {
                    op,
                    result: Ok(read),
                },
                (_, Ok(Reply::Write(outcome))) => Input::CasDone {
                    op,
                    result: Ok(outcome),
                },
                (kind, Err(e)) => kind.failed(op, e),
            })
        });
    }
}
