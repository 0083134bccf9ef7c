//! The elector tier: real electors (engine, publisher, terms) over a faulty
//! in-memory store on tokio's paused clock. A CI-sized subset of seeds must
//! hold every invariant, and the checker must not be vacuous: with clocks
//! or wall clocks beyond their bounds it reports overlapping terms.

use std::ops::Range;

use tenure_sim::elector::{ElectorParams, ElectorSummary};
use tenure_sim::{FaultKind, SkewBound, ViolationKind};

mod controls;
mod runs;
use controls::{CLOCK_CONTROLS, SKEW};
use runs::{first_violation, run_clean};

fn assert_exercised(summary: &ElectorSummary) {
    // The runs did what they are for: many terms and hand-overs under every
    // kind of fault, several groups per process, and measured fail-overs.
    assert!(summary.counts.terms > summary.runs.seeds * 10, "{summary}");
    assert!(
        summary.counts.handovers > summary.runs.seeds * 5,
        "{summary}"
    );
    assert!(summary.groups > summary.runs.seeds, "{summary}");
    for kind in [
        FaultKind::Crash,
        FaultKind::Partition,
        FaultKind::SlowOp,
        FaultKind::StoreFailure,
        FaultKind::LostReply,
        FaultKind::Resign,
        FaultKind::Shutdown,
        FaultKind::Stall,
    ] {
        assert!(
            summary.counts.faults[kind] > 0,
            "no {kind} injected:\n{summary}"
        );
    }
    for reason in ["resigned", "renewal_failed", "shutdown", "liveness_lost"] {
        assert!(
            summary
                .counts
                .end_reasons
                .get(reason)
                .is_some_and(|&n| n > 0),
            "no term ended as {reason}:\n{summary}"
        );
    }
    assert!(!summary.crash_gaps.is_empty(), "{summary}");
    assert_eq!(summary.heal_gaps.len() as u64, summary.groups, "{summary}");
}

#[test]
fn elector_seeds_0_to_75_hold_every_invariant() {
    let summary = run_clean(&ElectorParams::default(), 0..75);
    assert_exercised(&summary);
}

#[test]
fn elector_seeds_75_to_150_hold_every_invariant() {
    let summary = run_clean(&ElectorParams::default(), 75..150);
    assert_exercised(&summary);
}

#[test]
fn larger_clusters_with_many_groups_hold_every_invariant() {
    let mut params = ElectorParams::default();
    params.tier.nodes = 6..=10;
    params.tier.groups = 4..=8;
    let summary = run_clean(&params, 1000..1010);
    assert!(summary.groups >= 40, "{summary}");
}

/// The first overlap of two terms' work in `seeds`, with its replay command.
///
/// The electors draw their retry jitter themselves, so a seed's run can
/// differ in detail from one run to the next; the ranges searched below are
/// wide enough that an overlap is certain in practice (a third to a half of
/// all seeds overlap under these controls, and the search stops at the
/// first).
fn first_overlap(params: &ElectorParams, seeds: Range<u64>) -> Option<String> {
    let (v, replay) = first_violation(params, seeds, |v| {
        v.kind == ViolationKind::Overlap && v.detail.contains("work of two terms")
    })?;
    assert_eq!(v.tokens.len(), 2, "{v}");
    assert!(v.tokens[0] < v.tokens[1], "{v}");
    Some(format!("{v}\n  replay: {replay}"))
}

#[test]
fn clocks_beyond_their_bounds_make_the_real_electors_overlap() {
    // The wall-clock control overlaps in fewer seeds: search further.
    for (control, seeds) in CLOCK_CONTROLS.iter().zip([0..50, 0..80]) {
        let mut params = ElectorParams::default();
        (control.apply)(&mut params.shared);
        let found = first_overlap(&params, seeds)
            .unwrap_or_else(|| panic!("no overlap with {}", control.name));
        assert!(found.contains(control.flags), "{found}");
    }
}

#[test]
fn the_same_seeds_are_clean_within_the_bounds() {
    for skew in [SkewBound::Off, SkewBound::On(SKEW)] {
        let mut params = ElectorParams::default();
        params.shared.skew = skew;
        run_clean(&params, 0..10);
    }
}
