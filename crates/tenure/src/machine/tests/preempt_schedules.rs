//! Hostile schedules for the preemption room: ones that try to make the
//! rewrite mark carry a takeover anchor over a renewal, to leave a request
//! or a reservation behind, or to make the room spin. The first five were
//! found failing in a review of the room and fixed; the rest held up.

use super::*;
use crate::record::{PRIORITY_KEY, REWRITTEN_OVER_KEY};

const DELAY: Duration = Duration::from_secs(15);

fn ranked_with(id: &str, priority: u32, delay: Duration) -> Machine {
    let metadata = Metadata::address("x:1").with(PRIORITY_KEY, priority.to_string());
    let mut m = Machine::new(timing(), me(id), metadata, 7, at(0));
    m.preempt_after(delay, at(0));
    m
}

fn ranked(id: &str, priority: u32) -> Machine {
    ranked_with(id, priority, DELAY)
}

/// `a`'s record (token 1) at `version`, renewed `renewed` ms in.
fn renewed(version: u64, renewed: u64) -> Versioned {
    let mut v = held("a", 1, version);
    v.record.renewed_at = WallTime::from_millis(1_700_000_000_000 + renewed);
    v.record.expires_at = v.record.renewed_at + Duration::from_millis(T);
    v
}

fn live_leader(now: Now) -> Versioned {
    let ms = (now.mono.as_nanos() / 1_000_000) / RENEW * RENEW;
    renewed(10 + ms / RENEW, ms)
}

/// As `run_until` in `preempt.rs`: ticks at every wake-up (asserting each
/// is strictly later), answers every read with `store(now)`, returns the
/// first write.
fn run_until(
    m: &mut Machine,
    mut now: Now,
    until: Now,
    store: impl Fn(Now) -> Versioned,
) -> Option<(Now, Vec<Action>)> {
    for _ in 0..10_000 {
        let next = at_mono(m.next_wake(now)?);
        assert!(
            next.mono > now.mono,
            "asked to wake at {next:?} after {now:?}"
        );
        if next.mono > until.mono {
            return None;
        }
        now = next;
        let mut a = m.step(now, Input::Tick);
        while let Some(op) = read_sent(&a) {
            a = read(m, now, op, Some(store(now)));
        }
        if writes(&a) {
            return Some((now, a));
        }
    }
    panic!("more than 10,000 wake-ups");
}

/// The next poll after `now` (at the machine's wake-up), answered with
/// `current`: when it was read.
fn poll_next(m: &mut Machine, now: Now, current: Option<Versioned>) -> Now {
    let next = wake(m, now);
    assert!(next.mono > now.mono);
    poll(m, next, current);
    next
}

/// Was a bug (liveness, regression vs the old task). A leader whose wall
/// clock does not advance (a host with a stuck clock, or renewals that land
/// on the same millisecond after a step back) renews every third of its
/// term: the version moves, holder and token stay, but `renewed_at` and
/// `expires_at` are what they were. The look compares only the times, so it
/// concludes "not renewed" every time and a higher-priority candidate never
/// asks. The old task compared versions and asked. (Safety is not at stake:
/// the mark, not the times, decides what is a rewrite.)
#[test]
fn a_leader_whose_wall_clock_stands_still_is_still_asked() {
    let mut m = ranked("b", 5);
    let stuck = |now: Now| {
        let ms = (now.mono.as_nanos() / 1_000_000) / RENEW * RENEW;
        // A new version every renewal, the times of the first.
        renewed(10 + ms / RENEW, 0)
    };
    poll(&mut m, at(0), Some(stuck(at(0))));
    let got = run_until(&mut m, at(0), at(120_000), stuck);
    let (_, a) = got.expect("a live (renewing) leader of lower priority is never asked");
    let (_, _, record) = cas_op(&a);
    assert_eq!(record.transfer_to(), Some("b"));
}

