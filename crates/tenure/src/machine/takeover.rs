//! The takeover rule: when an observed record may be taken (the monotonic
//! wait, or earlier by the wall clock within the skew bound), when to wake
//! for it, and the token a new term gets.

use std::time::Duration;

use super::Machine;
use crate::clock::{MonoTime, Now};
use crate::record::LeaseRecord;

impl Machine {
    /// The token a new term would get: above the record's and every token
    /// this node has seen. `None` once that cannot rise any more.
    pub(super) fn next_token(&self) -> Option<u64> {
        let stored = self
            .observed
            .as_ref()
            .and_then(|o| o.current.as_ref())
            .map_or(0, |v| v.record.token);
        stored.max(self.max_token).checked_add(1)
    }

    /// The instant from which the observed record may be taken over by the
    /// monotonic rule; `None` without a usable observation.
    fn free_at(&self) -> Option<MonoTime> {
        let obs = self.observed.as_ref()?;
        let Some(v) = &obs.current else {
            // Nothing stored. If a held record was seen before, the store
            // lost it: its holder may still be working, so wait it out.
            return Some(match self.last_held_term {
                Some(term) => obs.since + self.timing.takeover_wait(term),
                None => obs.since,
            });
        };
        let rec = &v.record;
        if rec.holder.is_none() {
            return Some(match rec.transfer_to() {
                // Reserved for another candidate: waited out like a held
                // record, then anyone may take it.
                Some(to) if to != self.me.id => obs.since + self.timing.takeover_wait(rec.term),
                _ => obs.since,
            });
        }
        if self.is_mine(rec) && self.stand.own_write_failures <= 1 {
            return Some(obs.since);
        }
        Some(obs.since + self.timing.takeover_wait(rec.term))
    }

    /// The observed held record, if the optional early takeover by the wall
    /// clock applies to it.
    fn wall_candidate(&self) -> Option<&LeaseRecord> {
        self.timing.max_clock_skew?;
        let v = self.observed.as_ref()?.current.as_ref()?;
        v.record.holder.as_ref()?;
        Some(&v.record)
    }

    /// Whether the record's wall-clock expiry lies more than the skew bound
    /// in the past (the optional early takeover; see [`crate::config`]).
    fn wall_expired(&self, now: Now) -> bool {
        match (self.wall_candidate(), self.timing.max_clock_skew) {
            (Some(rec), Some(skew)) => now.wall > rec.expires_at + skew,
            _ => false,
        }
    }

    /// When to wake for a takeover: the monotonic rule, or earlier, the
    /// first whole millisecond after the wall-clock expiry plus the skew
    /// bound, as the wall clock advances with the monotonic one; `now` once
    /// the wall clock is past it. (A wake "one millisecond on" from there
    /// would recede each time it is asked for, so a caller that asks again
    /// before ticking would never take over by the wall clock.)
    pub(super) fn takeover_wake(&self, now: Now) -> Option<MonoTime> {
        let rule = self.free_at()?;
        if self.wall_expired(now) {
            return Some(now.mono);
        }
        let wall = self
            .wall_candidate()
            .zip(self.timing.max_clock_skew)
            .map(|(rec, skew)| {
                let wall_ok = (rec.expires_at + skew).as_millis();
                let wait_ms = wall_ok.saturating_sub(now.wall.as_millis());
                now.mono + Duration::from_millis(wait_ms) + Duration::from_millis(1)
            });
        Some(wall.map_or(rule, |w| w.min(rule)))
    }

    /// Whether the observed record may be taken over right now.
    pub(super) fn may_take(&self, now: Now) -> bool {
        self.free_at().is_some_and(|t| now.mono >= t) || self.wall_expired(now)
    }
}
