//! The timing rules, one explicit schedule each.

use std::time::Duration;

use super::*;
use crate::clock::WallTime;
use crate::config::Config;

const T: u64 = 9_000; // term in ms: renew 3 s, retry 2.25 s, grace 0.9 s

fn timing() -> Timing {
    let mut c = Config::new(Duration::from_millis(T));
    c.retry_jitter = Some(Duration::ZERO); // exact schedules
    c.validate().unwrap()
}

fn at(ms: u64) -> Now {
    at_mono(MonoTime::from_nanos(ms * 1_000_000))
}

fn at_mono(mono: MonoTime) -> Now {
    Now {
        mono,
        wall: WallTime::from_millis(1_700_000_000_000 + mono.as_nanos() / 1_000_000),
    }
}

fn me(id: &str) -> Holder {
    Holder {
        id: id.into(),
        incarnation: 1,
    }
}

fn machine(id: &str, timing: Timing) -> Machine {
    Machine::new(timing, me(id), Metadata::address("x:1"), 7, at(0))
}

fn held(by: &str, token: u64, version: u64) -> Versioned {
    Versioned {
        record: LeaseRecord {
            holder: Some(me(by)),
            token,
            term: Duration::from_millis(T),
            renewed_at: WallTime::from_millis(1_700_000_000_000),
            expires_at: WallTime::from_millis(1_700_000_000_000 + T),
            metadata: Metadata::new(),
        },
        version: Version(version),
    }
}

fn read_op(actions: &[Action]) -> OpId {
    match actions.iter().find(|a| matches!(a, Action::Read { .. })) {
        Some(Action::Read { op, .. }) => *op,
        other => panic!("expected a read in {actions:?}, got {other:?}"),
    }
}

fn cas_op(actions: &[Action]) -> (OpId, Option<Version>, LeaseRecord) {
    match actions.iter().find(|a| matches!(a, Action::Cas { .. })) {
        Some(Action::Cas {
            op,
            expected,
            record,
            ..
        }) => (*op, *expected, record.clone()),
        _ => panic!("expected a compare-and-swap in {actions:?}"),
    }
}

fn read(m: &mut Machine, now: Now, op: OpId, current: Option<Versioned>) -> Vec<Action> {
    m.step(
        now,
        Input::ReadDone {
            op,
            result: Ok(current),
        },
    )
}

fn cas(m: &mut Machine, now: Now, op: OpId, outcome: CasOutcome) -> Vec<Action> {
    m.step(
        now,
        Input::CasDone {
            op,
            result: Ok(outcome),
        },
    )
}

/// Drives a fresh machine through acquisition on an empty store at t=0.
fn leader(id: &str) -> (Machine, LeaseRecord) {
    let mut m = machine(id, timing());
    let a = m.step(at(0), Input::Tick);
    let a = read(&mut m, at(0), read_op(&a), None);
    let (op, expected, record) = cas_op(&a);
    assert_eq!(expected, None);
    let a = cas(&mut m, at(2), op, CasOutcome::Applied(Version(1)));
    assert!(matches!(a[..], [Action::Elected { token: 1, .. }]), "{a:?}");
    (m, record)
}

#[test]
fn acquires_on_empty_with_token_one_and_deadline_from_send() {
    let mut m = machine("a", timing());
    let a = m.step(at(0), Input::Tick);
    let a = read(&mut m, at(5), read_op(&a), None);
    let (op, _, record) = cas_op(&a);
    assert_eq!(record.token, 1);
    assert_eq!(record.holder, Some(me("a")));
    assert_eq!(record.metadata.get("address"), Some("x:1"));
    // CAS sent at 5 ms, reply at 40 ms: the deadline counts from the send.
    let a = cas(&mut m, at(40), op, CasOutcome::Applied(Version(1)));
    let validity = timing().leader_validity;
    assert_eq!(
        a,
        vec![Action::Elected {
            token: 1,
            deadline: at(5).mono + validity
        }]
    );
    assert_eq!(m.phase(), Phase::Leader { token: 1 });
}

#[test]
fn loses_the_race_then_follows_the_winner() {
    let mut m = machine("b", timing());
    let a = m.step(at(0), Input::Tick);
    let a = read(&mut m, at(1), read_op(&a), None);
    let (op, _, _) = cas_op(&a);
    let a = cas(&mut m, at(2), op, CasOutcome::Conflict);
    let a = read(&mut m, at(3), read_op(&a), Some(held("a", 1, 1)));
    assert_eq!(
        a,
        vec![Action::LeaderChanged {
            leader: Some(held("a", 1, 1))
        }]
    );
    assert_eq!(m.phase(), Phase::Candidate);
}

#[test]
fn renews_keeping_the_token_and_extends_the_deadline() {
    let (mut m, _) = leader("a");
    let renew_at = timing().renew_interval.as_millis() as u64;
    assert!(
        m.step(at(renew_at - 1), Input::Tick).is_empty(),
        "not before the renew interval"
    );
    let a = m.step(at(renew_at), Input::Tick);
    let (op, expected, record) = cas_op(&a);
    assert_eq!(expected, Some(Version(1)));
    assert_eq!(record.token, 1, "renewal keeps the token");
    let a = cas(
        &mut m,
        at(renew_at + 20),
        op,
        CasOutcome::Applied(Version(2)),
    );
    assert_eq!(
        a,
        vec![Action::Renewed {
            token: 1,
            deadline: at(renew_at).mono + timing().leader_validity,
            latency: Duration::from_millis(20),
        }]
    );
}

#[test]
fn failing_renewals_step_down_before_the_deadline() {
    let (mut m, _) = leader("a");
    let deadline = at(0).mono + timing().leader_validity;
    let stop_at = deadline - timing().stop_grace;
    let mut now_ms = timing().renew_interval.as_millis() as u64;
    let mut ended = None;
    while now_ms < 20_000 {
        let a = m.step(at(now_ms), Input::Tick);
        for action in &a {
            if let Action::Cas { op, .. } = action {
                let r = m.step(
                    at(now_ms + 1),
                    Input::CasDone {
                        op: *op,
                        result: Err(StoreError::Timeout(Duration::from_millis(1))),
                    },
                );
                assert!(r.is_empty(), "{r:?}");
            }
            if let Action::EndTerm {
                reason,
                work_deadline,
                ..
            } = action
            {
                ended = Some((now_ms, reason.clone(), *work_deadline));
            }
        }
        if ended.is_some() {
            break;
        }
        now_ms = m.next_wake(at(now_ms)).unwrap().as_nanos() / 1_000_000;
        assert!(now_ms < 20_000);
    }
    let (when, reason, work_deadline) = ended.expect("stepped down");
    assert_eq!(reason, EndReason::RenewalFailed);
    assert_eq!(
        at(when).mono,
        stop_at,
        "steps down exactly stop_grace before the deadline"
    );
    assert_eq!(work_deadline, deadline);
    assert_eq!(m.phase(), Phase::Candidate, "keeps standing");
}

