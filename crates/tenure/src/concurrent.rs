//! Batches as many requests in flight, for stores whose multi-key
//! operation is all-or-nothing (etcd's `Txn`, DynamoDB's
//! `TransactWriteItems`) and so cannot carry independent groups in one
//! request.
//!
//! [`InFlight`] bounds the requests a store handle has in flight across
//! all its batches at once (so connections or HTTP/2 streams do not grow
//! with the number of groups) and runs a batch's requests concurrently
//! under that bound:
//!
//! * [`InFlight::compare_and_swap_each`] writes one group's requests one
//!   after another, in the batch's order (two acquisitions of one group in
//!   one batch: the first wins, the second conflicts), and different
//!   groups concurrently;
//! * [`InFlight::read_chunks`] reads a batch as chunks of the store's
//!   largest request, concurrently.
//!
//! Every request runs in a task of its own batch; dropping the batch's
//! future (the engine does so at the latest deadline of its operations)
//! aborts the tasks, like dropping one request.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::error::StoreError;
use crate::record::{GroupName, Versioned};
use crate::store::{CasOutcome, CasRequest};

/// A bound on the requests a store handle has in flight for its batches;
/// clones share it. Keep one in the state a store's clones share.
///
/// ```
/// use std::time::Duration;
/// use tenure::concurrent::InFlight;
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
/// let s = store.clone();
/// let got = limit
///     .compare_and_swap_each(&requests, move |r| {
///         let s = s.clone();
///         async move { s.compare_and_swap(&r.group, r.expected, &r.record).await }
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
    pub async fn compare_and_swap_each<F, Fut>(
        &self,
        requests: &[CasRequest],
        one: F,
    ) -> Vec<Result<CasOutcome, StoreError>>
    where
        F: Fn(CasRequest) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Result<CasOutcome, StoreError>> + Send + 'static,
    {
        // One chain per group, in order of first appearance.
        let mut chains: Vec<Vec<(usize, CasRequest)>> = Vec::new();
        let mut chain_of: HashMap<&GroupName, usize> = HashMap::new();
        for (i, r) in requests.iter().enumerate() {
            let c = *chain_of.entry(&r.group).or_insert_with(|| {
                chains.push(Vec::new());
                chains.len() - 1
            });
            chains[c].push((i, r.clone()));
        }
        let jobs = chains.into_iter().map(|chain| {
            let indices: Vec<usize> = chain.iter().map(|(i, _)| *i).collect();
            let (limit, one) = (self.clone(), one.clone());
            let job = async move {
                let mut out = Vec::with_capacity(chain.len());
                for (i, r) in chain {
                    out.push((i, limit.run(one(r)).await));
                }
                out
            };
            (indices, job)
        });
        gather(requests.len(), jobs).await
    }

    /// Reads `groups` as chunks of at most `chunk` groups, one request
    /// each (`read` answers a chunk with one result per group, in order),
    /// all chunks concurrently under the bound. A chunk that fails as a
    /// whole fails each of its groups with a copy of its error. One result
    /// per group, in order.
    pub async fn read_chunks<F, Fut>(
        &self,
        groups: &[GroupName],
        chunk: usize,
        read: F,
    ) -> Vec<Result<Option<Versioned>, StoreError>>
    where
        F: Fn(Vec<GroupName>) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = crate::store::BatchResult<Option<Versioned>>> + Send + 'static,
    {
        let chunk = chunk.max(1);
        let jobs = groups.chunks(chunk).enumerate().map(|(n, part)| {
            let first = n * chunk;
            let indices: Vec<usize> = (first..first + part.len()).collect();
            let part = part.to_vec();
            let (limit, read) = (self.clone(), read.clone());
            let job = async move {
                let len = part.len();
                let got = limit.run(read(part)).await;
                let results: Vec<Result<Option<Versioned>, StoreError>> = match got {
                    Ok(results) if results.len() == len => results,
                    Ok(results) => {
                        let e = StoreError::Unavailable {
                            message: format!(
                                "the store answered a read of {len} groups with {} results",
                                results.len()
                            ),
                            source: None,
                        };
                        (0..len).map(|_| Err(e.copy_for_batch())).collect()
                    }
                    Err(e) => (0..len).map(|_| Err(e.copy_for_batch())).collect(),
                };
                (first..first + len).zip(results).collect::<Vec<_>>()
            };
            (indices, job)
        });
        gather(groups.len(), jobs).await
    }
}

