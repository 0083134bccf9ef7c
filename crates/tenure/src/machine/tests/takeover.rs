//! The takeover rule: when a record may be taken, by the monotonic wait
//! or the wall clock, and the tokens a new term gets.

use super::*;

#[test]
fn takes_over_only_after_observing_the_record_unchanged_for_term_plus_drift() {
    let mut m = machine("b", timing());
    // First sight of a's record at t = 100 ms.
    poll_replied_at(&mut m, at(0), at(100), Some(held("a", 4, 9)));
    let takeover = at(100).mono + takeover_wait();
    // Polls see the same version; the anchor stays at the first sight.
    let (now, a) = poll_until_write(&mut m, at(100), Some(held("a", 4, 9)));
    assert_eq!(
        now.mono, takeover,
        "takeover exactly term × (1 + drift) after first sight"
    );
    let (_, expected, record) = cas_op(&a);
    assert_eq!(expected, Some(Version(9)));
    assert_eq!(record.token, 5, "a new holder raises the token");
}

#[test]
fn a_renewal_seen_by_the_challenger_restarts_its_wait() {
    let mut m = machine("b", timing());
    poll(&mut m, at(0), Some(held("a", 4, 9)));
    poll(&mut m, at(2_500), Some(held("a", 4, 10)));
    // Past the takeover instant the old anchor (t=0) gives, which must not
    // be used any more.
    let late = at(10_200);
    assert!(late.mono > at(0).mono + takeover_wait());
    let a = m.step(late, Input::Tick);
    assert!(!writes(&a), "{a:?}");
}

#[test]
fn takes_a_released_record_at_once_and_raises_the_token() {
    let mut m = machine("b", timing());
    let a = poll_replied_at(&mut m, at(0), at(1), Some(released(4, 9)));
    let (op, expected, record) = cas_op(&a);
    assert_eq!(expected, Some(Version(9)));
    assert_eq!(record.token, 5);
    cas(&mut m, at(2), op, CasOutcome::Applied(Version(10)));
    assert_eq!(m.phase(), Phase::Leader { token: 5 });
}

/// A challenger with the wall-clock skew bound that first sees `stale`
/// (whose wall expiry is 9 s) at 8.4 s, within the skew bound of that
/// expiry: it must not write yet, and asks to be woken once the skew has
/// passed (9.501 s).
fn waiting_out_the_skew(stale: Versioned) -> Machine {
    let mut m = machine("b", skewed());
    let a = poll(&mut m, at(8_400), Some(stale));
    assert!(!writes(&a), "{a:?}");
    assert_eq!(m.next_wake(at(8_400)), Some(at(9_501).mono));
    m
}

