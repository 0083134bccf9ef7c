//! Change feeds over pub/sub: the compare-and-swap script publishes every
//! applied write on the group's channel (its key) as
//! `1:<version>:<record>`.
//!
//! * [`watch`]: one RESP3 connection subscribed to the pattern
//!   `<prefix>*`, the feed of an engine that runs many groups: each message
//!   names its group by its channel and carries the record, so followers
//!   learn of renewals without a read.
//! * [`run`]: one connection subscribed to one group's channel, hinting on
//!   every message (what an [`Observer`](tenure::Observer) uses).
//!
//! Redis pub/sub delivers at most once and forgets messages sent while a
//! subscriber is disconnected, so a feed resyncs (or hints) after every
//! resubscription. A silent connection (a partition) is found by a periodic
//! PING and replaced.
//!
//! Whoever may publish on the prefix's channels may send anything, so a
//! message is untrusted input: one whose payload does not parse is a hint
//! for its channel's group, and one on a channel that names no group is
//! dropped.

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{PushInfo, PushKind, Value};
use tenure::store::{Change, FeedRelay, StoreFeed};
use tenure::{GroupName, LeaseRecord, Version, Versioned};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::conn::open;
use crate::error::RedisStoreError;
use crate::options::RedisOptions;

/// Longest time between two PINGs on an idle feed connection.
const MAX_PING_EVERY: Duration = Duration::from_secs(5);

/// Room in the store-wide feed: every renewal of a large engine's round.
const CAPACITY: usize = 16_384;

/// What a connection subscribes to.
#[derive(Clone, Copy)]
enum Topic<'a> {
    Channel(&'a str),
    Pattern(&'a str),
}

/// One subscribed RESP3 connection, pinged while idle.
struct Subscription {
    conn: MultiplexedConnection,
    pushes: mpsc::UnboundedReceiver<PushInfo>,
    ping: tokio::time::Interval,
    /// The PING in flight, as a task of its own so that a caller may drop
    /// [`Subscription::next`] at any await without losing it.
    pong: Option<JoinHandle<Result<(), RedisStoreError>>>,
    options: RedisOptions,
}

/// A message: its channel and payload.
struct Message {
    channel: Vec<u8>,
    payload: Vec<u8>,
}

impl Subscription {
    async fn open(
        client: &redis::Client,
        options: &RedisOptions,
        topic: Topic<'_>,
    ) -> Result<Subscription, RedisStoreError> {
        let (push_tx, pushes) = mpsc::unbounded_channel::<PushInfo>();
        let mut conn = open(client, options, Some(push_tx)).await?;
        let ctx = crate::conn::ctx(options);
        let subscribed = match topic {
            Topic::Channel(c) => tokio::time::timeout(options.timeout, conn.subscribe(c)).await,
            Topic::Pattern(p) => tokio::time::timeout(options.timeout, conn.psubscribe(p)).await,
        };
        match subscribed {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(ctx.classify("SUBSCRIBE", e)),
            Err(_) => {
                return Err(RedisStoreError::Timeout {
                    target: options.target(),
                    after: options.timeout,
                })
            }
        }
        let mut ping = tokio::time::interval(options.timeout.min(MAX_PING_EVERY));
        ping.reset();
        Ok(Subscription {
            conn,
            pushes,
            ping,
            pong: None,
            options: options.clone(),
        })
    }

    /// The next message; an error once the connection failed. Cancel-safe.
    async fn next(&mut self) -> Result<Message, RedisStoreError> {
        let lost = |detail: &str| RedisStoreError::Unreachable {
            target: self.options.target(),
            detail: detail.into(),
            source: None,
        };
        loop {
            tokio::select! {
                push = self.pushes.recv() => match push {
                    Some(p) if p.kind == PushKind::Message || p.kind == PushKind::PMessage => {
                        let skip = usize::from(p.kind == PushKind::PMessage);
                        let mut data = p.data.into_iter().skip(skip);
                        let (channel, payload) = (data.next(), data.next());
                        if let (Some(channel), Some(payload)) = (bytes(channel), bytes(payload)) {
                            return Ok(Message { channel, payload });
                        }
                    }
                    Some(p) if p.kind == PushKind::Disconnection => {
                        return Err(lost("the subscription connection closed"));
                    }
                    Some(_) => {}
                    None => return Err(lost("the subscription connection ended")),
                },
                answered = wait(&mut self.pong), if self.pong.is_some() => {
                    self.pong = None;
                    answered?;
                }
                _ = self.ping.tick(), if self.pong.is_none() => {
                    let (mut conn, options) = (self.conn.clone(), self.options.clone());
                    self.pong = Some(tokio::spawn(async move {
                        let pong = tokio::time::timeout(
                            options.timeout,
                            redis::cmd("PING").query_async::<Value>(&mut conn),
                        )
                        .await;
                        match pong {
                            Ok(Ok(_)) => Ok(()),
                            Ok(Err(e)) => Err(crate::conn::ctx(&options).classify("PING", e)),
                            Err(_) => Err(RedisStoreError::Timeout {
                                target: options.target(),
                                after: options.timeout,
                            }),
                        }
                    }));
                }
            }
        }
    }
}

async fn wait(
    pong: &mut Option<JoinHandle<Result<(), RedisStoreError>>>,
) -> Result<(), RedisStoreError> {
    match pong {
        Some(p) => p.await.unwrap_or(Ok(())),
        None => std::future::pending().await,
    }
}

fn bytes(v: Option<Value>) -> Option<Vec<u8>> {
    match v? {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.into_bytes()),
        _ => None,
    }
}

