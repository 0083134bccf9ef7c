//! Preemption on explicit time: when a candidate of higher priority asks,
//! what counts as the leader being alive, and that another writer's
//! request (marked as a rewrite) neither restarts the takeover wait nor
//! passes for a renewal.

use super::*;
use crate::record::{PRIORITY_KEY, REWRITTEN_OVER_KEY, TRANSFER_PRIORITY_KEY};

/// The preemption delay these tests use.
const DELAY: Duration = Duration::from_secs(15);

/// The version a rewrite names.
fn rewritten_over(record: &LeaseRecord) -> Option<Version> {
    record
        .metadata
        .get(REWRITTEN_OVER_KEY)
        .and_then(|v| v.parse().ok())
        .map(Version)
}

/// A candidate `id` of `priority` with preemption on, started at 0.
fn ranked(id: &str, priority: u32) -> Machine {
    let metadata = Metadata::address("x:1").with(PRIORITY_KEY, priority.to_string());
    let mut m = Machine::new(timing(), me(id), metadata, 7, at(0));
    m.preempt_after(DELAY, at(0));
    m
}

/// `a`'s record at `version`, renewed `renewed` ms after the epoch the
/// tests' wall clock starts at.
fn renewed(version: u64, renewed: u64) -> Versioned {
    let mut v = held("a", 1, version);
    v.record.renewed_at = WallTime::from_millis(1_700_000_000_000 + renewed);
    v.record.expires_at = v.record.renewed_at + Duration::from_millis(T);
    v
}

/// Ticks at every wake-up after `now` until `until`, answering each read
/// with what `store` returns for that instant; the first write, if any.
fn run_until(
    m: &mut Machine,
    mut now: Now,
    until: Now,
    store: impl Fn(Now) -> Versioned,
) -> Option<(Now, Vec<Action>)> {
    for _ in 0..1_000 {
        let next = wake(m, now);
        assert!(
            next.mono > now.mono,
            "asked to wake at {next:?} after {now:?}"
        );
        if next.mono > until.mono {
            return None;
        }
        now = next;
        let mut a = m.step(now, Input::Tick);
        // A reply may send the next read (a look's) at once.
        while let Some(op) = read_sent(&a) {
            a = read(m, now, op, Some(store(now)));
        }
        if writes(&a) {
            return Some((now, a));
        }
    }
    panic!("more than 1,000 wake-ups");
}

/// The store as a live leader keeps it: renewed every third of the term.
fn live_leader(now: Now) -> Versioned {
    let ms = (now.mono.as_nanos() / 1_000_000) / RENEW * RENEW;
    renewed(10 + ms / RENEW, ms)
}

#[test]
fn asks_a_live_lower_leader_only_after_the_delay_and_a_look_for_a_renewal() {
    let mut m = ranked("b", 5);
    poll(&mut m, at(0), Some(live_leader(at(0))));
    let (now, a) = run_until(&mut m, at(0), at(60_000), live_leader).expect("a request");
    // Not before the delay, and after a look of a renewal interval and an
    // operation timeout.
    let look = timing().renew_interval + timing().op_timeout;
    assert!(now.mono >= at(0).mono + DELAY + look, "asked at {now:?}");
    let (_, expected, record) = cas_op(&a);
    let current = live_leader(now);
    assert_eq!(expected, Some(current.version));
    assert_eq!(record.transfer_to(), Some("b"));
    assert_eq!(record.metadata.get(TRANSFER_PRIORITY_KEY), Some("5"));
    assert_eq!(rewritten_over(&record), Some(current.version));
    assert!(record.rewrites(&current), "{record:?}");
}

#[test]
fn never_asks_a_leader_that_stopped_renewing() {
    let mut m = ranked("b", 5);
    let dead = renewed(10, 0);
    poll(&mut m, at(0), Some(dead.clone()));
    // The record never changes: the takeover comes, never a request.
    let (_, a) = run_until(&mut m, at(0), at(60_000), |_| dead.clone()).expect("a takeover");
    let (_, expected, record) = cas_op(&a);
    assert_eq!(expected, Some(Version(10)));
    assert_eq!(
        record.holder_id(),
        Some("b"),
        "a request into a dead record: {record:?}"
    );
}

