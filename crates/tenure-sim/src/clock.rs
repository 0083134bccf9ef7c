//! Simulated time: the one real (simulated) timeline, and each node's own
//! drifting, offset clocks derived from it.
//!
//! All arithmetic is integer (nanoseconds, rates in parts per billion) so a
//! seed replays bit for bit on every platform, and so that the inverse
//! ("when, in real time, does this node's clock read `m`?") is exact. The
//! invariant checker depends on that inverse: a term is valid while its
//! holder's *own* clock has not reached the deadline, and the checker must
//! know the real instant at which that stops being true.

use std::fmt;
use std::time::Duration;

use rand::Rng;
use tenure::{MonoTime, Now, WallTime};

/// Nanoseconds per second, and the denominator of clock rates.
const BILLION: i128 = 1_000_000_000;

/// Wall time at real instant zero: some day in 2023, so records look real.
const WALL_EPOCH_MS: u64 = 1_700_000_000_000;

/// An instant on the simulation's real timeline, in nanoseconds from the
/// start of a run. Only the simulator and the checker see it; nodes see their
/// own [`NodeClock`].
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SimTime(pub u64);

impl SimTime {
    /// The instant `d` after the start of the run.
    pub fn from_duration(d: Duration) -> Self {
        SimTime(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }

    /// Nanoseconds since the start of the run.
    pub fn as_nanos(self) -> u64 {
        self.0
    }

    /// Time since the start of the run.
    pub fn as_duration(self) -> Duration {
        Duration::from_nanos(self.0)
    }

    /// `self + d`, saturating.
    pub fn after(self, d: Duration) -> Self {
        SimTime(
            self.0
                .saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        )
    }

    /// `self - d`, saturating at the start of the run.
    pub fn before(self, d: Duration) -> Self {
        SimTime(
            self.0
                .saturating_sub(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        )
    }

    /// The time from `earlier` to `self`, zero if `earlier` is later.
    pub fn since(self, earlier: SimTime) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl fmt::Display for SimTime {
    /// Seconds with nanosecond precision, so a report pins an instant exactly.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{:09}s",
            self.0 / 1_000_000_000,
            self.0 % 1_000_000_000
        )
    }
}

/// Converts a fraction (such as 0.01) to parts per billion.
fn ppb(fraction: f64) -> i64 {
    // The fractions involved are below 1, so the product fits easily.
    (fraction * 1e9).round() as i64
}

/// `x · (1e9 + rate_ppb) / 1e9`, rounded towards negative infinity.
fn scale(x: i128, rate_ppb: i64) -> i128 {
    (x * (BILLION + i128::from(rate_ppb))).div_euclid(BILLION)
}

/// How a node's wall clock is kept near real time.
#[derive(Clone, Debug, PartialEq, Eq)]
struct WallModel {
    /// Wall nanoseconds at real instant zero (epoch plus this node's offset).
    origin_ns: i128,
    /// With a skew bound configured, NTP steps the wall clock back to
    /// `real + offset` every `period` nanoseconds (shifted by `phase`), so the
    /// drift accumulated between steps never exceeds a quarter of the bound.
    /// Without a bound the wall clock is never corrected.
    sync: Option<(i128, i128)>,
}

/// One node's clocks: a monotonic clock (like `CLOCK_BOOTTIME`, it keeps
/// counting through pauses and process crashes) and a wall clock, both
/// running at the node's own rate `1 + d`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeClock {
    rate_ppb: i64,
    mono_origin: u64,
    wall: WallModel,
}

impl NodeClock {
    /// A clock with rate error `rate` (a fraction, > -1) and the given
    /// origins. `wall_offset` is this node's wall-clock error at real zero.
    fn with(rate: f64, mono_origin: u64, wall_offset: Duration, negative: bool) -> Self {
        let off = i128::try_from(wall_offset.as_nanos()).unwrap_or(0);
        let off = if negative { -off } else { off };
        NodeClock {
            rate_ppb: ppb(rate),
            mono_origin,
            wall: WallModel {
                origin_ns: i128::from(WALL_EPOCH_MS) * 1_000_000 + off,
                sync: None,
            },
        }
    }

    /// A random clock for one node.
    ///
    /// * `actual_drift`: the rate error is drawn from `[-actual_drift,
    ///   +actual_drift]`; a third of the nodes sit exactly on an edge, where
    ///   the timing proof is tightest. Normally this equals the configured
    ///   bound; the checker's own test sets it far beyond to show it catches
    ///   the overlap that follows.
    /// * `configured_drift` and `skew`: with a skew bound, the wall clock
    ///   stays within `skew / 2 − 1 ms` of true time (offset within a
    ///   quarter, drift between NTP steps within a quarter, 1 ms for the
    ///   millisecond resolution of records), as
    ///   [`tenure::Config::max_clock_skew`] requires of every clock.
    ///   Without one, the wall offset is arbitrary (up to an hour either way).
    /// * `wall_offset`: with a skew bound, the offset is drawn from
    ///   `[-wall_offset, +wall_offset]` instead of a quarter of the bound:
    ///   the negative control of the skew assumption sets it beyond half the
    ///   bound.
    pub fn random(
        rng: &mut impl Rng,
        actual_drift: f64,
        configured_drift: f64,
        skew: Option<Duration>,
        wall_offset: Option<Duration>,
    ) -> Self {
        let edge = rng.gen_bool(1.0 / 3.0);
        let rate = if edge {
            if rng.gen_bool(0.5) {
                actual_drift
            } else {
                -actual_drift
            }
        } else {
            rng.gen_range(-actual_drift..=actual_drift)
        };
        // Any origin will do: monotonic instants of different nodes are
        // never compared by the machine.
        let mono_origin = rng.gen_range(0..1_000_000_000_000_000u64);
        let negative = rng.gen_bool(0.5);
        match skew {
            None => {
                let offset = Duration::from_nanos(rng.gen_range(0..3_600_000_000_000u64));
                NodeClock::with(rate, mono_origin, offset, negative)
            }
            Some(skew) => {
                let quarter = skew / 4;
                let max_off =
                    wall_offset.unwrap_or_else(|| quarter.saturating_sub(Duration::from_millis(1)));
                let offset = if rng.gen_bool(1.0 / 3.0) {
                    max_off
                } else {
                    Duration::from_nanos(
                        rng.gen_range(0..=u64::try_from(max_off.as_nanos()).unwrap_or(0)),
                    )
                };
                let mut clock = NodeClock::with(rate, mono_origin, offset, negative);
                if configured_drift > 0.0 {
                    // quarter = period · ρ  ⇒  period = quarter / ρ.
                    let period = i128::try_from(quarter.div_f64(configured_drift).as_nanos())
                        .unwrap_or(i128::MAX)
                        .max(1);
                    let phase = rng.gen_range(0..period);
                    clock.wall.sync = Some((period, phase));
                }
                clock
            }
        }
    }

