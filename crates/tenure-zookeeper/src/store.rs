//! [`ZkStore`]: the [`LeaseStore`] over ZooKeeper's conditional writes.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tenure::concurrent::InFlight;
use tenure::{
    BatchResult, CasOutcome, CasRequest, ChangeFeed, EngineSlot, GroupName, LeaseRecord,
    LeaseStore, LeaseView, Listed, StoreError, StoreFeed, Version, Versioned,
};
use zookeeper_client as zk;

use crate::error::{Ctx, ZkStoreError};
use crate::options::ZkOptions;
use crate::session::Session;
use crate::{feed, names, watch};

/// Most requests of a store handle's batches in flight at once, pipelined
/// on its one connection (ZooKeeper answers a session's requests in
/// order): enough to keep the server busy, bounded whatever the number of
/// groups.
const IN_FLIGHT: usize = 256;

/// Most groups read by one `multiRead` request of a batched read.
pub(crate) const READS_PER_REQUEST: usize = 128;

/// The operations one batch call takes (see
/// [`LeaseStore::batch_size_hint`]): the engine's default batch.
const BATCH_SIZE: usize = 2048;

/// A group node's data version, as of the write whose zxid is the version
/// tenure was given: what a conditional `setData` needs.
#[derive(Clone, Copy, Debug)]
struct Seen {
    mzxid: i64,
    data_version: i32,
}

pub(crate) struct Inner {
    pub(crate) session: Session,
    pub(crate) options: ZkOptions,
    pub(crate) ctx: Ctx,
    /// The last `(mzxid, dataVersion)` seen of each group, so that a
    /// compare-and-swap on a version read (or written, or reported by the
    /// feed) through this handle needs no read first.
    seen: Mutex<HashMap<GroupName, Seen>>,
    in_flight: InFlight,
    engine: EngineSlot,
}

/// A lease store in ZooKeeper. Clones share one session (one connection),
/// and the engine that runs every group elected through them.
///
/// See the [crate docs](crate) for the node layout and the guarantees.
#[derive(Clone)]
pub struct ZkStore {
    pub(crate) inner: Arc<Inner>,
}

impl fmt::Debug for ZkStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkStore")
            .field("options", &self.inner.options)
            .finish()
    }
}

/// A stored node as a group's record and version; a record tenure cannot
/// decode is the group's [`StoreError::Record`].
pub(crate) fn versioned(
    group: &GroupName,
    data: &[u8],
    stat: &zk::Stat,
) -> Result<Versioned, StoreError> {
    let record = LeaseRecord::decode(data).map_err(|source| StoreError::Record {
        group: group.clone(),
        source,
    })?;
    Ok(Versioned {
        record,
        version: version_of(stat),
    })
}

/// The version tenure gives a node: the zxid of its last write, which
/// ZooKeeper never reuses (it rises across writes, leader elections and
/// restarts, and a node deleted and created again gets a higher one).
fn version_of(stat: &zk::Stat) -> Version {
    Version(u64::try_from(stat.mzxid).unwrap_or(0))
}

