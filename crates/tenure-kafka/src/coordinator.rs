//! The Kafka backend behind tenure's [`Coordinator`] seam: an async task
//! that holds the [`Session`], feeds the NELI machine with what the client
//! thread reports, and carries out its decisions.

use std::sync::mpsc as std_mpsc;
use std::time::Duration;

use async_trait::async_trait;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::BaseProducer;
use rdkafka::types::RDKafkaErrorCode;
use tenure::{Command, Coordinator, EndReason, MonoTime, Session};
use tokio::sync::mpsc;

use crate::config::KafkaConfig;
use crate::error::KafkaBackendError;
use crate::leader::LeaderView;
use crate::neli::{self, Decision, Neli, Pacing};
use crate::reader::Reader;
use crate::status::{KafkaStatus, State};
use crate::worker::{GroupContext, Identity, ProducerCtx, Report, Request, Worker};

/// Leadership by NELI over Kafka: the candidate that the consumer group
/// assigns partition 0 of the leader topic leads, once its first heartbeat
/// to that partition has come back; the heartbeat's offset (plus one) is
/// the fencing token.
///
/// Hand it to [`Elector::with_coordinator`](tenure::Elector::with_coordinator)
/// and use the elector exactly as with any lease store:
///
/// ```no_run
/// use std::time::Duration;
/// use tenure::{Elector, Metadata};
/// use tenure_kafka::KafkaCoordinator;
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let kafka = KafkaCoordinator::from_url("kafka://10.0.0.5:9092,10.0.0.6:9092/billing.neli")?;
/// let elector = Elector::with_coordinator(kafka, "billing")
///     .candidate_id("host-a")
///     .metadata(Metadata::address("10.0.0.7:8080"))
///     .start()?;
/// elector
///     .run_while_leader(|term| async move {
///         // term.token() fences every write; stop when term.cancelled() fires.
///         term.cancelled().await;
///         Ok::<(), std::io::Error>(())
///     })
///     .await?;
/// # Ok(()) }
/// ```
///
/// goneli's events map onto tenure's: *acquired* is
/// [`Event::Elected`](tenure::Event::Elected); *revoked* is
/// [`Event::Ousted`](tenure::Event::Ousted) with [`EndReason::Revoked`],
/// and the rebalance waits until the term's work has drained (bounded by
/// the term's deadline); *fenced* is `Ousted` with [`EndReason::Fenced`];
/// *resumed* is the next `Elected`, with a higher token.
#[derive(Debug)]
pub struct KafkaCoordinator {
    config: KafkaConfig,
    status: KafkaStatus,
}

impl KafkaCoordinator {
    /// A coordinator with `config`, checked now (librdkafka validates the
    /// passed-through properties too); nothing connects until the elector
    /// starts.
    pub fn new(config: KafkaConfig) -> Result<KafkaCoordinator, KafkaBackendError> {
        config.validate()?;
        Ok(KafkaCoordinator {
            config,
            status: KafkaStatus::new(),
        })
    }

    /// A coordinator from a URL:
    /// `kafka://host:port[,host:port…][/TOPIC][?group=ID&heartbeat_timeout=5s&…]`.
    /// The path is the leader topic (default: derived from the group),
    /// `group` the consumer group id; `heartbeat_timeout`,
    /// `min_poll_interval`, `poll_duration`, `close_timeout` take durations
    /// (`5s`, `100ms`), `create_topic` takes `true`/`false`; any other
    /// parameter is a librdkafka property (`security.protocol=ssl`).
    ///
    /// ```
    /// use tenure_kafka::KafkaCoordinator;
    /// let kafka = KafkaCoordinator::from_url("kafka://127.0.0.1:9092/billing.neli?heartbeat_timeout=2s")?;
    /// assert_eq!(kafka.config().heartbeat_timeout, std::time::Duration::from_secs(2));
    /// # Ok::<(), tenure_kafka::KafkaBackendError>(())
    /// ```
    pub fn from_url(url: &str) -> Result<KafkaCoordinator, KafkaBackendError> {
        Self::new(crate::url::parse(url)?)
    }

    /// The configuration.
    pub fn config(&self) -> &KafkaConfig {
        &self.config
    }

    /// A handle on the clients' state, fatal error and poll count that
    /// stays valid after the coordinator moved into its elector.
    pub fn status(&self) -> KafkaStatus {
        self.status.clone()
    }
}

