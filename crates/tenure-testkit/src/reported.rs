//! The scenarios of [`super::scenarios`] as a networked store's test runs
//! them: open the handles with the store's `connect` (an `async fn(&str)`
//! such as `EtcdStore::connect`), run the scenario, print its figures under
//! the store's name, and return them. Re-exported from
//! [`super::scenarios`]; each store's test is then one call, and every
//! store is held to the same bounds and prints the same line. The
//! scenarios' futures are boxed: they are large, and a test's own future
//! stays small.

use std::fmt::Debug;
use std::future::Future;
use std::time::Duration;

use tenure::store::LeaseStore;

use super::scenarios::{
    cut_off_leader_stops_first, graceful_handover_via_feed, many_groups_followed_without_reads,
    one_leader_across_a_restart, CutOff, ManyGroups, Restart,
};
use super::TcpProxy;

/// How the `reported_*` scenarios and [`UrlHarness`](super::UrlHarness)
/// open a store's handles: any `async fn(&str) -> Result<S, E>` whose
/// future is `Send`, such as `EtcdStore::connect`.
pub trait Connect<'a, S> {
    /// Opens a handle on `url`; panics naming the store (`name`) and the
    /// error if it cannot.
    fn open(&self, name: &str, url: &'a str) -> impl Future<Output = S> + Send;
}

impl<'a, S, E, Fut, F> Connect<'a, S> for F
where
    F: Fn(&'a str) -> Fut + Sync,
    Fut: Future<Output = Result<S, E>> + Send,
    S: Send,
    E: Debug,
{
    async fn open(&self, name: &str, url: &'a str) -> S {
        match self(url).await {
            Ok(store) => store,
            Err(e) => panic!("{name}: connect: {e:?}"),
        }
    }
}

/// [`graceful_handover_via_feed`] on two handles opened from `url`, with a
/// 2 s bound (a second or two on a loaded machine, far below the 15 s
/// poll); prints `{name} hand-over: {took:?}` and returns the time taken.
pub async fn reported_graceful_handover<'a, S: LeaseStore>(
    name: &str,
    url: &'a str,
    connect: impl Connect<'a, S>,
) -> Duration {
    let a = connect.open(name, url).await;
    let b = connect.open(name, url).await;
    let took = Box::pin(graceful_handover_via_feed(a, b, Duration::from_secs(2))).await;
    eprintln!("{name} hand-over: {took:?}");
    took
}

/// [`cut_off_leader_stops_first`]: one handle opened from `direct_url`,
/// the other from `proxied_url`, which leads to the store through `proxy`
/// (give it a short operation timeout, such as `?timeout=1s`); prints
/// `{name} cut-off: {figures:?}` and returns the figures.
pub async fn reported_cut_off<'a, S: LeaseStore>(
    name: &str,
    direct_url: &'a str,
    proxied_url: &'a str,
    proxy: &TcpProxy,
    connect: impl Connect<'a, S>,
) -> CutOff {
    let direct = connect.open(name, direct_url).await;
    let via_proxy = connect.open(name, proxied_url).await;
    let figures = Box::pin(cut_off_leader_stops_first(via_proxy, direct, proxy)).await;
    eprintln!("{name} cut-off: {figures:?}");
    figures
}

/// [`many_groups_followed_without_reads`] for a thousand groups with a 6 s
/// term, the leading and the following handle both opened from `url`;
/// prints `{name}, 1000 groups: {figures:?}`. Where the store promises
/// batched renewals, `max_write_batches` bounds the leaders' write batches
/// in the one-term window (three renew intervals: 9 is three round trips
/// an interval); `None` where it promises no such bound.
pub async fn reported_thousand_groups<'a, S: LeaseStore + Clone>(
    name: &str,
    url: &'a str,
    connect: impl Connect<'a, S>,
    max_write_batches: Option<u64>,
) -> ManyGroups {
    let leading = connect.open(name, url).await;
    let following = connect.open(name, url).await;
    let run = many_groups_followed_without_reads(leading, following, 1000, Duration::from_secs(6));
    let figures = Box::pin(run).await;
    eprintln!("{name}, 1000 groups: {figures:?}");
    if let Some(max) = max_write_batches {
        assert!(
            figures.leaders.write_batches <= max,
            "the leaders' renewals went out in {} batches in one term, more than {max}: {figures:?}",
            figures.leaders.write_batches
        );
    }
    figures
}

/// [`one_leader_across_a_restart`] of `server` under two handles opened
/// from `url` (give it a short operation timeout, such as `?timeout=1s`);
/// `name` names the server in the messages, which say how long the leader
/// took to step down and the next to be elected.
pub async fn reported_restart<'a, S: LeaseStore>(
    name: &str,
    url: &'a str,
    connect: impl Connect<'a, S>,
    server: &mut impl Restart,
) {
    let a = connect.open(name, url).await;
    let b = connect.open(name, url).await;
    Box::pin(one_leader_across_a_restart(a, b, name, server)).await;
}
