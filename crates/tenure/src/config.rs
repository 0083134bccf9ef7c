//! The timing model: what a user configures, the rules it must satisfy, and
//! the bounds it implies.
//!
//! # Why the old leader always stops first
//!
//! Let ρ be the drift bound: every candidate's monotonic clock runs at a rate
//! within `[1 − ρ, 1 + ρ]` of real time. Let `T` be the term.
//!
//! * The leader anchors its deadline at the instant `s` it **sent** the write
//!   that succeeded (the write cannot have been applied before it was sent),
//!   and counts `T·(1 − ρ)` on its own clock. In real time its deadline falls
//!   no later than `s + T·(1 − ρ)/(1 − ρ) = s + T`.
//! * A challenger may take over only after it has **observed** that record
//!   unchanged for `T·(1 + ρ)` on its own clock, counted from the instant it
//!   received the read that first showed it (which is after the write was
//!   applied, hence after `s`). In real time that is no earlier than
//!   `s + T·(1 + ρ)/(1 + ρ) = s + T`.
//! * The takeover is a compare-and-swap on the store's version of the record
//!   the challenger observed, so it fails if the leader renewed meanwhile.
//!
//! So the leader's deadline never falls after a challenger's takeover. On top
//! of that, the leader tells its work to stop [`Timing::stop_grace`] before its
//! deadline, so the work has stopped at least that long before anyone else
//! can start. Wall clocks play no part, unless [`Config::max_clock_skew`] is
//! set.
//!
//! # Many groups, batched
//!
//! An [`Engine`](crate::Engine) runs many groups' machines and sends their
//! store operations in batches. The argument above holds operation by
//! operation, because of two facts about batching:
//!
//! * A machine anchors a write at the instant it *emitted* it. The batch
//!   carrying it is sent at or after that instant (it may wait for a free
//!   batch slot), so the anchor is never after the real send, and
//!   `s + T` still bounds the leader's deadline in real time.
//! * The engine only ever moves a renewal *earlier*
//!   ([`Input::RenewEarly`](crate::machine::Input::RenewEarly)), never
//!   later: an earlier send anchors an earlier deadline, and a renewal never
//!   shortens a deadline already earned. Every leader therefore still
//!   renews at least every `renew_interval`, and the rule
//!   `renew_interval + stop_grace < T·(1 − ρ)` keeps its meaning.
//!
//! A batch's reply deadline is each operation's own (emission plus the
//! operation timeout); an operation waiting in the queue times out as if
//! it had been sent. The challenger's side is unchanged: it anchors at the
//! receipt of a read's reply or of a change-feed event, both after the
//! write they show was applied.
//!
//! # The optional early takeover by the wall clock
//!
//! With a skew bound `S` set, a challenger may also take over as soon as its
//! wall clock reads more than `S` past the record's wall-clock expiry
//! (`expires_at = renewed_at + T`, both written by the holder from its own
//! wall clock, rounded so that the expiry is never early), instead of
//! waiting `T·(1 + ρ)` from its first sight: a freshly started process need
//! not wait a whole term after a crash.
//!
//! This is safe only under a stronger assumption than the rest of the
//! design: **at every instant, every candidate's wall clock is within `S/2`
//! of true time**, steps included. It is not enough that any two clocks
//! agree to within `S`: if a shared time source steps every clock forward by
//! more than `S` while a term runs, the clocks still agree with each other,
//! yet a challenger reads the holder's expiry as past before the holder's
//! deadline. Under the assumption: the holder, sending at real time `s`,
//! reads a wall time of at least `s − S/2`, so `expires_at ≥
//! s − S/2 + T`; the challenger at real time `t` reads at most `t + S/2`,
//! and takes over only when that exceeds `expires_at + S`, so `t + S/2 >
//! s − S/2 + T + S`, i.e. `t > s + T`, after the holder's deadline. The
//! rule `T ≥ 2·S` that [`Config::validate`] enforces (vimeo's, the right
//! way round) is not what makes this safe; the assumption is, and it is the
//! operator's to keep: bound the
//! offset of every host's clock from true time (NTP with step limits, or
//! chrony's `maxslewrate`), not merely their agreement.
//!
//! The clock that counts is `CLOCK_BOOTTIME`, which keeps running while a
//! machine is suspended, so a process paused or suspended past its deadline
//! finds its term over when it wakes.
//!
//! # What was model-checked
//!
//! The argument above is checked on the real
//! [`Machine`](crate::machine::Machine), not on a restatement of it, by
//! `crates/tenure-model`: a [stateright](https://docs.rs/stateright) model of
//! 2 or 3 machines and one linearizable register holding the encoded
//! record, which explores *every* schedule within its bounds:
//!
//! * `T` = 8 s, `ρ` = 1/8 (exact in binary, so the clocks' arithmetic is
//!   exact), zero jitter; each node's monotonic clock runs at exactly
//!   `1 − ρ` or `1 + ρ`, every assignment of the two being an initial
//!   state. The argument is scale-free in `ρ`; the extreme rates are where
//!   it is tight.
//! * Requests and replies are separate events: each takes 0 or 100 ms (the
//!   latency bound), in any order with every other event; while faults are
//!   allowed (the first 0.3–1 s), a request or reply may be lost or made
//!   slow (applying after its sender timed out), a node may crash (and
//!   restart as a new incarnation) or pause across its deadlines, and a
//!   leader may resign or shut down. A node's timers fire when its own
//!   clock reaches them; a crashed or paused node's clock keeps running.
//! * Safety, in every explored state: at most one term valid at the real
//!   instant (judged on the holder's own clock, a crashed holder's term
//!   included); tokens of successive terms strictly rise and are never
//!   lowered in the store; a running leader is told to stop by
//!   `deadline − stop_grace` and its work never gets past the deadline; no
//!   tick at a due wake-up changes nothing (a busy wait).
//! * Liveness, bounded: once the faults stop, a term is valid within the
//!   heal bound `max(L, O/(1−ρ)) + (R+J)/(1−ρ) + T(1+ρ)/(1−ρ) + 4·rtt`;
//!   after a graceful release (with no fault for a settling time before
//!   and none after), a term starts within `(R+J)/(1−ρ) + 3·rtt`, the
//!   waiting node's after a shutdown.
//! * With the wall-clock takeover (`S` = 2 s): every wall clock exactly
//!   `S/2` ahead of or behind true time.
//!
//! No violation was found in the runs that finished (their state counts
//! and times are in `docs/benchmarks.md`, "Model checking"; smaller bounds
//! run in CI), each over every schedule of:
//!
//! * 2 nodes, no fault, or one fault of any kind (a lost or slow request
//!   or reply, a crash, a pause) in the first second, up to the heal bound
//!   past the faults (15.7 s), so the liveness bound is judged too;
//! * the same with the wall-clock takeover and one crash;
//! * 2 nodes, one graceful release (resign or shut down) in the first
//!   0.5 s, up to 6 s: the release bound is judged, the heal bound not;
//! * 3 nodes without faults up to 6 s (one election and its renewals).
//!
//! The same model does find overlaps when one assumption is broken: clock
//! rates at twice the bound, deadlines anchored at the reply's receipt,
//! wall clocks a whole `S` off. Too big to finish on the 2-core build
//! machine (each stopped at 10–15 GB of memory or at its time limit): two
//! faults (even two crashes), 3 nodes up to the heal bound, releases up to
//! the heal bound; 3 nodes with faults were not tried. Not covered either:
//! more than 3 nodes, change feeds, transfers, liveness timeouts, horizons
//! beyond about two terms. The simulation (`tenure-sim`) samples those.

