//! The store: one row per group, compare-and-swap on the row's version.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use async_trait::async_trait;
use mysql_async::prelude::Queryable;
use mysql_async::Row;
use tenure::store::Running;
use tenure::store::{BatchResult, CasOutcome, CasRequest, ChangeFeed, Listed, StoreFeed};
use tenure::{
    EngineSlot, GroupName, LeaseRecord, LeaseStore, LeaseView, RecordError, StoreError, Version,
    Versioned,
};

use crate::conn::{self, Live, Op, Pool};
use crate::error::{code, server_code, MysqlStoreError};
use crate::options::MysqlOptions;
use crate::sql::{self, as_bytes, as_u64, in_list, MAX_VERSION};
use crate::{feed, schema};

/// Most groups in one batch transaction, the engine's largest batch: a
/// renewal round of 10,000 groups is three round trips. A larger batch
/// (only a direct caller sends one) becomes several.
pub(crate) const MAX_ROWS: usize = 4096;

/// Most bytes of SQL in one request, well below the 16 MiB
/// `max_allowed_packet` of MariaDB's default (MySQL 8's is 64 MiB).
const MAX_REQUEST_BYTES: usize = 4 << 20;

/// A lease store on a MySQL or MariaDB table. Cheap to clone; clones share
/// a small pool of connections (`?pool=`, 4 by default), each
/// re-established by a later operation after it is lost, timed out or
/// abandoned, and electors built on clones share one [`tenure::Engine`].
///
/// ```no_run
/// # async fn demo() -> Result<(), tenure::StoreError> {
/// let store = tenure_mysql::MysqlStore::connect("mysql://app:secret@db.internal/app").await?;
/// // One engine, one pool and one change-feed connection for all of them.
/// let shards: Vec<_> = (0..1000)
///     .map(|i| tenure::Elector::builder(store.clone(), format!("shard-{i}")).start())
///     .collect();
/// # let _ = shards; Ok(()) }
/// ```
#[derive(Clone)]
pub struct MysqlStore {
    inner: Arc<Inner>,
}

struct Inner {
    options: MysqlOptions,
    pool: Pool,
    engine: EngineSlot,
}

impl std::fmt::Debug for MysqlStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MysqlStore")
            .field("url", &self.inner.options.redacted_url())
            .finish()
    }
}

/// A row as read: its version and record, `None` where the column does
/// not hold what tenure writes.
pub(crate) type RawRow = (Option<u64>, Option<Vec<u8>>);

impl MysqlStore {
    /// Connects to the URL (see [`MysqlOptions`]), creating the lease table
    /// if it is missing. Fails with a message naming the fix for wrong
    /// credentials, a missing database, a TLS problem, a table without
    /// tenure's layout, and, for a user who may not create the missing
    /// table, [`MysqlStoreError::MissingTable`] with the statement to run.
    pub async fn connect(url: &str) -> Result<Self, MysqlStoreError> {
        Self::connect_with(MysqlOptions::from_url(url)?).await
    }

    /// Connects with parsed options; see [`connect`](MysqlStore::connect).
    pub async fn connect_with(options: MysqlOptions) -> Result<Self, MysqlStoreError> {
        conn::check_tls_files(&options)?;
        let mut live = conn::open(&options).await?;
        schema::ensure_table(&mut live, &options).await?;
        let pool = Pool::new(options.pool, options.timeout);
        pool.seed(live).await;
        Ok(MysqlStore {
            inner: Arc::new(Inner {
                options,
                pool,
                engine: EngineSlot::new(),
            }),
        })
    }

    /// The options in force.
    pub fn options(&self) -> &MysqlOptions {
        &self.inner.options
    }

    fn target(&self) -> &str {
        self.inner.options.redacted_url()
    }

    fn table(&self) -> &str {
        &self.inner.options.table.quoted
    }

