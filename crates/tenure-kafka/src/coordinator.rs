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
use tokio::sync::{mpsc, watch};

use crate::config::KafkaConfig;
use crate::error::KafkaBackendError;
use crate::leader::Seen;
use crate::neli::{Decision, Neli};
use crate::observer::KafkaObserver;
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
                fail(&status, &mut session, e);
                status.set_state(State::Closed);
                drop(session);
            }
        }
    }
}

/// Reports a fatal error everywhere a user may look, ending any term.
fn fail(status: &KafkaStatus, session: &mut Session, e: KafkaBackendError) {
    tracing::error!(group = %session.group(), error = %e, "kafka elector stopped");
    let now = session.clock().now().mono;
    // The assignment can no longer be trusted: stop acting at once.
    session.end_term(EndReason::Fenced, now);
    session.store_health("kafka", Some(e.to_string()));
    status.set_fatal(e);
}

/// How long a candidate that resigned stays out of the group: a session
/// timeout, so that the rebalance its leaving caused has given partition 0
/// to someone else before its own join starts the next one.
fn rejoin_delay(config: &KafkaConfig) -> Duration {
    config.session_timeout()
}

/// What [`Run::connect`] sets up.
struct Connected {
    requests: std_mpsc::Sender<Request>,
    reports: mpsc::UnboundedReceiver<Report>,
    observer: KafkaObserver,
    incarnation: u64,
    liveness: Option<Duration>,
}

struct Run {
    config: KafkaConfig,
    status: KafkaStatus,
    session: Session,
    neli: Neli,
    requests: std_mpsc::Sender<Request>,
    reports: mpsc::UnboundedReceiver<Report>,
    /// The known leader, from the observer (kept alive by this field).
    _observer: KafkaObserver,
    seen: watch::Receiver<Option<Seen>>,
    seen_alive: bool,
    reported: Option<(String, u64, u64, tenure::Metadata)>,
    incarnation: u64,
    liveness: Option<Duration>,
    poll_in_flight: bool,
    next_poll: MonoTime,
    pulse_at_poll: MonoTime,
    rejoin_at: Option<MonoTime>,
}

impl Run {
    async fn start(
        k: KafkaCoordinator,
        session: Session,
    ) -> Result<Run, (KafkaBackendError, Session)> {
        let KafkaCoordinator { config, status } = k;
        match Self::connect(&config, &session).await {
            Ok(c) => Ok(Run {
                neli: Neli::new(c.incarnation, config.heartbeat_timeout, c.liveness),
                next_poll: session.clock().now().mono,
                session,
                config,
                status,
                requests: c.requests,
                reports: c.reports,
                seen: c.observer.seen(),
                _observer: c.observer,
                seen_alive: true,
                reported: None,
                incarnation: c.incarnation,
                liveness: c.liveness,
                poll_in_flight: false,
                pulse_at_poll: MonoTime::from_nanos(0),
                rejoin_at: None,
            }),
            Err(e) => Err((e, session)),
        }
    }