/// Was a bug (liveness, minor). A forged change-feed delivery (a hint) naming
/// another holder moves `reported`, so `track_leader` forgets `asked` (and
/// restarts the delay). A read then shows the genuine record, still holding
/// this candidate's request, but `asked` is gone: the candidate stops
/// without withdrawing it, and the leader hands over to a stopped candidate
/// (a term with no leader). A forger repeating this every < delay also
/// postpones preemption for ever.
#[test]
fn a_forged_delivery_does_not_make_a_candidate_forget_its_request() {
    // Without the forged delivery (the control) the candidate withdraws.
    for forge in [false, true] {
        let mut m = ranked("b", 5);
        poll(&mut m, at(0), Some(live_leader(at(0))));
        let (now, a) = run_until(&mut m, at(0), at(60_000), live_leader).expect("a request");
        let (op, _, record) = cas_op(&a);
        cas(&mut m, now, op, CasOutcome::Applied(Version(99)));
        let mine = stored(&record, 99);
        let mut a = Vec::new();
        if forge {
            // The forged hint: another holder, lower priority, a high
            // version.
            let forged = held("mallory", 7, 1_000);
            a = m.step(now, Input::Observed { current: forged });
        }
        if let Some(op) = read_sent(&a) {
            a = read(&mut m, now, op, Some(mine.clone()));
        }
        // A read confirms the genuine record (with b's request) at the
        // next poll.
        let mut now = now;
        if read_sent(&a).is_none() {
            now = wake(&m, now);
            a = poll(&mut m, now, Some(mine.clone()));
        }
        assert!(!writes(&a), "{a:?}");
        let a = m.step(now, Input::Shutdown);
        assert!(
            !a.contains(&Action::Stopped),
            "forged: {forge}: stopped without withdrawing the request still in the record: {a:?}"
        );
    }
}

/// Was a bug (liveness, pre-existing: the old task had it too). A withdrawal
/// that lands after the leader decided to hand over is ignored: the
/// leader's release conflicts, its verifying read finds its own record
/// (withdrawn, same holder and token) and releases reserved for the
/// candidate that withdrew because it stops. Everybody else then waits a
/// whole takeover wait for a reservation nobody takes up, which is exactly
/// what the withdrawal exists to prevent.
#[test]
fn a_withdrawn_request_is_not_reserved_for_by_the_release() {
    let (mut m, record) = leader("a");
    let a = first_renewal_refused(&mut m, 10);
    let asked = record.with_request(Version(1), "b", Some(5));
    let a = read(&mut m, at(RENEW + 20), read_op(&a), Some(stored(&asked, 2)));
    let (_, reason) = term_ended(&a);
    assert!(
        matches!(reason, EndReason::Transferred { .. }),
        "{reason:?}"
    );
    let a = m.step(at(RENEW + 30), Input::Drained { token: 1 });
    let (op, expected, reserve) = cas_op(&a);
    assert_eq!(expected, Some(Version(2)));
    assert_eq!(reserve.transfer_to(), Some("b"));
    // b stopped and withdrew meanwhile (version 3): the release conflicts.
    let a = cas(&mut m, at(RENEW + 40), op, CasOutcome::Conflict);
    let withdrawn = asked.without_request(Version(1));
    let a = read(
        &mut m,
        at(RENEW + 50),
        read_op(&a),
        Some(stored(&withdrawn, 3)),
    );
    let (_, expected, release) = cas_op(&a);
    assert_eq!(expected, Some(Version(3)));
    assert_eq!(
        release.transfer_to(),
        None,
        "reserved for a candidate that withdrew its request: {release:?}"
    );
}

/// A request replaced by one of higher priority while the leader drains
/// (the leader honours both): the release is reserved for the one the
/// record names now. A plain release instead let anyone, of any priority,
/// take the lease (the simulator saw leadership move to an equal priority
/// in the stable tail).
#[test]
fn a_request_replaced_by_a_higher_one_is_reserved_for_the_higher() {
    let (mut m, record) = leader("a");
    let a = first_renewal_refused(&mut m, 10);
    let asked = record.with_request(Version(1), "b", Some(5));
    let a = read(&mut m, at(RENEW + 20), read_op(&a), Some(stored(&asked, 2)));
    let (_, reason) = term_ended(&a);
    assert!(
        matches!(reason, EndReason::Transferred { .. }),
        "{reason:?}"
    );
    let a = m.step(at(RENEW + 30), Input::Drained { token: 1 });
    let (op, _, _) = cas_op(&a);
    let a = cas(&mut m, at(RENEW + 40), op, CasOutcome::Conflict);
    let higher = stored(&asked.with_request(Version(1), "c", Some(9)), 3);
    let a = read(&mut m, at(RENEW + 50), read_op(&a), Some(higher));
    let (_, expected, release) = cas_op(&a);
    assert_eq!(expected, Some(Version(3)));
    assert_eq!(release.holder, None);
    assert_eq!(release.transfer_to(), Some("c"), "{release:?}");
}

