//! The change feed: a delivery is a hint, read before anything follows.

use super::*;

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
    let a = read(&mut m, at(101), op, Some(stored(&record, 1)));
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

/// The change feed comes up at `now`: the one look it asks for finds
/// `current`.
fn feed_up(m: &mut Machine, now: Now, current: Option<Versioned>) {
    let a = m.step(now, Input::Feed { live: true });
    read(m, now, read_op(&a), current);
}

/// A feed record is a hint: one that names the highest token does not
/// fail a waiting candidate nor raise its token floor; the candidate reads
/// before it acts, and the store's own record decides.
#[test]
fn a_forged_feed_record_with_the_highest_token_is_read_before_anything_follows() {
    let mut c = machine("c", timing());
    poll(&mut c, at(0), Some(held("a", 1, 1)));
    feed_up(&mut c, at(5), Some(held("a", 1, 1)));
    let forged = released(u64::MAX, 2);
    let a = c.step(at(10), Input::Observed { current: forged });
    assert!(
        !a.iter()
            .any(|a| matches!(a, Action::Failed { .. } | Action::Cas { .. })),
        "acted on an unread feed record: {a:?}"
    );
    // The store still shows a's record: nothing to take, nothing failed.
    let a = read(&mut c, at(11), read_op(&a), Some(held("a", 1, 1)));
    assert!(!writes(&a) && c.phase() == Phase::Candidate, "{a:?}");
    // a really releases: the token chosen rises from the stored one.
    let a = c.step(
        at(20),
        Input::Observed {
            current: released(1, 3),
        },
    );
    let a = read(&mut c, at(21), read_op(&a), Some(released(1, 3)));
    let (_, expected, record) = cas_op(&a);
    assert_eq!((expected, record.token), (Some(Version(3)), 2));
}

/// A forged release on the feed naming the live record's own version must
/// not let a candidate acquire over a valid term (its compare-and-swap
/// would apply): the read shows the term still held, and waiting restarts.
#[test]
fn a_forged_release_on_the_feed_does_not_cut_a_valid_term_short() {
    let mut c = machine("c", timing());
    poll(&mut c, at(0), Some(held("a", 1, 5)));
    feed_up(&mut c, at(5), Some(held("a", 1, 5)));
    let a = c.step(
        at(10),
        Input::Observed {
            current: released(1, 5),
        },
    );
    let a = read(&mut c, at(11), read_op(&a), Some(held("a", 1, 5)));
    assert!(!writes(&a), "acquired over a held record: {a:?}");
    let (now, _) = poll_until_write(&mut c, at(11), Some(held("a", 1, 5)));
    assert!(
        now.mono >= at(11).mono + takeover_wait(),
        "took over at {now:?}, before the record was waited out"
    );
}

/// A transfer request seen only on the feed is checked with a read: a
/// forged one leaves the term alone, a real one hands over.
#[test]
fn a_transfer_request_on_the_feed_hands_over_only_once_a_read_shows_it() {
    let (mut m, record) = leader("a");
    let mut asked = record.clone();
    asked.metadata.insert(TRANSFER_TO_KEY, "z");
    let a = m.step(
        at(100),
        Input::Observed {
            current: stored(&asked, 2),
        },
    );
    assert!(
        !a.iter().any(|a| matches!(a, Action::EndTerm { .. })),
        "handed over on an unread feed record: {a:?}"
    );
    let a = read(&mut m, at(101), read_op(&a), Some(stored(&record, 1)));
    assert_eq!(m.phase(), Phase::Leader { token: 1 }, "{a:?}");
    let (renew, _, _) = cas_op(&a);
    cas(&mut m, at(102), renew, CasOutcome::Applied(Version(3)));
    let a = m.step(
        at(200),
        Input::Observed {
            current: stored(&asked, 4),
        },
    );
    let a = read(&mut m, at(201), read_op(&a), Some(stored(&asked, 4)));
    let to_z = EndReason::Transferred { to: "z".into() };
    assert_eq!(term_ended(&a), (1, to_z));
}

/// A forger who guesses the holder's next renewal and publishes it early
/// gains nothing: the real write's own delivery of the same record is what
/// the waiting counts from.
#[test]
fn a_renewal_published_ahead_of_the_real_write_does_not_advance_a_takeover() {
    let mut c = machine("c", timing());
    poll(&mut c, at(0), Some(held("a", 1, 2)));
    feed_up(&mut c, at(5), Some(held("a", 1, 2)));
    let predicted = held("a", 1, 3);
    c.step(
        at(3003),
        Input::Observed {
            current: predicted.clone(),
        },
    );
    // The real renewal, the same record, arrives at 6002.
    c.step(
        at(6002),
        Input::Observed {
            current: predicted.clone(),
        },
    );
    // The takeover instant is where the confirming read goes out.
    let now = wake(&c, at(6002));
    assert!(
        now.mono >= at(6002).mono + takeover_wait(),
        "would take over at {now:?}, counting from the forged copy"
    );
    let a = c.step(now, Input::Tick);
    let a = read(&mut c, now, read_op(&a), Some(predicted));
    assert!(writes(&a), "then it acquires: {a:?}");
}

/// A forged record with the highest version does not make every genuine
/// one look late: a real release after it is still acted on at once.
#[test]
fn a_forged_highest_version_does_not_blind_a_candidate() {
    let mut c = machine("c", timing());
    poll(&mut c, at(0), Some(held("a", 1, 2)));
    feed_up(&mut c, at(5), Some(held("a", 1, 2)));
    c.step(
        at(10),
        Input::Observed {
            current: held("mallory", 1, u64::MAX),
        },
    );
    let a = c.step(
        at(20),
        Input::Observed {
            current: released(1, 3),
        },
    );
    let a = read(&mut c, at(21), read_op(&a), Some(released(1, 3)));
    let (_, expected, _) = cas_op(&a);
    assert_eq!(expected, Some(Version(3)));
}
