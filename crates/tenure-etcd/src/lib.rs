//! etcd lease store for [tenure]: leader election with fencing
//! tokens on the etcd cluster you already run.
//!
//! ```no_run
//! use std::time::Duration;
//! use tenure::Elector;
//! use tenure_etcd::EtcdStore;
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = EtcdStore::connect("etcd://10.0.0.5:2379,10.0.0.6:2379,10.0.0.7:2379").await?;
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
//! One key per group: `{prefix}{group}` (`tenure/nightly-billing` with the
//! default prefix `tenure/`), whose value is the encoded
//! [`LeaseRecord`](tenure::LeaseRecord) (JSON). The group name is used
//! verbatim (any UTF-8). The key carries no etcd lease and is never
//! deleted: a release writes a record without a holder, so the fencing
//! token survives.
//!
//! The record's version is the key's `mod_revision`. etcd revisions are
//! cluster-wide, only ever rise, and survive restarts (the data directory
//! and Raft log hold them) and compaction, so a version is never reused.
//!
//! # Operations
//!
//! * **read**: a linearizable `Range` of the key.
//! * **compare-and-swap**: one `Txn`: if `mod_revision(key) == expected`
//!   (expecting no record: `create_revision(key) == 0`), `Put` the record.
//!   The transaction's revision is the new version.
//! * **changes**: a `Watch` on the key; a waiting candidate re-reads as
//!   soon as the leader's release is committed, one round trip instead of
//!   a poll. The watch is re-created with back-off when its stream breaks,
//!   and hints once each time etcd confirms it. (What an
//!   [`Observer`](tenure::Observer) uses; electors use the feed below.)
//!
//! # Many groups
//!
//! Electors built from clones of one [`EtcdStore`] share one engine
//! ([`Running::engine`](tenure::store::Running::engine)), which
//! batches their operations:
//!
//! * **compare-and-swap of many groups**: up to 64 groups in one `Txn`,
//!   each as a nested `Txn` with its own compare and put. The outer `Txn`
//!   has no condition, so each group applies or conflicts on its own (a
//!   flat `Txn` of several groups' compares would be all-or-nothing: one
//!   group's conflict would undo the others' renewals). Every group it
//!   writes gets the outer `Txn`'s revision as its new version. Requests
//!   go out concurrently, as streams of the client's one HTTP/2 channel, at
//!   most 128 at once per store handle; a group written twice in one batch
//!   goes in successive requests, in order (etcd refuses a `Txn` that puts
//!   one key twice). One `Txn` per group instead costs etcd a Raft entry
//!   and a gRPC exchange per renewal: at 10,000 groups (3,000 renewals a
//!   second) on a 2-core machine that fell behind the renewals' deadlines.
//! * **read of many groups**: read-only `Txn`s of up to 64 `Range` gets,
//!   each a linearizable snapshot, in flight together.
//!
//! Both need etcd 3.3 or later (nested `Txn`s) with `--max-txn-ops` at 65
//! or more (the default is 128).
//!
//! etcd releases before the 2026 fix of its nested-`Txn` authorization
//! bypass (etcd-io/etcd#21689) do not check permissions inside nested
//! `Txn`s: on those, a user whose role was revoked still gets its batched
//! renewals through (its reads, single writes and watches are refused).
//! Revoking tenure's role there does not stop its electors: stop the
//! processes, or upgrade etcd.
//!
//! # Change feed
//!
//! [`LeaseView::watch`](tenure::LeaseView::watch) is ONE watch on the key
//! prefix for all groups. Its events carry the key-value, so a follower
//! learns each renewal (record and `mod_revision`) without reading. A
//! broken watch resumes from the revision after the last it delivered, so
//! nothing is missed; if etcd compacted that revision away (or its
//! revisions went backwards), the feed asks every group to read once
//! ([`Change::Resync`](tenure::store::Change::Resync)) and watches from now. Keys
//! under the prefix that are no group name are skipped; a value tenure
//! cannot decode, or a deleted key, makes the group read (and report what
//! it found). With an empty prefix the watch covers the whole key space:
//! give tenure a prefix of its own.
//!
//! # Connection loss and restarts
//!
//! The gRPC channel reconnects on its own (to any of the endpoints);
//! requests are bounded by the `timeout` option, and HTTP/2 keep-alive
//! pings find a silent connection. Every request and watch requires a
//! leader (`hasleader`): a member cut off from its quorum refuses them
//! instead of serving a stale read or holding a silent watch open, so the
//! client moves on. The elector keeps trying to renew until
//! its term's deadline and steps down on time. After an etcd restart the
//! data (and so every lease and token) is still there; auth tokens, which
//! a restart invalidates, are renewed automatically. Restoring a snapshot
//! (`etcdctl snapshot restore`) rolls revisions back: stop every candidate
//! for at least one term before doing that.
//!
//! # On a cluster
//!
//! Give the URL every member's client endpoint
//! (`etcd://m1:2379,m2:2379,m3:2379`): the client moves among them.
//!
//! **What holds across a member's failure.** Every read is linearizable
//! (etcd confirms it with the Raft leader before answering) and every
//! request requires a leader (`hasleader`), so a member that lost its
//! leader (partitioned from its quorum, frozen, or while the cluster
//! elects) refuses instead of answering from its own, perhaps stale,
//! state; a compare-and-swap commits on a majority or not at all. So the
//! failure of a minority of members (the Raft leader included) never gives
//! two valid terms, and tokens only rise. Tested with real `tenure run`
//! processes on a 3-member cluster, their CMDs writing to a resource that
//! refuses lower tokens, in the repository's
//! `crates/tenure-cli/tests/cluster_etcd.rs`:
//! `sigkill_of_the_leading_member_never_gives_two_terms` (the leading
//! member SIGKILLed while tenure's leader renews, restarted 3 s later,
//! three times) and `a_member_cut_off_or_frozen_never_gives_two_terms`
//! (each member cut off from tenure's clients by a proxy, then
//! SIGSTOPped), and `a_member_partitioned_from_its_quorum_never_gives_two_terms`
//! (each member of a private cluster cut off from its peers, both ways,
//! while it still answers tenure's clients: it stops serving reads).
//!
//! **Whether tenure's term survives it** is a matter of time, not safety:
//! the cluster must elect a new leader (etcd's election timeout, 1 s by
//! default, plus a round) and the client reach a member that has one
//! within what is left of the term. A killed member's connections reset
//! and the client moves at once; a silent one (frozen, or a network that
//! drops packets) holds a request until the `timeout` option, 5 s by
//! default. Keep `timeout` below half the term (`?timeout=1s` with a 2 s
//! term) so that a renewal stuck on a silent member is tried on another
//! in time; otherwise the leader loses its term and another candidate is
//! elected once it has expired. A member that comes back from a
//! partition with a higher Raft term makes the cluster elect again (no
//! leader for another election timeout) unless members run with
//! `--pre-vote` (the default from etcd 3.5; etcd 3.4 has it off). The
//! repository's `docs/benchmarks.md` ("Clustered stores") has the
//! measured gaps and how often the term moved.
//!
//! **What breaks fencing** (none of it is tested; each undoes writes the
//! cluster had acknowledged, so a record, and the token in it, can go
//! back, and a token already handed out be handed out again):
//!
//! * restoring a snapshot (`etcdctl snapshot restore`), or re-forming the
//!   cluster from one member with `--force-new-cluster` when that member
//!   lagged the others (disaster recovery from a minority);
//! * losing a majority's recent writes at once: `--unsafe-no-fsync`
//!   (etcd 3.5 and later), or disks that acknowledge a write before it is
//!   durable, followed by a power loss of most members.
//!
//! Before any of those, stop every candidate for at least one term.
//! Reads with `--consistency=s` (serializable, served from the member's
//! own state) may show an older holder; tenure never makes them, but a
//! tool that decides who may act from one is not fenced.
//!
//! # Fencing what the leader writes to etcd
//!
//! [`fence::fenced_txn`] applies writes in a transaction only if a fence
//! key has not admitted a higher token than the writer's;
//! `examples/fencing_etcd.rs` shows a leader whose term ended refused by it, and
//! `docs/fencing.md` in the repository explains the recipe.
//!
//! # Errors and secrets
//!
//! Wrong credentials, authentication required, missing permissions, TLS
//! failures and unreachable endpoints are [`EtcdStoreError`]s naming the
//! fix; as [`StoreError`](tenure::StoreError)s the first four are
//! `Misconfigured`. The password is parsed out of the URL by this crate and
//! never appears in an error, a log line, `Debug` output or
//! [`describe`](tenure::LeaseView::describe).
//!
//! With authentication enabled, the user needs a role with `readwrite` on
//! the prefix: `etcdctl role grant-permission tenure --prefix=true
//! readwrite tenure/`.

mod error;
mod feed;
pub mod fence;
mod options;
mod store;
mod watch;

pub use error::EtcdStoreError;
pub use options::{EtcdOptions, DEFAULT_PREFIX, DEFAULT_TIMEOUT};
pub use store::EtcdStore;
