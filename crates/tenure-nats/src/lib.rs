//! NATS JetStream key-value lease store for [tenure]: leader election with
//! fencing tokens on the NATS servers you already run.
//!
//! ```no_run
//! use std::time::Duration;
//! use tenure::Elector;
//! use tenure_nats::NatsStore;
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = NatsStore::connect("nats://10.0.0.5:4222,10.0.0.6:4222/tenure").await?;
//! let elector = Elector::builder(store, "nightly-billing")
//!     .candidate_id("host-a")
//!     .term(Duration::from_secs(10))
//!     .start()?;
//! let term = elector.wait_for_leadership().await?;
//! println!("leading with fencing token {}", term.token());
//! elector.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! # Key layout
//!
//! One key per group in the bucket the URL names (`tenure` by default,
//! created with history 1 and file storage if missing, refusing message
//! deletion, purges and roll-ups through the API), whose value is
//! the encoded [`LeaseRecord`](tenure::LeaseRecord) (JSON). Key-value keys
//! allow only `A-Z a-z 0-9 - _ = / .`, while a group name is any UTF-8, so
//! names are encoded reversibly: `tenure.` then the name's `/`-separated
//! segments as `.`-separated tokens, each byte other than `A-Z a-z 0-9 - _`
//! written `=XX` (`nightly-billing` is `tenure.nightly-billing`,
//! `set/members/h 1` is `tenure.set.members.h=201`). Keys that are no
//! such encoding are not tenure's and are ignored. A key is never deleted:
//! a release writes a record without a holder, so the fencing token
//! survives.
//!
//! The record's version is the key's revision: the sequence of its last
//! message in the bucket's stream. Sequences only ever rise and survive
//! restarts (file storage), so a version is never reused.
//!
//! **Never delete or purge a group's key, purge the stream, or delete and
//! recreate the bucket by hand**: the group's last fencing token goes with
//! its record. To clear a group, use `tenure release --force` (which keeps
//! the token). What tenure does about each:
//!
//! * `nats kv del` (an ordinary publish no bucket setting refuses) and
//!   `nats kv purge` leave a marker on the key. A marker never reads as "no
//!   record", which would start the next term's token again at 1 while the
//!   old holder may still act: reads, batch reads and writes of the group
//!   fail with [`StoreError::Record`](tenure::StoreError::Record) naming
//!   the key and the way back (stop the group's candidates for a term, then
//!   elect under another name, or remove the marker by hand if the tokens'
//!   consumers accept tokens from 1 again). The change feed hints, so the
//!   elector reads and reports that error. A `KV-Operation` this build does
//!   not know is treated the same way in reads and in the feed.
//! * Buckets tenure creates refuse `nats kv purge` (no roll-ups),
//!   `nats stream purge` and `nats stream rmm` (`deny_purge`,
//!   `deny_delete`). A purge of the whole stream would leave no marker and
//!   send every token back unseen; connecting to a bucket that allows it
//!   (one made by `nats kv add`, or by tenure before this rule) logs a
//!   warning naming the fix.
//! * Deleting the bucket, or restoring an older copy, starts its
//!   sequences and tokens again: stop every candidate for at least one
//!   term first.
//!
//! Treat permission to publish to, or to answer requests on, the bucket's
//! subjects (`$KV.<bucket>.>`) as permission to write leases.
//!
//! # Operations
//!
//! * **read**: the stream's last message on the key, through the stream's
//!   leader (not a direct get, which a replica may answer from behind). A
//!   deletion or purge marker is an error (see above), never "no record".
//! * **compare-and-swap**: `update(key, value, revision)`, a publish with
//!   `Nats-Expected-Last-Subject-Sequence`: the server refuses it ("wrong
//!   last sequence", a conflict) unless the key's last revision is the
//!   expected one. The first write expects revision 0 (no message yet); a
//!   key holding a marker is never written over (the error above). A
//!   write whose acknowledgement does not come in
//!   time, or whose connection is lost before it does, is reported as
//!   [`StoreError::Timeout`](tenure::StoreError::Timeout) or
//!   [`Unavailable`](tenure::StoreError::Unavailable), never as a conflict:
//!   it may have been applied.
//! * **list** (sharded sets): the stream lists the subjects under the
//!   prefix's complete segments (`tenure.set.members.>` for
//!   `set/members/`), then each group is read.
//! * **changes**: a watch of the group's key (what an
//!   [`Observer`](tenure::Observer) uses; electors use the feed below).
//!
//! # Many groups
//!
//! Electors built from clones of one [`NatsStore`] share one engine
//! ([`Running::engine`](tenure::store::Running::engine)). NATS has
//! no multi-key compare-and-swap, so a batch is single requests in flight
//! together on the one connection, which JetStream answers as a pipeline:
//! at most 256 at once per store handle, a group's writes one after
//! another in the batch's order.
//!
//! # Change feed
//!
//! [`LeaseView::watch`](tenure::LeaseView::watch) is ONE watch (an
//! ordered consumer) of `tenure.>`, read as raw messages so that a marker
//! is classified as a read classifies it. Its messages carry the value and the
//! revision, so a follower learns each renewal without reading. After a
//! reconnect or a server restart the client resumes the watch from the
//! last revision it delivered; whenever the watch reports trouble or is
//! created again, every group also reads once
//! ([`Change::Resync`](tenure::store::Change::Resync)).
//!
//! # Connection loss and restarts
//!
//! The client reconnects on its own, for ever, to any of the URL's
//! servers; requests are bounded by the `timeout` option. After a server
//! restart the bucket (and so every lease and token) is still there with
//! file storage. tenure refuses buckets that would lose leases: memory
//! storage, a `max_age` (entries that expire), a size limit that discards
//! old entries, a mirror. A history of more than one value per key is
//! harmless (reads and writes use the key's last message) and accepted.
//! Deleting the bucket (or restoring an older copy) sends tokens back:
//! stop every candidate for at least one term before doing that.
//!
//! A write queued while the client is disconnected goes out when it
//! reconnects, even though tenure has already reported it timed out; it
//! still applies only if the key's revision is unchanged, which the
//! elector's timing allows for (a write reported as failed may apply).
//!
//! # Errors and secrets
//!
//! Wrong credentials, missing authentication, refused permissions, a
//! server without JetStream, an unsafe bucket, TLS failures and
//! unreachable servers are [`NatsStoreError`]s naming the fix; as
//! [`StoreError`](tenure::StoreError)s the operator's problems are
//! `Misconfigured`. The password or token is parsed out of the URL by this
//! crate and never appears in an error, a log line, `Debug` output or
//! [`describe`](tenure::LeaseView::describe).
//!
//! With authorization enabled, the user needs to publish to `$JS.API.>`
//! and `$KV.<bucket>.>` and to subscribe to `_INBOX.>`.

mod error;
mod feed;
mod keys;
mod marker;
mod options;
mod store;

pub use error::NatsStoreError;
pub use options::{NatsOptions, DEFAULT_BUCKET, DEFAULT_TIMEOUT};
pub use store::NatsStore;
