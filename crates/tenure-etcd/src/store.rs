//! [`EtcdStore`]: the [`LeaseStore`] over etcd transactions.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{
    Certificate, Client, Compare, CompareOp, ConnectOptions, Identity, KeyValue, TlsOptions, Txn,
    TxnOp, TxnOpResponse, TxnResponse,
};
use tenure::store::concurrent::InFlight;
use tenure::store::tls::{read_pem, Expected};
use tenure::store::Running;
use tenure::store::{BatchResult, CasOutcome, CasRequest, ChangeFeed, FeedsOff, Listed, StoreFeed};
use tenure::{
    EngineSlot, GroupName, LeaseRecord, LeaseStore, LeaseView, StoreError, Version, Versioned,
};

use crate::error::{Ctx, EtcdStoreError};
use crate::options::EtcdOptions;
use crate::{feed, watch};

/// HTTP/2 keep-alive ping interval. etcd answers pings more frequent than
/// its `--grpc-keepalive-min-time` (5 s by default) with GOAWAY.
const KEEP_ALIVE: Duration = Duration::from_secs(10);

/// How long a change feed etcd refused stays off before
/// [`LeaseView::changes`] tries again (electors poll meanwhile).
const FEED_RETRY_AFTER: Duration = Duration::from_secs(60);

/// Most requests of a store handle's batches in flight at once, as HTTP/2
/// streams of its one channel: enough for etcd to commit many groups'
/// renewals in one Raft round, bounded whatever the number of groups.
const IN_FLIGHT: usize = 128;

/// Most groups read by one `Txn` of a batched read: half etcd's default
/// `--max-txn-ops` (128), so a server configured a little lower still
/// accepts it.
const READS_PER_TXN: usize = 64;

/// Most groups written by one `Txn` of a batch, as nested `Txn`s. etcd
/// allows a nested `Txn` only as many operations as `--max-txn-ops` (128 by
/// default) less the outer `Txn`'s count, so 64 leaves room on a server
/// configured a little lower.
const WRITES_PER_TXN: usize = 64;

/// The operations one batch call takes (see
/// [`Running::batch_size`]): the engine's default batch.
const BATCH_SIZE: usize = 2048;

/// A lease store in etcd. Clones share one gRPC channel, and the engine
/// that runs every group elected through them.
///
/// See the [crate docs](crate) for the key layout.
#[derive(Clone)]
pub struct EtcdStore {
    client: Client,
    options: Arc<EtcdOptions>,
    feeds_off: FeedsOff,
    in_flight: InFlight,
    engine: Arc<EngineSlot>,
}

impl fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Not the client: its options hold the password.
        f.debug_struct("EtcdStore")
            .field("options", &self.options)
            .finish()
    }
}

pub(crate) fn ctx(options: &EtcdOptions) -> Ctx<'_> {
    Ctx {
        target: options.target(),
        options,
    }
}

fn tls(options: &EtcdOptions) -> Result<Option<TlsOptions>, EtcdStoreError> {
    if !options.tls {
        return Ok(None);
    }
    let mut tls = TlsOptions::new();
    if let Some(ca) = &options.tls_files.ca {
        tls = tls.ca_certificate(Certificate::from_pem(read_pem(
            "ca",
            ca,
            Expected::Certificates,
        )?));
    }
    if let (Some(cert), Some(key)) = (&options.tls_files.cert, &options.tls_files.key) {
        tls = tls.identity(Identity::from_pem(
            read_pem("cert", cert, Expected::Certificates)?,
            read_pem("key", key, Expected::PrivateKey)?,
        ));
    }
    Ok(Some(tls))
}