use std::fmt;
use std::time::Duration;

use crate::error::ConfigError;

/// The longest term [`Config::validate`] accepts: one week. Longer terms
/// would push deadline arithmetic toward overflow and are locks, not leases.
pub const MAX_TERM: Duration = Duration::from_secs(7 * 24 * 3600);

/// The shortest term [`Config::validate`] accepts: 100 ms.
///
/// The timing model is scale-free, but what it is run on is not. At this
/// term the derived settings are an operation timeout of 25 ms (a few
/// round trips on a LAN to a store that commits synchronously, with
/// room), a renewal every 33 ms and a stop grace of 10 ms (ten ticks of the
/// 1 ms timer a tokio runtime sleeps on, so the work is told to stop a
/// measurable time before the deadline). Below it, one scheduler stall or
/// one slow fsync is longer than those margins, and every term ends in a
/// step-down: a 1 ms term took 881 tokens in 3 s, killing its work each
/// time. Like Kubernetes' leases (whole seconds), most deployments want
/// seconds; a term under a second suits only a store next to its
/// candidates.
pub const MIN_TERM: Duration = Duration::from_millis(100);

/// The timing settings of an election. Unset settings derive from the term.
///
/// ```
/// use std::time::Duration;
/// let timing = tenure::Config::new(Duration::from_secs(10)).validate()?;
/// let bounds = timing.bounds();
/// assert!(bounds.crash_failover < Duration::from_secs(15));
/// println!("{bounds}");
/// # Ok::<(), tenure::ConfigError>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// How long one successful write keeps a lease (default 10 s).
    pub term: Duration,
    /// How often the leader renews (default term / 3).
    pub renew_interval: Option<Duration>,
    /// How often a waiting candidate re-reads the record when the store
    /// cannot notify, and how long it backs off after a failure
    /// (default term / 4).
    pub retry_interval: Option<Duration>,
    /// Up to this much random extra wait is added to each retry, so that
    /// candidates do not move in lockstep (default term / 10, as vimeo's
    /// leaderelection uses).
    pub retry_jitter: Option<Duration>,
    /// Bound on how fast or slow any candidate's monotonic clock may run
    /// against real time, as a fraction (default 0.01, i.e. 1 %).
    pub drift: f64,
    /// Optional wall-clock bound enabling the early takeover: a challenger
    /// may take over as soon as the record's wall-clock expiry is more than
    /// this bound in the past. Safe only if **every candidate's wall clock
    /// stays within half this bound of true time at every instant** (steps
    /// included; two clocks that merely agree with each other are not
    /// enough). See [the argument](crate::config#the-optional-early-takeover-by-the-wall-clock).
    pub max_clock_skew: Option<Duration>,
    /// How long before its deadline the leader tells its work to stop when
    /// renewals keep failing (default term / 10).
    pub stop_grace: Option<Duration>,
    /// How long one store operation may take before it counts as failed
    /// (default term / 4).
    pub op_timeout: Option<Duration>,
    /// If set, a leader whose application has not called
    /// [`pulse`](crate::Elector::pulse) for this long resigns, and a
    /// candidate in that state does not stand (NELI's `Pulse`).
    pub liveness_timeout: Option<Duration>,
}