    async fn run<T>(
        &self,
        what: &str,
        f: impl for<'c> FnOnce(&'c mut Live) -> Op<'c, T>,
    ) -> Result<T, StoreError> {
        self.inner.pool.run(what, &self.inner.options, f).await
    }

    /// One statement: the rows of `groups` (distinct) that exist, by name.
    async fn read_rows(&self, groups: &[&str]) -> Result<HashMap<Vec<u8>, RawRow>, StoreError> {
        let query = format!(
            "SELECT group_name, version, record FROM {} WHERE group_name IN {}",
            self.table(),
            in_list(groups.iter().copied())
        );
        let rows: Vec<Row> = self
            .run("read", move |live| {
                Box::pin(async move { live.conn.query(query).await })
            })
            .await?;
        Ok(rows.into_iter().filter_map(split_row).collect())
    }

    /// One round of writes (no group twice), one request: each request's
    /// outcome, by index into `requests` (`encoded` holds their records).
    async fn write_round(
        &self,
        requests: &[CasRequest],
        encoded: &[Vec<u8>],
        round: &[usize],
    ) -> Result<Vec<(usize, Result<CasOutcome, StoreError>)>, StoreError> {
        let target = self.target().to_owned();
        let plan = RoundPlan::new(self.table(), requests, encoded, round);
        let sql = plan.sql.clone();
        let creations = plan.creations.len();
        let renewing = !plan.renewals.is_empty();
        let answer = self
            .run("compare-and-swap", move |live| {
                Box::pin(async move {
                    let answer = round_trip(live, sql, creations, renewing).await;
                    if answer.is_err() {
                        // Whatever ran is undone; a connection that cannot
                        // even roll back is dropped by the pool.
                        live.conn.query_drop("ROLLBACK").await?;
                    }
                    answer
                })
            })
            .await?;
        Ok(plan
            .resolve(requests, answer)
            .into_iter()
            .map(|(i, outcome)| {
                let group = &requests[i].group;
                let result = match outcome {
                    Outcome::Applied(v) => Ok(CasOutcome::Applied(Version(v))),
                    Outcome::Conflict => Ok(CasOutcome::Conflict),
                    Outcome::Busy => Err(locked_row(group, &target)),
                    Outcome::Altered => Err(StoreError::Misconfigured {
                        message: format!(
                            "MySQL at {target}: the row of group {group} was stored altered (the \
                             server warned: a name or record cut to fit a column?): the lease \
                             table does not have tenure's layout; choose another table with \
                             ?table= or fix it"
                        ),
                        source: None,
                    }),
                    Outcome::NoVersion => Err(StoreError::Unavailable {
                        message: format!(
                            "MySQL at {target}: the write of group {group} applied but the server \
                             reported no version; reading it back"
                        ),
                        source: None,
                    }),
                };
                (i, result)
            })
            .collect())
    }
}

/// What one request of a round came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// Written; the new version.
    Applied(u64),
    /// The write applied, but the server named no version.
    NoVersion,
    /// Not written: another version, or a row (not) there.
    Conflict,
    /// Not written: the row is locked by another session.
    Busy,
    /// A row went in, but not as sent: the table's columns cannot hold
    /// what tenure writes.
    Altered,
}

/// The user variable that carries, from the locking `SELECT` to the
/// `UPDATE` of the same request, the rows this transaction holds at their
/// expected versions (names and new records, hex, as a JSON array).
const LOCKED: &str = "@tenure_locked";

/// `JSON_TABLE` over [`LOCKED`]: its rows `g` (the name, hex) and `r`
/// (the new record, hex).
fn locked_rows() -> String {
    format!(
        "JSON_TABLE(COALESCE({LOCKED}, '[]'), '$[*]' COLUMNS (\
         g VARCHAR(510) CHARACTER SET ascii PATH '$[0]', \
         r LONGTEXT CHARACTER SET ascii PATH '$[1]'))"
    )
}

/// A round's request, and which statement answers which write.
struct RoundPlan {
    sql: String,
    /// Renewals (an expected version): (index into the requests, expected).
    renewals: Vec<(usize, u64)>,
    /// Creations (no expected version), in statement order.
    creations: Vec<usize>,
    /// Expected versions tenure never writes: conflicts without a statement.
    impossible: Vec<usize>,
}

