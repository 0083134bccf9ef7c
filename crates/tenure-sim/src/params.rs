//! What a simulation run is made of: cluster size, timing, clock quality,
//! fault rates. Every per-seed choice (node count, skew mode, fault times)
//! is drawn from the seed within these limits.

use std::ops::RangeInclusive;
use std::time::Duration;

use tenure::{Config, Timing};

use crate::clock::NodeClock;
use crate::faults::FaultRates;
use crate::report::{SimReport, Summary};
use crate::tier::{Params, Tier};

/// Whether a seed configures [`tenure::Config::max_clock_skew`] (which turns
/// on the wall-clock early takeover).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SkewBound {
    /// Never: only monotonic clocks matter.
    Off,
    /// Always, with this bound.
    On(Duration),
    /// Half of the seeds, chosen by the seed, with this bound.
    Random(Duration),
}

/// Whether a seed configures [`tenure::Config::liveness_timeout`]: the
/// application pulses every quarter of it, and a leader whose application
/// stops pulsing resigns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Liveness {
    /// No liveness timeout, no pulses.
    Off,
    /// Always, with this timeout.
    On(Duration),
    /// Half of the seeds, chosen by the seed, with this timeout.
    Random(Duration),
}

/// Whether the store notifies candidates of changes (like etcd watch or
/// PostgreSQL LISTEN/NOTIFY), or they must poll.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Notify {
    /// Candidates poll.
    Off,
    /// The store sends a change hint to every node after each write.
    On,
    /// Half of the seeds, chosen by the seed.
    Random,
}

impl SkewBound {
    /// The bound a seed may configure (whether it does is drawn per seed
    /// for [`SkewBound::Random`]).
    pub fn limit(self) -> Option<Duration> {
        match self {
            SkewBound::Off => None,
            SkewBound::On(d) | SkewBound::Random(d) => Some(d),
        }
    }

    /// The bound this seed configures: for [`SkewBound::Random`], half of
    /// the seeds, drawn from `rng`.
    pub fn draw(self, rng: &mut impl rand::Rng) -> Option<Duration> {
        match self {
            SkewBound::Off => None,
            SkewBound::On(d) => Some(d),
            SkewBound::Random(d) => rng.gen_bool(0.5).then_some(d),
        }
    }

    /// Its command-line form (`off`, `on:MS`, `random:MS`).
    pub fn flag(self) -> String {
        match self {
            SkewBound::Off => "off".into(),
            SkewBound::On(d) => format!("on:{}", d.as_millis()),
            SkewBound::Random(d) => format!("random:{}", d.as_millis()),
        }
    }
}

impl Liveness {
    /// The timeout a seed may configure (whether it does is drawn per seed
    /// for [`Liveness::Random`]).
    pub fn limit(self) -> Option<Duration> {
        self.as_skew().limit()
    }

    /// The timeout this seed configures: for [`Liveness::Random`], half of
    /// the seeds, drawn from `rng`.
    pub fn draw(self, rng: &mut impl rand::Rng) -> Option<Duration> {
        self.as_skew().draw(rng)
    }

    /// Its command-line form (`off`, `on:MS`, `random:MS`).
    pub fn flag(self) -> String {
        self.as_skew().flag()
    }

    /// The same choice, spelt like a skew bound (the two have one form).
    fn as_skew(self) -> SkewBound {
        match self {
            Liveness::Off => SkewBound::Off,
            Liveness::On(d) => SkewBound::On(d),
            Liveness::Random(d) => SkewBound::Random(d),
        }
    }
}

impl Notify {
    /// Whether this seed (or candidate) is notified: for [`Notify::Random`],
    /// half of the time, drawn from `rng`.
    pub fn draw(self, rng: &mut impl rand::Rng) -> bool {
        match self {
            Notify::Off => false,
            Notify::On => true,
            Notify::Random => rng.gen_bool(0.5),
        }
    }

    /// Its command-line form.
    pub fn flag(self) -> &'static str {
        match self {
            Notify::Off => "off",
            Notify::On => "on",
            Notify::Random => "random",
        }
    }
}

