//! The checker is not vacuous: with clocks drifting far beyond the
//! configured bound, the old leader's term outlives the challenger's wait
//! and the checker reports the overlap, naming seed, nodes and tokens.

use tenure_sim::{run_seed, SimParams, SkewBound, ViolationKind};

fn first_overlap(params: &SimParams, seeds: std::ops::Range<u64>) -> Option<String> {
    for seed in seeds {
        let report = run_seed(seed, params).unwrap();
        if let Some(v) = report
            .violations
            .iter()
            .find(|v| v.kind == ViolationKind::Overlap)
        {
            assert_eq!(v.seed, seed);
            assert_eq!(v.nodes.len(), 2, "{v}");
            assert_eq!(v.tokens.len(), 2, "{v}");
            assert!(v.tokens[0] < v.tokens[1], "{v}");
            return Some(format!("{v}\n  replay: {}", params.replay_command(seed)));
        }
    }
    None
}

#[test]
fn clocks_30_percent_off_with_a_1_percent_bound_overlap() {
    // Only monotonic clocks: the overlap comes from the drift argument
    // alone, not from the wall-clock early takeover.
    let params = SimParams {
        drift: 0.01,
        actual_drift: Some(0.3),
        skew: SkewBound::Off,
        ..SimParams::default()
    };
    let found = first_overlap(&params, 0..10).expect("no overlap found with 30 % drift");
    assert!(found.contains("--actual-drift 0.3"), "{found}");
    assert!(found.contains("--skew off"), "{found}");
}

#[test]
fn the_same_seeds_are_clean_within_the_bound() {
    // Control: the very seeds that overlap above are clean when clocks keep
    // to the configured bound.
    let params = SimParams {
        skew: SkewBound::Off,
        ..SimParams::default()
    };
    for seed in 0..10 {
        let report = run_seed(seed, &params).unwrap();
        assert!(report.violations.is_empty(), "{:?}", report.violations);
    }
}