impl ZkStore {
    /// Connects to ZooKeeper at `url` (see [`ZkOptions`] for the form) and
    /// checks that tenure may read its prefix node there.
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), tenure_zookeeper::ZkStoreError> {
    /// let store = tenure_zookeeper::ZkStore::connect("zk://127.0.0.1:2181/tenure").await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect(url: &str) -> Result<ZkStore, ZkStoreError> {
        ZkStore::connect_with(ZkOptions::from_url(url)?).await
    }

    /// Connects with options already parsed (and perhaps adjusted).
    pub async fn connect_with(options: ZkOptions) -> Result<ZkStore, ZkStoreError> {
        let ctx = Ctx {
            target: options.connect_string(),
            prefix: options.prefix.clone(),
            user: options.user.clone(),
            timeout: options.timeout,
        };
        let session = Session::open(options.clone(), ctx.clone()).await?;
        let store = ZkStore {
            inner: Arc::new(Inner {
                session,
                options,
                ctx,
                seen: Mutex::new(HashMap::new()),
                in_flight: InFlight::new(IN_FLIGHT),
                engine: EngineSlot::new(),
            }),
        };
        // One read proves the session and the read permission on the
        // prefix node (which may not exist yet: it is made on first write).
        let prefix = store.inner.options.prefix.clone();
        match store
            .request("connect", |c| async move { c.get_data(&prefix).await })
            .await
        {
            Ok(_) | Err(Refused(zk::Error::NoNode)) => Ok(store),
            Err(e) => Err(store.zk_error("connect", e)),
        }
    }

    /// The options in use.
    pub fn options(&self) -> &ZkOptions {
        &self.inner.options
    }

    /// The node of a group: the prefix node's child named after the group
    /// (escaped as the [crate docs](crate#node-layout) say).
    pub fn path(&self, group: &GroupName) -> String {
        format!("{}/{}", self.inner.options.prefix, names::encode(group))
    }

    /// The ACL of the nodes tenure creates: only the digest user's, when
    /// the URL names one; anyone's otherwise.
    fn acls(&self) -> zk::Acls<'static> {
        if self.inner.options.user.is_some() {
            zk::Acls::creator_all()
        } else {
            zk::Acls::anyone_all()
        }
    }

    /// Runs one request on the current session within the timeout. A
    /// refusal by the server comes back as [`Refused`] for the caller to
    /// interpret; anything else is already a [`ZkStoreError`].
    pub(crate) async fn request<T, F, Fut>(&self, what: &'static str, f: F) -> Result<T, Failed>
    where
        F: FnOnce(zk::Client) -> Fut,
        Fut: Future<Output = Result<T, zk::Error>>,
    {
        let ctx = &self.inner.ctx;
        let run = async {
            let client = self.inner.session.client().await.map_err(Failed::Store)?;
            f(client).await.map_err(Refused)
        };
        tokio::time::timeout(ctx.timeout, run)
            .await
            .unwrap_or_else(|_| Err(Failed::Store(ctx.timeout(what))))
    }

    pub(crate) fn zk_error(&self, what: &'static str, e: Failed) -> ZkStoreError {
        match e {
            Failed::Store(e) => e,
            Failed::Refused(e) => self.inner.ctx.classify(what, e),
        }
    }

    pub(crate) fn store_error(&self, what: &'static str, e: Failed) -> StoreError {
        self.zk_error(what, e).into()
    }

    pub(crate) fn remember(&self, group: &GroupName, stat: &zk::Stat) {
        self.inner
            .seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                group.clone(),
                Seen {
                    mzxid: stat.mzxid,
                    data_version: stat.version,
                },
            );
    }

    fn recall(&self, group: &GroupName) -> Option<Seen> {
        self.inner
            .seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(group)
            .copied()
    }

    /// Reads one node: `None` if it does not exist.
    async fn get(&self, group: &GroupName) -> Result<Option<(Vec<u8>, zk::Stat)>, StoreError> {
        let path = self.path(group);
        match self
            .request("read", |c| async move { c.get_data(&path).await })
            .await
        {
            Ok((data, stat)) => {
                self.remember(group, &stat);
                Ok(Some((data, stat)))
            }
            Err(Refused(zk::Error::NoNode)) => Ok(None),
            Err(e) => Err(self.store_error("read", e)),
        }
    }

    /// The data version the node had at the write `version`: what
    /// `setData` must be given. `None`: the node is not at that version
    /// (any more), so a compare-and-swap expecting it conflicts.
    async fn data_version_at(
        &self,
        group: &GroupName,
        version: Version,
    ) -> Result<Option<i32>, StoreError> {
        if let Some(seen) = self.recall(group) {
            if u64::try_from(seen.mzxid).ok() == Some(version.0) {
                return Ok(Some(seen.data_version));
            }
        }
        // A version this handle has not seen (another handle's, or one the
        // feed has since moved past): ask the node.
        Ok(match self.get(group).await? {
            Some((_, stat)) if version_of(&stat) == version => Some(stat.version),
            _ => None,
        })
    }

    /// Creates the group's node (expecting none).
    async fn create(
        &self,
        group: &GroupName,
        record: &LeaseRecord,
    ) -> Result<CasOutcome, StoreError> {
        let path = self.path(group);
        let data = record.encode();
        let acls = self.acls();
        let attempt = || {
            let (path, data) = (path.clone(), data.clone());
            self.request("compare-and-swap", move |c| async move {
                let options = zk::CreateMode::Persistent.with_acls(acls);
                c.create(&path, &data, &options).await
            })
        };
        let mut result = attempt().await;
        if matches!(result, Err(Refused(zk::Error::NoNode))) {
            // The prefix node does not exist yet: make it, then try again.
            self.make_prefix().await?;
            result = attempt().await;
        }
        match result {
            Ok((stat, _)) => {
                self.remember(group, &stat);
                Ok(CasOutcome::Applied(version_of(&stat)))
            }
            // ZooKeeper refused it: nothing was written.
            Err(Refused(zk::Error::NodeExists)) => Ok(CasOutcome::Conflict),
            Err(e) => Err(self.store_error("compare-and-swap", e)),
        }
    }

    /// Creates the prefix node (open ancestors first, then the prefix node
    /// with tenure's ACL); an existing one is fine.
    async fn make_prefix(&self) -> Result<(), StoreError> {
        let prefix = self.inner.options.prefix.clone();
        let acls = self.acls();
        let result = self
            .request("create the prefix node", |c| async move {
                if let Some((parent, _)) = prefix.rsplit_once('/') {
                    if !parent.is_empty() {
                        let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
                        c.mkdir(parent, &open).await?;
                    }
                }
                let options = zk::CreateMode::Persistent.with_acls(acls);
                match c.create(&prefix, &[], &options).await {
                    Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
                    Err(e) => Err(e),
                }
            })
            .await;
        result.map_err(|e| self.store_error("create the prefix node", e))
    }

    /// Overwrites the group's node if it is still at `version`.
    async fn replace(
        &self,
        group: &GroupName,
        version: Version,
        record: &LeaseRecord,
    ) -> Result<CasOutcome, StoreError> {
        let Some(expected) = self.data_version_at(group, version).await? else {
            return Ok(CasOutcome::Conflict);
        };
        if expected < 0 {
            // -1 would make setData unconditional; ZooKeeper's counter only
            // gets there by wrapping after 2^31 writes.
            return Err(StoreError::Misconfigured {
                message: format!(
                    "ZooKeeper node {} has a negative data version ({expected}): its counter wrapped; stop every candidate, delete the node and start again",
                    self.path(group)
                ),
                source: None,
            });
        }
        let path = self.path(group);
        let data = record.encode();
        match self
            .request("compare-and-swap", |c| async move {
                c.set_data(&path, &data, Some(expected)).await
            })
            .await
        {
            Ok(stat) => {
                self.remember(group, &stat);
                Ok(CasOutcome::Applied(version_of(&stat)))
            }
            // ZooKeeper refused it (another write came first, or the node
            // is gone): nothing was written.
            Err(Refused(zk::Error::BadVersion | zk::Error::NoNode)) => Ok(CasOutcome::Conflict),
            Err(e) => Err(self.store_error("compare-and-swap", e)),
        }
    }

    /// One `multiRead` of many nodes (each answered on its own).
    pub(crate) async fn read_multi(&self, groups: &[GroupName]) -> BatchResult<Option<Versioned>> {
        let paths: Vec<String> = groups.iter().map(|g| self.path(g)).collect();
        let answers = self
            .request("read", |c| async move {
                let mut reader = c.new_multi_reader();
                for p in &paths {
                    reader.add_get_data(p)?;
                }
                reader.commit().await
            })
            .await;
        let answers = match answers {
            Ok(a) => a,
            // A server before 3.6: one request per group.
            Err(Refused(zk::Error::Unimplemented)) => {
                let mut out = Vec::with_capacity(groups.len());
                for g in groups {
                    out.push(self.read(g).await);
                }
                return Ok(out);
            }
            Err(e) => return Err(self.store_error("read", e)),
        };
        tenure::store::check_batch_answer(
            &format!("ZooKeeper at {}", self.inner.ctx.target),
            "a read of nodes",
            groups.len(),
            answers.len(),
        )?;
        Ok(groups
            .iter()
            .zip(answers)
            .map(|(group, answer)| match answer {
                zk::MultiReadResult::Data { data, stat } => {
                    self.remember(group, &stat);
                    versioned(group, &data, &stat).map(Some)
                }
                zk::MultiReadResult::Error {
                    err: zk::Error::NoNode,
                } => Ok(None),
                zk::MultiReadResult::Error { err } => {
                    Err(self.store_error("read", Refused(err)))
                }
                _ => Err(StoreError::Unavailable {
                    message: format!(
                        "ZooKeeper at {} answered a read of group {group} with another operation's result",
                        self.inner.ctx.target
                    ),
                    source: None,
                }),
            })
            .collect())
    }
}

