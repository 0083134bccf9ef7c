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

/// Hostile catalog contents and a source failing on the catalog leader
/// only (`--catalog-hostile`, issue 39), each drawn per seed.
fn hostile() -> ShardParams {
    let mut params = catalog();
    params.tier.catalog_hostile = true;
    params
}

fn assert_hostile(summary: &ShardSummary) {
    // Part 0s were planted and sources failed (at least one a seed).
    assert!(summary.counts.hostile >= summary.runs.seeds, "{summary}");
    assert!(summary.counts.acquisitions > summary.shards, "{summary}");
}

clean_seed_ranges! {
    hostile(), assert_hostile;
    hostile_catalog_seeds_0_to_4_hold_every_invariant: 0..4,
    hostile_catalog_seeds_4_to_8_hold_every_invariant: 4..8,
}

/// Shorter runs for the controls.
fn hostile_control(apply: impl Fn(&mut ShardParams)) -> ShardParams {
    let mut params = hostile();
    params.shared.fault_phase = Duration::from_secs(30);
    apply(&mut params);
    params
}

#[test]
fn a_source_failing_on_every_member_leaves_the_shard_added_unheld() {
    let params = hostile_control(|p| p.tier.catalog_source_fails_everywhere = true);
    let (v, replay) = first_violation(&params, 0..8, |v| {
        v.kind == ViolationKind::Liveness && v.detail.contains("held by nobody")
    })
    .expect("the set never follows the source once it fails everywhere");
    assert!(v.detail.contains("heal of every fault"), "{v}");
    assert!(
        replay.contains("--catalog-source-fails-everywhere"),
        "{replay}"
    );
}

#[test]
fn a_checker_expecting_the_shard_left_out_sees_it_unheld() {
    let params = hostile_control(|p| p.tier.catalog_expects_left_out = true);
    let (v, replay) = first_violation(&params, 0..8, |v| {
        v.kind == ViolationKind::Liveness && v.detail.contains("held by nobody")
    })
    .expect("the shard of 300 parents is never held");
    assert!(v.detail.contains("are held by nobody"), "{v}");
    assert!(replay.contains("--catalog-expects-left-out"), "{replay}");
}

#[test]
fn a_whole_catalog_of_the_most_parts_costs_more_reads_than_the_bound() {
    let params = hostile_control(|p| p.tier.catalog_plants_whole = true);
    let (v, replay) = first_violation(&params, 0..8, |v| {
        v.kind == ViolationKind::Liveness && v.detail.contains("catalog part reads")
    })
    .expect("reading 4,096 parts at each poll is reported");
    assert!(v.detail.contains("hostile part 0"), "{v}");
    assert!(replay.contains("--catalog-plants-whole"), "{replay}");
}
