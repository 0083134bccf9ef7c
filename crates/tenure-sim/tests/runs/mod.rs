//! Running seeds of any tier: all clean, or until a violation turns up.

use std::ops::Range;

use tenure_sim::{Params, Tier, TierReport, TierSummary, Violation};

/// Runs `seeds` of the tier with these parameters and fails naming every
/// violation with the command that replays its seed; otherwise returns the
/// runs' summary.
pub fn run_clean<T: Tier>(params: &Params<T>, seeds: Range<u64>) -> T::Summary {
    let mut summary = T::Summary::default();
    let mut failures = Vec::new();
    for seed in seeds {
        let report = params.run(seed).unwrap();
        for v in &report.record().violations {
            failures.push(format!("{v}\n  replay: {}", params.replay_command(seed)));
        }
        summary.add(&report);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    summary
}

/// The first violation in `seeds` that `wanted` picks (it names its seed),
/// with the command that replays the seed.
#[allow(
    dead_code,
    reason = "every test binary compiles this module; not all of them search"
)]
pub fn first_violation<T: Tier>(
    params: &Params<T>,
    seeds: Range<u64>,
    wanted: impl Fn(&Violation) -> bool,
) -> Option<(Violation, String)> {
    for seed in seeds {
        let report = params.run(seed).unwrap();
        if let Some(v) = report.record().violations.iter().find(|v| wanted(v)) {
            assert_eq!(v.seed, seed);
            return Some((v.clone(), params.replay_command(seed)));
        }
    }
    None
}