impl Default for Config {
    fn default() -> Self {
        Config::new(Duration::from_secs(10))
    }
}

impl Config {
    /// A configuration with the given term and every other setting derived.
    pub fn new(term: Duration) -> Self {
        Config {
            term,
            renew_interval: None,
            retry_interval: None,
            retry_jitter: None,
            drift: 0.01,
            max_clock_skew: None,
            stop_grace: None,
            op_timeout: None,
            liveness_timeout: None,
        }
    }

    /// Checks every rule and resolves the derived settings.
    ///
    /// The rules, each reported with its values when broken:
    /// * the term is at least [`MIN_TERM`] (100 ms), reported as
    ///   [`ConfigError::TermTooShort`];
    /// * the drift bound is in `[0, 0.5)`;
    /// * renew interval and stop grace are positive;
    /// * the leader renews and still has time to stop its work before its
    ///   deadline: `renew_interval + stop_grace < term · (1 − drift)`;
    /// * retry interval and operation timeout are positive;
    /// * with a skew bound: `term >= 2 · max_clock_skew`;
    /// * a liveness timeout, if any, is positive.
    pub fn validate(&self) -> Result<Timing, ConfigError> {
        let term = self.term;
        if term.is_zero() {
            return Err(ConfigError::timing(
                "term is zero: give a positive term such as 10s",
            ));
        }
        if term < MIN_TERM {
            return Err(ConfigError::TermTooShort {
                term,
                min: MIN_TERM,
            });
        }
        if term > MAX_TERM {
            return Err(ConfigError::timing(format!(
                "term {term:?} is longer than the longest supported ({MAX_TERM:?}): a lease that long is a lock; use a shorter term"
            )));
        }
        if !(self.drift.is_finite() && (0.0..0.5).contains(&self.drift)) {
            return Err(ConfigError::timing(format!(
                "drift bound {} is outside [0, 0.5): use a fraction such as 0.01 for 1 %",
                self.drift
            )));
        }
        // Every setting is capped like the term, so no sum or product below
        // can overflow and no deadline runs off the end of the clock.
        let capped = |name: &str, value: Option<Duration>| -> Result<(), ConfigError> {
            match value {
                Some(d) if d > MAX_TERM => Err(ConfigError::timing(format!(
                    "{name} {d:?} is longer than the longest supported ({MAX_TERM:?}): leave it unset to derive it from the term"
                ))),
                _ => Ok(()),
            }
        };
        capped("renew interval", self.renew_interval)?;
        capped("retry interval", self.retry_interval)?;
        capped("retry jitter", self.retry_jitter)?;
        capped("stop grace", self.stop_grace)?;
        capped("operation timeout", self.op_timeout)?;
        capped("clock-skew bound", self.max_clock_skew)?;
        capped("liveness timeout", self.liveness_timeout)?;
        let renew_interval = self.renew_interval.unwrap_or(term / 3);
        let retry_interval = self.retry_interval.unwrap_or(term / 4);
        let retry_jitter = self.retry_jitter.unwrap_or(term / 10);
        let stop_grace = self.stop_grace.unwrap_or(term / 10);
        let op_timeout = self.op_timeout.unwrap_or(term / 4);
        let leader_validity = term.mul_f64(1.0 - self.drift);
        // The rules in the order the docs above list them, the first broken
        // one named: a config with two mistakes always reports the same.
        first_zero(&[
            (
                renew_interval,
                "renew interval is zero: leave it unset (term / 3) or give a positive value",
            ),
            (
                stop_grace,
                "stop grace is zero: the work would be told to stop only at the deadline, with no margin; leave it unset (term / 10) or give a positive value",
            ),
        ])?;
        let renew_and_stop = renew_interval.checked_add(stop_grace);
        if renew_and_stop.is_none_or(|d| d >= leader_validity) {
            return Err(ConfigError::timing(format!(
                "renew interval ({renew_interval:?}) + stop grace ({stop_grace:?}) must be shorter than term × (1 − drift) ({leader_validity:?}), \
                 or the leader would have to stop before its first renewal: shorten the renew interval or lengthen the term"
            )));
        }
        first_zero(&[
            (
                retry_interval,
                "retry interval is zero: leave it unset (term / 4) or give a positive value",
            ),
            (
                op_timeout,
                "operation timeout is zero: leave it unset (term / 4) or give a positive value",
            ),
        ])?;
        if let Some(skew) = self.max_clock_skew {
            if skew.checked_mul(2).is_none_or(|twice| term < twice) {
                return Err(ConfigError::timing(format!(
                    "term ({term:?}) must be at least twice the clock-skew bound ({skew:?}): lengthen the term or lower the bound"
                )));
            }
        }
        if self.liveness_timeout.is_some_and(|d| d.is_zero()) {
            return Err(ConfigError::timing(
                "liveness timeout is zero: leave it unset or give a positive value",
            ));
        }
        Ok(Timing {
            term,
            renew_interval,
            retry_interval,
            retry_jitter,
            drift: self.drift,
            max_clock_skew: self.max_clock_skew,
            stop_grace,
            op_timeout,
            liveness_timeout: self.liveness_timeout,
            leader_validity,
        })
    }
}