#[test]
fn takes_over_only_after_observing_the_record_unchanged_for_term_plus_drift() {
    let mut m = machine("b", timing());
    let a = m.step(at(0), Input::Tick);
    // First sight of a's record at t = 100 ms.
    read(&mut m, at(100), read_op(&a), Some(held("a", 4, 9)));
    let wait = timing().takeover_wait(Duration::from_millis(T));
    let takeover = at(100).mono + wait;
    // Polls see the same version; the anchor stays at the first sight.
    let mut now = at(100);
    loop {
        now = at_mono(m.next_wake(now).unwrap());
        let a = m.step(now, Input::Tick);
        if let Some(Action::Cas {
            expected, record, ..
        }) = a.iter().find(|a| matches!(a, Action::Cas { .. }))
        {
            assert_eq!(
                now.mono, takeover,
                "takeover exactly term × (1 + drift) after first sight"
            );
            assert_eq!(*expected, Some(Version(9)));
            assert_eq!(record.token, 5, "a new holder raises the token");
            break;
        }
        assert!(now.mono < takeover);
        read(&mut m, now, read_op(&a), Some(held("a", 4, 9)));
    }
}

#[test]
fn a_renewal_seen_by_the_challenger_restarts_its_wait() {
    let mut m = machine("b", timing());
    let a = m.step(at(0), Input::Tick);
    read(&mut m, at(0), read_op(&a), Some(held("a", 4, 9)));
    let a = m.step(at(2_500), Input::Tick);
    read(&mut m, at(2_500), read_op(&a), Some(held("a", 4, 10)));
    let wait = timing().takeover_wait(Duration::from_millis(T));
    // The old anchor (t=0) must not be used any more.
    let a = m.step(
        at(0)
            .mono
            .as_nanos()
            .checked_add(0)
            .map(|_| at(10_200))
            .unwrap(),
        Input::Tick,
    );
    assert!(!a.iter().any(|a| matches!(a, Action::Cas { .. })), "{a:?}");
    let _ = wait;
}

#[test]
fn takes_a_released_record_at_once_and_raises_the_token() {
    let mut m = machine("b", timing());
    let a = m.step(at(0), Input::Tick);
    let mut released = held("a", 4, 9);
    released.record.holder = None;
    let a = read(&mut m, at(1), read_op(&a), Some(released));
    let (op, expected, record) = cas_op(&a);
    assert_eq!(expected, Some(Version(9)));
    assert_eq!(record.token, 5);
    cas(&mut m, at(2), op, CasOutcome::Applied(Version(10)));
    assert_eq!(m.phase(), Phase::Leader { token: 5 });
}

#[test]
fn resign_drains_then_releases_keeping_the_token() {
    let (mut m, _) = leader("a");
    let a = m.step(at(100), Input::Resign);
    assert!(matches!(
        a[..],
        [Action::EndTerm {
            token: 1,
            reason: EndReason::Resigned,
            ..
        }]
    ));
    assert!(
        m.step(at(150), Input::Tick).is_empty(),
        "waits for the work to drain"
    );
    let a = m.step(at(200), Input::Drained { token: 1 });
    let (op, expected, record) = cas_op(&a);
    assert_eq!(expected, Some(Version(1)));
    assert_eq!(record.holder, None);
    assert_eq!(
        record.token, 1,
        "a release keeps the token for the next holder to raise"
    );
    let a = cas(&mut m, at(210), op, CasOutcome::Applied(Version(2)));
    assert!(a.is_empty());
    assert_eq!(m.phase(), Phase::Candidate, "stands again");
    // It holds off a full poll period so others can take the lease.
    let hold = timing().retry_interval + timing().retry_jitter;
    assert_eq!(m.next_wake(at(210)), Some(at(210).mono + hold));
}

#[test]
fn shutdown_drains_bounded_by_the_deadline_then_releases_and_stops() {
    let (mut m, _) = leader("a");
    let a = m.step(at(100), Input::Shutdown);
    assert!(matches!(
        a[..],
        [Action::EndTerm {
            reason: EndReason::Shutdown,
            ..
        }]
    ));
    let deadline = at(0).mono + timing().leader_validity;
    assert_eq!(
        m.next_wake(at(100)),
        Some(deadline),
        "the drain is bounded by the deadline"
    );
    let deadline_ms = deadline.as_nanos() / 1_000_000;
    let a = m.step(at(deadline_ms), Input::Tick);
    let (op, _, record) = cas_op(&a);
    assert_eq!(record.holder, None);
    let a = cas(
        &mut m,
        at(deadline_ms + 1),
        op,
        CasOutcome::Applied(Version(2)),
    );
    assert_eq!(a, vec![Action::Stopped]);
    assert_eq!(m.phase(), Phase::Stopped);
}

#[test]
fn shutdown_of_a_candidate_stops_without_ending_a_term() {
    let mut m = machine("a", timing());
    m.step(at(0), Input::Tick);
    assert_eq!(m.step(at(1), Input::Shutdown), vec![Action::Stopped]);
}

#[test]
fn superseded_leader_ends_its_term_at_once_and_keeps_standing() {
    let (mut m, _) = leader("a");
    let renew_at = timing().renew_interval.as_millis() as u64;
    let a = m.step(at(renew_at), Input::Tick);
    let (op, _, _) = cas_op(&a);
    let a = cas(&mut m, at(renew_at + 1), op, CasOutcome::Conflict);
    let a = read(&mut m, at(renew_at + 2), read_op(&a), Some(held("z", 2, 5)));
    assert_eq!(
        a[0],
        Action::EndTerm {
            token: 1,
            reason: EndReason::Superseded {
                by: Some("z".into())
            },
            work_deadline: at(renew_at + 2).mono,
        }
    );
    assert_eq!(
        a[1],
        Action::LeaderChanged {
            leader: Some(held("z", 2, 5))
        }
    );
    assert_eq!(m.phase(), Phase::Candidate);
}

