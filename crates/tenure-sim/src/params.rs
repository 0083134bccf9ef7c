//! What a simulation run is made of: cluster size, timing, clock quality,
//! fault rates. Every per-seed choice (node count, skew mode, fault times)
//! is drawn from the seed within these limits.

use std::ops::RangeInclusive;
use std::time::Duration;

use tenure::{Config, Timing};

use crate::faults::FaultRates;

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

/// The parameters of a simulation; [`SimParams::default`] is what the test
/// suite and the binary run unless told otherwise.
#[derive(Clone, Debug, PartialEq)]
pub struct SimParams {
    /// How many candidates, drawn per seed from this range (2 to 20 allowed).
    pub nodes: RangeInclusive<usize>,
    /// The configured term; every other timing setting derives from it.
    pub term: Duration,
    /// The configured drift bound ρ ([`tenure::Config::drift`]).
    pub drift: f64,
    /// How far clocks actually drift, if different from the configured bound.
    /// Setting it beyond `drift` breaks the timing assumption on purpose, to
    /// show that the checker catches the resulting overlap.
    pub actual_drift: Option<f64>,
    /// The wall-clock skew bound.
    pub skew: SkewBound,
    /// How far wall clocks actually stray from true time, if not within half
    /// the skew bound: each node's offset is drawn from `[-x, +x]` (a third
    /// on an edge) instead of staying within `skew / 2`. Setting it beyond
    /// `skew / 2` breaks the early takeover's assumption on purpose, to show
    /// that the checker catches the overlap that follows. Matters only in
    /// seeds with a skew bound.
    pub actual_wall_offset: Option<Duration>,
    /// Run every node's machine with the test-only mutation
    /// [`tenure::machine::Machine::anchor_deadlines_at_receive`]: deadlines
    /// counted from a write's reply instead of its send, which the timing
    /// argument forbids. A negative control: the checker must catch it.
    pub anchor_at_receive: bool,
    /// Change notifications.
    pub notify: Notify,
    /// Application liveness pulses.
    pub liveness: Liveness,
    /// How long faults are injected; a fault-free tail follows in which
    /// liveness and crash failover are checked.
    pub fault_phase: Duration,
    /// Upper bound of the ordinary one-way latency between a node and the
    /// store (drawn uniformly from 0.5 ms up to it). Slow operations (a
    /// fault) exceed it.
    pub latency: Duration,
    /// How often each kind of fault happens.
    pub faults: FaultRates,
    /// Keep a human-readable trace of every event in the report.
    pub trace: bool,
}

impl Default for SimParams {
    fn default() -> Self {
        SimParams {
            nodes: 3..=7,
            term: Duration::from_secs(2),
            drift: 0.01,
            actual_drift: None,
            skew: SkewBound::Random(Duration::from_millis(400)),
            actual_wall_offset: None,
            anchor_at_receive: false,
            notify: Notify::Random,
            liveness: Liveness::Random(Duration::from_secs(2)),
            fault_phase: Duration::from_secs(100),
            latency: Duration::from_millis(20),
            faults: FaultRates::default(),
            trace: false,
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

impl SimParams {
    /// Checks the parameters that the election configuration does not.
    pub fn check(&self) -> Result<(), SimError> {
        let (lo, hi) = (*self.nodes.start(), *self.nodes.end());
        if lo < 2 || hi > 20 || lo > hi {
            return Err(SimError::Params(format!(
                "node count range {lo}..={hi}: give a non-empty range within 2..=20"
            )));
        }
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
        if self.latency.is_zero() || self.latency * 4 >= self.term / 4 {
            return Err(SimError::Params(format!(
                "latency bound {:?} must be positive and a round trip well inside the operation timeout (term / 4)",
                self.latency
            )));
        }
        if self.fault_phase < self.term * 8 {
            return Err(SimError::Params(format!(
                "fault phase {:?} is shorter than 8 terms: faults need room to heal before the tail",
                self.fault_phase
            )));
        }
        self.faults.check()?;
        let skew = match self.skew {
            SkewBound::Off => None,
            SkewBound::On(d) | SkewBound::Random(d) => Some(d),
        };
        let liveness = match self.liveness {
            Liveness::Off => None,
            Liveness::On(d) | Liveness::Random(d) => Some(d),
        };
        self.timing(skew, liveness).map(|_| ())
    }

    /// The validated timing of the election with this skew bound and
    /// liveness timeout.
    pub fn timing(
        &self,
        skew: Option<Duration>,
        liveness: Option<Duration>,
    ) -> Result<Timing, SimError> {
        let mut config = Config::new(self.term);
        config.drift = self.drift;
        config.max_clock_skew = skew;
        config.liveness_timeout = liveness;
        Ok(config.validate()?)
    }

    /// How far clocks really drift.
    pub fn effective_drift(&self) -> f64 {
        self.actual_drift.unwrap_or(self.drift)
    }

    /// The command that replays `seed` with these parameters, with a trace.
    pub fn replay_command(&self, seed: u64) -> String {
        let mut cmd = format!("cargo run -p tenure-sim --release -- --seed {seed} --trace");
        let d = SimParams::default();
        if self.nodes != d.nodes {
            cmd += &format!(" --nodes {}..{}", self.nodes.start(), self.nodes.end());
        }
        if self.term != d.term {
            cmd += &format!(" --term-ms {}", self.term.as_millis());
        }
        if self.drift != d.drift {
            cmd += &format!(" --drift {}", self.drift);
        }
        if let Some(a) = self.actual_drift {
            cmd += &format!(" --actual-drift {a}");
        }
        if self.skew != d.skew {
            cmd += &match self.skew {
                SkewBound::Off => " --skew off".to_string(),
                SkewBound::On(s) => format!(" --skew on:{}", s.as_millis()),
                SkewBound::Random(s) => format!(" --skew random:{}", s.as_millis()),
            };
        }
        if let Some(w) = self.actual_wall_offset {
            cmd += &format!(" --actual-wall-offset-ms {}", w.as_millis());
        }
        if self.anchor_at_receive {
            cmd += " --anchor-at-receive";
        }
        if self.notify != d.notify {
            cmd += match self.notify {
                Notify::Off => " --notify off",
                Notify::On => " --notify on",
                Notify::Random => " --notify random",
            };
        }
        if self.liveness != d.liveness {
            cmd += &match self.liveness {
                Liveness::Off => " --liveness off".to_string(),
                Liveness::On(s) => format!(" --liveness on:{}", s.as_millis()),
                Liveness::Random(s) => format!(" --liveness random:{}", s.as_millis()),
            };
        }
        if self.fault_phase != d.fault_phase {
            cmd += &format!(" --fault-secs {}", self.fault_phase.as_secs());
        }
        if self.latency != d.latency {
            cmd += &format!(" --latency-ms {}", self.latency.as_millis());
        }
        if self.faults == FaultRates::crash_only() {
            cmd += " --crash-only";
        } else if self.faults == FaultRates::none() {
            cmd += " --no-faults";
        } else if self.faults != d.faults {
            cmd += " (custom fault rates: replay with run_seed and the same SimParams)";
        }
        cmd
    }
}
