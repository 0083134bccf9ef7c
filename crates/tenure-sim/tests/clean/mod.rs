//! Seeds that must all run clean, in any tier.

use std::ops::Range;

use tenure_sim::Tier;

/// Runs `seeds` of the tier with these parameters and fails naming every
/// violation with the command that replays its seed; otherwise returns the
/// runs' summary.
pub fn run_clean<T: Tier>(params: &T, seeds: Range<u64>) -> T::Summary {
    let mut summary = T::Summary::default();
    let mut failures = Vec::new();
    for seed in seeds {
        let report = params.run(seed).unwrap();
        for v in params.violations(&report) {
            failures.push(format!(
                "{v}\n  replay: {}",
                Tier::replay_command(params, seed)
            ));
        }
        params.add(&mut summary, &report);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    summary
}
