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
//! (default: `<group id>.neli`, created with one partition if missing).
//! The consumer group assigns partition 0 to exactly one of them. That
//! candidate writes a heartbeat to partition 0 every poll (at most every
//! `min_poll_interval`, 100 ms) and reads them back:
//!
//! | what happens | tenure | goneli |
//! |---|---|---|
//! | partition 0 assigned, and the first own heartbeat sent under this assignment comes back | [`Event::Elected`](tenure::Event::Elected) with token = that record's offset + 1 | `LeaderAcquired` (at assignment, without a token) |
//! | an own heartbeat comes back | the term is renewed until *sent + heartbeat timeout + grace* | — |
//! | no heartbeat sent in the last heartbeat timeout came back | `Ousted` with [`EndReason::Fenced`](tenure::EndReason::Fenced); the assignment is kept | `LeaderFenced` |
//! | heartbeats come back again | `Elected` again, with a new, higher token | `LeaderAcquired` (resumed) |
//! | partition 0 revoked | `Ousted` with [`EndReason::Revoked`](tenure::EndReason::Revoked); the rebalance waits until the term's work has drained (bounded by its deadline) | `LeaderRevoked` (barrier) |
//! | another candidate's heartbeat with a higher token on the held partition | `Ousted` with `Superseded` | — |
//!
//! The leader never acts before it has its token, and tokens rise across
//! leaders because a partition's offsets only grow. Heartbeats carry the
//! candidate id, the token and the elector's metadata, so followers get
//! [`Role::Follower`](tenure::Role::Follower) with the leader, and
//! [`KafkaObserver`] tells non-candidates who leads and where (goneli
//! cannot). The record format is documented in [`heartbeat`].
//!
//! # Timing
//!
//! `session.timeout.ms` is three heartbeat timeouts (15 s by default) and
//! `delivery.timeout.ms` one (5 s), as in goneli. A leader cut off from the
//! brokers is fenced after one heartbeat timeout and its work dropped at
//! its term's deadline a fifth of a timeout later, while the group can
//! hand the partition to someone else only after its session has expired:
//! two heartbeat timeouts later at the least (minus one group heartbeat
//! interval, 3 s by default). A leader that crashes is replaced after the
//! session timeout plus a rebalance; one that shuts down or resigns drains
//! its work, then leaves the group, and is replaced after one rebalance.
//! The elector's `term` setting does not apply here: the heartbeat timeout
//! does its job.
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
//! librdkafka; a fatal one ends any term, stops the elector, and is kept
//! in [`KafkaStatus::fatal_error`].
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
#![deny(missing_docs)]

mod config;
mod coordinator;
mod error;
pub mod heartbeat;
mod leader;
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
pub use observer::KafkaObserver;
pub use pulse::PulseExt;
pub use status::{KafkaStatus, State};
