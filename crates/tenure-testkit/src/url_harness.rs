//! The [`Harness`] of a store opened from a URL: the store's `connect`
//! opens each handle, so its author writes only the raw access.

use std::marker::PhantomData;

use async_trait::async_trait;

use tenure::record::GroupName;
use tenure::store::LeaseStore;

use super::scenarios::Connect;
use super::{Feeds, Harness};

/// Reads and writes a store's records around the store, as a foreign
/// program or a damaged disk would: the half of a [`Harness`] that only
/// the store's author can write. See [`UrlHarness`].
#[async_trait]
pub trait RawAccess: Send + Sync {
    /// As [`Harness::plant_raw`]: stores `bytes` verbatim as the group's
    /// record and changes its version the way a write does.
    async fn plant_raw(&self, group: &GroupName, bytes: &[u8]);

    /// As [`Harness::read_raw`]: the bytes stored as the group's record,
    /// verbatim; `None` if the group has no record.
    async fn read_raw(&self, group: &GroupName) -> Option<Vec<u8>>;
}

/// A [`Harness`] for a store opened from a URL: each
/// [`store`](Harness::store) is a new `connect(url)` (a handle with
/// connections of its own, so the concurrency cases race for real), the
/// raw access is `raw`'s, and the promised feeds are the ones given to
/// [`promising`](UrlHarness::promising) (none by default).
///
/// `connect` is any `async fn(&str) -> Result<S, E>`, such as
/// `EtcdStore::connect`, the same [`Connect`] the `reported_*`
/// [`scenarios`](super::scenarios) take. A handle that cannot connect panics
/// with the error, which the suite reports as the running case's failure.
///
/// ```
/// use std::sync::LazyLock;
///
/// use async_trait::async_trait;
/// use tenure_testkit::{self as testkit, Feeds, RawAccess, UrlHarness};
/// use tenure::{GroupName, MemoryStore, StoreError};
///
/// // A store opened from a URL: here every handle shares one memory.
/// static RECORDS: LazyLock<MemoryStore> = LazyLock::new(MemoryStore::new);
/// async fn connect(url: &str) -> Result<MemoryStore, StoreError> {
///     assert_eq!(url, "memory://doc");
///     Ok(RECORDS.clone())
/// }
///
/// // The records, reached around the store.
/// struct Raw;
///
/// #[async_trait]
/// impl RawAccess for Raw {
///     async fn plant_raw(&self, group: &GroupName, bytes: &[u8]) {
///         RECORDS.put_raw(group, bytes);
///     }
///     async fn read_raw(&self, group: &GroupName) -> Option<Vec<u8>> {
///         RECORDS.get_raw(group)
///     }
/// }
///
/// # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
/// // In a store crate this is the body of a
/// // `#[tokio::test(flavor = "multi_thread")]` test.
/// let harness = UrlHarness::new("memory://doc", connect, Raw).promising(Feeds::ALL);
/// testkit::run_conformance(&harness).await;
/// # })
/// ```
pub struct UrlHarness<S, C, R> {
    url: String,
    connect: C,
    raw: R,
    feeds: Feeds,
    store: PhantomData<fn() -> S>,
}

impl<S, C, R> UrlHarness<S, C, R>
where
    S: LeaseStore,
    C: for<'a> Connect<'a, S> + Send + Sync,
    R: RawAccess,
{
    /// Opens every handle with `connect(url)` and reaches the records
    /// through `raw`; promises no feed.
    pub fn new(url: impl Into<String>, connect: C, raw: R) -> Self {
        UrlHarness {
            url: url.into(),
            connect,
            raw,
            feeds: Feeds::NONE,
            store: PhantomData,
        }
    }

    /// Declares the change feeds the store promises
    /// ([`Harness::promised_feeds`]): a missing one fails its case.
    pub fn promising(self, feeds: Feeds) -> Self {
        UrlHarness { feeds, ..self }
    }
}

#[async_trait]
impl<S, C, R> Harness for UrlHarness<S, C, R>
where
    S: LeaseStore,
    C: for<'a> Connect<'a, S> + Send + Sync,
    R: RawAccess,
{
    type Store = S;

    async fn store(&self) -> S {
        self.connect
            .open("the conformance harness", &self.url)
            .await
    }

    async fn plant_raw(&self, group: &GroupName, bytes: &[u8]) {
        self.raw.plant_raw(group, bytes).await;
    }

    async fn read_raw(&self, group: &GroupName) -> Option<Vec<u8>> {
        self.raw.read_raw(group).await
    }

    fn promised_feeds(&self) -> Feeds {
        self.feeds
    }
}
