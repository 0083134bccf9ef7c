//! Model checks small enough for CI (each a few seconds on 2 cores): the
//! real machine, every schedule within the bounds, every property; and the
//! two negative controls, which must find an overlap. The larger bounds are
//! `cargo run --release -p tenure-model -- …` (docs/benchmarks.md, "Model
//! checking").

use std::time::Duration;

use tenure_model::properties::names::*;
use tenure_model::{
    check, check_until_failure, Budget, FaultKind, Outcome, Params, Rate, ReleaseKind, Skew,
};

const THREADS: usize = 2;

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

/// Faults of one kind, at most `n` of them, during the first second.
fn faults(kinds: &[FaultKind], n: u8) -> Params {
    Params {
        faults: Budget::new(n, kinds),
        fault_end: secs(1.0),
        ..Params::default()
    }
}

/// One graceful release of `kind`, asked for before `fault_end`, explored
/// up to `horizon` (both in seconds).
fn one_release(kind: ReleaseKind, fault_end: f64, horizon: f64) -> Params {
    Params {
        releases: Budget::new(1, [kind]),
        fault_end: secs(fault_end),
        horizon: Some(secs(horizon)),
        ..Params::default()
    }
}

/// A negative control: the checker must find two valid terms at once.
fn overlap(params: Params) {
    let outcome = check_until_failure(params, THREADS).expect("valid parameters");
    assert!(outcome.violated(ONE_VALID_TERM), "{outcome}");
}

fn holds(params: Params) -> Outcome {
    let outcome = check(params, THREADS).expect("valid parameters");
    println!("{outcome}");
    assert!(outcome.failures.is_empty(), "{outcome}");
    outcome
}

#[test]
fn without_faults_one_node_leads_and_keeps_leading() {
    // The default horizon: the heal bound, so liveness is judged.
    let outcome = holds(Params::default());
    assert!(outcome.unique_states > 100_000, "{outcome}");
    assert!(
        !outcome.reached.contains(&HANDOVER),
        "no fault, no hand-over"
    );
}

#[test]
fn a_crashed_leader_is_succeeded_never_early() {
    let outcome = holds(Params {
        horizon: Some(secs(10.0)),
        ..faults(&[FaultKind::Crash], 1)
    });
    assert!(outcome.reached.contains(&HANDOVER), "{outcome}");
}

#[test]
fn lost_requests_and_replies_break_nothing() {
    holds(Params {
        horizon: Some(secs(6.0)),
        ..faults(&[FaultKind::Lose], 1)
    });
}

#[test]
fn slow_requests_applying_late_break_nothing() {
    holds(Params {
        horizon: Some(secs(5.0)),
        ..faults(&[FaultKind::Delay], 1)
    });
}

#[test]
fn a_paused_node_breaks_nothing() {
    holds(Params {
        fault_end: secs(0.5),
        horizon: Some(secs(4.0)),
        ..faults(&[FaultKind::Pause], 1)
    });
}

#[test]
fn a_graceful_release_hands_over_within_the_bound() {
    let outcome = holds(one_release(ReleaseKind::Shutdown, 0.5, 6.0));
    assert!(outcome.reached.contains(&RELEASED), "{outcome}");
    assert!(outcome.reached.contains(&HANDOVER), "{outcome}");
}

#[test]
fn a_resignation_hands_over_within_the_bound() {
    let outcome = holds(one_release(ReleaseKind::Resign, 0.3, 5.0));
    assert!(outcome.reached.contains(&RELEASED), "{outcome}");
}

#[test]
fn the_wall_clock_takeover_is_safe_within_half_the_skew() {
    // Fast clocks only here (the full set of rates is the documented larger
    // run): the wall-clock wake-up then comes before the wall clock has
    // moved far enough, and the node must wait again without spinning.
    holds(Params {
        rates: vec![Rate::new(9, 8)],
        skew: Some(Skew {
            bound: secs(2.0),
            offset: secs(1.0),
        }),
        horizon: Some(secs(9.0)),
        ..faults(&[FaultKind::Crash], 1)
    });
}

#[test]
fn a_lower_leader_hands_over_to_a_higher_priority_that_asks() {
    // The machine's preemption room under the checker: node 1 (priority 1)
    // asks node 0 (priority 0) at once (a zero delay; its look for a
    // renewal still takes a renewal interval and an operation timeout);
    // every schedule holds every property, and a hand-over by preemption
    // is reached.
    let outcome = holds(Params {
        preempt_after: Some(Duration::ZERO),
        horizon: Some(secs(6.5)),
        ..Params::default()
    });
    assert!(outcome.reached.contains(&PREEMPTED), "{outcome}");
}

#[test]
fn three_nodes_elect_one() {
    holds(Params {
        nodes: 3,
        horizon: Some(secs(3.0)),
        ..Params::default()
    });
}

/// Negative control: clocks drifting at twice the configured bound let a
/// challenger's wait end before the crashed leader's deadline.
#[test]
fn drift_beyond_the_bound_is_caught() {
    overlap(Params {
        rates: vec![Rate::new(6, 8), Rate::new(10, 8)],
        horizon: Some(secs(10.0)),
        ..faults(&[FaultKind::Crash], 1)
    });
}

/// Negative control: a deadline anchored at the reply's receipt outlasts a
/// challenger's wait by the reply's delay.
#[test]
fn deadlines_anchored_at_the_receipt_are_caught() {
    overlap(Params {
        anchor_at_receive: true,
        horizon: Some(secs(10.0)),
        ..faults(&[FaultKind::Crash], 1)
    });
}

/// Negative control of the skew path: wall clocks further from true time
/// than half the skew bound let the early takeover come too early.
#[test]
fn wall_clocks_beyond_half_the_skew_are_caught() {
    overlap(Params {
        skew: Some(Skew {
            bound: secs(2.0),
            offset: secs(2.0),
        }),
        horizon: Some(secs(12.0)),
        ..faults(&[FaultKind::Crash], 1)
    });
}
