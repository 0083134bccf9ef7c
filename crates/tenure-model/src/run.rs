//! Running a check and reading its outcome: state counts, time, the
//! properties violated (each with its path, rendered step by step), and the
//! `sometimes` properties reached.

use std::fmt;
use std::time::{Duration, Instant};

use stateright::{Checker, Expectation, HasDiscoveries, Model, Path};
use tenure::machine::Phase;

use crate::clock;
use crate::model::{ElectionModel, Step};
use crate::params::{Params, ParamsError};
use crate::state::State;

/// What a check found.
#[derive(Debug)]
pub struct Outcome {
    /// The parameters, as text.
    pub params: String,
    /// The initial states (clock-rate and wall-offset assignments).
    pub initial_states: usize,
    /// Distinct states explored.
    pub unique_states: usize,
    /// States generated, counting repeats.
    pub states: usize,
    /// The longest path explored, in steps.
    pub max_depth: usize,
    /// The horizon, real time.
    pub horizon: Duration,
    /// Wall-clock time the check took.
    pub elapsed: Duration,
    /// Violated `always`/`eventually` properties, each with its path.
    pub failures: Vec<(&'static str, String)>,
    /// `sometimes` properties reached.
    pub reached: Vec<&'static str>,
    /// For each `sometimes` property reached, a path to it.
    ///
    /// The paths here and in `failures` are the *last* ones the
    /// breadth-first search found, not the first: stateright replaces a
    /// property's discovery each time another state has it. After
    /// [`check`], which explores everything, they are often among the
    /// longest; [`check_until_failure`] stops at the end of the block of
    /// states (1,500 per thread) in which the first violation turned up,
    /// so on one thread its path is at most a step longer than the
    /// shortest.
    pub examples: Vec<(&'static str, String)>,
    /// `sometimes` properties never reached.
    pub unreached: Vec<&'static str>,
}

impl Outcome {
    /// Whether `property` was violated.
    pub fn violated(&self, property: &str) -> bool {
        self.failures.iter().any(|(name, _)| *name == property)
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.params)?;
        writeln!(
            f,
            "{} initial, {} unique states ({} generated), depth {}, horizon {:?}, {:.1?}",
            self.initial_states,
            self.unique_states,
            self.states,
            self.max_depth,
            self.horizon,
            self.elapsed
        )?;
        writeln!(f, "reached: {:?}", self.reached)?;
        if !self.unreached.is_empty() {
            writeln!(f, "never reached: {:?}", self.unreached)?;
        }
        for (name, path) in &self.failures {
            writeln!(f, "VIOLATED: {name}\n{path}")?;
        }
        Ok(())
    }
}

/// Explores every state of `params` within its bounds on `threads` threads.
pub fn check(params: Params, threads: usize) -> Result<Outcome, ParamsError> {
    run(params, threads, HasDiscoveries::All)
}

/// As [`check`], but stops at the first violation: for negative controls.
pub fn check_until_failure(params: Params, threads: usize) -> Result<Outcome, ParamsError> {
    run(params, threads, HasDiscoveries::AnyFailures)
}

fn run(params: Params, threads: usize, until: HasDiscoveries) -> Result<Outcome, ParamsError> {
    let model = ElectionModel::new(params)?;
    let text = model.params.to_string();
    let initial_states = model.init_states().len();
    let horizon = Duration::from_nanos(model.horizon());
    let properties = model.properties();
    let start = Instant::now();
    let checker = model
        .checker()
        .threads(threads.max(1))
        .finish_when(until)
        .spawn_bfs()
        .join();
    let elapsed = start.elapsed();
    let discoveries = checker.discoveries();
    let mut failures = Vec::new();
    let mut reached = Vec::new();
    let mut examples = Vec::new();
    let mut unreached = Vec::new();
    for p in &properties {
        match (p.expectation.clone(), discoveries.get(p.name)) {
            (Expectation::Sometimes, Some(path)) => {
                reached.push(p.name);
                examples.push((p.name, render(checker.model(), path)));
            }
            (Expectation::Sometimes, None) => unreached.push(p.name),
            (_, Some(path)) => failures.push((p.name, render(checker.model(), path))),
            (_, None) => {}
        }
    }
    Ok(Outcome {
        params: text,
        initial_states,
        unique_states: checker.unique_state_count(),
        states: checker.state_count(),
        max_depth: checker.max_depth(),
        horizon,
        elapsed,
        failures,
        reached,
        examples,
        unreached,
    })
}

/// A path, one line per step: the step, then the real time, each node's
/// clock and phase, the stored record and the messages in flight.
pub fn render(model: &ElectionModel, path: &Path<State, Step>) -> String {
    let mut out = String::new();
    let steps = path.clone().into_vec();
    if let Some((first, _)) = steps.first() {
        let rates: Vec<String> = first
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| format!("n{i} clock rate {} wall {:+}ms", n.rate, n.wall_offset_ms))
            .collect();
        out.push_str(&format!("  {}\n", rates.join(", ")));
    }
    let mut prev: Option<Step> = None;
    for (state, step) in steps {
        let label = match prev {
            None => "start".to_owned(),
            Some(Step::Advance(t)) => format!("to {:.1}ms", t as f64 / 1e6),
            Some(s) => format!("{s:?}"),
        };
        out.push_str(&format!("  {:<14} {}\n", label, describe(model, &state)));
        prev = step;
    }
    out
}