    /// A clock that runs exactly at real rate with zero offsets, for tests.
    pub fn perfect() -> Self {
        NodeClock::with(0.0, 0, Duration::ZERO, false)
    }

    /// A clock with the given rate error and no offsets, for tests.
    pub fn with_rate(rate: f64) -> Self {
        NodeClock::with(rate, 0, Duration::ZERO, false)
    }

    /// The rate error `d` of this clock (it runs at `1 + d`).
    pub fn rate_error(&self) -> f64 {
        self.rate_ppb as f64 / 1e9
    }

    /// The monotonic clock reading at real instant `t`.
    pub fn mono(&self, t: SimTime) -> MonoTime {
        let ticks = scale(i128::from(t.0), self.rate_ppb);
        let ticks = u64::try_from(ticks.max(0)).unwrap_or(u64::MAX);
        MonoTime::from_nanos(self.mono_origin.saturating_add(ticks))
    }

    /// The wall clock reading at real instant `t`.
    pub fn wall(&self, t: SimTime) -> WallTime {
        let real = i128::from(t.0);
        let since_sync = match self.wall.sync {
            None => real,
            Some((period, phase)) => {
                let last = ((real + phase).div_euclid(period) * period - phase).max(0);
                real - last
            }
        };
        // wall = origin + real + drift accumulated since the last NTP step.
        let drift = scale(since_sync, self.rate_ppb) - since_sync;
        let ns = self.wall.origin_ns + real + drift;
        WallTime::from_millis(u64::try_from(ns.div_euclid(1_000_000)).unwrap_or(0))
    }

    /// Both readings at real instant `t`, as the node's machine sees them.
    pub fn now(&self, t: SimTime) -> Now {
        Now {
            mono: self.mono(t),
            wall: self.wall(t),
        }
    }

    /// The earliest real instant at which this clock reads at least `m`.
    ///
    /// A term whose deadline is `m` is valid at `t` exactly when
    /// `t < real_at(m)`.
    pub fn real_at(&self, m: MonoTime) -> SimTime {
        let Some(k) = m.as_nanos().checked_sub(self.mono_origin) else {
            return SimTime(0);
        };
        // Smallest t with floor(t · r / 1e9) >= k is ceil(k · 1e9 / r).
        let rate = BILLION + i128::from(self.rate_ppb);
        let num = i128::from(k) * BILLION;
        let t = (num + rate - 1).div_euclid(rate);
        SimTime(u64::try_from(t).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    #[test]
    fn real_at_inverts_mono_exactly() {
        let mut rng = StdRng::seed_from_u64(1);
        for _ in 0..200 {
            let c = NodeClock::random(&mut rng, 0.3, 0.01, None, None);
            for _ in 0..50 {
                let t = SimTime(rng.gen_range(0..400_000_000_000u64));
                let m = c.mono(t);
                let back = c.real_at(m);
                assert!(back <= t, "{back} > {t}");
                assert_eq!(c.mono(back), m);
                if back.0 > 0 {
                    assert!(c.mono(SimTime(back.0 - 1)) < m);
                }
            }
        }
    }

    #[test]
    fn rates_and_offsets() {
        let c = NodeClock::with_rate(-0.25);
        let ten = SimTime::from_duration(Duration::from_secs(10));
        assert_eq!(c.mono(ten).as_nanos(), 7_500_000_000);
        assert_eq!(c.wall(ten).as_millis(), WALL_EPOCH_MS + 7_500);
        assert_eq!(c.real_at(MonoTime::from_nanos(7_500_000_000)), ten);
    }

    #[test]
    fn wall_clocks_stay_within_half_the_skew_bound() {
        let mut rng = StdRng::seed_from_u64(7);
        let skew = Duration::from_millis(400);
        let half = i128::from(u64::try_from((skew / 2).as_millis()).unwrap_or(0));
        for _ in 0..100 {
            let c = NodeClock::random(&mut rng, 0.01, 0.01, Some(skew), None);
            for s in 0..600 {
                let t = SimTime::from_duration(Duration::from_millis(s * 497));
                let wall = i128::from(c.wall(t).as_millis());
                let real = i128::from(WALL_EPOCH_MS) + i128::from(t.0 / 1_000_000);
                assert!((wall - real).abs() < half, "{wall} vs {real}");
            }
        }
    }
}
