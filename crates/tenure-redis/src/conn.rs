//! One multiplexed connection, re-established with back-off when it breaks.
//!
//! `redis::aio::ConnectionManager` retries a failed connect several times
//! inside one call (also on a wrong password) and keeps a connection whose
//! replies stopped coming; this is the small part of it tenure needs, with
//! two differences: a connection whose request was abandoned (the elector's
//! operation timeout fired first), or timed out, is dropped if nothing at
//! all came back on it since that request went out, since a silent
//! connection is the common sign of a partition (a connection that answers
//! other requests meanwhile is slow, not gone: replies come in order, and
//! dropping it would fail every request in flight on it, which under load
//! turns a late reply into every term lost at once); and every connect
//! attempt is bounded by the configured timeout.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::aio::{AsyncPushSender, MultiplexedConnection};
use redis::AsyncConnectionConfig;
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::error::{Ctx, RedisStoreError};
use crate::options::RedisOptions;

/// First pause after a failed connect; doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
/// Longest pause between connect attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// The pause before attempt `failures + 1`.
pub(crate) fn backoff(failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(16);
    (FIRST_BACKOFF * 2u32.pow(exp)).min(MAX_BACKOFF)
}

/// Opens one connection, bounded by the options' timeout, with pushes (for
/// the change feed) sent to `push` if given.
pub(crate) async fn open(
    client: &redis::Client,
    options: &RedisOptions,
    push: Option<impl AsyncPushSender>,
) -> Result<MultiplexedConnection, RedisStoreError> {
    let mut config = AsyncConnectionConfig::new()
        .set_connection_timeout(options.timeout)
        .set_response_timeout(options.timeout);
    if let Some(push) = push {
        config = config.set_push_sender(push);
    }
    let ctx = ctx(options);
    match tokio::time::timeout(
        options.timeout,
        client.get_multiplexed_async_connection_with_config(&config),
    )
    .await
    {
        Ok(Ok(conn)) => Ok(conn),
        Ok(Err(e)) if options.tls && e.is_timeout() => Err(silent_tls(options)),
        Ok(Err(e)) => Err(ctx.classify("connect", e)),
        Err(_) if options.tls => Err(silent_tls(options)),
        Err(_) => Err(RedisStoreError::Timeout {
            target: options.target(),
            after: options.timeout,
        }),
    }
}

/// The push sender type of connections that take no pushes.
type NoPush = tokio::sync::mpsc::UnboundedSender<redis::PushInfo>;

/// A TLS connect that timed out: a plain-text Redis reads the ClientHello
/// as the start of a command and waits silently for the rest.
fn silent_tls(options: &RedisOptions) -> RedisStoreError {
    RedisStoreError::Tls {
        target: options.target(),
        detail: format!(
            "no TLS handshake within {:?}; a plain-text server stays silent",
            options.timeout
        ),
    }
}

pub(crate) fn ctx(options: &RedisOptions) -> Ctx<'_> {
    Ctx {
        target: options.target(),
        options,
    }
}

struct State {
    current: Option<(u64, MultiplexedConnection)>,
    generation: u64,
    failures: u32,
    next_attempt: Option<Instant>,
}

/// A connection that reconnects.
pub(crate) struct Conn {
    client: redis::Client,
    options: RedisOptions,
    state: Mutex<State>,
    /// The generation of a connection found broken, or 0: written without
    /// the lock, from a drop guard.
    broken: AtomicU64,
    /// When a reply last came back, in nanoseconds since `epoch`, and on
    /// which generation of the connection.
    replied_at: AtomicU64,
    replied_on: AtomicU64,
    epoch: std::time::Instant,
}

impl Conn {
    pub(crate) fn new(client: redis::Client, options: RedisOptions) -> Self {
        Conn {
            client,
            options,
            state: Mutex::new(State {
                current: None,
                generation: 0,
                failures: 0,
                next_attempt: None,
            }),
            broken: AtomicU64::new(0),
            replied_at: AtomicU64::new(0),
            replied_on: AtomicU64::new(0),
            epoch: std::time::Instant::now(),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Whether connection `generation` answered anything at or after `since`.
    fn replied_since(&self, generation: u64, since: u64) -> bool {
        self.replied_on.load(Ordering::Acquire) == generation
            && self.replied_at.load(Ordering::Acquire) >= since
    }

    pub(crate) fn options(&self) -> &RedisOptions {
        &self.options
    }

    async fn get(&self) -> Result<(u64, MultiplexedConnection), RedisStoreError> {
        let mut st = self.state.lock().await;
        if let Some((generation, conn)) = &st.current {
            if self.broken.load(Ordering::Acquire) != *generation {
                return Ok((*generation, conn.clone()));
            }
            tracing::debug!(target = %self.options.target(), "dropping a broken Redis connection");
            st.current = None;
        }
        if let Some(at) = st.next_attempt {
            tokio::time::sleep_until(at).await;
        }
        match open(&self.client, &self.options, None::<NoPush>).await {
            Ok(conn) => {
                if st.failures > 0 {
                    tracing::info!(target = %self.options.target(), "reconnected to Redis");
                }
                st.generation += 1;
                st.failures = 0;
                st.next_attempt = None;
                st.current = Some((st.generation, conn.clone()));
                Ok((st.generation, conn))
            }
            Err(e) => {
                st.failures = st.failures.saturating_add(1);
                st.next_attempt = Some(Instant::now() + backoff(st.failures));
                Err(e)
            }
        }
    }

    /// Runs `op` on the connection. A connection error, or `op` being
    /// abandoned before it finished, marks the connection broken so the
    /// next call reconnects.
    pub(crate) async fn run<T, F, Fut>(
        &self,
        what: &'static str,
        op: F,
    ) -> Result<T, RedisStoreError>
    where
        F: FnOnce(MultiplexedConnection) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        let (generation, conn) = self.get().await?;
        let mut guard = Abandoned {
            conn: self,
            generation,
            started: self.now(),
            armed: true,
        };
        let result = op(conn).await;
        guard.armed = false;
        let dropped = |e: &redis::RedisError| e.is_io_error() || e.is_connection_dropped();
        match &result {
            Err(e) if dropped(e) => self.broken.store(generation, Ordering::Release),
            Err(e) if e.is_timeout() => guard.give_up(),
            _ => {
                self.replied_at.store(self.now(), Ordering::Release);
                self.replied_on.store(generation, Ordering::Release);
            }
        }
        result.map_err(|e| ctx(&self.options).classify(what, e))
    }
}

/// Gives up on the connection if dropped while armed (see
/// [`give_up`](Abandoned::give_up)).
struct Abandoned<'a> {
    conn: &'a Conn,
    generation: u64,
    /// When the request went out.
    started: u64,
    armed: bool,
}

impl Abandoned<'_> {
    /// The request got no reply in time: the connection is broken unless
    /// it answered something since the request went out.
    fn give_up(&self) {
        if !self.conn.replied_since(self.generation, self.started) {
            self.conn.broken.store(self.generation, Ordering::Release);
        }
    }
}

impl Drop for Abandoned<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.give_up();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        assert_eq!(backoff(1), Duration::from_millis(50));
        assert_eq!(backoff(2), Duration::from_millis(100));
        assert_eq!(backoff(5), Duration::from_millis(800));
        assert_eq!(backoff(7), MAX_BACKOFF);
        assert_eq!(backoff(u32::MAX), MAX_BACKOFF);
    }
}
