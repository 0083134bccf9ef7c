//! The store: one row per group, compare-and-swap on the row's version,
//! every operation a batch (see [`crate::batch`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use tenure::store::Running;
use tenure::store::{BatchResult, CasOutcome, CasRequest, ChangeFeed, Listed, StoreFeed};
use tenure::{
    EngineSlot, GroupName, LeaseRecord, LeaseStore, LeaseView, RecordError, StoreError, Version,
    Versioned,
};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::batch::{self, WriteArgs};
use crate::error::PostgresStoreError;
use crate::options::PostgresOptions;
use crate::pool::{Conn, Op, Pool};
use crate::{error, listen, payload, schema, session, tls};

/// A lease store on a PostgreSQL table. Cheap to clone; clones share a
/// small pool of connections (`?pool=`, 4 by default), each re-established
/// by a later operation after it is lost, timed out or abandoned, and
/// electors built on clones share one [`tenure::Engine`].
///
/// ```no_run
/// # async fn demo() -> Result<(), tenure::StoreError> {
/// let store = tenure_postgres::PostgresStore::connect("postgres://app@db.internal/app").await?;
/// // One engine, one pool and one LISTEN connection for all of them.
/// let shards: Vec<_> = (0..1000)
///     .map(|i| tenure::Elector::builder(store.clone(), format!("shard-{i}")).start())
///     .collect();
/// # let _ = shards; Ok(()) }
/// ```
#[derive(Clone)]
pub struct PostgresStore {
    inner: Arc<Inner>,
}

struct Inner {
    options: PostgresOptions,
    tls: MakeRustlsConnect,
    pool: Pool,
    /// The table's channel, as the server resolved it on the last connect.
    channel: std::sync::Mutex<String>,
    /// The engine that electors on clones of this handle share.
    engine: EngineSlot,
    /// Whether the operator was told that the table lacks the index that
    /// lists by prefix (told once per store).
    told_index: AtomicBool,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("url", &self.inner.options.redacted_url())
            .finish()
    }
}

impl PostgresStore {
    /// Connects to the URL (see [`PostgresOptions`]), creating the lease
    /// table if it is missing. Fails with a message naming the fix for wrong
    /// credentials, a missing database, a TLS problem, or a table without
    /// tenure's layout.
    pub async fn connect(url: &str) -> Result<Self, PostgresStoreError> {
        Self::connect_with(PostgresOptions::from_url(url)?).await
    }

    /// Connects with parsed options; see [`connect`](PostgresStore::connect).
    pub async fn connect_with(options: PostgresOptions) -> Result<Self, PostgresStoreError> {
        let tls = tls::connector(options.ca.as_ref().map(|(o, p)| (*o, p.as_path())))?;
        let pool = Pool::new(options.pool);
        let store = PostgresStore {
            inner: Arc::new(Inner {
                options,
                tls,
                pool,
                channel: std::sync::Mutex::new(String::new()),
                engine: EngineSlot::new(),
                told_index: AtomicBool::new(false),
            }),
        };
        let conn = store.open().await?;
        store.inner.pool.seed(conn).await;
        Ok(store)
    }

    /// The options in force.
    pub fn options(&self) -> &PostgresOptions {
        &self.inner.options
    }

    fn target(&self) -> &str {
        self.inner.options.redacted_url()
    }

