//! The store: one row per group, compare-and-swap on the row's version.

use std::sync::Arc;

use async_trait::async_trait;
use tenure::{
    CasOutcome, ChangeFeed, GroupName, LeaseRecord, LeaseStore, StoreError, Version, Versioned,
};
use tokio::sync::Mutex;
use tokio_postgres::{Client, Statement};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::options::PostgresOptions;
use crate::{error, listen, schema, session, tls};

/// A lease store on a PostgreSQL table. Cheap to clone; clones share one
/// connection, which is re-established on the next operation after it is
/// lost, timed out or abandoned.
///
/// ```no_run
/// # async fn demo() -> Result<(), tenure::StoreError> {
/// let store = tenure_postgres::PostgresStore::connect("postgres://app@db.internal/app").await?;
/// let elector = tenure::Elector::builder(store, "nightly-billing").start();
/// # let _ = elector; Ok(()) }
/// ```
#[derive(Clone)]
pub struct PostgresStore {
    inner: Arc<Inner>,
}

struct Inner {
    options: PostgresOptions,
    tls: MakeRustlsConnect,
    conn: Mutex<Option<Conn>>,
    /// The table's channel, as the server resolved it on the last connect.
    channel: std::sync::Mutex<String>,
}

/// A live connection with its prepared statements.
struct Conn {
    client: Client,
    read: Statement,
    insert: Statement,
    update: Statement,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("url", &self.inner.options.redacted_url())
            .finish()
    }
}

/// A version no earlier write can have had: the server's clock in
/// microseconds, or one more than the row's version if that is higher.
/// Versions of a row rise by at least one per write, so a row deleted and
/// created again, or brought back by a restore or a fail-over, gets versions
/// above every version issued before (as long as the server's clock does
/// not go back): a delayed compare-and-swap from before can never match.
const CLOCK_VERSION: &str = "(extract(epoch from clock_timestamp()) * 1000000)::bigint";

impl PostgresStore {
    /// Connects to the URL (see [`PostgresOptions`]), creating the lease
    /// table if it is missing. Fails with a message naming the fix for wrong
    /// credentials, a missing database, a TLS problem, or a table without
    /// tenure's layout.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::with_options(PostgresOptions::from_url(url)?).await
    }

    /// Connects with parsed options.
    pub async fn with_options(options: PostgresOptions) -> Result<Self, StoreError> {
        let tls = tls::connector(options.root_cert.as_deref())?;
        let store = PostgresStore {
            inner: Arc::new(Inner {
                options,
                tls,
                conn: Mutex::new(None),
                channel: std::sync::Mutex::new(String::new()),
            }),
        };
        let conn = store.open().await?;
        *store.inner.conn.lock().await = Some(conn);
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
        let target = self.target().to_owned();
        let client = session::connect(options, self.inner.tls.clone(), &target, None).await?;
        let resolved = schema::ensure_table(&client, &options.table, &target).await?;
        *self.inner.channel.lock().unwrap_or_else(|p| p.into_inner()) = resolved.channel;
        let table = &options.table.quoted;
        let prepare = |sql: String| {
            let client = &client;
            let target = target.clone();
            async move {
                client
                    .prepare(&sql)
                    .await
                    .map_err(|e| error::classify("preparing statements", &target, e))
            }
        };
        let read = prepare(format!(
            "SELECT version, record FROM {table} WHERE group_name = $1"
        ))
        .await?;
        // pg_notify runs once per written row, so only a write that applied
        // notifies, atomically with it.
        let insert = prepare(format!(
            "WITH w AS (
                INSERT INTO {table} (group_name, version, record) VALUES ($1, {CLOCK_VERSION}, $2)
                ON CONFLICT (group_name) DO NOTHING RETURNING version
            )
            SELECT w.version FROM w CROSS JOIN LATERAL (SELECT pg_notify($3, $1)) AS n"
        ))
        .await?;
        let update = prepare(format!(
            "WITH w AS (
                UPDATE {table} SET version = GREATEST(version + 1, {CLOCK_VERSION}), record = $3, updated_at = now()
                WHERE group_name = $1 AND version = $2 RETURNING version
            )
            SELECT w.version FROM w CROSS JOIN LATERAL (SELECT pg_notify($4, $1)) AS n"
        ))
        .await?;
        Ok(Conn {
            client,
            read,
            insert,
            update,
        })
    }

    /// Runs `f` on the connection, opening one first if there is none.
    ///
    /// The connection is dropped (and the statement cancelled on the
    /// server) when it turned out to be closed, when `f` got no reply within
    /// the timeout, and when the caller abandoned the operation (dropped
    /// this future): a later operation must never queue behind a statement
    /// that is still waiting for a lock or for a silent peer.
    async fn with_conn<T>(
        &self,
        what: &str,
        f: impl for<'c> FnOnce(
            &'c Conn,
        ) -> std::pin::Pin<
            Box<dyn std::future::Future<Output = Result<T, tokio_postgres::Error>> + Send + 'c>,
        >,
    ) -> Result<T, StoreError> {
        let mut slot = InFlight {
            slot: self.inner.conn.lock().await,
            tls: &self.inner.tls,
            done: false,
        };
        if slot.slot.as_ref().is_none_or(|c| c.client.is_closed()) {
            *slot.slot = None;
            *slot.slot = Some(self.open().await?);
        }
        let Some(conn) = slot.slot.as_ref() else {
            return Err(StoreError::Unavailable {
                message: "no connection".into(),
                source: None,
            });
        };
        let timeout = self.inner.options.timeout;
        let result = tokio::time::timeout(timeout, f(conn)).await;
        match result {
            Ok(Ok(v)) => {
                slot.done = true;
                Ok(v)
            }
            Ok(Err(e)) => {
                slot.done = !conn.client.is_closed();
                Err(error::classify(what, self.target(), e))
            }
            // `done` stays false: the connection is dropped with `slot`.
            Err(_) => Err(StoreError::Timeout(timeout)),
        }
    }
}

