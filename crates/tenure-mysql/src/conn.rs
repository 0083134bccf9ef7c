//! Opening one connection with the session settings every answer relies
//! on, and a small bounded pool of them.
//!
//! Every connection sets, whatever the server's defaults: `READ
//! COMMITTED` isolation, a strict `sql_mode` of its own (so neither a
//! permissive server mode nor `ANSI_QUOTES`, `NO_BACKSLASH_ESCAPES` or
//! `PIPES_AS_CONCAT` changes what a statement means), the UTC time zone
//! (the versions are the server's clock in microseconds: no daylight
//! saving step), and the server-side bounds below the store's timeout.
//!
//! A connection whose operation failed, timed out or was abandoned is
//! dropped (closing it rolls back whatever it had open on the server),
//! and the slot opens a new one next time; one idle longer than half the
//! `wait_timeout` the store sets is replaced before use rather than
//! found closed by the server.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, OptsBuilder, SslOpts};
use tenure::StoreError;
use tokio::sync::{Mutex, MutexGuard, Semaphore};
use tokio::time::Instant;

use crate::error::classify;
use crate::options::{MysqlOptions, MAX_POOL};

/// The session's `sql_mode`: strict, and nothing that changes how
/// statements are read. Both MySQL 8 and MariaDB take it.
pub(crate) const SQL_MODE: &str = "STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION";

/// The session's `group_concat_max_len`: MariaDB cuts `JSON_ARRAYAGG` (in
/// which a batch keeps the rows it locked) at it, and a batch's request
/// holds at most 4 MiB of SQL.
const GROUP_CONCAT_MAX_LEN: u64 = 64 << 20;

/// The least `wait_timeout` the store sets, in seconds.
const MIN_WAIT_TIMEOUT_S: u64 = 60;

/// What the store knows about the server after connecting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flavor {
    /// MariaDB: `max_statement_time` bounds every statement.
    MariaDb,
    /// MySQL (or what speaks like it): `max_execution_time` bounds
    /// `SELECT`s only.
    MySql,
}

/// The server-side bounds for a store `timeout`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Bounds {
    /// `innodb_lock_wait_timeout`, whole seconds: half the timeout rounded
    /// down, at least 1 (MySQL's least; on MariaDB 0 means "do not wait",
    /// used below a 2 s timeout).
    pub(crate) lock_wait_s: u64,
    /// The statement time, in milliseconds: three quarters of the timeout.
    pub(crate) statement_ms: u64,
    /// `wait_timeout`, seconds: how long the server keeps an idle session
    /// (and with it an abandoned transaction's locks).
    pub(crate) wait_timeout_s: u64,
}

impl Bounds {
    pub(crate) fn new(timeout: Duration, flavor: Flavor) -> Bounds {
        // The server takes at most about a year here; more makes no sense.
        let ms = u64::try_from(timeout.as_millis())
            .unwrap_or(u64::MAX)
            .clamp(4, 31_536_000_000);
        let half_s = ms / 2000;
        let lock_wait_s = match flavor {
            Flavor::MariaDb => half_s,
            Flavor::MySql => half_s.max(1),
        };
        Bounds {
            lock_wait_s,
            statement_ms: ms * 3 / 4,
            wait_timeout_s: (ms / 1000 * 4).clamp(MIN_WAIT_TIMEOUT_S, 31_536_000),
        }
    }

    /// The statements that set the bounds on a session of `flavor`.
    pub(crate) fn statements(self, flavor: Flavor) -> String {
        let statement = match flavor {
            Flavor::MariaDb => format!(
                "SET SESSION max_statement_time = {}.{:03}",
                self.statement_ms / 1000,
                self.statement_ms % 1000
            ),
            Flavor::MySql => format!("SET SESSION max_execution_time = {}", self.statement_ms),
        };
        format!(
            "SET SESSION innodb_lock_wait_timeout = {}; {statement}; SET SESSION wait_timeout = {}",
            self.lock_wait_s, self.wait_timeout_s
        )
    }
}