#[test]
fn a_lost_renewal_reply_is_recognised_as_our_own_write() {
    let (mut m, record) = leader("a");
    let renew_at = timing().renew_interval.as_millis() as u64;
    let a = m.step(at(renew_at), Input::Tick);
    let (op, _, _) = cas_op(&a);
    // The write applied (version 2) but the reply was lost.
    m.step(
        at(renew_at + 100),
        Input::CasDone {
            op,
            result: Err(StoreError::Timeout(Duration::from_millis(100))),
        },
    );
    let retry = renew_at + 100 + timing().retry_interval.as_millis() as u64 / 2;
    let a = m.step(at(retry), Input::Tick);
    let (op, expected, _) = cas_op(&a);
    assert_eq!(expected, Some(Version(1)));
    let a = cas(&mut m, at(retry + 1), op, CasOutcome::Conflict);
    let ours = Versioned {
        record: record.clone(),
        version: Version(2),
    };
    let a = read(&mut m, at(retry + 2), read_op(&a), Some(ours));
    // No term change: it renews at once against the adopted version.
    let (_, expected, record) = cas_op(&a);
    assert_eq!(expected, Some(Version(2)));
    assert_eq!(record.token, 1);
    assert_eq!(m.phase(), Phase::Leader { token: 1 });
}

#[test]
fn reacquires_after_losing_and_the_token_rises() {
    let (mut m, _) = leader("a");
    // Superseded by z (token 2), then z releases.
    let renew_at = timing().renew_interval.as_millis() as u64;
    let a = m.step(at(renew_at), Input::Tick);
    let (op, _, _) = cas_op(&a);
    let a = cas(&mut m, at(renew_at), op, CasOutcome::Conflict);
    read(&mut m, at(renew_at), read_op(&a), Some(held("z", 2, 5)));
    // The superseded term's work finishes stopping.
    m.step(at(renew_at), Input::Drained { token: 1 });
    let mut released = held("z", 2, 6);
    released.record.holder = None;
    let a = m.step(at(renew_at + 1), Input::Changed);
    let a = read(&mut m, at(renew_at + 2), read_op(&a), Some(released));
    let (op, _, record) = cas_op(&a);
    assert_eq!(record.token, 3);
    let a = cas(
        &mut m,
        at(renew_at + 3),
        op,
        CasOutcome::Applied(Version(7)),
    );
    assert!(matches!(a[..], [Action::Elected { token: 3, .. }]));
}

#[test]
fn early_takeover_by_wall_clock_only_with_a_skew_bound() {
    let mut c = Config::new(Duration::from_millis(T));
    c.retry_jitter = Some(Duration::ZERO);
    c.max_clock_skew = Some(Duration::from_millis(500));
    let with_skew = c.validate().unwrap();
    // A record whose wall expiry (9 s) is long past (crashed leader, fresh challenger).
    let stale = held("a", 4, 9); // expires at wall 1_700_000_010_000
    let late = 20_000;
    let mut m = machine("b", with_skew);
    let a = m.step(at(late), Input::Tick);
    let a = read(&mut m, at(late), read_op(&a), Some(stale.clone()));
    let (_, expected, _) = cas_op(&a);
    assert_eq!(expected, Some(Version(9)), "takes over at once");

    // Within the skew bound of the wall expiry: must wait.
    let mut m = machine("b", with_skew_clone());
    let a = m.step(at(8_400), Input::Tick);
    let a = read(&mut m, at(8_400), read_op(&a), Some(stale.clone()));
    assert!(!a.iter().any(|a| matches!(a, Action::Cas { .. })), "{a:?}");
    // And once the skew has passed, the wake-up comes at that instant.
    let wake = m.next_wake(at(8_400)).unwrap();
    assert_eq!(wake, at(9_501).mono);

    // Without a skew bound the wall clock is ignored.
    let mut m = machine("b", timing());
    let a = m.step(at(late), Input::Tick);
    let a = read(&mut m, at(late), read_op(&a), Some(stale));
    assert!(!a.iter().any(|a| matches!(a, Action::Cas { .. })));

    fn with_skew_clone() -> Timing {
        let mut c = Config::new(Duration::from_millis(T));
        c.retry_jitter = Some(Duration::ZERO);
        c.max_clock_skew = Some(Duration::from_millis(500));
        c.validate().unwrap()
    }
}

/// Found by the model checker (`tenure-model`, the wall-clock takeover with
/// a crashed leader): once the wall clock had passed the record's expiry
/// plus the skew bound, `next_wake` answered "one millisecond from now"
/// each time it was asked, so the instant it had named receded as it came.
/// The elector ticks at the instant it scheduled and took over anyway, but
/// a driver that asks again before ticking never took over by the wall
/// clock (only at its next poll, a second or more later). A wake-up whose
/// instant has come stays due until a tick acts on it.
#[test]
fn a_wall_clock_takeover_instant_stays_due_once_it_has_come() {
    let mut c = Config::new(Duration::from_millis(T));
    c.retry_jitter = Some(Duration::ZERO);
    c.max_clock_skew = Some(Duration::from_millis(500));
    let mut m = machine("b", c.validate().unwrap());
    let stale = held("a", 4, 9); // wall expiry 9 s, plus the skew: 9.5 s
    let a = m.step(at(8_400), Input::Tick);
    let a = read(&mut m, at(8_400), read_op(&a), Some(stale));
    assert!(!a.iter().any(|a| matches!(a, Action::Cas { .. })), "{a:?}");
    let wake = m.next_wake(at(8_400)).unwrap();
    assert_eq!(wake, at(9_501).mono);
    // Asked again at that instant, or later, before any tick: still due.
    for later in [9_501, 9_502, 9_750] {
        let due = m.next_wake(at(later)).unwrap();
        assert!(
            due <= at(later).mono,
            "asked at {later} ms: wake at {due:?}"
        );
    }
    // And a tick there takes over.
    let a = m.step(at(9_750), Input::Tick);
    let (_, expected, _) = cas_op(&a);
    assert_eq!(expected, Some(Version(9)));
}