#[async_trait]
impl Coordinator for KafkaCoordinator {
    async fn run(self: Box<Self>, session: Session) {
        let status = self.status.clone();
        // Closed is set before the session drops (the elector's role
        // becomes Stopped then), so a user who saw Stopped sees Closed.
        match Run::start(*self, session).await {
            Ok(mut run) => {
                run.run().await;
                status.set_state(State::Closed);
                drop(run);
            }
            Err((e, mut session)) => {
                tracing::error!(group = %session.group(), error = %e, "kafka elector stopped");
                session.store_health("kafka", Some(e.to_string()));
                status.set_fatal(e);
                status.set_state(State::Closed);
                drop(session);
            }
        }
    }
}

/// Whether the run goes on.
enum Flow {
    Continue,
    Stop,
}

/// What [`Run::connect`] sets up.
struct Connected {
    requests: std_mpsc::Sender<Request>,
    reports: mpsc::UnboundedReceiver<Report>,
}

struct Run {
    config: KafkaConfig,
    status: KafkaStatus,
    session: Session,
    neli: Neli,
    topic: String,
    requests: std_mpsc::Sender<Request>,
    reports: mpsc::UnboundedReceiver<Report>,
    /// The known leader, from the heartbeats read.
    view: LeaderView,
    reported: Option<(String, u64, u64, tenure::Metadata)>,
    incarnation: u64,
    /// When to poll the client thread and to join the group again.
    pacing: Pacing,
}

impl Run {
    async fn start(
        k: KafkaCoordinator,
        session: Session,
    ) -> Result<Run, (KafkaBackendError, Session)> {
        let KafkaCoordinator { config, status } = k;
        let group = session.group().as_str().to_owned();
        let group_id = config.resolved_group_id(&group);
        let topic = config.resolved_topic(&group);
        let incarnation = session.candidate().incarnation;
        let liveness = session.timing().liveness_timeout;
        let drift = session.timing().drift;
        match Self::connect(&config, &session, &topic).await {
            Ok(c) => Ok(Run {
                neli: Neli::new(
                    group_id.clone(),
                    incarnation,
                    config.heartbeat_timeout,
                    drift,
                    liveness,
                ),
                view: LeaderView::new(group_id),
                // A candidate that gives its assignment up stays out of the
                // group for a session timeout (see `Pacing`).
                pacing: Pacing::new(
                    session.clock().now().mono,
                    config.min_poll_interval,
                    config.session_timeout(),
                    liveness.is_some(),
                ),
                session,
                config,
                status,
                topic,
                requests: c.requests,
                reports: c.reports,
                reported: None,
                incarnation,
            }),
            Err(e) => Err((e, session)),
        }
    }

    /// Creates the topic if asked, the clients and the client thread.
    async fn connect(
        config: &KafkaConfig,
        session: &Session,
        topic: &str,
    ) -> Result<Connected, KafkaBackendError> {
        let group = session.group().as_str().to_owned();
        let group_id = config.resolved_group_id(&group);
        let timeout = config.heartbeat_timeout;
        if config.create_topic {
            ensure_topic(config, topic).await;
        }

        let liveness = session.timing().liveness_timeout;
        let mut props = config.consumer_properties(&group);
        if let Some(l) = liveness {
            // goneli's coupling: an application that stops pulsing stops
            // the polls, and librdkafka leaves the group after this long.
            // librdkafka requires it to be at least the session timeout.
            let ms = l.max(config.session_timeout()).as_millis().to_string();
            props.entry("max.poll.interval.ms".into()).or_insert(ms);
        }
        let (report_tx, reports) = mpsc::unbounded_channel();
        // A revoke waits for the drain, which the coordinator bounds by the
        // term's deadline (under 1.2 heartbeat timeouts); this bound only
        // frees the thread if the coordinator is gone.
        let context = GroupContext::new(
            topic.to_owned(),
            report_tx.clone(),
            timeout * 3,
            session.clock().clone(),
        );
        let consumer: BaseConsumer<GroupContext> = config
            .client_config(&props)
            .create_with_context(context)
            .map_err(|e| KafkaBackendError::Client {
                what: "group consumer",
                detail: config.scrub(&e.to_string()),
            })?;
        consumer
            .subscribe(&[topic])
            .map_err(|e| KafkaBackendError::Client {
                what: "group consumer",
                detail: config.scrub(&format!("cannot subscribe to {topic}: {e}")),
            })?;
        let producer: BaseProducer<ProducerCtx> = config
            .client_config(&config.producer_properties())
            .create_with_context(ProducerCtx {
                reports: report_tx.clone(),
            })
            .map_err(|e| KafkaBackendError::Client {
                what: "heartbeat producer",
                detail: config.scrub(&e.to_string()),
            })?;
        let reader = Reader::new(config, topic)?;

        let candidate = session.candidate().clone();
        let worker = Worker {
            consumer,
            producer,
            reader,
            topic: topic.to_owned(),
            identity: Identity {
                group_id: group_id.clone(),
                candidate: candidate.id.clone(),
                incarnation: candidate.incarnation,
                timeout,
                metadata: session.metadata().clone(),
            },
            clock: session.clock().clone(),
            poll_duration: config.poll_duration,
            reports: report_tx,
            gap_limit: timeout * neli::GAP_LIMIT,
            release_flush: timeout.min(config.close_timeout / 2),
            seq: 0,
            last_cycle: None,
            wrote: None,
            membership: Default::default(),
        };
        let (requests, request_rx) = std_mpsc::channel();
        std::thread::Builder::new()
            .name("tenure-kafka-client".into())
            .spawn(move || worker.run(request_rx))
            .map_err(|e| KafkaBackendError::Thread {
                detail: config.scrub(&e.to_string()),
            })?;
        tracing::info!(group = %group, topic = %topic, group_id = %group_id,
            candidate = %candidate.id, "kafka candidate joining");
        Ok(Connected { requests, reports })
    }

