//! A seed replays exactly: same events, same actions, same digest.

use tenure_sim::{run_seed, SimParams};

#[test]
fn a_seed_replays_byte_identically() {
    let params = SimParams {
        trace: true,
        nodes: 5..=12,
        ..SimParams::default()
    };
    for seed in [3, 1_000_003] {
        let a = run_seed(seed, &params).unwrap();
        let b = run_seed(seed, &params).unwrap();
        assert!(a.trace.len() > 1000, "a trace worth comparing");
        assert_eq!(a.trace, b.trace, "trace of seed {seed} differs on replay");
        assert_eq!(a.digest, b.digest);
        assert_eq!(a.events, b.events);
        assert_eq!(a.elections, b.elections);
    }
}

#[test]
fn keeping_a_trace_does_not_change_the_run() {
    let traced = SimParams {
        trace: true,
        ..SimParams::default()
    };
    let plain = SimParams::default();
    let a = run_seed(11, &traced).unwrap();
    let b = run_seed(11, &plain).unwrap();
    assert_eq!(a.digest, b.digest);
    assert!(b.trace.is_empty());
}

#[test]
fn different_seeds_differ() {
    let params = SimParams::default();
    let a = run_seed(1, &params).unwrap();
    let b = run_seed(2, &params).unwrap();
    assert_ne!(a.digest, b.digest);
}

#[test]
fn the_replay_command_names_the_seed_and_non_default_parameters() {
    let d = SimParams::default();
    assert_eq!(
        d.replay_command(42),
        "cargo run -p tenure-sim --release -- --seed 42 --trace"
    );
    let p = SimParams {
        nodes: 3..=20,
        faults: tenure_sim::FaultRates::crash_only(),
        ..SimParams::default()
    };
    assert_eq!(
        p.replay_command(7),
        "cargo run -p tenure-sim --release -- --seed 7 --trace --nodes 3..20 --crash-only"
    );
}
