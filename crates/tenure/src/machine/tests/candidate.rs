//! A candidate: acquiring, losing a race, replies that come late or stale.

use super::*;

#[test]
fn acquires_on_empty_with_token_one_and_deadline_from_send() {
    let mut m = machine("a", timing());
    let a = poll_replied_at(&mut m, at(0), at(5), None);
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
    let a = poll_replied_at(&mut m, at(0), at(1), None);
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
fn reacquires_after_losing_and_the_token_rises() {
    let (mut m, _) = leader("a");
    // Superseded by z (token 2), then z releases.
    let a = first_renewal_refused(&mut m, 0);
    read(&mut m, at(RENEW), read_op(&a), Some(held("z", 2, 5)));
    // The superseded term's work finishes stopping.
    m.step(at(RENEW), Input::Drained { token: 1 });
    let a = m.step(at(RENEW + 1), Input::Changed);
    let a = read(&mut m, at(RENEW + 2), read_op(&a), Some(released(2, 6)));
    let (op, _, record) = cas_op(&a);
    assert_eq!(record.token, 3);
    let a = cas(&mut m, at(RENEW + 3), op, CasOutcome::Applied(Version(7)));
    assert!(matches!(a[..], [Action::Elected { token: 3, .. }]));
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
    let (op, _) = acquire(&mut m);
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

/// A node whose write replies arrive late squatted on the
/// lease for ever: its acquisition applied, the reply timed out, it backed
/// off, read its own record, and took it again with token + 1, every ~0.6
/// term. The version kept changing, so no other candidate ever saw it
/// unchanged for a whole term. After the first failed attempt, its own
/// record is now waited out like anyone's.
#[test]
fn late_replies_do_not_let_a_node_squat_on_its_own_record() {
    let mut m = machine("a", timing());
    let (op, first) = acquire(&mut m);
    // Applied as version 1; the reply is lost.
    let lost = Duration::from_millis(2_250);
    let (now, a) = acquisition_reply_lost(&mut m, at(2_250), op, &first, lost);
    // The first failure: one immediate retry on its own record.
    let (op, expected, second) = cas_op(&a);
    assert_eq!(expected, Some(Version(1)));
    assert_eq!(second.token, 2);
    // Applied as version 2; the reply is lost again.
    let later = at_mono(now.mono + Duration::from_millis(2_250));
    write_timed_out(&mut m, later, op, Duration::from_millis(2_250));
    let now = wake(&m, later);
    let ours = stored(&second, 2);
    let a = poll(&mut m, now, Some(ours.clone()));
    assert!(!writes(&a), "rewrote its own record again: {a:?}");
    // It waits a whole takeover wait with the record unchanged, like others.
    let free = now.mono + takeover_wait();
    let (taken, _) = poll_until_write(&mut m, now, Some(ours));
    assert_eq!(taken.mono, free);
}