/// The client options for `options`: matched rows counted
/// (`CLIENT_FOUND_ROWS`), TLS if asked for, keepalive, no statement cache
/// beyond what the store prepares.
fn client_opts(options: &MysqlOptions) -> mysql_async::Opts {
    let mut b = OptsBuilder::default()
        .ip_or_hostname(options.host.clone())
        .tcp_port(options.port)
        .user(options.user.clone())
        .pass(options.password.as_ref().map(|p| p.expose().to_owned()))
        .db_name(Some(options.database.clone()))
        .client_found_rows(true)
        .tcp_keepalive(Some(Duration::from_secs(5)))
        .tcp_nodelay(true)
        .prefer_socket(false)
        .stmt_cache_size(16)
        .wait_timeout(Some(
            usize::try_from(Bounds::new(options.timeout, Flavor::MySql).wait_timeout_s)
                .unwrap_or(usize::MAX),
        ));
    if let Some(files) = &options.tls {
        let mut ssl = SslOpts::default();
        if let Some(ca) = &files.ca {
            ssl = ssl
                .with_root_certs(vec![ca.clone().into()])
                .with_disable_built_in_roots(true);
        }
        if let (Some(cert), Some(key)) = (&files.cert, &files.key) {
            ssl = ssl.with_client_identity(Some(mysql_async::ClientIdentity::new(
                cert.clone().into(),
                key.clone().into(),
            )));
        }
        b = b.ssl_opts(Some(ssl));
    }
    b.into()
}

/// Checks the TLS files before any connection tries them, so that a wrong
/// file is reported naming its option.
pub(crate) fn check_tls_files(options: &MysqlOptions) -> Result<(), tenure::store::tls::PemError> {
    use tenure::store::tls::{read_pem, Expected};
    if let Some(files) = &options.tls {
        if let Some(ca) = &files.ca {
            read_pem("ca", ca, Expected::Certificates)?;
        }
        if let Some(cert) = &files.cert {
            read_pem("cert", cert, Expected::Certificates)?;
        }
        if let Some(key) = &files.key {
            read_pem("key", key, Expected::PrivateKey)?;
        }
    }
    Ok(())
}

/// A live connection and what was learned opening it.
pub(crate) struct Live {
    pub(crate) conn: Conn,
    /// When it was last used.
    used: Instant,
}

/// Opens a connection and sets up its session, bounded by the timeout as
/// a whole (a server that accepts TCP but never answers must not hang the
/// caller).
pub(crate) async fn open(options: &MysqlOptions) -> Result<Live, StoreError> {
    let target = options.redacted_url();
    let timeout = options.timeout;
    let opening = async {
        let mut conn = Conn::new(client_opts(options))
            .await
            .map_err(|e| classify("connect", target, e))?;
        let version: Option<String> = conn
            .query_first("SELECT VERSION()")
            .await
            .map_err(|e| classify("connect", target, e))?;
        let flavor = if version.is_some_and(|v| v.contains("MariaDB")) {
            Flavor::MariaDb
        } else {
            Flavor::MySql
        };
        let bounds = Bounds::new(timeout, flavor);
        let setup = format!(
            "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED; \
             SET SESSION sql_mode = '{SQL_MODE}'; SET SESSION time_zone = '+00:00'; \
             SET SESSION autocommit = 1; SET SESSION group_concat_max_len = {GROUP_CONCAT_MAX_LEN}; {}",
            bounds.statements(flavor)
        );
        conn.query_drop(setup)
            .await
            .map_err(|e| classify("setting up the session", target, e))?;
        Ok(Live {
            conn,
            used: Instant::now(),
        })
    };
    match tokio::time::timeout(timeout, opening).await {
        Ok(r) => r,
        Err(_) => Err(StoreError::unavailable(
            format!("MySQL at {target}: connecting took longer than {timeout:?} (timeout=)"),
            std::io::Error::from(std::io::ErrorKind::TimedOut),
        )),
    }
}

/// What an operation runs on a connection.
pub(crate) type Op<'c, T> =
    Pin<Box<dyn Future<Output = Result<T, mysql_async::Error>> + Send + 'c>>;

/// A bounded pool: connections open on demand, lowest slot first.
pub(crate) struct Pool {
    slots: Vec<Mutex<Option<Live>>>,
    permits: Semaphore,
    /// Idle longer than this, a connection is replaced before use.
    max_idle: Duration,
}