    /// Creates the topic if asked, the clients, the observer and the
    /// client thread.
    async fn connect(
        config: &KafkaConfig,
        session: &Session,
    ) -> Result<Connected, KafkaBackendError> {
        let group = session.group().as_str().to_owned();
        let topic = config.resolved_topic(&group);
        let timeout = config.heartbeat_timeout;
        if config.create_topic {
            ensure_topic(config, &topic).await;
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
        let context = GroupContext::new(topic.clone(), report_tx.clone(), timeout * 3);
        let consumer: BaseConsumer<GroupContext> = config
            .client_config(&props)
            .create_with_context(context)
            .map_err(|e| KafkaBackendError::Client {
                what: "group consumer",
                detail: e.to_string(),
            })?;
        consumer
            .subscribe(&[&topic])
            .map_err(|e| KafkaBackendError::Client {
                what: "group consumer",
                detail: format!("cannot subscribe to {topic}: {e}"),
            })?;
        let producer: BaseProducer<ProducerCtx> = config
            .client_config(&config.producer_properties())
            .create_with_context(ProducerCtx)
            .map_err(|e| KafkaBackendError::Client {
                what: "heartbeat producer",
                detail: e.to_string(),
            })?;
        let observer = KafkaObserver::start_on(config, topic.clone(), session.clock().clone())?;

        let candidate = session.candidate().clone();
        let worker = Worker {
            consumer,
            producer,
            topic: topic.clone(),
            identity: Identity {
                candidate: candidate.id.clone(),
                incarnation: candidate.incarnation,
                timeout,
                metadata: session.metadata().clone(),
            },
            clock: session.clock().clone(),
            poll_duration: config.poll_duration,
            reports: report_tx,
            seq: 0,
        };
        let (requests, request_rx) = std_mpsc::channel();
        std::thread::Builder::new()
            .name("tenure-kafka-client".into())
            .spawn(move || worker.run(request_rx))
            .map_err(|e| KafkaBackendError::Thread {
                detail: e.to_string(),
            })?;
        tracing::info!(group = %group, topic = %topic, group_id = %config.resolved_group_id(&group),
            candidate = %candidate.id, "kafka candidate joining");
        Ok(Connected {
            requests,
            reports,
            observer,
            incarnation: candidate.incarnation,
            liveness,
        })
    }

    fn session(&mut self) -> &mut Session {
        &mut self.session
    }

    async fn run(&mut self) {
        loop {
            let clock = self.session.clock().clone();
            let now = clock.now().mono;
            let mut wake = now + self.config.min_poll_interval;
            if let Some(t) = self.neli.next_wake() {
                wake = wake.min(t);
            }
            if let Some(t) = self.rejoin_at {
                wake = wake.min(t);
            }
            let seen_alive = self.seen_alive;
            tokio::select! {
                biased;
                report = self.reports.recv() => match report {
                    Some(Report::Fatal { detail }) => {
                        self.fatal(KafkaBackendError::Fatal { detail }).await;
                        return;
                    }
                    Some(Report::Closed) | None => {
                        self.fatal(KafkaBackendError::Fatal {
                            detail: "the Kafka client thread ended unexpectedly".into(),
                        })
                        .await;
                        return;
                    }
                    Some(report) => self.on_report(report).await,
                },
                command = self.session.command() => match command {
                    Command::Resign => self.resign().await,
                    Command::Shutdown => {
                        self.shutdown(EndReason::Shutdown).await;
                        return;
                    }
                },
                changed = async {
                    if seen_alive { self.seen.changed().await } else { std::future::pending().await }
                } => match changed {
                    Ok(()) => self.on_leader_seen(),
                    Err(_) => self.seen_alive = false,
                },
                _ = clock.sleep_until(wake) => {}
            }
            self.tick();
        }
    }

    fn silence(&mut self, now: MonoTime) -> Duration {
        match self.liveness {
            Some(_) => now.saturating_since(self.session().last_pulse()),
            None => Duration::ZERO,
        }
    }

    /// Timers: the fence, liveness, the next poll, the rejoin.
    fn tick(&mut self) {
        let now = self.session().clock().now().mono;
        let silence = self.silence(now);
        let starved = self.liveness.is_some() && self.session.last_pulse() <= self.pulse_at_poll;
        if let Some(d) = self.neli.tick(now, silence, starved) {
            self.apply(d);
        }
        if self.rejoin_at.is_some_and(|t| now >= t) {
            self.rejoin_at = None;
            tracing::debug!("rejoining the group after resigning");
            let _ = self.requests.send(Request::Join);
        }
        if self.poll_in_flight || now < self.next_poll {
            return;
        }
        self.next_poll = now + self.config.min_poll_interval;
        if self.liveness.is_some() {
            // goneli polls only from Pulse: no pulse since the last poll,
            // no poll, and librdkafka's max.poll.interval.ms takes its
            // course.
            let last = self.session().last_pulse();
            if last <= self.pulse_at_poll {
                return;
            }
            self.pulse_at_poll = last;
        }
        let token = self.neli.token();
        if self.requests.send(Request::Poll { token }).is_ok() {
            self.poll_in_flight = true;
        }
    }

    async fn on_report(&mut self, report: Report) {
        match report {
            Report::Assigned { generation } => {
                tracing::info!(group = %self.session().group(), generation, "partition 0 assigned: waiting for the first heartbeat");
                self.neli.assigned(generation);
            }
            Report::Revoked { done } => {
                self.neli.unassigned();
                self.drain(EndReason::Revoked).await;
                let _ = done.send(());
            }
            Report::Heartbeat { offset, heartbeat } => {
                let now = self.session().clock().now().mono;
                let decision = if self.neli.is_mine(&heartbeat) {
                    let silence = self.silence(now);
                    self.neli.own_heartbeat(&heartbeat, offset, now, silence)
                } else {
                    self.neli.foreign_heartbeat(&heartbeat, now)
                };
                if let Some(d) = decision {
                    self.apply(d);
                }
            }
            Report::Polled { error } => {
                self.poll_in_flight = false;
                self.status.polled();
                self.session().store_health("poll", error);
            }
            Report::Fatal { .. } | Report::Closed => {}
        }
    }

    fn apply(&mut self, d: Decision) {
        let session = self.session();
        match d {
            Decision::Elected { token, deadline } => {
                session.elected(token, deadline);
            }
            Decision::Renewed { deadline, latency } => session.renewed(deadline, latency),
            Decision::End {
                reason,
                work_deadline,
            } => session.end_term(reason, work_deadline),
        }
    }

    /// Ends the term, if any, and waits until its work has drained,
    /// bounded by the term's deadline: the barrier.
    async fn drain(&mut self, reason: EndReason) {
        let session = self.session();
        let Some(deadline) = session.term().map(|t| t.deadline_mono()) else {
            return;
        };
        session.end_term_and_drain(reason, deadline).await;
    }

    fn on_leader_seen(&mut self) {
        let seen = self.seen.borrow_and_update().clone();
        let other = seen.filter(|s| s.incarnation != self.incarnation);
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
            self.session().leader_changed(other.map(|s| s.info));
        }
    }

