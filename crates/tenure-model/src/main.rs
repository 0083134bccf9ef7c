//! `tenure-model`: model-checks the election machine with the given bounds
//! and prints the state counts, the time taken, and any violation's path.
//!
//! ```sh
//! cargo run --release -p tenure-model -- --nodes 3 --faults 1 --fault-end 6
//! ```

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use tenure_model::{check, Budget, FaultKind, Params, Rate, ReleaseKind, Skew};

#[derive(Copy, Clone, Debug, ValueEnum)]
enum Fault {
    Lose,
    Delay,
    Crash,
    Pause,
}

#[derive(Copy, Clone, Debug, ValueEnum)]
enum Release {
    Resign,
    Shutdown,
}

/// Model-check the tenure election machine: every schedule of a small
/// cluster within the bounds.
#[derive(Parser, Debug)]
#[command(name = "tenure-model")]
struct Args {
    /// Candidates (1 to 3).
    #[arg(long, default_value_t = 2)]
    nodes: usize,
    /// Faults the adversary may inject in all.
    #[arg(long, default_value_t = 0)]
    faults: u8,
    /// Which faults (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "lose,delay,crash,pause")]
    fault_kinds: Vec<Fault>,
    /// Faults happen only before this instant, in seconds.
    #[arg(long, default_value_t = 0.0)]
    fault_end: f64,
    /// Graceful releases the application may ask for.
    #[arg(long, default_value_t = 0)]
    releases: u8,
    /// Which releases (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "resign,shutdown")]
    release_kinds: Vec<Release>,
    /// The last instant explored, in seconds (default: faults' end + heal
    /// bound + one quantum).
    #[arg(long)]
    horizon: Option<f64>,
    /// Time step while messages are in flight, in milliseconds.
    #[arg(long, default_value_t = 100)]
    quantum_ms: u64,
    /// Latency bound, in milliseconds.
    #[arg(long, default_value_t = 100)]
    latency_ms: u64,
    /// Enable the wall-clock early takeover with this skew bound, in
    /// milliseconds (wall offsets ±bound/2).
    #[arg(long)]
    skew_ms: Option<u64>,
    /// Negative control: clock rates at twice the drift bound.
    #[arg(long)]
    drift_beyond_bound: bool,
    /// Negative control: deadlines anchored at the reply's receipt.
    #[arg(long)]
    anchor_at_receive: bool,
    /// Candidate priorities: node i publishes priority i and asks a leader
    /// of lower priority to hand over after this many seconds (set a
    /// --horizon that leaves room for the delay, a look and the hand-over).
    #[arg(long)]
    preempt_after: Option<f64>,
    /// Checker threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Also print a path to each `sometimes` property reached (the last
    /// one the search found, often a long one; see `run::Outcome`).
    #[arg(long)]
    examples: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let secs = Duration::from_secs_f64;
    let mut params = Params {
        nodes: args.nodes,
        faults: Budget::new(
            args.faults,
            args.fault_kinds
                .iter()
                .map(|k| match k {
                    Fault::Lose => FaultKind::Lose,
                    Fault::Delay => FaultKind::Delay,
                    Fault::Crash => FaultKind::Crash,
                    Fault::Pause => FaultKind::Pause,
                })
                .collect::<Vec<_>>(),
        ),
        fault_end: secs(args.fault_end),
        releases: Budget::new(
            args.releases,
            args.release_kinds
                .iter()
                .map(|k| match k {
                    Release::Resign => ReleaseKind::Resign,
                    Release::Shutdown => ReleaseKind::Shutdown,
                })
                .collect::<Vec<_>>(),
        ),
        horizon: args.horizon.map(secs),
        quantum: Duration::from_millis(args.quantum_ms),
        latency: Duration::from_millis(args.latency_ms),
        anchor_at_receive: args.anchor_at_receive,
        preempt_after: args.preempt_after.map(secs),
        ..Params::default()
    };
    if let Some(ms) = args.skew_ms {
        params.skew = Some(Skew {
            bound: Duration::from_millis(ms),
            offset: Duration::from_millis(ms / 2),
        });
    }
    if args.drift_beyond_bound {
        let d = params.drift;
        params.rates = vec![
            Rate::new(d.den - 2 * d.num, d.den),
            Rate::new(d.den + 2 * d.num, d.den),
        ];
    }
    match check(params, args.threads) {
        Err(e) => {
            eprintln!("tenure-model: {e}");
            ExitCode::from(2)
        }
        Ok(outcome) => {
            print!("{outcome}");
            if args.examples {
                for (name, path) in &outcome.examples {
                    println!("EXAMPLE: {name}\n{path}");
                }
            }
            if outcome.failures.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
