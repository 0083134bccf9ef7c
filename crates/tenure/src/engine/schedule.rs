//! When the task acts: the timer heap, operation deadlines ([`Deadlines`]),
//! and the coalescing that pulls nearly-due renewals and polls into one
//! batch.
//! [`Schedule`] owns that state; the task asks it what is due and steps
//! the machines.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use crate::clock::{Clock, MonoTime, Now};
use crate::config::Timing;
use crate::error::StoreError;
use crate::machine::{Input, OpId};

use super::batch::Priority;
use super::deadlines::{Deadlines, OpDeadline};
use super::feed::watch_liveness;
use super::shared::Counters;
use super::task::{Current, IdHash, Slot, Task};
use super::GroupId;

/// A wake-up of one group, valid while the group's generation matches.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Timer {
    at: MonoTime,
    id: GroupId,
    gen: u64,
}

/// Where one group stands in the [`Schedule`]: kept in its slot.
///
/// A group has at most one live entry in the timer heap. A wake-up that
/// moves later keeps it: the entry is filed again for the new instant
/// when it comes up, rather than a new one pushed and the old left stale.
/// A leader's wake-up moves later twice per renewal (sent, then renewed),
/// so this halves the heap's pushes and leaves nothing stale behind.
#[derive(Default)]
pub(super) struct Filed {
    /// The generation of the live entry in the heap; older entries are
    /// stale.
    gen: u64,
    /// When the group wants its next tick, if ever.
    scheduled: Option<MonoTime>,
    /// When the live entry comes up, if there is one: at or before
    /// `scheduled`.
    entry_at: Option<MonoTime>,
    renew_key: Option<MonoTime>,
    poll_key: Option<MonoTime>,
}

/// What a timer entry that comes up means for its group.
enum Due {
    /// Not the group's live entry (or no group): dropped.
    Stale,
    /// The live entry, but the group wants no tick any more: dropped.
    Gone,
    /// The live entry, and the group's wake-up has come: it is ticked.
    Fire,
    /// The live entry, but the group's wake-up moved to this later
    /// instant: filed again for it.
    Later(MonoTime),
}

impl Filed {
    fn is_live(&self, t: &Timer) -> bool {
        self.gen == t.gen
    }

    fn due(&self, t: &Timer) -> Due {
        if !self.is_live(t) {
            return Due::Stale;
        }
        match self.scheduled {
            Some(at) if at > t.at => Due::Later(at),
            Some(_) => Due::Fire,
            None => Due::Gone,
        }
    }
}

/// Whether `d` is the deadline of the operation `slot` has in flight.
fn deadline_live(slots: &HashMap<GroupId, Slot, IdHash>, d: &OpDeadline) -> bool {
    slots
        .get(&d.id)
        .is_some_and(|s| s.op.is_some_and(|c| c.op.0 == d.op))
}

fn timer_live(slots: &HashMap<GroupId, Slot, IdHash>, t: &Timer) -> bool {
    slots.get(&t.id).is_some_and(|s| s.filed.is_live(t))
}

/// The engine's timers: each group's next wake-up, the reply deadlines of
/// operations in flight, the groups by when their renewal or poll falls
/// due, and how far ahead of schedule a nearly-due one may be pulled into
/// a batch going out. It reads the groups' slots to tell a live entry
/// from a stale one, and changes only its own state and their [`Filed`].
#[derive(Default)]
pub(super) struct Schedule {
    timers: BinaryHeap<Reverse<Timer>>,
    deadlines: Deadlines,
    /// The buffer the deadlines that passed are taken into, kept between
    /// turns.
    due: Vec<OpDeadline>,
    renewals: BTreeSet<(MonoTime, GroupId)>,
    polls: BTreeSet<(MonoTime, GroupId)>,
    /// Whether this turn queued a scheduled renewal or poll, which the
    /// nearly-due ones then join.
    renewing: bool,
    polling: bool,
    /// How far ahead of schedule any group's renewal or poll may be pulled
    /// (the largest half-interval among the groups that have joined).
    renew_window: Duration,
    poll_window: Duration,
    /// The buffer the groups pulled into a batch are listed in, kept
    /// between turns: growing a list of thousands anew each turn was a
    /// fiftieth of the engine's time at 100,000 groups.
    pulled: Vec<GroupId>,
}

/// Moves group `id` in `index` (groups by the instant something is due
/// for them) from the instant it was filed at to `due`, or out of it.
fn refile(
    index: &mut BTreeSet<(MonoTime, GroupId)>,
    filed: &mut Option<MonoTime>,
    due: Option<MonoTime>,
    id: GroupId,
) {
    if due == *filed {
        return;
    }
    if let Some(t) = filed.take() {
        index.remove(&(t, id));
    }
    if let Some(t) = due {
        index.insert((t, id));
    }
    *filed = due;
}