/// What the request's statements answered.
#[derive(Debug, Default)]
struct Answer {
    /// Each creation's `INSERT`: (applied, the version it reported, its
    /// warnings).
    inserted: Vec<(bool, Option<u64>, u16)>,
    /// The names whose renewal the `UPDATE` wrote.
    renewed: HashSet<Vec<u8>>,
    /// Every renewed group's row as the transaction sees it at the end.
    versions: HashMap<Vec<u8>, Option<u64>>,
}

impl RoundPlan {
    /// The round's one request, a transaction:
    ///
    /// 1. `SELECT … INTO @tenure_locked FROM (SELECT … UNION ALL …) AS v
    ///    STRAIGHT_JOIN t … ON name and expected version FOR UPDATE SKIP
    ///    LOCKED`: locks the renewals' rows that are at their expected
    ///    versions and not held by another session, and keeps their names
    ///    and new records in a session variable (the derived table is read
    ///    first and the rows found by primary key: no other row is touched,
    ///    so none held elsewhere is waited for);
    /// 2. an `INSERT IGNORE … SELECT … WHERE NOT EXISTS` per creation (a
    ///    row already there, even one held by another session, is not
    ///    waited for: its committed version is read without a lock), each
    ///    answered by its own affected-row count and `LAST_INSERT_ID`;
    /// 3. one `UPDATE` of exactly the rows locked in 1, by primary key;
    /// 4. the names it renewed, and the renewed groups' versions as the
    ///    transaction now sees them (a group not renewed whose row is
    ///    still at the expected version was held by another session:
    ///    busy; otherwise a conflict);
    /// 5. `COMMIT`.
    fn new(table: &str, requests: &[CasRequest], encoded: &[Vec<u8>], round: &[usize]) -> Self {
        let mut renewals = Vec::new();
        let mut creations = Vec::new();
        let mut impossible = Vec::new();
        for &i in round {
            match requests[i].expected {
                Some(v) if v.0 > MAX_VERSION => impossible.push(i),
                Some(v) => renewals.push((i, v.0)),
                None => creations.push(i),
            }
        }
        let size: usize = round
            .iter()
            .map(|&i| requests[i].group.as_str().len() * 6 + encoded[i].len() * 2 + 120)
            .sum();
        let mut sql = String::with_capacity(size + 1024);
        sql.push_str("START TRANSACTION;\n");
        if !renewals.is_empty() {
            sql.push_str("SELECT JSON_ARRAYAGG(JSON_ARRAY(HEX(t.group_name), HEX(v.r))) INTO ");
            sql.push_str(LOCKED);
            sql.push_str(" FROM (");
            for (n, &(i, expected)) in renewals.iter().enumerate() {
                sql.push_str(if n == 0 {
                    "SELECT "
                } else {
                    " UNION ALL SELECT "
                });
                sql::push_hex(&mut sql, requests[i].group.as_str().as_bytes());
                sql.push_str(if n == 0 { " AS g, " } else { ", " });
                sql.push_str(&expected.to_string());
                sql.push_str(if n == 0 { " AS e, " } else { ", " });
                sql::push_hex(&mut sql, &encoded[i]);
                if n == 0 {
                    sql.push_str(" AS r");
                }
            }
            sql.push_str(") AS v STRAIGHT_JOIN ");
            sql.push_str(table);
            sql.push_str(
                " AS t FORCE INDEX (PRIMARY) ON t.group_name = v.g AND t.version = v.e \
                 FOR UPDATE SKIP LOCKED;\n",
            );
        }
        for &i in &creations {
            let name = requests[i].group.as_str().as_bytes();
            sql.push_str("INSERT IGNORE INTO ");
            sql.push_str(table);
            sql.push_str(" (group_name, version, record) SELECT ");
            sql::push_hex(&mut sql, name);
            sql.push_str(", LAST_INSERT_ID(");
            sql.push_str(sql::CLOCK);
            sql.push_str("), ");
            sql::push_hex(&mut sql, &encoded[i]);
            sql.push_str(" FROM DUAL WHERE NOT EXISTS (SELECT 1 FROM ");
            sql.push_str(table);
            sql.push_str(" WHERE group_name = ");
            sql::push_hex(&mut sql, name);
            sql.push_str(");\n");
        }
        if !renewals.is_empty() {
            let locked = locked_rows();
            sql.push_str(&format!(
                "UPDATE {locked} AS l STRAIGHT_JOIN {table} AS t FORCE INDEX (PRIMARY) \
                 ON t.group_name = UNHEX(l.g) \
                 SET t.version = GREATEST(t.version + 1, {}), t.record = UNHEX(l.r);\n\
                 SELECT UNHEX(l.g) FROM {locked} AS l;\n\
                 SELECT group_name, version FROM {table} WHERE group_name IN ",
                sql::CLOCK
            ));
            sql.push_str(&in_list(
                renewals.iter().map(|&(i, _)| requests[i].group.as_str()),
            ));
            sql.push_str(";\n");
        }
        sql.push_str("COMMIT");
        RoundPlan {
            sql,
            renewals,
            creations,
            impossible,
        }
    }

