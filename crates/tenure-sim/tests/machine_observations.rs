//! Behaviour of the machine that the simulation surfaced, pinned down with
//! explicit times so it is easy to discuss. These are not safety bugs (the
//! simulation's checker accepts them, and says why); they document what a
//! caller of the machine sees.

use std::time::Duration;

use tenure::machine::{Action, Input, OpId};
use tenure::store::CasOutcome;
use tenure::{Config, Version};

mod schedule;
use schedule::{at, candidate_a};

fn cas_op(actions: &[Action]) -> OpId {
    match actions.iter().find(|a| matches!(a, Action::Cas { .. })) {
        Some(Action::Cas { op, .. }) => *op,
        _ => panic!("expected a compare-and-swap in {actions:?}"),
    }
}

/// The reply to compare-and-swap `op`: applied, the record now at
/// `version`.
fn applied(op: OpId, version: u64) -> Input {
    Input::CasDone {
        op,
        result: Ok(CasOutcome::Applied(Version(version))),
    }
}

/// A leader paused (GC, SIGSTOP) right after sending a renewal whose reply
/// arrives during the pause: on resume it processes the reply before any
/// timer, so the term whose deadline lapsed during the pause is renewed, and
/// no `EndTerm` is emitted. The term is valid again (safely: the new deadline
/// is anchored at the renewal's send instant), but an application watching
/// `Term::is_valid` sees it go false and then true again.
#[test]
fn a_lapsed_term_is_revived_by_a_renewal_processed_after_a_pause() {
    let timing = Config::new(Duration::from_secs(2)).validate().unwrap();
    let (mut m, op) = candidate_a(timing);
    let acquire = m.step(
        at(10),
        Input::ReadDone {
            op,
            result: Ok(None),
        },
    );
    let op = cas_op(&acquire);
    let elected = m.step(at(20), applied(op, 1));
    // Deadline: acquire sent at 10 ms + 2 s × 0.99 = 1990 ms.
    assert!(elected.contains(&Action::Elected {
        token: 1,
        deadline: at(1990).mono
    }));
    // The renewal is due at 10 + 666.67 ms.
    let renew = m.step(at(677), Input::Tick);
    let op = cas_op(&renew);
    // The process pauses from 678 ms to 2200 ms; the reply arrived at 690 ms
    // and is the first thing processed. The old deadline (1990 ms) passed.
    let resumed = m.step(at(2200), applied(op, 2));
    assert_eq!(
        resumed.first(),
        Some(&Action::Renewed {
            token: 1,
            deadline: at(677 + 1980).mono,
            latency: Duration::from_millis(2200 - 677),
        }),
        "renewed after the deadline lapsed: {resumed:?}"
    );
    assert!(
        !resumed.iter().any(|a| matches!(a, Action::EndTerm { .. })),
        "and the term never ended: {resumed:?}"
    );
}