pub(super) async fn sleep_until(clock: &Arc<dyn Clock>, wake: Option<MonoTime>) {
    match wake {
        Some(t) => clock.sleep_until(t).await,
        None => std::future::pending().await,
    }
}

impl Schedule {
    /// A group of `timing` joined: its half-intervals widen the windows.
    pub(super) fn join(&mut self, timing: &Timing) {
        self.renew_window = self.renew_window.max(timing.renew_interval / 2);
        self.poll_window = self.poll_window.max(timing.retry_interval / 2);
    }

    /// Group `id` left: its renewal and poll are due no more.
    pub(super) fn leave(&mut self, id: GroupId, filed: &Filed) {
        if let Some(t) = filed.renew_key {
            self.renewals.remove(&(t, id));
        }
        if let Some(t) = filed.poll_key {
            self.polls.remove(&(t, id));
        }
    }

    /// Whether any group has a renewal scheduled.
    pub(super) fn has_renewals(&self) -> bool {
        !self.renewals.is_empty()
    }

    /// The pulled renewals (`renewals`) or polls, listed in `pulled`, were
    /// stepped: what they queued marks nothing, and the list's buffer is
    /// kept for the next pull.
    fn coalesced(&mut self, renewals: bool, mut pulled: Vec<GroupId>) {
        if renewals {
            self.renewing = false;
        } else {
            self.polling = false;
        }
        pulled.clear();
        self.pulled = pulled;
    }

    /// A renewal (or a poll) was queued this turn: nearly-due ones join it.
    pub(super) fn queued(&mut self, renewal: bool, poll: bool) {
        self.renewing |= renewal;
        self.polling |= poll;
    }

    /// Files the deadline by which the reply to a queued operation must
    /// have come.
    pub(super) fn file_deadline(&mut self, id: GroupId, op: OpId, deadline: MonoTime) {
        self.deadlines.file(OpDeadline {
            at: deadline,
            id,
            op: op.0,
        });
    }

    /// Files group `id`'s next wake-up `wake` and its due renewal and poll.
    fn file(
        &mut self,
        id: GroupId,
        filed: &mut Filed,
        wake: Option<MonoTime>,
        renew_due: Option<MonoTime>,
        poll_due: Option<MonoTime>,
    ) {
        if wake != filed.scheduled {
            filed.scheduled = wake;
            // An entry that comes up no later stays (see `Filed`).
            if let Some(at) = wake.filter(|at| filed.entry_at.is_none_or(|e| *at < e)) {
                filed.gen += 1;
                filed.entry_at = Some(at);
                self.timers.push(Reverse(Timer {
                    at,
                    id,
                    gen: filed.gen,
                }));
            }
        }
        refile(&mut self.renewals, &mut filed.renew_key, renew_due, id);
        refile(&mut self.polls, &mut filed.poll_key, poll_due, id);
    }

    /// The earliest live wake-up or deadline, dropping stale entries from
    /// the top and filing again those whose wake-up moved later, so that
    /// the sleep is for a real one.
    fn next_due(&mut self, slots: &mut HashMap<GroupId, Slot, IdHash>) -> Option<MonoTime> {
        while let Some(&Reverse(t)) = self.timers.peek() {
            let Some(slot) = slots.get_mut(&t.id) else {
                self.timers.pop();
                continue;
            };
            match slot.filed.due(&t) {
                Due::Fire => break,
                Due::Stale => {}
                Due::Gone => slot.filed.entry_at = None,
                Due::Later(at) => {
                    self.timers.pop();
                    self.refile_timer(&mut slot.filed, t, at);
                    continue;
                }
            }
            self.timers.pop();
        }
        self.deadlines.drop_stale(|d| !deadline_live(slots, d));
        let wake = self.timers.peek().map(|Reverse(t)| t.at);
        match self.deadlines.first_at() {
            Some(d) => Some(wake.map_or(d, |w| w.min(d))),
            None => wake,
        }
    }

    /// Drops the timers' and deadlines' stale entries in one pass once
    /// they outnumber the live ones (a group has at most one live wake-up
    /// and one live deadline): each renewal leaves its deadline behind (and
    /// a wake-up moved earlier leaves one), and popping them one by one as
    /// they came due (a sift through a heap of hundreds of thousands each)
    /// cost an eighth of the engine's time at 100,000 groups. A stale
    /// entry never becomes live again (generations and operation ids only
    /// rise), so what fires, and when, is unchanged.
    fn compact(&mut self, slots: &HashMap<GroupId, Slot, IdHash>) {
        let bound = slots.len().saturating_mul(2).saturating_add(1024);
        if self.timers.len() > bound {
            self.timers.retain(|Reverse(t)| timer_live(slots, t));
        }
        if self.deadlines.len() > bound {
            self.deadlines.retain(|d| deadline_live(slots, d));
        }
    }

