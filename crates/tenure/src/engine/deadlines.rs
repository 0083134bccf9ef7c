//! The reply deadlines of the operations in flight, earliest first.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use crate::clock::MonoTime;

use super::GroupId;

/// An operation's reply deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct OpDeadline {
    pub(super) at: MonoTime,
    pub(super) id: GroupId,
    pub(super) op: u64,
}

/// Reply deadlines, taken out earliest first (by instant, then group, then
/// operation: the order one heap of them gives).
///
/// Nearly every deadline is filed no earlier than the one filed before
/// it: an operation's deadline is the instant it is queued plus its
/// group's timeout, and the groups of one engine mostly share a timeout.
/// Those go in a queue, filed and taken in constant time; at 100,000
/// groups a heap of all of them cost a sift through tens of thousands of
/// entries for every operation answered. A deadline filed earlier than
/// the queue's last (a group with a shorter timeout, a renewal bounded by
/// its term's end) goes in a heap beside it; the earliest of the two
/// fronts comes out first.
///
/// Within one instant the queue keeps the order of filing, not of group:
/// [`take_due`](Deadlines::take_due) sorts what it takes, so that what
/// fires, and in what order, is what a single heap would give.
#[derive(Default)]
pub(super) struct Deadlines {
    in_order: VecDeque<OpDeadline>,
    out_of_order: BinaryHeap<Reverse<OpDeadline>>,
}

impl Deadlines {
    /// Files deadline `d`.
    pub(super) fn file(&mut self, d: OpDeadline) {
        if self.in_order.back().is_none_or(|last| last.at <= d.at) {
            self.in_order.push_back(d);
        } else {
            self.out_of_order.push(Reverse(d));
        }
    }

    /// How many are filed, live or stale.
    pub(super) fn len(&self) -> usize {
        self.in_order.len() + self.out_of_order.len()
    }

    /// The earliest instant of a front entry: the queue's or the heap's.
    /// Within one instant the queue's front may not be the least entry;
    /// the instant is what a wake-up needs.
    pub(super) fn first_at(&self) -> Option<MonoTime> {
        let queued = self.in_order.front().map(|d| d.at);
        let heaped = self.out_of_order.peek().map(|Reverse(d)| d.at);
        match (queued, heaped) {
            (Some(q), Some(h)) => Some(q.min(h)),
            (q, h) => q.or(h),
        }
    }

    /// Drops entries from both fronts while `stale` says they are: the
    /// next deadline is then a live one (or a stale one behind a live).
    pub(super) fn drop_stale(&mut self, stale: impl Fn(&OpDeadline) -> bool) {
        while self.in_order.front().is_some_and(&stale) {
            self.in_order.pop_front();
        }
        while self.out_of_order.peek().is_some_and(|Reverse(d)| stale(d)) {
            self.out_of_order.pop();
        }
    }

    /// Moves every deadline that has passed at `now`, live or stale, into
    /// `due`, sorted earliest first.
    pub(super) fn take_due(&mut self, now: MonoTime, due: &mut Vec<OpDeadline>) {
        while let Some(d) = self.in_order.front().filter(|d| d.at <= now) {
            due.push(*d);
            self.in_order.pop_front();
        }
        while let Some(Reverse(d)) = self.out_of_order.peek().filter(|Reverse(d)| d.at <= now) {
            due.push(*d);
            self.out_of_order.pop();
        }
        // Unique (a group's operations have distinct ids): the order is
        // total, so an unstable sort is deterministic.
        due.sort_unstable();
    }

    /// Keeps only the entries `live` says are.
    pub(super) fn retain(&mut self, live: impl Fn(&OpDeadline) -> bool) {
        self.in_order.retain(&live);
        self.out_of_order.retain(|Reverse(d)| live(d));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64, id: u64, op: u64) -> OpDeadline {
        OpDeadline {
            at: MonoTime::from_nanos(ms * 1_000_000),
            id,
            op,
        }
    }

    /// Whatever the order of filing, deadlines come out as from one heap.
    #[test]
    fn deadlines_come_out_as_one_heap_gives_them() {
        let filed = [
            at(10, 5, 1),
            at(10, 2, 7),
            at(12, 9, 1),
            at(11, 1, 3), // earlier than the last filed: the heap
            at(10, 3, 2), // the same
            at(12, 4, 4),
            at(30, 1, 4),
        ];
        let mut deadlines = Deadlines::default();
        let mut heap = BinaryHeap::new();
        for d in filed {
            deadlines.file(d);
            heap.push(Reverse(d));
        }
        assert_eq!(deadlines.len(), filed.len());
        assert_eq!(deadlines.first_at(), Some(at(10, 0, 0).at));
        let mut due = Vec::new();
        deadlines.take_due(at(12, 0, 0).at, &mut due);
        let mut expected = Vec::new();
        while let Some(Reverse(d)) = heap
            .peek()
            .copied()
            .filter(|Reverse(d)| d.at <= at(12, 0, 0).at)
        {
            heap.pop();
            expected.push(d);
        }
        assert_eq!(due, expected);
        assert_eq!(deadlines.len(), 1);
        assert_eq!(deadlines.first_at(), Some(at(30, 0, 0).at));
    }

    #[test]
    fn stale_entries_are_dropped_from_both_fronts_only() {
        let mut deadlines = Deadlines::default();
        for d in [at(10, 1, 1), at(20, 2, 1), at(15, 3, 1), at(16, 4, 1)] {
            deadlines.file(d);
        }
        // Group 1 and 3 answered; 2 and 4 still wait.
        let stale = |d: &OpDeadline| d.id == 1 || d.id == 3;
        deadlines.drop_stale(stale);
        assert_eq!(deadlines.first_at(), Some(at(16, 0, 0).at));
        deadlines.retain(|d| d.id == 2);
        assert_eq!(deadlines.len(), 1);
        assert_eq!(deadlines.first_at(), Some(at(20, 0, 0).at));
    }
}
