//! Redis lease store for [tenure]: leader election with fencing
//! tokens on the Redis you already run.
//!
//! ```no_run
//! use std::time::Duration;
//! use tenure::Elector;
//! use tenure_redis::RedisStore;
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = RedisStore::connect("redis://app:secret@10.0.0.5:6379/0?prefix=tenure:").await?;
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
//! | key | type | contents |
//! |---|---|---|
//! | `{prefix}{group}` (e.g. `tenure:nightly-billing`) | hash | `v`: the version, a decimal integer; `record`: the encoded [`LeaseRecord`](tenure::LeaseRecord) (JSON) |
//! | `{prefix}` (the bare prefix, e.g. `tenure:`) | hash | the data-set marker: `floor` (token floor, `0` for a data set adopted as new) and `since_ms` (server time it was written) |
//!
//! The group's pub/sub channel has the same name as its key. Keys never
//! expire and are never deleted: a release writes a record without a holder,
//! so the fencing token survives. The group name is used verbatim (any
//! UTF-8, binary-safe). A script touches the marker and the groups' keys
//! together, so Redis Cluster is not supported (they would have to share a
//! hash slot).
//!
//! # Operations
//!
//! Every operation is one Lua script run with `EVALSHA` (loaded again with
//! `SCRIPT LOAD` after a restart empties the script cache), so it is atomic:
//!
//! * **read** checks the keys' types and returns `v` and `record` of each
//!   group asked for;
//! * **compare-and-swap** goes through its requests in order and, for each
//!   on its own, writes `record` and the expected version plus one (the
//!   client adds it) as `v` only if `v` equals the expected version (or,
//!   expecting no record, only if the key does not exist), then
//!   `PUBLISH`es `1:<version>:<record>` on the group's channel. A key of
//!   another type is reported, never overwritten.
//!
//! A record is created with the server's clock in microseconds as its
//! version, so a version is never reused, not even after Redis lost its
//! data: a delayed write carrying a version from before the loss cannot
//! match a record created after it.
//!
//! # Many groups
//!
//! Electors built from clones of one [`RedisStore`] share one
//! [`tenure::Engine`]: a batch of reads, or of compare-and-swaps, is one
//! script call (per 4096 groups) on the store's one multiplexed
//! connection, which pipelines the engine's concurrent batches. Each
//! compare-and-swap in a batch stands on its own (one group's conflict
//! never undoes another's write), and two of one group apply in order.
//!
//! [`LeaseView::watch`](tenure::LeaseView::watch) subscribes one RESP3
//! connection to the pattern `<prefix>*` (glob characters in the prefix
//! escaped): every group's writes, each carrying its record, so followers
//! learn of renewals without a read. After that connection is lost the
//! feed subscribes again and every group is read once (Redis forgets
//! messages sent to a subscriber that is away). An ACL user needs
//! `+psubscribe` for it, and the channel permission must cover the pattern
//! literally (`&<prefix>*`); without them each group subscribes on a
//! connection of its own.
//!
//! Whoever may publish on the prefix's channels may send anything there:
//! a message that does not parse is a hint to read its group (or is
//! dropped if its channel names none), but a well-formed one is believed
//! until the group's next real write, so give `&<prefix>*` only to users
//! you would also let write the keys.
//!
//! # Instant hand-over
//!
//! [`LeaseView::changes`](tenure::LeaseView::changes) subscribes to the
//! group's channel on a dedicated RESP3 connection. A waiting candidate
//! re-reads as soon as the leader's release is published: one round trip,
//! instead of a poll. The subscription is renewed after a disconnection,
//! with back-off, and hints once after each (re)subscription, since Redis
//! forgets messages sent while a subscriber is away.
//!
//! # Connection loss
//!
//! Commands share one multiplexed connection per [`RedisStore`] (clones
//! share it too); when it breaks, or a request is abandoned because the
//! elector's operation timeout fired, the next command reconnects, with
//! exponential back-off from 50 ms to 2 s between failed attempts. The
//! elector keeps trying to renew until its term's deadline and steps down
//! on time; nothing in this crate extends a term.
//!
//! # When Redis loses its data
//!
//! A Redis without persistence (`--save "" --appendonly no`) restarts
//! empty, and so does one after `FLUSHALL` or a failover to an empty
//! replica. Every lease is gone, and with it every fencing token. Two
//! things would go wrong if a missing key simply meant "never written":
//!
//! 1. **Two leaders.** The old leader holds its term until its deadline
//!    (it only learns of the loss at its next renewal), while a candidate
//!    reading an empty key would be elected at once.
//! 2. **Tokens going back.** The next term would get token 1, below tokens
//!    that resources have already seen, so they would refuse the new leader
//!    (or worse, accept a token reused from before).
//!
//! No key in the same Redis can remember a high-water mark across such a
//! loss, since it is lost too. So tenure keeps a **data-set marker** at the
//! bare prefix and treats a Redis without one as one that lost its data:
//!
//! * The first write that finds no marker writes one, with the server's
//!   time as `since_ms` and as `floor` (in microseconds), and every lease
//!   creation is refused with [`RedisStoreError::Quarantine`] (a transient
//!   error; electors retry) until the **quarantine** has passed:
//!   twice the term of the lease being created, or the `quarantine` URL
//!   option if longer. Any leader elected before the loss has stopped by
//!   then, since its term ends at most one term after its last renewal,
//!   which happened before the loss. An old leader learns of the loss at
//!   its next renewal and steps down at once.
//! * In such a **recovered** data set, a missing record reads as a record
//!   released at token `floor`, so the next term gets `floor + 1`: the
//!   server's clock in microseconds when the loss was found. That is above
//!   every token issued before the loss (a token rises by one per term,
//!   and far fewer terms than microseconds pass between two losses), as
//!   long as the server's wall clock does not go back across a restart.
//!
//! A brand-new Redis looks exactly like one that lost its data, so the
//! first election on it also waits out the quarantine, and its tokens start
//! at the clock value. An operator who knows the server is new can call
//! [`RedisStore::adopt_empty`] before the first election: missing records
//! then mean "never written" and tokens start at 1.
//!
//! What this does not cover, and how to avoid it:
//!
//! * **Rolled-back data**: a restart from an RDB snapshot or an
//!   `appendfsync everysec` log, or a failover to a replica that lagged
//!   (replication is asynchronous), brings back an older record with the
//!   marker, so a token may be issued twice. For fencing you can rely on,
//!   run Redis with `appendonly yes` and `appendfsync always` on one master,
//!   or use a consensus store (etcd) instead.
//! * **Two masters**: a replica promoted (`REPLICAOF NO ONE`, or by
//!   Sentinel) while the old master still runs and some candidates still
//!   reach it. Each master then grants and renews leases on its own: two
//!   leaders, one per master. Stop the old master (or make it a replica of
//!   the new one) as the replica is promoted. `min-replicas-to-write 1`
//!   with `min-replicas-max-lag` makes a master cut off from its replicas
//!   refuse writes only after that lag (plus the replicas' one-second
//!   acknowledgement period): until then a leader still renewing there
//!   overlaps the new master's leader. It shortens the window, never
//!   closes it, and a replica still following the old master keeps it
//!   writable. (Not tested: no test runs a replica.)
//! * **Deleting or evicting one key**: the marker stays and the group starts
//!   over at token 1. Never `DEL` tenure's keys (release a lease through
//!   tenure instead), and keep `maxmemory-policy` at `noeviction` or a
//!   `volatile-*` policy; [`RedisStore::connect`] refuses an `allkeys-*`
//!   policy when it is allowed to read it.
//!
//! # Fencing what the leader writes to Redis
//!
//! [`fence::fenced_set`] writes keys only if a fence key has not admitted a
//! higher token than the writer's, in one Lua script; `examples/fencing_redis.rs`
//! shows a leader whose term ended refused by it, and `docs/fencing.md` in
//! the repository explains the recipe.
//!
//! # Errors and secrets
//!
//! Wrong credentials, missing ACL permissions, TLS failures, a read-only
//! replica and keys of the wrong type are [`RedisStoreError`]s naming the
//! fix; as [`StoreError`](tenure::StoreError)s they are `Misconfigured`.
//! The password is parsed out of the URL by this crate and never appears
//! in an error, a log line, `Debug` output or
//! [`describe`](tenure::LeaseView::describe).
//!
//! An ACL user needs: `~{prefix}* &{prefix}* +evalsha +eval +script|load
//! +subscribe +psubscribe +ping +hset +hget +hmget +hincrby +type +time +publish +scan`
//! (`+config|get` is optional: it lets [`RedisStore::connect`] check the
//! eviction policy; `+pubsub|numpat +pubsub|numsub` are optional: with
//! them a write nobody subscribes to is not published, which saves the
//! server about a third of a renewal's work when no process follows, as
//! when every process leads all its groups).
//!
//! Whether anybody listens is asked of the server the write runs on: a
//! subscriber on a replica (which receives the primary's publishes) is
//! not counted, so subscribe to tenure's channels on the primary.

pub mod baseline;
mod conn;
mod error;
mod feed;
pub mod fence;
mod options;
mod script;
mod store;

pub use error::RedisStoreError;
pub use options::{RedisOptions, DEFAULT_PREFIX, DEFAULT_TIMEOUT};
pub use store::RedisStore;
