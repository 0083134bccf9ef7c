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

#[test]
fn every_tier_s_replay_command_names_every_non_default_parameter() {
    use std::time::Duration;

    use tenure_sim::elector::{ElectorFaultRates, ElectorParams};
    use tenure_sim::shards::{ShardFaultRates, ShardParams};
    use tenure_sim::{FaultRates, Liveness, Notify, SkewBound};

    let machines = SimParams {
        nodes: 4..=9,
        term: Duration::from_millis(1500),
        drift: 0.02,
        actual_drift: Some(0.3),
        skew: SkewBound::On(Duration::from_millis(300)),
        actual_wall_offset: Some(Duration::from_millis(400)),
        notify: Notify::Off,
        liveness: Liveness::On(Duration::from_secs(3)),
        fault_phase: Duration::from_secs(40),
        latency: Duration::from_millis(15),
        anchor_at_receive: true,
        faults: FaultRates::none(),
        ..SimParams::default()
    };
    assert_eq!(
        machines.replay_command(5),
        "cargo run -p tenure-sim --release -- --seed 5 --trace --nodes 4..9 --term-ms 1500 \
         --drift 0.02 --actual-drift 0.3 --skew on:300 --actual-wall-offset-ms 400 --notify off \
         --liveness on:3000 --fault-secs 40 --latency-ms 15 --anchor-at-receive --no-faults"
    );
    let custom = SimParams {
        faults: FaultRates {
            crash_every: None,
            ..FaultRates::default()
        },
        ..SimParams::default()
    };
    assert_eq!(
        custom.replay_command(6),
        "cargo run -p tenure-sim --release -- --seed 6 --trace \
         (custom fault rates: replay with run_seed and the same SimParams)"
    );

    let electors = ElectorParams {
        nodes: 3..=4,
        groups: 2..=2,
        skew: SkewBound::Off,
        liveness: Liveness::Off,
        notify: Notify::Random,
        faults: ElectorFaultRates::none(),
        ..ElectorParams::default()
    };
    assert_eq!(
        electors.replay_command(8),
        "cargo run -p tenure-sim --release -- --elector --seed 8 --trace --nodes 3..4 \
         --groups 2..2 --skew off --liveness off --no-faults"
    );
    let custom = ElectorParams {
        faults: ElectorFaultRates {
            storms: false,
            ..ElectorFaultRates::default()
        },
        ..ElectorParams::default()
    };
    assert_eq!(
        custom.replay_command(9),
        "cargo run -p tenure-sim --release -- --elector --seed 9 --trace \
         (custom fault rates: replay with elector::run_seed and the same ElectorParams)"
    );

    let shards = ShardParams {
        members: 3..=6,
        max_members: 10,
        shards: 8..=12,
        term: Duration::from_secs(1),
        notify: Notify::On,
        faults: ShardFaultRates::none(),
        ..ShardParams::default()
    };
    assert_eq!(
        shards.replay_command(10),
        "cargo run -p tenure-sim --release -- --shards --seed 10 --trace --nodes 3..6 \
         --max-members 10 --shard-count 8..12 --term-ms 1000 --notify on --no-faults"
    );
    let custom = ShardParams {
        faults: ShardFaultRates {
            join_every: None,
            ..ShardFaultRates::default()
        },
        ..ShardParams::default()
    };
    assert_eq!(
        custom.replay_command(11),
        "cargo run -p tenure-sim --release -- --shards --seed 11 --trace \
         (custom fault rates: replay with shards::run_seed and the same ShardParams)"
    );
}
