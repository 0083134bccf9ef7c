//! A small, bounded pool of connections, so that an engine's batches can
//! run side by side (PostgreSQL runs one statement at a time per
//! connection) while the number of connections stays fixed whatever the
//! number of groups.
//!
//! Connections open on demand, lowest slot first, so a store that runs one
//! operation at a time keeps using one connection. A connection whose
//! operation failed, timed out or was abandoned is dropped (its statement
//! cancelled on the server) and the slot opens a new one next time.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tenure::StoreError;
use tokio::sync::{Mutex, MutexGuard, Semaphore, SemaphorePermit};
use tokio_postgres::Client;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::error;

/// How long a cancel request for an abandoned statement may take.
const CANCEL_WAIT: Duration = Duration::from_secs(5);

/// The default number of connections (the engine's default batches in
/// flight).
pub(crate) const DEFAULT_POOL: usize = 4;

/// The most connections a store may be told to use.
pub(crate) const MAX_POOL: usize = 64;

/// A live connection with its prepared statements.
pub(crate) struct Conn {
    pub(crate) client: Client,
    pub(crate) statements: crate::batch::Statements,
}

/// What an operation runs on a connection.
pub(crate) type Op<'c, T> =
    Pin<Box<dyn Future<Output = Result<T, tokio_postgres::Error>> + Send + 'c>>;

pub(crate) struct Pool {
    slots: Vec<Mutex<Option<Conn>>>,
    /// One permit per slot: whoever holds one finds a free slot.
    permits: Semaphore,
}

impl Pool {
    pub(crate) fn new(size: usize) -> Pool {
        let size = size.clamp(1, MAX_POOL);
        Pool {
            slots: (0..size).map(|_| Mutex::new(None)).collect(),
            permits: Semaphore::new(size),
        }
    }

    /// Puts a connection opened elsewhere (the first, at connect) in the
    /// first slot.
    pub(crate) async fn seed(&self, conn: Conn) {
        *self.slots[0].lock().await = Some(conn);
    }

    /// Runs `f` on a connection, opening one with `open` if the free slot
    /// has none. `what` names the operation in errors; `target` is the
    /// redacted URL.
    ///
    /// The connection is dropped (and the statement cancelled on the
    /// server) when it turned out to be closed, when `f` got no reply within
    /// `timeout`, and when the caller abandoned the operation (dropped this
    /// future): a later operation must never queue behind a statement that
    /// is still waiting for a lock or for a silent peer.
    pub(crate) async fn run<T, O, OF>(
        &self,
        what: &str,
        target: &str,
        timeout: Duration,
        tls: &MakeRustlsConnect,
        open: O,
        f: impl for<'c> FnOnce(&'c Conn) -> Op<'c, T>,
    ) -> Result<T, StoreError>
    where
        O: FnOnce() -> OF,
        OF: Future<Output = Result<Conn, StoreError>>,
    {
        // The semaphore is never closed.
        let permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| StoreError::Unavailable {
                message: "the PostgreSQL store is closed".into(),
                source: None,
            })?;
        let slot = self
            .slots
            .iter()
            .find_map(|s| s.try_lock().ok())
            .ok_or_else(|| StoreError::Unavailable {
                message: "no free PostgreSQL connection slot".into(),
                source: None,
            })?;
        let mut slot = InFlight {
            slot,
            _permit: permit,
            tls,
            done: false,
        };
        if slot.slot.as_ref().is_none_or(|c| c.client.is_closed()) {
            *slot.slot = None;
            *slot.slot = Some(open().await?);
        }
        let Some(conn) = slot.slot.as_ref() else {
            return Err(StoreError::Unavailable {
                message: "no connection".into(),
                source: None,
            });
        };
        match tokio::time::timeout(timeout, f(conn)).await {
            Ok(Ok(v)) => {
                slot.done = true;
                Ok(v)
            }
            Ok(Err(e)) => {
                slot.done = !conn.client.is_closed();
                Err(error::classify(what, target, e))
            }
            // `done` stays false: the connection is dropped with `slot`.
            Err(_) => Err(StoreError::Timeout(timeout)),
        }
    }
}

/// A slot while an operation runs on it. Unless the operation completed
/// with the connection in a usable state, dropping this drops the
/// connection and asks the server to cancel whatever it still runs.
/// Fields drop in order: the slot is free before the permit returns.
struct InFlight<'a> {
    slot: MutexGuard<'a, Option<Conn>>,
    _permit: SemaphorePermit<'a>,
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
