//! Kafka backend for [tenure]: leader election by NELI
//! (Non-Exclusive Leader Induction, the fast exclusive variant that
//! obsidiandynamics' goneli implements), with a fencing token and a known
//! leader, behind tenure's [`Coordinator`](tenure::Coordinator) seam — so
//! users hold the same [`Elector`](tenure::Elector) as with every lease
//! store.
//!
//! ```no_run
//! use tenure::{Elector, Metadata};
//! use tenure_kafka::{KafkaConfig, KafkaCoordinator};
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let kafka = KafkaCoordinator::new(KafkaConfig::new("10.0.0.5:9092"))?;
//! let elector = Elector::with_coordinator(kafka, "outbox-relay")
//!     .candidate_id("host-a")
//!     .metadata(Metadata::address("10.0.0.7:8080"))
//!     .start()?;
//! let term = elector.wait_for_leadership().await?;
//! println!("leading with fencing token {}", term.token());
//! elector.shutdown().await; // drains, leaves the group: one rebalance hands over
//! # Ok(()) }
//! ```
//!
//! # How leadership is decided
//!
//! All candidates of a group join one consumer group (default id: the
//! group name, sanitised) subscribed to a one-partition *leader topic*
//! (default: `<group id>.neli`, created if missing). The consumer group
//! assigns partition 0 to exactly one of them. That candidate writes a
//! heartbeat to partition 0 every poll (at most every `min_poll_interval`,
//! 100 ms). Every candidate reads partition 0, in order, for its whole
//! life (with a reader of its own, not with its group consumer). With `H`
//! the heartbeat timeout:
//!
//! | what happens | tenure | goneli |
//! |---|---|---|
//! | partition 0 assigned, no other instance's heartbeat read for the quiet period, and an own heartbeat sent under this assignment within `H` comes back | [`Event::Elected`](tenure::Event::Elected) with token = that record's offset + 1 | `LeaderAcquired` (at assignment, without a token) |
//! | an own heartbeat comes back within `H` | the term is renewed until *sent + H + H/5* | — |
//! | no heartbeat sent in the last `H` came back, or the group coordinator has not answered for `H` (librdkafka's statistics of its connection, while the group is steady) | `Ousted` with [`EndReason::Fenced`](tenure::EndReason::Fenced); the assignment is kept | `LeaderFenced` |
//! | heartbeats come back again (and the quiet rule allows) | `Elected` again, with a new, higher token | `LeaderAcquired` (resumed) |
//! | partition 0 revoked | `Ousted` with [`EndReason::Revoked`](tenure::EndReason::Revoked); the rebalance waits until the term's work has drained (bounded by its deadline), then a *released* heartbeat is written | `LeaderRevoked` (barrier) |
//! | another instance's heartbeat read after the leader's election | `Ousted` with `Superseded`, at once (unless it comes from an older generation of the consumer group: a stale holder) | — |
//! | a heartbeat of a later consumer-group generation, a gap of `2H` in the candidate's own polling (a pause, a host suspend), or own heartbeats not back in time for `2H` | the assignment is given up: the candidate leaves the group and joins again a session timeout later | — |
//! | offsets of partition 0 go back | the candidate stops for good with [`Fault::TokenRegressed`](tenure::Fault::TokenRegressed) and [`KafkaBackendError::TopicRecreated`] | — |
//!
//! The leader never acts before it has its token, and tokens rise across
//! leaders because a partition's offsets only grow. Heartbeats carry the
//! consumer group id and generation, the candidate id, the token and the
//! elector's metadata, so followers get
//! [`Role::Follower`](tenure::Role::Follower) with the leader, and
//! [`KafkaObserver`] tells non-candidates who leads and where (goneli
//! cannot); [`KafkaLeaseView`] shows the same as a read-only
//! [`LeaseView`](tenure::LeaseView), so that tenure's
//! [`Observer`](tenure::Observer) and `tenure status` serve Kafka groups
//! as any store's. The record format, and what a reader refuses to trust, is
//! documented in [`heartbeat`].
//!
//! ## The quiet period
//!
//! The consumer group can hand partition 0 to a new member while the old
//! holder still believes it holds it: the old holder lost its route to the
//! group coordinator but not to partition 0's leader, and its heartbeats
//! keep coming back; or its host was suspended, and librdkafka's session
//! timer (on a clock that stops in suspend) did not notice. So a holder
//! elects only once no other instance's heartbeat has been read for
//! `(H + H/5) · (1 + ρ)/(1 − ρ)` (ρ the elector's
//! [`drift`](tenure::Config::drift), 1 %: ≈ 1.22 H), longer than any term
//! such a heartbeat could sustain. A released heartbeat ends its writer's
//! claim at once. What it costs a hand-over:
//!
//! * graceful (shutdown, resign, revoke): nothing measurable, the old
//!   holder's released heartbeat comes before the new one's first;
//! * crash: nothing, the session timeout (3 H) has long outlasted it;
//! * a candidate's first election after it starts: at least the quiet
//!   period after its reader is positioned (it cannot know what was
//!   written before);
//! * a partial partition or a zombie holder: the quiet period after the
//!   old holder's last heartbeat (it stops writing when it reads the new
//!   holder's later group generation, or when librdkafka expires its
//!   session).
//!
//! # What the Kafka side must provide
//!
//! * **Replication 3, `min.insync.replicas` 2, no unclean leader
//!   election** on the leader topic (created so where the cluster has
//!   three brokers; a warning otherwise). Heartbeats are produced with
//!   `acks=all` (pinned). With fewer replicas, or an unclean election, a
//!   broker failure can lose heartbeats and send offsets back; a deleted
//!   and recreated topic, or a broker that keeps data in memory
//!   restarting, restarts them: the candidates that notice stop with
//!   [`Fault::TokenRegressed`](tenure::Fault::TokenRegressed), and the
//!   group needs a new topic. Candidates started only afterwards cannot
//!   notice: their tokens start low again, and resources that remember a
//!   higher one refuse them. No client auto-creates the topic
//!   (`allow.auto.create.topics=false`, pinned).
//! * **The classic consumer group protocol** (`group.protocol=classic`,
//!   pinned: the KIP-848 protocol sets its own session timeout).
//! * **No static membership**: `group.instance.id` is refused (a static
//!   member that rejoins gets its old assignment without waiting out its
//!   session, and never leaves the group on close).
//! * `heartbeat.interval.ms` below 1.5 H (default H/5); one heartbeat
//!   timeout for every candidate of a group (a reader waits out the larger
//!   of its own and the writer's).
//! * Only the candidates write to the leader topic (grant write access to
//!   them alone): a plain producer can forge heartbeats. Forgeries are
//!   checked (sequence numbers for own heartbeats, tokens against
//!   offsets, group ids, timeouts within 1 ms and 10 minutes), and at
//!   worst delay elections or end terms early; a forged *released*
//!   heartbeat, though, could shorten the quiet period.
//!
//! # Timing
//!
//! `session.timeout.ms` is three heartbeat timeouts (15 s by default),
//! `delivery.timeout.ms` one (5 s), as in goneli, and the group heartbeat
//! interval a fifth of one (1 s by default). A leader cut off from the
//! brokers is fenced after one heartbeat timeout and its work dropped at
//! its term's deadline a fifth of a timeout later, while the group can
//! hand the partition to someone else only after its session has expired:
//! two heartbeat timeouts later at the least (minus one group heartbeat
//! interval); a leader cut off from the group coordinator only is fenced
//! once the coordinator has been silent for a heartbeat timeout (by the
//! statistics librdkafka emits every tenth of one), and its successor
//! waits for its heartbeats to stop anyway (the quiet rule above). A leader that crashes is replaced after the
//! session timeout plus a rebalance; one that shuts down or resigns drains
//! its work, releases, then leaves the group, and is replaced after one
//! rebalance. Measured figures are in `docs/benchmarks.md`. The elector's
//! `term` setting does not apply here: the heartbeat timeout does its job
//! (the `tenure` command maps `--term` onto it).
//!
//! # Liveness (goneli's `Pulse`)
//!
//! Without a [`liveness_timeout`](tenure::ElectorBuilder::liveness_timeout),
//! the client thread polls every `min_poll_interval` by itself. With one,
//! it polls only when the application has called
//! [`Elector::pulse`](tenure::Elector::pulse) since the previous poll, as
//! goneli polls only from `Pulse`: pulsing is cheap (two atomics; network
//! I/O at most once per `min_poll_interval`); an application that stops
//! pulsing loses its term (reported as
//! [`EndReason::LivenessLost`](tenure::EndReason::LivenessLost)) and, once
//! `max.poll.interval.ms` (set to the liveness timeout, at least the
//! session timeout) passes without a poll, its assignment. [`PulseExt`]
//! adds goneli's blocking `Pulse(timeout)`. goneli's `Background(task)`
//! is [`Elector::run_while_leader`](tenure::Elector::run_while_leader).
//!
//! # Resign, shutdown, errors
//!
//! [`Elector::resign`](tenure::Elector::resign) drains the term, leaves
//! the group (so one rebalance gives partition 0 to another candidate) and
//! joins again one session timeout later. With the default (eager)
//! assignors every join, this one included, revokes partition 0 and
//! assigns it anew, so the resigned candidate may be chosen again then, as
//! in goneli; `partition.assignment.strategy=cooperative-sticky` keeps
//! partition 0 with its holder when candidates join (the rebalance
//! callback handles incremental assignments), at the price of revokes
//! only on leaving or losing the session.
//! [`Elector::shutdown`](tenure::Elector::shutdown) drains the term, then
//! closes the consumer, which leaves the group at once; closing is bounded
//! by `close_timeout` (10 s) even if librdkafka hangs (goneli's work-around
//! for confluent-kafka-go #463): the client thread is then abandoned.
//! [`KafkaStatus`] is goneli's `State()` (`Live`, `Closing`, `Closed`) and
//! `Await()`. Recoverable broker errors are logged, reported once as
//! [`Event::StoreHealth`](tenure::Event::StoreHealth), and retried by
//! librdkafka; a fatal one ends any term (its work drains, bounded by the
//! term's deadline), stops the elector, and is kept in
//! [`KafkaStatus::fatal_error`].
//!
//! # TLS and SASL
//!
//! Pass librdkafka's properties (`security.protocol`, `ssl.ca.location`,
//! `sasl.mechanisms`, `sasl.username`, `sasl.password`, …) with
//! [`KafkaConfig::property`] or as URL parameters, and build librdkafka
//! with them by depending on `rdkafka = { version = "0.39", features =
//! ["ssl", "sasl"] }` in your application (Cargo unifies the features;
//! the build needs the OpenSSL and Cyrus SASL headers).
//!
//! # Testing your code
//!
//! goneli ships a `MockNeli`; tenure's [`MemoryStore`](tenure::MemoryStore)
//! with [`FaultyStore`](tenure::FaultyStore) covers the same ground for
//! code written against the [`Elector`](tenure::Elector): the handle is the
//! same whatever the backend, so test with the memory store and run with
//! Kafka. No Kafka-specific test double is provided.

mod config;
mod coordinator;
mod error;
pub mod heartbeat;
mod leader;
mod lease_view;
mod neli;
mod observer;
mod pulse;
mod reader;
mod status;
mod url;
mod worker;

pub use config::{
    sanitise, KafkaConfig, DEFAULT_BROKERS, DEFAULT_CLOSE_TIMEOUT, DEFAULT_HEARTBEAT_TIMEOUT,
    DEFAULT_MIN_POLL_INTERVAL, DEFAULT_POLL_DURATION,
};
pub use coordinator::KafkaCoordinator;
pub use error::KafkaBackendError;
pub use lease_view::KafkaLeaseView;
pub use observer::KafkaObserver;
pub use pulse::PulseExt;
pub use status::{KafkaStatus, State};