    /// Each write's outcome from the request's answer.
    fn resolve(&self, requests: &[CasRequest], answer: Answer) -> Vec<(usize, Outcome)> {
        let mut out =
            Vec::with_capacity(self.renewals.len() + self.creations.len() + self.impossible.len());
        out.extend(self.impossible.iter().map(|&i| (i, Outcome::Conflict)));
        for (&i, &(applied, version, warnings)) in self.creations.iter().zip(&answer.inserted) {
            out.push((
                i,
                match (applied, version) {
                    // `IGNORE` turned an error into a warning: the row went
                    // in altered (a name cut to a narrower column, say).
                    (true, _) if warnings > 0 => Outcome::Altered,
                    (true, Some(v)) if v > 0 => Outcome::Applied(v),
                    (true, _) => Outcome::NoVersion,
                    (false, _) => Outcome::Conflict,
                },
            ));
        }
        for &(i, expected) in &self.renewals {
            let name = requests[i].group.as_str().as_bytes();
            let now = answer.versions.get(name).copied().flatten();
            let outcome = if answer.renewed.contains(name) {
                match now {
                    Some(v) if v > expected => Outcome::Applied(v),
                    _ => Outcome::NoVersion,
                }
            } else if now == Some(expected) {
                // At the expected version, yet not locked here: another
                // session held it.
                Outcome::Busy
            } else {
                Outcome::Conflict
            };
            out.push((i, outcome));
        }
        out
    }
}

/// Sends a round's request on `live` and reads its answer: `creations`
/// `INSERT`s, and if `renewing`, the renewals' statements.
async fn round_trip(
    live: &mut Live,
    sql: String,
    creations: usize,
    renewing: bool,
) -> Result<Answer, mysql_async::Error> {
    let mut answer = Answer::default();
    let mut r = live.conn.query_iter(sql).await?;
    // START TRANSACTION.
    let _: Vec<Row> = r.collect().await?;
    if renewing {
        // The locking SELECT … INTO.
        let _: Vec<Row> = r.collect().await?;
    }
    for _ in 0..creations {
        let applied = r.affected_rows() == 1;
        let id = r.last_insert_id();
        let warnings = r.warnings();
        let _: Vec<Row> = r.collect().await?;
        answer.inserted.push((applied, id, warnings));
    }
    if renewing {
        // The UPDATE, the names it renewed, the versions.
        let _: Vec<Row> = r.collect().await?;
        let renewed: Vec<Row> = r.collect().await?;
        answer.renewed = renewed
            .into_iter()
            .filter_map(|row| as_bytes(sql::values(row).into_iter().next().flatten()))
            .collect();
        let rows: Vec<Row> = r.collect().await?;
        answer.versions = rows
            .into_iter()
            .filter_map(|row| {
                let mut v = sql::values(row);
                let name = as_bytes(v.get_mut(0).and_then(Option::take))?;
                Some((name, as_u64(v.get(1).and_then(Option::as_ref))))
            })
            .collect();
    }
    // COMMIT.
    let _: Vec<Row> = r.collect().await?;
    drop(r);
    Ok(answer)
}

