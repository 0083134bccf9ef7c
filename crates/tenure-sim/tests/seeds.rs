//! Many seeds with the default parameters: every kind of fault, 3 to 7
//! nodes, about 110 s of simulated time each. Not one invariant may break.
//!
//! Split into four tests so that the test runner spreads them over cores.

use tenure_sim::{FaultKind, SimParams, Summary};

mod runs;
use runs::run_clean;

fn run_range(seeds: std::ops::Range<u64>) -> Summary {
    let summary = run_clean(&SimParams::default(), seeds);
    // The runs did what they are for: elections under every kind of fault.
    assert!(summary.elections > summary.runs.seeds * 5, "{summary}");
    for kind in FaultKind::ALL {
        assert!(summary.faults[kind] > 0, "no {kind} injected:\n{summary}");
    }
    summary
}

#[test]
fn seeds_0_to_125_hold_every_invariant() {
    run_range(0..125);
}

#[test]
fn seeds_125_to_250_hold_every_invariant() {
    run_range(125..250);
}

#[test]
fn seeds_250_to_375_hold_every_invariant() {
    run_range(250..375);
}

#[test]
fn seeds_375_to_500_hold_every_invariant() {
    let summary = run_range(375..500);
    // Leader crashes with nothing else going wrong are judged against the
    // crash failover bound; there must be some in every batch.
    assert!(!summary.clean_gaps.is_empty(), "{summary}");
}

#[test]
fn large_clusters_hold_every_invariant() {
    let mut params = SimParams::default();
    params.tier.nodes = 12..=20;
    run_clean(&params, 10_000..10_012);
}
