//! `tenure-sim`: runs many seeds of the election simulation and prints a
//! summary; exits non-zero if any invariant broke.
//!
//! ```text
//! cargo run -p tenure-sim --release -- --seeds 1000
//! cargo run -p tenure-sim --release -- --seeds 200 --start-seed 5000 --nodes 3..20
//! cargo run -p tenure-sim --release -- --seed 42 --trace
//! ```

use std::io::Write;
use std::ops::RangeInclusive;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use tenure_sim::{run_seed, FaultRates, Liveness, Notify, SimParams, SkewBound, Summary};

/// Deterministic simulation of tenure elections with an invariant checker.
#[derive(Parser, Debug)]
#[command(name = "tenure-sim", version)]
struct Args {
    /// How many seeds to run.
    #[arg(long, default_value_t = 100)]
    seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 0)]
    start_seed: u64,
    /// Run only this seed (overrides --seeds and --start-seed).
    #[arg(long)]
    seed: Option<u64>,
    /// Print every event of the run (with --seed).
    #[arg(long)]
    trace: bool,
    /// Candidates per seed: `N`, or a range `A..B` (inclusive), within 2..20.
    #[arg(long, value_parser = parse_nodes)]
    nodes: Option<RangeInclusive<usize>>,
    /// The term in milliseconds.
    #[arg(long)]
    term_ms: Option<u64>,
    /// The configured drift bound (a fraction).
    #[arg(long)]
    drift: Option<f64>,
    /// How far clocks actually drift, if not within the configured bound.
    #[arg(long)]
    actual_drift: Option<f64>,
    /// Wall-clock skew bound: `off`, `on:MS` or `random:MS`.
    #[arg(long, value_parser = parse_skew)]
    skew: Option<SkewBound>,
    /// Change notifications from the store: `off`, `on` or `random`.
    #[arg(long, value_parser = parse_notify)]
    notify: Option<Notify>,
    /// Application liveness timeout: `off`, `on:MS` or `random:MS`.
    #[arg(long, value_parser = parse_liveness)]
    liveness: Option<Liveness>,
    /// Seconds of fault injection before the fault-free tail.
    #[arg(long)]
    fault_secs: Option<u64>,
    /// Ordinary one-way store latency bound in milliseconds.
    #[arg(long)]
    latency_ms: Option<u64>,
    /// How far wall clocks actually stray from true time, in ms, if not
    /// within half the skew bound (a negative control).
    #[arg(long)]
    actual_wall_offset_ms: Option<u64>,
    /// Anchor every leader's deadline at the reply instead of the send (a
    /// deliberately broken machine: a negative control).
    #[arg(long)]
    anchor_at_receive: bool,
    /// Inject crashes only.
    #[arg(long, conflicts_with = "no_faults")]
    crash_only: bool,
    /// Inject no faults at all.
    #[arg(long)]
    no_faults: bool,
}

fn parse_nodes(s: &str) -> Result<RangeInclusive<usize>, String> {
    let num = |x: &str| {
        x.trim()
            .parse::<usize>()
            .map_err(|e| format!("{x:?} is not a node count: {e}"))
    };
    if let Some((a, b)) = s.split_once("..") {
        let b = b.strip_prefix('=').unwrap_or(b);
        Ok(num(a)?..=num(b)?)
    } else {
        let n = num(s)?;
        Ok(n..=n)
    }
}

fn parse_skew(s: &str) -> Result<SkewBound, String> {
    let ms = |x: &str| {
        x.parse::<u64>()
            .map(Duration::from_millis)
            .map_err(|e| format!("{x:?} is not milliseconds: {e}"))
    };
    match s.split_once(':') {
        None if s == "off" => Ok(SkewBound::Off),
        Some(("on", x)) => Ok(SkewBound::On(ms(x)?)),
        Some(("random", x)) => Ok(SkewBound::Random(ms(x)?)),
        _ => Err(format!("{s:?}: use off, on:MS or random:MS")),
    }
}

fn parse_liveness(s: &str) -> Result<Liveness, String> {
    match parse_skew(s)? {
        SkewBound::Off => Ok(Liveness::Off),
        SkewBound::On(d) => Ok(Liveness::On(d)),
        SkewBound::Random(d) => Ok(Liveness::Random(d)),
    }
}

fn parse_notify(s: &str) -> Result<Notify, String> {
    match s {
        "off" => Ok(Notify::Off),
        "on" => Ok(Notify::On),
        "random" => Ok(Notify::Random),
        _ => Err(format!("{s:?}: use off, on or random")),
    }
}

fn params(args: &Args) -> SimParams {
    let mut p = SimParams::default();
    if let Some(n) = &args.nodes {
        p.nodes = n.clone();
    }
    if let Some(ms) = args.term_ms {
        // The skew bound and liveness timeout scale with the term unless
        // given: the defaults are a fifth of a 2 s term and one term.
        p.term = Duration::from_millis(ms);
        p.skew = SkewBound::Random(p.term / 5);
        p.liveness = Liveness::Random(p.term);
    }
    if let Some(d) = args.drift {
        p.drift = d;
    }
    p.actual_drift = args.actual_drift;
    p.actual_wall_offset = args.actual_wall_offset_ms.map(Duration::from_millis);
    p.anchor_at_receive = args.anchor_at_receive;
    if let Some(s) = args.skew {
        p.skew = s;
    }
    if let Some(n) = args.notify {
        p.notify = n;
    }
    if let Some(l) = args.liveness {
        p.liveness = l;
    }
    if let Some(s) = args.fault_secs {
        p.fault_phase = Duration::from_secs(s);
    }
    if let Some(ms) = args.latency_ms {
        p.latency = Duration::from_millis(ms);
    }
    if args.crash_only {
        p.faults = FaultRates::crash_only();
    }
    if args.no_faults {
        p.faults = FaultRates::none();
    }
    p.trace = args.trace && args.seed.is_some();
    p
}

fn main() -> ExitCode {
    let args = Args::parse();
    let params = params(&args);
    if let Err(e) = params.check() {
        eprintln!("tenure-sim: {e}");
        return ExitCode::from(2);
    }
    let (first, count) = match args.seed {
        Some(s) => (s, 1),
        None => (args.start_seed, args.seeds),
    };
    let started = Instant::now();
    let mut summary = Summary::default();
    let step = (count / 20).max(1);
    for (i, seed) in (first..first.saturating_add(count)).enumerate() {
        let report = match run_seed(seed, &params) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("tenure-sim: seed {seed}: {e}");
                return ExitCode::from(2);
            }
        };
        if args.seed.is_some() {
            for line in &report.trace {
                println!("{line}");
            }
            println!(
                "seed {seed}: {} nodes, skew bound {:?}, liveness timeout {:?}, notifications {}, digest {:016x}",
                report.nodes, report.skew_bound, report.liveness_timeout, report.notify, report.digest
            );
        }
        for v in &report.violations {
            println!("VIOLATION {v}");
            println!("  replay: {}", params.replay_command(seed));
        }
        summary.add(&report);
        let done = i as u64 + 1;
        if count > 1 && (done % step == 0 || done == count) {
            eprint!(
                "\r{done}/{count} seeds, {} violations, {:.1?} elapsed   ",
                summary.violations.len(),
                started.elapsed()
            );
            let _ = std::io::stderr().flush();
        }
    }
    if count > 1 {
        eprintln!();
    }
    println!("{summary}");
    println!(
        "wall time                                {:.2?}",
        started.elapsed()
    );
    if summary.violations.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
