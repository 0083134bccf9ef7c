//! The thread that owns the candidate's Kafka clients: the group consumer
//! (for the assignment of partition 0 only: it is paused and reads
//! nothing), the heartbeat producer and the [`Reader`] of partition 0.
//!
//! librdkafka's consumer is driven by polling, and its rebalance callbacks
//! run inside `poll` on the polling thread; the revoke callback must not
//! return before the leader's work has drained (the barrier). So the
//! clients live on a thread of their own that does only what the
//! coordinator (an async task holding the [`Session`](tenure::Session))
//! asks, one [`Request`] at a time, and reports what happened as
//! [`Report`]s. A revoke blocks this thread, inside `poll`, until the
//! coordinator answers that the term has drained; then the thread writes a
//! *released* heartbeat, so the next holder need not wait for the quiet
//! period.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc as std_mpsc;
use std::sync::Arc;
use std::time::Duration;

use rdkafka::bindings;
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::Statistics;
use tenure::{Clock, MonoTime};
use tokio::sync::mpsc;

use crate::heartbeat::{Heartbeat, FORMAT_VERSION};
use crate::neli::Plan;
use crate::reader::{Read, Reader};

/// The most records one poll cycle reads, so a busy topic cannot keep the
/// thread from producing its heartbeat.
const MAX_RECORDS_PER_POLL: usize = 1000;

/// What the coordinator asks of the thread.
#[derive(Debug)]
pub(crate) enum Request {
    /// Poll the group consumer (serving rebalances) and the reader, then
    /// send the heartbeat `plan` asks for, if partition 0 is still held
    /// under that assignment.
    Poll {
        /// The heartbeat to send, if any.
        plan: Option<Plan>,
    },
    /// Write a released heartbeat if this assignment had heartbeats, then
    /// leave the group (unsubscribe) at the next poll; the revoke follows on
    /// a later one.
    Leave,
    /// Join the group again (subscribe) at the next poll.
    Join,
    /// Release as for `Leave`, close the group consumer (leaving the group),
    /// the producer and the reader, then end.
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
    /// The reader is positioned: it reads every record from now on.
    Reading,
    /// What librdkafka's statistics say of the group coordinator: how long
    /// its connection has not received anything (`None`: a rebalance is
    /// under way, in which the coordinator holds this member's join).
    Membership {
        /// When the statistics were read (they were emitted at most one
        /// poll interval earlier).
        at: MonoTime,
        /// The coordinator's silence, if the group is steady and its
        /// connection up; `Some(Duration::MAX)` if it is down.
        silent: Option<Duration>,
    },
    /// A heartbeat was handed to the producer.
    Sent {
        /// Its sequence number.
        seq: u64,
        /// When (the instant it carries).
        at: MonoTime,
        /// The assignment it was sent under.
        generation: u64,
        /// The consumer group's generation it carries.
        group_generation: Option<i32>,
    },
    /// Heartbeat `seq` was written at `offset`.
    Delivered {
        /// Its sequence number.
        seq: u64,
        /// Where it landed.
        offset: i64,
    },
    /// A record of partition 0 of the leader topic.
    Record {
        /// Its offset.
        offset: i64,
        /// Its contents, if it is a heartbeat this build reads.
        heartbeat: Option<Heartbeat>,
    },
    /// A poll cycle finished.
    Polled {
        /// The first recoverable error of the cycle, without secrets.
        error: Option<String>,
        /// The cycle started after a gap in polling longer than the gap
        /// limit (a pause or suspend): no heartbeat was sent.
        gap: bool,
    },
    /// librdkafka reported a fatal error: the clients cannot continue.
    Fatal {
        /// librdkafka's message, secrets scrubbed.
        detail: String,
    },
    /// The clients are closed and the thread is ending.
    Closed,
}

/// Everything a heartbeat carries that does not change.
pub(crate) struct Identity {
    pub(crate) group_id: String,
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
    /// The assignment whose revoke has drained and whose release is still
    /// to be written (0: none).
    to_release: AtomicU64,
    /// The longest a revoke waits for the coordinator's answer; the
    /// coordinator bounds the drain by the term's deadline, this only
    /// guards against a coordinator that is gone.
    barrier_bound: Duration,
    clock: Arc<dyn Clock>,
}

