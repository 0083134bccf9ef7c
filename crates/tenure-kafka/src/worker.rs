//! The thread that owns the candidate's Kafka clients: the group consumer
//! and the heartbeat producer.
//!
//! librdkafka's consumer is driven by polling, and its rebalance callbacks
//! run inside `poll` on the polling thread; the revoke callback must not
//! return before the leader's work has drained (the barrier). So the
//! clients live on a thread of their own that does only what the
//! coordinator (an async task holding the [`Session`](tenure::Session))
//! asks, one [`Request`] at a time, and reports what happened as
//! [`Report`]s. A revoke blocks this thread, inside `poll`, until the
//! coordinator answers that the term has drained.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc as std_mpsc;
use std::sync::Arc;
use std::time::Duration;

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::types::RDKafkaRespErr;
use tenure::Clock;
use tokio::sync::mpsc;

use crate::heartbeat::{Heartbeat, FORMAT_VERSION};

/// The most records one poll cycle reads, so a busy topic cannot keep the
/// thread from producing its heartbeat.
const MAX_RECORDS_PER_POLL: usize = 1000;

/// What the coordinator asks of the thread.
#[derive(Debug)]
pub(crate) enum Request {
    /// Poll the consumer (serving rebalances), then, if partition 0 is
    /// held, send a heartbeat carrying `token`.
    Poll {
        /// The current term's token, if leading.
        token: Option<u64>,
    },
    /// Leave the group (unsubscribe); the revoke follows on a later poll.
    Leave,
    /// Join the group again (subscribe).
    Join,
    /// Close the consumer (leaving the group) and the producer, then end.
    Close,
}

/// What the thread tells the coordinator.
#[derive(Debug)]
pub(crate) enum Report {
    /// Partition 0 was assigned; heartbeats now carry `generation`.
    Assigned {
        /// The assignment's number.
        generation: u64,
    },
    /// Partition 0 is being revoked. The thread is blocked inside the
    /// rebalance until `done` is answered (or dropped).
    Revoked {
        /// Answer once the term has drained.
        done: std_mpsc::SyncSender<()>,
    },
    /// A heartbeat was read on partition 0 of the leader topic.
    Heartbeat {
        /// Its offset.
        offset: i64,
        /// Its contents.
        heartbeat: Heartbeat,
    },
    /// A poll cycle finished; `error` is the first recoverable error of
    /// the cycle, if any.
    Polled {
        /// The error, without secrets.
        error: Option<String>,
    },
    /// librdkafka reported a fatal error: the clients cannot continue.
    Fatal {
        /// The error.
        detail: String,
    },
    /// The clients are closed and the thread is ending.
    Closed,
}

/// Everything a heartbeat carries that does not change.
pub(crate) struct Identity {
    pub(crate) candidate: String,
    pub(crate) incarnation: u64,
    pub(crate) timeout: Duration,
    pub(crate) metadata: tenure::Metadata,
}

/// What the group consumer's context shares with the thread.
pub(crate) struct GroupContext {
    topic: String,
    reports: mpsc::UnboundedSender<Report>,
    assigned: AtomicBool,
    generation: AtomicU64,
    /// The longest a revoke waits for the coordinator's answer; the
    /// coordinator bounds the drain by the term's deadline, this only
    /// guards against a coordinator that is gone.
    barrier_bound: Duration,
}

impl GroupContext {
    pub(crate) fn new(
        topic: String,
        reports: mpsc::UnboundedSender<Report>,
        barrier_bound: Duration,
    ) -> Self {
        GroupContext {
            topic,
            reports,
            assigned: AtomicBool::new(false),
            generation: AtomicU64::new(0),
            barrier_bound,
        }
    }

    fn holds_partition_zero(&self, tpl: &TopicPartitionList) -> bool {
        tpl.elements_for_topic(&self.topic)
            .iter()
            .any(|e| e.partition() == 0)
    }