/// Was a bug (cosmetic, behaviour vs the old task). The old task never asked
/// a leader with its own candidate id (`leader.candidate != self.me`); the
/// machine follows `reported`, which leaves out only this very incarnation.
/// A restarted process (new incarnation, now of higher priority) under its
/// own previous incarnation, still alive, asks it every delay: the request
/// names its own id, which the old incarnation's `transfer` ignores
/// ("handing the lease to oneself changes nothing"), so each is a wasted
/// write, a conflicted renewal at the leader and a LeaderChanged for every
/// follower.
#[test]
fn a_candidate_never_asks_its_own_previous_incarnation() {
    let metadata = Metadata::address("x:1").with(PRIORITY_KEY, "5");
    let new = Holder {
        id: "a".into(),
        incarnation: 2,
    };
    let mut m = Machine::new(timing(), new, metadata, 7, at(0));
    m.preempt_after(DELAY, at(0));
    // `live_leader` is held by "a", incarnation 1, priority 0.
    poll(&mut m, at(0), Some(live_leader(at(0))));
    if let Some((_, a)) = run_until(&mut m, at(0), at(120_000), live_leader) {
        let (_, _, record) = cas_op(&a);
        panic!("asked its own id to hand over: {record:?}");
    }
}

/// Was a bug (liveness, pre-existing in the old task too). The leader
/// honoured b's request just before b stopped: the record is now the
/// release reserved for b (holder none, `tenure.transfer-to` = b, expiring
/// a term from now). b's withdrawal reads it, finds no holder, and stops,
/// leaving the reservation to a candidate that is gone: everybody else waits
/// a whole takeover wait with no leader, which is what the withdrawal is
/// for. Clearing the reservation (a plain release over it, token kept) is
/// safe: the old leader wrote it only after its term ended.
#[test]
fn a_stopping_candidate_gives_back_a_reservation_made_for_it() {
    let mut m = ranked("b", 5);
    poll(&mut m, at(0), Some(live_leader(at(0))));
    let (now, a) = run_until(&mut m, at(0), at(60_000), live_leader).expect("a request");
    let (op, _, record) = cas_op(&a);
    cas(&mut m, now, op, CasOutcome::Applied(Version(99)));
    let a = m.step(now, Input::Shutdown);
    let mut reserved = record.clone();
    reserved.holder = None;
    reserved.metadata = Metadata::new().with(crate::record::TRANSFER_TO_KEY, "b");
    reserved.renewed_at = now.wall;
    reserved.expires_at = now.wall + Duration::from_millis(T);
    let a = read(&mut m, now, read_op(&a), Some(stored(&reserved, 100)));
    assert!(
        writes(&a),
        "stopped leaving the lease reserved for itself: {a:?}"
    );
    let (_, expected, w) = cas_op(&a);
    assert_eq!(expected, Some(Version(100)));
    assert_eq!(w.holder, None);
    assert_eq!(w.transfer_to(), None);
    assert_eq!(w.token, reserved.token);
}

