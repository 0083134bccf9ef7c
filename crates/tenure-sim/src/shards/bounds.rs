//! The convergence bounds the sharded tier checks, derived from the timing,
//! the store latency and the member task's listing schedule, the way
//! [`LivenessBounds`] derives the elector tier's.

use std::time::Duration;

use tenure::Timing;

use crate::checker::{BoundTerms, LivenessBounds};

/// How long after a membership change every shard is held again, by its
/// target, with every member's load within `⌈N/M⌉`. All are real
/// (simulated) durations.
///
/// Notation: `T` term, `ρ` drift bound, `R` retry interval, `J` retry
/// jitter, `L` the ordinary one-way latency bound, `rtt = 2L`,
/// `W = T(1 + ρ)/(1 − ρ)` (a takeover wait on the slowest clock). A local
/// duration `x` lasts at most `x / (1 − ρ)` real time.
///
/// Two terms recur:
///
/// * `list = 1.25·R/(1 − ρ) + 2·rtt`: a member lists the member records,
///   reads every shard's record, and then waits `R` plus up to `R/4` of
///   jitter before listing again, so its list requests are at most this
///   far apart;
/// * `see = list + rtt`: from a change to a member record being applied
///   to every member's roster showing it (a polling member's next list
///   goes out within `list` and its reply takes a round trip; a member
///   whose store notifies lists at once).
///
/// The library documents (`tenure::shards`, "Convergence") the crash bound
/// as `2·(T(1+ρ)/(1−ρ) + P)` with `P = R + J`; [`crash`](Self::crash) is the
/// same argument with the latencies counted, and fits inside it because
/// `1.25·R < R + J` leaves room for them (see [`documented_crash`](Self::documented_crash)).
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct ShardBounds {
    /// From a member's crash (with nothing else going wrong) to its shards
    /// held by the others:
    ///
    /// `crash = L + see + W + 1 ms + rtt + W + 2·rtt`
    ///
    /// * `L`: a renewal of its membership sent just before the crash still
    ///   applies up to one latency later;
    /// * `see`: every other member has received that final version;
    /// * `W + 1 ms`: each counts the member gone once it has seen the
    ///   record unchanged for `T(1 + ρ)` on its own clock (woken on the
    ///   timer's millisecond), and stands at once for its new targets;
    /// * `rtt + W + 2·rtt`: the new target's elector reads the shard's
    ///   record, waits it out unchanged, may find a read in flight when the
    ///   wait ends, and takes it over with a compare-and-swap.
    pub crash: Duration,
    /// From a new member's start (an id with no live lease) to its share
    /// moved to it:
    ///
    /// `join = 2·rtt + see + T + 1 ms + rtt + (R + J)/(1 − ρ) + 3·rtt`
    ///
    /// * `2·rtt`: it reads and takes its membership lease;
    /// * `see`: the others see it and give up their excess;
    /// * `T + 1 ms`: an old holder drains the shard: its work is told to
    ///   stop and the term is not renewed while it drains, so the work is
    ///   gone by the deadline, at most `T(1 − ρ)` of the holder's clock
    ///   after its last renewal was sent;
    /// * `rtt`: the old holder releases the shard;
    /// * `(R + J)/(1 − ρ) + 3·rtt`: the newcomer, standing since it became
    ///   a member, sees the release (at once where the store notifies, else
    ///   at its next poll, with a read possibly in flight) and takes it.
    pub join: Duration,
    /// From a member's graceful leave to its shards held by the others:
    ///
    /// `leave = T + 1 ms + rtt + rtt + see + 2·rtt`
    ///
    /// * `T + 1 ms`: it drains its shards (as for a join);
    /// * `rtt + rtt`: it releases them, then its membership;
    /// * `see`: the others see it gone;
    /// * `2·rtt`: the new target of each shard reads it, finds it released,
    ///   and takes it.
    pub leave: Duration,
    /// From the instant every fault has healed (every member that is to
    /// run has started) to a settled set:
    ///
    /// `settle = heal + see + max(rtt + W + 2·rtt, T + 1 ms + rtt + (R + J)/(1 − ρ) + 3·rtt) + see`
    ///
    /// * `heal` (the elector tier's [`LivenessBounds::heal`]): every member
    ///   holds its membership lease again (a restarted member takes over its
    ///   crashed incarnation's record; a member cut off re-acquires its own);
    /// * `see`: every member sees every other, and any member gone for good
    ///   has lapsed;
    /// * the larger of a takeover from a crashed holder and a drain, release
    ///   and take (as for a join): each shard moves to its target;
    /// * `see`: members that computed their targets from different views of
    ///   who held what (views are refreshed at each list) see the moves and
    ///   agree.
    pub settle: Duration,
    /// The library's documented crash bound, `2·(T(1+ρ)/(1−ρ) + R + J)`,
    /// for comparison.
    pub documented_crash: Duration,
}

impl ShardBounds {
    /// The bounds for `timing` and ordinary one-way latency up to `latency`
    /// (slow requests up to [`LivenessBounds::slow_op`], as in every tier's
    /// runs).
    pub fn new(timing: &Timing, latency: Duration) -> Self {
        let BoundTerms { rtt, poll, wait } = BoundTerms::new(timing, latency);
        let r = timing.retry_interval;
        let list = BoundTerms::stretch(timing, r + r / 4) + rtt * 2;
        let see = list + rtt;
        let tick = Duration::from_millis(1);
        let drain = timing.term + tick;
        let take_released = poll + rtt * 3;
        // Rounding of durations to nanoseconds and wall times to
        // milliseconds, and timers firing on whole milliseconds.
        let slack = Duration::from_millis(2);
        let heal = LivenessBounds::new(timing, latency, LivenessBounds::slow_op(timing)).heal;
        ShardBounds {
            crash: latency + see + wait + tick + rtt + wait + rtt * 2 + slack,
            join: rtt * 2 + see + drain + rtt + take_released + slack,
            leave: drain + rtt * 2 + see + rtt * 2 + slack,
            settle: heal + see + (rtt * 3 + wait).max(drain + rtt + take_released) + see + slack,
            documented_crash: (wait + r + timing.retry_jitter) * 2,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenure::Config;

    #[test]
    fn the_derived_crash_bound_fits_the_documented_one() {
        let timing = Config::new(Duration::from_secs(2)).validate().unwrap();
        let b = ShardBounds::new(&timing, Duration::from_millis(20));
        // 2 s term, 1 % drift: W = 2.0404 s, list = 0.6313 + 0.08 s.
        assert!(b.crash > Duration::from_millis(4_800), "{b:?}");
        assert!(b.crash < b.documented_crash, "{b:?}");
        assert!(b.leave < b.join && b.join < b.settle, "{b:?}");
    }
}