#[test]
fn a_longer_term_in_the_record_is_respected() {
    let mut m = machine("b", timing());
    let mut long = held("a", 1, 1);
    long.record.term = Duration::from_secs(60);
    let a = m.step(at(0), Input::Tick);
    read(&mut m, at(0), read_op(&a), Some(long.clone()));
    let mut now = 0;
    while now < 60_000 {
        now += 2_500;
        let a = m.step(at(now), Input::Tick);
        assert!(
            !a.iter().any(|a| matches!(a, Action::Cas { .. })),
            "took over at {now} ms"
        );
        if let Some(op) = a.iter().find_map(|a| match a {
            Action::Read { op, .. } => Some(*op),
            _ => None,
        }) {
            read(&mut m, at(now), op, Some(long.clone()));
        }
    }
}

#[test]
fn same_id_from_another_process_is_not_ours() {
    let mut m = machine("a", timing());
    let mut other = held("a", 3, 3);
    other.record.holder = Some(Holder {
        id: "a".into(),
        incarnation: 99,
    });
    let a = m.step(at(0), Input::Tick);
    let a = read(&mut m, at(0), read_op(&a), Some(other));
    assert!(
        !a.iter().any(|a| matches!(a, Action::Cas { .. })),
        "must wait for expiry"
    );
}

#[test]
fn liveness_timeout_resigns_and_blocks_standing_until_pulses_return() {
    let mut c = Config::new(Duration::from_millis(T));
    c.retry_jitter = Some(Duration::ZERO);
    c.liveness_timeout = Some(Duration::from_secs(2));
    let mut m = Machine::new(c.validate().unwrap(), me("a"), Metadata::new(), 1, at(0));
    let a = m.step(at(0), Input::Tick);
    let a = read(&mut m, at(0), read_op(&a), None);
    let (op, _, _) = cas_op(&a);
    cas(&mut m, at(0), op, CasOutcome::Applied(Version(1)));
    m.step(at(1_000), Input::Pulse { at: at(1_000).mono });
    assert_eq!(m.next_wake(at(1_000)), Some(at(3_000).mono));
    let a = m.step(at(3_000), Input::Tick);
    assert!(matches!(
        a[..],
        [Action::EndTerm {
            reason: EndReason::LivenessLost,
            ..
        }]
    ));
    let a = m.step(at(3_001), Input::Drained { token: 1 });
    let (op, _, _) = cas_op(&a);
    cas(&mut m, at(3_002), op, CasOutcome::Applied(Version(2)));
    // Released record in view, hold-off over, but no pulse: no acquisition.
    let a = m.step(at(10_000), Input::Tick);
    let mut released = held("a", 1, 2);
    released.record.holder = None;
    let a = read(&mut m, at(10_000), read_op(&a), Some(released));
    assert!(!a.iter().any(|a| matches!(a, Action::Cas { .. })), "{a:?}");
    let a = m.step(
        at(10_001),
        Input::Pulse {
            at: at(10_001).mono,
        },
    );
    let (_, _, record) = cas_op(&a);
    assert_eq!(record.token, 2);
}

#[test]
fn stale_replies_are_ignored() {
    let mut m = machine("a", timing());
    let a = m.step(at(0), Input::Tick);
    let op = read_op(&a);
    let a = m.step(
        at(1),
        Input::CasDone {
            op: OpId(op.0 + 100),
            result: Ok(CasOutcome::Applied(Version(1))),
        },
    );
    assert!(a.is_empty());
    assert_eq!(m.phase(), Phase::Candidate);
}

#[test]
fn a_too_slow_acquisition_is_not_announced() {
    let mut m = machine("a", timing());
    let a = m.step(at(0), Input::Tick);
    let a = read(&mut m, at(0), read_op(&a), None);
    let (op, _, _) = cas_op(&a);
    // The reply arrives after deadline − stop grace: unusable.
    let a = cas(&mut m, at(9_500), op, CasOutcome::Applied(Version(1)));
    assert!(
        !a.iter().any(|a| matches!(a, Action::Elected { .. })),
        "{a:?}"
    );
    // The record is ours: a fresh acquisition follows at once, token raised.
    let (_, expected, record) = cas_op(&a);
    assert_eq!(expected, Some(Version(1)));
    assert_eq!(record.token, 2);
}

#[test]
fn tokens_rise_only_with_a_new_term() {
    let (mut m, _) = leader("a");
    let mut tokens = vec![];
    let mut now = 0;
    for _ in 0..5 {
        let wake = m.next_wake(at(now)).unwrap().as_nanos() / 1_000_000;
        now = wake;
        let a = m.step(at(now), Input::Tick);
        let (op, expected, record) = cas_op(&a);
        tokens.push(record.token);
        cas(
            &mut m,
            at(now + 1),
            op,
            CasOutcome::Applied(Version(expected.unwrap().0 + 1)),
        );
    }
    assert_eq!(tokens, vec![1; 5]);
}

#[test]
fn a_store_that_lost_its_data_does_not_make_tokens_go_back() {
    let mut m = machine("b", timing());
    let a = m.step(at(0), Input::Tick);
    read(&mut m, at(0), read_op(&a), Some(held("a", 41, 9)));
    // The store loses everything (a restarted in-memory server).
    let a = m.step(at(3_000), Input::Tick);
    read(&mut m, at(3_000), read_op(&a), None);
    let wait = timing().takeover_wait(Duration::from_millis(T));
    let now = at_mono(at(3_000).mono + wait);
    let a = m.step(now, Input::Tick);
    let (_, expected, record) = cas_op(&a);
    assert_eq!(expected, None);
    assert_eq!(record.token, 42, "above every token this node has seen");
}

/// Review finding: a held record that turns into nothing (a store that lost
/// data, an operator deleting the row) was taken at once, while its holder
/// could still be inside its term. Fencing held, but two terms were valid
/// together. It is now waited out like the record itself.
#[test]
fn a_held_record_that_vanishes_is_waited_out() {
    let mut m = machine("b", timing());
    let a = m.step(at(0), Input::Tick);
    read(&mut m, at(0), read_op(&a), Some(held("a", 4, 9)));
    let a = m.step(at(2_250), Input::Tick);
    let a = read(&mut m, at(2_250), read_op(&a), None);
    assert!(
        !a.iter().any(|a| matches!(a, Action::Cas { .. })),
        "took a vanished lease at once: {a:?}"
    );
    let wait = timing().takeover_wait(Duration::from_millis(T));
    let free = at(2_250).mono + wait;
    // Polls keep seeing nothing; the wait counts from the first sight of it.
    let mut now = at(2_250);
    loop {
        now = at_mono(m.next_wake(now).unwrap());
        assert!(now.mono <= free, "woke after the takeover instant");
        let a = m.step(now, Input::Tick);
        if let Some(Action::Cas {
            expected, record, ..
        }) = a.iter().find(|a| matches!(a, Action::Cas { .. }))
        {
            assert_eq!(now.mono, free);
            assert_eq!(*expected, None);
            assert_eq!(record.token, 5);
            break;
        }
        read(&mut m, now, read_op(&a), None);
    }
}

