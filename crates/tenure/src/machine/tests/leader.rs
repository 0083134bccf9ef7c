//! A leader: renewing, failing to, being superseded, its liveness and
//! metadata.

use super::*;

#[test]
fn renews_keeping_the_token_and_extends_the_deadline() {
    let (mut m, _) = leader("a");
    assert!(
        m.step(at(RENEW - 1), Input::Tick).is_empty(),
        "not before the renew interval"
    );
    let (op, expected, record) = first_renewal(&mut m);
    assert_eq!(expected, Some(Version(1)));
    assert_eq!(record.token, 1, "renewal keeps the token");
    let a = cas(&mut m, at(RENEW + 20), op, CasOutcome::Applied(Version(2)));
    assert_eq!(
        a,
        vec![Action::Renewed {
            token: 1,
            deadline: at(RENEW).mono + timing().leader_validity,
            latency: Duration::from_millis(20),
        }]
    );
}

#[test]
fn failing_renewals_step_down_before_the_deadline() {
    let (mut m, _) = leader("a");
    let deadline = first_deadline();
    let stop_at = deadline - timing().stop_grace;
    let mut now_ms = RENEW;
    let mut ended = None;
    while now_ms < 20_000 {
        let a = m.step(at(now_ms), Input::Tick);
        for action in &a {
            if let Action::Cas { op, .. } = action {
                let r = write_timed_out(&mut m, at(now_ms + 1), *op, Duration::from_millis(1));
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
fn superseded_leader_ends_its_term_at_once_and_keeps_standing() {
    let (mut m, _) = leader("a");
    let a = first_renewal_refused(&mut m, 1);
    let a = read(&mut m, at(RENEW + 2), read_op(&a), Some(held("z", 2, 5)));
    assert_eq!(
        a[0],
        Action::EndTerm {
            token: 1,
            reason: EndReason::Superseded {
                by: Some("z".into())
            },
            work_deadline: at(RENEW + 2).mono,
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
    let (op, _, _) = first_renewal(&mut m);
    // The write applied (version 2) but the reply was lost.
    write_timed_out(&mut m, at(RENEW + 100), op, Duration::from_millis(100));
    let retry = RENEW + 100 + timing().retry_interval.as_millis() as u64 / 2;
    let a = m.step(at(retry), Input::Tick);
    let (op, expected, _) = cas_op(&a);
    assert_eq!(expected, Some(Version(1)));
    let a = cas(&mut m, at(retry + 1), op, CasOutcome::Conflict);
    let a = read(&mut m, at(retry + 2), read_op(&a), Some(stored(&record, 2)));
    // No term change: it renews at once against the adopted version.
    let (_, expected, record) = cas_op(&a);
    assert_eq!(expected, Some(Version(2)));
    assert_eq!(record.token, 1);
    assert_eq!(m.phase(), Phase::Leader { token: 1 });
}

#[test]
fn liveness_timeout_resigns_and_blocks_standing_until_pulses_return() {
    let timing = timing_with(|c| c.liveness_timeout = Some(Duration::from_secs(2)));
    let mut m = machine("a", timing);
    elect(&mut m, at(0));
    m.step(at(1_000), Input::Pulse { at: at(1_000).mono });
    assert_eq!(m.next_wake(at(1_000)), Some(at(3_000).mono));
    let a = m.step(at(3_000), Input::Tick);
    assert_eq!(term_ended(&a), (1, EndReason::LivenessLost));
    let (op, _) = release_once_drained(&mut m, at(3_001));
    cas(&mut m, at(3_002), op, CasOutcome::Applied(Version(2)));
    // Released record in view, hold-off over, but no pulse: no acquisition.
    let a = poll(&mut m, at(10_000), Some(released(1, 2)));
    assert!(!writes(&a), "{a:?}");
    let a = m.step(
        at(10_001),
        Input::Pulse {
            at: at(10_001).mono,
        },
    );
    let (_, _, record) = cas_op(&a);
    assert_eq!(record.token, 2);
}

/// A superseded leader's `EndTerm.work_deadline` was the
/// instant the verifying read's reply was processed, which after a pause
/// could lie past the term's own deadline.
#[test]
fn a_work_deadline_never_lies_past_the_term_deadline() {
    let (mut m, _) = leader("a");
    let a = first_renewal_refused(&mut m, 1);
    // Paused until well past the deadline, the read's reply is processed first.
    let late = at(20_000);
    let a = read(&mut m, late, read_op(&a), Some(held("z", 2, 5)));
    let Some(Action::EndTerm { work_deadline, .. }) = a.first() else {
        panic!("{a:?}")
    };
    assert_eq!(*work_deadline, first_deadline());
}

#[test]
fn a_superseded_node_stands_again_only_after_its_old_work_is_gone() {
    let (mut m, _) = leader("a");
    let old_deadline = first_deadline();
    let a = first_renewal_refused(&mut m, 0);
    let a = read(&mut m, at(RENEW), read_op(&a), Some(released(2, 5)));
    // The work is told to stop at once...
    assert!(matches!(
        a[0],
        Action::EndTerm {
            work_deadline,
            ..
        } if work_deadline == at(RENEW).mono
    ));
    // ...but with the lease free, the node still waits for that work: no
    // new term until it drains or the old deadline passes.
    assert!(!writes(&a), "{a:?}");
    assert_eq!(m.next_wake(at(RENEW)), Some(old_deadline));
    let a = m.step(at_mono(old_deadline), Input::Tick);
    let (_, _, record) = cas_op(&a);
    assert_eq!(record.token, 3);
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
    poll(&mut f, at(0), Some(held("a", 1, 1)));
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

/// `Config::validate` caps the retry interval only at a week; the
/// leader retries a failed renewal after half of it, so a long retry
/// interval (to poll less on a store without notifications) makes one
/// transient renewal failure cost the whole term.
#[test]
fn a_long_retry_interval_leaves_no_renewal_retry() {
    let timing = timing_with(|c| c.retry_interval = Some(Duration::from_secs(60)));
    let mut m = machine("a", timing);
    elect(&mut m, at(1));
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
        retried |= writes(&a);
    }
    assert!(
        retried,
        "no renewal retry before the term's stop at 8.01 s: next at 33.1 s"
    );
}