/// The error of a write whose row another session held locked.
fn locked_row(group: &GroupName, target: &str) -> StoreError {
    StoreError::busy(format!(
        "MySQL at {target}: the lease row of group {group} is locked by another session \
         (an open transaction? look in information_schema.innodb_trx and end it)"
    ))
}

/// A row of `group_name, version, record`, keyed by name.
fn split_row(row: Row) -> Option<(Vec<u8>, RawRow)> {
    let mut v = sql::values(row);
    let record = as_bytes(v.get_mut(2).and_then(Option::take));
    let version = as_u64(v.get(1).and_then(Option::as_ref));
    let name = as_bytes(v.get_mut(0).and_then(Option::take))?;
    Some((name, (version, record)))
}

/// A row's record, or why it cannot be used.
pub(crate) fn decode(group: &GroupName, row: &RawRow) -> Result<Versioned, StoreError> {
    let corrupt = |source| StoreError::Record {
        group: group.clone(),
        source,
    };
    let (version, record) = row;
    let Some(version) = version.filter(|v| *v <= MAX_VERSION) else {
        return Err(corrupt(RecordError::Corrupt {
            detail: format!(
                "its version column holds {}, outside the 0 to 2^63 - 2 that tenure writes",
                version.map_or_else(|| "no unsigned number".to_owned(), |v| v.to_string())
            ),
        }));
    };
    let Some(bytes) = record else {
        return Err(corrupt(RecordError::Corrupt {
            detail: "its record column holds no bytes".into(),
        }));
    };
    let record = LeaseRecord::decode(bytes).map_err(corrupt)?;
    Ok(Versioned {
        record,
        version: Version(version),
    })
}

#[async_trait]
impl LeaseView for MysqlStore {
    async fn read(&self, group: &GroupName) -> Result<Option<Versioned>, StoreError> {
        tenure::store::read_as_batch(self, group).await
    }

    /// One `SELECT … WHERE group_name IN (…)` per 4096 distinct groups.
    async fn read_many(&self, groups: &[GroupName]) -> BatchResult<Option<Versioned>> {
        let mut distinct: Vec<&str> = groups.iter().map(GroupName::as_str).collect();
        distinct.sort_unstable();
        distinct.dedup();
        let mut found = HashMap::with_capacity(distinct.len());
        for chunk in distinct.chunks(MAX_ROWS) {
            found.extend(self.read_rows(chunk).await?);
        }
        Ok(groups
            .iter()
            .map(|g| match found.get(g.as_str().as_bytes()) {
                None => Ok(None),
                Some(row) => decode(g, row).map(Some),
            })
            .collect())
    }

    /// A connection of its own polls the group's version every `poll`.
    async fn changes(&self, group: &GroupName) -> Result<Option<ChangeFeed>, StoreError> {
        feed::subscribe(&self.inner.options, group).await.map(Some)
    }

    /// A connection of its own reads, every `poll`, every row whose
    /// version rose since the last poll, in one statement (see
    /// [the crate docs](crate#change-feed)).
    async fn watch(&self) -> Result<Option<StoreFeed>, StoreError> {
        feed::watch(&self.inner.options).await.map(Some)
    }