    fn now(&self) -> MonoTime {
        self.session.clock().now().mono
    }

    async fn run(&mut self) {
        loop {
            let clock = self.session.clock().clone();
            let now = clock.now().mono;
            let wake = [self.neli.next_wake(), self.view.next_lapse()]
                .into_iter()
                .flatten()
                .fold(self.pacing.next_wake(now), MonoTime::min);
            let flow = tokio::select! {
                biased;
                report = self.reports.recv() => match report {
                    Some(Report::Fatal { detail }) => {
                        self.fatal(KafkaBackendError::Fatal { detail }).await;
                        Flow::Stop
                    }
                    Some(Report::Closed) | None => {
                        self.fatal(KafkaBackendError::Fatal {
                            detail: "the Kafka client thread ended unexpectedly".into(),
                        })
                        .await;
                        Flow::Stop
                    }
                    Some(report) => self.on_report(report).await,
                },
                command = self.session.command() => match command {
                    Command::Resign => {
                        self.resign().await;
                        Flow::Continue
                    }
                    Command::Shutdown => {
                        self.shutdown(EndReason::Shutdown).await;
                        Flow::Stop
                    }
                },
                _ = clock.sleep_until(wake) => Flow::Continue,
            };
            if let Flow::Stop = flow {
                return;
            }
            if let Flow::Stop = self.tick().await {
                return;
            }
        }
    }

    fn silence(&self, now: MonoTime) -> Duration {
        self.pacing.silence(now, self.session.last_pulse())
    }

    /// Timers: the fence, liveness, letting go, the known leader's lapse,
    /// the next poll, the rejoin.
    async fn tick(&mut self) -> Flow {
        let now = self.now();
        let pulse = self.session.last_pulse();
        let silence = self.pacing.silence(now, pulse);
        let starved = self.pacing.starved(pulse);
        for d in self.neli.tick(now, silence, starved) {
            if let Flow::Stop = self.apply(d).await {
                return Flow::Stop;
            }
        }
        if self.view.tick(now) {
            self.report_leader();
        }
        if self.pacing.rejoin(now) {
            tracing::debug!(group = %self.session.group(), "joining the group again");
            let _ = self.requests.send(Request::Join);
        }
        if self.pacing.poll(now, pulse) {
            let plan = self.neli.plan();
            if self.requests.send(Request::Poll { plan }).is_err() {
                // The thread is gone; its Closed report ends the run.
                self.pacing.polled();
            }
        }
        Flow::Continue
    }