    /// Resigning gives up the partition: the term drains, the candidate
    /// leaves the group (one rebalance hands partition 0 to another
    /// candidate) and joins again after one session timeout.
    async fn resign(&mut self) {
        if !self.neli.is_assigned() || self.rejoin_at.is_some() {
            return;
        }
        self.neli.stand_down();
        self.drain(EndReason::Resigned).await;
        tracing::info!(group = %self.session().group(), "resigned: leaving the group");
        let _ = self.requests.send(Request::Leave);
        let now = self.session().clock().now().mono;
        self.rejoin_at = Some(now + rejoin_delay(&self.config));
    }

    async fn fatal(&mut self, e: KafkaBackendError) {
        let status = self.status.clone();
        fail(&status, self.session(), e);
        self.close().await;
    }

    /// Drains the term, then closes the clients: the consumer leaves the
    /// group at once, so the next leader is assigned after one rebalance.
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
        let clock = self.session().clock().clone();
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

/// Creates the leader topic with one partition unless it exists. Failures
/// are logged, not fatal: the topic may exist already, or be created by
/// someone else, and the subscription reports a missing topic anyway.
async fn ensure_topic(config: &KafkaConfig, topic: &str) {
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
    let wait = config.heartbeat_timeout.max(Duration::from_secs(5));
    let opts = AdminOptions::new().request_timeout(Some(wait));
    // Replication -1 takes the brokers' default; brokers too old for that
    // refuse it, and get 1.
    for replication in [-1, 1] {
        let new = NewTopic::new(topic, 1, TopicReplication::Fixed(replication));
        let result = tokio::time::timeout(wait, admin.create_topics([&new], &opts)).await;
        match result {
            Ok(Ok(results)) => match results.into_iter().next() {
                Some(Ok(_)) => {
                    tracing::info!(topic, "created the leader topic with one partition");
                    return;
                }
                Some(Err((_, RDKafkaErrorCode::TopicAlreadyExists))) | None => return,
                Some(Err((_, RDKafkaErrorCode::InvalidReplicationFactor))) if replication < 0 => {
                    continue
                }
                Some(Err((_, code))) => {
                    tracing::warn!(topic, error = ?code, "cannot create the leader topic; create it with one partition");
                    return;
                }
            },
            Ok(Err(e)) => {
                tracing::warn!(topic, error = %e, "cannot create the leader topic; create it with one partition");
                return;
            }
            Err(_) => {
                tracing::warn!(topic, "creating the leader topic timed out");
                return;
            }
        }
    }
}
