//! The statements the operations run: a read of many groups by
//! `= ANY($1)`, a compare-and-swap of many groups in one statement over
//! `unnest`ed arrays, which notifies for every row it wrote and does not
//! wait for an existing row's lock (a locked row fails alone, as busy;
//! only a row another transaction is still inserting is waited for), and
//! the same
//! compare-and-swap of one group as a plain `UPDATE … WHERE version = $2`
//! or `INSERT … ON CONFLICT DO NOTHING` (a direct single write, which
//! waits for a row lock up to `lock_timeout`).
//!
//! `UPDATE … FROM` with two source rows for one target row is undefined in
//! PostgreSQL (either may win), so one statement never holds two writes of
//! one group: a batch is cut into rounds, the n-th write of each group in
//! the n-th round, and the rounds run one after another. Each group's writes
//! thus apply in request order, and a batch without repeats (the engine's
//! usual batch) is one statement.

use std::collections::HashMap;

use tenure::store::CasRequest;
use tenure::StoreError;
use tokio_postgres::{Client, Statement};

use crate::{error, payload};

/// Most groups in one statement: a batch larger than this (only a direct
/// caller sends one; the engine's are smaller) becomes several statements,
/// so none runs into `statement_timeout`.
pub(crate) const MAX_ROWS: usize = 4096;

/// A version no earlier write can have had: the server's clock in
/// microseconds, or one more than the row's version if that is higher.
/// Versions of a row rise by at least one per write, so a row deleted and
/// created again, or brought back by a restore or a fail-over, gets versions
/// above every version issued before (as long as the server's clock does
/// not go back): a delayed compare-and-swap from before can never match.
const CLOCK_VERSION: &str = "(extract(epoch from clock_timestamp()) * 1000000)::bigint";

/// The statements, prepared on each connection.
pub(crate) struct Statements {
    pub(crate) read: Statement,
    pub(crate) write: Statement,
    /// One group's write expected at a version: `$1` group, `$2` expected
    /// version, `$3` record, `$4` payload head, `$5` payload record, `$6`
    /// channel; returns the new version if it applied.
    pub(crate) update_one: Statement,
    /// One group's write expected absent: `$1` group, `$2` record, `$3`
    /// payload head, `$4` payload record, `$5` channel; returns the
    /// version if it applied.
    pub(crate) insert_one: Statement,
    /// Every row whose group name starts with `$1` (for sharded sets),
    /// ranging over the index from `$1` on when the server stores UTF-8
    /// (see [`list_sql`]); used when the prefix has no end (see
    /// [`prefix_end`]).
    pub(crate) list_from: Statement,
    /// The same between `$1` and `$2`, the prefix's end: only on a server
    /// that stores UTF-8.
    pub(crate) list_between: Option<Statement>,
}

/// The listing by prefix of `table`: every row whose group name starts with
/// `$1`, compared exactly (`left` and `char_length` count characters
/// alike, and no LIKE wildcards to escape).
///
/// When the server stores UTF-8 (`ranged`), the rows are found by a range
/// of the index on `group_name COLLATE "C"` (see
/// [`crate::schema::index_ddl`]): `"C"` orders by bytes, UTF-8's byte order
/// is code point order, so every name that starts with `$1` lies in
/// `[$1, $2)`, `$2` being [`prefix_end`] (or in `[$1, ∞)` when `bounded`
/// is false), and the exact check drops nothing else. The database's own
/// collation is never used: with one like `en_US` a range of the primary key
/// is not "starts with" (punctuation is ignored at first, `a-c` sorts
/// between `ab` and `ad`). Without the index (a table from before it) the
/// same statement scans the table. A server storing another encoding,
/// whose byte order is not code point order, always scans.
pub(crate) fn list_sql(table: &str, ranged: bool, bounded: bool) -> String {
    let exact = "left(group_name, char_length($1::text)) = $1::text";
    let range = match (ranged, bounded) {
        (false, _) => "",
        (true, false) => "group_name COLLATE \"C\" >= $1::text AND ",
        (true, true) => {
            "group_name COLLATE \"C\" >= $1::text AND group_name COLLATE \"C\" < $2::text AND "
        }
    };
    format!("SELECT group_name, version, record FROM {table} WHERE {range}{exact}")
}