/// A validated configuration with every setting resolved.
#[derive(Clone, Debug, PartialEq)]
pub struct Timing {
    /// See [`Config::term`].
    pub term: Duration,
    /// See [`Config::renew_interval`].
    pub renew_interval: Duration,
    /// See [`Config::retry_interval`].
    pub retry_interval: Duration,
    /// See [`Config::retry_jitter`].
    pub retry_jitter: Duration,
    /// See [`Config::drift`].
    pub drift: f64,
    /// See [`Config::max_clock_skew`].
    pub max_clock_skew: Option<Duration>,
    /// See [`Config::stop_grace`].
    pub stop_grace: Duration,
    /// See [`Config::op_timeout`].
    pub op_timeout: Duration,
    /// See [`Config::liveness_timeout`].
    pub liveness_timeout: Option<Duration>,
    /// `term · (1 − drift)`: how long after sending a successful write the
    /// leader's term stays valid on its own clock.
    pub leader_validity: Duration,
}

/// How long a record of term `term` must be seen unchanged before its
/// holder has stopped, whatever its clock: `term · (1 + drift)`. The one
/// rule of challengers ([`Timing::takeover_wait`]), observers and a sharded
/// set's roster; the term is capped at [`MAX_TERM`] (what a decoded record
/// holds at most), so that no term overflows it.
pub(crate) fn takeover_wait(term: Duration, drift: f64) -> Duration {
    // A drift a validated configuration cannot hold (`Timing`'s fields are
    // public) is read as the largest bound rather than panicking.
    let drift = if (0.0..0.5).contains(&drift) {
        drift
    } else {
        0.5
    };
    term.min(MAX_TERM).mul_f64(1.0 + drift)
}

