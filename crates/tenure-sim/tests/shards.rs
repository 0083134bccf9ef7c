//! The sharded tier: real `Shards` members joining, leaving, crashing,
//! pausing and losing store replies over a faulty in-memory store on
//! tokio's paused clock. A CI-sized subset of seeds must hold every
//! invariant (no shard worked or held by two terms at once, tokens rising
//! per shard, the set settled and balanced within the derived bounds after
//! the faults, a crash, a join and a graceful leave, moving only what it
//! must), and the checker must not be vacuous: with clocks or wall clocks
//! beyond their bounds it reports overlapping terms on a shard.

use std::ops::Range;
use std::time::Duration;

use tenure_sim::shards::{Phase, ShardParams, ShardSummary};
use tenure_sim::FaultKind;

mod controls;
mod runs;
use controls::CLOCK_CONTROLS;
use runs::{assert_ended, assert_every_kind_injected, clean_seed_ranges, first_work_overlap};

fn assert_exercised(summary: &ShardSummary) {
    // The runs did what they are for: members came and went in every way,
    // under every kind of store trouble, shards changed hands many times,
    // and every change of the tail settled and was measured.
    assert!(
        summary.counts.acquisitions > summary.shards * 3,
        "{summary}"
    );
    assert!(summary.counts.joins > 0, "{summary}");
    assert!(summary.counts.incarnations > summary.members, "{summary}");
    // Members do not resign or pulse (a graceful leave counts as a
    // shutdown), and the store's requests are not dropped.
    let not_in_tier = [
        FaultKind::Resign,
        FaultKind::Stall,
        FaultKind::DroppedRequest,
    ];
    assert_every_kind_injected(&summary.counts.faults, &not_in_tier, summary);
    let reasons = ["resigned", "renewal_failed", "shutdown"];
    assert_ended(&summary.counts.releases, &reasons, summary);
    for phase in Phase::ALL {
        let settled = summary.gaps.get(&phase).map_or(0, Vec::len) as u64;
        assert_eq!(settled, summary.runs.seeds, "{phase}:\n{summary}");
    }
    // Even seeds start every member at once, and settle from it.
    let together = summary.gaps.get(&Phase::Start).map_or(0, Vec::len) as u64;
    assert!(summary.started_together > 0, "{summary}");
    assert_eq!(together, summary.started_together, "{summary}");
    for (phase, (moved, minimum)) in &summary.moves {
        assert_eq!(moved, minimum, "{phase}:\n{summary}");
        assert!(*minimum > 0, "{phase}:\n{summary}");
    }
}

clean_seed_ranges! {
    ShardParams::default(), assert_exercised;
    shard_seeds_0_to_8_hold_every_invariant: 0..8,
    shard_seeds_8_to_16_hold_every_invariant: 8..16,
}

/// The first overlap of two members' work on one shard in `seeds`, with
/// its replay command.
///
/// The library draws its retry and listing jitter itself, so a seed's run
/// can differ in detail from one run to the next; the ranges searched below
/// are wide enough that an overlap is certain in practice (under these
/// controls about a third of all seeds overlap, and the search stops at the
/// first).
fn first_overlap(params: &ShardParams, seeds: Range<u64>) -> Option<String> {
    let (v, found) = first_work_overlap(params, seeds, |v| v.nodes[0] != v.nodes[1])?;
    assert!(v.detail.starts_with("shard "), "{v}");
    Some(found)
}

#[test]
fn clocks_beyond_their_bounds_make_two_members_work_one_shard() {
    for control in &CLOCK_CONTROLS {
        let mut params = ShardParams::default();
        // A short fault phase: the search runs many seeds.
        params.shared.fault_phase = Duration::from_secs(20);
        (control.apply)(&mut params.shared);
        let found = first_overlap(&params, 0..40)
            .unwrap_or_else(|| panic!("no overlap with {}", control.name));
        assert!(found.contains(control.flags), "{found}");
    }
}
