//! A PostgreSQL lease store for [tenure](tenure): one row per group,
//! compare-and-swap by a conditional `UPDATE … WHERE version = $n` (or
//! `INSERT … ON CONFLICT DO NOTHING` for a group's first write), and instant
//! hand-over through LISTEN/NOTIFY.
//!
//! # Schema
//!
//! Created on first use (`CREATE TABLE IF NOT EXISTS`), in the table named
//! by `?table=` (default `tenure_leases`):
//!
//! ```sql
//! CREATE TABLE tenure_leases (
//!     group_name TEXT PRIMARY KEY,          -- the group
//!     version    BIGINT NOT NULL,           -- the store's version; +1 per write
//!     record     BYTEA NOT NULL,            -- tenure::LeaseRecord::encode(): holder, token, term, times, metadata
//!     updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
//! );
//! ```
//!
//! Rows are never deleted: a released lease is a record without a holder,
//! so the fencing token keeps rising across hand-overs. Every write that
//! applies runs `pg_notify('tenure:<table>', group)` in the same statement;
//! a waiting candidate `LISTEN`s on a dedicated connection and re-reads at
//! once. No advisory locks are involved: the fencing token lives in the row
//! and changes atomically with it.
//!
//! The user needs `SELECT, INSERT, UPDATE` on the table (and `CREATE` on
//! the schema for the first run).
//!
//! # Connecting
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use tenure_postgres::PostgresStore;
//! let store = PostgresStore::connect(
//!     "postgres://app:secret@db.internal:5432/app?sslmode=require&sslrootcert=/etc/ssl/db-ca.pem",
//! )
//! .await?;
//! let elector = tenure::Elector::builder(store, "nightly-billing").start()?;
//! # let _ = elector; Ok(()) }
//! ```
//!
//! Passwords never appear in logs, errors or [`PostgresStore::describe`](tenure::LeaseStore::describe).
#![deny(missing_docs)]

mod error;
mod listen;
mod options;
mod store;
mod tls;

pub use options::PostgresOptions;
pub use store::PostgresStore;
