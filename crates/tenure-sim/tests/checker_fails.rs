//! The checker is not vacuous. Each negative control breaks one assumption
//! of the timing argument on purpose, and the checker must report the
//! overlap that follows, naming seed, nodes and tokens; its twin, with the
//! assumption kept, runs the very same seeds clean.
//!
//! * clocks drifting far beyond the configured bound;
//! * wall clocks straying beyond half the skew bound from true time, with
//!   the early takeover on;
//! * a mutated machine that anchors the leader's deadline at the reply's
//!   receipt instead of the write's send.

use std::ops::Range;
use std::time::Duration;

use tenure_sim::{run_seed, SimParams, SkewBound, ViolationKind};

mod controls;
mod runs;
use controls::{DRIFT, SKEW, WALL_CLOCKS};
use runs::{first_violation, run_clean};

/// The first overlap in `seeds`, checked for its particulars, with the
/// replay command; and the seed it came from.
fn first_overlap(params: &SimParams, seeds: Range<u64>) -> Option<(u64, String)> {
    let (v, replay) = first_violation(params, seeds, |v| v.kind == ViolationKind::Overlap)?;
    assert_eq!(v.nodes.len(), 2, "{v}");
    assert_eq!(v.tokens.len(), 2, "{v}");
    assert_ne!(v.tokens[0], v.tokens[1], "{v}");
    Some((v.seed, format!("{v}\n  replay: {replay}")))
}

#[test]
fn clocks_30_percent_off_with_a_1_percent_bound_overlap() {
    let mut params = SimParams::default();
    (DRIFT.apply)(&mut params.shared);
    let (_, found) =
        first_overlap(&params, 0..10).unwrap_or_else(|| panic!("no overlap with {}", DRIFT.name));
    assert!(found.contains(DRIFT.flags), "{found}");
}

#[test]
fn the_same_seeds_are_clean_within_the_bound() {
    // Control: the very seeds that overlap above are clean when clocks keep
    // to the configured bound.
    let mut params = SimParams::default();
    params.shared.skew = SkewBound::Off;
    run_clean(&params, 0..10);
}

#[test]
fn wall_clocks_beyond_half_the_skew_bound_overlap_through_the_early_takeover() {
    let mut params = SimParams::default();
    (WALL_CLOCKS.apply)(&mut params.shared);
    let (seed, found) = first_overlap(&params, 0..10)
        .unwrap_or_else(|| panic!("no overlap with {}", WALL_CLOCKS.name));
    assert!(found.contains(WALL_CLOCKS.flags), "{found}");
    let report = run_seed(seed, &params).unwrap();
    assert!(
        report.early_takeovers > 0,
        "the overlap came with early takeovers: {found}"
    );
}

#[test]
fn the_same_seeds_are_clean_with_wall_clocks_within_half_the_bound() {
    let mut params = SimParams::default();
    params.shared.skew = SkewBound::On(SKEW);
    run_clean(&params, 0..10);
}

/// With store latency up to 100 ms, a reply can arrive well after the write
/// applied; a deadline counted from the reply then outlives the challenger's
/// wait, which counts from its own first sight of the write.
fn slow_replies() -> SimParams {
    let mut params = SimParams::default();
    params.shared.latency = Duration::from_millis(100);
    params.shared.skew = SkewBound::Off;
    params
}

#[test]
fn deadlines_anchored_at_the_reply_overlap() {
    let mut params = slow_replies();
    params.tier.anchor_at_receive = true;
    let (_, found) =
        first_overlap(&params, 0..20).expect("no overlap with deadlines anchored at the reply");
    assert!(found.contains("--anchor-at-receive"), "{found}");
}

#[test]
fn the_same_seeds_are_clean_with_deadlines_anchored_at_the_send() {
    run_clean(&slow_replies(), 0..20);
}