    /// One statement: every row whose group name starts with `prefix`
    /// (compared byte for byte).
    async fn list(&self, prefix: &str) -> Result<Vec<Listed>, StoreError> {
        let query = format!(
            "SELECT group_name, version, record FROM {} WHERE LEFT(group_name, ?) = ?",
            self.table()
        );
        let prefix = prefix.as_bytes().to_vec();
        let rows: Vec<Row> = self
            .run("list", move |live| {
                Box::pin(async move {
                    let len = prefix.len() as u64;
                    live.conn.exec(query, (len, prefix)).await
                })
            })
            .await?;
        let mut out = Vec::with_capacity(rows.len());
        for (name, row) in rows.into_iter().filter_map(split_row) {
            // A name tenure would refuse was written by hand: skip it.
            let Some(group) = String::from_utf8(name)
                .ok()
                .and_then(|n| GroupName::new(n).ok())
            else {
                continue;
            };
            let record = decode(&group, &row);
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
        // One transaction's worth.
        Running::new(MAX_ROWS, &self.inner.engine)
    }
}

#[async_trait]
impl LeaseStore for MysqlStore {
    /// One prepared statement: `UPDATE … WHERE group_name = ? AND version =
    /// ?`, whose matched-row count decides (the connection counts matched
    /// rows, and every write changes the version anyway), or an `INSERT`
    /// that a duplicate key loses. It waits for a row another session
    /// holds up to `innodb_lock_wait_timeout`, then fails as busy.
    async fn compare_and_swap(
        &self,
        group: &GroupName,
        expected: Option<Version>,
        record: &LeaseRecord,
    ) -> Result<CasOutcome, StoreError> {
        if expected.is_some_and(|v| v.0 > MAX_VERSION) {
            // Never issued here: nothing to write.
            return Ok(CasOutcome::Conflict);
        }
        let table = self.table().to_owned();
        let name = group.as_str().as_bytes().to_vec();
        let encoded = record.encode();
        let outcome = self
            .run("compare-and-swap", move |live| {
                Box::pin(async move {
                    let r = match expected {
                        Some(v) => {
                            let q = format!(
                                "UPDATE {table} SET version = {}, record = ? WHERE group_name = ? AND version = ?",
                                sql::next_version()
                            );
                            live.conn.exec_drop(q, (encoded, name, v.0)).await
                        }
                        None => {
                            let q = format!(
                                "INSERT INTO {table} (group_name, version, record) VALUES (?, LAST_INSERT_ID({}), ?)",
                                sql::CLOCK
                            );
                            live.conn.exec_drop(q, (name, encoded)).await
                        }
                    };
                    match r {
                        Ok(()) => Ok(Some((live.conn.affected_rows(), live.conn.last_insert_id()))),
                        Err(e) if expected.is_none() && server_code(&e) == Some(code::DUP_ENTRY) => {
                            Ok(None)
                        }
                        Err(e) => Err(e),
                    }
                })
            })
            .await?;
        match outcome {
            None | Some((0, _)) => Ok(CasOutcome::Conflict),
            Some((_, Some(v))) if v > 0 => Ok(CasOutcome::Applied(Version(v))),
            Some(_) => Err(StoreError::Unavailable {
                message: format!(
                    "MySQL at {}: the write of group {group} applied but the server reported no version",
                    self.target()
                ),
                source: None,
            }),
        }
    }