/// The connection slot while an operation runs on it. Unless the operation
/// completed with the connection in a usable state, dropping this drops the
/// connection and asks the server to cancel whatever it still runs.
struct InFlight<'a> {
    slot: tokio::sync::MutexGuard<'a, Option<Conn>>,
    tls: &'a MakeRustlsConnect,
    done: bool,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let Some(conn) = self.slot.take() else { return };
        let cancel = conn.client.cancel_token();
        let tls = self.tls.clone();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                // Best effort: the server may be the thing that is gone.
                let _ = tokio::time::timeout(CANCEL_WAIT, cancel.cancel_query(tls)).await;
            });
        }
        tracing::debug!(
            "PostgreSQL connection dropped: its operation failed, timed out or was abandoned"
        );
    }
}

/// How long a cancel request for an abandoned statement may take.
const CANCEL_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

fn version_of(v: i64) -> Version {
    Version(u64::try_from(v).unwrap_or(0))
}

#[async_trait]
impl LeaseStore for PostgresStore {
    async fn read(&self, group: &GroupName) -> Result<Option<Versioned>, StoreError> {
        let key = group.as_str().to_owned();
        let row = self
            .with_conn("read", |c| {
                Box::pin(async move { c.client.query_opt(&c.read, &[&key]).await })
            })
            .await?;
        let Some(row) = row else { return Ok(None) };
        let version: i64 = row
            .try_get(0)
            .map_err(|e| error::classify("read", self.target(), e))?;
        let bytes: Vec<u8> = row
            .try_get(1)
            .map_err(|e| error::classify("read", self.target(), e))?;
        let record = LeaseRecord::decode(&bytes).map_err(|source| StoreError::Record {
            group: group.clone(),
            source,
        })?;
        Ok(Some(Versioned {
            record,
            version: version_of(version),
        }))
    }

    async fn compare_and_swap(
        &self,
        group: &GroupName,
        expected: Option<Version>,
        record: &LeaseRecord,
    ) -> Result<CasOutcome, StoreError> {
        let key = group.as_str().to_owned();
        let bytes = record.encode();
        let channel = self.channel();
        let row = match expected {
            None => {
                self.with_conn("compare-and-swap", |c| {
                    Box::pin(async move {
                        c.client
                            .query_opt(&c.insert, &[&key, &bytes, &channel])
                            .await
                    })
                })
                .await?
            }
            Some(Version(v)) => {
                let Ok(v) = i64::try_from(v) else {
                    return Ok(CasOutcome::Conflict);
                };
                self.with_conn("compare-and-swap", |c| {
                    Box::pin(async move {
                        c.client
                            .query_opt(&c.update, &[&key, &v, &bytes, &channel])
                            .await
                    })
                })
                .await?
            }
        };
        match row {
            None => Ok(CasOutcome::Conflict),
            Some(row) => {
                let v: i64 = row
                    .try_get(0)
                    .map_err(|e| error::classify("compare-and-swap", self.target(), e))?;
                Ok(CasOutcome::Applied(version_of(v)))
            }
        }
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

    fn describe(&self) -> String {
        format!(
            "{} (table {})",
            self.target(),
            self.inner.options.table.name
        )
    }
}