    async fn on_report(&mut self, report: Report) -> Flow {
        let now = self.now();
        let decisions = match report {
            Report::Assigned { generation } => {
                tracing::info!(group = %self.session.group(), generation, "partition 0 assigned: waiting for the first heartbeat");
                self.neli.assigned(generation, now);
                Vec::new()
            }
            Report::Revoked { done } => {
                self.neli.unassigned();
                self.drain(EndReason::Revoked).await;
                let _ = done.send(());
                Vec::new()
            }
            Report::Reading => {
                tracing::debug!(group = %self.session.group(), "reading the leader topic");
                self.neli.reading_from(now);
                Vec::new()
            }
            Report::Membership { at, silent } => {
                self.neli.membership(at, silent);
                Vec::new()
            }
            Report::Sent {
                seq,
                at,
                generation,
                group_generation,
            } => {
                self.neli.sent(seq, at, generation, group_generation);
                Vec::new()
            }
            Report::Delivered { seq, offset } => {
                self.neli.delivered(seq, offset).into_iter().collect()
            }
            Report::Record { offset, heartbeat } => {
                let (decisions, leader_changed) = match &heartbeat {
                    Some(hb) => {
                        let silence = self.silence(now);
                        let decisions = self.neli.record(offset, hb, now, silence);
                        let wall = self.session.clock().now();
                        (decisions, self.view.heartbeat(offset, hb, wall))
                    }
                    None => (
                        self.neli.offset(offset).into_iter().collect(),
                        self.view.offset(offset),
                    ),
                };
                if leader_changed {
                    self.report_leader();
                }
                decisions
            }
            Report::Polled { error, gap } => {
                self.pacing.polled();
                self.status.polled();
                self.session.store_health("poll", error);
                if gap {
                    tracing::warn!(group = %self.session.group(), "the Kafka client was not polled for more than {} heartbeat timeouts (a pause or suspend): its assignment is not trusted", neli::GAP_LIMIT);
                    self.neli.gap(now)
                } else {
                    Vec::new()
                }
            }
            Report::Fatal { .. } | Report::Closed => Vec::new(),
        };
        for d in decisions {
            if let Flow::Stop = self.apply(d).await {
                return Flow::Stop;
            }
        }
        Flow::Continue
    }

    async fn apply(&mut self, d: Decision) -> Flow {
        match d {
            Decision::Elected { token, deadline } => {
                self.session.elected(token, deadline);
            }
            Decision::Renewed { deadline, latency } => self.session.renewed(deadline, latency),
            Decision::End {
                reason,
                work_deadline,
            } => self.session.end_term(reason, work_deadline),
            Decision::Rejoin { why } => {
                tracing::warn!(group = %self.session.group(), why, "giving up partition 0: leaving the group, and joining again after a session timeout");
                self.give_up(EndReason::Revoked).await;
            }
            Decision::Regressed { highest, next } => {
                let error = KafkaBackendError::TopicRecreated {
                    topic: self.topic.clone(),
                    highest,
                    next,
                };
                let fault = tenure::Fault::TokenRegressed { highest, next };
                self.fatal(error).await;
                self.session.fail(fault);
                return Flow::Stop;
            }
        }
        Flow::Continue
    }

    /// Ends the term, if any, and waits until its work has drained,
    /// bounded by the term's deadline: the barrier.
    async fn drain(&mut self, reason: EndReason) {
        let Some(deadline) = self.session.term().map(|t| t.deadline_mono()) else {
            return;
        };
        self.session.end_term_and_drain(reason, deadline).await;
    }

    fn report_leader(&mut self) {
        let other = self
            .view
            .current()
            .filter(|s| s.incarnation != self.incarnation)
            .cloned();
        let key = other.as_ref().map(|s| {
            (
                s.info.candidate.clone(),
                s.incarnation,
                s.info.token,
                s.info.metadata.clone(),
            )
        });
        if key != self.reported {
            self.reported = key;
            self.session.leader_changed(other.map(|s| s.info));
        }
    }

    /// Gives partition 0 up: the term drains, the candidate releases and
    /// leaves the group (one rebalance hands partition 0 to another
    /// candidate) and joins again after one session timeout.
    async fn give_up(&mut self, reason: EndReason) {
        if !self.pacing.may_leave(self.neli.is_assigned()) {
            return;
        }
        self.neli.stand_down();
        self.drain(reason).await;
        tracing::info!(group = %self.session.group(), "leaving the group");
        let _ = self.requests.send(Request::Leave);
        self.pacing.left(self.now());
    }

    async fn resign(&mut self) {
        self.give_up(EndReason::Resigned).await;
    }

    /// A fatal error: drains the term (bounded by its deadline), closes
    /// the clients, and reports it everywhere a user may look.
    async fn fatal(&mut self, e: KafkaBackendError) {
        tracing::error!(group = %self.session.group(), error = %e, "kafka elector stopped");
        self.neli.stand_down();
        self.drain(EndReason::Failed).await;
        self.session.store_health("kafka", Some(e.to_string()));
        self.status.set_fatal(e);
        self.close().await;
    }

    /// Drains the term, then closes the clients: the consumer releases and
    /// leaves the group at once, so the next leader is assigned after one
    /// rebalance.
    async fn shutdown(&mut self, reason: EndReason) {
        self.status.set_state(State::Closing);
        self.neli.stand_down();
        self.drain(reason).await;
        self.close().await;
    }

