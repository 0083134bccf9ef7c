//! What one model check explores: the cluster, its timing, its clocks, the
//! faults it may suffer and when they stop, and the bounds the liveness
//! properties are judged against.

use std::fmt;
use std::time::Duration;

use tenure::{Config, Timing};

/// How fast a node's monotonic clock runs against real time, as the exact
/// fraction `num / den`: a real nanosecond lasts `num / den` nanoseconds on
/// the node's clock. Exact fractions keep clock arithmetic integral, so the
/// model never reports an overlap that is only a rounding error.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Rate {
    /// Numerator.
    pub num: u64,
    /// Denominator.
    pub den: u64,
}

impl Rate {
    /// The rate `num / den`.
    pub const fn new(num: u64, den: u64) -> Self {
        Rate { num, den }
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.num, self.den)
    }
}

/// A kind of fault the adversary may inject while faults are allowed.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum FaultKind {
    /// Drop a request (it never applies) or a reply (its write applied, but
    /// the node only learns of a timeout at the operation's deadline).
    Lose,
    /// Make a request or reply slow: it may arrive at any point until the
    /// faults stop (plus the latency bound), long after its sender timed
    /// out, reordered with everything else.
    Delay,
    /// Crash a node (its clock keeps running, its term stays valid until
    /// its deadline); it may restart as a new incarnation.
    Crash,
    /// Pause a node: it receives nothing and no timer fires while time
    /// passes, until it resumes (at the latest when faults stop).
    Pause,
}

impl FaultKind {
    /// Every kind.
    pub const ALL: [FaultKind; 4] = [
        FaultKind::Lose,
        FaultKind::Delay,
        FaultKind::Crash,
        FaultKind::Pause,
    ];
}

/// A graceful end of a term the application may ask for.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum ReleaseKind {
    /// `Input::Resign`: drain, release, stand again after a hold-off.
    Resign,
    /// `Input::Shutdown`: drain, release, stop for good.
    Shutdown,
}

impl ReleaseKind {
    /// Every kind.
    pub const ALL: [ReleaseKind; 2] = [ReleaseKind::Resign, ReleaseKind::Shutdown];
}

/// How many steps of some kinds (faults, releases) a model check allows in
/// all, and of which kinds: the two settings every such step is checked
/// against, kept together so that they are read, shown and checked alike.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Budget<K> {
    /// How many such steps may happen in all, of any of the kinds.
    pub count: u8,
    /// The kinds that may happen; the others never do.
    pub kinds: Vec<K>,
}

impl<K: PartialEq + fmt::Debug> Budget<K> {
    /// At most `count` steps, each of one of `kinds`.
    pub fn new(count: u8, kinds: impl Into<Vec<K>>) -> Self {
        Budget {
            count,
            kinds: kinds.into(),
        }
    }

    /// Whether, with `used` steps taken so far, one more of `kind` fits.
    pub fn allows(&self, used: u8, kind: K) -> bool {
        used < self.count && self.kinds.contains(&kind)
    }

    /// The kinds, lowercase and space-separated, as the CLI names them.
    pub fn kind_names(&self) -> String {
        let names: Vec<String> = self
            .kinds
            .iter()
            .map(|k| format!("{k:?}").to_lowercase())
            .collect();
        names.join(" ")
    }
}

/// Wall clocks for the optional early takeover by the wall clock.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Skew {
    /// The configured `max_clock_skew` (`S`).
    pub bound: Duration,
    /// Each node's wall clock reads true time plus or minus this offset
    /// (both signs are explored). The timing argument assumes at most
    /// `S / 2`; more is a negative control.
    pub offset: Duration,
}

/// The parameters of one model check.
#[derive(Clone, Debug)]
pub struct Params {
    /// Candidates (2 or 3).
    pub nodes: usize,
    /// The term `T`.
    pub term: Duration,
    /// The configured drift bound `ρ`, as an exact fraction.
    pub drift: Rate,
    /// The clock rates a node may run at; every assignment of them to the
    /// nodes is an initial state. By default the extremes `1 − ρ` and
    /// `1 + ρ`; rates outside them are a negative control.
    pub rates: Vec<Rate>,
    /// The latency bound `L`: a request applies, and a reply reaches its
    /// node, within this much real time unless a fault intervenes.
    pub latency: Duration,
    /// The time step `δ` while messages are in flight: a message arrives
    /// after 0, δ, 2δ, … up to `L`.
    pub quantum: Duration,
    /// How many faults the adversary may inject in all, and of which kinds.
    pub faults: Budget<FaultKind>,
    /// Faults happen only before this real instant; from then on every
    /// message arrives within `L` and no node is paused.
    pub fault_end: Duration,
    /// How many graceful releases the application may ask for, and of
    /// which kinds (before `fault_end`, like the faults: the adversary's
    /// window).
    pub releases: Budget<ReleaseKind>,
    /// The wall-clock early takeover, if configured.
    pub skew: Option<Skew>,
    /// The negative control of the send anchor: every machine anchors its
    /// deadlines at the receipt of the reply.
    pub anchor_at_receive: bool,
    /// The last real instant explored; by default the faults' end plus the
    /// heal bound plus one quantum.
    pub horizon: Option<Duration>,
    /// Candidate priorities: node `i` publishes priority `i` and asks a
    /// leader of lower priority to hand over after this preemption delay
    /// (the machine's preemption room, requests and withdrawals included).
    /// `None`: no priorities, as before.
    pub preempt_after: Option<Duration>,
}