impl EtcdStore {
    /// Connects to etcd at `url` (see [`EtcdOptions`] for the form) and
    /// checks that tenure can read its keys there: endpoints, TLS,
    /// credentials and permissions.
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), tenure_etcd::EtcdStoreError> {
    /// let store = tenure_etcd::EtcdStore::connect("etcd://127.0.0.1:2379").await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect(url: &str) -> Result<EtcdStore, EtcdStoreError> {
        EtcdStore::connect_with(EtcdOptions::from_url(url)?).await
    }

    /// Connects with options already parsed (and perhaps adjusted).
    pub async fn connect_with(options: EtcdOptions) -> Result<EtcdStore, EtcdStoreError> {
        let mut co = ConnectOptions::new()
            .with_connect_timeout(options.timeout)
            .with_timeout(options.timeout)
            .with_keep_alive(KEEP_ALIVE, options.timeout)
            // A member cut off from its cluster's quorum refuses requests
            // and cancels watches (gRPC metadata `hasleader`), instead of
            // answering from a stale state or keeping a watch open that
            // will never deliver: the engine then polls and re-subscribes,
            // through another endpoint.
            .with_require_leader(true)
            // Simple tokens expire (and die with a restart): log in again.
            .with_auto_token_refresh(true);
        if let (Some(user), Some(password)) = (&options.user, &options.password) {
            co = co.with_user(user.clone(), password.expose());
        }
        if let Some(tls) = tls(&options)? {
            co = co.with_tls(tls);
        }
        let ctx = ctx(&options);
        let client = match tokio::time::timeout(
            options.timeout,
            Client::connect(options.endpoints(), Some(co)),
        )
        .await
        {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return Err(ctx.classify("connect", e)),
            Err(_) => return Err(ctx.timeout()),
        };
        let store = EtcdStore {
            client,
            options: Arc::new(options),
            feeds_off: FeedsOff::default(),
            in_flight: InFlight::new(IN_FLIGHT),
            engine: Arc::new(EngineSlot::new()),
        };
        // The client connects lazily: one read proves the endpoints, TLS,
        // credentials and the read permission on the prefix.
        let probe = store.options.prefix.clone().into_bytes();
        let mut kv = store.client.kv_client();
        store.bounded("connect", kv.get(probe, None)).await?;
        Ok(store)
    }

    /// The options in use.
    pub fn options(&self) -> &EtcdOptions {
        &self.options
    }

    /// The etcd key of a group: the prefix followed by the group name.
    pub fn key(&self, group: &GroupName) -> Vec<u8> {
        format!("{}{}", self.options.prefix, group.as_str()).into_bytes()
    }

    /// Runs a request within the configured timeout, classifying errors.
    async fn bounded<T>(
        &self,
        what: &'static str,
        request: impl Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, EtcdStoreError> {
        let ctx = ctx(&self.options);
        match tokio::time::timeout(self.options.timeout, request).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(ctx.classify(what, e)),
            Err(_) => Err(ctx.timeout()),
        }
    }

    /// A stored key-value as the group's record and version.
    fn versioned(&self, group: &GroupName, kv: &KeyValue) -> Result<Versioned, StoreError> {
        let record = LeaseRecord::decode(kv.value()).map_err(|source| StoreError::Record {
            group: group.clone(),
            source,
        })?;
        let version = version_of(kv.mod_revision()).ok_or_else(|| StoreError::Unavailable {
            message: format!(
                "etcd at {} returned the mod_revision {} for group {group}",
                self.options.target(),
                kv.mod_revision()
            ),
            source: None,
        })?;
        Ok(Versioned { record, version })
    }

    /// The `Txn` of one compare-and-swap: if the key's `mod_revision` is
    /// `expected` (no key, if `None`), put the record. `None` if no key can
    /// have that version (a conflict without asking).
    fn cas_txn(
        &self,
        group: &GroupName,
        expected: Option<Version>,
        record: &LeaseRecord,
    ) -> Option<Txn> {
        let key = self.key(group);
        let compare = match expected {
            // create_revision 0: the key does not exist (never written, since
            // tenure never deletes it).
            None => Compare::create_revision(key.clone(), CompareOp::Equal, 0),
            Some(Version(v)) => match i64::try_from(v) {
                // A missing key has mod_revision 0, and no stored key has a
                // revision beyond i64: neither can be a version tenure read.
                Ok(v) if v > 0 => Compare::mod_revision(key.clone(), CompareOp::Equal, v),
                _ => return None,
            },
        };
        Some(
            Txn::new()
                .when([compare])
                .and_then([TxnOp::put(key, record.encode(), None)]),
        )
    }

    /// The revision of a `Txn` that wrote: the new `mod_revision` of every
    /// key it put.
    fn revision_of(&self, resp: &TxnResponse) -> Result<Version, StoreError> {
        resp.header()
            .map(|h| h.revision())
            .and_then(version_of)
            .ok_or_else(|| StoreError::Unavailable {
                message: format!(
                    "etcd at {} applied a write but returned no revision",
                    self.options.target()
                ),
                source: None,
            })
    }

    /// Sends `ops` as one `Txn` without a condition, bounded like every
    /// request (`what` names it in errors), and checks that etcd answered
    /// each operation (`batch` names them if not): the response and the
    /// operations' answers, in order.
    async fn txn(
        &self,
        what: &'static str,
        batch: &str,
        ops: Vec<TxnOp>,
    ) -> Result<(TxnResponse, Vec<TxnOpResponse>), StoreError> {
        let sent = ops.len();
        let mut kv = self.client.kv_client();
        let resp = self.bounded(what, kv.txn(Txn::new().and_then(ops))).await?;
        let answers = resp.op_responses();
        tenure::store::check_batch_answer(
            &format!("etcd at {}", self.options.target()),
            batch,
            sent,
            answers.len(),
        )?;
        Ok((resp, answers))
    }

    /// Many groups' compare-and-swaps in ONE `Txn` that is not
    /// all-or-nothing: an outer `Txn` without a condition whose operations
    /// are one nested `Txn` per group, each with its own compare and put,
    /// so each applies or conflicts on its own. No group may appear twice
    /// (etcd refuses a `Txn` that puts one key twice).
    async fn cas_nested(&self, writes: Vec<&CasRequest>) -> BatchResult<CasOutcome> {
        let mut out: Vec<Option<Result<CasOutcome, StoreError>>> = Vec::with_capacity(writes.len());
        let mut nested = Vec::with_capacity(writes.len());
        for w in &writes {
            match self.cas_txn(&w.group, w.expected, &w.record) {
                Some(txn) => {
                    nested.push(TxnOp::txn(txn));
                    out.push(None);
                }
                None => out.push(Some(Ok(CasOutcome::Conflict))),
            }
        }
        if nested.is_empty() {
            return Ok(out.into_iter().flatten().collect());
        }
        let (resp, answers) = self
            .txn(
                "compare-and-swap",
                "a batch of nested compare-and-swaps",
                nested,
            )
            .await?;
        // Every nested write that applied has the outer Txn's revision.
        let revision = self.revision_of(&resp);
        let mut answers = answers.into_iter();
        Ok(out
            .into_iter()
            .map(|done| match done {
                Some(done) => done,
                None => match answers.next() {
                    Some(TxnOpResponse::Txn(inner)) if inner.succeeded() => match &revision {
                        Ok(v) => Ok(CasOutcome::Applied(*v)),
                        Err(e) => Err(e.copy_for_batch()),
                    },
                    Some(TxnOpResponse::Txn(_)) => Ok(CasOutcome::Conflict),
                    _ => Err(StoreError::Unavailable {
                        message: format!(
                            "etcd at {} answered a nested compare-and-swap with another operation's result",
                            self.options.target()
                        ),
                        source: None,
                    }),
                },
            })
            .collect())
    }

    /// One `Txn` of `Range` gets: every group read at one revision, through
    /// the Raft leader (a read-only `Txn` is linearizable).
    async fn read_txn(&self, groups: &[GroupName]) -> BatchResult<Option<Versioned>> {
        let gets: Vec<TxnOp> = groups
            .iter()
            .map(|g| TxnOp::get(self.key(g), None))
            .collect();
        let (_, answers) = self.txn("read", "a read of keys", gets).await?;
        Ok(groups
            .iter()
            .zip(answers)
            .map(|(group, answer)| match answer {
                TxnOpResponse::Get(got) => match got.kvs().first() {
                    None => Ok(None),
                    Some(found) => self.versioned(group, found).map(Some),
                },
                _ => Err(StoreError::Unavailable {
                    message: format!(
                        "etcd at {} answered a get of group {group} with another operation's result",
                        self.options.target()
                    ),
                    source: None,
                }),
            })
            .collect())
    }
}

