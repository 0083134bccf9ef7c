//! Many seeds with the default parameters: every kind of fault, 3 to 7
//! nodes, about 110 s of simulated time each. Not one invariant may break.
//!
//! Split into four tests so that the test runner spreads them over cores.

use tenure_sim::{run_seed, FaultKind, SimParams, Summary};

fn run_range(seeds: std::ops::Range<u64>) -> Summary {
    let params = SimParams::default();
    let mut summary = Summary::default();
    let mut failures = Vec::new();
    for seed in seeds {
        let report = run_seed(seed, &params).unwrap();
        for v in &report.violations {
            failures.push(format!("{v}\n  replay: {}", params.replay_command(seed)));
        }
        summary.add(&report);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The runs did what they are for: elections under every kind of fault.
    assert!(summary.elections > summary.seeds * 5, "{summary}");
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
    let params = SimParams {
        nodes: 12..=20,
        ..SimParams::default()
    };
    for seed in 10_000..10_012 {
        let report = run_seed(seed, &params).unwrap();
        assert!(
            report.violations.is_empty(),
            "{:?}\n  replay: {}",
            report.violations,
            params.replay_command(seed)
        );
    }
}