/// The settings every tier has (machines, electors, sharded sets), so that
/// their checks, their command-line flags and their replay commands are
/// written once. Each tier's parameters hold theirs in a field `shared`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shared {
    /// The configured term; every other timing setting derives from it.
    pub term: Duration,
    /// The configured drift bound ρ.
    pub drift: f64,
    /// How far clocks actually drift, if not within the configured bound.
    /// Setting it beyond `drift` breaks the timing assumption on purpose (a
    /// negative control), to show that the checker catches the resulting
    /// overlap.
    pub actual_drift: Option<f64>,
    /// The wall-clock skew bound.
    pub skew: SkewBound,
    /// How far wall clocks actually stray from true time, if not within half
    /// the skew bound: each node's offset is drawn from `[-x, +x]` (a third
    /// on an edge) instead of staying within `skew / 2`. Setting it beyond
    /// `skew / 2` breaks the early takeover's assumption on purpose (a
    /// negative control). Matters only in seeds with a skew bound.
    pub actual_wall_offset: Option<Duration>,
    /// Change notifications: with [`Notify::Random`], drawn per seed in the
    /// machine tier and per candidate (or member) in the others.
    pub notify: Notify,
    /// Application liveness pulses; `None` for a tier without them (sharded
    /// sets).
    pub liveness: Option<Liveness>,
    /// How long faults are injected; a fault-free tail follows, in which
    /// the tier's liveness checks run.
    pub fault_phase: Duration,
    /// Upper bound of the ordinary one-way store latency (the machine tier
    /// draws each operation's from 0.5 ms up to it, the others each
    /// process's from 1 ms). Slow operations (a fault) exceed it.
    pub latency: Duration,
    /// Keep a human-readable trace in the report.
    pub trace: bool,
}

impl Default for Shared {
    /// The settings of the machine and elector tiers' defaults (the sharded
    /// tier has no liveness pulses).
    fn default() -> Self {
        Shared {
            term: Duration::from_secs(2),
            drift: 0.01,
            actual_drift: None,
            skew: SkewBound::Random(Duration::from_millis(400)),
            actual_wall_offset: None,
            notify: Notify::Random,
            liveness: Some(Liveness::Random(Duration::from_secs(2))),
            fault_phase: Duration::from_secs(60),
            latency: Duration::from_millis(20),
            trace: false,
        }
    }
}

impl Shared {
    /// Checks what the election configuration does not: the negative
    /// controls' ranges, a latency from `min_latency` to well inside the
    /// operation timeout, and a fault phase of at least 8 terms.
    pub(crate) fn check(&self, min_latency: Duration) -> Result<(), SimError> {
        if let Some(a) = self.actual_drift {
            if !(a.is_finite() && (0.0..0.9).contains(&a)) {
                return Err(SimError::Params(format!(
                    "actual drift {a} is outside [0, 0.9)"
                )));
            }
        }
        if let Some(w) = self.actual_wall_offset {
            if w > Duration::from_secs(3600) {
                return Err(SimError::Params(format!(
                    "actual wall-clock offset {w:?} is over an hour"
                )));
            }
        }
        if self.latency < min_latency || self.latency * 4 >= self.term / 4 {
            return Err(SimError::Params(format!(
                "latency bound {:?} must be at least {min_latency:?} and a round trip well inside the operation timeout (term / 4)",
                self.latency
            )));
        }
        if self.fault_phase < self.term * 8 {
            return Err(SimError::Params(format!(
                "fault phase {:?} is shorter than 8 terms: faults need room to heal before the tail",
                self.fault_phase
            )));
        }
        self.timing(self.skew.limit(), self.liveness.and_then(Liveness::limit))
            .map(|_| ())
    }

    /// The liveness timeout this seed configures: none in a tier without
    /// liveness pulses, otherwise drawn as [`Liveness::draw`] does.
    pub fn draw_liveness(&self, rng: &mut impl rand::Rng) -> Option<Duration> {
        self.liveness.and_then(|l| l.draw(rng))
    }

    /// How far clocks really drift.
    pub fn effective_drift(&self) -> f64 {
        self.actual_drift.unwrap_or(self.drift)
    }

    /// Draws one node's clock from `rng`: its rate within the drift bound
    /// (or the actual drift), its wall clock within half the seed's `skew`
    /// bound (or the actual wall-clock offset).
    pub(crate) fn draw_clock(&self, rng: &mut impl rand::Rng, skew: Option<Duration>) -> NodeClock {
        NodeClock::random(
            rng,
            self.effective_drift(),
            self.drift,
            skew,
            self.actual_wall_offset,
        )
    }

    /// The election configuration with this skew bound and liveness
    /// timeout.
    pub fn config(&self, skew: Option<Duration>, liveness: Option<Duration>) -> Config {
        let mut config = Config::new(self.term);
        config.drift = self.drift;
        config.max_clock_skew = skew;
        config.liveness_timeout = liveness;
        config
    }

    /// What a seed of the elector or sharded tier draws for its election
    /// from `rng`: its skew bound, then its liveness timeout if its
    /// application `pulses` (none otherwise), with the configuration of
    /// both and its validated timing.
    pub(crate) fn draw_election(
        &self,
        rng: &mut impl rand::Rng,
        pulses: bool,
    ) -> Result<(Option<Duration>, Config, Timing), SimError> {
        let skew = self.skew.draw(rng);
        let liveness = if pulses {
            self.draw_liveness(rng)
        } else {
            None
        };
        let config = self.config(skew, liveness);
        Ok((skew, config.clone(), config.validate()?))
    }