/// The least string above every string that starts with `prefix` in
/// code point (UTF-8 byte) order: the prefix with trailing U+10FFFF dropped
/// and its last character raised by one code point (past the surrogates,
/// which no string holds). `None` if there is none: an empty prefix, or one
/// only of U+10FFFF; every name from the prefix on then starts with it or
/// is dropped by the exact check.
pub(crate) fn prefix_end(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let next = match last {
            '\u{D7FF}' => Some('\u{E000}'),
            c => char::from_u32(u32::from(c) + 1),
        };
        if let Some(next) = next {
            chars.push(next);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

/// Prepares the statements for `table` (already quoted), on a server
/// that stores text as UTF-8 or not (`utf8`).
pub(crate) async fn prepare(
    client: &Client,
    table: &str,
    utf8: bool,
    target: &str,
) -> Result<Statements, StoreError> {
    let read = format!(
        "SELECT group_name, version, record FROM {table} WHERE group_name = ANY($1::text[])"
    );
    // Writes: an UPDATE for rows expected at a version, an INSERT for rows
    // expected absent; pg_notify runs once per row either wrote, so only a
    // write that applied notifies, atomically with it. The payload carries
    // the new version and the record (see `payload`) unless it would not
    // fit, then it is the hint form.
    //
    // The rows to update are locked first, in name order, skipping any that
    // another transaction holds (an operator's open `SELECT … FOR UPDATE`):
    // a row that matches its expected version but could not be locked is
    // returned as busy (a NULL version), so that it fails alone instead of
    // making the whole statement wait for the lock and fail every group in
    // it. New rows are inserted in name order, so that two batches
    // inserting the same new groups cannot deadlock.
    //
    // Every step is linear in the batch, whatever plan the server picks:
    // each row is locked by a lateral lookup of the primary key (a nested
    // loop in every plan), the locked rows carry what the update and the
    // notification need, and a busy row is told by a lookup of its own
    // row, not by comparing the batch's rows with one another. After its
    // fifth run a prepared statement may get a generic plan, which
    // estimates the arrays at 100 rows: the earlier form joined the
    // batch's rows with each other by nested loops there, 2.5 s for 4,096
    // rows instead of 50 ms, past `statement_timeout`, so that every
    // renewal batch from the sixth on a connection failed (PostgreSQL 15).
    let write = format!(
        "WITH r AS (
            SELECT * FROM unnest($1::text[], $2::int8[], $3::bytea[], $4::text[], $5::text[])
                AS r(g, expected, record, head, rec)
        ),
        locked AS (
            SELECT r.g, r.expected, r.record, r.head, r.rec, l.g AS got
            FROM (SELECT * FROM r WHERE r.expected IS NOT NULL ORDER BY r.g) AS r
            LEFT JOIN LATERAL (
                SELECT t.group_name AS g FROM {table} AS t
                WHERE t.group_name = r.g AND t.version = r.expected
                FOR UPDATE OF t SKIP LOCKED
            ) AS l ON true
        ),
        upd AS (
            UPDATE {table} AS t
            SET version = GREATEST(t.version + 1, {CLOCK_VERSION}), record = locked.record, updated_at = now()
            FROM locked
            WHERE locked.got IS NOT NULL AND t.group_name = locked.got AND t.version = locked.expected
            RETURNING t.group_name AS g, t.version AS version, locked.head, locked.rec
        ),
        ins AS (
            INSERT INTO {table} (group_name, version, record)
            SELECT r.g, {CLOCK_VERSION}, r.record FROM r WHERE r.expected IS NULL ORDER BY r.g
            ON CONFLICT (group_name) DO NOTHING
            RETURNING group_name AS g, version
        ),
        w AS (
            SELECT g, version, head, rec FROM upd
            UNION ALL
            SELECT ins.g, ins.version, r.head, r.rec FROM ins JOIN r ON r.g = ins.g
        )
        SELECT w.g, w.version
        FROM w
        CROSS JOIN LATERAL (SELECT pg_notify($6,
            CASE WHEN w.rec IS NOT NULL
                  AND octet_length(w.head) + octet_length(w.rec) + {room} < {limit}
                THEN w.head || w.version || ':' || w.rec
                ELSE w.head
            END)) AS n
        UNION ALL
        SELECT locked.g, NULL::int8 FROM locked
        WHERE locked.got IS NULL
          AND EXISTS (SELECT 1 FROM {table} AS t
                      WHERE t.group_name = locked.g AND t.version = locked.expected)",
        room = payload::VERSION_ROOM,
        limit = payload::LIMIT,
    );
    // The same for one group, without arrays: the same UPDATE and INSERT,
    // and the same notification. Unlike the batch, it waits for a row lock
    // (up to `lock_timeout`, then fails as busy): a direct caller racing
    // another writer of the row learns Applied or Conflict, never busy.
    let update_one = format!(
        "WITH w AS (
            UPDATE {table}
            SET version = GREATEST(version + 1, {CLOCK_VERSION}), record = $3::bytea, updated_at = now()
            WHERE group_name = $1::text AND version = $2::int8
            RETURNING version
        )
        SELECT w.version FROM w CROSS JOIN LATERAL (SELECT {notify}) AS n",
        notify = notify_one("$6", "$4", "$5"),
    );
    let insert_one = format!(
        "WITH w AS (
            INSERT INTO {table} (group_name, version, record)
            VALUES ($1::text, {CLOCK_VERSION}, $2::bytea)
            ON CONFLICT (group_name) DO NOTHING
            RETURNING version
        )
        SELECT w.version FROM w CROSS JOIN LATERAL (SELECT {notify}) AS n",
        notify = notify_one("$5", "$3", "$4"),
    );
    let prepare = |sql: String| async move {
        client
            .prepare(&sql)
            .await
            .map_err(|e| error::classify("preparing statements", target, e))
    };
    Ok(Statements {
        read: prepare(read).await?,
        write: prepare(write).await?,
        update_one: prepare(update_one).await?,
        insert_one: prepare(insert_one).await?,
        list_from: prepare(list_sql(table, utf8, false)).await?,
        list_between: if utf8 {
            Some(prepare(list_sql(table, true, true)).await?)
        } else {
            None
        },
    })
}