/// Runs every job in a task of its own and puts each result at its index.
/// A job that panicked fails its indices.
async fn gather<T, J>(
    len: usize,
    jobs: impl Iterator<Item = (Vec<usize>, J)>,
) -> Vec<Result<T, StoreError>>
where
    T: Send + 'static,
    J: Future<Output = Vec<(usize, Result<T, StoreError>)>> + Send + 'static,
{
    let mut slots: Vec<Option<Result<T, StoreError>>> = (0..len).map(|_| None).collect();
    let mut tasks = JoinSet::new();
    let mut indices_of = HashMap::new();
    for (indices, job) in jobs {
        let handle = tasks.spawn(job);
        indices_of.insert(handle.id(), indices);
    }
    while let Some(joined) = tasks.join_next_with_id().await {
        match joined {
            Ok((_, results)) => {
                for (i, r) in results {
                    if let Some(slot) = slots.get_mut(i) {
                        *slot = Some(r);
                    }
                }
            }
            Err(e) => {
                let message = format!("a store request failed inside tenure: {e}");
                for i in indices_of.remove(&e.id()).unwrap_or_default() {
                    if let Some(slot) = slots.get_mut(i) {
                        *slot = Some(Err(StoreError::Unavailable {
                            message: message.clone(),
                            source: None,
                        }));
                    }
                }
            }
        }
    }
    slots
        .into_iter()
        .map(|s| {
            s.unwrap_or_else(|| {
                Err(StoreError::Unavailable {
                    message: "a store request of the batch was never carried out".into(),
                    source: None,
                })
            })
        })
        .collect()
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
    #[derive(Clone, Default)]
    struct Probe {
        log: Arc<std::sync::Mutex<Vec<(String, String)>>>,
        now: Arc<AtomicUsize>,
        most: Arc<AtomicUsize>,
    }

    impl Probe {
        fn one(&self) -> impl Fn(CasRequest) -> BoxedCas + Clone + Send + Sync + 'static {
            let p = self.clone();
            move |r: CasRequest| {
                let p = p.clone();
                Box::pin(async move {
                    let n = p.now.fetch_add(1, Ordering::SeqCst) + 1;
                    p.most.fetch_max(n, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    p.now.fetch_sub(1, Ordering::SeqCst);
                    let id = r.record.holder_id().unwrap_or_default().to_owned();
                    p.log
                        .lock()
                        .unwrap()
                        .push((r.group.as_str().to_owned(), id));
                    if r.record.holder_id() == Some("boom") {
                        panic!("a request that panics");
                    }
                    match r.expected {
                        None => Ok(CasOutcome::Applied(Version(1))),
                        Some(v) => Ok(CasOutcome::Applied(Version(v.0 + 1))),
                    }
                })
            }
        }
    }

    type BoxedCas =
        std::pin::Pin<Box<dyn Future<Output = Result<CasOutcome, StoreError>> + Send + 'static>>;

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
        let got = limit.compare_and_swap_each(&requests, probe.one()).await;
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
    async fn the_bound_holds_across_batches_of_one_store() {
        let probe = Probe::default();
        let limit = InFlight::new(4);
        let batch: Vec<CasRequest> = (0..20).map(|g| req(&format!("g{g}"), None, "a")).collect();
        let (a, b) = tokio::join!(
            limit.compare_and_swap_each(&batch, probe.one()),
            limit.compare_and_swap_each(&batch, probe.one()),
        );
        assert_eq!((a.len(), b.len()), (20, 20));
        assert_eq!(probe.most.load(Ordering::SeqCst), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_that_panics_fails_its_own_chain_only() {
        let probe = Probe::default();
        let limit = InFlight::new(8);
        let requests = vec![
            req("a", None, "x"),
            req("b", None, "boom"),
            req("b", Some(1), "y"),
            req("c", None, "z"),
        ];
        let got = limit.compare_and_swap_each(&requests, probe.one()).await;
        assert!(matches!(got[0], Ok(CasOutcome::Applied(_))));
        assert!(matches!(got[1], Err(StoreError::Unavailable { .. })));
        assert!(
            matches!(got[2], Err(StoreError::Unavailable { .. })),
            "the rest of the chain never ran: {:?}",
            got[2]
        );
        assert!(matches!(got[3], Ok(CasOutcome::Applied(_))));
    }

    #[tokio::test(start_paused = true)]
    async fn dropping_a_batch_aborts_its_requests() {
        let started = Arc::new(AtomicUsize::new(0));
        let finished = Arc::new(AtomicUsize::new(0));
        let limit = InFlight::new(2);
        let requests: Vec<CasRequest> = (0..6).map(|g| req(&format!("g{g}"), None, "a")).collect();
        let (s, f) = (started.clone(), finished.clone());
        let one = move |_r: CasRequest| {
            let (s, f) = (s.clone(), f.clone());
            async move {
                s.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(10)).await;
                f.fetch_add(1, Ordering::SeqCst);
                Ok(CasOutcome::Conflict)
            }
        };
        let batch = limit.compare_and_swap_each(&requests, one);
        assert!(tokio::time::timeout(Duration::from_secs(1), batch)
            .await
            .is_err());
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(started.load(Ordering::SeqCst), 2, "the bound held");
        assert_eq!(finished.load(Ordering::SeqCst), 0, "aborted, not finished");
        // The slots came back: a new batch runs at once.
        let got = limit
            .compare_and_swap_each(&requests[..1], |_r| async { Ok(CasOutcome::Conflict) })
            .await;
        assert!(matches!(got[0], Ok(CasOutcome::Conflict)));
    }

    #[tokio::test(start_paused = true)]
    async fn reads_come_back_in_order_and_a_failed_chunk_fails_its_groups_alone() {
        let limit = InFlight::new(2);
        let groups: Vec<GroupName> = (0..7)
            .map(|g| GroupName::new(format!("g{g}")).unwrap())
            .collect();
        let read = |part: Vec<GroupName>| async move {
            if part.iter().any(|g| g.as_str() == "g3") {
                return Err(StoreError::Timeout(Duration::from_secs(1)));
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
        };
        let got = limit.read_chunks(&groups, 3, read).await;
        assert_eq!(got.len(), 7);
        for (i, r) in got.iter().enumerate() {
            match (i, r) {
                (3..=5, Err(StoreError::Timeout(_))) => {}
                (0..=2 | 6, Ok(Some(v))) => {
                    assert_eq!(v.record.holder_id(), Some(groups[i].as_str()))
                }
                other => panic!("{other:?}"),
            }
        }
        let empty = limit.read_chunks(&[], 3, read).await;
        assert!(empty.is_empty());
    }
}