#[test]
fn an_empty_store_never_held_is_taken_at_once() {
    let mut m = machine("b", timing());
    let a = m.step(at(0), Input::Tick);
    let a = read(&mut m, at(0), read_op(&a), None);
    let (_, expected, _) = cas_op(&a);
    assert_eq!(expected, None);
}

/// Review finding: a node whose write replies arrive late squatted on the
/// lease for ever: its acquisition applied, the reply timed out, it backed
/// off, read its own record, and took it again with token + 1, every ~0.6
/// term. The version kept changing, so no other candidate ever saw it
/// unchanged for a whole term. After the first failed attempt, its own
/// record is now waited out like anyone's.
#[test]
fn late_replies_do_not_let_a_node_squat_on_its_own_record() {
    let mut m = machine("a", timing());
    let a = m.step(at(0), Input::Tick);
    let a = read(&mut m, at(0), read_op(&a), None);
    let (op, _, first) = cas_op(&a);
    // Applied as version 1; the reply is lost.
    let a = m.step(
        at(2_250),
        Input::CasDone {
            op,
            result: Err(StoreError::Timeout(Duration::from_millis(2_250))),
        },
    );
    assert!(a.is_empty(), "{a:?}");
    let now = at_mono(m.next_wake(at(2_250)).unwrap());
    let a = m.step(now, Input::Tick);
    let ours = Versioned {
        record: first.clone(),
        version: Version(1),
    };
    let a = read(&mut m, now, read_op(&a), Some(ours));
    // The first failure: one immediate retry on its own record.
    let (op, expected, second) = cas_op(&a);
    assert_eq!(expected, Some(Version(1)));
    assert_eq!(second.token, 2);
    // Applied as version 2; the reply is lost again.
    let later = at_mono(now.mono + Duration::from_millis(2_250));
    m.step(
        later,
        Input::CasDone {
            op,
            result: Err(StoreError::Timeout(Duration::from_millis(2_250))),
        },
    );
    let now = at_mono(m.next_wake(later).unwrap());
    let a = m.step(now, Input::Tick);
    let ours = Versioned {
        record: second,
        version: Version(2),
    };
    let a = read(&mut m, now, read_op(&a), Some(ours.clone()));
    assert!(
        !a.iter().any(|a| matches!(a, Action::Cas { .. })),
        "rewrote its own record again: {a:?}"
    );
    // It waits a whole takeover wait with the record unchanged, like others.
    let free = now.mono + timing().takeover_wait(Duration::from_millis(T));
    let mut t = now;
    loop {
        t = at_mono(m.next_wake(t).unwrap());
        let a = m.step(t, Input::Tick);
        if a.iter().any(|a| matches!(a, Action::Cas { .. })) {
            assert_eq!(t.mono, free);
            break;
        }
        assert!(t.mono < free);
        read(&mut m, t, read_op(&a), Some(ours.clone()));
    }
}

/// Review finding: a renewal applied as version 2 while its reply was lost
/// during the drain; the release then compared against version 1, conflicted,
/// and gave up, leaving the lease held (a whole crash fail-over for peers on
/// shutdown, or the node re-taking its own record). The release now reads
/// and retries while the record still has this holder and token.
#[test]
fn a_lost_renewal_reply_during_a_drain_does_not_defeat_the_release() {
    for then_stop in [false, true] {
        let (mut m, record) = leader("a");
        let renew_at = timing().renew_interval.as_millis() as u64;
        let a = m.step(at(renew_at), Input::Tick);
        let (renew, _, _) = cas_op(&a);
        let input = if then_stop {
            Input::Shutdown
        } else {
            Input::Resign
        };
        m.step(at(renew_at + 1), input);
        m.step(at(renew_at + 2), Input::Drained { token: 1 });
        // The renewal applied (version 2), but its reply is lost.
        let a = m.step(
            at(renew_at + 50),
            Input::CasDone {
                op: renew,
                result: Err(StoreError::Timeout(Duration::from_millis(50))),
            },
        );
        let (op, expected, release) = cas_op(&a);
        assert_eq!(expected, Some(Version(1)));
        assert_eq!(release.holder, None);
        let a = cas(&mut m, at(renew_at + 51), op, CasOutcome::Conflict);
        let ours = Versioned {
            record: record.clone(),
            version: Version(2),
        };
        let a = read(&mut m, at(renew_at + 52), read_op(&a), Some(ours));
        let (op, expected, release) = cas_op(&a);
        assert_eq!(
            expected,
            Some(Version(2)),
            "retries on the version it found"
        );
        assert_eq!(release.holder, None);
        assert_eq!(release.token, 1);
        let a = cas(
            &mut m,
            at(renew_at + 53),
            op,
            CasOutcome::Applied(Version(3)),
        );
        if then_stop {
            assert_eq!(a, vec![Action::Stopped]);
        } else {
            assert!(a.is_empty(), "{a:?}");
            assert_eq!(m.phase(), Phase::Candidate);
        }
    }
}

#[test]
fn a_release_leaves_a_record_taken_by_another_alone() {
    let (mut m, _) = leader("a");
    m.step(at(100), Input::Shutdown);
    let a = m.step(at(101), Input::Drained { token: 1 });
    let (op, _, _) = cas_op(&a);
    let a = cas(&mut m, at(102), op, CasOutcome::Conflict);
    let a = read(&mut m, at(103), read_op(&a), Some(held("z", 2, 5)));
    assert_eq!(a, vec![Action::Stopped], "nothing of ours to clear");
}