/// The `pg_notify` of a single write whose new version is `w.version`,
/// with the channel, payload head and payload record in the parameters
/// named: the batch statement's payload, for one row.
fn notify_one(channel: &str, head: &str, rec: &str) -> String {
    format!(
        "pg_notify({channel}::text,
            CASE WHEN {rec}::text IS NOT NULL
                  AND octet_length({head}::text) + octet_length({rec}::text) + {room} < {limit}
                THEN {head}::text || w.version || ':' || {rec}::text
                ELSE {head}::text
            END)",
        room = payload::VERSION_ROOM,
        limit = payload::LIMIT,
    )
}

/// The statements a batch of writes runs, in order: each a list of indexes
/// into the requests, no group twice in one, at most [`MAX_ROWS`] each.
/// Requests left out (`skip`) are in none.
pub(crate) fn rounds(requests: &[CasRequest], skip: impl Fn(usize) -> bool) -> Vec<Vec<usize>> {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut rounds: Vec<Vec<usize>> = Vec::new();
    for (i, r) in requests.iter().enumerate() {
        if skip(i) {
            continue;
        }
        let n = seen.entry(r.group.as_str()).or_insert(0);
        if rounds.len() <= *n {
            rounds.push(Vec::new());
        }
        rounds[*n].push(i);
        *n += 1;
    }
    let mut statements = Vec::new();
    for mut round in rounds {
        // One lock order for every process: two batches that touch the same
        // rows wait for each other instead of deadlocking.
        round.sort_by(|a, b| requests[*a].group.cmp(&requests[*b].group));
        statements.extend(round.chunks(MAX_ROWS).map(<[usize]>::to_vec));
    }
    statements
}

