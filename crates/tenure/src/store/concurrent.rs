//! Batches as many requests in flight, for stores whose multi-key
//! operation is all-or-nothing (etcd's `Txn`, DynamoDB's
//! `TransactWriteItems`) and so cannot carry independent groups in one
//! request, and for the default batch methods of [`LeaseStore`].
//!
//! [`InFlight`] bounds the requests in flight across every batch that
//! shares it (a store keeps one for all its clones, so connections or
//! HTTP/2 streams do not grow with the number of groups) and runs a
//! batch's requests concurrently under that bound:
//!
//! * [`InFlight::compare_and_swap_each`] writes one group's requests one
//!   after another, in the batch's order (two acquisitions of one group in
//!   one batch: the first wins, the second conflicts), and different
//!   groups concurrently;
//! * [`InFlight::read_chunks`] reads a batch as chunks of the store's
//!   largest request, concurrently.
//!
//! Dropping a batch's future (the engine does so at the latest deadline of
//! its operations) drops every request in it, like dropping one request.
//!
//! [`LeaseStore`]: crate::LeaseStore

use std::future::Future;
use std::sync::Arc;

use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::Semaphore;

use crate::error::StoreError;
use crate::record::{GroupName, Versioned};
use crate::store::spread;
use crate::store::{BatchResult, CasOutcome, CasRequest};

/// A bound on the requests in flight at once; clones share it. A store
/// keeps one in the state its clones share.
///
/// ```
/// use std::time::Duration;
/// use tenure::store::concurrent::InFlight;
/// use tenure::{CasOutcome, CasRequest, GroupName, Holder, LeaseRecord, LeaseStore};
/// use tenure::{MemoryStore, Metadata, WallTime};
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let store = MemoryStore::new();
/// let limit = InFlight::new(16);
/// let group = GroupName::new("jobs").unwrap();
/// let now = WallTime::now();
/// let record = LeaseRecord {
///     holder: Some(Holder { id: "host-a".into(), incarnation: 1 }),
///     token: 1,
///     term: Duration::from_secs(10),
///     renewed_at: now,
///     expires_at: now + Duration::from_secs(10),
///     metadata: Metadata::new(),
/// };
/// let requests = vec![
///     CasRequest { group: group.clone(), expected: None, record: record.clone() },
///     CasRequest { group, expected: None, record },
/// ];
/// let got = limit
///     .compare_and_swap_each(&requests, |r| {
///         store.compare_and_swap(&r.group, r.expected, &r.record)
///     })
///     .await;
/// assert!(matches!(got[0], Ok(CasOutcome::Applied(_))));
/// assert!(matches!(got[1], Ok(CasOutcome::Conflict)), "same group: in order");
/// # });
/// ```
#[derive(Clone, Debug)]
pub struct InFlight {
    permits: Arc<Semaphore>,
    limit: usize,
}

impl InFlight {
    /// At most `limit` requests at once (at least one).
    pub fn new(limit: usize) -> InFlight {
        let limit = limit.max(1);
        InFlight {
            permits: Arc::new(Semaphore::new(limit)),
            limit,
        }
    }

    /// The bound.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Runs `request` once a slot is free, holding the slot until it ends.
    pub async fn run<T>(&self, request: impl Future<Output = T>) -> T {
        // The semaphore is never closed, so acquiring cannot fail; were it
        // closed, running unbounded is the lesser harm.
        let _permit = self.permits.acquire().await.ok();
        request.await
    }