#[test]
fn a_release_gives_up_when_the_store_stays_down() {
    let (mut m, _) = leader("a");
    m.step(at(100), Input::Shutdown);
    let mut a = m.step(at(101), Input::Drained { token: 1 });
    let mut now = at(101);
    let deadline = at(0).mono + timing().leader_validity;
    for _ in 0..100 {
        if a.contains(&Action::Stopped) {
            assert!(now.mono >= deadline, "kept trying while the lease was ours");
            return;
        }
        let failed: Result<(), StoreError> = Err(StoreError::Timeout(Duration::from_millis(1)));
        let reply = match a
            .iter()
            .find(|a| matches!(a, Action::Read { .. } | Action::Cas { .. }))
        {
            Some(Action::Read { op, .. }) => Some(Input::ReadDone {
                op: *op,
                result: failed.map(|_: ()| None),
            }),
            Some(Action::Cas { op, .. }) => Some(Input::CasDone {
                op: *op,
                result: failed.map(|_: ()| CasOutcome::Conflict),
            }),
            _ => None,
        };
        a = match reply {
            Some(input) => m.step(now, input),
            None => {
                now = at_mono(m.next_wake(now).expect("a wake while releasing"));
                m.step(now, Input::Tick)
            }
        };
    }
    panic!("never gave up releasing");
}

/// Review finding: shutdown while an acquisition was in flight stopped at
/// once; the write then applied and left the lease held by a process that
/// had gone, so peers waited a whole crash fail-over.
#[test]
fn shutdown_during_an_acquisition_releases_what_it_wrote() {
    // The reply says applied.
    let mut m = machine("a", timing());
    let a = m.step(at(0), Input::Tick);
    let a = read(&mut m, at(0), read_op(&a), None);
    let (op, _, _) = cas_op(&a);
    assert!(
        m.step(at(1), Input::Shutdown).is_empty(),
        "waits for the write"
    );
    let a = cas(&mut m, at(2), op, CasOutcome::Applied(Version(1)));
    assert!(
        !a.iter().any(|a| matches!(a, Action::Elected { .. })),
        "{a:?}"
    );
    let (op, expected, record) = cas_op(&a);
    assert_eq!(
        (expected, record.holder, record.token),
        (Some(Version(1)), None, 1)
    );
    assert_eq!(
        cas(&mut m, at(3), op, CasOutcome::Applied(Version(2))),
        vec![Action::Stopped]
    );

    // The reply is lost: verify, then release.
    let mut m = machine("a", timing());
    let a = m.step(at(0), Input::Tick);
    let a = read(&mut m, at(0), read_op(&a), None);
    let (op, _, written) = cas_op(&a);
    m.step(at(1), Input::Shutdown);
    let a = m.step(
        at(2),
        Input::CasDone {
            op,
            result: Err(StoreError::Timeout(Duration::from_millis(2))),
        },
    );
    assert!(a.is_empty(), "backs off before verifying: {a:?}");
    let now = at_mono(m.next_wake(at(2)).unwrap());
    let a = m.step(now, Input::Tick);
    let ours = Versioned {
        record: written,
        version: Version(1),
    };
    let a = read(&mut m, now, read_op(&a), Some(ours));
    let (op, expected, _) = cas_op(&a);
    assert_eq!(expected, Some(Version(1)));
    assert_eq!(
        cas(&mut m, now, op, CasOutcome::Applied(Version(2))),
        vec![Action::Stopped]
    );

    // A read in flight is simply dropped.
    let mut m = machine("a", timing());
    m.step(at(0), Input::Tick);
    assert_eq!(m.step(at(1), Input::Shutdown), vec![Action::Stopped]);
}

/// Review finding: a stored record `{holder: X, token: u64::MAX}` is valid,
/// but no new term can get a greater token. The machine asked to be woken
/// at the (past) takeover instant and did nothing, so its driver spun at
/// 100 % CPU. It now fails with a typed fault and stops.
#[test]
fn a_maxed_token_is_a_fault_not_a_busy_loop() {
    let mut m = machine("b", timing());
    let a = m.step(at(0), Input::Tick);
    let maxed = held("x", u64::MAX, 3);
    read(&mut m, at(0), read_op(&a), Some(maxed.clone()));
    let mut now = at(0);
    for _ in 0..50 {
        let wake = m.next_wake(now).expect("a wake while standing");
        assert!(wake > now.mono, "asked to wake in the past at {now:?}");
        now = at_mono(wake);
        let a = m.step(now, Input::Tick);
        if a.contains(&Action::Stopped) {
            assert_eq!(
                a,
                vec![
                    Action::Failed {
                        fault: Fault::TokenExhausted { token: u64::MAX }
                    },
                    Action::Stopped
                ]
            );
            assert_eq!(m.next_wake(now), None);
            assert!(now.mono >= at(0).mono + timing().takeover_wait(Duration::from_millis(T)));
            return;
        }
        if let Some(Action::Read { op, .. }) = a.first() {
            read(&mut m, now, *op, Some(maxed.clone()));
        }
    }
    panic!("never reported the exhausted token");
}

/// Review finding: a superseded leader's `EndTerm.work_deadline` was the
/// instant the verifying read's reply was processed, which after a pause
/// could lie past the term's own deadline.
#[test]
fn a_work_deadline_never_lies_past_the_term_deadline() {
    let (mut m, _) = leader("a");
    let renew_at = timing().renew_interval.as_millis() as u64;
    let a = m.step(at(renew_at), Input::Tick);
    let (op, _, _) = cas_op(&a);
    let a = cas(&mut m, at(renew_at + 1), op, CasOutcome::Conflict);
    let deadline = at(0).mono + timing().leader_validity;
    // Paused until well past the deadline, the read's reply is processed first.
    let late = at(20_000);
    let a = read(&mut m, late, read_op(&a), Some(held("z", 2, 5)));
    let Some(Action::EndTerm { work_deadline, .. }) = a.first() else {
        panic!("{a:?}")
    };
    assert_eq!(*work_deadline, deadline);
}

#[test]
fn a_superseded_node_stands_again_only_after_its_old_work_is_gone() {
    let (mut m, _) = leader("a");
    let old_deadline = at(0).mono + timing().leader_validity;
    let renew_at = timing().renew_interval.as_millis() as u64;
    let a = m.step(at(renew_at), Input::Tick);
    let (op, _, _) = cas_op(&a);
    let a = cas(&mut m, at(renew_at), op, CasOutcome::Conflict);
    let mut released = held("z", 2, 5);
    released.record.holder = None;
    let a = read(&mut m, at(renew_at), read_op(&a), Some(released));
    // The work is told to stop at once...
    assert!(matches!(
        a[0],
        Action::EndTerm {
            work_deadline,
            ..
        } if work_deadline == at(renew_at).mono
    ));
    // ...but with the lease free, the node still waits for that work: no
    // new term until it drains or the old deadline passes.
    assert!(!a.iter().any(|a| matches!(a, Action::Cas { .. })), "{a:?}");
    assert_eq!(m.next_wake(at(renew_at)), Some(old_deadline));
    let a = m.step(at_mono(old_deadline), Input::Tick);
    let (_, _, record) = cas_op(&a);
    assert_eq!(record.token, 3);
}