    /// The deadlines that have passed at `now`, live or stale, earliest
    /// first, in the buffer kept for them (give it back with
    /// [`done_with_due`](Self::done_with_due)).
    fn take_due(&mut self, now: MonoTime) -> Vec<OpDeadline> {
        let mut due = std::mem::take(&mut self.due);
        self.deadlines.take_due(now, &mut due);
        due
    }

    fn done_with_due(&mut self, mut due: Vec<OpDeadline>) {
        due.clear();
        self.due = due;
    }

    /// Files the live entry `t` of a group (`filed`) again, for the later
    /// instant `at` its wake-up moved to.
    fn refile_timer(&mut self, filed: &mut Filed, t: Timer, at: MonoTime) {
        filed.entry_at = Some(at);
        self.timers.push(Reverse(Timer { at, ..t }));
    }

    /// The next wake-up that has come at `now`, live or stale.
    fn pop_timer(&mut self, now: MonoTime) -> Option<Timer> {
        let Reverse(t) = *self.timers.peek()?;
        (t.at <= now).then(|| {
            self.timers.pop();
            t
        })
    }

    /// The first `room` groups of `wakes` due within `window` of `now`,
    /// each no earlier than half its own `interval` (so that coalescing
    /// never more than halves a group's renewal or poll period). It stops
    /// at `room` (and walks nothing when it is 0): past capacity the window
    /// holds most groups, and a batch already full must not cost a walk
    /// over all of them each turn.
    fn nearly_due(
        slots: &HashMap<GroupId, Slot, IdHash>,
        wakes: &BTreeSet<(MonoTime, GroupId)>,
        now: MonoTime,
        window: Duration,
        room: usize,
        interval: fn(&Timing) -> Duration,
        mut pulled: Vec<GroupId>,
    ) -> Vec<GroupId> {
        let due = wakes
            .iter()
            .take_while(|(t, _)| *t <= now + window)
            .filter(|(t, id)| {
                // A group retrying after a failure keeps its own schedule:
                // pulled in, it would be batched with the healthy ones.
                slots.get(id).is_some_and(|s| {
                    s.isolate == usize::MAX && *t <= now + interval(s.machine.timing()) / 2
                })
            })
            .map(|(_, id)| *id)
            .take(room);
        pulled.extend(due);
        pulled
    }

    /// The renewals to pull into this turn's batch (see
    /// [`nearly_due`](Self::nearly_due)), if a scheduled one was queued
    /// this turn; `None` if none was. The caller steps them, then
    /// [`coalesced`](Self::coalesced): what they queue starts no new pull.
    fn early_renewals(
        &mut self,
        slots: &HashMap<GroupId, Slot, IdHash>,
        now: MonoTime,
        room: impl FnOnce() -> usize,
    ) -> Option<Vec<GroupId>> {
        if !std::mem::take(&mut self.renewing) {
            return None;
        }
        let window = self.renew_window;
        Some(Self::nearly_due(
            slots,
            &self.renewals,
            now,
            window,
            room(),
            |t| t.renew_interval,
            std::mem::take(&mut self.pulled),
        ))
    }

    /// The polls to pull into this turn's batch, as
    /// [`early_renewals`](Self::early_renewals).
    fn early_polls(
        &mut self,
        slots: &HashMap<GroupId, Slot, IdHash>,
        now: MonoTime,
        room: impl FnOnce() -> usize,
    ) -> Option<Vec<GroupId>> {
        if !std::mem::take(&mut self.polling) {
            return None;
        }
        let window = self.poll_window;
        Some(Self::nearly_due(
            slots,
            &self.polls,
            now,
            window,
            room(),
            |t| t.retry_interval,
            std::mem::take(&mut self.pulled),
        ))
    }
}

impl Schedule {
    /// Files group `id`'s next wake-up and its due renewal or poll, as its
    /// machine in `slot` now says.
    pub(super) fn reschedule(&mut self, id: GroupId, slot: &mut Slot, now: Now) {
        watch_liveness(slot, now);
        let wake = slot.machine.next_wake(now);
        let (renew, poll) = (slot.machine.renew_due(), slot.machine.poll_due());
        self.file(id, &mut slot.filed, wake, renew, poll);
    }
}