    fn channel(&self) -> String {
        self.inner
            .channel
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Opens a connection, bounded by the timeout as a whole (a server
    /// that accepts TCP but never answers must not hang the caller).
    async fn open(&self) -> Result<Conn, StoreError> {
        let timeout = self.inner.options.timeout;
        match tokio::time::timeout(timeout, self.open_unbounded()).await {
            Ok(r) => r,
            Err(_) => Err(StoreError::unavailable(
                format!(
                    "PostgreSQL at {}: connecting took longer than {timeout:?} (timeout=)",
                    self.target()
                ),
                std::io::Error::from(std::io::ErrorKind::TimedOut),
            )),
        }
    }

    async fn open_unbounded(&self) -> Result<Conn, StoreError> {
        let options = &self.inner.options;
        let target = self.target();
        let client = session::connect(options, self.inner.tls.clone(), target, None).await?;
        let resolved = schema::ensure_table(&client, &options.table, target).await?;
        if resolved.utf8
            && !resolved.prefix_index
            && !self.inner.told_index.swap(true, Ordering::Relaxed)
        {
            // A table created before the index: lists still answer exactly,
            // by scanning the whole table.
            tracing::warn!(
                table = %resolved.qualified,
                "PostgreSQL at {target}: the lease table has no index on group_name COLLATE \"C\", so every \
                 listing by prefix (a sharded set's membership check) scans the whole table; have its owner run \
                 `{};` (connections opened after that use it)",
                schema::missing_index_ddl(&resolved.qualified)
            );
        }
        *self.inner.channel.lock().unwrap_or_else(|p| p.into_inner()) = resolved.channel;
        let statements =
            batch::prepare(&client, &options.table.quoted, resolved.utf8, target).await?;
        Ok(Conn { client, statements })
    }

    /// Runs `f` on a pooled connection (see [`Pool::run`]).
    async fn run<T>(
        &self,
        what: &str,
        f: impl for<'c> FnOnce(&'c Conn) -> Op<'c, T>,
    ) -> Result<T, StoreError> {
        let inner = &self.inner;
        inner
            .pool
            .run(
                what,
                self.target(),
                inner.options.timeout,
                &inner.tls,
                || self.open(),
                f,
            )
            .await
    }

    /// One write statement: the versions of the requests at `indexes` that
    /// applied, by group (each group is in it at most once).
    async fn write(
        &self,
        requests: &[CasRequest],
        indexes: &[usize],
    ) -> Result<HashMap<String, Option<i64>>, StoreError> {
        let a = WriteArgs::new(requests, indexes);
        let channel = self.channel();
        let rows = self
            .run("compare-and-swap", |c| {
                Box::pin(async move {
                    c.client
                        .query(
                            &c.statements.write,
                            &[
                                &a.groups,
                                &a.expected,
                                &a.records,
                                &a.heads,
                                &a.recs,
                                &channel,
                            ],
                        )
                        .await
                })
            })
            .await?;
        let mut applied = HashMap::with_capacity(rows.len());
        for row in rows {
            let group: String = row
                .try_get(0)
                .map_err(|e| error::classify("compare-and-swap", self.target(), e))?;
            // No version: the row was held by another transaction.
            let version: Option<i64> = row
                .try_get(1)
                .map_err(|e| error::classify("compare-and-swap", self.target(), e))?;
            applied.insert(group, version);
        }
        Ok(applied)
    }

    /// One read statement: the rows of `groups` (distinct) that exist.
    async fn read_rows(
        &self,
        groups: Vec<String>,
    ) -> Result<HashMap<String, (i64, Vec<u8>)>, StoreError> {
        let rows = self.lease_rows("read", |s| &s.read, vec![groups]).await?;
        Ok(rows
            .into_iter()
            .map(|(group, version, record)| (group, (version, record)))
            .collect())
    }

    /// Runs the query `statement` picks, with as many of `params` as it
    /// takes, whose rows are leases (`what` names it in errors): each row's group name, version
    /// and record.
    async fn lease_rows<P>(
        &self,
        what: &'static str,
        statement: fn(&batch::Statements) -> &tokio_postgres::Statement,
        params: Vec<P>,
    ) -> Result<Vec<(String, i64, Vec<u8>)>, StoreError>
    where
        P: tokio_postgres::types::ToSql + Sync + Send + 'static,
    {
        let rows = self
            .run(what, move |c| {
                Box::pin(async move {
                    let statement = statement(&c.statements);
                    let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = params
                        .iter()
                        .take(statement.params().len())
                        .map(|p| p as &(dyn tokio_postgres::types::ToSql + Sync))
                        .collect();
                    c.client.query(statement, &params).await
                })
            })
            .await?;
        let get = |e| error::classify(what, self.target(), e);
        rows.iter()
            .map(|row| {
                Ok((
                    row.try_get(0).map_err(get)?,
                    row.try_get(1).map_err(get)?,
                    row.try_get(2).map_err(get)?,
                ))
            })
            .collect()
    }
}

/// The error of a write whose row another transaction held locked.
fn locked_row(group: &GroupName, target: &str) -> StoreError {
    StoreError::busy(format!(
        "PostgreSQL at {target}: the lease row of group {group} is locked by another session \
         (an open transaction? look in pg_locks and pg_stat_activity, and end it)"
    ))
}

fn version_of(v: i64) -> Version {
    Version(u64::try_from(v).unwrap_or(0))
}

fn decode(group: &GroupName, version: i64, bytes: &[u8]) -> Result<Versioned, StoreError> {
    let corrupt = |source| StoreError::Record {
        group: group.clone(),
        source,
    };
    // tenure never writes a negative version, and no write can follow the
    // largest bigint (`version + 1` overflows): either was put there by
    // hand, and would otherwise conflict or fail on every write, unexplained.
    if !(0..i64::MAX).contains(&version) {
        return Err(corrupt(RecordError::Corrupt {
            detail: format!(
                "its version column holds {version}, outside the 0 to 2^63 - 2 that tenure writes"
            ),
        }));
    }
    let record = LeaseRecord::decode(bytes).map_err(corrupt)?;
    Ok(Versioned {
        record,
        version: version_of(version),
    })
}

#[async_trait]
impl LeaseView for PostgresStore {
    async fn read(&self, group: &GroupName) -> Result<Option<Versioned>, StoreError> {
        tenure::store::read_as_batch(self, group).await
    }

