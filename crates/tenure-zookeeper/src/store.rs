//! [`ZkStore`]: the [`LeaseStore`] over ZooKeeper's conditional writes.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use tenure::store::concurrent::InFlight;
use tenure::store::LastSeen;
use tenure::store::Running;
use tenure::store::{BatchResult, CasOutcome, ChangeFeed, Listed, StoreFeed};
use tenure::{
    EngineSlot, GroupName, LeaseRecord, LeaseStore, LeaseView, StoreError, Version, Versioned,
};
use zookeeper_client as zk;

use crate::error::{Ctx, ZkStoreError};
use crate::incarnation::{guard_name, released_at, token_floor};
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
/// [`Running::batch_size`]): the engine's default batch.
const BATCH_SIZE: usize = 2048;

/// What a handle last saw of a group.
#[derive(Clone, Copy, Debug)]
enum Seen {
    /// The node as of the write whose zxid (`mzxid`) is the version tenure
    /// was given: its data version then (what a conditional `setData`
    /// needs) and its incarnation (`czxid`, which names its guard).
    Node {
        mzxid: i64,
        data_version: i32,
        czxid: i64,
    },
    /// No node, under a prefix node that lost children: the group reads as
    /// released at a token floor (see [`crate::incarnation`]), so a create
    /// expecting no record conflicts.
    Floor,
}

/// What a group's node holds now.
enum Found {
    Node(Vec<u8>, zk::Stat),
    /// No node, and this token floor (see [`Seen::Floor`]).
    Floor(u64),
    /// No node, and no child of the prefix node was ever deleted: never
    /// written.
    Nothing,
}

/// What a compare-and-swap expecting a version writes over.
enum Target {
    /// The node, at this data version and incarnation.
    Node { data_version: i32, czxid: i64 },
    /// No node: the version is the token floor it reads as.
    Floor,
}