fn reserved_for(to: &str, token: u64, version: u64) -> Versioned {
    let mut v = held("gone", token, version);
    v.record.holder = None;
    v.record.metadata = Metadata::new().with(TRANSFER_TO_KEY, to);
    v
}

#[test]
fn transfer_drains_then_releases_reserved_for_the_successor() {
    let (mut m, _) = leader("a");
    let a = m.step(at(100), Input::TransferTo { to: "b".into() });
    assert!(matches!(
        &a[..],
        [Action::EndTerm {
            token: 1,
            reason: EndReason::Transferred { to },
            ..
        }] if to == "b"
    ));
    let a = m.step(at(150), Input::Drained { token: 1 });
    let (op, expected, record) = cas_op(&a);
    assert_eq!(expected, Some(Version(1)));
    assert_eq!(record.holder, None);
    assert_eq!(
        record.token, 1,
        "the token survives for the successor to raise"
    );
    assert_eq!(record.transfer_to(), Some("b"));
    cas(&mut m, at(160), op, CasOutcome::Applied(Version(2)));
    assert_eq!(m.phase(), Phase::Candidate, "the old leader keeps standing");
}

#[test]
fn the_successor_takes_a_reserved_lease_at_once_and_others_wait_a_term() {
    // The successor.
    let mut b = machine("b", timing());
    let a = b.step(at(0), Input::Tick);
    let a = read(&mut b, at(0), read_op(&a), Some(reserved_for("b", 4, 9)));
    let (_, expected, record) = cas_op(&a);
    assert_eq!((expected, record.token), (Some(Version(9)), 5));
    assert_eq!(
        record.transfer_to(),
        None,
        "a term's own record reserves nothing"
    );

    // Anyone else waits as for a held record, then may take it.
    let mut c = machine("c", timing());
    let a = c.step(at(0), Input::Tick);
    let a = read(&mut c, at(0), read_op(&a), Some(reserved_for("b", 4, 9)));
    assert!(!a.iter().any(|a| matches!(a, Action::Cas { .. })), "{a:?}");
    let free = at(0).mono + timing().takeover_wait(Duration::from_millis(T));
    let mut now = at(0);
    loop {
        now = at_mono(c.next_wake(now).unwrap());
        let a = c.step(now, Input::Tick);
        if a.iter().any(|a| matches!(a, Action::Cas { .. })) {
            assert_eq!(now.mono, free, "anyone may take it after one term");
            break;
        }
        assert!(now.mono < free);
        read(&mut c, now, read_op(&a), Some(reserved_for("b", 4, 9)));
    }
}

#[test]
fn a_transfer_request_written_into_the_leaders_record_is_honoured() {
    let (mut m, record) = leader("a");
    let renew_at = timing().renew_interval.as_millis() as u64;
    let a = m.step(at(renew_at), Input::Tick);
    let (op, _, _) = cas_op(&a);
    // An operator rewrote the record keeping holder and token.
    let a = cas(&mut m, at(renew_at + 1), op, CasOutcome::Conflict);
    let mut asked = record.clone();
    asked.metadata.insert(TRANSFER_TO_KEY, "z");
    let a = read(
        &mut m,
        at(renew_at + 2),
        read_op(&a),
        Some(Versioned {
            record: asked,
            version: Version(2),
        }),
    );
    assert!(matches!(
        &a[..],
        [Action::EndTerm { reason: EndReason::Transferred { to }, .. }] if to == "z"
    ));
    let a = m.step(at(renew_at + 3), Input::Drained { token: 1 });
    let (_, expected, released) = cas_op(&a);
    assert_eq!(expected, Some(Version(2)));
    assert_eq!(released.transfer_to(), Some("z"));
}

#[test]
fn new_metadata_is_written_at_once_and_followers_hear_of_it() {
    let (mut m, _) = leader("a");
    let a = m.step(
        at(100),
        Input::SetMetadata {
            metadata: Metadata::address("y:2"),
        },
    );
    let (_, expected, record) = cas_op(&a);
    assert_eq!(expected, Some(Version(1)), "renewed at once, not at 3 s");
    assert_eq!(record.metadata.get("address"), Some("y:2"));

    let mut f = machine("f", timing());
    let a = f.step(at(0), Input::Tick);
    read(&mut f, at(0), read_op(&a), Some(held("a", 1, 1)));
    let mut moved = held("a", 1, 2);
    moved.record.metadata = Metadata::address("y:2");
    let a = f.step(
        at(10),
        Input::Observed {
            current: moved.clone(),
        },
    );
    assert_eq!(
        a,
        vec![Action::LeaderChanged {
            leader: Some(moved)
        }]
    );
}

/// Review finding: the version-ordering rule in `observe()` ignores every read that
/// shows a lower version than one seen before, and an equal version keeps
/// the old `since`. After a store reset (versions restart), the reads of the
/// new holder's record are all ignored until its version reaches the old
/// one; then the candidate counts the new record as unchanged since it saw
/// the OLD one and takes over a live term.
#[test]
fn restarted_versions_are_not_waited_out_from_a_stale_sight() {
    let mut m = machine("c", timing());
    // t=0: X holds at v5.
    let a = m.step(at(0), Input::Tick);
    read(&mut m, at(0), read_op(&a), Some(held("x", 3, 5)));
    // The store loses its data; Y acquires at v1 and renews: v3, then v5
    // (written just before 6.75 s). C polls every 2.25 s.
    let a = m.step(at(2250), Input::Tick);
    read(&mut m, at(2250), read_op(&a), Some(held("y", 4, 1)));
    let a = m.step(at(4500), Input::Tick);
    read(&mut m, at(4500), read_op(&a), Some(held("y", 4, 3)));
    let a = m.step(at(6750), Input::Tick);
    read(&mut m, at(6750), read_op(&a), Some(held("y", 4, 5)));
    // Y's v5 was first seen at 6.75 s: no takeover before 6.75 + 9.09 s.
    let mut t = 6750;
    while t + 10 < 6750 + 9090 {
        t += 10;
        let a = m.step(at(t), Input::Tick);
        if let Some(Action::Read { op, .. }) = a.iter().find(|a| matches!(a, Action::Read { .. })) {
            read(&mut m, at(t), *op, Some(held("y", 4, 5)));
        }
        assert!(
            !a.iter().any(|a| matches!(a, Action::Cas { .. })),
            "took over Y's v5 (first seen at 6.75 s) at {t} ms: {a:?}"
        );
    }
}