#[test]
fn early_takeover_by_wall_clock_only_with_a_skew_bound() {
    // A record whose wall expiry (9 s) is long past (crashed leader, fresh challenger).
    let stale = held("a", 4, 9); // expires at wall 1_700_000_010_000
    let late = 20_000;
    let mut m = machine("b", skewed());
    let a = poll(&mut m, at(late), Some(stale.clone()));
    let (_, expected, _) = cas_op(&a);
    assert_eq!(expected, Some(Version(9)), "takes over at once");

    // Within the skew bound of the wall expiry: must wait, and the wake-up
    // comes at the instant the skew has passed.
    waiting_out_the_skew(stale.clone());

    // Without a skew bound the wall clock is ignored.
    let mut m = machine("b", timing());
    let a = poll(&mut m, at(late), Some(stale));
    assert!(!writes(&a));
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
    let stale = held("a", 4, 9); // wall expiry 9 s, plus the skew: 9.5 s
    let mut m = waiting_out_the_skew(stale);
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
    poll(&mut m, at(0), Some(long.clone()));
    let mut now = 0;
    while now < 60_000 {
        now += 2_500;
        let a = m.step(at(now), Input::Tick);
        assert!(!writes(&a), "took over at {now} ms");
        if let Some(op) = read_sent(&a) {
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
    let a = poll(&mut m, at(0), Some(other));
    assert!(!writes(&a), "must wait for expiry");
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
    poll(&mut m, at(0), Some(held("a", 41, 9)));
    // The store loses everything (a restarted in-memory server).
    poll(&mut m, at(3_000), None);
    let now = at_mono(at(3_000).mono + takeover_wait());
    let a = m.step(now, Input::Tick);
    let (_, expected, record) = cas_op(&a);
    assert_eq!(expected, None);
    assert_eq!(record.token, 42, "above every token this node has seen");
}

/// A held record that turns into nothing (a store that lost
/// data, an operator deleting the row) was taken at once, while its holder
/// could still be inside its term. Fencing held, but two terms were valid
/// together. It is now waited out like the record itself.
#[test]
fn a_held_record_that_vanishes_is_waited_out() {
    let mut m = machine("b", timing());
    poll(&mut m, at(0), Some(held("a", 4, 9)));
    let a = poll(&mut m, at(2_250), None);
    assert!(!writes(&a), "took a vanished lease at once: {a:?}");
    let free = at(2_250).mono + takeover_wait();
    // Polls keep seeing nothing; the wait counts from the first sight of it.
    let (now, a) = poll_until_write(&mut m, at(2_250), None);
    assert_eq!(now.mono, free, "not at the takeover instant");
    let (_, expected, record) = cas_op(&a);
    assert_eq!(expected, None);
    assert_eq!(record.token, 5);
}

#[test]
fn an_empty_store_never_held_is_taken_at_once() {
    let mut m = machine("b", timing());
    // At its first look, it writes expecting no record (`acquire` checks).
    let (_, record) = acquire(&mut m);
    assert_eq!(record.token, 1);
}

/// A stored record `{holder: X, token: u64::MAX}` is valid,
/// but no new term can get a greater token. The machine asked to be woken
/// at the (past) takeover instant and did nothing, so its driver spun at
/// 100 % CPU. It now fails with a typed fault and stops.
#[test]
fn a_maxed_token_is_a_fault_not_a_busy_loop() {
    let mut m = machine("b", timing());
    let maxed = held("x", u64::MAX, 3);
    poll(&mut m, at(0), Some(maxed.clone()));
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
            assert!(now.mono >= at(0).mono + takeover_wait());
            return;
        }
        if let Some(Action::Read { op, .. }) = a.first() {
            read(&mut m, now, *op, Some(maxed.clone()));
        }
    }
    panic!("never reported the exhausted token");
}

/// The version-ordering rule in `observe()` ignores every read that
/// shows a lower version than one seen before, and an equal version keeps
/// the old `since`. After a store reset (versions restart), the reads of the
/// new holder's record are all ignored until its version reaches the old
/// one; then the candidate counts the new record as unchanged since it saw
/// the OLD one and takes over a live term.
#[test]
fn restarted_versions_are_not_waited_out_from_a_stale_sight() {
    let mut m = machine("c", timing());
    // t=0: X holds at v5.
    poll(&mut m, at(0), Some(held("x", 3, 5)));
    // The store loses its data; Y acquires at v1 and renews: v3, then v5
    // (written just before 6.75 s). C polls every 2.25 s.
    poll(&mut m, at(2250), Some(held("y", 4, 1)));
    poll(&mut m, at(4500), Some(held("y", 4, 3)));
    poll(&mut m, at(6750), Some(held("y", 4, 5)));
    // Y's v5 was first seen at 6.75 s: no takeover before 6.75 + 9.09 s.
    let mut t = 6750;
    while t + 10 < 6750 + 9090 {
        t += 10;
        let a = m.step(at(t), Input::Tick);
        if let Some(op) = read_sent(&a) {
            read(&mut m, at(t), op, Some(held("y", 4, 5)));
        }
        assert!(
            !writes(&a),
            "took over Y's v5 (first seen at 6.75 s) at {t} ms: {a:?}"
        );
    }
}