impl Task {
    pub(super) fn next_wake(&mut self) -> Option<MonoTime> {
        let mut wake = self.schedule.next_due(&mut self.slots);
        if let Some(retry_at) = self.feed.subscribe_at(!self.slots.is_empty()) {
            wake = Some(wake.map_or(retry_at, |w| w.min(retry_at)));
        }
        if let Some(t) = self.feed.check_due() {
            wake = Some(wake.map_or(t, |w| w.min(t)));
        }
        // Operations held back by a pause go out when it ends.
        let now = self.clock.now().mono;
        // A tap that fell behind is owed a resync nothing else may carry.
        if let Some(t) = self.feed.taps.resync_due(now) {
            wake = Some(wake.map_or(t, |w| w.min(t)));
        }
        if let Some(t) = self
            .admission
            .paused_until(now)
            .filter(|_| self.batches.deferred_waiting())
        {
            wake = Some(wake.map_or(t, |w| w.min(t)));
        }
        wake
    }

    /// Drops the schedule's stale entries (see [`Schedule::compact`]).
    pub(super) fn compact_heaps(&mut self) {
        self.schedule.compact(&self.slots);
    }

    /// Ticks every group whose wake-up has come, and times out every
    /// operation whose deadline has passed.
    pub(super) fn fire_timers(&mut self) {
        let now = self.clock.now().mono;
        // Steps file no deadline that has already passed (each is an
        // operation timeout ahead, at most its term's end, which a step
        // never sends past); were one to, the next turn takes it.
        let due = self.schedule.take_due(now);
        for d in &due {
            let mut held_back = false;
            self.step_with(d.id, |slot| {
                let Current { op, kind, sent } = slot.op.filter(|c| c.op.0 == d.op)?;
                slot.op = None;
                let error = if sent {
                    let error = StoreError::Timeout(slot.machine.timing().op_timeout);
                    slot.session.publisher.store_health(
                        kind.label(),
                        Some((error.kind().to_owned(), error.to_string())),
                    );
                    error
                } else {
                    // Never sent: the admission window had no room for it
                    // all along, so it certainly did not apply. The
                    // engine's own flow control, not a failure of the
                    // store: no health report (a warning per group of
                    // 100,000 would be a flood).
                    held_back = true;
                    StoreError::busy("held back by the engine: the store is serving all it can")
                };
                Some(kind.failed(op, error))
            });
            if held_back {
                Counters::add(&self.counters.shed, 1);
            }
        }
        self.schedule.done_with_due(due);
        // How late the most overdue wake-up fires: an engine that never
        // sleeps (its turns back to back, on a host whose CPU others take)
        // shows its lateness here, not as a late sleep.
        let mut late = Duration::ZERO;
        // At most as many pops as entries were filed before this call, so
        // that the loop ends even if steps keep filing wake-ups for an
        // instant already come (a machine asking to be woken now); what
        // is left fires next turn, which comes at once.
        let mut filed_before = self.schedule.timers.len();
        while filed_before > 0 {
            let Some(t) = self.schedule.pop_timer(now) else {
                break;
            };
            filed_before -= 1;
            late = late.max(now.saturating_since(t.at));
            let schedule = &mut self.schedule;
            let Some(slot) = self.slots.get_mut(&t.id) else {
                continue;
            };
            match slot.filed.due(&t) {
                Due::Stale => {}
                Due::Gone => slot.filed.entry_at = None,
                Due::Later(at) => {
                    schedule.refile_timer(&mut slot.filed, t, at);
                    // Its wake-up may have come too: one more pop for it,
                    // as its own entry was before entries were kept.
                    if at <= now {
                        filed_before += 1;
                    }
                }
                Due::Fire => {
                    slot.filed.scheduled = None;
                    slot.filed.entry_at = None;
                    self.step(t.id, Input::Tick);
                }
            }
        }
        if !late.is_zero() {
            self.ran_late(now, late);
        }
    }

    /// Pulls nearly-due renewals (and polls) into the batch a scheduled one
    /// is going out in.
    pub(super) fn coalesce(&mut self) {
        let now = self.clock.now().mono;
        // Early ones fill the batch the due ones go in, no more: on a store
        // that serves little per round trip, pulling every nearly-due
        // renewal into one round would make it a burst that outlasts its
        // timeout, where spread out they fit.
        let cap = self
            .admission
            .batch_cap(self.options.max_batch, self.limits.congestion());
        let writes = &self.batches.writes;
        let room = || cap.saturating_sub(writes.by_priority[Priority::Renewal.index()].len());
        if let Some(due) = self.schedule.early_renewals(&self.slots, now, room) {
            for &id in &due {
                self.step(id, Input::RenewEarly);
            }
            self.schedule.coalesced(true, due);
        }
        let reads = &self.batches.reads;
        let room = || cap.saturating_sub(reads.by_priority[Priority::Poll.index()].len());
        if let Some(due) = self.schedule.early_polls(&self.slots, now, room) {
            for &id in &due {
                self.step(id, Input::PollEarly);
            }
            self.schedule.coalesced(false, due);
        }
    }
}