impl Pool {
    pub(crate) fn new(size: usize, timeout: Duration) -> Pool {
        let size = size.clamp(1, MAX_POOL);
        let wait = Bounds::new(timeout, Flavor::MySql).wait_timeout_s;
        Pool {
            slots: (0..size).map(|_| Mutex::new(None)).collect(),
            permits: Semaphore::new(size),
            max_idle: Duration::from_secs(wait / 2),
        }
    }

    /// Puts a connection opened elsewhere in the first slot.
    pub(crate) async fn seed(&self, live: Live) {
        *self.slots[0].lock().await = Some(live);
    }

    /// Runs `f` on a connection, opening one if the free slot has none.
    /// The connection is dropped when `f` failed for any reason but a
    /// plain server error (the session is sound after those), when no
    /// reply came within the timeout, and when the caller abandoned the
    /// operation: a later operation never queues behind a statement still
    /// running, nor inherits a transaction left open.
    pub(crate) async fn run<T>(
        &self,
        what: &str,
        options: &MysqlOptions,
        f: impl for<'c> FnOnce(&'c mut Live) -> Op<'c, T>,
    ) -> Result<T, StoreError> {
        let target = options.redacted_url();
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| StoreError::Unavailable {
                message: "the MySQL store is closed".into(),
                source: None,
            })?;
        let slot = self
            .slots
            .iter()
            .find_map(|s| s.try_lock().ok())
            .ok_or_else(|| StoreError::Unavailable {
                message: "no free MySQL connection slot".into(),
                source: None,
            })?;
        let mut guard = InFlight { slot, done: false };
        let stale = guard
            .slot
            .as_ref()
            .is_none_or(|l| l.used.elapsed() > self.max_idle || l.conn.is_disconnected());
        if stale {
            *guard.slot = None;
            *guard.slot = Some(open(options).await?);
        }
        let Some(live) = guard.slot.as_mut() else {
            return Err(StoreError::Unavailable {
                message: "no MySQL connection".into(),
                source: None,
            });
        };
        let timeout = options.timeout;
        let outcome = tokio::time::timeout(timeout, f(live)).await;
        match outcome {
            Ok(Ok(v)) => {
                if let Some(live) = guard.slot.as_mut() {
                    live.used = Instant::now();
                }
                guard.done = true;
                Ok(v)
            }
            Ok(Err(e)) => {
                // A server error leaves the session usable; anything else
                // (I/O, protocol) does not.
                if matches!(e, mysql_async::Error::Server(_)) {
                    if let Some(live) = guard.slot.as_mut() {
                        live.used = Instant::now();
                    }
                    guard.done = true;
                }
                Err(classify(what, target, e))
            }
            Err(_) => Err(StoreError::Timeout(timeout)),
        }
    }
}

/// A slot in use: unless the operation completed, its connection is
/// dropped when this is (closing it, which rolls back on the server).
struct InFlight<'p> {
    slot: MutexGuard<'p, Option<Live>>,
    done: bool,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if !self.done {
            *self.slot = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_stay_below_the_timeout() {
        let b = Bounds::new(Duration::from_secs(5), Flavor::MySql);
        assert_eq!(
            (b.lock_wait_s, b.statement_ms, b.wait_timeout_s),
            (2, 3750, 60)
        );
        let m = Bounds::new(Duration::from_secs(1), Flavor::MariaDb);
        assert_eq!((m.lock_wait_s, m.statement_ms), (0, 750));
        assert_eq!(
            Bounds::new(Duration::from_secs(1), Flavor::MySql).lock_wait_s,
            1
        );
        assert_eq!(
            m.statements(Flavor::MariaDb),
            "SET SESSION innodb_lock_wait_timeout = 0; SET SESSION max_statement_time = 0.750; \
             SET SESSION wait_timeout = 60"
        );
        let huge = Bounds::new(Duration::from_secs(100_000_000), Flavor::MySql);
        assert_eq!(huge.wait_timeout_s, 31_536_000);
        assert!(huge.statement_ms < 31_536_000_000);
        let tiny = Bounds::new(Duration::from_millis(1), Flavor::MariaDb);
        assert_eq!((tiny.lock_wait_s, tiny.statement_ms), (0, 3));
    }
}