#[test]
fn another_candidates_request_is_no_renewal_and_keeps_the_takeover_wait() {
    let mut m = ranked("b", 9);
    let dead = renewed(10, 0);
    poll(&mut m, at(0), Some(dead.clone()));
    // Another candidate writes its request into the dead record at 5 s,
    // and b reads it from then on.
    let asked = Versioned {
        record: dead.record.with_request(dead.version, "c", Some(5)),
        version: Version(11),
    };
    let store = |now: Now| {
        if now.mono >= at(5_000).mono {
            asked.clone()
        } else {
            dead.clone()
        }
    };
    let (now, a) = run_until(&mut m, at(0), at(60_000), store).expect("a takeover");
    let (_, expected, record) = cas_op(&a);
    assert_eq!(
        record.holder_id(),
        Some("b"),
        "asked a dead leader: {record:?}"
    );
    assert_eq!(expected, Some(Version(11)));
    // The wait counts from the first sight of the dead leader's own write.
    assert_eq!(now.mono, at(0).mono + takeover_wait());
}

#[test]
fn a_rewrite_not_over_the_version_seen_restarts_the_wait() {
    let mut m = machine("b", timing());
    let first = renewed(10, 0);
    poll(&mut m, at(0), Some(first.clone()));
    // Marked as written over a version b never saw (a renewal between):
    // counted from its own sighting.
    let other = first.record.with_request(Version(11), "c", Some(5));
    poll(&mut m, at(2_500), Some(stored(&other, 12)));
    let (now, _) = poll_until_write(&mut m, at(2_500), Some(stored(&other, 12)));
    assert_eq!(now.mono, at(2_500).mono + takeover_wait());
}

#[test]
fn a_chain_of_rewrites_keeps_the_wait_even_with_one_missed() {
    let mut m = machine("b", timing());
    let base = renewed(10, 0);
    poll(&mut m, at(0), Some(base.clone()));
    // c asks (v11), d asks over c's request (v12): b, polling, sees only
    // v12, which still names the holder's own write v10.
    let c = stored(
        &base.record.with_request(base.rewrite_base(), "c", Some(5)),
        11,
    );
    let d = stored(&c.record.with_request(c.rewrite_base(), "d", Some(9)), 12);
    assert_eq!(d.rewrite_base(), Version(10));
    let (now, a) = poll_until_write(&mut m, at(0), Some(d));
    assert_eq!(now.mono, at(0).mono + takeover_wait());
    assert_eq!(cas_op(&a).1, Some(Version(12)));
}

#[test]
fn a_holders_own_write_is_never_a_rewrite() {
    let first = renewed(10, 0);
    // Same times (a wall clock stepped back), no mark: a renewal.
    let same = stored(&first.record, 11);
    assert!(!same.record.rewrites(&first));
    // A mark that names the version but other times: a renewal too.
    let mut later = renewed(11, 3_000).record;
    later.metadata.insert(REWRITTEN_OVER_KEY, "10");
    assert!(!later.rewrites(&first));
    // A mark that is no number.
    let mut junk = first.record.with_request(first.version, "c", None);
    junk.metadata.insert(REWRITTEN_OVER_KEY, "ten");
    assert!(!junk.rewrites(&first));
}

#[test]
fn equal_or_lower_priority_never_asks() {
    for leader in [5, 9] {
        let mut m = ranked("b", 5);
        let store = move |now: Now| {
            let mut v = live_leader(now);
            v.record.metadata.insert(PRIORITY_KEY, leader.to_string());
            v
        };
        poll(&mut m, at(0), Some(store(at(0))));
        assert!(run_until(&mut m, at(0), at(120_000), store).is_none());
    }
}