    /// One `SELECT … WHERE group_name = ANY($1)` per 4096 distinct groups.
    async fn read_many(&self, groups: &[GroupName]) -> BatchResult<Option<Versioned>> {
        let mut distinct: Vec<String> = groups.iter().map(|g| g.as_str().to_owned()).collect();
        distinct.sort_unstable();
        distinct.dedup();
        let mut found = HashMap::with_capacity(distinct.len());
        for chunk in distinct.chunks(batch::MAX_ROWS) {
            found.extend(self.read_rows(chunk.to_vec()).await?);
        }
        Ok(groups
            .iter()
            .map(|g| match found.get(g.as_str()) {
                None => Ok(None),
                Some((version, bytes)) => decode(g, *version, bytes).map(Some),
            })
            .collect())
    }

    async fn changes(&self, group: &GroupName) -> Result<Option<ChangeFeed>, StoreError> {
        listen::subscribe(
            &self.inner.options,
            self.inner.tls.clone(),
            self.channel(),
            group,
        )
        .await
        .map(Some)
    }

    /// One `LISTEN` connection for the whole table; every write's
    /// notification carries the group, its new version and its record (see
    /// [the crate docs](crate#many-groups)).
    async fn watch(&self) -> Result<Option<StoreFeed>, StoreError> {
        listen::watch(&self.inner.options, self.inner.tls.clone(), self.channel())
            .await
            .map(Some)
    }

    /// One statement: every row whose group name starts with `prefix`
    /// (compared literally, character for character), found by a range of
    /// the index on `group_name COLLATE "C"` (see
    /// [the crate docs](crate#schema)).
    async fn list(&self, prefix: &str) -> Result<Vec<Listed>, StoreError> {
        // PostgreSQL's text cannot hold NUL (it refuses the parameter), so
        // no name starts with such a prefix.
        if prefix.contains('\0') {
            return Ok(Vec::new());
        }
        let rows = match batch::prefix_end(prefix) {
            // On a server that does not store UTF-8 there is no range: the
            // statement is the scan, which takes the prefix alone.
            Some(end) => {
                self.lease_rows(
                    "list",
                    |s| s.list_between.as_ref().unwrap_or(&s.list_from),
                    vec![prefix.to_owned(), end],
                )
                .await?
            }
            None => {
                self.lease_rows("list", |s| &s.list_from, vec![prefix.to_owned()])
                    .await?
            }
        };
        let mut out = Vec::with_capacity(rows.len());
        for (name, version, record) in rows {
            // A name tenure would refuse was written by hand: skip it.
            let Ok(group) = GroupName::new(name) else {
                continue;
            };
            let record = decode(&group, version, &record);
            out.push(Listed { group, record });
        }
        Ok(out)
    }

    fn describe(&self) -> String {
        format!(
            "{} (table {})",
            self.target(),
            self.inner.options.table.name
        )
    }