    /// One transaction in one round trip for a batch in which no group
    /// repeats: a multi-statement request ending in `COMMIT` (see
    /// `RoundPlan::new`). A `SELECT … FOR UPDATE SKIP LOCKED` locks the
    /// renewals' rows that are at their expected versions, skipping any
    /// another session holds (that group's write fails alone, at once, as
    /// [`StoreError::Busy`]) and keeping the rows it locked in a session
    /// variable; an `INSERT IGNORE … WHERE NOT EXISTS` per new row is
    /// answered by its own affected-row count and version; one `UPDATE`
    /// writes exactly the locked rows, by primary key, and their new
    /// versions are read back in the same transaction. The n-th write of a
    /// group goes in the n-th of successive transactions, and a batch of
    /// more than 4096 groups is cut into transactions of 4096 (or of
    /// 4 MiB of SQL). If a transaction fails, its requests and every later
    /// one fail with its error; earlier ones' outcomes stand.
    async fn compare_and_swap_many(&self, requests: &[CasRequest]) -> BatchResult<CasOutcome> {
        let mut out: Vec<Option<Result<CasOutcome, StoreError>>> =
            (0..requests.len()).map(|_| None).collect();
        let mut failed: Option<StoreError> = None;
        let encoded: Vec<Vec<u8>> = requests.iter().map(|r| r.record.encode()).collect();
        for round in rounds(requests, &encoded) {
            if let Some(e) = &failed {
                for i in round {
                    out[i] = Some(Err(e.copy_for_batch()));
                }
                continue;
            }
            match self.write_round(requests, &encoded, &round).await {
                Ok(results) => {
                    for (i, r) in results {
                        out[i] = Some(r);
                    }
                }
                Err(e) if out.iter().all(Option::is_none) => return Err(e),
                Err(e) => {
                    for &i in &round {
                        out[i] = Some(Err(e.copy_for_batch()));
                    }
                    failed = Some(e);
                }
            }
        }
        Ok(out
            .into_iter()
            .map(|r| r.unwrap_or(Ok(CasOutcome::Conflict)))
            .collect())
    }
}

/// The transactions a batch of writes runs, in order: each a list of
/// indexes into the requests, no group twice in one, at most [`MAX_ROWS`]
/// and about [`MAX_REQUEST_BYTES`] of SQL each, in name order (one lock
/// order for every process).
pub(crate) fn rounds(requests: &[CasRequest], encoded: &[Vec<u8>]) -> Vec<Vec<usize>> {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut rounds: Vec<Vec<usize>> = Vec::new();
    for (i, r) in requests.iter().enumerate() {
        let n = seen.entry(r.group.as_str()).or_insert(0);
        if rounds.len() <= *n {
            rounds.push(Vec::new());
        }
        rounds[*n].push(i);
        *n += 1;
    }
    let mut out = Vec::new();
    for mut round in rounds {
        round.sort_by(|a, b| requests[*a].group.cmp(&requests[*b].group));
        let mut current = Vec::new();
        let mut bytes = 0;
        for i in round {
            // Hex doubles the record (and the server's copy of it in the
            // request's session variable); the statements around it are small.
            let size = encoded[i].len() * 2 + requests[i].group.as_str().len() * 6 + 200;
            if !current.is_empty()
                && (current.len() >= MAX_ROWS || bytes + size > MAX_REQUEST_BYTES)
            {
                out.push(std::mem::take(&mut current));
                bytes = 0;
            }
            bytes += size;
            current.push(i);
        }
        if !current.is_empty() {
            out.push(current);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(group: &str) -> CasRequest {
        CasRequest {
            group: GroupName::new(group).unwrap(),
            expected: Some(Version(1)),
            record: LeaseRecord {
                holder: None,
                token: 1,
                term: std::time::Duration::ZERO,
                renewed_at: tenure::WallTime::from_millis(0),
                expires_at: tenure::WallTime::from_millis(0),
                metadata: tenure::Metadata::new(),
            },
        }
    }

    #[test]
    fn repeats_of_a_group_go_to_later_rounds_in_order() {
        let rs: Vec<CasRequest> = ["b", "a", "b", "c", "b", "a"]
            .into_iter()
            .map(req)
            .collect();
        let enc = |rs: &[CasRequest]| rs.iter().map(|r| r.record.encode()).collect::<Vec<_>>();
        assert_eq!(
            rounds(&rs, &enc(&rs)),
            vec![vec![1, 0, 3], vec![5, 2], vec![4]]
        );
        assert!(rounds(&[], &[]).is_empty());
        let many: Vec<CasRequest> = (0..=MAX_ROWS * 2)
            .map(|i| req(&format!("g{i:05}")))
            .collect();
        assert_eq!(
            rounds(&many, &enc(&many))
                .iter()
                .map(Vec::len)
                .collect::<Vec<_>>(),
            vec![MAX_ROWS, MAX_ROWS, 1]
        );
    }

    #[test]
    fn versions_tenure_never_writes_are_corrupt_records() {
        let g = GroupName::new("g").unwrap();
        let rec = req("g").record.encode();
        assert!(decode(&g, &(Some(5), Some(rec.clone()))).is_ok());
        for bad in [None, Some(MAX_VERSION + 1), Some(u64::MAX)] {
            assert!(matches!(
                decode(&g, &(bad, Some(rec.clone()))),
                Err(StoreError::Record { .. })
            ));
        }
        assert!(matches!(
            decode(&g, &(Some(5), None)),
            Err(StoreError::Record { .. })
        ));
        assert!(matches!(
            decode(&g, &(Some(5), Some(b"\xff".to_vec()))),
            Err(StoreError::Record { .. })
        ));
    }
}
