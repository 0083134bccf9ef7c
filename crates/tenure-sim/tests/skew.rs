//! The skew seeds prove something only if the wall-clock early takeover
//! actually happens in them: a takeover of a record the challenger has not
//! yet watched for the monotonic takeover wait, allowed by the wall clock
//! alone. These seeds must have many, some of them well before the
//! monotonic wait would have ended, and no violation.

use std::time::Duration;

use tenure_sim::{run_seed, SimParams, SkewBound};

mod runs;
use runs::run_clean;

#[test]
fn early_takeovers_happen_in_the_skew_seeds_and_are_safe() {
    let mut params = SimParams::default();
    params.shared.skew = SkewBound::On(Duration::from_millis(400));
    let summary = run_clean(&params, 0..40);
    assert_eq!(summary.skew_seeds, 40);
    assert!(
        summary.skew_seeds_with_early_takeover >= 30,
        "early takeovers in only {} of 40 seeds:\n{summary}",
        summary.skew_seeds_with_early_takeover
    );
    assert!(summary.early_takeovers >= 200, "{summary}");
    // Some came a whole term before the monotonic rule would have allowed
    // them: a challenger that first saw a long-expired record.
    let earliest = summary.earliest_takeover.expect("some early takeover");
    assert!(earliest > Duration::from_secs(1), "{summary}");
}

#[test]
fn without_a_skew_bound_no_takeover_is_early() {
    let mut params = SimParams::default();
    params.shared.skew = SkewBound::Off;
    for seed in 0..20 {
        let report = run_seed(seed, &params).unwrap();
        assert_eq!(report.early_takeovers, 0, "seed {seed}");
    }
}
