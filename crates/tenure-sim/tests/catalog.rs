//! The sharded tier with a changing catalog (`--catalog`): during the fault
//! phase the set's source splits shards (two children after a parent),
//! merges them (a child after two parents), adds and removes shards, and a
//! parent's holder marks it finished. A CI-sized subset of seeds must hold
//! every invariant of the sharded tier, over the catalog's ready shards,
//! and no child may be worked before its parents were marked finished; the
//! checker must not be vacuous: a source that forgets the parents makes it
//! report children worked too early.

use std::time::Duration;

use tenure_sim::report::ViolationKind;
use tenure_sim::shards::{ShardParams, ShardSummary};

mod runs;
use runs::{clean_seed_ranges, first_violation};

fn catalog() -> ShardParams {
    let mut params = ShardParams::default();
    params.tier.catalog = true;
    params
}

fn assert_resharded(summary: &ShardSummary) {
    // The source changed many times, parents were finished, and the tail
    // settled and was measured like a fixed set's.
    assert!(
        summary.counts.reshards >= summary.runs.seeds * 5,
        "{summary}"
    );
    assert!(summary.counts.finished >= summary.runs.seeds, "{summary}");
    // (`shards` counts the indices the sources may use: three per shard
    // listed at the start.)
    assert!(
        summary.counts.acquisitions > summary.shards * 2,
        "{summary}"
    );
    for (phase, (moved, minimum)) in &summary.moves {
        assert_eq!(moved, minimum, "{phase}:\n{summary}");
    }
}

clean_seed_ranges! {
    catalog(), assert_resharded;
    catalog_seeds_0_to_8_hold_every_invariant: 0..8,
    catalog_seeds_8_to_16_hold_every_invariant: 8..16,
}

#[test]
fn a_source_that_forgets_the_parents_has_children_worked_too_early() {
    let mut params = catalog();
    params.tier.catalog_forgets_parents = true;
    params.shared.fault_phase = Duration::from_secs(30);
    let (v, replay) = first_violation(&params, 0..16, |v| v.kind == ViolationKind::ParentOrder)
        .expect("a child worked before its parent was marked finished");
    assert!(v.detail.contains("before its parent"), "{v}");
    assert!(replay.contains("--catalog"), "{replay}");
}