impl Default for Params {
    /// Two nodes, `T` = 8 s, `ρ` = 1/8 (the clock rates 7/8 and 9/8),
    /// `L` = δ = 100 ms, no faults, no releases.
    fn default() -> Self {
        Params {
            nodes: 2,
            term: Duration::from_secs(8),
            drift: Rate::new(1, 8),
            rates: vec![Rate::new(7, 8), Rate::new(9, 8)],
            latency: Duration::from_millis(100),
            quantum: Duration::from_millis(100),
            faults: Budget::new(0, FaultKind::ALL),
            fault_end: Duration::ZERO,
            releases: Budget::new(0, ReleaseKind::ALL),
            skew: None,
            anchor_at_receive: false,
            horizon: None,
            preempt_after: None,
        }
    }
}

/// Parameters the model cannot check.
#[derive(Debug, thiserror::Error)]
pub enum ParamsError {
    /// The timing itself is invalid.
    #[error("invalid timing: {0}")]
    Timing(#[from] tenure::ConfigError),
    /// Out of the range the model supports.
    #[error("{0}")]
    Range(String),
}

/// The bounds the liveness properties use, all in real time. Notation: `T`
/// term, `ρ` drift bound, `R` retry interval, `J` jitter (zero in the
/// model), `O` operation timeout, `L` latency bound, `rtt = 2L`; a local
/// duration `x` lasts at most `x / (1 − ρ)` real time.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ModelBounds {
    /// From the end of the faults to a valid term:
    /// `max(L, O/(1 − ρ)) + (R + J)/(1 − ρ) + T(1 + ρ)/(1 − ρ) + 4·rtt`
    /// (`tenure-sim`'s heal bound with slow requests bounded by `L`): an
    /// operation lost in a fault times out, the next poll sees the final
    /// record, the takeover wait passes, a read in flight and the taking
    /// compare-and-swap return.
    pub heal: Duration,
    /// From a graceful release applying at the store to the next term:
    /// `(R + J)/(1 − ρ) + 3·rtt`: a read in flight when the release applied
    /// returns the old record, the next poll sees the release, and the
    /// taking compare-and-swap returns.
    pub release: Duration,
    /// How long before a release nothing may have gone wrong for it to be
    /// judged against `release`: `(T + O + R + J)/(1 − ρ) + 4·rtt`, long
    /// enough for every after-effect of a fault to be over.
    pub quiet: Duration,
}

impl Params {
    /// The timing every machine runs with: `Config::new(term)` with the
    /// drift bound, zero jitter (the model explores schedules, so random
    /// jitter would only multiply identical ones), and the skew bound.
    pub fn timing(&self) -> Result<Timing, ParamsError> {
        let mut config = Config::new(self.term);
        config.drift = self.drift_f64();
        config.retry_jitter = Some(Duration::ZERO);
        config.max_clock_skew = self.skew.map(|s| s.bound);
        Ok(config.validate()?)
    }

    /// `ρ` as a float, as the configuration wants it.
    pub fn drift_f64(&self) -> f64 {
        self.drift.num as f64 / self.drift.den as f64
    }

    /// Checks the parameters the model relies on.
    pub fn validate(&self) -> Result<Timing, ParamsError> {
        let range = |msg: String| Err(ParamsError::Range(msg));
        if !(1..=3).contains(&self.nodes) {
            return range(format!("{} nodes: the model runs 1 to 3", self.nodes));
        }
        if self.rates.is_empty() || self.rates.iter().any(|r| r.num == 0 || r.den == 0) {
            return range("clock rates must be positive fractions".into());
        }
        if self.quantum.is_zero() || self.latency < self.quantum {
            return range("the quantum must be positive and at most the latency bound".into());
        }
        let timing = self.timing()?;
        if self.latency * 4 >= timing.op_timeout {
            return range(format!(
                "latency bound {:?} is too long for the operation timeout {:?}: a round trip must fit twice",
                self.latency, timing.op_timeout
            ));
        }
        Ok(timing)
    }

    /// The liveness bounds for this timing.
    pub fn bounds(&self, timing: &Timing) -> ModelBounds {
        let rho = self.drift_f64();
        let stretch = |d: Duration| d.mul_f64(1.0 / (1.0 - rho));
        let rtt = self.latency * 2;
        let poll = stretch(timing.retry_interval + timing.retry_jitter);
        let wait = timing.term.mul_f64((1.0 + rho) / (1.0 - rho));
        // Absorbs the rounding of durations to nanoseconds and of wall
        // times to milliseconds.
        let slack = Duration::from_millis(1);
        ModelBounds {
            heal: self.latency.max(stretch(timing.op_timeout)) + poll + wait + rtt * 4 + slack,
            release: poll + rtt * 3 + slack,
            quiet: stretch(timing.term + timing.op_timeout) + poll + rtt * 4 + slack,
        }
    }

    /// The last real instant explored.
    pub fn horizon(&self, bounds: &ModelBounds) -> Duration {
        self.horizon
            .unwrap_or(self.fault_end + bounds.heal + self.quantum)
    }
}

impl fmt::Display for Params {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rates: Vec<String> = self.rates.iter().map(Rate::to_string).collect();
        write!(
            f,
            "{} nodes, T {:?}, ρ {}, rates [{}], L {:?}, δ {:?}, {} fault(s) of [{}] before {:?}, {} release(s) of [{}]",
            self.nodes,
            self.term,
            self.drift,
            rates.join(" "),
            self.latency,
            self.quantum,
            self.faults.count,
            self.faults.kind_names(),
            self.fault_end,
            self.releases.count,
            self.releases.kind_names(),
        )?;
        if let Some(s) = self.skew {
            write!(
                f,
                ", skew bound {:?} with wall offsets ±{:?}",
                s.bound, s.offset
            )?;
        }
        if self.anchor_at_receive {
            f.write_str(", deadlines anchored at the receipt (negative control)")?;
        }
        if let Some(d) = self.preempt_after {
            write!(f, ", node i of priority i, preempting after {d:?}")?;
        }
        Ok(())
    }
}
