//! ZooKeeper lease store for [tenure]: leader election with fencing tokens
//! on the ZooKeeper ensemble you already run (the store behind Curator).
//!
//! ```no_run
//! use std::time::Duration;
//! use tenure::Elector;
//! use tenure_zookeeper::ZkStore;
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = ZkStore::connect("zk://10.0.0.5:2181,10.0.0.6:2181,10.0.0.7:2181/services/leases").await?;
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
//! # Node layout
//!
//! One persistent node per group, a child of the prefix node (the URL's
//! path, `/tenure` by default): `/tenure/nightly-billing`, whose data is
//! the encoded [`LeaseRecord`](tenure::LeaseRecord) (JSON). A group name
//! becomes one node name: `/` (sharded sets use it), `%`, the names `.` and
//! `..`, and the characters ZooKeeper refuses in a path (controls, the
//! private use area, and everything beyond the Basic Multilingual Plane,
//! which Java sees as surrogates) are %-escaped: group `set/members/a` is
//! node `set%2Fmembers%2Fa`. The nodes carry no session (not ephemeral) and
//! tenure never deletes them: a release writes a record without a holder,
//! so the fencing token survives. Each group node has one empty child, its
//! **guard**, named after the node's `czxid` (`czxid-4294967301`), made by
//! the first write over the node. The prefix node (and any missing
//! ancestor) is created on the first write.
//!
//! A record's version is the node's `mzxid`, the zxid of its last write.
//! Zxids only rise (across writes, leader elections and restarts of an
//! ensemble that keeps its data), so a version is never reused.
//!
//! # A node deleted by hand
//!
//! To clear a group, use `tenure release --force` (which keeps the
//! token). A group node deleted anyway (`deleteall` in zkCli: the guard
//! makes a plain `delete` fail), and perhaps created again, by hand or by
//! a candidate, cannot break the lease:
//!
//! * **No stale write applies.** ZooKeeper conditions a write only on the
//!   node's `dataVersion`, which a node created again starts again at 0,
//!   so a handle that remembers data version 5 of the old node could
//!   replace the new one once it got there too. So every write is one
//!   `multi` that also checks that the guard of the incarnation the
//!   version was read from exists (`czxid` is never reused): a node
//!   created again has no such guard, and the write is a conflict. The
//!   guard is made by the first write that finds none (a new node, one
//!   written by an older tenure or by hand), only once a read shows the
//!   node is still the incarnation it is for, in one round trip with
//!   another read of the node, and deleted at once if the node turns out
//!   to be another incarnation by then.
//! * **Tokens never go back.** Once a child of the prefix node was ever
//!   deleted (its `cversion`, raised by each child created or deleted,
//!   exceeds its `numChildren`), a missing group reads as a record released
//!   at the token floor, the prefix node's `pzxid` (the zxid of the last
//!   child created or deleted), and its version is that zxid. The next term
//!   gets a token above every token the deleted node held, since a token,
//!   rising by one per term, never exceeds the zxid of the write that
//!   stored it. Every group missing under that prefix node reads so (the
//!   prefix node cannot tell which child went), so their tokens start at
//!   the floor rather than at 1.
//!
//! What remains: an old leader keeps leading until its next renewal
//! conflicts (at most one renewal interval), while a candidate that finds
//! the node gone is elected at once; and a read that saw "never written" or
//! a floor just before a deletion may still create the node with a token
//! from before it (one round trip's window). Deleting the prefix node
//! itself (`deleteall /tenure`) erases the mark too: stop every candidate
//! for a term first, as for restoring an old snapshot.
//!
//! # Operations
//!
//! * **read**: `getData`, served by the server the session is connected to
//!   (sequentially consistent, not linearizable: a lagging follower may
//!   answer with an older record). That can only delay a takeover, never
//!   make it unsafe: every write is conditional, and ordered by the leader.
//! * **compare-and-swap**: expecting no record, `create` (refused with
//!   `NodeExists` if the node exists); expecting a version, one `multi` of
//!   `check` (the guard of the node's incarnation exists) and `setData`
//!   with the node's data version as of that `mzxid` (refused with
//!   `BadVersion` if anything wrote since, `NoNode` if the node was
//!   created again); expecting a token floor, `create`. Each handle
//!   remembers the data version and `czxid` of the last `mzxid` it saw of
//!   each group (from reads, writes and the feed), so a renewal is one
//!   request; a version it has not seen costs a read first.
//! * **changes** (what an [`Observer`](tenure::Observer) uses): a one-shot
//!   data watch on the group's node, armed again after every event and on
//!   every new session, and only then hinted.
//! * **list** (sharded sets): the prefix node's children, filtered by
//!   name, read with `multiRead`. It reads the names of every group under
//!   the prefix node, so give each sharded set's store its own prefix node
//!   when a store holds tens of thousands of groups (a `getChildren` reply
//!   is bounded by the client's and server's `jute.maxbuffer`, 1 MiB by
//!   default: some 30,000 names of 30 bytes).
//!
//! # Many groups
//!
//! Electors built from clones of one [`ZkStore`] share one session and one
//! engine ([`Running::engine`](tenure::store::Running::engine)),
//! which batches their operations:
//!
//! * **compare-and-swap of many groups**: one request per group, pipelined
//!   on the session's connection (at most 256 in flight per handle);
//!   ZooKeeper answers them in order. Not ZooKeeper's `multi`: it is
//!   all-or-nothing, and one group's conflict must not undo another's
//!   renewal. A group written twice in one batch is written in order.
//! * **read of many groups**: `multiRead` requests of up to 128 nodes
//!   (ZooKeeper 3.6+; each node answered on its own), in flight together.
//!
//! # Change feed
//!
//! [`LeaseView::watch`](tenure::LeaseView::watch) is ONE persistent
//! recursive watch (`addWatch`, ZooKeeper 3.6 and later) on the prefix
//! node, for every group: it stays armed after it fires, so nothing is lost
//! between an event and re-arming, and one watch covers every group
//! including ones created later. (A child watch plus a one-shot data watch
//! per group would cost a watch per group and a re-arm request per
//! renewal.) ZooKeeper's events carry no data, so the feed reads the nodes
//! that changed, those whose events arrived together in one `multiRead`,
//! and reports [`Change::Written`](tenure::store::Change::Written) with record
//! and version: followers learn of each renewal without a read of their
//! own.
//!
//! A persistent watch does not catch up after a reconnect (ZooKeeper does
//! not replay what it missed, ZOOKEEPER-4698), and zookeeper-client 0.11
//! does not even register it again on the new connection. So after every
//! reconnect the feed arms the watch again and sends
//! [`Change::Resync`](tenure::store::Change::Resync) (every group reads once);
//! after the session ended, the same on a new session. Nodes under the
//! prefix that are no group of tenure's are skipped; a deleted node or one
//! whose data does not decode is a hint (the engine reads it and reports
//! what it finds). On a server before 3.6, `watch()` returns `None` and
//! the engine polls.
//!
//! The client queues a watch's events without bound, so the feed never
//! waits for its reader: it relays changes through a
//! [`FeedRelay`](tenure::store::FeedRelay), and when the feed is full (16,384
//! changes) it drops them for one [`Change::Resync`](tenure::store::Change::Resync)
//! sent once there is room. A slow reader costs a resync, never memory.
//!
//! # Connection loss and session expiry
//!
//! Within a session the client reconnects by itself, to any host of the
//! ensemble, and one-shot watches survive. A request in flight when the
//! connection broke (or went silent for longer than `timeout`) may have
//! been applied: it fails as [`StoreError::Unavailable`](tenure::StoreError)
//! saying so, and one that got no reply within `timeout` as
//! [`StoreError::Timeout`](tenure::StoreError) — never as a conflict, and
//! never as applied. The elector then reads to learn what happened. Only
//! ZooKeeper's own refusals (`NodeExists`, `BadVersion`, `NoNode`) are
//! conflicts.
//!
//! A session that ended (cut off for longer than `session_timeout`) never
//! comes back: the store opens a new one on the next request, once for all
//! its clones, and its feeds re-arm their watches on it. No lease depends
//! on the session, so an expiry costs nothing but the resync.
//!
//! After a ZooKeeper restart on its data, nodes, zxids and sessions are
//! still there. Restoring an old snapshot, or a new ensemble, brings zxids
//! back down: stop every candidate for a term first.
//!
//! # On a cluster
//!
//! Give the URL every server of the ensemble
//! (`zk://z1:2181,z2:2181,z3:2181/tenure`): the client moves among them.
//!
//! **What holds across a server's failure.** Every write is ordered by the
//! ensemble's leader and committed by a quorum, and conditional on the
//! version read (see Operations), so a write based on a stale read is
//! refused; tenure's leader learns that its term goes on only from the
//! reply to its own write. A server that loses its leader (partitioned
//! from its quorum, frozen, or while the ensemble elects) stops serving
//! and closes its clients' connections within `syncLimit` × `tickTime`;
//! the client moves to another server, and the session (on which no lease
//! depends) goes on. So the failure of a minority of servers (the leader
//! included) never gives two valid terms, and tokens only rise. Tested
//! with real `tenure run` processes on a 3-server ensemble, their CMDs
//! writing to a resource that refuses lower tokens, in the repository's
//! `crates/tenure-cli/tests/cluster_zookeeper.rs`:
//! `sigkill_of_the_leading_server_never_gives_two_terms` (the ensemble's
//! leader SIGKILLed while tenure's leader renews, restarted 3 s later,
//! three times) and `a_server_cut_off_or_frozen_never_gives_two_terms`
//! (each server cut off from tenure's clients by a proxy, then
//! SIGSTOPped), and `a_server_partitioned_from_its_quorum_never_gives_two_terms`
//! (each server of a private ensemble cut off from its quorum, both ways,
//! while it still answers tenure's clients).
//!
//! **Whether tenure's term survives it** is a matter of time, not safety:
//! the ensemble must elect a new leader and the client reach a server that
//! serves, within what is left of the term. Here the ensemble elected a
//! killed leader's successor within 0.36–0.78 s, and the kill test asserts that
//! a 2 s term keeps whenever it led again within 0.41 s (time for one
//! retried renewal). A killed server's connections
//! reset and the client moves at once; a silent one (frozen, or a network
//! that drops packets) holds a request until the `timeout` option, 5 s by
//! default. Keep `timeout` below half the term (`?timeout=1s` with a 2 s
//! term); otherwise the leader loses its term and another candidate is
//! elected once it has expired. A leader cut off from its followers (not
//! dead: silent) is only given up after `syncLimit` × `tickTime` (10 s
//! with the sample configuration's 2000 ms and 5), and no write commits meanwhile: a term
//! shorter than that is lost. The repository's `docs/benchmarks.md`
//! ("Clustered stores") has the measured gaps and how often the term
//! moved.
//!
//! **What breaks fencing:**
//!
//! * **Reads without `sync` are not linearizable.** A server that lags
//!   its leader (or is cut off from it, until `syncLimit` × `tickTime`
//!   passes: 10 s with the sample configuration) answers `getData` from its own
//!   state (`a_server_partitioned_from_its_quorum_never_gives_two_terms`
//!   shows it: a session on a partitioned follower reads a record older
//!   than the quorum's). tenure only ever acts on its own conditional
//!   writes, so a stale read merely delays a takeover or shows `tenure
//!   status` an older holder. But anything that decides whether to act from a read of the
//!   record (a resource that looks up the current token in ZooKeeper to
//!   check a writer, a script reading the node) should take the token from
//!   the writer and keep the highest it saw, as the fencing recipe does,
//!   or check it with a conditional write. A `sync` before the read
//!   narrows the staleness but is no linearizable read across a leader
//!   change (ZOOKEEPER-1675). Read-only mode (`readonlymode.enabled`) stretches this
//!   without bound for clients that ask for it; tenure's client does not.
//! * **Undoing acknowledged writes.** Restoring an old snapshot or data
//!   directory, re-forming an ensemble from a minority's data, or losing a
//!   quorum's recent transactions at once (`forceSync=no`, as the tests'
//!   ensemble runs for speed, or disks that acknowledge writes before they
//!   are durable, then a power loss of most servers) brings zxids, records
//!   and tokens back: a token already handed out can be handed out again.
//!   Stop every candidate for at least one term first. (Not tested.)
//!
//! # Authentication and secrets
//!
//! `zk://user:password@host/prefix` authenticates the session with
//! ZooKeeper's `digest` scheme, and every node tenure creates (the prefix
//! node and the group nodes; missing ancestors are created open) gets the
//! ACL `digest:user:…` with all permissions, so only that user can read or
//! write them: run every candidate of a store as the same user. Another
//! user, another password or none gets a
//! [`ZkStoreError::NotAuthorized`] naming the fix (as a
//! [`StoreError`](tenure::StoreError), `Misconfigured`). Digest passwords
//! travel in clear text: use them on a trusted network. The password is
//! parsed out of the URL by this crate and never appears in an error, a log
//! line, `Debug` output or [`describe`](tenure::LeaseView::describe).

mod error;
mod feed;
mod incarnation;
mod names;
mod options;
mod session;
mod store;
#[cfg(test)]
mod test_server;
mod watch;

pub use error::ZkStoreError;
pub use options::{
    ZkOptions, DEFAULT_PORT, DEFAULT_PREFIX, DEFAULT_SESSION_TIMEOUT, DEFAULT_TIMEOUT,
};
pub use store::ZkStore;
