//! Machine bugs found by the simulation, each reduced to a schedule with
//! explicit times. Each was fixed in the machine; the schedules stay as
//! regression tests.

use std::time::Duration;

use tenure::machine::{Action, Input};
use tenure::{Config, Holder, LeaseRecord, Metadata, Version, Versioned, WallTime};

mod schedule;
use schedule::{at, candidate_a};

fn held_by_b() -> Versioned {
    Versioned {
        record: LeaseRecord {
            holder: Some(Holder {
                id: "b".into(),
                incarnation: 9,
            }),
            token: 4,
            term: Duration::from_secs(2),
            renewed_at: WallTime::from_millis(1_700_000_000_000),
            expires_at: WallTime::from_millis(1_700_000_002_000),
            metadata: Metadata::new(),
        },
        version: Version(7),
    }
}

/// Found by `tenure-sim` (seed 10 of the default parameters: node 0's
/// application stalls at 35.6 s, the leader node 2 crashes at 36.0 s, and
/// from 37.8 s node 0 asks to be woken at an instant already past, over and
/// over; the simulator counts ~300 000 such wake-ups per 1000 seeds with a
/// liveness timeout).
///
/// A candidate whose application stopped pulsing (liveness timeout passed)
/// and that has watched another holder's record long enough to take it over
/// gets `next_wake` = the takeover instant, which is in the past, while
/// `advance_candidate` refuses to acquire because it is not live. Every
/// `Tick` then changes nothing and `next_wake` returns the same past
/// instant, so a driver that sleeps until `next_wake` spins at 100 % CPU
/// for as long as the application stays silent and the record unchanged,
/// which is exactly when the host is already in trouble.
///
/// `Machine::next_wake`, `State::Candidate` arm: the takeover instant is
/// added even when `!self.is_live(now)`; it should be left out then (the
/// next pulse is an input and re-evaluates anyway), leaving `next_read`.
#[test]
fn a_silent_candidate_does_not_busy_wait_on_an_expired_record() {
    let mut config = Config::new(Duration::from_secs(2));
    config.liveness_timeout = Some(Duration::from_secs(2));
    let timing = config.validate().unwrap();
    let (mut m, op) = candidate_a(timing);
    // Reads b's record at 10 ms: takeover allowed from 10 + 2020 ms.
    m.step(
        at(10),
        Input::ReadDone {
            op,
            result: Ok(Some(held_by_b())),
        },
    );
    // The application never pulses: not live from 2000 ms. At 2500 ms the
    // candidate polls again and sees the same record.
    let read = m.step(at(2500), Input::Tick);
    let Some(Action::Read { op, .. }) = read.first() else {
        panic!("expected a poll, got {read:?}")
    };
    let after = m.step(
        at(2510),
        Input::ReadDone {
            op: *op,
            result: Ok(Some(held_by_b())),
        },
    );
    assert!(
        !after.iter().any(|a| matches!(a, Action::Cas { .. })),
        "not live: no takeover ({after:?})"
    );
    // The driver now sleeps until `next_wake` and ticks.
    let now = at(2510);
    for _ in 0..3 {
        let wake = m.next_wake(now);
        let idle = m.step(now, Input::Tick).is_empty();
        assert!(
            !(idle && wake.is_some_and(|w| w <= now.mono)),
            "busy wait: next_wake {wake:?} is not after now {:?} and a tick there does nothing",
            now.mono
        );
    }
}
