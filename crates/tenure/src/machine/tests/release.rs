//! Ending a term: drain, release, shutdown, transfer.

use super::*;

#[test]
fn resign_drains_then_releases_keeping_the_token() {
    let (mut m, _) = leader("a");
    let a = m.step(at(100), Input::Resign);
    assert_eq!(term_ended(&a), (1, EndReason::Resigned));
    assert!(
        m.step(at(150), Input::Tick).is_empty(),
        "waits for the work to drain"
    );
    let (op, _) = release_once_drained(&mut m, at(200));
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
    assert_eq!(term_ended(&a), (1, EndReason::Shutdown));
    let deadline = first_deadline();
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

/// A renewal applied as version 2 while its reply was lost
/// during the drain; the release then compared against version 1, conflicted,
/// and gave up, leaving the lease held (a whole crash fail-over for peers on
/// shutdown, or the node re-taking its own record). The release now reads
/// and retries while the record still has this holder and token.
#[test]
fn a_lost_renewal_reply_during_a_drain_does_not_defeat_the_release() {
    for then_stop in [false, true] {
        let (mut m, record) = leader("a");
        let (renew, _, _) = first_renewal(&mut m);
        let input = if then_stop {
            Input::Shutdown
        } else {
            Input::Resign
        };
        m.step(at(RENEW + 1), input);
        m.step(at(RENEW + 2), Input::Drained { token: 1 });
        // The renewal applied (version 2), but its reply is lost.
        let a = write_timed_out(&mut m, at(RENEW + 50), renew, Duration::from_millis(50));
        let (op, expected, release) = cas_op(&a);
        assert_eq!(expected, Some(Version(1)));
        assert_eq!(release.holder, None);
        let a = cas(&mut m, at(RENEW + 51), op, CasOutcome::Conflict);
        let a = read(
            &mut m,
            at(RENEW + 52),
            read_op(&a),
            Some(stored(&record, 2)),
        );
        let (op, expected, release) = cas_op(&a);
        assert_eq!(
            expected,
            Some(Version(2)),
            "retries on the version it found"
        );
        assert_eq!(release.holder, None);
        assert_eq!(release.token, 1);
        let a = cas(&mut m, at(RENEW + 53), op, CasOutcome::Applied(Version(3)));
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
    let (op, _) = release_once_drained(&mut m, at(101));
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
    let deadline = first_deadline();
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

/// Shutdown while an acquisition was in flight stopped at
/// once; the write then applied and left the lease held by a process that
/// had gone, so peers waited a whole crash fail-over.
#[test]
fn shutdown_during_an_acquisition_releases_what_it_wrote() {
    // The reply says applied.
    let mut m = machine("a", timing());
    let (op, _) = acquire(&mut m);
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
    let (op, written) = acquire(&mut m);
    m.step(at(1), Input::Shutdown);
    let lost = Duration::from_millis(2);
    let (now, a) = acquisition_reply_lost(&mut m, at(2), op, &written, lost);
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

/// A released record reserved for the successor `to`.
fn reserved_for(to: &str, token: u64, version: u64) -> Versioned {
    let mut v = released(token, version);
    v.record.metadata = Metadata::new().with(TRANSFER_TO_KEY, to);
    v
}

#[test]
fn transfer_drains_then_releases_reserved_for_the_successor() {
    let (mut m, _) = leader("a");
    let a = m.step(at(100), Input::TransferTo { to: "b".into() });
    let to_b = EndReason::Transferred { to: "b".into() };
    assert_eq!(term_ended(&a), (1, to_b));
    // The token survives for the successor to raise.
    let (op, record) = release_once_drained(&mut m, at(150));
    assert_eq!(record.transfer_to(), Some("b"));
    cas(&mut m, at(160), op, CasOutcome::Applied(Version(2)));
    assert_eq!(m.phase(), Phase::Candidate, "the old leader keeps standing");
}

#[test]
fn the_successor_takes_a_reserved_lease_at_once_and_others_wait_a_term() {
    // The successor.
    let mut b = machine("b", timing());
    let a = poll(&mut b, at(0), Some(reserved_for("b", 4, 9)));
    let (_, expected, record) = cas_op(&a);
    assert_eq!((expected, record.token), (Some(Version(9)), 5));
    assert_eq!(
        record.transfer_to(),
        None,
        "a term's own record reserves nothing"
    );

    // Anyone else waits as for a held record, then may take it.
    let mut c = machine("c", timing());
    let a = poll(&mut c, at(0), Some(reserved_for("b", 4, 9)));
    assert!(!writes(&a), "{a:?}");
    let free = at(0).mono + takeover_wait();
    let (now, _) = poll_until_write(&mut c, at(0), Some(reserved_for("b", 4, 9)));
    assert_eq!(now.mono, free, "anyone may take it after one term");
}

#[test]
fn a_transfer_request_written_into_the_leaders_record_is_honoured() {
    let (mut m, record) = leader("a");
    // An operator rewrote the record keeping holder and token.
    let a = first_renewal_refused(&mut m, 1);
    let mut asked = record.clone();
    asked.metadata.insert(TRANSFER_TO_KEY, "z");
    let a = read(&mut m, at(RENEW + 2), read_op(&a), Some(stored(&asked, 2)));
    let to_z = EndReason::Transferred { to: "z".into() };
    assert_eq!(term_ended(&a), (1, to_z));
    let a = m.step(at(RENEW + 3), Input::Drained { token: 1 });
    let (_, expected, released) = cas_op(&a);
    assert_eq!(expected, Some(Version(2)));
    assert_eq!(released.transfer_to(), Some("z"));
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
        let deadline = first_deadline(); // 8.91 s
                                         // Renewals fail at once until one is left in flight past 7 s.
        let mut t = 3_000;
        let in_flight = loop {
            let a = m.step(at(t), Input::Tick);
            if let Some(Action::Cas { op, .. }) = a.iter().find(|x| matches!(x, Action::Cas { .. }))
            {
                if t >= 7_000 {
                    break *op;
                }
                let a = write_timed_out(&mut m, at(t), *op, Duration::ZERO);
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