impl Timing {
    /// How long a challenger must observe a record of term `term` unchanged
    /// before it may take over: `term · (1 + drift)`, the term capped at
    /// [`MAX_TERM`].
    pub fn takeover_wait(&self, term: Duration) -> Duration {
        takeover_wait(term, self.drift)
    }

    /// The bounds this configuration promises.
    pub fn bounds(&self) -> Bounds {
        let rho = self.drift;
        let poll = self.retry_interval + self.retry_jitter;
        Bounds {
            leader_validity: self.leader_validity,
            takeover_wait: self.takeover_wait(self.term),
            crash_failover: self.term.mul_f64((1.0 + rho) / (1.0 - rho)) + poll,
            graceful_failover_polling: poll,
            safety_margin: self.stop_grace.mul_f64(1.0 / (1.0 - rho)),
        }
    }
}

/// What a [`Timing`] promises. Store round trips come on top of each figure.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bounds {
    /// How long one successful write keeps the leader valid on its clock.
    pub leader_validity: Duration,
    /// How long a challenger waits, on its clock, with the record unchanged.
    pub takeover_wait: Duration,
    /// Worst case, in real time, from a leader's crash to the next term:
    /// `term·(1+ρ)/(1−ρ) + retry interval + jitter`.
    pub crash_failover: Duration,
    /// Worst case from a graceful release to the next term on a store that
    /// cannot notify (one poll); on a store that notifies it is one round
    /// trip.
    pub graceful_failover_polling: Duration,
    /// Least real time between a failing leader telling its work to stop and
    /// the earliest instant any other candidate can take over.
    pub safety_margin: Duration,
}

impl fmt::Display for Bounds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "leader validity per renewal : {:.3?}",
            self.leader_validity
        )?;
        writeln!(
            f,
            "challenger waits unchanged  : {:.3?}",
            self.takeover_wait
        )?;
        writeln!(
            f,
            "failover after a crash      : <= {:.3?}",
            self.crash_failover
        )?;
        writeln!(
            f,
            "failover after a release    : <= {:.3?} polling, one round trip with notifications",
            self.graceful_failover_polling
        )?;
        write!(
            f,
            "leader safety margin        : >= {:.3?}",
            self.safety_margin
        )
    }
}

