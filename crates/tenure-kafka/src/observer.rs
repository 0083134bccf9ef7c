//! Knowing who leads without standing: read partition 0 of the leader
//! topic from its last record on, without joining the consumer group.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use tenure::{Clock, LeaderInfo, SystemClock};
use tokio::sync::watch;

use crate::config::KafkaConfig;
use crate::error::KafkaBackendError;
use crate::heartbeat::Heartbeat;
use crate::leader::{LeaderView, Seen};

/// Follows who leads a group by reading its heartbeats, without joining the
/// group: followers and programs that never stand (service discovery, the
/// `tenure status` command) learn the leader, its fencing token and its
/// published metadata. goneli cannot tell who leads.
///
/// A leader counts until its heartbeats stop for its heartbeat timeout.
/// The observer starts from the last record in the topic, so it knows a
/// live leader within one heartbeat interval of starting.
///
/// ```no_run
/// use tenure_kafka::{KafkaConfig, KafkaObserver};
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let mut observer = KafkaObserver::start(KafkaConfig::new("10.0.0.5:9092"), "billing")?;
/// if let Some(leader) = observer.wait_for_leader().await {
///     println!("{} leads with token {} at {:?}", leader.candidate, leader.token,
///              leader.metadata.get("address"));
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct KafkaObserver {
    rx: watch::Receiver<Option<LeaderInfo>>,
    seen: watch::Receiver<Option<Seen>>,
    stop: Arc<AtomicBool>,
}

impl Drop for KafkaObserver {
    fn drop(&mut self) {
        // The thread notices within one poll and closes its consumer; it
        // is not joined, so dropping never blocks an async task.
        self.stop.store(true, Ordering::Release);
    }
}

impl KafkaObserver {
    /// Starts observing tenure group `group` (its leader topic is derived
    /// from the group as for candidates, unless `config` names one).
    pub fn start(config: KafkaConfig, group: &str) -> Result<KafkaObserver, KafkaBackendError> {
        config.validate()?;
        let topic = config.resolved_topic(group);
        Self::start_on(&config, topic, Arc::new(SystemClock))
    }

    /// Starts observing from a `kafka://` URL (see
    /// [`KafkaCoordinator::from_url`](crate::KafkaCoordinator::from_url)).
    pub fn from_url(url: &str, group: &str) -> Result<KafkaObserver, KafkaBackendError> {
        Self::start(crate::url::parse(url)?, group)
    }

    pub(crate) fn start_on(
        config: &KafkaConfig,
        topic: String,
        clock: Arc<dyn Clock>,
    ) -> Result<KafkaObserver, KafkaBackendError> {
        let consumer: BaseConsumer<ObserverCtx> = config
            .client_config(&config.observer_properties())
            .create_with_context(ObserverCtx)
            .map_err(|e| KafkaBackendError::Client {
                what: "observer consumer",
                detail: e.to_string(),
            })?;
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&topic, 0, Offset::OffsetTail(1))
            .and_then(|()| consumer.assign(&tpl))
            .map_err(|e| KafkaBackendError::Client {
                what: "observer consumer",
                detail: format!("cannot read partition 0 of {topic}: {e}"),
            })?;
        let (tx, rx) = watch::channel(None);
        let (seen_tx, seen) = watch::channel(None);
        let stop = Arc::new(AtomicBool::new(false));
        let run = Observing {
            consumer,
            topic,
            clock,
            every: config.min_poll_interval,
            stop: stop.clone(),
            tx,
            seen_tx,
        };
        std::thread::Builder::new()
            .name("tenure-kafka-observer".into())
            .spawn(move || run.run())
            .map_err(|e| KafkaBackendError::Thread {
                detail: e.to_string(),
            })?;
        Ok(KafkaObserver { rx, seen, stop })
    }

    /// The leader as last seen.
    pub fn leader(&self) -> Option<LeaderInfo> {
        self.rx.borrow().clone()
    }

    /// A watch of the leader, for `changed().await` loops.
    pub fn watch(&self) -> watch::Receiver<Option<LeaderInfo>> {
        self.rx.clone()
    }

    /// Waits until some candidate leads and returns it; `None` if the
    /// observer's thread ended.
    pub async fn wait_for_leader(&mut self) -> Option<LeaderInfo> {
        self.rx
            .wait_for(Option::is_some)
            .await
            .ok()
            .and_then(|l| l.clone())
    }

    /// The leader with its elector instance, for the coordinator.
    pub(crate) fn seen(&self) -> watch::Receiver<Option<Seen>> {
        self.seen.clone()
    }
}

struct ObserverCtx;

impl ClientContext for ObserverCtx {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        crate::worker::log(level, fac, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::debug!(error = %error, reason, "kafka observer error");
    }
}

impl ConsumerContext for ObserverCtx {}

struct Observing {
    consumer: BaseConsumer<ObserverCtx>,
    topic: String,
    clock: Arc<dyn Clock>,
    every: Duration,
    stop: Arc<AtomicBool>,
    tx: watch::Sender<Option<LeaderInfo>>,
    seen_tx: watch::Sender<Option<Seen>>,
}

impl Observing {
    fn run(self) {
        let mut view = LeaderView::default();
        let mut reported_error = false;
        loop {
            let unwatched = self.tx.is_closed() && self.seen_tx.is_closed();
            if self.stop.load(Ordering::Acquire) || unwatched {
                return;
            }
            let now = self.clock.now();
            let wait = view
                .next_lapse()
                .map_or(self.every, |t| t.saturating_since(now.mono).min(self.every));
            let changed = match self.consumer.poll(wait) {
                Some(Ok(msg)) if msg.topic() == self.topic && msg.partition() == 0 => {
                    reported_error = false;
                    match msg.payload().map(Heartbeat::decode) {
                        Some(Ok(hb)) => view.heartbeat(&hb, self.clock.now()),
                        Some(Err(e)) => {
                            tracing::debug!(offset = msg.offset(), error = %e, "skipping a record of the leader topic");
                            false
                        }
                        None => false,
                    }
                }
                Some(Ok(_)) | None => false,
                Some(Err(e)) => {
                    if !reported_error {
                        tracing::warn!(topic = %self.topic, error = %e, "observer cannot read the leader topic");
                        reported_error = true;
                    }
                    // Errors come back at once; do not spin on them.
                    std::thread::sleep(self.every);
                    false
                }
            };
            let lapsed = view.tick(self.clock.now().mono);
            if changed || lapsed {
                let current = view.current().cloned();
                tracing::debug!(topic = %self.topic, leader = ?current.as_ref().map(|s| (&s.info.candidate, s.info.token)), "leader changed");
                self.tx
                    .send_replace(current.as_ref().map(|s| s.info.clone()));
                self.seen_tx.send_replace(current);
            }
        }
    }
}
