//! The elector tier: real electors (engine, publisher, terms) over a faulty
//! in-memory store on tokio's paused clock. A CI-sized subset of seeds must
//! hold every invariant, and the checker must not be vacuous: with clocks
//! or wall clocks beyond their bounds it reports overlapping terms.

use std::ops::Range;

use tenure_sim::elector::{ElectorParams, ElectorSummary};
use tenure_sim::{FaultKind, SkewBound};

mod controls;
mod runs;
use controls::{CLOCK_CONTROLS, SKEW};
use runs::{
    assert_ended, assert_every_kind_injected, clean_seed_ranges, first_work_overlap, run_clean,
};

fn assert_exercised(summary: &ElectorSummary) {
    // The runs did what they are for: many terms and hand-overs under every
    // kind of fault, several groups per process, and measured fail-overs.
    assert!(summary.counts.terms > summary.runs.seeds * 10, "{summary}");
    assert!(
        summary.counts.handovers > summary.runs.seeds * 5,
        "{summary}"
    );
    assert!(summary.groups > summary.runs.seeds, "{summary}");
    // Electors are not paused, and the store's requests are not dropped.
    let not_in_tier = [
        FaultKind::LongPause,
        FaultKind::ShortPause,
        FaultKind::DroppedRequest,
    ];
    assert_every_kind_injected(&summary.counts.faults, &not_in_tier, summary);
    let reasons = ["resigned", "renewal_failed", "shutdown", "liveness_lost"];
    assert_ended(&summary.counts.end_reasons, &reasons, summary);
    assert!(!summary.crash_gaps.is_empty(), "{summary}");
    assert_eq!(summary.heal_gaps.len() as u64, summary.groups, "{summary}");
}

clean_seed_ranges! {
    ElectorParams::default(), assert_exercised;
    elector_seeds_0_to_75_hold_every_invariant: 0..75,
    elector_seeds_75_to_150_hold_every_invariant: 75..150,
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
    first_work_overlap(params, seeds, |_| true).map(|(_, found)| found)
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