fn describe(_model: &ElectionModel, s: &State) -> String {
    let ms = |ns: u64| ns as f64 / 1e6;
    let mut parts = vec![format!("t={:.1}ms", ms(s.now))];
    for (i, n) in s.nodes.iter().enumerate() {
        let mono = clock::mono(n, i, s.now).as_nanos() % 1_000_000_000_000;
        let what = match &n.process {
            None => "down".to_owned(),
            Some(p) => {
                let phase = match p.machine.get().phase() {
                    Phase::Candidate => "cand".to_owned(),
                    Phase::Leader { token } => format!("LEAD#{token}"),
                    Phase::Draining { token } => format!("drain#{token}"),
                    Phase::Releasing => "releasing".to_owned(),
                    Phase::Stopped => "stopped".to_owned(),
                };
                let paused = if p.paused { " PAUSED" } else { "" };
                let op = p
                    .pending
                    .map(|op| format!(" op{}", op.op.0))
                    .unwrap_or_default();
                format!("{phase}{op}{paused}")
            }
        };
        parts.push(format!("n{i}[{:.1}ms {what}]", ms(mono)));
    }
    let store = match &s.store {
        None => "empty".to_owned(),
        Some(st) => match &st.decoded {
            Ok(r) => format!(
                "v{} {}#{}",
                st.version.0,
                r.holder
                    .as_ref()
                    .map_or("-".to_owned(), |h| format!("{}.{}", h.id, h.incarnation)),
                r.token
            ),
            Err(e) => format!("v{} undecodable: {e}", st.version.0),
        },
    };
    parts.push(format!("store {store}"));
    let net: Vec<String> = s
        .net
        .iter()
        .map(|m| {
            let kind = match &m.body {
                crate::state::Body::Read => "read".to_owned(),
                crate::state::Body::Cas { purpose, .. } => purpose.label().to_owned(),
                crate::state::Body::ReadReply(_) => "read-reply".to_owned(),
                crate::state::Body::CasReply(v) => {
                    if v.is_some() {
                        "applied".to_owned()
                    } else {
                        "conflict".to_owned()
                    }
                }
            };
            let slow = if m.slow { " slow" } else { "" };
            format!("n{}:op{} {kind}{slow}", m.node, m.op.0)
        })
        .collect();
    if !net.is_empty() {
        parts.push(format!("net [{}]", net.join(", ")));
    }
    let terms: Vec<String> = s
        .ghost
        .terms
        .iter()
        .map(|t| {
            let i = usize::from(t.node);
            let valid = crate::properties::term_valid(t, &s.nodes[i], i, s.now);
            format!(
                "n{}#{} until {:.1}ms{}{}",
                t.node,
                t.token,
                ms(t.deadline.as_nanos() % 1_000_000_000_000),
                t.work_deadline
                    .map(|w| format!(" work {:.1}ms", ms(w.as_nanos() % 1_000_000_000_000)))
                    .unwrap_or_default(),
                if valid { " VALID" } else { "" }
            )
        })
        .collect();
    if !terms.is_empty() {
        parts.push(format!("terms [{}]", terms.join(", ")));
    }
    if s.ghost.flaws != 0 {
        parts.push(format!("flaws {:#x}", s.ghost.flaws));
    }
    parts.join(" ")
}
