//! The change feed: a dedicated RESP3 connection subscribed to the group's
//! channel, on which the compare-and-swap script publishes after every
//! applied write.
//!
//! Redis pub/sub delivers at most once and forgets messages sent while a
//! subscriber is disconnected, so the feed hints once after every
//! (re)subscription: the elector re-reads and misses nothing. A silent
//! connection (a partition) is found by a periodic PING and replaced.

use std::time::Duration;

use redis::{PushInfo, PushKind};
use tokio::sync::mpsc;

use crate::conn::{backoff, open};
use crate::error::RedisStoreError;
use crate::options::RedisOptions;

/// Longest time between two PINGs on an idle feed connection.
const MAX_PING_EVERY: Duration = Duration::from_secs(5);

/// Why the feed stopped for good.
pub(crate) enum Ended {
    /// The elector dropped the feed.
    Dropped,
    /// A setting an operator must fix (a permission, credentials, TLS, a
    /// server without RESP3): electors fall back to polling.
    Refused(RedisStoreError),
}

/// Sends a hint; `false` once the receiver is gone.
fn hint(tx: &mpsc::Sender<()>) -> bool {
    // A full channel already holds a hint: the elector re-reads once and
    // sees this change too.
    !matches!(tx.try_send(()), Err(mpsc::error::TrySendError::Closed(_)))
}

/// Keeps a subscription to `channel` alive and hints `tx` on every message,
/// until `tx` closes or the server refuses the subscription for good.
pub(crate) async fn run(
    client: redis::Client,
    options: RedisOptions,
    channel: String,
    tx: mpsc::Sender<()>,
) -> Ended {
    let ping_every = options.timeout.min(MAX_PING_EVERY);
    let mut failures = 0u32;
    loop {
        let outcome = tokio::select! {
            _ = tx.closed() => return Ended::Dropped,
            r = subscribed(&client, &options, &channel, &tx, ping_every, &mut failures) => r,
        };
        match outcome {
            Ok(()) => return Ended::Dropped,
            Err(e) if !e.is_transient() => return Ended::Refused(e),
            Err(e) => {
                failures = failures.saturating_add(1);
                tracing::debug!(channel, error = %e, "Redis change feed lost; resubscribing");
            }
        }
        tokio::select! {
            _ = tx.closed() => return Ended::Dropped,
            _ = tokio::time::sleep(backoff(failures)) => {}
        }
    }
}

/// One subscription: `Ok(())` once the receiver is gone, `Err` when the
/// connection failed.
async fn subscribed(
    client: &redis::Client,
    options: &RedisOptions,
    channel: &str,
    tx: &mpsc::Sender<()>,
    ping_every: Duration,
    failures: &mut u32,
) -> Result<(), RedisStoreError> {
    let (push_tx, mut pushes) = mpsc::unbounded_channel::<PushInfo>();
    let mut conn = open(client, options, Some(push_tx)).await?;
    let ctx = crate::conn::ctx(options);
    match tokio::time::timeout(options.timeout, conn.subscribe(channel)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(ctx.classify("SUBSCRIBE", e)),
        Err(_) => {
            return Err(RedisStoreError::Timeout {
                target: options.target(),
                after: options.timeout,
            })
        }
    }
    *failures = 0;
    // Changes made while unsubscribed were not delivered: re-read once.
    if !hint(tx) {
        return Ok(());
    }
    let mut ping = tokio::time::interval(ping_every);
    ping.tick().await;
    loop {
        tokio::select! {
            push = pushes.recv() => match push {
                Some(p) if p.kind == PushKind::Message => {
                    if !hint(tx) {
                        return Ok(());
                    }
                }
                Some(p) if p.kind == PushKind::Disconnection => {
                    return Err(RedisStoreError::Unreachable {
                        target: options.target(),
                        detail: "the subscription connection closed".into(),
                        source: None,
                    })
                }
                Some(_) => {}
                None => {
                    return Err(RedisStoreError::Unreachable {
                        target: options.target(),
                        detail: "the subscription connection ended".into(),
                        source: None,
                    })
                }
            },
            _ = ping.tick() => {
                let pong = tokio::time::timeout(
                    options.timeout,
                    redis::cmd("PING").query_async::<redis::Value>(&mut conn),
                )
                .await;
                match pong {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => return Err(ctx.classify("PING", e)),
                    Err(_) => {
                        return Err(RedisStoreError::Timeout {
                            target: options.target(),
                            after: options.timeout,
                        })
                    }
                }
            }
        }
    }
}