    fn on_revoke(&self) {
        if !self.assigned.swap(false, Ordering::AcqRel) {
            return;
        }
        tracing::debug!(topic = %self.topic, "partition 0 revoked: waiting for the term to drain");
        let (done, wait) = std_mpsc::sync_channel(1);
        if self.reports.send(Report::Revoked { done }).is_ok() {
            // Dropped sender (coordinator gone) ends the wait at once.
            let _ = wait.recv_timeout(self.barrier_bound);
        }
    }
}

impl ClientContext for GroupContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        log(level, fac, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::debug!(error = %error, reason, "kafka consumer error");
    }
}

impl ConsumerContext for GroupContext {
    // Replaces the default so that partition 0 is always read from its end
    // (committed offsets, if any, are irrelevant: heartbeats sent before
    // this assignment prove nothing), and so that the barrier runs before
    // the partitions are given up.
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        let cooperative = matches!(
            consumer.rebalance_protocol(),
            RebalanceProtocol::Cooperative
        );
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                if let Err(e) = tpl.set_all_offsets(Offset::End) {
                    tracing::warn!(error = %e, "cannot start the assignment at the end");
                }
                let result = if cooperative {
                    consumer.incremental_assign(tpl)
                } else {
                    consumer.assign(tpl)
                };
                if let Err(e) = result {
                    tracing::warn!(error = %e, "assigning the partitions failed");
                    return;
                }
                if self.holds_partition_zero(tpl) {
                    let generation = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
                    self.assigned.store(true, Ordering::Release);
                    tracing::debug!(topic = %self.topic, generation, "partition 0 assigned");
                    let _ = self.reports.send(Report::Assigned { generation });
                }
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                if self.holds_partition_zero(tpl) {
                    self.on_revoke();
                }
                let result = if cooperative {
                    consumer.incremental_unassign(tpl)
                } else {
                    consumer.unassign()
                };
                if let Err(e) = result {
                    tracing::warn!(error = %e, "unassigning the partitions failed");
                }
            }
            other => {
                // librdkafka asks for the assignment to be dropped on a
                // rebalance error; whatever was held is lost.
                tracing::warn!(error = ?other, "rebalance error");
                self.on_revoke();
                let _ = consumer.unassign();
            }
        }
    }
}

/// The heartbeat producer's context: delivery failures are expected while
/// the brokers are unreachable, and the fence handles them.
pub(crate) struct ProducerCtx;

impl ClientContext for ProducerCtx {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        log(level, fac, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::debug!(error = %error, reason, "kafka producer error");
    }
}

impl ProducerContext for ProducerCtx {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            tracing::debug!(error = %e, "heartbeat not delivered");
        }
    }
}

/// librdkafka's log lines, one level quieter than librdkafka rates them:
/// it logs every broker disconnect as an error, which here is an expected
/// event that the fence and the session timeout deal with.
pub(crate) fn log(level: RDKafkaLogLevel, fac: &str, message: &str) {
    match level {
        RDKafkaLogLevel::Emerg | RDKafkaLogLevel::Alert | RDKafkaLogLevel::Critical => {
            tracing::error!(target: "librdkafka", fac, "{message}")
        }
        RDKafkaLogLevel::Error => tracing::warn!(target: "librdkafka", fac, "{message}"),
        RDKafkaLogLevel::Warning | RDKafkaLogLevel::Notice => {
            tracing::info!(target: "librdkafka", fac, "{message}")
        }
        RDKafkaLogLevel::Info => tracing::debug!(target: "librdkafka", fac, "{message}"),
        RDKafkaLogLevel::Debug => tracing::trace!(target: "librdkafka", fac, "{message}"),
    }
}

/// The thread's state.
pub(crate) struct Worker {
    pub(crate) consumer: BaseConsumer<GroupContext>,
    pub(crate) producer: BaseProducer<ProducerCtx>,
    pub(crate) topic: String,
    pub(crate) identity: Identity,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) poll_duration: Duration,
    pub(crate) reports: mpsc::UnboundedSender<Report>,
    pub(crate) seq: u64,
}