    /// The validated timing with this skew bound and liveness timeout.
    pub fn timing(
        &self,
        skew: Option<Duration>,
        liveness: Option<Duration>,
    ) -> Result<Timing, SimError> {
        Ok(self.config(skew, liveness).validate()?)
    }

    /// The command-line flags that set these settings where they differ
    /// from `default`'s, for a replay command.
    pub(crate) fn flags(&self, default: &Shared) -> String {
        let mut cmd = String::new();
        if self.term != default.term {
            cmd += &format!(" --term-ms {}", self.term.as_millis());
        }
        if self.drift.to_bits() != default.drift.to_bits() {
            cmd += &format!(" --drift {}", self.drift);
        }
        if let Some(a) = self.actual_drift {
            cmd += &format!(" --actual-drift {a}");
        }
        if self.skew != default.skew {
            cmd += &format!(" --skew {}", self.skew.flag());
        }
        if let Some(w) = self.actual_wall_offset {
            cmd += &format!(" --actual-wall-offset-ms {}", w.as_millis());
        }
        if self.notify != default.notify {
            cmd += &format!(" --notify {}", self.notify.flag());
        }
        if let Some(l) = self.liveness.filter(|l| Some(*l) != default.liveness) {
            cmd += &format!(" --liveness {}", l.flag());
        }
        if self.fault_phase != default.fault_phase {
            cmd += &format!(" --fault-secs {}", self.fault_phase.as_secs());
        }
        if self.latency != default.latency {
            cmd += &format!(" --latency-ms {}", self.latency.as_millis());
        }
        cmd
    }
}

/// A count range's flag in a replay command, ` --name A..B`, if the range
/// differs from the `default` one.
pub(crate) fn range_flag(
    name: &str,
    range: &RangeInclusive<usize>,
    default: &RangeInclusive<usize>,
) -> String {
    if range == default {
        return String::new();
    }
    format!(" --{name} {}..{}", range.start(), range.end())
}

/// Checks that a count range is non-empty and within `min..=max`.
pub(crate) fn check_range(
    what: &str,
    range: &RangeInclusive<usize>,
    min: usize,
    max: usize,
) -> Result<(), SimError> {
    let (lo, hi) = (*range.start(), *range.end());
    if lo < min || hi > max || lo > hi {
        return Err(SimError::Params(format!(
            "{what} range {lo}..={hi}: give a non-empty range within {min}..={max}"
        )));
    }
    Ok(())
}

/// The parameters of a machine-tier run; [`SimParams::default`] is what the
/// test suite and the binary run unless told otherwise.
pub type SimParams = Params<MachineTier>;

/// The machine tier's own settings.
#[derive(Clone, Debug, PartialEq)]
pub struct MachineTier {
    /// How many candidates, drawn per seed from this range (2 to 20 allowed).
    pub nodes: RangeInclusive<usize>,
    /// Run every node's machine with the test-only mutation
    /// [`tenure::machine::Machine::anchor_deadlines_at_receive`]: deadlines
    /// counted from a write's reply instead of its send, which the timing
    /// argument forbids. A negative control: the checker must catch it.
    pub anchor_at_receive: bool,
}

impl Default for MachineTier {
    fn default() -> Self {
        MachineTier {
            nodes: 3..=7,
            anchor_at_receive: false,
        }
    }
}

/// Parameters that cannot be simulated.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A parameter is out of range.
    #[error("invalid simulation parameters: {0}")]
    Params(String),
    /// The election configuration derived from the parameters is invalid.
    #[error("invalid election configuration: {0}")]
    Config(#[from] tenure::ConfigError),
    /// The elector tier's tokio runtime could not start.
    #[error("could not start the tokio runtime for the elector tier: {0}")]
    Runtime(std::io::Error),
}

impl Tier for MachineTier {
    type Faults = FaultRates;
    type Report = SimReport;
    type Summary = Summary;

    const FLAG: Option<&'static str> = None;
    const MIN_LATENCY: Duration = Duration::from_nanos(1);
    const REPLAY_WITH: &'static str = "run_seed and the same SimParams";

    /// The shared settings' defaults with a fault phase of 100 s, then the
    /// tail in which liveness and crash failover are checked.
    fn default_shared() -> Shared {
        Shared {
            fault_phase: Duration::from_secs(100),
            ..Shared::default()
        }
    }

    fn check(&self) -> Result<(), SimError> {
        check_range("node count", &self.nodes, 2, 20)
    }

    fn flags(&self, default: &Self) -> String {
        range_flag("nodes", &self.nodes, &default.nodes)
    }

    fn control_flags(&self) -> String {
        if self.anchor_at_receive {
            " --anchor-at-receive".into()
        } else {
            String::new()
        }
    }

    fn run(params: &SimParams, seed: u64) -> Result<SimReport, SimError> {
        crate::run_seed(seed, params)
    }
}