    fn running(&self) -> Running<'_> {
        // One statement's worth: a renewal round of thousands of groups goes
        // out in a statement or two.
        Running::new(batch::MAX_ROWS, &self.inner.engine)
    }
}

#[async_trait]
impl LeaseStore for PostgresStore {
    /// One plain statement: `UPDATE … WHERE group_name = $1 AND version =
    /// $2` (or `INSERT … ON CONFLICT DO NOTHING` expecting no row) with the
    /// batch statement's version rule and notification, without its arrays.
    async fn compare_and_swap(
        &self,
        group: &GroupName,
        expected: Option<Version>,
        record: &LeaseRecord,
    ) -> Result<CasOutcome, StoreError> {
        let encoded = record.encode();
        let (head, rec) = (payload::head(group), payload::record(&encoded));
        let name = group.as_str().to_owned();
        let channel = self.channel();
        let expected = match expected {
            None => None,
            // A version beyond an i64 was never issued here: nothing to write.
            Some(v) => match i64::try_from(v.0) {
                Ok(v) => Some(v),
                Err(_) => return Ok(CasOutcome::Conflict),
            },
        };
        let row = self
            .run("compare-and-swap", |c| {
                Box::pin(async move {
                    match expected {
                        Some(v) => {
                            c.client
                                .query_opt(
                                    &c.statements.update_one,
                                    &[&name, &v, &encoded, &head, &rec, &channel],
                                )
                                .await
                        }
                        None => {
                            c.client
                                .query_opt(
                                    &c.statements.insert_one,
                                    &[&name, &encoded, &head, &rec, &channel],
                                )
                                .await
                        }
                    }
                })
            })
            .await?;
        match row {
            None => Ok(CasOutcome::Conflict),
            Some(row) => {
                let version: i64 = row
                    .try_get(0)
                    .map_err(|e| error::classify("compare-and-swap", self.target(), e))?;
                Ok(CasOutcome::Applied(version_of(version)))
            }
        }
    }

    /// One statement for a batch in which no group repeats; the n-th
    /// write of a group goes in the n-th of successive statements, and a
    /// batch of more than 4096 groups is cut into statements of 4096 (see
    /// [the crate docs](crate#many-groups)). A row that another
    /// transaction holds locked is skipped, not waited for: its write fails
    /// alone with [`StoreError::Busy`], the rest apply. If a statement
    /// fails, its requests and every later one fail with its error; earlier
    /// statements' outcomes stand.
    async fn compare_and_swap_many(&self, requests: &[CasRequest]) -> BatchResult<CasOutcome> {
        // Even a batch of one (a lone group's renewal) takes the batch
        // statement: it never waits for a row lock, so a group whose row an
        // operator holds costs the engine no connection for `lock_timeout`.
        // A version beyond an i64 was never issued here: nothing to write.
        let unmatchable = |i: usize| {
            requests[i]
                .expected
                .is_some_and(|v| i64::try_from(v.0).is_err())
        };
        let mut out: Vec<Option<Result<CasOutcome, StoreError>>> =
            (0..requests.len()).map(|_| None).collect();
        let mut failed: Option<StoreError> = None;
        for indexes in batch::rounds(requests, unmatchable) {
            let applied = match &failed {
                Some(_) => None,
                None => match self.write(requests, &indexes).await {
                    Ok(applied) => Some(applied),
                    Err(e) if out.iter().all(Option::is_none) => return Err(e),
                    Err(e) => {
                        failed = Some(e);
                        None
                    }
                },
            };
            for i in indexes {
                out[i] = Some(match (&applied, &failed) {
                    (Some(applied), _) => match applied.get(requests[i].group.as_str()) {
                        Some(Some(v)) => Ok(CasOutcome::Applied(version_of(*v))),
                        Some(None) => Err(locked_row(&requests[i].group, self.target())),
                        None => Ok(CasOutcome::Conflict),
                    },
                    (None, Some(e)) => Err(e.copy_for_batch()),
                    (None, None) => Ok(CasOutcome::Conflict),
                });
            }
        }
        Ok(out
            .into_iter()
            .map(|r| r.unwrap_or(Ok(CasOutcome::Conflict)))
            .collect())
    }
}