impl GroupContext {
    pub(crate) fn new(
        topic: String,
        reports: mpsc::UnboundedSender<Report>,
        barrier_bound: Duration,
        clock: Arc<dyn Clock>,
    ) -> Self {
        GroupContext {
            clock,
            topic,
            reports,
            assigned: AtomicBool::new(false),
            generation: AtomicU64::new(0),
            to_release: AtomicU64::new(0),
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
            if wait.recv_timeout(self.barrier_bound).is_ok() {
                self.to_release
                    .store(self.generation.load(Ordering::Acquire), Ordering::Release);
            }
        }
    }
}

impl ClientContext for GroupContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        log(level, fac, message);
    }

    // The evidence of group membership librdkafka exposes: its
    // GroupCoordinator connection answers the group heartbeats (every
    // heartbeat.interval.ms) while the group is steady.
    fn stats(&self, statistics: Statistics) {
        let steady = statistics
            .cgrp
            .as_ref()
            .is_some_and(|c| c.join_state == "steady");
        let coordinator = statistics
            .brokers
            .values()
            .find(|b| b.source == "logical" && b.name == "GroupCoordinator");
        let silent = match coordinator {
            _ if !steady => None,
            Some(b) if b.state == "UP" && b.rxidle >= 0 => Some(Duration::from_micros(
                u64::try_from(b.rxidle).unwrap_or(u64::MAX),
            )),
            _ => Some(Duration::MAX),
        };
        let at = self.clock.now().mono;
        let _ = self.reports.send(Report::Membership { at, silent });
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::debug!(error = %error, reason, "kafka consumer error");
    }
}

impl ConsumerContext for GroupContext {
    // Replaces the default so that the group consumer never fetches (the
    // reader reads partition 0), and so that the barrier runs before the
    // partitions are given up.
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
                if let Err(e) = consumer.pause(tpl) {
                    tracing::debug!(error = %e, "cannot pause the group consumer's fetches");
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
                let result = match consumer.assignment() {
                    Ok(current) if cooperative => consumer.incremental_unassign(&current),
                    _ => consumer.unassign(),
                };
                if let Err(e) = result {
                    tracing::warn!(error = %e, "unassigning the partitions failed");
                }
            }
        }
    }
}

/// The heartbeat producer's context: it reports where each heartbeat
/// landed (an offset at or below one read before it was sent means the
/// topic's offsets restarted); delivery failures are expected while the
/// brokers are unreachable, and the fence handles them.
pub(crate) struct ProducerCtx {
    pub(crate) reports: mpsc::UnboundedSender<Report>,
}

impl ClientContext for ProducerCtx {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        log(level, fac, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::debug!(error = %error, reason, "kafka producer error");
    }
}

impl ProducerContext for ProducerCtx {
    /// The heartbeat's sequence number.
    type DeliveryOpaque = Box<u64>;

    fn delivery(&self, result: &DeliveryResult<'_>, seq: Box<u64>) {
        match result {
            Ok(msg) => {
                let _ = self.reports.send(Report::Delivered {
                    seq: *seq,
                    offset: msg.offset(),
                });
            }
            Err((e, _)) => tracing::debug!(error = %e, "heartbeat not delivered"),
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
    pub(crate) reader: Reader,
    pub(crate) topic: String,
    pub(crate) identity: Identity,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) poll_duration: Duration,
    pub(crate) reports: mpsc::UnboundedSender<Report>,
    /// A poll cycle that starts this long after the previous one ended
    /// sends no heartbeat and reports a gap.
    pub(crate) gap_limit: Duration,
    /// How long a released heartbeat may take to be delivered when the
    /// thread leaves or closes.
    pub(crate) release_flush: Duration,
    pub(crate) seq: u64,
    /// When the previous poll cycle ended.
    pub(crate) last_cycle: Option<MonoTime>,
    /// The assignment the last heartbeat was sent under, and its token: a
    /// release is owed for it.
    pub(crate) wrote: Option<(u64, Option<u64>)>,
    /// Leaves and joins asked for, done one per poll at its start: never
    /// between polls (librdkafka 2.12 can trip an assertion when a
    /// consumer that unsubscribed and subscribed again without being
    /// polled is closed).
    pub(crate) membership: std::collections::VecDeque<Membership>,
}

/// A change of group membership waiting for the next poll.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Membership {
    Leave,
    Join,
}

