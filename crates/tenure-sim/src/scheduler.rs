//! The event queue: events ordered by the real instant they happen at, and
//! among events at the same instant by the order they were scheduled, so a
//! run is a deterministic function of its seed.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::clock::SimTime;

struct Scheduled<E> {
    at: SimTime,
    seq: u64,
    ev: E,
}

impl<E> PartialEq for Scheduled<E> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl<E> Eq for Scheduled<E> {}

impl<E> PartialOrd for Scheduled<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<E> Ord for Scheduled<E> {
    /// Reversed, so the max-heap pops the earliest (instant, sequence) first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// A queue of events of type `E` on the simulated timeline.
pub(crate) struct Queue<E> {
    heap: BinaryHeap<Scheduled<E>>,
    seq: u64,
}

impl<E> Queue<E> {
    pub(crate) fn new() -> Self {
        Queue {
            heap: BinaryHeap::new(),
            seq: 0,
        }
    }

    /// Schedules `ev` at `at`, after everything already scheduled there.
    pub(crate) fn push(&mut self, at: SimTime, ev: E) {
        self.seq += 1;
        self.heap.push(Scheduled {
            at,
            seq: self.seq,
            ev,
        });
    }

    /// The earliest event and its instant.
    pub(crate) fn pop(&mut self) -> Option<(SimTime, E)> {
        self.heap.pop().map(|s| (s.at, s.ev))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_first_then_in_scheduling_order() {
        let mut q = Queue::new();
        q.push(SimTime(5), "b");
        q.push(SimTime(1), "a");
        q.push(SimTime(5), "c");
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(
            order,
            vec![(SimTime(1), "a"), (SimTime(5), "b"), (SimTime(5), "c")]
        );
    }
}