/// Keeps a subscription to `channel` alive and hints `tx` on every message,
/// until `tx` closes (`Ok`) or the server refuses the subscription for good
/// (`Err`: a setting an operator must fix, a permission, credentials, TLS,
/// a server without RESP3; electors fall back to polling).
pub(crate) async fn run(
    client: redis::Client,
    options: RedisOptions,
    channel: String,
    tx: mpsc::Sender<()>,
) -> Result<(), RedisStoreError> {
    tenure::store::keep_hinting(
        &tx,
        |attempt| subscribed(&client, &options, &channel, &tx, attempt),
        |e| tracing::debug!(channel, error = %e, "Redis change feed lost; resubscribing"),
    )
    .await
}

/// One subscription: `Ok(())` once the receiver is gone, `Err` when the
/// connection failed.
async fn subscribed(
    client: &redis::Client,
    options: &RedisOptions,
    channel: &str,
    tx: &mpsc::Sender<()>,
    attempt: tenure::store::HintAttempt,
) -> Result<(), RedisStoreError> {
    let mut sub = Subscription::open(client, options, Topic::Channel(channel)).await?;
    attempt.connected();
    // Changes made while unsubscribed were not delivered: re-read once.
    if !tenure::store::send_hint(tx) {
        return Ok(());
    }
    loop {
        sub.next().await?;
        if !tenure::store::send_hint(tx) {
            return Ok(());
        }
    }
}

/// `prefix` as a glob pattern matching every channel (or key) that starts
/// with it.
pub(crate) fn pattern(prefix: &str) -> String {
    let mut p = String::with_capacity(prefix.len() + 1);
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            p.push('\\');
        }
        p.push(c);
    }
    p.push('*');
    p
}

