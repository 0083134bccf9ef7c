//! Election scenarios every networked store runs against its real server:
//! the same steps and assertions for each store, so the stores are held to
//! one standard. Each returns its measured figures for the test to print.

use std::future::Future;
use std::time::{Duration, Instant};

use tenure::clock::{Clock, SystemClock};
use tenure::config::Config;
use tenure::engine::EngineStats;
use tenure::record::GroupName;
use tenure::store::LeaseStore;
use tenure::Elector;
use tenure::Role;
use tenure::Term;

pub use super::polled::{
    crashed_leader_replaced_within_the_bound, graceful_stop_hands_over_within_one_poll,
    PolledHandOver,
};
pub use super::reported::{
    reported_cut_off, reported_graceful_handover, reported_restart, reported_thousand_groups,
    Connect,
};

use super::many_groups::{all_lead, electors_for_groups, shutdown_all};
use super::TcpProxy;

/// Starts an elector for `group` on `store` with the given term and every
/// other setting derived from it.
pub fn elector(store: impl LeaseStore, group: &GroupName, id: &str, term: Duration) -> Elector {
    Elector::builder(store, group.as_str())
        .candidate_id(id)
        .config(Config::new(term))
        .start()
        .expect("a valid configuration")
}

/// Waits up to `within` for `elector` to lead and returns its term;
/// panics with `what` if it does not, or if the elector stops.
pub async fn leads_within(elector: &Elector, within: Duration, what: &str) -> Term {
    elector
        .wait_for_leadership_within(within)
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// Runs `f` to its end: its output, and how long (real time) it took.
pub(crate) async fn timed<T>(f: impl Future<Output = T>) -> (T, Duration) {
    let began = Instant::now();
    let out = f.await;
    (out, began.elapsed())
}

/// Waits up to `within` for `a` or `b`, whichever first, to lead and
/// returns that term; panics with `what` if neither does, or one stops.
pub async fn either_leads(a: &Elector, b: &Elector, within: Duration, what: &str) -> Term {
    let first = async {
        tokio::select! {
            t = a.wait_for_leadership() => t,
            t = b.wait_for_leadership() => t,
        }
    };
    tokio::time::timeout(within, first)
        .await
        .unwrap_or_else(|_| panic!("{what}: not within {within:?}"))
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// Waits until exactly one of `electors` leads and returns its index;
/// panics if two ever lead at once, or nobody does within `within`.
pub async fn one_leader(electors: &[&Elector], within: Duration) -> usize {
    let deadline = Instant::now() + within;
    loop {
        let leaders: Vec<usize> = electors
            .iter()
            .enumerate()
            .filter(|(_, e)| e.is_leader())
            .map(|(i, _)| i)
            .collect();
        assert!(leaders.len() <= 1, "two leaders at once: {leaders:?}");
        if let [one] = leaders[..] {
            return one;
        }
        assert!(Instant::now() < deadline, "no leader within {within:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Starts `a` on store `a` for a fresh group named after `label` and, once
/// it leads (within 5 s), `b` on store `b`; both with `term`. Returns `a`,
/// its term and `b`.
async fn a_leads_then_b_stands(
    a: impl LeaseStore,
    b: impl LeaseStore,
    label: &str,
    term: Duration,
) -> (Elector, Term, Elector) {
    let group = super::unique_group(label);
    let a = elector(a, &group, "a", term);
    let a_term = leads_within(&a, Duration::from_secs(5), "a elected").await;
    let b = elector(b, &group, "b", term);
    (a, a_term, b)
}

/// A graceful stop is taken over within one round trip through the
/// store's change feed, not after a poll: with a 60 s term (polls every
/// 15 s plus up to 6 s of jitter) the follower must lead within `within`
/// of the leader's `shutdown()` starting, and with the next token. `a` and
/// `b` are two connections to the store. Returns the hand-over time.
///
/// Pass a generous `within` (a second or two): it is a liveness bound on a
/// loaded machine, and still far below the poll interval, so a hand-over
/// that waited for a poll fails it.
pub async fn graceful_handover_via_feed(
    a: impl LeaseStore,
    b: impl LeaseStore,
    within: Duration,
) -> Duration {
    let (a, a_term, b) = a_leads_then_b_stands(a, b, "handover", Duration::from_secs(60)).await;
    let poll = b.timing().bounds().graceful_failover_polling;
    let mut roles = b.watch_role();
    tokio::time::timeout(
        Duration::from_secs(5),
        roles.wait_for(|r| matches!(r, Role::Follower { .. })),
    )
    .await
    .expect("b follows a")
    .expect("b running");
    // Let b's subscription settle, as it would have in steady state.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let t0 = Instant::now();
    a.shutdown().await;
    let b_term = leads_within(&b, Duration::from_secs(10), "b elected").await;
    let took = t0.elapsed();
    assert!(
        took < within,
        "b took {took:?} to take over a released lease; a poll would take up to {poll:?}: the change feed did not work"
    );
    assert_eq!(
        b_term.token(),
        a_term.token() + 1,
        "the next term raises the token by one"
    );
    b.shutdown().await;
    took
}

/// What [`cut_off_leader_stops_first`] measured, from the cut.
#[derive(Clone, Copy, Debug)]
pub struct CutOff {
    /// When the cut-off leader's term ended: its last recorded deadline.
    pub leader_ended: Duration,
    /// When the other candidate's term began: its acquiring write was sent.
    pub successor_elected: Duration,
    /// The configuration's crash-failover bound.
    pub bound: Duration,
}

/// A leader cut off from the store (its connection goes through `proxy`,
/// which goes silent) ends its term before the other candidate, connected
/// directly, is elected; the token rises; after healing, the old leader
/// keeps standing and follows the new one. Term 2 s.
///
/// "Before" compares the instants the electors recorded on the host's
/// boot clock (the old term's last deadline, the new term's anchor: when
/// its acquiring write was sent), not when this test's tasks happened to
/// observe the events, which a busy machine delays.
pub async fn cut_off_leader_stops_first(
    via_proxy: impl LeaseStore,
    direct: impl LeaseStore,
    proxy: &TcpProxy,
) -> CutOff {
    let term = Duration::from_secs(2);
    let (a, a_term, b) = a_leads_then_b_stands(via_proxy, direct, "cutoff", term).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(a.is_leader() && !b.is_leader());

    let clock = SystemClock;
    let t_cut = clock.now().mono;
    proxy.cut();
    let b_term = leads_within(&b, Duration::from_secs(15), "b elected").await;
    // Read at once, long before b's first renewal (a third of a term on):
    // b's deadline is then its acquiring write's send instant plus the
    // validity, so this is that send instant.
    let b_started = b_term.deadline_mono() - b.timing().leader_validity;
    // a's renewals cannot land any more, so its deadline is final.
    let a_deadline = a_term.deadline_mono();
    assert!(
        a_deadline <= b_started,
        "a's term ran until {:?} after the cut, b's began {:?} after it",
        a_deadline.saturating_since(t_cut),
        b_started.saturating_since(t_cut)
    );
    assert!(
        a_deadline.saturating_since(t_cut) <= term,
        "a's term ran on for {:?} after the cut",
        a_deadline.saturating_since(t_cut)
    );
    tokio::time::timeout(term, a_term.ended())
        .await
        .expect("a's term ended");
    assert!(b_term.token() > a_term.token());
    let bound = b.timing().bounds().crash_failover;

    proxy.heal();
    let t = a.timing();
    let settle = t.op_timeout * 2 + t.retry_interval + t.retry_jitter + Duration::from_secs(2);
    let mut roles = a.watch_role();
    tokio::time::timeout(
        settle,
        roles.wait_for(|r| matches!(r, Role::Follower { .. })),
    )
    .await
    .expect("a keeps standing and follows b once healed")
    .expect("a running");
    b.shutdown().await;
    a.shutdown().await;
    CutOff {
        leader_ended: a_deadline.saturating_since(t_cut),
        successor_elected: b_started.saturating_since(t_cut),
        bound,
    }
}

/// What [`many_groups_followed_without_reads`] measured.
#[derive(Clone, Copy, Debug)]
pub struct ManyGroups {
    /// From the first elector's start until every group had its leader.
    pub elected_all: Duration,
    /// How long the steady window lasted.
    pub window: Duration,
    /// What the leaders' engine did in the window.
    pub leaders: EngineStats,
    /// What the followers' engine did in the window.
    pub followers: EngineStats,
}

/// `groups` groups on one store: electors built with
/// `Elector::builder(leading.clone(), …)` in a loop are all elected, by one
/// engine; a second handle (`following`, opened separately, as a second
/// process would) stands in every group and follows the leaders' renewals
/// through the store's change feed with no read of its own over a whole term
/// (three renewals; the engine's check of its feed reads one group per
/// retry interval). `term` should leave room for a loaded machine (6 s
/// or so). Returns the figures for the test to print.
pub async fn many_groups_followed_without_reads<S: LeaseStore + Clone>(
    leading: S,
    following: S,
    groups: usize,
    term: Duration,
) -> ManyGroups {
    let prefix = super::unique_group("many");
    let began = Instant::now();
    let leaders = electors_for_groups(&leading, prefix.as_str(), groups, "a", term);
    let engine = leaders[0]
        .engine()
        .expect("a lease elector runs in an engine");
    all_lead(&leaders, term * 10).await;
    let elected_all = began.elapsed();
    assert_eq!(
        engine.stats().groups,
        groups as u64,
        "every elector built on clones of one store handle runs in one engine"
    );

    let followers = electors_for_groups(&following, prefix.as_str(), groups, "b", term);
    let following_engine = followers[0].engine().expect("an engine");
    for (i, e) in followers.iter().enumerate() {
        let mut roles = e.watch_role();
        tokio::time::timeout(
            term * 3,
            roles.wait_for(|r| matches!(r, Role::Follower { .. })),
        )
        .await
        .unwrap_or_else(|_| panic!("follower of group {i} does not see the leader"))
        .expect("running");
    }
    assert_eq!(following_engine.stats().groups, groups as u64, "one engine");
    // The followers' first reads (one batched read when they join) are done.
    tokio::time::sleep(term / 3).await;

    let (l0, f0, t0) = (engine.stats(), following_engine.stats(), Instant::now());
    tokio::time::sleep(term).await;
    let (l1, f1, window) = (engine.stats(), following_engine.stats(), t0.elapsed());
    let figures = ManyGroups {
        elected_all,
        window,
        leaders: l1.since(&l0),
        followers: f1.since(&f0),
    };
    assert_eq!(
        leaders.iter().filter(|e| e.is_leader()).count(),
        groups,
        "every leader kept leading: {figures:?}"
    );
    assert!(
        followers.iter().all(|e| !e.is_leader()),
        "a follower took a group over: {figures:?}"
    );
    // The one read the followers' engine makes per retry interval to see
    // that its feed still delivers, for all the groups together; no group
    // reads for itself.
    let checks = (term.as_millis() / (term / 4).as_millis()) as u64 + 1;
    assert!(
        figures.followers.reads <= checks && figures.followers.feed_silences == 0,
        "the followers read while the leaders renewed: {figures:?}"
    );
    assert_eq!(figures.followers.writes, 0, "{figures:?}");
    assert!(
        figures.followers.changes >= 2 * groups as u64,
        "the feed delivered about three renewals of every group in the window: {figures:?}"
    );
    assert!(
        figures.leaders.writes <= 4 * groups as u64,
        "the leaders renewed about three times each in the window: {figures:?}"
    );
    shutdown_all(followers).await;
    shutdown_all(leaders).await;
    figures
}

/// A server a test can stop and start again on its data.
pub trait Restart {
    /// Stops it at once (SIGKILL).
    fn kill(&mut self);
    /// Starts it again on the same ports and data.
    fn restart(&mut self);
}

/// The store's server stopped for longer than a term, then restarted on
/// its data, under two candidates on stores `a` and `b` (whose operations
/// time out within a second or so): the leader steps down by its deadline
/// while the server is away, nobody leads while it is down (though the
/// challenger's wait for the old record has run out by then), and once it
/// is back exactly one leads, with a token above the old one (the data
/// survived), and stays the only leader for three seconds. No two terms
/// overlap and tokens rise throughout. `name` names the server in the
/// messages.
pub async fn one_leader_across_a_restart(
    a: impl LeaseStore,
    b: impl LeaseStore,
    name: &str,
    server: &mut impl Restart,
) {
    let group = super::unique_group("restart");
    let term = Duration::from_secs(2);
    let (a, b) = (elector(a, &group, "a", term), elector(b, &group, "b", term));
    let log = super::TermLog::watch(&[&a, &b]);
    let both = [&a, &b];
    let first = one_leader(&both, Duration::from_secs(5)).await;
    let old_term = both[first].current_term().expect("a leader's term");
    let old_deadline = old_term.deadline();

    let t_kill = Instant::now();
    server.kill();
    tokio::time::timeout(Duration::from_secs(4), old_term.ended())
        .await
        .unwrap_or_else(|_| panic!("the leader steps down while {name} is away"));
    let ended = Instant::now();
    assert!(
        ended <= old_deadline + Duration::from_millis(50),
        "ended {:?} after its deadline",
        ended - old_deadline
    );
    eprintln!(
        "{name} down: the leader stepped down {:?} after the kill",
        ended - t_kill
    );
    // Down for longer than a term and the challenger's takeover wait (and
    // an operation's timeout), so that "nobody leads" is a finding: a
    // store that let a write through while down would have elected b.
    let down_for = term.mul_f64(1.0 + Config::new(term).drift) + Duration::from_secs(1);
    tokio::time::sleep_until(
        (t_kill + down_for)
            .max(Instant::now() + Duration::from_millis(500))
            .into(),
    )
    .await;
    assert!(
        !a.is_leader() && !b.is_leader(),
        "nobody leads while {name} is down"
    );
    server.restart();
    let t_up = Instant::now();

    let next = one_leader(&both, Duration::from_secs(20)).await;
    let new_term = both[next].current_term().expect("a leader's term");
    eprintln!(
        "{name} restart: {} elected {:?} after the server was back, token {} (before: {})",
        both[next].candidate_id(),
        t_up.elapsed(),
        new_term.token(),
        old_term.token()
    );
    assert!(
        new_term.token() > old_term.token(),
        "the data survived, so tokens continue"
    );
    for _ in 0..30 {
        assert_eq!(one_leader(&both, Duration::from_secs(2)).await, next);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    a.shutdown().await;
    b.shutdown().await;
    let spans = log.check();
    assert!(spans.len() >= 2, "{spans:?}");
}

/// What [`one_unwritable_group_fails_alone`] saw.
#[derive(Debug)]
pub struct Isolation {
    /// How many groups were led.
    pub groups: usize,
    /// The groups other than the jammed one whose terms ended while it was
    /// jammed (must be none).
    pub others_lost: usize,
    /// Whether the jammed group's own term ended (the store could not
    /// renew it).
    pub jammed_lost: bool,
    /// How long the group stayed unwritable.
    pub jammed_for: Duration,
}

/// `groups` groups led by one engine on `store` (electors built from its
/// clones); `jam` makes one of them unwritable (a row lock held by another
/// session, a key turned into something the store cannot overwrite) for
/// three terms, then `unjam` undoes it. Every other group keeps its term
/// throughout: one item the store cannot write fails only itself, not
/// the batches it is in. Returns the figures for the test to print (the
/// jammed group's own loss is reported, not asserted: a store may yet
/// write it).
///
/// # Panics
///
/// If a group is not elected within ten terms, another group loses its
/// term while one is jammed, or the groups are not all led again within
/// five terms of the unjam: the failures the scenario checks for.
pub async fn one_unwritable_group_fails_alone<S, G, J, JF, U, UF>(
    store: S,
    groups: usize,
    term: Duration,
    jam: J,
    unjam: U,
) -> Isolation
where
    S: LeaseStore + Clone,
    J: FnOnce(GroupName) -> JF,
    JF: Future<Output = G>,
    U: FnOnce(G) -> UF,
    UF: Future<Output = ()>,
{
    let prefix = super::unique_group("isolated");
    let leaders = electors_for_groups(&store, prefix.as_str(), groups, "a", term);
    let mut terms: Vec<Term> = Vec::with_capacity(groups);
    for (i, e) in leaders.iter().enumerate() {
        terms.push(leads_within(e, term * 10, &format!("group {i} elected")).await);
    }
    let jammed = groups / 2;
    let guard = jam(leaders[jammed].group().clone()).await;
    let began = Instant::now();
    tokio::time::sleep(term * 3).await;
    let jammed_for = began.elapsed();
    let lost: Vec<usize> = terms
        .iter()
        .enumerate()
        .filter(|(_, t)| !t.is_valid() || t.is_cancelled())
        .map(|(i, _)| i)
        .collect();
    unjam(guard).await;
    let others: Vec<usize> = lost.iter().copied().filter(|i| *i != jammed).collect();
    assert!(
        others.is_empty(),
        "{} of {} groups lost their terms while only group {jammed} was unwritable: {:?}",
        others.len(),
        groups - 1,
        &others[..others.len().min(20)]
    );
    // Once writable again, the jammed group is led again.
    all_lead(&leaders, term * 5).await;
    shutdown_all(leaders).await;
    Isolation {
        groups,
        others_lost: others.len(),
        jammed_lost: lost.contains(&jammed),
        jammed_for,
    }
}