/// Why a request failed: ZooKeeper's own answer (for the caller to
/// interpret: `NodeExists` is a conflict for a create, `NoNode` no record
/// for a read), or an error already classified (no session, no reply in
/// time).
#[derive(Debug)]
pub(crate) enum Failed {
    Refused(zk::Error),
    Store(ZkStoreError),
}
pub(crate) use Failed::Refused;

#[async_trait]
impl LeaseView for ZkStore {
    async fn read(&self, group: &GroupName) -> Result<Option<Versioned>, StoreError> {
        match self.get(group).await? {
            None => Ok(None),
            Some((data, stat)) => versioned(group, &data, &stat).map(Some),
        }
    }

    /// `multiRead` requests of up to 128 groups, in flight together.
    async fn read_many(&self, groups: &[GroupName]) -> BatchResult<Option<Versioned>> {
        Ok(self
            .inner
            .in_flight
            .read_chunks(groups, READS_PER_REQUEST, |part| self.read_multi(part))
            .await)
    }

    /// The prefix node's children whose group names start with `prefix`,
    /// read in `multiRead` requests.
    async fn list(&self, prefix: &str) -> Result<Vec<Listed>, StoreError> {
        let node = self.inner.options.prefix.clone();
        let children = match self
            .request("list", |c| async move { c.list_children(&node).await })
            .await
        {
            Ok(children) => children,
            Err(Refused(zk::Error::NoNode)) => return Ok(Vec::new()),
            Err(e) => return Err(self.store_error("list", e)),
        };
        let groups: Vec<GroupName> = children
            .iter()
            .filter_map(|child| names::decode(child))
            .filter(|g| g.as_str().starts_with(prefix))
            .collect();
        let records = self.read_many(&groups).await?;
        Ok(Listed::from_reads(groups, records))
    }