/// The arrays of one write statement, in parameter order.
pub(crate) struct WriteArgs {
    pub(crate) groups: Vec<String>,
    pub(crate) expected: Vec<Option<i64>>,
    pub(crate) records: Vec<Vec<u8>>,
    pub(crate) heads: Vec<String>,
    pub(crate) recs: Vec<Option<String>>,
}

impl WriteArgs {
    /// The arguments for the requests at `indexes`; versions must already
    /// be known to fit an `i64`.
    pub(crate) fn new(requests: &[CasRequest], indexes: &[usize]) -> WriteArgs {
        let mut a = WriteArgs {
            groups: Vec::with_capacity(indexes.len()),
            expected: Vec::with_capacity(indexes.len()),
            records: Vec::with_capacity(indexes.len()),
            heads: Vec::with_capacity(indexes.len()),
            recs: Vec::with_capacity(indexes.len()),
        };
        for &i in indexes {
            let r = &requests[i];
            let encoded = r.record.encode();
            a.groups.push(r.group.as_str().to_owned());
            a.expected
                .push(r.expected.and_then(|v| i64::try_from(v.0).ok()));
            a.recs.push(payload::record(&encoded));
            a.heads.push(payload::head(&r.group));
            a.records.push(encoded);
        }
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenure::{GroupName, LeaseRecord, Version};

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
        // Round 0 sorted by group: a(1), b(0), c(3); then b(2), a(5); then b(4).
        assert_eq!(
            rounds(&rs, |_| false),
            vec![vec![1, 0, 3], vec![5, 2], vec![4]]
        );
        assert_eq!(rounds(&rs, |i| i == 0), vec![vec![1, 2, 3], vec![5, 4]]);
        assert!(rounds(&[], |_| false).is_empty());
    }

    #[test]
    fn a_prefix_ends_at_its_next_string_in_code_point_order() {
        assert_eq!(prefix_end(""), None);
        assert_eq!(prefix_end("set/members/").as_deref(), Some("set/members0"));
        assert_eq!(prefix_end("a").as_deref(), Some("b"));
        assert_eq!(prefix_end("é").as_deref(), Some("ê"));
        assert_eq!(prefix_end("a\u{7F}").as_deref(), Some("a\u{80}"));
        assert_eq!(prefix_end("a\u{D7FF}").as_deref(), Some("a\u{E000}"));
        assert_eq!(prefix_end("a\u{FFFF}").as_deref(), Some("a\u{10000}"));
        assert_eq!(prefix_end("ab\u{10FFFF}").as_deref(), Some("ac"));
        assert_eq!(prefix_end("\u{10FFFF}\u{10FFFF}"), None);
        // Byte order is code point order: every string that starts with the
        // prefix is in [prefix, end), and no other.
        let names = [
            "",
            "a",
            "a-c",
            "ab",
            "ab\u{10FFFF}",
            "ab\u{10FFFF}x",
            "abc",
            "ac",
            "a\u{E000}",
            "a\u{D7FF}z",
            "b",
            "é",
            "éa",
            "ê",
            "\u{10FFFF}",
            "\u{10FFFF}a",
        ];
        for prefix in names {
            for name in names {
                let in_range = name.as_bytes() >= prefix.as_bytes()
                    && prefix_end(prefix).is_none_or(|end| name.as_bytes() < end.as_bytes());
                if name.starts_with(prefix) {
                    assert!(in_range, "{name:?} starts with {prefix:?}");
                } else if prefix_end(prefix).is_some() {
                    assert!(!in_range, "{name:?} does not start with {prefix:?}");
                }
            }
        }
    }

    #[test]
    fn large_rounds_are_cut_into_statements() {
        let rs: Vec<CasRequest> = (0..=MAX_ROWS * 2)
            .map(|i| req(&format!("g{i:05}")))
            .collect();
        let st = rounds(&rs, |_| false);
        assert_eq!(
            st.iter().map(Vec::len).collect::<Vec<_>>(),
            vec![MAX_ROWS, MAX_ROWS, 1]
        );
    }
}
