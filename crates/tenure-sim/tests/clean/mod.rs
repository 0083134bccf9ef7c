//! Machine-tier seeds that must all run clean.

use std::ops::Range;

use tenure_sim::{run_seed, SimParams, Summary};

/// Runs `seeds` with `params` and fails naming every violation with the
/// command that replays its seed; otherwise returns the runs' summary.
pub fn run_clean(params: &SimParams, seeds: Range<u64>) -> Summary {
    let mut summary = Summary::default();
    let mut failures = Vec::new();
    for seed in seeds {
        let report = run_seed(seed, params).unwrap();
        for v in &report.violations {
            failures.push(format!("{v}\n  replay: {}", params.replay_command(seed)));
        }
        summary.add(&report);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    summary
}