    /// One persistent recursive watch on the prefix node for every group
    /// (see [the crate docs](crate#change-feed)); `None` on a server
    /// before 3.6, which has no such watch (the engine polls).
    async fn watch(&self) -> Result<Option<StoreFeed>, StoreError> {
        match feed::start(self.clone()).await {
            Ok(feed) => Ok(Some(feed)),
            Err(ZkStoreError::Unsupported { .. }) => {
                tracing::warn!(
                    store = %self.describe(),
                    "ZooKeeper has no persistent recursive watches (before 3.6): the engine polls"
                );
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// A one-shot data watch on the group's node, re-armed after every
    /// event and on every new session.
    async fn changes(&self, group: &GroupName) -> Result<Option<ChangeFeed>, StoreError> {
        Ok(Some(watch::start(self.clone(), self.path(group))))
    }

    fn describe(&self) -> String {
        self.inner.options.describe()
    }
}

#[async_trait]
impl LeaseStore for ZkStore {
    async fn compare_and_swap(
        &self,
        group: &GroupName,
        expected: Option<Version>,
        record: &LeaseRecord,
    ) -> Result<CasOutcome, StoreError> {
        match expected {
            None => self.create(group, record).await,
            Some(version) => self.replace(group, version, record).await,
        }
    }

    /// One request per group, pipelined on the session's connection (at
    /// most 256 in flight per handle); a group's writes one after another.
    /// Not ZooKeeper's `multi`: it is all-or-nothing, and one group's
    /// conflict must not undo another's renewal.
    async fn compare_and_swap_many(&self, requests: &[CasRequest]) -> BatchResult<CasOutcome> {
        Ok(self
            .inner
            .in_flight
            .compare_and_swap_each(requests, |r| {
                self.compare_and_swap(&r.group, r.expected, &r.record)
            })
            .await)
    }

    fn batch_size_hint(&self) -> usize {
        BATCH_SIZE
    }

    fn engine_slot(&self) -> Option<&EngineSlot> {
        Some(&self.inner.engine)
    }
}
