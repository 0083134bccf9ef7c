//! The store: one row per group, compare-and-swap on the row's version.

use std::sync::Arc;

use async_trait::async_trait;
use tenure::{
    CasOutcome, ChangeFeed, GroupName, LeaseRecord, LeaseStore, StoreError, Version, Versioned,
};
use tokio::sync::Mutex;
use tokio_postgres::{Client, Statement};

use crate::options::PostgresOptions;
use crate::{error, listen, tls};

/// A lease store on a PostgreSQL table. Cheap to clone; clones share one
/// connection, which is re-established on the next operation after it is
/// lost.
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
    conn: Mutex<Option<Conn>>,
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
        let store = PostgresStore {
            inner: Arc::new(Inner {
                options,
                conn: Mutex::new(None),
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

    async fn open(&self) -> Result<Conn, StoreError> {
        let options = &self.inner.options;
        let target = self.target().to_owned();
        let tls = tls::connector(options.root_cert.as_deref())?;
        let (client, connection) = options
            .config
            .connect(tls)
            .await
            .map_err(|e| error::classify("connect", &target, e))?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "PostgreSQL connection closed");
            }
        });
        let table = &options.table.quoted;
        let create = format!(
            "CREATE TABLE IF NOT EXISTS {table} (
                group_name TEXT PRIMARY KEY,
                version    BIGINT NOT NULL,
                record     BYTEA NOT NULL,
                updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
            )"
        );
        if let Err(e) = client.batch_execute(&create).await {
            // Two first runs racing to create the table: the loser sees a
            // unique violation on the catalog; the table exists either way.
            let raced = e.as_db_error().is_some_and(|d| {
                d.code() == &tokio_postgres::error::SqlState::UNIQUE_VIOLATION
                    || d.code() == &tokio_postgres::error::SqlState::DUPLICATE_TABLE
            });
            if !raced {
                return Err(error::classify("creating the lease table", &target, e));
            }
        }
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
                INSERT INTO {table} (group_name, version, record) VALUES ($1, 1, $2)
                ON CONFLICT (group_name) DO NOTHING RETURNING version
            )
            SELECT w.version FROM w CROSS JOIN LATERAL (SELECT pg_notify($3, $1)) AS n"
        ))
        .await?;
        let update = prepare(format!(
            "WITH w AS (
                UPDATE {table} SET version = version + 1, record = $3, updated_at = now()
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

    /// Runs `f` on the connection, opening one first if there is none, and
    /// forgetting it if it turned out to be closed.
    async fn with_conn<T>(
        &self,
        what: &str,
        f: impl for<'c> FnOnce(
            &'c Conn,
        ) -> std::pin::Pin<
            Box<dyn std::future::Future<Output = Result<T, tokio_postgres::Error>> + Send + 'c>,
        >,
    ) -> Result<T, StoreError> {
        let mut slot = self.inner.conn.lock().await;
        if slot.as_ref().is_none_or(|c| c.client.is_closed()) {
            *slot = None;
            *slot = Some(self.open().await?);
        }
        let Some(conn) = slot.as_ref() else {
            return Err(StoreError::Unavailable {
                message: "no connection".into(),
                source: None,
            });
        };
        match f(conn).await {
            Ok(v) => Ok(v),
            Err(e) => {
                if conn.client.is_closed() {
                    *slot = None;
                }
                Err(error::classify(what, self.target(), e))
            }
        }
    }
}

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
        let channel = listen::channel(&self.inner.options);
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
        listen::subscribe(&self.inner.options, group)
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