/// The wall clock stands still on the leader (renewals with the same times)
/// between two requests: the second request names the renewal, not the
/// first write, so a candidate that saw only the first request restarts its
/// wait. The mark's base version, not the times, tells a renewal.
#[test]
fn a_renewal_with_unchanged_times_between_requests_restarts_the_wait() {
    let mut m = machine("c", timing());
    let v5 = renewed(5, 0);
    let r6 = stored(&v5.record.with_request(v5.rewrite_base(), "x", Some(5)), 6);
    poll(&mut m, at(0), Some(r6.clone()));
    // The holder renews over v6 with the same times (its own record, no
    // mark, no request), then y asks over that.
    let v7 = stored(&v5.record, 7);
    let r8 = stored(&v7.record.with_request(v7.rewrite_base(), "y", Some(9)), 8);
    assert!(!r8.record.rewrites(&r6));
    let seen = poll_next(&mut m, at(0), Some(r8.clone()));
    let (now, _) = poll_until_write(&mut m, seen, Some(r8));
    assert_eq!(now.mono, seen.mono + takeover_wait());
}

/// A forged delivery shaped as a rewrite of the record seen keeps the
/// anchor only as a hint; the read before the takeover shows the genuine
/// renewal and the wait restarts from it.
#[test]
fn a_forged_rewrite_on_the_feed_does_not_carry_the_anchor_past_a_read() {
    let mut m = machine("c", timing());
    let v5 = renewed(5, 0);
    poll(&mut m, at(0), Some(v5.clone()));
    let forged = stored(&v5.record.with_request(Version(5), "x", Some(5)), 6);
    m.step(at(100), Input::Observed { current: forged });
    // The genuine v6 is the holder's renewal.
    let v6 = renewed(6, 3_000);
    let seen = poll_next(&mut m, at(100), Some(v6.clone()));
    let (now, _) = poll_until_write(&mut m, seen, Some(v6));
    assert_eq!(now.mono, seen.mono + takeover_wait());
}

/// A mark on a release or reservation (no holder), and marks that only
/// look like the version (leading zeros, a plus sign, overflow, junk):
/// never a rewrite of a held record, whatever they name.
#[test]
fn marks_on_records_without_a_holder_or_with_hostile_values() {
    let v5 = renewed(5, 0);
    let mut gone = v5.record.with_request(Version(5), "x", None);
    gone.holder = None;
    assert!(!gone.rewrites(&v5));
    assert_eq!(stored(&gone, 6).rewrite_base(), Version(6));
    for junk in ["18446744073709551621", "-5", "5 ", "", "0x5", "५"] {
        let mut r = v5.record.with_request(Version(5), "x", None);
        r.metadata.insert(REWRITTEN_OVER_KEY, junk);
        assert!(!r.rewrites(&v5), "{junk:?}");
    }
    // Numbers Rust parses that are not the canonical form still name the
    // same version: only non-holders write the mark, so this is harmless.
    for same in ["005", "+5"] {
        let mut r = v5.record.with_request(Version(5), "x", None);
        r.metadata.insert(REWRITTEN_OVER_KEY, same);
        assert!(r.rewrites(&v5), "{same:?}");
    }
}

/// A store that lost its data and restarted its versions: a record at a
/// reused version number with a mark naming the version first seen, but
/// another holder (or another token): no carry-over.
#[test]
fn a_reused_version_number_with_another_record_restarts_the_wait() {
    let mut m = machine("c", timing());
    let v5 = renewed(5, 0);
    poll(&mut m, at(0), Some(v5.clone()));
    let mut other = held("z", 2, 4);
    other.record.renewed_at = v5.record.renewed_at;
    other.record.expires_at = v5.record.expires_at;
    let r = stored(&other.record.with_request(Version(5), "x", Some(3)), 5);
    let seen = poll_next(&mut m, at(0), Some(r.clone()));
    let (now, _) = poll_until_write(&mut m, seen, Some(r));
    assert_eq!(now.mono, seen.mono + takeover_wait());
}

