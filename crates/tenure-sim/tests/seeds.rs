//! Many seeds with the default parameters: every kind of fault, 3 to 7
//! nodes, about 110 s of simulated time each. Not one invariant may break.
//!
//! Split into four tests so that the test runner spreads them over cores.

use tenure_sim::{SimParams, Summary};

mod runs;
use runs::{assert_every_kind_injected, clean_seed_ranges, run_clean};

fn assert_exercised(summary: &Summary) {
    // The runs did what they are for: elections under every kind of fault.
    assert!(summary.elections > summary.runs.seeds * 5, "{summary}");
    assert_every_kind_injected(&summary.faults, &[], summary);
}

/// [`assert_exercised`], and leader crashes with nothing else going wrong
/// were judged against the crash failover bound: there must be some in a
/// batch.
fn assert_exercised_with_checked_crashes(summary: &Summary) {
    assert_exercised(summary);
    assert!(!summary.clean_gaps.is_empty(), "{summary}");
}

clean_seed_ranges! {
    SimParams::default(), assert_exercised;
    seeds_0_to_125_hold_every_invariant: 0..125,
    seeds_125_to_250_hold_every_invariant: 125..250,
    seeds_250_to_375_hold_every_invariant: 250..375,
}

clean_seed_ranges! {
    SimParams::default(), assert_exercised_with_checked_crashes;
    seeds_375_to_500_hold_every_invariant: 375..500,
}

#[test]
fn large_clusters_hold_every_invariant() {
    let mut params = SimParams::default();
    params.tier.nodes = 12..=20;
    run_clean(&params, 10_000..10_012);
}
