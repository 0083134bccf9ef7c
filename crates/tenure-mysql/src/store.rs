//! The store: one row per group, compare-and-swap on the row's version.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use async_trait::async_trait;
use mysql_async::prelude::Queryable;
use mysql_async::Row;
use tenure::{
    BatchResult, CasOutcome, CasRequest, ChangeFeed, EngineSlot, GroupName, LeaseRecord,
    LeaseStore, LeaseView, Listed, RecordError, StoreError, StoreFeed, Version, Versioned,
};

use crate::conn::{self, Live, Op, Pool};
use crate::error::{code, server_code, MysqlStoreError};
use crate::options::MysqlOptions;
use crate::sql::{self, as_bytes, as_u64, hex, in_list, MAX_VERSION};
use crate::{feed, schema};

/// Most groups in one batch transaction; a larger batch (only a direct
/// caller sends one) becomes several.
pub(crate) const MAX_ROWS: usize = 1000;

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

    /// One round of writes (no group twice): each request's outcome, by
    /// index into `requests`.
    async fn write_round(
        &self,
        requests: &[CasRequest],
        round: &[usize],
    ) -> Result<Vec<(usize, Result<CasOutcome, StoreError>)>, StoreError> {
        let table = self.table().to_owned();
        let target = self.target().to_owned();
        let list = in_list(round.iter().map(|&i| requests[i].group.as_str()));
        // The rows this transaction can lock now, skipping any another
        // session holds (they fail alone, as busy, instead of holding up
        // the batch), and every row that exists.
        let first = format!(
            "START TRANSACTION; \
             SELECT group_name, version FROM {table} WHERE group_name IN {list} FOR UPDATE SKIP LOCKED; \
             SELECT group_name FROM {table} WHERE group_name IN {list}"
        );
        let planned: Vec<(usize, Plan)> = Vec::new();
        let round = round.to_vec();
        let reqs: Vec<(GroupName, Option<Version>, Vec<u8>)> = round
            .iter()
            .map(|&i| {
                let r = &requests[i];
                (r.group.clone(), r.expected, r.record.encode())
            })
            .collect();
        let outcome = self
            .run("compare-and-swap", move |live| {
                Box::pin(async move {
                    let answer = transaction(live, &table, &first, &round, &reqs, planned).await;
                    if answer.is_err() {
                        // Whatever ran is undone; a connection that cannot
                        // even roll back is dropped by the pool.
                        live.conn.query_drop("ROLLBACK").await?;
                    }
                    answer
                })
            })
            .await?;
        Ok(outcome
            .into_iter()
            .map(|(i, plan)| {
                let group = &requests[i].group;
                let result = match plan {
                    Plan::Applied(v) => Ok(CasOutcome::Applied(Version(v))),
                    Plan::Conflict => Ok(CasOutcome::Conflict),
                    Plan::Busy => Err(locked_row(group, &target)),
                    Plan::NoVersion => Err(StoreError::Unavailable {
                        message: format!(
                            "MySQL at {target}: the write of group {group} applied but the server \
                             reported no version; reading it back"
                        ),
                        source: None,
                    }),
                    Plan::Update | Plan::Insert => Ok(CasOutcome::Conflict),
                };
                (i, result)
            })
            .collect())
    }
}

/// What one request of a round comes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Plan {
    /// Its row is locked here at the expected version: update it.
    Update,
    /// No row: insert one.
    Insert,
    /// Written; the new version.
    Applied(u64),
    /// The write applied, but the server named no version.
    NoVersion,
    /// Not written: another version, or a row (not) there.
    Conflict,
    /// The row is locked by another session.
    Busy,
}

