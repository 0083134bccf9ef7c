//! Many groups on one store handle: electors for a numbered set of groups
//! (all on clones of one handle, so one engine runs them), waiting for and
//! stopping them all, and the checks several stores share on such sets.

use std::future::Future;
use std::time::Duration;

use tenure::record::GroupName;
use tenure::store::{CasOutcome, CasRequest, LeaseStore};
use tenure::Elector;

use super::scenarios::elector;

/// `count` electors standing as `id`, one for each group `{prefix}-0`,
/// `{prefix}-1`, …, every one on a clone of `store` and with a `term`
/// term.
///
/// # Panics
///
/// If `{prefix}-{i}` is no valid group name (the caller's prefix).
pub fn electors_for_groups<S: LeaseStore + Clone>(
    store: &S,
    prefix: &str,
    count: usize,
    id: &str,
    term: Duration,
) -> Vec<Elector> {
    (0..count)
        .map(|i| elector(store.clone(), &numbered(prefix, i), id, term))
        .collect()
}

/// Waits up to `within` for each of `electors` to lead; panics naming the
/// first that does not.
pub async fn all_lead(electors: &[Elector], within: Duration) {
    for (i, e) in electors.iter().enumerate() {
        tokio::time::timeout(within, e.wait_for_leadership())
            .await
            .unwrap_or_else(|_| panic!("elector {i} has not led within {within:?}"))
            .unwrap_or_else(|err| panic!("elector {i} stopped: {err}"));
    }
}

/// Starts shutting every elector down at once (before the returned future
/// is polled, so a test can watch what happens meanwhile); the future
/// resolves when all have stopped.
pub fn shutdown_all(electors: Vec<Elector>) -> impl Future<Output = ()> {
    let stopping: Vec<_> = electors
        .into_iter()
        .map(|e| tokio::spawn(async move { e.shutdown().await }))
        .collect();
    async move {
        for s in stopping {
            s.await.expect("shutdown");
        }
    }
}

/// `groups` electors on clones of `store` (groups `{prefix}-…`, a 3 s
/// term) elected, then the most `sample` reports over three seconds (20
/// samples, 150 ms apart, through a couple of renewals); the electors are
/// stopped before it returns. For checks that something a store holds
/// (connections, clients) does not grow with the number of groups.
pub async fn peak_while_groups_lead<S, F, Fut>(
    store: &S,
    prefix: &str,
    groups: usize,
    mut sample: F,
) -> usize
where
    S: LeaseStore + Clone,
    F: FnMut() -> Fut,
    Fut: Future<Output = usize>,
{
    let electors = electors_for_groups(store, prefix, groups, "a", Duration::from_secs(3));
    all_lead(&electors, Duration::from_secs(30)).await;
    let mut most = 0;
    for _ in 0..20 {
        most = most.max(sample().await);
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    shutdown_all(electors).await;
    most
}

/// A batch far larger than one request's share, `n` creations of groups
/// `{prefix}-0`… and the same `n` again: the first `n` apply and the
/// repeats conflict, which only the batch's own order makes right; read
/// back in one call, every group holds the record its creation wrote, at
/// the version the creation returned.
///
/// # Panics
///
/// If `{prefix}-{i}` is no valid group name (the caller's prefix), or the
/// store answers any of it otherwise.
pub async fn huge_batch_with_repeats_applies_in_order<S: LeaseStore + ?Sized>(
    store: &S,
    prefix: &str,
    n: usize,
) {
    let groups: Vec<GroupName> = (0..n).map(|i| numbered(prefix, i)).collect();
    let first = super::held_by("a", 1);
    let mut requests: Vec<CasRequest> = groups
        .iter()
        .map(|g| CasRequest {
            group: g.clone(),
            expected: None,
            record: first.clone(),
        })
        .collect();
    requests.extend(requests.clone());
    let got = store.compare_and_swap_many(&requests).await.unwrap();
    assert_eq!(got.len(), 2 * n);
    for (i, r) in got.iter().enumerate() {
        match (i < n, r) {
            (true, Ok(CasOutcome::Applied(_))) | (false, Ok(CasOutcome::Conflict)) => {}
            other => panic!("request {i}: {other:?}"),
        }
    }
    let read = store.read_many(&groups).await.unwrap();
    assert_eq!(read.len(), n);
    for (i, r) in read.into_iter().enumerate() {
        let v = r.unwrap().expect("written");
        assert_eq!(v.record, first);
        assert!(
            matches!(got[i], Ok(CasOutcome::Applied(a)) if a == v.version),
            "group {i} at {} but its creation said {:?}",
            v.version,
            got[i]
        );
    }
}

/// The group `{prefix}-{i}`; panics if that is no valid name (the
/// caller's prefix is too long or holds a control character).
fn numbered(prefix: &str, i: usize) -> GroupName {
    GroupName::new(format!("{prefix}-{i}")).expect("a valid group name from the caller's prefix")
}
