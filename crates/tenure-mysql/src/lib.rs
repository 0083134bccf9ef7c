//! A MySQL and MariaDB lease store for [tenure]: one row per group,
//! compare-and-swap by a conditional `UPDATE … WHERE group_name = ? AND
//! version = ?` decided by its matched-row count (or an `INSERT` that a
//! duplicate key loses, for a group's first write), many groups' renewals
//! in one transaction, and a change feed that polls one indexed column.
//!
//! # Supported servers
//!
//! MariaDB 10.6 and later (tested in CI: Debian's MariaDB 10.11) and
//! MySQL 8.0.14 and later: the statements use only what both accept
//! (`FOR UPDATE SKIP LOCKED`, `LAST_INSERT_ID(expr)`, `UNIX_TIMESTAMP(NOW(6))`,
//! `GREATEST`, `INSERT IGNORE`, `JSON_ARRAYAGG`, `JSON_TABLE`,
//! `STRAIGHT_JOIN`, `FORCE INDEX`, user variables, multi-statement
//! requests). Each session sets `group_concat_max_len` to 64 MiB, above
//! what a batch keeps in its session variable (MariaDB cuts
//! `JSON_ARRAYAGG` at it). Where the two
//! differ the store asks the server which it is (`SELECT VERSION()`) and
//! sets the statement bound each has (see [Timeouts](#timeouts)); the
//! isolation level is set with `SET SESSION TRANSACTION ISOLATION LEVEL`,
//! which both take (MariaDB 10.11 has no `transaction_isolation`
//! variable, MySQL 8 no `tx_isolation`). CI runs MariaDB only (Debian
//! packages no MySQL server): the MySQL 8 path (its `max_execution_time`,
//! its `innodb_lock_wait_timeout` floor of 1 s) is written to MySQL 8.0's
//! documented syntax but has not been run here. What speaks their protocol
//! (Aurora MySQL, TiDB, Vitess, PlanetScale) is expected to work where it
//! offers the same statements, but is not tested either.
//!
//! # Client
//!
//! [`mysql_async`] (maintained, made for tokio), chosen over `sqlx`'s MySQL
//! driver because the store needs, from the client: prepared statements
//! (both have them); multi-statement requests whose every statement's
//! affected-row count and `LAST_INSERT_ID` can be read one by one (the
//! batch's per-group outcomes: `mysql_async`'s `query_iter` walks the
//! result sets, `sqlx` has no per-statement OK packets for a text
//! request); the `CLIENT_FOUND_ROWS` flag as a plain option (`sqlx` sets
//! it, but not as something a store can rely on being documented); TLS
//! with rustls and ring, without OpenSSL or native-tls (both; for
//! `mysql_async` the `default-rustls-ring` feature, with flate2's Rust
//! backend, so the crate builds no C); and connection handling the store
//! controls itself (the store keeps its own small pool, as
//! `tenure-postgres` does, to drop a connection whose operation was
//! abandoned). `sqlx` 0.9 also needs Rust 1.94, above this workspace's
//! 1.85.
//!
//! # Schema
//!
//! In the table named by `?table=` (default `tenure_leases`) in the URL's
//! database, created on first use if it is missing:
//!
//! ```sql
//! CREATE TABLE IF NOT EXISTS tenure_leases (
//!     group_name VARBINARY(255)  NOT NULL,  -- the group, as UTF-8 bytes (compared byte for byte)
//!     version    BIGINT UNSIGNED NOT NULL,  -- the store's version, and the change counter (see below)
//!     record     LONGBLOB        NOT NULL,  -- tenure::LeaseRecord::encode()
//!     PRIMARY KEY (group_name),
//!     KEY tenure_version (version)
//! ) ENGINE = InnoDB;
//! ```
//!
//! A user who may not create the table gets
//! [`MysqlStoreError::MissingTable`], carrying this statement, from
//! [`MysqlStore::connect`]. Rows are never deleted: a released lease is a
//! record without a holder, so the fencing token keeps rising across
//! hand-overs.
//!
//! A row's first version is the server's clock in microseconds (UTC), and
//! each write sets `GREATEST(version + 1, clock)`: a version is never
//! issued twice, not even after the row was deleted, a backup was
//! restored or a replica took over, as long as the server's clock does not
//! go back, so a compare-and-swap delayed from before such an event never
//! applies to a record written after it. The versions tenure writes stay
//! below 2^63 (a `BIGINT UNSIGNED` holds them; one above 2^63 − 2 was put
//! there by hand and reads as a corrupt record, and an expected version
//! above it conflicts without a statement).
//!
//! # Compare-and-swap
//!
//! Every connection is opened with `CLIENT_FOUND_ROWS`, so an `UPDATE`
//! reports the rows it *matched*; and every write changes the version, so
//! matched and changed rows are the same anyway: a no-op can never pass
//! for a conflict. A single compare-and-swap is one prepared statement,
//! `UPDATE … SET version = LAST_INSERT_ID(GREATEST(version + 1, clock)),
//! record = ? WHERE group_name = ? AND version = ?` (the server reports the
//! new version in the reply, with no read after it), or `INSERT`, whose
//! duplicate-key error is the conflict. A reply that never comes leaves
//! the outcome unknown ([`StoreError::Timeout`](tenure::StoreError::Timeout)
//! or `Unavailable`), which the elector resolves by a read, as on every
//! store.
//!
//! Every connection sets its own session, whatever the server's defaults:
//! `READ COMMITTED`, `sql_mode = 'STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION'`
//! (so neither a permissive mode nor `ANSI_QUOTES`,
//! `NO_BACKSLASH_ESCAPES` or `PIPES_AS_CONCAT` changes what a statement
//! means), and `time_zone = '+00:00'`. The tests run the compare-and-swap
//! cases with the server's global mode strict and permissive, and its
//! isolation `SERIALIZABLE` and `READ UNCOMMITTED`.
//!
//! # Many groups
//!
//! Electors built from clones of one [`MysqlStore`] share one
//! [`tenure::Engine`], which batches the operations of every group:
//!
//! * a batch of reads is one `SELECT … WHERE group_name IN (…)`;
//! * a batch of compare-and-swaps is one transaction in one round trip:
//!   one multi-statement request ending in `COMMIT`. Its first statement,
//!   `SELECT JSON_ARRAYAGG(…) INTO @tenure_locked FROM (SELECT … UNION ALL
//!   …) AS v STRAIGHT_JOIN t FORCE INDEX (PRIMARY) ON name and expected
//!   version FOR UPDATE SKIP LOCKED`, locks the renewals' rows that are at
//!   their expected versions and keeps them (names and new records) in a
//!   session variable; then an `INSERT IGNORE … SELECT … WHERE NOT EXISTS`
//!   per new row, answered by its own affected-row count and version (and
//!   its warnings: a row `IGNORE` let in cut to fit a narrower column is
//!   reported as a misconfigured table, never as applied); one
//!   `UPDATE JSON_TABLE(@tenure_locked …) STRAIGHT_JOIN t FORCE INDEX
//!   (PRIMARY)` that writes exactly the rows locked; and the names it
//!   renewed and their new versions, read back in the same transaction.
//!   Each group's outcome is its own. The derived table is read first and
//!   each row found by primary key, so no row outside the batch is
//!   touched. A row another session holds (an operator's open
//!   transaction) is skipped: that group's write fails alone, at once, as
//!   [`StoreError::Busy`](tenure::StoreError::Busy) (if its committed
//!   version is still the expected one; otherwise it conflicts), and the
//!   rest apply. A new row's `INSERT` reads whether the row exists
//!   without a lock, so a row there, held or not, is a conflict with no
//!   wait. (A row another session is *inserting*, in a transaction still
//!   open, is the exception: the `INSERT` waits for it up to
//!   `innodb_lock_wait_timeout`, and the batch then fails as busy as a
//!   whole. Only a hand-made insert of a group's row causes that, or an
//!   operator's transaction at `REPEATABLE READ` that locked lease rows by
//!   a search which also locked the gaps beside them: a new group whose
//!   name falls in such a gap waits the same way.) Every
//!   value in these requests is a hexadecimal literal or a number the store
//!   formatted. Two writes of one group in one batch run in successive
//!   transactions, in order;
//! * batches run side by side on a small pool of connections (`?pool=`, 4
//!   by default, opened as needed), so connections do not grow with the
//!   number of groups.
//!
//! # Change feed
//!
//! MySQL has no `LISTEN`. The `version` column doubles as the table's
//! change counter (the server's clock at each write, indexed): one
//! connection per store handle runs, every `?poll=` (250 ms by default),
//! one statement for every row written since the last poll, with its
//! record, so followers in another process learn of every renewal and
//! release without a read, and a candidate acts on a release as on any
//! feed record, as a hint it confirms by its own read. A follower costs no
//! query per group: the poll is one statement whatever the number of
//! groups. A version is read at the start of its statement and becomes
//! visible at its commit, so about once a second a poll also looks back
//! 3 s for rows committed late (names and versions only; the records of
//! those it had not seen are read in one more statement); a row committed
//! later still is found by the engine's own polls. A graceful hand-over between
//! processes thus takes up to one `poll` more than on a store that
//! notifies (see `docs/benchmarks.md`). An [`Observer`](tenure::Observer)'s
//! feed polls its one group's version the same way.
//!
//! # Privileges
//!
//! The user needs exactly `SELECT, INSERT, UPDATE` on the table, never
//! `DELETE`. Only when the table does not exist yet does connecting create
//! it, which needs `CREATE`: let an administrator create it once (the
//! statement above, or connect once as a user who may), then
//!
//! ```sql
//! CREATE USER 'app'@'%' IDENTIFIED BY '…';
//! GRANT SELECT, INSERT, UPDATE ON app.tenure_leases TO 'app'@'%';
//! ```
//!
//! # Timeouts
//!
//! `?timeout=` (default 5 s) bounds connecting and the wait for each
//! reply. On the server every session gets `innodb_lock_wait_timeout` at
//! half of it in whole seconds (at least 1 s on MySQL, whose least it is;
//! on MariaDB below a 2 s timeout, 0: no wait), and a statement time of
//! three quarters of it: MariaDB's `max_statement_time`, which bounds every
//! statement, or MySQL's `max_execution_time`, which bounds `SELECT`s
//! only (MySQL's writes are bounded by the lock wait and by the client,
//! which drops the connection at the timeout, rolling back whatever it had
//! open). So an operator's open transaction holding a lease row makes a
//! single compare-and-swap fail as busy after the lock wait, with an error
//! saying so, instead of stalling. `wait_timeout` is four times the
//! timeout, at least a minute, so that the locks of a client cut off in
//! the middle of a batch's transaction are freed soon after; the store
//! replaces a connection idle for half of that before using it. A
//! connection whose operation failed other than by a server error, timed
//! out or was abandoned by the elector is dropped and a new one opened by
//! the next operation.
//!
//! # What breaks fencing on MySQL
//!
//! As on PostgreSQL: deleting a row (the group starts over at token 1,
//! and a candidate takes the lease at once while the old leader's term
//! runs: two leaders for up to one term; release with `tenure release`,
//! never delete); restoring a backup or point-in-time recovery (older
//! records with lower tokens); fail-over to an asynchronous replica that
//! missed the latest writes (the same, a moment ago); and an old primary
//! left running after a replica's promotion. After any of these, stop
//! every candidate of the affected groups and start them again no sooner
//! than one term later. Semi-synchronous replication narrows the window
//! but does not close it (a primary whose wait for a replica times out
//! commits anyway).
//!
//! # Fencing a table
//!
//! To make a MySQL table refuse a leader whose term has ended, give its
//! rows a `fence_token` column and write with `WHERE fence_token <= ?`,
//! or install the trigger in [`fence`]. `examples/fencing_mysql.rs` shows a
//! stale leader refused both ways, and `docs/fencing.md` in the repository
//! explains the recipes.
//!
//! # Connecting
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use tenure_mysql::MysqlStore;
//! let store = MysqlStore::connect(
//!     "mysql://app:secret@db.internal:3306/app?tls=true&ca=/etc/ssl/db-ca.pem",
//! )
//! .await?;
//! let elector = tenure::Elector::builder(store, "nightly-billing").start()?;
//! # let _ = elector; Ok(()) }
//! ```
//!
//! Passwords never appear in logs, errors or
//! [`MysqlStore::describe`](tenure::LeaseView::describe).

mod conn;
mod error;
mod feed;
pub mod fence;
mod options;
mod schema;
mod sql;
mod store;

pub use error::MysqlStoreError;
pub use options::{MysqlOptions, DEFAULT_POLL, DEFAULT_TIMEOUT};
pub use store::MysqlStore;