    /// Carries out compare-and-swaps with `one`, each a request of its own:
    /// requests for one group one after another in the order given,
    /// different groups concurrently, at most [`limit`](InFlight::limit)
    /// at once. One result per request, in order.
    pub async fn compare_and_swap_each<'a, F, Fut>(
        &self,
        requests: &'a [CasRequest],
        one: F,
    ) -> Vec<Result<CasOutcome, StoreError>>
    where
        F: Fn(&'a CasRequest) -> Fut + Sync,
        Fut: Future<Output = Result<CasOutcome, StoreError>> + Send,
    {
        // One lane per group, in order of first appearance.
        let mut lanes: Vec<Vec<usize>> = Vec::new();
        let mut lane_of: std::collections::HashMap<&GroupName, usize> =
            std::collections::HashMap::new();
        for (i, r) in requests.iter().enumerate() {
            let lane = *lane_of.entry(&r.group).or_insert_with(|| {
                lanes.push(Vec::new());
                lanes.len() - 1
            });
            lanes[lane].push(i);
        }
        let one = &one;
        let running: FuturesUnordered<_> = lanes
            .into_iter()
            .map(|lane| async move {
                let mut done = Vec::with_capacity(lane.len());
                for i in lane {
                    done.push((i, self.run(one(&requests[i])).await));
                }
                done
            })
            .collect();
        place(requests.len(), running).await
    }

    /// Carries out compare-and-swaps as requests of up to `chunk` each,
    /// for a store that can write many groups in one request as long as no
    /// group appears twice in it (etcd's nested `Txn`s): the batch is cut
    /// into rounds, the n-th write of each group in the n-th round, the
    /// rounds one after another (so each group's writes apply in order),
    /// and a round's requests concurrently under the bound. `write`
    /// answers one request with one result per write, in order; a request
    /// that fails as a whole fails each of its writes with a copy of its
    /// error. One result per request, in order.
    pub async fn compare_and_swap_rounds<'a, F, Fut>(
        &self,
        requests: &'a [CasRequest],
        chunk: usize,
        write: F,
    ) -> Vec<Result<CasOutcome, StoreError>>
    where
        F: Fn(Vec<&'a CasRequest>) -> Fut + Sync,
        Fut: Future<Output = BatchResult<CasOutcome>> + Send,
    {
        let chunk = chunk.max(1);
        let mut seen: std::collections::HashMap<&GroupName, usize> =
            std::collections::HashMap::new();
        let mut rounds: Vec<Vec<usize>> = Vec::new();
        for (i, r) in requests.iter().enumerate() {
            let n = seen.entry(&r.group).or_insert(0);
            if rounds.len() <= *n {
                rounds.push(Vec::new());
            }
            rounds[*n].push(i);
            *n += 1;
        }
        let mut slots = Slots::new(requests.len());
        let write = &write;
        for round in rounds {
            let running: FuturesUnordered<_> = round
                .chunks(chunk)
                .map(|part| async move {
                    let writes: Vec<&'a CasRequest> = part.iter().map(|i| &requests[*i]).collect();
                    spread(part.iter().copied(), self.run(write(writes)).await).collect()
                })
                .collect();
            slots.fill(running).await;
        }
        slots.into_results()
    }

    /// Reads each of `groups` with `one`, a request of its own, all
    /// concurrently under the bound. One result per group, in order.
    pub async fn read_each<'a, F, Fut>(
        &self,
        groups: &'a [GroupName],
        one: F,
    ) -> Vec<Result<Option<Versioned>, StoreError>>
    where
        F: Fn(&'a GroupName) -> Fut + Sync,
        Fut: Future<Output = Result<Option<Versioned>, StoreError>> + Send,
    {
        let one = &one;
        let running: FuturesUnordered<_> = groups
            .iter()
            .enumerate()
            .map(|(i, g)| async move { vec![(i, self.run(one(g)).await)] })
            .collect();
        place(groups.len(), running).await
    }

    /// Reads `groups` as chunks of at most `chunk` groups, one request
    /// each (`read` answers a chunk with one result per group, in order),
    /// all chunks concurrently under the bound. A chunk that fails as a
    /// whole fails each of its groups with a copy of its error. One result
    /// per group, in order.
    pub async fn read_chunks<'a, F, Fut>(
        &self,
        groups: &'a [GroupName],
        chunk: usize,
        read: F,
    ) -> Vec<Result<Option<Versioned>, StoreError>>
    where
        F: Fn(&'a [GroupName]) -> Fut + Sync,
        Fut: Future<Output = BatchResult<Option<Versioned>>> + Send,
    {
        let chunk = chunk.max(1);
        let read = &read;
        let running: FuturesUnordered<_> = groups
            .chunks(chunk)
            .enumerate()
            .map(|(n, part)| async move {
                let first = n * chunk;
                spread(first..first + part.len(), self.run(read(part)).await).collect()
            })
            .collect();
        place(groups.len(), running).await
    }
}

/// Puts each result at its index as the lanes finish.
async fn place<T, L>(len: usize, running: FuturesUnordered<L>) -> Vec<Result<T, StoreError>>
where
    L: Future<Output = Vec<(usize, Result<T, StoreError>)>>,
{
    let mut slots = Slots::new(len);
    slots.fill(running).await;
    slots.into_results()
}

/// One result per operation of a batch, filled in as its lanes finish.
struct Slots<T>(Vec<Option<Result<T, StoreError>>>);

impl<T> Slots<T> {
    fn new(len: usize) -> Self {
        Slots((0..len).map(|_| None).collect())
    }

    /// Puts each result of `running`'s lanes at its index.
    async fn fill<L>(&mut self, mut running: FuturesUnordered<L>)
    where
        L: Future<Output = Vec<(usize, Result<T, StoreError>)>>,
    {
        while let Some(done) = running.next().await {
            for (i, r) in done {
                if let Some(slot) = self.0.get_mut(i) {
                    *slot = Some(r);
                }
            }
        }
    }