/// A `mod_revision` as a version: etcd's revisions start at 1, so zero or
/// less is no version tenure can have read.
pub(crate) fn version_of(mod_revision: i64) -> Option<Version> {
    u64::try_from(mod_revision)
        .ok()
        .filter(|v| *v > 0)
        .map(Version)
}

#[async_trait]
impl LeaseView for EtcdStore {
    async fn read(&self, group: &GroupName) -> Result<Option<Versioned>, StoreError> {
        let mut kv = self.client.kv_client();
        // Linearizable by default: the read goes through the Raft leader.
        let resp = self.bounded("read", kv.get(self.key(group), None)).await?;
        match resp.kvs().first() {
            None => Ok(None),
            Some(found) => self.versioned(group, found).map(Some),
        }
    }

    /// Chunks of 64 groups, one read-only `Txn` each, in
    /// flight together (within the handle's bound on requests).
    async fn read_many(&self, groups: &[GroupName]) -> BatchResult<Option<Versioned>> {
        Ok(self
            .in_flight
            .read_chunks(groups, READS_PER_TXN, |part| self.read_txn(part))
            .await)
    }

    /// One watch on the key prefix for every group, its events carrying
    /// the records (see [the crate docs](crate#change-feed)).
    async fn watch(&self) -> Result<Option<StoreFeed>, StoreError> {
        let feed = feed::start(self.client.clone(), self.options.clone()).await?;
        Ok(Some(feed))
    }