/// Extreme delays: `Duration::MAX` saturates (no panic, never asks, no
/// wake-up at or before now); zero asks at most once per term.
#[test]
fn extreme_delays_neither_panic_nor_spin() {
    let mut m = ranked_with("b", 5, Duration::MAX);
    poll(&mut m, at(0), Some(live_leader(at(0))));
    assert!(run_until(&mut m, at(0), at(600_000), live_leader).is_none());

    let mut m = ranked_with("b", 5, Duration::ZERO);
    poll(&mut m, at(0), Some(live_leader(at(0))));
    let mut asked = Vec::new();
    let mut now = at(0);
    while let Some((t, a)) = run_until(&mut m, now, at(120_000), live_leader) {
        let (op, _, _) = cas_op(&a);
        // Declined or lost: conflicts and failures alike.
        m.step(
            t,
            Input::CasDone {
                op,
                result: Err(StoreError::Timeout(Duration::from_secs(1))),
            },
        );
        asked.push(t.mono);
        now = t;
    }
    assert!(!asked.is_empty());
    for w in asked.windows(2) {
        assert!(w[1].saturating_since(w[0]) >= Duration::from_millis(T));
    }
}

/// Conflicts on every request: at most three writes per look, then a
/// delay; never a loop.
#[test]
fn a_request_that_always_conflicts_is_bounded() {
    let mut m = ranked("b", 5);
    poll(&mut m, at(0), Some(live_leader(at(0))));
    let mut writes_at = Vec::new();
    let mut now = at(0);
    while let Some((t, a)) = run_until(&mut m, now, at(100_000), live_leader) {
        let (op, _, _) = cas_op(&a);
        let mut a = cas(&mut m, t, op, CasOutcome::Conflict);
        writes_at.push(t.mono);
        // A conflict re-reads at once; that read may lead to the next try.
        while let Some(op) = read_sent(&a) {
            a = read(&mut m, t, op, Some(live_leader(t)));
        }
        while writes(&a) {
            let (op, _, _) = cas_op(&a);
            writes_at.push(t.mono);
            a = cas(&mut m, t, op, CasOutcome::Conflict);
            while let Some(op) = read_sent(&a) {
                a = read(&mut m, t, op, Some(live_leader(t)));
            }
        }
        now = t;
    }
    // Group by instant: never more than 3 at one look.
    let mut i = 0;
    while i < writes_at.len() {
        let same = writes_at[i..]
            .iter()
            .take_while(|t| **t == writes_at[i])
            .count();
        assert!(same <= 3, "{same} writes at {:?}", writes_at[i]);
        i += same;
    }
    assert!(
        writes_at.len() <= 3 * 7,
        "{} writes in 100 s",
        writes_at.len()
    );
}

/// Shutdown with the request in flight: its late reply (applied) is
/// followed by a read and the withdrawal; a lost reply ends the
/// withdrawal within its bound, without a spin.
#[test]
fn shutdown_with_a_request_in_flight_withdraws_or_gives_up() {
    for lost in [false, true] {
        let mut m = ranked("b", 5);
        poll(&mut m, at(0), Some(live_leader(at(0))));
        let (now, a) = run_until(&mut m, at(0), at(60_000), live_leader).expect("a request");
        let (op, expected, record) = cas_op(&a);
        let a = m.step(now, Input::Shutdown);
        assert!(a.is_empty(), "{a:?}");
        assert_eq!(m.next_wake(now), None);
        let later = at_mono(now.mono + Duration::from_millis(100));
        let mut a = if lost {
            write_timed_out(&mut m, later, op, Duration::from_millis(100))
        } else {
            cas(
                &mut m,
                later,
                op,
                CasOutcome::Applied(Version(expected.unwrap().0 + 1)),
            )
        };
        let mut t = later;
        let limit = at_mono(now.mono + timing().op_timeout * 6);
        let mut steps = 0;
        while !a.contains(&Action::Stopped) {
            steps += 1;
            assert!(steps < 100);
            if let Some(op) = read_sent(&a) {
                let v = stored(&record, expected.unwrap().0 + 1);
                a = read(&mut m, t, op, Some(v));
                continue;
            }
            if writes(&a) {
                let (op, _, w) = cas_op(&a);
                assert_eq!(w.transfer_to(), None);
                a = cas(&mut m, t, op, CasOutcome::Applied(Version(1_000)));
                continue;
            }
            let next = m.next_wake(t).expect("a wake-up while withdrawing");
            assert!(next > t.mono);
            t = at_mono(next);
            assert!(t.mono <= limit.mono);
            a = m.step(t, Input::Tick);
        }
    }
}
