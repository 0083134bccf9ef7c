//! When the task acts: the timer heap, operation deadlines, and the
//! coalescing that pulls nearly-due renewals and polls into one batch.

use std::cmp::Reverse;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::{Clock, MonoTime, Now};
use crate::config::Timing;
use crate::error::StoreError;
use crate::machine::{Input, OpId};

use super::batch::Priority;
use super::feed::{watch_liveness, Feed};
use super::shared::Counters;
use super::task::{Current, Task};
use super::GroupId;

/// A wake-up of one group, valid while the group's generation matches.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Timer {
    pub(super) at: MonoTime,
    pub(super) id: GroupId,
    pub(super) gen: u64,
}

/// An operation's reply deadline.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct OpDeadline {
    pub(super) at: MonoTime,
    pub(super) id: GroupId,
    pub(super) op: u64,
}

/// Moves group `id` in `index` (groups by the instant something is due
/// for them) from the instant it was filed at to `due`, or out of it.
pub(super) fn refile(
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

impl Task {
    /// Files the deadline by which the reply to a queued operation must
    /// have come.
    pub(super) fn file_deadline(&mut self, id: GroupId, op: OpId, deadline: MonoTime) {
        self.deadlines.push(Reverse(OpDeadline {
            at: deadline,
            id,
            op: op.0,
        }));
    }

    /// Files the group's next wake-up and its due renewal or poll.
    pub(super) fn reschedule(&mut self, id: GroupId, now: Now) {
        let Some(slot) = self.slots.get_mut(&id) else {
            return;
        };
        watch_liveness(slot, now);
        let wake = slot.machine.next_wake(now);
        if wake != slot.scheduled {
            slot.scheduled = wake;
            slot.gen += 1;
            if let Some(at) = wake {
                self.timers.push(Reverse(Timer {
                    at,
                    id,
                    gen: slot.gen,
                }));
            }
        }
        refile(
            &mut self.renewals,
            &mut slot.renew_key,
            slot.machine.renew_due(),
            id,
        );
        refile(
            &mut self.polls,
            &mut slot.poll_key,
            slot.machine.poll_due(),
            id,
        );
    }

    pub(super) fn next_wake(&mut self) -> Option<MonoTime> {
        // Drop stale timers from the top so the sleep is for a real one.
        while let Some(Reverse(t)) = self.timers.peek() {
            match self.slots.get(&t.id) {
                Some(slot) if slot.gen == t.gen => break,
                _ => {
                    self.timers.pop();
                }
            }
        }
        while let Some(Reverse(d)) = self.deadlines.peek() {
            match self.slots.get(&d.id) {
                Some(slot) if slot.op.is_some_and(|c| c.op.0 == d.op) => break,
                _ => {
                    self.deadlines.pop();
                }
            }
        }
        let mut wake = self.timers.peek().map(|Reverse(t)| t.at);
        if let Some(Reverse(d)) = self.deadlines.peek() {
            wake = Some(wake.map_or(d.at, |w| w.min(d.at)));
        }
        if let Feed::Off { retry_at } = self.feed {
            if !self.slots.is_empty() || self.taps.awaited() {
                wake = Some(wake.map_or(retry_at, |w| w.min(retry_at)));
            }
        }
        if let Some(t) = self.feed_check_due() {
            wake = Some(wake.map_or(t, |w| w.min(t)));
        }
        // Operations held back by a pause go out when it ends.
        let now = self.clock.now().mono;
        // A tap that fell behind is owed a resync nothing else may carry.
        if let Some(t) = self.taps.resync_due(now) {
            wake = Some(wake.map_or(t, |w| w.min(t)));
        }
        if let Some(t) = self
            .admission
            .paused_until(now)
            .filter(|_| self.deferred_waiting())
        {
            wake = Some(wake.map_or(t, |w| w.min(t)));
        }
        wake
    }

    /// Drops the heaps' stale entries in one pass once they outnumber the
    /// live ones (a group has at most one live wake-up and one live
    /// deadline): each renewal leaves two or three behind, and popping
    /// them one by one as they come due (a sift through a heap of hundreds
    /// of thousands each) cost an eighth of the engine's time at 100,000
    /// groups. A stale entry never becomes live again (generations and
    /// operation ids only rise), so what fires, and when, is unchanged.
    pub(super) fn compact_heaps(&mut self) {
        let bound = self.slots.len().saturating_mul(2).saturating_add(1024);
        let slots = &self.slots;
        if self.timers.len() > bound {
            self.timers
                .retain(|Reverse(t)| slots.get(&t.id).is_some_and(|s| s.gen == t.gen));
        }
        if self.deadlines.len() > bound {
            self.deadlines.retain(|Reverse(d)| {
                slots
                    .get(&d.id)
                    .is_some_and(|s| s.op.is_some_and(|c| c.op.0 == d.op))
            });
        }
    }

    /// Whether acquisitions or polls wait in the queues.
    pub(super) fn deferred_waiting(&self) -> bool {
        Priority::ALL.iter().filter(|p| p.deferrable()).any(|p| {
            !self.reads.by_priority[p.index()].is_empty()
                || !self.writes.by_priority[p.index()].is_empty()
        })
    }

    /// Ticks every group whose wake-up has come, and times out every
    /// operation whose deadline has passed.
    pub(super) fn fire_timers(&mut self) {
        let now = self.clock.now().mono;
        while let Some(Reverse(d)) = self.deadlines.peek().copied() {
            if d.at > now {
                break;
            }
            self.deadlines.pop();
            let Some(slot) = self.slots.get_mut(&d.id) else {
                continue;
            };
            let Some(Current { op, kind, sent }) = slot.op.filter(|c| c.op.0 == d.op) else {
                continue;
            };
            slot.op = None;
            let error = if sent {
                let error = StoreError::Timeout(slot.machine.timing().op_timeout);
                slot.session.publisher.store_health(
                    kind.label(),
                    Some((error.kind().to_owned(), error.to_string())),
                );
                error
            } else {
                // Never sent: the admission window had no room for it all
                // along, so it certainly did not apply. The engine's own
                // flow control, not a failure of the store: no health
                // report (a warning per group of 100,000 would be a flood).
                Counters::add(&self.counters.shed, 1);
                StoreError::busy("held back by the engine: the store is serving all it can")
            };
            let input = kind.failed(op, error);
            self.step(d.id, input);
        }
        // How late the most overdue wake-up fires: an engine that never
        // sleeps (its turns back to back, on a host whose CPU others take)
        // shows its lateness here, not as a late sleep.
        let mut late = Duration::ZERO;
        while let Some(Reverse(t)) = self.timers.peek().copied() {
            if t.at > now {
                break;
            }
            self.timers.pop();
            late = late.max(now.saturating_since(t.at));
            if self.slots.get(&t.id).is_some_and(|s| s.gen == t.gen) {
                if let Some(slot) = self.slots.get_mut(&t.id) {
                    slot.scheduled = None;
                }
                self.step(t.id, Input::Tick);
            }
        }
        if !late.is_zero() {
            self.note_lag(now, late);
            let margin = self.holding().then_some(self.renew_margin);
            self.admission
                .late_wake(now, late, margin, self.op_timeout / 4);
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
            .batch_cap(self.options.max_batch, self.op_timeout / 4);
        if std::mem::take(&mut self.renewing) {
            let room = cap.saturating_sub(self.writes.of(Priority::Renewal).len());
            let due = self.nearly_due(&self.renewals, now, self.renew_window, room, |t| {
                t.renew_interval
            });
            for id in due {
                self.step(id, Input::RenewEarly);
            }
            self.renewing = false;
        }
        if std::mem::take(&mut self.polling) {
            let room = cap.saturating_sub(self.reads.of(Priority::Poll).len());
            let due = self.nearly_due(&self.polls, now, self.poll_window, room, |t| {
                t.retry_interval
            });
            for id in due {
                self.step(id, Input::PollEarly);
            }
            self.polling = false;
        }
    }

    /// The first `room` groups of `wakes` due within `window` of `now`,
    /// each no earlier than half its own `interval` (so that coalescing
    /// never more than halves a group's renewal or poll period). It stops
    /// at `room` (and walks nothing when it is 0): past capacity the window
    /// holds most groups, and a batch already full must not cost a walk
    /// over all of them each turn.
    pub(super) fn nearly_due(
        &self,
        wakes: &BTreeSet<(MonoTime, GroupId)>,
        now: MonoTime,
        window: Duration,
        room: usize,
        interval: fn(&Timing) -> Duration,
    ) -> Vec<GroupId> {
        wakes
            .iter()
            .take_while(|(t, _)| *t <= now + window)
            .filter(|(t, id)| {
                // A group retrying after a failure keeps its own schedule:
                // pulled in, it would be batched with the healthy ones.
                self.slots.get(id).is_some_and(|s| {
                    s.isolate == usize::MAX && *t <= now + interval(s.machine.timing()) / 2
                })
            })
            .map(|(_, id)| *id)
            .take(room)
            .collect()
    }
}