/// What a message reports; `None` for one on a channel that names no group.
fn decode(prefix: &str, message: &Message) -> Option<Change> {
    let name = message.channel.strip_prefix(prefix.as_bytes())?;
    let group = GroupName::try_from(std::str::from_utf8(name).ok()?).ok()?;
    let written = (|| {
        let rest = message.payload.strip_prefix(b"1:")?;
        let colon = rest.iter().position(|b| *b == b':')?;
        // What a read would accept, or a hint (which makes the follower read
        // and see what is stored).
        let version = crate::script::version(&rest[..colon])?;
        let record = LeaseRecord::decode(&rest[colon + 1..]).ok()?;
        Some(Versioned {
            record,
            version: Version(version),
        })
    })();
    Some(match written {
        Some(current) => Change::Written { group, current },
        // An older tenure publishes an empty message; anything else that
        // does not parse is a hint too.
        None => Change::Hint { group },
    })
}

/// Subscribes one connection to every group's channel under `prefix` and
/// returns the feed (see the module docs). The feed reconnects once when
/// its connection fails, and then resyncs; if that fails too, it ends and
/// the engine polls until it subscribes again.
pub(crate) async fn watch(
    client: redis::Client,
    options: RedisOptions,
) -> Result<StoreFeed, RedisStoreError> {
    let prefix = options.prefix.clone();
    let topic = pattern(&prefix);
    let sub = Subscription::open(&client, &options, Topic::Pattern(&topic)).await?;
    let (tx, feed) = StoreFeed::channel(CAPACITY);
    tokio::spawn(async move {
        let mut relay = FeedRelay::new(tx);
        let mut sub = sub;
        loop {
            let Some(next) = relay.next(sub.next()).await else {
                return;
            };
            match next {
                Ok(message) => {
                    if let Some(change) = decode(&prefix, &message) {
                        if !relay.send(change) {
                            return;
                        }
                    }
                }
                Err(e) => {
                    let reopen = || Subscription::open(&client, &options, Topic::Pattern(&topic));
                    let lost = |again: RedisStoreError| {
                        tracing::debug!(error = %again, "Redis change feed lost; the engine polls until it subscribes again");
                    };
                    let Some(again) = relay.reconnect(reopen, lost).await else {
                        return;
                    };
                    tracing::debug!(error = %e, "Redis change feed re-subscribed; resyncing every group");
                    sub = again;
                }
            }
        }
    });
    Ok(feed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenure_testkit::held_by;

    fn message(channel: &[u8], payload: &[u8]) -> Message {
        Message {
            channel: channel.to_vec(),
            payload: payload.to_vec(),
        }
    }

    #[test]
    fn patterns_escape_the_prefix() {
        assert_eq!(pattern("tenure:"), "tenure:*");
        assert_eq!(pattern("a*b?[c]\\:"), "a\\*b\\?\\[c\\]\\\\:*");
    }

    #[test]
    fn messages_carry_records_and_anything_else_is_a_hint_or_nothing() {
        let rec = held_by("a", 3);
        let mut payload = b"1:1700000000000001:".to_vec();
        payload.extend(rec.encode());
        let g = GroupName::new("shard:7").unwrap();
        assert_eq!(
            decode("tenure:", &message(b"tenure:shard:7", &payload)),
            Some(Change::Written {
                group: g.clone(),
                current: Versioned {
                    record: rec.clone(),
                    version: Version(1_700_000_000_000_001),
                },
            })
        );
        let hint = Some(Change::Hint { group: g });
        for junk in [
            &b""[..],
            b"1:",
            b"1:x:{}",
            b"1:5:not json",
            b"2:5:{}",
            b"\xff\xfe",
            b"1:-1:{}",
        ] {
            assert_eq!(decode("tenure:", &message(b"tenure:shard:7", junk)), hint);
        }
        // Every prefix of a good payload is a hint, never a record.
        for cut in 0..payload.len() {
            assert!(matches!(
                decode("tenure:", &message(b"tenure:shard:7", &payload[..cut])),
                Some(Change::Hint { .. })
            ));
        }
        // Channels that name no group: the marker's, another prefix's, bad names.
        for channel in [&b"tenure:"[..], b"other:x", b"tenure:\x01", b"tenure:\xff"] {
            assert_eq!(decode("tenure:", &message(channel, &payload)), None);
        }
    }
}
