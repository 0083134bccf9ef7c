//! The timing rules, one explicit schedule each.

use std::time::Duration;

use super::*;
use crate::clock::WallTime;
use crate::config::Config;
use crate::record::TRANSFER_TO_KEY;

const T: u64 = 9_000; // term in ms: renew 3 s, retry 2.25 s, grace 0.9 s

/// The timing of a `T` term without retry jitter (exact schedules), with
/// whatever else `change` sets.
fn timing_with(change: impl FnOnce(&mut Config)) -> Timing {
    let mut c = Config::new(Duration::from_millis(T));
    c.retry_jitter = Some(Duration::ZERO);
    change(&mut c);
    c.validate().unwrap()
}

fn timing() -> Timing {
    timing_with(|_| {})
}

/// The timing with a 500 ms bound on wall-clock skew, which allows a
/// takeover by the wall clock.
fn skewed() -> Timing {
    timing_with(|c| c.max_clock_skew = Some(Duration::from_millis(500)))
}

/// When (in ms) the leader of [`leader`] sends its first renewal: a third
/// of the term in (checked by [`first_renewal`]).
const RENEW: u64 = T / 3;

/// The deadline of the term [`leader`] wins (its write was sent at 0).
fn first_deadline() -> MonoTime {
    at(0).mono + timing().leader_validity
}

/// How long a challenger waits out a record of a `T` term it sees unchanged.
fn takeover_wait() -> Duration {
    timing().takeover_wait(Duration::from_millis(T))
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

/// A record without a holder (released) that keeps `token`.
fn released(token: u64, version: u64) -> Versioned {
    let mut v = held("gone", token, version);
    v.record.holder = None;
    v
}

/// `record` as the store holds it at `version`.
fn stored(record: &LeaseRecord, version: u64) -> Versioned {
    Versioned {
        record: record.clone(),
        version: Version(version),
    }
}

/// The read among `actions`, if there is one.
fn read_sent(actions: &[Action]) -> Option<OpId> {
    actions.iter().find_map(|a| match a {
        Action::Read { op, .. } => Some(*op),
        _ => None,
    })
}

fn read_op(actions: &[Action]) -> OpId {
    read_sent(actions).unwrap_or_else(|| panic!("expected a read in {actions:?}"))
}

/// Whether any of `actions` writes to the store.
fn writes(actions: &[Action]) -> bool {
    actions.iter().any(|a| matches!(a, Action::Cas { .. }))
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

/// The reply to the write `op` lost: it timed out `after` its send.
fn write_timed_out(m: &mut Machine, now: Now, op: OpId, after: Duration) -> Vec<Action> {
    m.step(
        now,
        Input::CasDone {
            op,
            result: Err(StoreError::Timeout(after)),
        },
    )
}

/// One look at the store: a tick at `now`, and the reply `current` to the
/// read it sends, at once.
fn poll(m: &mut Machine, now: Now, current: Option<Versioned>) -> Vec<Action> {
    poll_replied_at(m, now, now, current)
}

/// A tick at `now`, and the reply `current` to the read it sends, at
/// `reply`.
fn poll_replied_at(
    m: &mut Machine,
    now: Now,
    reply: Now,
    current: Option<Versioned>,
) -> Vec<Action> {
    let a = m.step(now, Input::Tick);
    read(m, reply, read_op(&a), current)
}

/// The instant the machine asks to be woken at next, after `now`.
fn wake(m: &Machine, now: Now) -> Now {
    at_mono(m.next_wake(now).expect("a wake-up"))
}

/// Ticks at every wake-up the machine asks for after `now`, each strictly
/// later than the one before, and answers each read with `current`, until
/// a tick writes: that instant, and the tick's actions.
fn poll_until_write(m: &mut Machine, now: Now, current: Option<Versioned>) -> (Now, Vec<Action>) {
    let mut now = now;
    for _ in 0..100 {
        let next = wake(m, now);
        assert!(
            next.mono > now.mono,
            "asked to wake at {next:?} after {now:?}"
        );
        now = next;
        let a = m.step(now, Input::Tick);
        if writes(&a) {
            return (now, a);
        }
        read(m, now, read_op(&a), current.clone());
    }
    panic!("no write within 100 wake-ups");
}

/// A fresh `m` ticks at 0 and finds the store empty: the acquisition it
/// sends (which expects no record).
fn acquire(m: &mut Machine) -> (OpId, LeaseRecord) {
    let a = poll(m, at(0), None);
    let (op, expected, record) = cas_op(&a);
    assert_eq!(expected, None);
    (op, record)
}

/// Drives a fresh `m` through acquisition on an empty store: the write is
/// sent at 0 and applies (version 1) at `reply`.
fn elect(m: &mut Machine, reply: Now) -> LeaseRecord {
    let (op, record) = acquire(m);
    let a = cas(m, reply, op, CasOutcome::Applied(Version(1)));
    assert!(matches!(a[..], [Action::Elected { token: 1, .. }]), "{a:?}");
    record
}

/// Drives a fresh machine through acquisition on an empty store at t=0.
fn leader(id: &str) -> (Machine, LeaseRecord) {
    let mut m = machine(id, timing());
    let record = elect(&mut m, at(2));
    (m, record)
}

/// The term that `actions` end and why: they must be that one `EndTerm`.
fn term_ended(actions: &[Action]) -> (u64, EndReason) {
    match actions {
        [Action::EndTerm { token, reason, .. }] => (*token, reason.clone()),
        _ => panic!("expected the end of a term alone in {actions:?}"),
    }
}

/// The work of the term of [`leader`], ended, drains at `now`: the release
/// that follows, which must keep the token for the next holder to raise,
/// over the version of the term's own last write.
fn release_once_drained(m: &mut Machine, now: Now) -> (OpId, LeaseRecord) {
    let a = m.step(now, Input::Drained { token: 1 });
    let (op, expected, record) = cas_op(&a);
    assert_eq!(expected, Some(Version(1)));
    assert_eq!(record.holder, None);
    assert_eq!(record.token, 1, "a release keeps the token");
    (op, record)
}

/// The reply to the acquisition `op` (applied as version 1 with `record`)
/// lost at `now`: the machine backs off without a word, and at the wake-up
/// it asks for reads its own record. That instant, and what it does then.
fn acquisition_reply_lost(
    m: &mut Machine,
    now: Now,
    op: OpId,
    record: &LeaseRecord,
    after: Duration,
) -> (Now, Vec<Action>) {
    let a = write_timed_out(m, now, op, after);
    assert!(a.is_empty(), "backs off before verifying: {a:?}");
    let now = wake(m, now);
    let a = poll(m, now, Some(stored(record, 1)));
    (now, a)
}

/// The first renewal of [`leader`], sent at the renew interval.
fn first_renewal(m: &mut Machine) -> (OpId, Option<Version>, LeaseRecord) {
    assert_eq!(timing().renew_interval, Duration::from_millis(RENEW));
    cas_op(&m.step(at(RENEW), Input::Tick))
}

/// The first renewal of [`leader`] refused as a conflict `after_ms` after
/// its send: what the machine does then (it reads to see why).
fn first_renewal_refused(m: &mut Machine, after_ms: u64) -> Vec<Action> {
    let (op, _, _) = first_renewal(m);
    cas(m, at(RENEW + after_ms), op, CasOutcome::Conflict)
}

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