/// `Err` naming the first of `settings` that is zero, with its text.
fn first_zero(settings: &[(Duration, &str)]) -> Result<(), ConfigError> {
    match settings.iter().find(|(value, _)| value.is_zero()) {
        Some((_, why)) => Err(ConfigError::timing(*why)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    #[test]
    fn defaults_derive_from_the_term() {
        let t = Config::default().validate().unwrap();
        assert_eq!(t.term, secs(10.0));
        assert_eq!(t.renew_interval, Duration::from_secs(10) / 3);
        assert_eq!(t.retry_interval, secs(2.5));
        assert_eq!(t.retry_jitter, secs(1.0));
        assert_eq!(t.stop_grace, secs(1.0));
        let b = t.bounds();
        assert_eq!(b.leader_validity, secs(9.9));
        assert_eq!(b.takeover_wait, secs(10.1));
        // 10 × 1.01 / 0.99 + 2.5 + 1 = 13.702…
        assert!(
            (b.crash_failover.as_secs_f64() - 13.702).abs() < 0.001,
            "{b:?}"
        );
        assert_eq!(b.graceful_failover_polling, secs(3.5));
        assert!((b.safety_margin.as_secs_f64() - 1.0101).abs() < 0.001);
    }

    #[test]
    fn rejects_impossible_timings_naming_the_rule() {
        let err = |c: Config| c.validate().unwrap_err().to_string();
        assert!(err(Config::new(Duration::ZERO)).contains("term is zero"));
        assert!(err(Config::new(MAX_TERM + Duration::from_secs(1))).contains("longest supported"));
        assert!(Config::new(MAX_TERM).validate().is_ok());
        assert!(Config::new(MIN_TERM).validate().is_ok());
        for short in [
            Duration::from_nanos(1),
            Duration::from_millis(1),
            Duration::from_nanos(99_999_999),
        ] {
            let e = Config::new(short).validate().unwrap_err();
            assert_eq!(
                e,
                ConfigError::TermTooShort {
                    term: short,
                    min: MIN_TERM
                }
            );
            assert!(e.to_string().contains("at least 100ms"), "{e}");
        }
        // One setting out of range at a time, and what the error must name.
        type Setting = fn(&mut Config);
        let cases: [(Setting, &str); 7] = [
            (|c| c.drift = 0.7, "drift"),
            (|c| c.renew_interval = Some(secs(9.0)), "renew interval"),
            (
                |c| c.max_clock_skew = Some(secs(6.0)),
                "at least twice the clock-skew bound",
            ),
            (
                |c| c.retry_interval = Some(Duration::ZERO),
                "retry interval",
            ),
            (|c| c.liveness_timeout = Some(Duration::ZERO), "liveness"),
            (
                |c| c.stop_grace = Some(Duration::ZERO),
                "stop grace is zero",
            ),
            (
                |c| c.op_timeout = Some(Duration::ZERO),
                "operation timeout is zero",
            ),
        ];
        // Two mistakes: the rule listed first is named, whatever the other.
        let c = Config {
            renew_interval: Some(secs(9.0)),
            retry_interval: Some(Duration::ZERO),
            op_timeout: Some(Duration::ZERO),
            ..Config::default()
        };
        let e = err(c);
        assert!(e.contains("must be shorter than term"), "{e}");
        for (set, names) in cases {
            let mut c = Config::default();
            set(&mut c);
            let e = err(c);
            assert!(e.contains(names), "{e} does not name {names}");
        }
    }

    #[test]
    fn huge_settings_are_errors_not_panics() {
        let huge = Duration::MAX;
        let settings: [fn(&mut Config, Duration); 7] = [
            |c, d| c.renew_interval = Some(d),
            |c, d| c.retry_interval = Some(d),
            |c, d| c.retry_jitter = Some(d),
            |c, d| c.stop_grace = Some(d),
            |c, d| c.op_timeout = Some(d),
            |c, d| c.max_clock_skew = Some(d),
            |c, d| c.liveness_timeout = Some(d),
        ];
        for (i, set) in settings.iter().enumerate() {
            for d in [huge, MAX_TERM + Duration::from_nanos(1)] {
                let mut c = Config::default();
                set(&mut c, d);
                let e = c.validate().expect_err("refused");
                assert!(e.to_string().contains("longest supported"), "{i}: {e}");
            }
        }
        assert!(Config::new(Duration::MAX).validate().is_err());
        // The largest accepted values still validate without overflow.
        let mut c = Config::new(MAX_TERM);
        c.retry_interval = Some(MAX_TERM);
        c.retry_jitter = Some(MAX_TERM);
        c.op_timeout = Some(MAX_TERM);
        c.liveness_timeout = Some(MAX_TERM);
        c.max_clock_skew = Some(MAX_TERM / 2);
        let t = c.validate().unwrap();
        let _ = t.bounds();
    }

    #[test]
    fn skew_rule_is_not_inverted() {
        // vimeo rejects skew > 2·term; the right rule is term >= 2·skew.
        let mut c = Config {
            max_clock_skew: Some(secs(5.0)),
            ..Config::default()
        };
        assert!(c.validate().is_ok(), "term 10 s = 2 × skew 5 s is allowed");
        c.max_clock_skew = Some(secs(5.001));
        assert!(c.validate().is_err());
    }
}