/// Review finding: `Config::validate` caps the retry interval only at a week; the
/// leader retries a failed renewal after half of it, so a long retry
/// interval (to poll less on a store without notifications) makes one
/// transient renewal failure cost the whole term.
#[test]
fn a_long_retry_interval_leaves_no_renewal_retry() {
    let mut c = Config::new(Duration::from_millis(T));
    c.retry_jitter = Some(Duration::ZERO);
    c.retry_interval = Some(Duration::from_secs(60));
    let timing = c.validate().expect("accepted");
    let mut m = Machine::new(timing, me("a"), Metadata::new(), 7, at(0));
    let a = m.step(at(0), Input::Tick);
    let a = read(&mut m, at(0), read_op(&a), None);
    let (op, _, _) = cas_op(&a);
    cas(&mut m, at(1), op, CasOutcome::Applied(Version(1)));
    let a = m.step(at(3000), Input::Tick);
    let (op, _, _) = cas_op(&a);
    // One renewal fails at 3.1 s.
    m.step(
        at(3100),
        Input::CasDone {
            op,
            result: Err(StoreError::unavailable("blip", "test")),
        },
    );
    let mut retried = false;
    for t in (3200..8000).step_by(100) {
        let a = m.step(at(t), Input::Tick);
        retried |= a.iter().any(|a| matches!(a, Action::Cas { .. }));
    }
    assert!(
        retried,
        "no renewal retry before the term's stop at 8.01 s: next at 33.1 s"
    );
}

/// A term that ended because its renewals failed leaves its work until the
/// deadline. If the node is then shut down with a renewal still in flight,
/// and that renewal applies, the lease is released: not before the ended
/// term's work is gone (drained, or its deadline passed), or another
/// candidate could take over while it still runs. Found by the sharded
/// simulation: a member whose store trouble ended its membership and its
/// shards' terms together shut its shard electors down at that moment,
/// and a shard's new holder started while the old work still lingered.
#[test]
fn a_release_after_a_failed_renewal_waits_for_the_ended_terms_work() {
    let released = |a: &[Action]| {
        a.iter().any(|x| {
            matches!(
                x,
                Action::Cas {
                    purpose: WritePurpose::Release,
                    ..
                }
            )
        })
    };
    for drained_at in [None, Some(8_500)] {
        let (mut m, _) = leader("a");
        let deadline = at(0).mono + timing().leader_validity; // 8.91 s
                                                              // Renewals fail at once until one is left in flight past 7 s.
        let mut t = 3_000;
        let in_flight = loop {
            let a = m.step(at(t), Input::Tick);
            if let Some(Action::Cas { op, .. }) = a.iter().find(|x| matches!(x, Action::Cas { .. }))
            {
                if t >= 7_000 {
                    break *op;
                }
                let a = m.step(
                    at(t),
                    Input::CasDone {
                        op: *op,
                        result: Err(StoreError::Timeout(Duration::ZERO)),
                    },
                );
                assert!(a.is_empty(), "{a:?}");
            }
            t = m.next_wake(at(t)).unwrap().as_nanos() / 1_000_000;
        };
        // Stop grace before the deadline the term ends; its work may run on
        // until the deadline.
        let end = deadline - timing().stop_grace;
        let a = m.step(at_mono(end), Input::Tick);
        assert!(
            matches!(a[..], [Action::EndTerm { token: 1, reason: EndReason::RenewalFailed, work_deadline }] if work_deadline == deadline),
            "{a:?}"
        );
        let a = m.step(at_mono(end + Duration::from_millis(10)), Input::Shutdown);
        assert!(!released(&a), "{a:?}");
        // The renewal in flight applies: the record is ours again.
        let applied = end + Duration::from_millis(20);
        let a = m.step(
            at_mono(applied),
            Input::CasDone {
                op: in_flight,
                result: Ok(CasOutcome::Applied(Version(2))),
            },
        );
        assert!(
            !released(&a),
            "released at once, while the work may run: {a:?}"
        );
        assert_eq!(
            m.next_wake(at_mono(applied)),
            Some(deadline),
            "waits for the work"
        );
        // Released as soon as the work is gone: drained, or at the deadline.
        let a = match drained_at {
            Some(ms) => m.step(at(ms), Input::Drained { token: 1 }),
            None => m.step(at_mono(deadline), Input::Tick),
        };
        assert!(released(&a), "released once the work is gone: {a:?}");
    }
}

/// A record on the change feed that seems to supersede the leader is
/// checked with a read first: a forged feed message must not end a term.
#[test]
fn a_feed_record_superseding_the_leader_is_verified_by_a_read() {
    let (mut m, record) = leader("a");
    let forged = held("mallory", 9, 7);
    let a = m.step(at(100), Input::Observed { current: forged });
    assert!(
        !a.iter().any(|a| matches!(a, Action::EndTerm { .. })),
        "ended on an unverified feed record: {a:?}"
    );
    let op = read_op(&a);
    // The store says the record is still ours: the term goes on.
    let a = read(
        &mut m,
        at(101),
        op,
        Some(Versioned {
            record,
            version: Version(1),
        }),
    );
    assert!(
        !a.iter().any(|a| matches!(a, Action::EndTerm { .. })),
        "{a:?}"
    );
    assert_eq!(m.phase(), Phase::Leader { token: 1 });
    // It renews at once after verifying; the renewal applies.
    let (renew, _, _) = cas_op(&a);
    cas(&mut m, at(102), renew, CasOutcome::Applied(Version(2)));
    // A real takeover seen on the feed ends the term after the read.
    let a = m.step(
        at(200),
        Input::Observed {
            current: held("z", 2, 9),
        },
    );
    let op = read_op(&a);
    let a = read(&mut m, at(201), op, Some(held("z", 2, 9)));
    assert!(matches!(a[0], Action::EndTerm { .. }), "{a:?}");
}
