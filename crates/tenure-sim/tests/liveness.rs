//! Liveness against the derived bounds: a leader crash with nothing else
//! going wrong is followed by a new term within
//! [`LivenessBounds::crash`](tenure_sim::LivenessBounds), and so is every
//! heal of all faults.

use std::time::Duration;

use tenure_sim::{run_seed, FaultRates, LivenessBounds, Notify, SimParams, SkewBound};

/// Crashes only, and no skew bound: every failover waits out the term on
/// the monotonic clock.
fn crashes_only() -> SimParams {
    let mut params = SimParams {
        faults: FaultRates::crash_only(),
        ..SimParams::default()
    };
    params.shared.skew = SkewBound::Off;
    params
}

#[test]
fn crash_failover_stays_within_the_bound() {
    let mut params = crashes_only();
    params.shared.notify = Notify::Off;
    let mut gaps = Vec::new();
    let mut bound = Duration::ZERO;
    for seed in 0..60 {
        let r = run_seed(seed, &params).unwrap();
        assert!(r.run.violations.is_empty(), "{:?}", r.run.violations);
        bound = r.crash_bound;
        let tail = r
            .crash_gaps
            .iter()
            .find(|c| c.tail)
            .expect("the tail crashes the leader");
        assert!(tail.clean, "the tail crash is undisturbed: {tail:?}");
        for c in r.crash_gaps.iter().filter(|c| c.clean) {
            let gap = c.gap.expect("a new term after a checked crash");
            assert!(gap <= bound, "seed {seed}: {c:?} exceeds {bound:?}");
            gaps.push(gap);
        }
    }
    assert!(gaps.len() >= 120, "only {} checked failovers", gaps.len());
    let max = gaps.iter().max().copied().unwrap();
    // The failover is measured, not trivially small: polling candidates
    // must wait out the term (2 s × 1.01 on their clocks) after they last
    // saw the record change, which is at most one renewal interval (2 s / 3)
    // plus a round trip before the crash.
    let timing = params.shared.timing(None, None).unwrap();
    let floor = timing.term.checked_sub(timing.renew_interval).unwrap();
    assert!(max > floor, "max gap {max:?} below {floor:?}");
    // And the library's own figure plus our round trips is what we check.
    let slow = LivenessBounds::slow_op(&timing);
    let derived = LivenessBounds::new(&timing, params.shared.latency, slow);
    assert_eq!(bound, derived.crash);
    assert!(derived.crash > timing.bounds().crash_failover);
    assert!(derived.crash < timing.bounds().crash_failover + Duration::from_millis(250));
}

#[test]
fn notifications_shorten_the_failover() {
    let median = |notify| {
        let mut params = crashes_only();
        params.shared.notify = notify;
        let mut gaps: Vec<Duration> = (0..20)
            .flat_map(|seed| run_seed(seed, &params).unwrap().crash_gaps)
            .filter(|c| c.clean)
            .filter_map(|c| c.gap)
            .collect();
        gaps.sort();
        gaps[gaps.len() / 2]
    };
    let (polling, notified) = (median(Notify::Off), median(Notify::On));
    assert!(notified < polling, "{notified:?} vs {polling:?}");
}

#[test]
fn a_leader_is_back_within_the_heal_bound_after_every_fault() {
    let params = SimParams::default();
    for seed in 500..530 {
        let r = run_seed(seed, &params).unwrap();
        assert!(r.run.violations.is_empty(), "{:?}", r.run.violations);
        let gap = r.heal_gap.expect("a term after the faults healed");
        assert!(
            gap <= r.heal_bound,
            "seed {seed}: {gap:?} > {:?}",
            r.heal_bound
        );
    }
}
