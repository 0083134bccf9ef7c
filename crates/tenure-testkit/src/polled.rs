//! Hand-over scenarios for candidates that learn of a change by polling
//! (stores without a change feed, such as DynamoDB and the object
//! stores): a graceful stop is taken over within one poll, a crash only
//! once the lease expired. Re-exported from [`super::scenarios`].

use std::time::{Duration, Instant};

use tenure::config::Config;
use tenure::record::GroupName;
use tenure::store::LeaseStore;
use tenure::Elector;
use tenure::Role;
use tenure::Term;

use super::scenarios::{elector, leads_within, timed};
use super::{TcpProxy, TermLog};

/// What [`graceful_stop_hands_over_within_one_poll`] leaves for the test
/// to check further.
pub struct PolledHandOver {
    /// The group the candidates stood for.
    pub group: GroupName,
    /// The candidate that took over (`b`), still leading: the test stops it.
    pub successor: Elector,
    /// The successor's term.
    pub term: Term,
    /// From the old leader's shutdown until the successor led.
    pub took: Duration,
}

/// Two candidates of a fresh group, `a` leading and `b` waiting, watched.
struct Standing {
    group: GroupName,
    a: Elector,
    a_term: Term,
    b: Elector,
    log: TermLog,
}

/// Starts `a` on store `a` and, once it leads, `b` on store `b`, both with
/// `term`, for a fresh group named after `label`; gives `b` half a second
/// to see `a` lead.
async fn a_leads_b_waits(
    a: impl LeaseStore,
    b: impl LeaseStore,
    label: &str,
    term: Duration,
) -> Standing {
    let group = super::unique_group(label);
    let a = elector(a, &group, "a", term);
    let a_term = leads_within(&a, Duration::from_secs(10), "a elected").await;
    let b = elector(b, &group, "b", term);
    let log = TermLog::watch(&[&a, &b]);
    tokio::time::sleep(Duration::from_millis(500)).await;
    Standing {
        group,
        a,
        a_term,
        b,
        log,
    }
}

/// Two candidates on stores `a` and `b`, with the default term: `a` leads,
/// `b` waits; `a` stops gracefully, releasing the lease, and `b`, polling,
/// takes over within one poll (and a second of round trips), far sooner
/// than a crashed leader's term, with the next token; no two terms
/// overlap. `name` names the store in the printed figures.
pub async fn graceful_stop_hands_over_within_one_poll(
    a: impl LeaseStore,
    b: impl LeaseStore,
    name: &str,
) -> PolledHandOver {
    let term = Config::default().term;
    let Standing {
        group,
        a,
        a_term,
        b,
        log,
    } = a_leads_b_waits(a, b, "handover", term).await;
    let t0 = Instant::now();
    a.shutdown().await;
    let b_term = leads_within(&b, Duration::from_secs(15), "b takes over").await;
    let took = t0.elapsed();
    let poll = b.timing().bounds().graceful_failover_polling;
    eprintln!(
        "{name}, hand-over after a graceful stop: {took:?} (one poll: {poll:?}; term {term:?})"
    );
    assert!(
        took < poll + Duration::from_secs(1),
        "{took:?}: not within one poll"
    );
    assert!(took < term, "b waited out the term: {took:?}");
    assert_eq!(b_term.token(), a_term.token() + 1);
    log.check();
    PolledHandOver {
        group,
        successor: b,
        term: b_term,
        took,
    }
}

/// A leader on `via_proxy` is cut off for good (`proxy` goes silent, as if
/// the leader crashed); the other candidate, on `direct`, takes the lease
/// only once it expired (no sooner than half a term after the cut) and
/// within the crash-failover bound (and 2 s of round trips), with the next
/// token; `b` followed `a` before the cut, `a` stopped before `b` began, and
/// no two terms overlap. Term 3 s.
/// `name` names the store in the printed figures; returns the takeover
/// time.
pub async fn crashed_leader_replaced_within_the_bound(
    via_proxy: impl LeaseStore,
    direct: impl LeaseStore,
    proxy: &TcpProxy,
    name: &str,
) -> Duration {
    let term = Duration::from_secs(3);
    let Standing {
        a, a_term, b, log, ..
    } = a_leads_b_waits(via_proxy, direct, "crash", term).await;
    assert!(matches!(b.role(), Role::Follower { .. }), "{:?}", b.role());
    proxy.cut();
    let (b_term, took) = timed(leads_within(
        &b,
        Duration::from_secs(20),
        "b takes over the expired lease",
    ))
    .await;
    let bound = b.timing().bounds().crash_failover;
    eprintln!("{name}, takeover after the leader was cut off: {took:?} (bound {bound:?})");
    assert!(a_term.is_cancelled(), "a stopped before b started");
    assert_eq!(b_term.token(), a_term.token() + 1);
    assert!(
        took >= term / 2,
        "b did not wait for the lease to expire: {took:?}"
    );
    assert!(
        took < bound + Duration::from_secs(2),
        "{took:?} > {bound:?}"
    );
    log.check();
    b.shutdown().await;
    proxy.heal();
    a.shutdown().await;
    took
}
