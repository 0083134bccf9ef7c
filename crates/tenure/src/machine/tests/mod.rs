//! The timing rules, one explicit schedule each; the tests sit by role,
//! as the machine does. The helpers here drive a machine by hand.

use std::time::Duration;

use super::*;
use crate::clock::WallTime;
use crate::config::Config;
use crate::record::TRANSFER_TO_KEY;

mod candidate;
mod feed;
mod leader;
mod preempt;
mod preempt_schedules;
mod release;
mod takeover;

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
