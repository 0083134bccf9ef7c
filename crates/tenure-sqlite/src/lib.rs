//! The SQLite lease store for [tenure]: the embedded default, one database
//! file shared by the processes of one host.
//!
//! ```
//! use tenure::{GroupName, LeaseView};
//! use tenure_sqlite::SqliteStore;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let path = std::env::temp_dir().join(format!("tenure-doc-{}.db", std::process::id()));
//! // Creates the file and the schema on first use; every process of the
//! // host opens the same path.
//! let store = SqliteStore::connect(&path).await?;
//! assert_eq!(store.describe(), format!("sqlite://{}", path.canonicalize()?.display()));
//!
//! let group = GroupName::new("nightly-billing")?;
//! assert!(store.read(&group).await?.is_none());
//!
//! // The README's quick start: stand for the group, work while leading.
//! let elector = tenure::Elector::builder(store, "nightly-billing")
//!     .candidate_id("host-a")
//!     .term(std::time::Duration::from_secs(10))
//!     .metadata(tenure::Metadata::address("10.0.0.7:8080"))
//!     .start()?;
//! # let stopper = elector.clone();
//! # tokio::spawn(async move {
//! #     tokio::time::sleep(std::time::Duration::from_millis(200)).await;
//! #     stopper.shutdown().await;
//! # });
//! elector
//!     .run_while_leader(|term| async move {
//!         assert_eq!(term.token(), 1); // the first term of a new group
//!         term.cancelled().await; // fires before term.deadline()
//!         Ok::<(), std::io::Error>(())
//!     })
//!     .await?;
//! # for suffix in ["", "-wal", "-shm"] {
//! #     let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
//! # }
//! # Ok(()) }
//! ```
//!
//! # Schema
//!
//! Version 1, created by the first [`SqliteStore::connect`] of a new file:
//!
//! ```sql
//! CREATE TABLE tenure_schema (
//!     id      INTEGER PRIMARY KEY CHECK (id = 1),
//!     version INTEGER NOT NULL              -- 1
//! );
//! CREATE TABLE tenure_leases (
//!     group_name TEXT PRIMARY KEY NOT NULL, -- the GroupName, byte for byte
//!     version    INTEGER NOT NULL,          -- 1 on insert, +1 on every write
//!     record     BLOB NOT NULL              -- LeaseRecord::encode(): JSON
//! );
//! -- An UPDATE that keeps the version (a hand edit) bumps it, so a
//! -- candidate holding the old version cannot overwrite the edited row.
//! CREATE TRIGGER tenure_leases_version AFTER UPDATE ON tenure_leases
//! WHEN NEW.version IS OLD.version
//! BEGIN
//!     UPDATE tenure_leases SET version = OLD.version + 1 WHERE group_name = NEW.group_name;
//! END;
//! ```
//!
//! One row per group. A row is never deleted: a release writes a record
//! without a holder, so the fencing token survives and keeps rising, and
//! since rows are never deleted a row's version never repeats. The group
//! column is `group_name` rather than `group`, a reserved word that every
//! hand-written query would have to quote. Inspect a file with
//! `sqlite3 leases.db "SELECT group_name, version, CAST(record AS TEXT) FROM tenure_leases"`.
//!
//! A file whose `tenure_schema` version is newer than this build's
//! ([`SCHEMA_VERSION`]) is refused with [`SqliteStoreError::NewerSchema`] rather
//! than written; a file that is not a SQLite database, or is corrupt, is
//! refused with an error naming the path and the fix.
//!
//! # Concurrency
//!
//! * The file runs in WAL mode: readers never wait for a writer.
//! * A compare-and-swap is one `BEGIN IMMEDIATE` transaction (read the
//!   row's version, compare, write, commit), so it is atomic across
//!   connections and processes: `IMMEDIATE` takes the write lock before
//!   the read, so no other writer can slip in between.
//! * Lock waits are bounded by the busy timeout (1 s by default, see
//!   [`SqliteOptions`]); past it an operation fails with
//!   [`StoreError::Unavailable`](tenure::StoreError::Unavailable) and the elector retries.
//! * `synchronous = FULL`: a commit survives a power cut, so a fencing
//!   token is never handed out twice.
//! * Each [`SqliteStore`] holds one connection; SQLite calls run on tokio's
//!   blocking threads. Clones share the connection; open the path again for
//!   another one.
//! * The file must be on a local file system: SQLite's locking is not
//!   reliable over NFS and similar.
//!
//! # Many groups
//!
//! Electors built from clones of one [`SqliteStore`] share one engine
//! ([`tenure::Engine`]): its batches are one transaction each, a
//! [`LeaseView::read_many`](tenure::LeaseView::read_many) reads every group from one snapshot, and a
//! [`LeaseStore::compare_and_swap_many`](tenure::LeaseStore::compare_and_swap_many) checks and writes every group
//! under one `BEGIN IMMEDIATE` lock and commits them with one fsync.
//!
//! # Change feed
//!
//! SQLite cannot push notifications to other processes, but `PRAGMA
//! data_version` changes whenever another connection commits to the file,
//! and reading it costs one in-memory counter. So:
//!
//! * [`LeaseView::watch`](tenure::LeaseView::watch), the store-wide feed an engine uses: one
//!   connection polls `data_version` every 50 ms
//!   ([`SqliteOptions::with_change_poll_interval`]); after a commit it scans
//!   the groups' names and versions and reports each changed group with its
//!   record, so followers learn of renewals without reading. One poller per
//!   store handle, whatever the number of groups.
//! * [`LeaseView::changes`](tenure::LeaseView::changes), a feed of one group (what an
//!   [`Observer`](tenure::Observer) uses): the same poll, hinting when that
//!   group's row version moved.
//!
//! A graceful hand-over between processes therefore takes about one poll
//! rather than one retry interval. A poller ends when its feed is dropped.
//!
//! [tenure]: https://docs.rs/tenure

mod error;
mod feed;
mod options;
mod schema;
mod store;

pub use error::SqliteStoreError;
pub use options::SqliteOptions;
pub use schema::SCHEMA_VERSION;
pub use store::SqliteStore;