    /// Closes the clients on their thread, bounded by the close timeout:
    /// librdkafka's close can hang (goneli works around
    /// confluent-kafka-go #463 the same way); a hung thread is abandoned.
    async fn close(&mut self) {
        self.status.set_state(State::Closing);
        let _ = self.requests.send(Request::Close);
        let clock = self.session.clock().clone();
        let deadline = clock.now().mono + self.config.close_timeout;
        let closed = async {
            loop {
                match self.reports.recv().await {
                    // The last revoke, served while closing: the term has
                    // already drained.
                    Some(Report::Revoked { done }) => {
                        let _ = done.send(());
                    }
                    Some(Report::Closed) | None => return,
                    Some(_) => {}
                }
            }
        };
        tokio::select! {
            _ = closed => {}
            _ = clock.sleep_until(deadline) => {
                tracing::warn!(timeout = ?self.config.close_timeout, "closing the Kafka clients timed out; abandoning their thread");
            }
        }
        self.status.set_state(State::Closed);
    }
}

/// The replication the leader topic should have: every heartbeat on a
/// majority of three, so one broker lost loses no heartbeat and offsets
/// (tokens) never go back.
const TOPIC_REPLICATION: i32 = 3;

/// Creates the leader topic with one partition unless it exists: three
/// replicas with `min.insync.replicas=2` and no unclean leader election
/// where the cluster has three brokers, as many as it has otherwise (with
/// a warning). Failures are logged, not fatal: the topic may exist
/// already, or be created by someone else, and the reader reports a
/// missing topic anyway.
async fn ensure_topic(config: &KafkaConfig, topic: &str) {
    let wait = config.heartbeat_timeout.max(Duration::from_secs(5));
    let admin: AdminClient<DefaultClientContext> = match config
        .client_config(&config.admin_properties())
        .create()
    {
        Ok(a) => a,
        Err(e) => {
            tracing::warn!(topic, error = %e, "cannot create an admin client to create the leader topic");
            return;
        }
    };
    let admin = std::sync::Arc::new(admin);
    // librdkafka's metadata call blocks: off the async threads.
    let meta = {
        let (admin, topic) = (admin.clone(), topic.to_owned());
        tokio::task::spawn_blocking(move || {
            admin.inner().fetch_metadata(Some(&topic), wait).map(|m| {
                let replicas = m
                    .topics()
                    .iter()
                    .find(|t| t.name() == topic && t.error().is_none())
                    .and_then(|t| t.partitions().first().map(|p| p.replicas().len()));
                (m.brokers().len(), replicas)
            })
        })
        .await
    };
    let (brokers, existing) = match meta {
        Ok(Ok(found)) => found,
        Ok(Err(e)) => {
            tracing::warn!(topic, error = %e, "cannot read the cluster's metadata to create the leader topic");
            return;
        }
        Err(_) => return,
    };
    if let Some(replicas) = existing {
        warn_if_weak(topic, replicas);
        return;
    }
    let replication = i32::try_from(brokers)
        .unwrap_or(i32::MAX)
        .clamp(1, TOPIC_REPLICATION);
    let mut new = NewTopic::new(topic, 1, TopicReplication::Fixed(replication))
        .set("unclean.leader.election.enable", "false");
    if replication >= TOPIC_REPLICATION {
        new = new.set("min.insync.replicas", "2");
    }
    let opts = AdminOptions::new().request_timeout(Some(wait));
    let result = tokio::time::timeout(wait, admin.create_topics([&new], &opts)).await;
    match result {
        Ok(Ok(results)) => match results.into_iter().next() {
            Some(Ok(_)) => {
                tracing::info!(
                    topic,
                    replication,
                    "created the leader topic with one partition"
                );
                warn_if_weak(topic, replication as usize);
            }
            Some(Err((_, RDKafkaErrorCode::TopicAlreadyExists))) | None => {}
            Some(Err((_, code))) => {
                tracing::warn!(topic, error = ?code, "cannot create the leader topic; create it with one partition");
            }
        },
        Ok(Err(e)) => {
            tracing::warn!(topic, error = %e, "cannot create the leader topic; create it with one partition");
        }
        Err(_) => tracing::warn!(topic, "creating the leader topic timed out"),
    }
}

fn warn_if_weak(topic: &str, replicas: usize) {
    if replicas < TOPIC_REPLICATION as usize {
        tracing::warn!(topic, replicas,
            "the leader topic has fewer than 3 replicas: losing a broker can lose heartbeats and send \
             offsets, hence fencing tokens, back (the candidates then stop); give it 3 replicas with \
             min.insync.replicas=2");
    }
}