    /// The results in order. Every index is in exactly one lane, so every
    /// slot is filled; one that is not fails rather than panics.
    fn into_results(self) -> Vec<Result<T, StoreError>> {
        self.0
            .into_iter()
            .map(|s| s.unwrap_or_else(|| Err(never_carried_out())))
            .collect()
    }
}

fn never_carried_out() -> StoreError {
    StoreError::Unavailable {
        message: "a request of the batch was never carried out".into(),
        source: None,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;
    use crate::clock::WallTime;
    use crate::record::{Holder, LeaseRecord, Metadata, Version};

    fn record(id: &str) -> LeaseRecord {
        let now = WallTime::from_millis(1_000);
        LeaseRecord {
            holder: Some(Holder {
                id: id.into(),
                incarnation: 1,
            }),
            token: 1,
            term: Duration::from_secs(10),
            renewed_at: now,
            expires_at: now + Duration::from_secs(10),
            metadata: Metadata::new(),
        }
    }

    fn req(group: &str, expected: Option<u64>, id: &str) -> CasRequest {
        CasRequest {
            group: GroupName::new(group).unwrap(),
            expected: expected.map(Version),
            record: record(id),
        }
    }

    /// A fake request that records its order per group and how many run
    /// at once.
    #[derive(Default)]
    struct Probe {
        log: std::sync::Mutex<Vec<(String, String)>>,
        now: AtomicUsize,
        most: AtomicUsize,
    }

    impl Probe {
        async fn cas(&self, r: &CasRequest) -> Result<CasOutcome, StoreError> {
            let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
            self.most.fetch_max(n, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(10)).await;
            self.now.fetch_sub(1, Ordering::SeqCst);
            let id = r.record.holder_id().unwrap_or_default().to_owned();
            self.log
                .lock()
                .unwrap()
                .push((r.group.as_str().to_owned(), id));
            match r.expected {
                None => Ok(CasOutcome::Applied(Version(1))),
                Some(v) => Ok(CasOutcome::Applied(Version(v.0 + 1))),
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn writes_of_one_group_run_in_order_and_groups_run_concurrently_within_the_bound() {
        let probe = Probe::default();
        let limit = InFlight::new(3);
        let mut requests = Vec::new();
        for g in 0..10 {
            requests.push(req(&format!("g{g}"), None, "first"));
        }
        requests.push(req("g0", Some(1), "second"));
        requests.push(req("g0", Some(2), "third"));
        let got = limit
            .compare_and_swap_each(&requests, |r| probe.cas(r))
            .await;
        assert_eq!(got.len(), 12);
        assert!(matches!(got[10], Ok(CasOutcome::Applied(Version(2)))));
        assert!(matches!(got[11], Ok(CasOutcome::Applied(Version(3)))));
        let most = probe.most.load(Ordering::SeqCst);
        assert_eq!(most, 3, "at most the bound at once, and that many");
        let g0: Vec<String> = probe
            .log
            .lock()
            .unwrap()
            .iter()
            .filter(|(g, _)| g == "g0")
            .map(|(_, id)| id.clone())
            .collect();
        assert_eq!(g0, ["first", "second", "third"]);
    }

    #[tokio::test(start_paused = true)]
    async fn the_bound_holds_across_batches_that_share_it() {
        let probe = Probe::default();
        let limit = InFlight::new(4);
        let clone = limit.clone();
        let batch: Vec<CasRequest> = (0..20).map(|g| req(&format!("g{g}"), None, "a")).collect();
        let (a, b) = tokio::join!(
            limit.compare_and_swap_each(&batch, |r| probe.cas(r)),
            clone.compare_and_swap_each(&batch, |r| probe.cas(r)),
        );
        assert_eq!((a.len(), b.len()), (20, 20));
        assert_eq!(probe.most.load(Ordering::SeqCst), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn dropping_a_batch_drops_its_requests_and_frees_their_slots() {
        let started = AtomicUsize::new(0);
        let finished = AtomicUsize::new(0);
        let limit = InFlight::new(2);
        let requests: Vec<CasRequest> = (0..6).map(|g| req(&format!("g{g}"), None, "a")).collect();
        let slow = |_r: &CasRequest| async {
            started.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_secs(10)).await;
            finished.fetch_add(1, Ordering::SeqCst);
            Ok(CasOutcome::Conflict)
        };
        let batch = limit.compare_and_swap_each(&requests, slow);
        assert!(tokio::time::timeout(Duration::from_secs(1), batch)
            .await
            .is_err());
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(started.load(Ordering::SeqCst), 2, "the bound held");
        assert_eq!(finished.load(Ordering::SeqCst), 0, "dropped, not finished");
        // The slots came back: a new batch runs at once.
        let got = limit
            .compare_and_swap_each(&requests[..1], |_r| async { Ok(CasOutcome::Conflict) })
            .await;
        assert!(matches!(got[0], Ok(CasOutcome::Conflict)));
    }

    /// Requests of a round never name a group twice; a group's writes go
    /// in successive rounds, in order; a request that fails as a whole
    /// fails its own writes only.
    #[tokio::test(start_paused = true)]
    async fn rounds_keep_each_group_once_per_request_and_in_order() {
        let sent: std::sync::Mutex<Vec<Vec<(String, String)>>> = Default::default();
        let limit = InFlight::new(2);
        let mut requests: Vec<CasRequest> = (0..5)
            .map(|g| req(&format!("g{g}"), None, "first"))
            .collect();
        requests.insert(1, req("g0", Some(1), "second"));
        requests.push(req("g0", Some(2), "third"));
        requests.push(req("g4", Some(1), "second"));
        let write = |writes: Vec<&CasRequest>| {
            let names: Vec<(String, String)> = writes
                .iter()
                .map(|r| {
                    let id = r.record.holder_id().unwrap_or_default().to_owned();
                    (r.group.as_str().to_owned(), id)
                })
                .collect();
            sent.lock().unwrap().push(names.clone());
            async move {
                tokio::time::sleep(Duration::from_millis(5)).await;
                if names.iter().any(|(g, id)| g == "g3" && id == "first") {
                    return Err(StoreError::Timeout(Duration::from_secs(1)));
                }
                Ok(names
                    .iter()
                    .map(|(_, id)| Ok(CasOutcome::Applied(Version(id.len() as u64))))
                    .collect())
            }
        };
        let got = limit.compare_and_swap_rounds(&requests, 2, write).await;
        let sent = sent.into_inner().unwrap();
        for request in &sent {
            assert!(request.len() <= 2, "{request:?}");
            let mut groups: Vec<&String> = request.iter().map(|(g, _)| g).collect();
            groups.sort();
            groups.dedup();
            assert_eq!(groups.len(), request.len(), "a group twice: {request:?}");
        }
        let order = |group: &str| -> Vec<String> {
            sent.iter()
                .flatten()
                .filter(|(g, _)| g == group)
                .map(|(_, id)| id.clone())
                .collect()
        };
        assert_eq!(order("g0"), ["first", "second", "third"]);
        assert_eq!(order("g4"), ["first", "second"]);
        // g3 shared its request with g2 or g4: those failed with it.
        let failed: Vec<&str> = requests
            .iter()
            .zip(&got)
            .filter(|(_, r)| r.is_err())
            .map(|(q, _)| q.group.as_str())
            .collect();
        assert!(failed.contains(&"g3") && failed.len() == 2, "{failed:?}");
        assert!(matches!(got[1], Ok(CasOutcome::Applied(Version(6)))));
    }

    #[tokio::test(start_paused = true)]
    async fn reads_come_back_in_order_and_a_failed_chunk_fails_its_groups_alone() {
        let limit = InFlight::new(2);
        let groups: Vec<GroupName> = (0..7)
            .map(|g| GroupName::new(format!("g{g}")).unwrap())
            .collect();
        let read = |part: &[GroupName]| {
            let part = part.to_vec();
            async move {
                if part.iter().any(|g| g.as_str() == "g3") {
                    return Err(StoreError::Timeout(Duration::from_secs(1)));
                }
                if part.iter().any(|g| g.as_str() == "g6") {
                    return Ok(Vec::new());
                }
                Ok(part
                    .iter()
                    .map(|g| {
                        Ok(Some(Versioned {
                            record: record(g.as_str()),
                            version: Version(1),
                        }))
                    })
                    .collect())
            }
        };
        let got = limit.read_chunks(&groups, 3, read).await;
        assert_eq!(got.len(), 7);
        for (i, r) in got.iter().enumerate() {
            match (i, r) {
                (3..=5, Err(StoreError::Timeout(_))) => {}
                (6, Err(StoreError::Unavailable { .. })) => {}
                (0..=2, Ok(Some(v))) => {
                    assert_eq!(v.record.holder_id(), Some(groups[i].as_str()))
                }
                other => panic!("{other:?}"),
            }
        }
        let empty = limit.read_chunks(&[], 3, read).await;
        assert!(empty.is_empty());
    }
}