#[test]
fn a_declined_request_is_asked_again_only_a_delay_later() {
    let mut m = ranked("b", 5);
    poll(&mut m, at(0), Some(live_leader(at(0))));
    let (first, a) = run_until(&mut m, at(0), at(60_000), live_leader).expect("a request");
    let (op, _, _) = cas_op(&a);
    cas(&mut m, first, op, CasOutcome::Applied(Version(99)));
    // The leader declines (its next renewals write its own record).
    let (second, _) = run_until(&mut m, first, at(200_000), live_leader).expect("asked again");
    assert!(
        second.mono.saturating_since(first.mono) >= DELAY,
        "asked again {:?} later",
        second.mono.saturating_since(first.mono)
    );
}

#[test]
fn a_candidate_that_stops_withdraws_its_request() {
    let mut m = ranked("b", 5);
    poll(&mut m, at(0), Some(live_leader(at(0))));
    let (now, a) = run_until(&mut m, at(0), at(60_000), live_leader).expect("a request");
    let (op, _, record) = cas_op(&a);
    cas(&mut m, now, op, CasOutcome::Applied(Version(99)));
    let a = m.step(now, Input::Shutdown);
    let op = read_op(&a);
    let a = read(&mut m, now, op, Some(stored(&record, 99)));
    let (op, expected, withdrawn) = cas_op(&a);
    assert_eq!(expected, Some(Version(99)));
    assert_eq!(withdrawn.transfer_to(), None);
    assert!(withdrawn.rewrites(&stored(&record, 99)), "{withdrawn:?}");
    let a = cas(&mut m, now, op, CasOutcome::Applied(Version(100)));
    assert!(a.contains(&Action::Stopped), "{a:?}");
}

#[test]
fn a_stopping_candidate_leaves_a_record_without_its_request_alone() {
    let mut m = ranked("b", 5);
    poll(&mut m, at(0), Some(live_leader(at(0))));
    let (now, a) = run_until(&mut m, at(0), at(60_000), live_leader).expect("a request");
    let (op, _, _) = cas_op(&a);
    cas(&mut m, now, op, CasOutcome::Applied(Version(99)));
    let a = m.step(now, Input::Shutdown);
    // The leader renewed since: its own record, no request in it.
    let a = read(&mut m, now, read_op(&a), Some(live_leader(now)));
    assert!(!writes(&a), "{a:?}");
    assert!(a.contains(&Action::Stopped), "{a:?}");
}

#[test]
fn a_withdrawal_that_keeps_failing_gives_up() {
    let mut m = ranked("b", 5);
    poll(&mut m, at(0), Some(live_leader(at(0))));
    let (mut now, a) = run_until(&mut m, at(0), at(60_000), live_leader).expect("a request");
    let (op, _, _) = cas_op(&a);
    cas(&mut m, now, op, CasOutcome::Applied(Version(99)));
    let mut a = m.step(now, Input::Shutdown);
    for _ in 0..100 {
        if a.contains(&Action::Stopped) {
            return;
        }
        if let Some(op) = read_sent(&a) {
            a = m.step(
                now,
                Input::ReadDone {
                    op,
                    result: Err(StoreError::Timeout(Duration::from_secs(1))),
                },
            );
            continue;
        }
        now = wake(&m, now);
        a = m.step(now, Input::Tick);
    }
    panic!("the withdrawal never gave up");
}

#[test]
fn a_candidate_without_a_pulse_never_asks() {
    let t = timing_with(|c| c.liveness_timeout = Some(Duration::from_secs(5)));
    let metadata = Metadata::address("x:1").with(PRIORITY_KEY, "5");
    let mut m = Machine::new(t, me("b"), metadata, 7, at(0));
    m.preempt_after(DELAY, at(0));
    poll(&mut m, at(0), Some(live_leader(at(0))));
    // No pulse ever: no wake-up for a request, and none is written.
    let mut now = at(0);
    while let Some(next) = m.next_wake(now) {
        if next > at(120_000).mono {
            break;
        }
        assert!(next > now.mono);
        now = at_mono(next);
        let a = m.step(now, Input::Tick);
        assert!(!writes(&a), "{a:?}");
        if let Some(op) = read_sent(&a) {
            read(&mut m, now, op, Some(live_leader(now)));
        }
    }
}