impl Worker {
    /// Serves requests until told to close or the coordinator is gone.
    pub(crate) fn run(mut self, requests: std_mpsc::Receiver<Request>) {
        loop {
            match requests.recv() {
                Ok(Request::Poll { plan }) => self.poll(plan),
                Ok(Request::Leave) => {
                    // No wait for the delivery: the thread goes on (and may
                    // be giving up because the brokers do not answer).
                    self.release_held(Duration::ZERO);
                    self.membership.push_back(Membership::Leave);
                }
                Ok(Request::Join) => self.membership.push_back(Membership::Join),
                Ok(Request::Close) | Err(_) => break,
            }
        }
        // The coordinator has drained the term before asking to close; the
        // process may end right after, so wait a little for the delivery.
        self.release_held(self.release_flush);
        let Worker {
            consumer,
            producer,
            reader,
            reports,
            ..
        } = self;
        // Dropping the consumer closes it: it leaves the group (LeaveGroup,
        // so the hand-over takes one rebalance, not a session timeout),
        // serving the final revoke on this thread. Heartbeats still queued
        // are worthless: the producer's drop purges them.
        drop(consumer);
        drop(producer);
        drop(reader);
        let _ = reports.send(Report::Closed);
    }

    fn poll(&mut self, plan: Option<Plan>) {
        let start = self.clock.now().mono;
        let gap = self
            .last_cycle
            .is_some_and(|last| start.saturating_since(last) > self.gap_limit);
        let mut error = None;
        match self.membership.pop_front() {
            Some(Membership::Leave) => self.consumer.unsubscribe(),
            Some(Membership::Join) => {
                if let Err(e) = self.consumer.subscribe(&[&self.topic]) {
                    let _ = self.reports.send(Report::Fatal {
                        detail: format!("cannot subscribe to {}: {e}", self.topic),
                    });
                }
            }
            None => {}
        }
        // Serves rebalances (the barrier runs in here) and consumer errors;
        // its partitions are paused, so it returns no records.
        for _ in 0..MAX_RECORDS_PER_POLL {
            match self.consumer.poll(self.poll_duration) {
                None => break,
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    if is_fatal(&e) {
                        self.check_fatal();
                    }
                    error.get_or_insert_with(|| e.to_string());
                    break;
                }
            }
        }
        let released = self.consumer.context().to_release.swap(0, Ordering::AcqRel);
        if released != 0 {
            self.release(released);
        }
        let reports = &self.reports;
        self.reader.poll(
            self.poll_duration,
            MAX_RECORDS_PER_POLL,
            |read| match read {
                Read::Positioned => {
                    let _ = reports.send(Report::Reading);
                }
                Read::Record { offset, heartbeat } => {
                    let _ = reports.send(Report::Record { offset, heartbeat });
                }
                Read::Error(e) => {
                    error.get_or_insert(e);
                }
            },
        );
        // Serves delivery reports and producer errors.
        self.producer.poll(Duration::ZERO);
        let context = self.consumer.context();
        let held = context.assigned.load(Ordering::Acquire)
            && plan.is_some_and(|p| p.generation == context.generation.load(Ordering::Acquire));
        if let (Some(plan), true, false) = (plan, held, gap) {
            self.send_heartbeat(plan, &mut error);
        }
        self.check_fatal();
        self.last_cycle = Some(self.clock.now().mono);
        let _ = self.reports.send(Report::Polled { error, gap });
    }

    fn heartbeat(&mut self, generation: u64, token: Option<u64>, released: bool) -> Heartbeat {
        self.seq += 1;
        let now = self.clock.now();
        Heartbeat {
            format: FORMAT_VERSION,
            group: Some(self.identity.group_id.clone()),
            group_generation: group_generation(&self.consumer),
            candidate: self.identity.candidate.clone(),
            incarnation: self.identity.incarnation,
            generation,
            seq: self.seq,
            sent_mono_ns: now.mono.as_nanos(),
            sent_wall_ms: now.wall.as_millis(),
            timeout_ms: u64::try_from(self.identity.timeout.as_millis()).unwrap_or(u64::MAX),
            token,
            released,
            metadata: self.identity.metadata.clone(),
        }
    }

    fn send_heartbeat(&mut self, plan: Plan, error: &mut Option<String>) {
        let hb = self.heartbeat(plan.generation, plan.token, false);
        // Reported before it is produced, so the coordinator knows it by
        // the time it is read back.
        let _ = self.reports.send(Report::Sent {
            seq: hb.seq,
            at: MonoTime::from_nanos(hb.sent_mono_ns),
            generation: hb.generation,
            group_generation: hb.group_generation,
        });
        self.wrote = Some((plan.generation, plan.token));
        if let Err(e) = self.produce(&hb) {
            // Queue full while the brokers are away: the fence copes.
            error.get_or_insert_with(|| format!("cannot queue a heartbeat: {e}"));
        }
    }

    /// Writes the released heartbeat owed for assignment `generation`, if
    /// any (the term has drained).
    fn release(&mut self, generation: u64) {
        let Some((wrote, token)) = self.wrote.filter(|(g, _)| *g == generation) else {
            return;
        };
        self.wrote = None;
        let hb = self.heartbeat(wrote, token, true);
        if let Err(e) = self.produce(&hb) {
            tracing::debug!(error = %e, "cannot queue the released heartbeat");
        }
    }

    /// Releases the assignment held now (leaving or closing), and waits up
    /// to `flush` for the release to be delivered, so the next holder reads
    /// it before its own first heartbeat.
    fn release_held(&mut self, flush: Duration) {
        let generation = self.consumer.context().generation.load(Ordering::Acquire);
        if self.wrote.is_some_and(|(g, _)| g == generation) {
            self.release(generation);
            if !flush.is_zero() {
                let _ = self.producer.flush(flush);
            }
        }
    }

    fn produce(&self, hb: &Heartbeat) -> Result<(), KafkaError> {
        let bytes = hb.encode();
        let record: BaseRecord<'_, (), [u8], Box<u64>> =
            BaseRecord::with_opaque_to(&self.topic, Box::new(hb.seq))
                .partition(0)
                .payload(&bytes);
        self.producer.send(record).map_err(|(e, _)| e)
    }

    fn check_fatal(&self) {
        let fatal = self
            .consumer
            .client()
            .fatal_error()
            .or_else(|| self.producer.client().fatal_error())
            .map(|(code, detail)| format!("{detail} ({code:?})"))
            .or_else(|| self.reader.fatal_error());
        if let Some(detail) = fatal {
            let _ = self.reports.send(Report::Fatal { detail });
        }
    }
}

/// The consumer group's generation, as librdkafka knows it.
#[allow(
    unsafe_code,
    reason = "rust-rdkafka has no safe call for the group's generation; librdkafka's C API does"
)]
fn group_generation(consumer: &BaseConsumer<GroupContext>) -> Option<i32> {
    let rk = consumer.client().native_ptr();
    // SAFETY: `rk` is the consumer's live client handle; the metadata
    // object is created, read and destroyed here, and not shared.
    unsafe {
        let metadata = bindings::rd_kafka_consumer_group_metadata(rk);
        if metadata.is_null() {
            return None;
        }
        let generation = bindings::rd_kafka_consumer_group_metadata_generation_id(metadata);
        bindings::rd_kafka_consumer_group_metadata_destroy(metadata);
        (generation >= 0).then_some(generation)
    }
}

fn is_fatal(e: &KafkaError) -> bool {
    matches!(e, KafkaError::MessageConsumptionFatal(_))
        || e.rdkafka_error_code() == Some(RDKafkaErrorCode::Fatal)
}