impl Worker {
    /// Serves requests until told to close or the coordinator is gone.
    pub(crate) fn run(mut self, requests: std_mpsc::Receiver<Request>) {
        loop {
            match requests.recv() {
                Ok(Request::Poll { token }) => self.poll(token),
                Ok(Request::Leave) => self.consumer.unsubscribe(),
                Ok(Request::Join) => {
                    if let Err(e) = self.consumer.subscribe(&[&self.topic]) {
                        let _ = self.reports.send(Report::Fatal {
                            detail: format!("cannot subscribe to {}: {e}", self.topic),
                        });
                    }
                }
                Ok(Request::Close) | Err(_) => break,
            }
        }
        let Worker {
            consumer,
            producer,
            reports,
            ..
        } = self;
        // Dropping the consumer closes it: it leaves the group (LeaveGroup,
        // so the hand-over takes one rebalance, not a session timeout),
        // serving the final revoke on this thread. Heartbeats still queued
        // are worthless: the producer's drop purges them.
        drop(consumer);
        drop(producer);
        let _ = reports.send(Report::Closed);
    }

    fn poll(&mut self, token: Option<u64>) {
        let mut error = None;
        for _ in 0..MAX_RECORDS_PER_POLL {
            match self.consumer.poll(self.poll_duration) {
                None => break,
                Some(Ok(msg)) => {
                    if msg.topic() != self.topic || msg.partition() != 0 {
                        continue;
                    }
                    match msg.payload().map(Heartbeat::decode) {
                        Some(Ok(heartbeat)) => {
                            let _ = self.reports.send(Report::Heartbeat {
                                offset: msg.offset(),
                                heartbeat,
                            });
                        }
                        Some(Err(e)) => {
                            tracing::debug!(offset = msg.offset(), error = %e, "skipping a record of the leader topic")
                        }
                        None => {}
                    }
                }
                Some(Err(e)) => {
                    if is_fatal(&e) {
                        self.check_fatal();
                    }
                    error.get_or_insert_with(|| e.to_string());
                    // goneli stops reading at the first error too.
                    break;
                }
            }
        }
        // Serves delivery reports and producer errors.
        self.producer.poll(Duration::ZERO);
        if self.consumer.context().assigned.load(Ordering::Acquire) {
            self.send_heartbeat(token, &mut error);
        }
        self.check_fatal();
        let _ = self.reports.send(Report::Polled { error });
    }

    fn send_heartbeat(&mut self, token: Option<u64>, error: &mut Option<String>) {
        self.seq += 1;
        let now = self.clock.now();
        let hb = Heartbeat {
            format: FORMAT_VERSION,
            candidate: self.identity.candidate.clone(),
            incarnation: self.identity.incarnation,
            generation: self.consumer.context().generation.load(Ordering::Acquire),
            seq: self.seq,
            sent_mono_ns: now.mono.as_nanos(),
            sent_wall_ms: now.wall.as_millis(),
            timeout_ms: u64::try_from(self.identity.timeout.as_millis()).unwrap_or(u64::MAX),
            token,
            metadata: self.identity.metadata.clone(),
        };
        let bytes = hb.encode();
        let record: BaseRecord<'_, (), [u8]> =
            BaseRecord::to(&self.topic).partition(0).payload(&bytes);
        if let Err((e, _)) = self.producer.send(record) {
            // Queue full while the brokers are away: the fence copes.
            error.get_or_insert_with(|| format!("cannot queue a heartbeat: {e}"));
        }
    }

    fn check_fatal(&self) {
        let fatal = self
            .consumer
            .client()
            .fatal_error()
            .or_else(|| self.producer.client().fatal_error());
        if let Some((code, detail)) = fatal {
            let _ = self.reports.send(Report::Fatal {
                detail: format!("{detail} ({code:?})"),
            });
        }
    }
}

fn is_fatal(e: &KafkaError) -> bool {
    matches!(e, KafkaError::MessageConsumptionFatal(_))
        || e.rdkafka_error_code() == Some(RDKafkaErrorCode::Fatal)
}
