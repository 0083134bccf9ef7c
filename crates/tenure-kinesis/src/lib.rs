//! Kinesis for tenure: a stream's shards as the catalog of a sharded set,
//! and a consumer on it with fenced checkpoints in DynamoDB.
//!
//! [`KinesisConsumer`] reads every shard of a stream with a set of
//! consumers sharing one lease store: each shard is held by one member at
//! a time, read from its checkpoint (`GetShardIterator`
//! `AFTER_SEQUENCE_NUMBER`, or `TRIM_HORIZON`), page by page to a
//! handler; the checkpoint is saved after each page under the term's
//! fencing token, so a deposed holder's late checkpoint is refused
//! ([`CheckpointError::Stale`]); a closed shard read to its end is
//! finished, which lets its children start. See [`checkpoint`] for the
//! table's layout.
//!
//! [`KinesisShards`] implements [`tenure::shards::ShardSource`] with
//! `ListShards` (paged). Give it to
//! [`ShardsBuilder::catalog`](tenure::ShardsBuilder::catalog) and the set
//! follows the stream as it is resharded, without restarting any member:
//!
//! * each shard id is a shard of the set, held by one member at a time
//!   under its own lease and fencing token;
//! * a child of a `SplitShard` names its parent, a child of a
//!   `MergeShards` names both; a child is assigned only once its parents
//!   are out of the catalog, so records are read in order across a
//!   reshard. The holder of a parent reads it to its end (`GetRecords`
//!   returns no `NextShardIterator`) and marks it finished with
//!   [`Shards::mark_finished`](tenure::Shards::mark_finished); the set's
//!   catalog leader then drops it, and the children become ready.
//!
//! The source is opened from a URL,
//! `kinesis://STREAM?region=..&endpoint=..` (see [`KinesisOptions`]), or
//! from an SDK client built by the caller
//! ([`KinesisShards::from_client`]). Region, credentials and endpoint
//! come through the standard AWS chain unless the URL gives them. The
//! HTTPS client is rustls with ring, never OpenSSL. The SDK's own retries
//! are off: [`KinesisConsumer`] backs off from throttling and unreachable
//! endpoints itself, and the catalog leader lists again at its next retry.
//!
//! Errors are [`KinesisError`]s: a missing stream
//! ([`StreamNotFound`](KinesisError::StreamNotFound)), a stream being
//! resharded ([`StreamBusy`](KinesisError::StreamBusy)), throttling, an
//! unreachable endpoint; the catalog leader keeps the published catalog
//! on any of them and lists again at its next refresh. No message holds a
//! credential.

pub mod checkpoint;
mod consumer;
mod error;
mod options;
mod source;

pub use checkpoint::{CheckpointError, Checkpoints};
pub use consumer::{
    ConsumerError, KinesisConsumer, KinesisConsumerBuilder, Record, DEFAULT_BATCH, DEFAULT_IDLE,
    DEFAULT_REFRESH, MIN_IDLE,
};
pub use error::KinesisError;
pub use options::{KinesisOptions, DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE};
pub use source::{KinesisShards, MAX_LISTED_SHARDS};