/// One round's transaction on `live`: lock what can be locked, then one
/// request with a statement per write and the commit. Each request's
/// plan, resolved.
async fn transaction(
    live: &mut Live,
    table: &str,
    first: &str,
    round: &[usize],
    reqs: &[(GroupName, Option<Version>, Vec<u8>)],
    mut planned: Vec<(usize, Plan)>,
) -> Result<Vec<(usize, Plan)>, mysql_async::Error> {
    let mut r = live.conn.query_iter(first).await?;
    let _: Vec<Row> = r.collect().await?;
    let locked: Vec<Row> = r.collect().await?;
    let present: Vec<Row> = r.collect().await?;
    drop(r);
    let locked: HashMap<Vec<u8>, Option<u64>> = locked
        .into_iter()
        .filter_map(|row| {
            let mut v = sql::values(row);
            let name = as_bytes(v.get_mut(0).and_then(Option::take))?;
            Some((name, as_u64(v.get(1).and_then(Option::as_ref))))
        })
        .collect();
    let present: HashSet<Vec<u8>> = present
        .into_iter()
        .filter_map(|row| as_bytes(sql::values(row).into_iter().next().flatten()))
        .collect();
    let mut inserts = Vec::new();
    // The renewals: rows this transaction holds at their expected version.
    let mut derived = String::new();
    let mut updated: Vec<&[u8]> = Vec::new();
    for (k, (group, expected, record)) in reqs.iter().enumerate() {
        let name = group.as_str().as_bytes();
        let plan = match expected {
            Some(v) if v.0 > MAX_VERSION => Plan::Conflict,
            Some(v) => match locked.get(name) {
                Some(Some(found)) if *found == v.0 => Plan::Update,
                Some(_) => Plan::Conflict,
                None if present.contains(name) => Plan::Busy,
                None => Plan::Conflict,
            },
            None if locked.contains_key(name) || present.contains(name) => Plan::Conflict,
            None => Plan::Insert,
        };
        match plan {
            Plan::Update => {
                let v = expected.map_or(0, |v| v.0);
                if derived.is_empty() {
                    derived = format!("SELECT {} AS g, {v} AS e, {} AS r", hex(name), hex(record));
                } else {
                    derived.push_str(&format!(" UNION ALL SELECT {}, {v}, {}", hex(name), hex(record)));
                }
                updated.push(name);
            }
            Plan::Insert => inserts.push(format!(
                "INSERT IGNORE INTO {table} (group_name, version, record) VALUES ({}, LAST_INSERT_ID({}), {})",
                hex(name),
                sql::CLOCK,
                hex(record)
            )),
            _ => {}
        }
        planned.push((round[k], plan));
    }
    // One statement for every renewal: the rows are locked here at the
    // expected versions, so each matches; the versions they got are read
    // back in the same transaction.
    let mut statements = inserts;
    if !updated.is_empty() {
        statements.push(format!(
            "UPDATE {table} AS t JOIN ({derived}) AS v ON t.group_name = v.g AND t.version = v.e \
             SET t.version = GREATEST(t.version + 1, {}), t.record = v.r",
            sql::CLOCK
        ));
        statements.push(format!(
            "SELECT group_name, version FROM {table} WHERE group_name IN {}",
            in_list(
                updated
                    .iter()
                    .map(|n| std::str::from_utf8(n).unwrap_or_default())
            )
        ));
    }
    statements.push("COMMIT".to_owned());
    let mut r = live.conn.query_iter(statements.join(";\n")).await?;
    for (_, plan) in planned
        .iter_mut()
        .filter(|(_, p)| matches!(p, Plan::Insert))
    {
        let applied = r.affected_rows() == 1;
        let id = r.last_insert_id();
        let _: Vec<Row> = r.collect().await?;
        *plan = match (applied, id) {
            (true, Some(v)) if v > 0 => Plan::Applied(v),
            (true, _) => Plan::NoVersion,
            (false, _) => Plan::Conflict,
        };
    }
    if !updated.is_empty() {
        // The UPDATE, then the versions.
        let _: Vec<Row> = r.collect().await?;
        let rows: Vec<Row> = r.collect().await?;
        let now: HashMap<Vec<u8>, Option<u64>> = rows
            .into_iter()
            .filter_map(|row| {
                let mut v = sql::values(row);
                let name = as_bytes(v.get_mut(0).and_then(Option::take))?;
                Some((name, as_u64(v.get(1).and_then(Option::as_ref))))
            })
            .collect();
        for (k, (i, plan)) in planned.iter_mut().enumerate() {
            if *plan != Plan::Update {
                continue;
            }
            debug_assert_eq!(round[k], *i);
            let (group, expected, _) = &reqs[k];
            *plan = match now.get(group.as_str().as_bytes()) {
                Some(Some(v)) if expected.is_some_and(|e| *v > e.0) => Plan::Applied(*v),
                _ => Plan::Conflict,
            };
        }
    }
    // The commit.
    let _: Vec<Row> = r.collect().await?;
    drop(r);
    Ok(planned)
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

    /// One `SELECT … WHERE group_name IN (…)` per 1000 distinct groups.
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

    /// One transaction of two requests for a batch in which no group
    /// repeats: the rows are locked with `FOR UPDATE SKIP LOCKED` (a row
    /// another session holds fails alone, at once, as
    /// [`StoreError::Busy`]), then one multi-statement request ending in
    /// `COMMIT`: an `INSERT IGNORE` per new row, answered by its own
    /// affected-row count, and one `UPDATE` for every row locked at its
    /// expected version, whose new versions are read back in the same
    /// transaction. The n-th write of a group goes in the n-th of
    /// successive transactions, and a batch of more than 1000 groups is cut
    /// into transactions of 1000. If a transaction fails, its requests and
    /// every later one fail with its error; earlier ones' outcomes stand.
    async fn compare_and_swap_many(&self, requests: &[CasRequest]) -> BatchResult<CasOutcome> {
        let mut out: Vec<Option<Result<CasOutcome, StoreError>>> =
            (0..requests.len()).map(|_| None).collect();
        let mut failed: Option<StoreError> = None;
        for round in rounds(requests) {
            if let Some(e) = &failed {
                for i in round {
                    out[i] = Some(Err(e.copy_for_batch()));
                }
                continue;
            }
            match self.write_round(requests, &round).await {
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

    fn engine_slot(&self) -> Option<&EngineSlot> {
        Some(&self.inner.engine)
    }

    /// One transaction's worth.
    fn batch_size_hint(&self) -> usize {
        MAX_ROWS
    }
}

/// The transactions a batch of writes runs, in order: each a list of
/// indexes into the requests, no group twice in one, at most [`MAX_ROWS`]
/// and about [`MAX_REQUEST_BYTES`] of SQL each, in name order (one lock
/// order for every process).
pub(crate) fn rounds(requests: &[CasRequest]) -> Vec<Vec<usize>> {
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
            // Hex doubles the record; the statement around it is small.
            let size =
                requests[i].record.encode().len() * 2 + requests[i].group.as_str().len() * 4 + 200;
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
        assert_eq!(rounds(&rs), vec![vec![1, 0, 3], vec![5, 2], vec![4]]);
        assert!(rounds(&[]).is_empty());
        let many: Vec<CasRequest> = (0..=MAX_ROWS * 2)
            .map(|i| req(&format!("g{i:05}")))
            .collect();
        assert_eq!(
            rounds(&many).iter().map(Vec::len).collect::<Vec<_>>(),
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