pub(crate) struct Inner {
    pub(crate) session: Session,
    pub(crate) options: ZkOptions,
    pub(crate) ctx: Ctx,
    /// The last `(mzxid, dataVersion, czxid)` seen of each group, so that
    /// a compare-and-swap on a version read (or written, or reported by
    /// the feed) through this handle needs no read first.
    seen: LastSeen<Seen>,
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
/// restarts, and a node deleted and created again gets a higher one; a
/// token floor, the version of a missing node, is a zxid too).
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
                seen: LastSeen::default(),
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
        let node = Seen::Node {
            mzxid: stat.mzxid,
            data_version: stat.version,
            czxid: stat.czxid,
        };
        self.inner.seen.remember(group, Some(node));
    }

    /// Notes that the group has no node, and reads as released at `floor`
    /// (or as never written, without one).
    fn remember_missing(&self, group: &GroupName, floor: Option<u64>) {
        self.inner.seen.remember(group, floor.map(|_| Seen::Floor));
    }

    fn recall(&self, group: &GroupName) -> Option<Seen> {
        self.inner.seen.recall(group)
    }

    /// Reads one node, and the prefix node's token floor if it is missing.
    async fn look(&self, group: &GroupName) -> Result<Found, StoreError> {
        self.look_with(group, std::future::ready(())).await
    }

    /// [`look`](ZkStore::look), with `between` run after the node was
    /// found missing and before the prefix node is read (what a test
    /// needs to change the store there).
    async fn look_with(
        &self,
        group: &GroupName,
        between: impl Future<Output = ()>,
    ) -> Result<Found, StoreError> {
        if let Some((data, stat)) = self.get_node(group).await? {
            return Ok(Found::Node(data, stat));
        }
        between.await;
        // Read after the node: a deletion of it shows in this.
        let Some(floor) = self.floor().await? else {
            self.remember_missing(group, None);
            return Ok(Found::Nothing);
        };
        // A node created between the two reads has the floor as its own
        // version (its creation was the prefix node's last child change):
        // read it once more. Missing still, no node can have that version
        // any more (one created at or before the floor is gone since).
        if let Some((data, stat)) = self.get_node(group).await? {
            return Ok(Found::Node(data, stat));
        }
        self.remember_missing(group, Some(floor));
        Ok(Found::Floor(floor))
    }

    /// The group's node and its stat; `None` if it is missing.
    async fn get_node(&self, group: &GroupName) -> Result<Option<(Vec<u8>, zk::Stat)>, StoreError> {
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

    /// The token floor of a missing group (see [`crate::incarnation`]):
    /// `None` while no child of the prefix node was ever deleted.
    async fn floor(&self) -> Result<Option<u64>, StoreError> {
        let prefix = self.inner.options.prefix.clone();
        match self
            .request("read", |c| async move { c.check_stat(&prefix).await })
            .await
        {
            Ok(stat) => Ok(stat.as_ref().and_then(token_floor)),
            Err(e) => Err(self.store_error("read", e)),
        }
    }

    /// What a compare-and-swap expecting `version` writes over; `None`:
    /// the group is not at that version (any more), so it conflicts.
    async fn target(
        &self,
        group: &GroupName,
        version: Version,
    ) -> Result<Option<Target>, StoreError> {
        if let Some(Seen::Node {
            mzxid,
            data_version,
            czxid,
        }) = self.recall(group)
        {
            if u64::try_from(mzxid).ok() == Some(version.0) {
                return Ok(Some(Target::Node {
                    data_version,
                    czxid,
                }));
            }
        }
        // A version this handle has not seen (another handle's, or one the
        // feed has since moved past), or a token floor (rare, and read
        // again so that the floor is the latest): ask the node.
        Ok(match self.look(group).await? {
            Found::Node(_, stat) if version_of(&stat) == version => Some(Target::Node {
                data_version: stat.version,
                czxid: stat.czxid,
            }),
            Found::Floor(floor) if floor == version.0 => Some(Target::Floor),
            _ => None,
        })
    }

    /// Creates the group's node expecting no record: a conflict if this
    /// handle last read the group as released at a token floor (the
    /// prefix node is not read again for it: one round trip per create).
    async fn create(
        &self,
        group: &GroupName,
        record: &LeaseRecord,
    ) -> Result<CasOutcome, StoreError> {
        if matches!(self.recall(group), Some(Seen::Floor)) {
            return Ok(CasOutcome::Conflict);
        }
        self.create_node(group, record).await
    }

    /// Creates the group's node; a conflict if it exists.
    async fn create_node(
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

    /// Overwrites the group's node if it is still at `version` (creates
    /// it if `version` is the token floor of a missing node).
    async fn replace(
        &self,
        group: &GroupName,
        version: Version,
        record: &LeaseRecord,
    ) -> Result<CasOutcome, StoreError> {
        let (expected, czxid) = match self.target(group, version).await? {
            None => return Ok(CasOutcome::Conflict),
            Some(Target::Floor) => return self.create_node(group, record).await,
            Some(Target::Node {
                data_version,
                czxid,
            }) => (data_version, czxid),
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
        let guard = format!("{path}/{}", guard_name(czxid));
        let data = record.encode();
        let mut guarded = false;
        loop {
            let (path, guard, data) = (path.clone(), guard.clone(), data.clone());
            let answer = self
                .request("compare-and-swap", |c| async move {
                    let mut write = c.new_multi_writer();
                    write.add_check_version(&guard, -1)?;
                    write.add_set_data(&path, &data, Some(expected))?;
                    match write.commit().await {
                        Ok(results) => Ok(Ok(results)),
                        Err(zk::MultiWriteError::OperationFailed { index, source }) => {
                            Ok(Err((index, source)))
                        }
                        Err(zk::MultiWriteError::RequestFailed { source }) => Err(source),
                    }
                })
                .await;
            match answer {
                Ok(Ok(results)) => {
                    let stat = results.into_iter().find_map(|r| match r {
                        zk::MultiWriteResult::SetData { stat } => Some(stat),
                        _ => None,
                    });
                    let Some(stat) = stat else {
                        return Err(StoreError::Unavailable {
                            message: format!(
                                "ZooKeeper at {} answered a write of group {group} without the written node's stat",
                                self.inner.ctx.target
                            ),
                            source: None,
                        });
                    };
                    self.remember(group, &stat);
                    return Ok(CasOutcome::Applied(version_of(&stat)));
                }
                // No guard for the incarnation the version belongs to: the
                // node was created again since (or is gone), or it never
                // got one. Make it if the node is still that incarnation.
                Ok(Err((0, zk::Error::NoNode))) if !guarded => {
                    if !self.guard(group, czxid).await? {
                        return Ok(CasOutcome::Conflict);
                    }
                    guarded = true;
                }
                // ZooKeeper refused it (another write came first, or the
                // node is gone): nothing was written.
                Ok(Err((_, zk::Error::BadVersion | zk::Error::NoNode))) => {
                    return Ok(CasOutcome::Conflict)
                }
                Ok(Err((_, e))) => return Err(self.store_error("compare-and-swap", Refused(e))),
                Err(e) => return Err(self.store_error("compare-and-swap", e)),
            }
        }
    }

    /// Gives the group's node its guard, if the node is still the
    /// incarnation `czxid` (see [`crate::incarnation`]); `false` if it is
    /// not (created again since, or gone).
    async fn guard(&self, group: &GroupName, czxid: i64) -> Result<bool, StoreError> {
        let path = self.path(group);
        // First make sure the node is that incarnation: a guard made under
        // another one is deleted at once below, but a deletion can fail
        // (no reply, an ACL without DELETE) and leave it there, where it
        // lets writes meant for the old incarnation through. What remains
        // is a node created again within one round trip.
        let current = {
            let path = path.clone();
            self.request(
                "compare-and-swap",
                |c| async move { c.check_stat(&path).await },
            )
            .await
            .map_err(|e| self.store_error("compare-and-swap", e))?
        };
        if current.is_none_or(|stat| stat.czxid != czxid) {
            return Ok(false);
        }
        let guard = format!("{path}/{}", guard_name(czxid));
        let acls = self.acls();
        let (created, node) = {
            let (path, guard) = (path.clone(), guard.clone());
            self.request("compare-and-swap", |c| async move {
                let options = zk::CreateMode::Persistent.with_acls(acls);
                // Sent together and answered in order: the node as it is
                // just after the guard was made.
                let created = c.create(&guard, &[], &options);
                let node = c.check_stat(&path);
                let (created, node) = futures_util::join!(created, node);
                Ok((created.map(|_| ()), node))
            })
            .await
            .map_err(|e| self.store_error("compare-and-swap", e))?
        };
        match created {
            Ok(()) | Err(zk::Error::NodeExists) => {}
            // The node is gone.
            Err(zk::Error::NoNode) => return Ok(false),
            Err(e) => return Err(self.store_error("compare-and-swap", Refused(e))),
        }
        match node {
            Ok(Some(stat)) if stat.czxid == czxid => Ok(true),
            not_ours => {
                // The node was created again before the guard was made:
                // that guard, under the wrong incarnation, must go at once.
                let target = guard.clone();
                let deleted = self
                    .request("compare-and-swap", |c| async move {
                        c.delete(&target, None).await
                    })
                    .await;
                if let Err(e) = deleted {
                    if !matches!(e, Refused(zk::Error::NoNode)) {
                        let e = self.zk_error("compare-and-swap", e);
                        tracing::warn!(node = %path, guard = %guard, error = %e, "a guard made for an older incarnation of the node could not be deleted; delete it by hand");
                    }
                }
                match not_ours {
                    Ok(_) => Ok(false),
                    Err(e) => Err(self.store_error("compare-and-swap", Refused(e))),
                }
            }
        }
    }

    /// One `multiRead` of many nodes (each answered on its own).
    pub(crate) async fn read_multi(&self, groups: &[GroupName]) -> BatchResult<Option<Versioned>> {
        let paths: Vec<String> = groups.iter().map(|g| self.path(g)).collect();
        let prefix = self.inner.options.prefix.clone();
        let answers = self
            .request("read", |c| async move {
                let mut reader = c.new_multi_reader();
                for p in &paths {
                    reader.add_get_data(p)?;
                }
                // Last, so that a node deleted before its read shows here:
                // the token floor of the missing ones.
                reader.add_get_data(&prefix)?;
                reader.commit().await
            })
            .await;
        let mut answers = match answers {
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
            groups.len() + 1,
            answers.len(),
        )?;
        let floor = match answers.pop() {
            Some(zk::MultiReadResult::Data { stat, .. }) => Ok(token_floor(&stat)),
            Some(zk::MultiReadResult::Error {
                err: zk::Error::NoNode,
            }) => Ok(None),
            Some(zk::MultiReadResult::Error { err }) => Err(err),
            _ => Err(zk::Error::UnexpectedError(
                "another operation's result for the prefix node".into(),
            )),
        };
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
                } => match &floor {
                    Ok(floor) => {
                        self.remember_missing(group, *floor);
                        Ok(floor.map(released_at))
                    }
                    Err(e) => Err(self.store_error("read", Refused(e.clone()))),
                },
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
        match self.look(group).await? {
            Found::Nothing => Ok(None),
            Found::Floor(floor) => Ok(Some(released_at(floor))),
            Found::Node(data, stat) => versioned(group, &data, &stat).map(Some),
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

    fn running(&self) -> Running<'_> {
        // A batch of writes is one request per group, pipelined on the
        // session's connection (at most 256 in flight per handle). Not
        // ZooKeeper's `multi`: it is all-or-nothing, and one group's conflict
        // must not undo another's renewal.
        Running::new(BATCH_SIZE, &self.inner.engine).bounded_by(&self.inner.in_flight)
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_server::own_prefix_url;
    use tenure_testkit::held_by;

    /// A read that finds the node missing, while another candidate
    /// creates it before the prefix node is read: the prefix node's
    /// `pzxid` (the floor) is then the new node's own `mzxid`, its
    /// version. Reading that as "released at the floor" would hand the
    /// reader the live node's version with a record without a holder, and
    /// its compare-and-swap would take the lease from the candidate that
    /// just won it. The read must return the node, or a version no node
    /// has.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_read_racing_a_creation_never_passes_the_new_node_off_as_released() {
        let Some(url) = own_prefix_url("straddle") else {
            return;
        };
        let (a, b) = (
            ZkStore::connect(&url).await.unwrap(),
            ZkStore::connect(&url).await.unwrap(),
        );
        // A child of the prefix node deleted once: missing groups read at
        // a token floor from now on.
        let gone = GroupName::new("gone").unwrap();
        b.compare_and_swap(&gone, None, &held_by("x", 1))
            .await
            .unwrap();
        let raw = zk::Client::connect(&url["zk://".len()..url.rfind('/').unwrap()])
            .await
            .unwrap();
        raw.delete(&b.path(&gone), None).await.unwrap();

        let g = GroupName::new("jobs").unwrap();
        let floor = b.read(&g).await.unwrap().expect("a floor");
        let won = held_by("b", floor.record.token + 1);
        let between = async {
            let created = b
                .compare_and_swap(&g, Some(floor.version), &won)
                .await
                .unwrap();
            assert!(matches!(created, CasOutcome::Applied(_)), "{created:?}");
        };
        let found = a.look_with(&g, between).await.unwrap();
        let read = match found {
            Found::Node(data, stat) => versioned(&g, &data, &stat).unwrap(),
            Found::Floor(floor) => released_at(floor),
            Found::Nothing => panic!("a prefix node that lost a child has a floor"),
        };
        let now = b.read(&g).await.unwrap().expect("b's node");
        assert_eq!(now.record, won);
        assert!(
            read.version != now.version || read == now,
            "the read paired b's live version {:?} with {:?}",
            now.version,
            read.record
        );
        // A reader that saw the group released takes it over: that must
        // never take the lease b has just won.
        if read.record.holder.is_none() {
            let next = held_by("a", read.record.token + 1);
            let taken = a
                .compare_and_swap(&g, Some(read.version), &next)
                .await
                .unwrap();
            assert_eq!(
                (taken, b.read(&g).await.unwrap().unwrap().record),
                (CasOutcome::Conflict, won),
                "a took the lease b had just won"
            );
        }
    }
}
