//! A PostgreSQL lease store for [tenure]: one row per group,
//! compare-and-swap by a conditional `UPDATE … WHERE version = $n` (or
//! `INSERT … ON CONFLICT DO NOTHING` for a group's first write), and instant
//! hand-over through LISTEN/NOTIFY.
//!
//! # Schema
//!
//! In the table named by `?table=` (default `tenure_leases`), created on
//! first use if it is missing:
//!
//! ```sql
//! CREATE TABLE tenure_leases (
//!     group_name TEXT PRIMARY KEY,          -- the group
//!     version    BIGINT NOT NULL,           -- the store's version (see below)
//!     record     BYTEA NOT NULL,            -- tenure::LeaseRecord::encode(): holder, token, term, times, metadata
//!     updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
//! );
//! ```
//!
//! Rows are never deleted: a released lease is a record without a holder,
//! so the fencing token keeps rising across hand-overs. Every write that
//! applies runs `pg_notify` in the same statement, on the channel
//! `tenure:<schema>.<table>` as the server resolves the table (so `t` and
//! `public.t` share one channel; names too long for an identifier are
//! hashed), with the group, its new version and its record as the payload
//! (see [Many groups](#many-groups)); a waiting candidate `LISTEN`s on a
//! dedicated connection and takes over at once. No advisory locks are
//! involved: the fencing token lives in the row and changes atomically
//! with it.
//!
//! A row's first version is the server's clock in microseconds, and each
//! write sets `GREATEST(version + 1, clock)`: a version is never issued
//! twice, not even after the row was deleted, a backup was restored or a
//! replica took over, as long as the server's clock does not go back. So a
//! compare-and-swap delayed from before such an event can never apply to
//! a record written after it.
//!
//! # Many groups
//!
//! Electors built from clones of one [`PostgresStore`] share one
//! [`tenure::Engine`], which batches the operations of every group:
//!
//! * a batch of reads is one `SELECT … WHERE group_name = ANY($1)`;
//! * a batch of compare-and-swaps is one statement over `unnest`ed arrays:
//!   an `UPDATE … FROM` for the groups expected at a version and an
//!   `INSERT … ON CONFLICT DO NOTHING` for those expected absent, each row
//!   checked on its own (one group's conflict never undoes another's
//!   write) and notified as it is written. The rows are locked in name
//!   order with `FOR UPDATE SKIP LOCKED`: a row that another session holds
//!   (an operator's open transaction, a long `SELECT … FOR UPDATE`) fails
//!   only its own write, at once, as [`StoreError::Busy`](tenure::StoreError::Busy), instead of
//!   making the statement wait for the lock and fail every group in it.
//!   (A row another session is *inserting*, in a transaction still open,
//!   is the exception: `INSERT … ON CONFLICT` waits for it up to
//!   `lock_timeout`, and the statement then fails as busy as a whole.
//!   Only a hand-made insert of a group's row causes that.) A row whose
//!   version another writer changed while the statement ran may be
//!   reported busy rather than a conflict; both say it was not written.
//!   Two writes of one group in one batch run as successive statements,
//!   in order. A direct single compare-and-swap is the same `UPDATE` or
//!   `INSERT` on one row, without the arrays, and waits for a row lock up
//!   to `lock_timeout` (then it is busy too);
//! * batches run side by side on a small pool of connections (`?pool=`, 4
//!   by default, opened as needed), so connections do not grow with the
//!   number of groups;
//! * one `LISTEN` connection feeds the engine every group's writes. A
//!   notification's payload is
//!   `1:<group length>:<group>:<version>:<record>`, so followers learn of
//!   every renewal without a read; a record too large for the 8000-byte
//!   payload limit (large metadata) is left out, and followers read that
//!   group instead. After the connection is lost, the feed reconnects and
//!   every group is read once (notifications sent meanwhile are gone).
//!
//! Any user of the database may `NOTIFY` on any channel, so payloads are
//! untrusted input. One that does not parse is a hint to read its group,
//! or is dropped if it names none. A record is believed only from a
//! session whose user may `UPDATE` the lease table (looked up by the
//! notification's process id in `pg_stat_activity`, once a minute per
//! session), since only such a user could have written it; anyone else's
//! payload is a hint, and the engine reads the group.
//!
//! # Privileges
//!
//! The user needs exactly `SELECT, INSERT, UPDATE` on the table; `LISTEN`
//! and `pg_notify` need nothing more. Only when the table does not exist
//! yet does connecting create it, which needs `CREATE` on the schema: let
//! an owner create it once (connect as that owner, or run the statement
//! above), then
//!
//! ```sql
//! CREATE ROLE app LOGIN PASSWORD '…';
//! GRANT SELECT, INSERT, UPDATE ON tenure_leases TO app;
//! ```
//!
//! # Timeouts and dead connections
//!
//! `?timeout=` (default 5 s) bounds connecting and the wait for each
//! reply; on the server, `lock_timeout` is half of it and
//! `statement_timeout` three quarters, so an operator's open transaction
//! holding a lease row's lock makes operations fail after half the
//! timeout, with an error saying so, instead of stalling. TCP keepalive and a TCP user timeout find dead peers. A
//! connection whose operation failed, timed out or was abandoned by the
//! elector is dropped (its statement cancelled on the server) and a new one
//! is opened by the next operation; the `LISTEN` connection is pinged every
//! `timeout` and replaced when a ping goes unanswered.
//!
//! # What breaks fencing on PostgreSQL
//!
//! tenure's guarantees rest on the row: its version for compare-and-swap,
//! and the record in it for the fencing token and the holder's term. Four
//! things an operator can do take that away:
//!
//! * **Deleting a row** (`DELETE`, `TRUNCATE`, dropping the table). The
//!   group starts over: the next term gets token 1, which resources that
//!   remember a higher token refuse (or, if they were reset too, accept
//!   again), and a candidate that finds no row takes the lease at once,
//!   while the old leader's term still runs until its deadline: **two
//!   leaders for up to one term**. Release a lease with `tenure release`
//!   instead; never delete tenure's rows.
//! * **Point-in-time restore** of the database, or restoring a backup. The
//!   rows go back to older records with lower tokens: tokens are issued
//!   twice, and a record released at the restore point lets a candidate in
//!   at once while the real leader's term runs on. The clock-based versions
//!   above stop stale compare-and-swaps from matching, nothing more.
//! * **Fail-over to an asynchronous replica** that had not received the
//!   latest writes: the same as a restore to a moment ago.
//!
//! * **An old primary left running after a standby's promotion**, even with
//!   synchronous replication. A commit whose wait for the standby is
//!   cancelled (by `statement_timeout`, which this store sets to ¾ of its
//!   `timeout`, or by a client's cancel) stays committed on that primary
//!   and returns success with only a `WARNING` ("the transaction has
//!   already committed locally, but might not have been replicated"). So a
//!   leader whose connection still reaches the old primary can renew there,
//!   and read its renewal back, while candidates on the promoted standby
//!   take the lease once it expires there: two leaders. Stop (or fence off)
//!   the old primary before or as the standby is promoted, and point every
//!   candidate at the new one. (Not tested: no test runs a standby.)
//!
//! After a restore or such a fail-over, stop every candidate of the
//! affected groups and start them again no sooner than one term later.
//! Synchronous replication (`synchronous_commit = on` with
//! `synchronous_standby_names`) narrows the window but does not close it,
//! even with the old primary stopped: a renewal whose wait for a slow or
//! absent standby is cancelled by this store's own `statement_timeout`
//! still reports success (the `WARNING` above), so a write tenure saw
//! applied may be missing on the standby, which then holds an older
//! expiry than the leader believes. Keep the restart step for every
//! fail-over.
//!
//! Unlike `tenure-redis`, this store has no data-set marker and quarantine:
//! a PostgreSQL that loses committed writes has been restored or failed
//! over by an operator, who can follow the step above, whereas a Redis
//! without persistence loses everything on a plain restart.
//!
//! # Fencing a table
//!
//! To make a PostgreSQL table refuse a leader whose term has ended, give
//! its rows a `fence_token` column and write with
//! `WHERE fence_token <= $token`, or install the trigger in [`fence`].
//! `examples/fencing_postgres.rs` shows a stale leader refused both ways, and
//! `docs/fencing.md` in the repository explains the recipes.
//!
//! # Connecting
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use tenure_postgres::PostgresStore;
//! let store = PostgresStore::connect(
//!     "postgres://app:secret@db.internal:5432/app?sslmode=require&ca=/etc/ssl/db-ca.pem",
//! )
//! .await?;
//! let elector = tenure::Elector::builder(store, "nightly-billing").start()?;
//! # let _ = elector; Ok(()) }
//! ```
//!
//! Passwords never appear in logs, errors or [`PostgresStore::describe`](tenure::LeaseView::describe).

mod batch;
mod error;
pub mod fence;
mod listen;
mod options;
mod payload;
mod pool;
mod schema;
mod session;
mod store;
mod tls;

pub use error::PostgresStoreError;
pub use options::{PostgresOptions, DEFAULT_TIMEOUT};
pub use store::PostgresStore;