    async fn changes(&self, group: &GroupName) -> Result<Option<ChangeFeed>, StoreError> {
        if self.feeds_off.now() {
            return Ok(None);
        }
        let (tx, feed) = ChangeFeed::channel();
        let client = self.client.clone();
        let options = self.options.clone();
        let off = self.feeds_off.clone();
        let key = self.key(group);
        tokio::spawn(async move {
            if let Err(e) = watch::run(client, options, key, tx).await {
                tracing::warn!(
                    error = %e,
                    "etcd refused the watch; candidates poll instead of taking over at once"
                );
                off.for_a_while(FEED_RETRY_AFTER);
            }
        });
        Ok(Some(feed))
    }

    /// One linearizable range read of the keys under the store's prefix
    /// and `prefix` (a key that is not a group name is skipped).
    async fn list(&self, prefix: &str) -> Result<Vec<Listed>, StoreError> {
        let mut kv = self.client.kv_client();
        let key = format!("{}{prefix}", self.options.prefix).into_bytes();
        let resp = self
            .bounded(
                "list",
                kv.get(key, Some(etcd_client::GetOptions::new().with_prefix())),
            )
            .await?;
        Ok(resp
            .kvs()
            .iter()
            .filter_map(|found| {
                let name = std::str::from_utf8(found.key())
                    .ok()?
                    .strip_prefix(self.options.prefix.as_str())?;
                let group = GroupName::new(name).ok()?;
                let record = self.versioned(&group, found);
                Some(Listed { group, record })
            })
            .collect())
    }

    fn describe(&self) -> String {
        self.options.describe()
    }

    fn running(&self) -> Running<'_> {
        // A batch is single requests in flight together, bounded per handle,
        // so a large one only queues: let the engine's own limit decide.
        Running::new(BATCH_SIZE, &self.engine)
    }
}

#[async_trait]
impl LeaseStore for EtcdStore {
    /// Up to 64 groups per request, as nested `Txn`s in one outer `Txn`
    /// (each group's compare-and-swap applies or conflicts on its own: a
    /// flat `Txn` of several groups would be all-or-nothing). Requests go
    /// out concurrently as streams of the one HTTP/2 channel, at most 128
    /// at once per handle. A group written twice in one batch goes in
    /// successive requests, in the batch's order.
    async fn compare_and_swap_many(&self, requests: &[CasRequest]) -> BatchResult<CasOutcome> {
        Ok(self
            .in_flight
            .compare_and_swap_rounds(requests, WRITES_PER_TXN, |writes| self.cas_nested(writes))
            .await)
    }

    async fn compare_and_swap(
        &self,
        group: &GroupName,
        expected: Option<Version>,
        record: &LeaseRecord,
    ) -> Result<CasOutcome, StoreError> {
        let Some(txn) = self.cas_txn(group, expected, record) else {
            return Ok(CasOutcome::Conflict);
        };
        let mut kv = self.client.kv_client();
        let resp = self.bounded("compare-and-swap", kv.txn(txn)).await?;
        if !resp.succeeded() {
            return Ok(CasOutcome::Conflict);
        }
        Ok(CasOutcome::Applied(self.revision_of(&resp)?))
    }
}
