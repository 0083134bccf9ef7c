//! Knowing who leads without standing: read partition 0 of the leader
//! topic from its last record on, without joining the consumer group.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tenure::{Clock, LeaderInfo, SystemClock};
use tokio::sync::watch;

use crate::config::KafkaConfig;
use crate::error::KafkaBackendError;
use crate::leader::LeaderView;
use crate::reader::{Read, Reader};

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
        let group_id = config.resolved_group_id(group);
        Self::start_on(&config, topic, group_id, Arc::new(SystemClock))
    }

    /// Starts observing from a `kafka://` URL (see
    /// [`KafkaCoordinator::from_url`](crate::KafkaCoordinator::from_url)).
    pub fn from_url(url: &str, group: &str) -> Result<KafkaObserver, KafkaBackendError> {
        Self::start(crate::url::parse(url)?, group)
    }

    fn start_on(
        config: &KafkaConfig,
        topic: String,
        group_id: String,
        clock: Arc<dyn Clock>,
    ) -> Result<KafkaObserver, KafkaBackendError> {
        let reader = Reader::new(config, &topic)?;
        let (tx, rx) = watch::channel(None);
        let stop = Arc::new(AtomicBool::new(false));
        let run = Observing {
            reader,
            topic,
            view: LeaderView::new(group_id),
            clock,
            every: config.min_poll_interval,
            close_timeout: config.close_timeout,
            stop: stop.clone(),
            tx,
        };
        std::thread::Builder::new()
            .name("tenure-kafka-observer".into())
            .spawn(move || run.run())
            .map_err(|e| KafkaBackendError::Thread {
                detail: config.scrub(&e.to_string()),
            })?;
        Ok(KafkaObserver { rx, stop })
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
}

struct Observing {
    reader: Reader,
    topic: String,
    view: LeaderView,
    clock: Arc<dyn Clock>,
    every: Duration,
    close_timeout: Duration,
    stop: Arc<AtomicBool>,
    tx: watch::Sender<Option<LeaderInfo>>,
}

impl Observing {
    fn run(mut self) {
        let mut reported_error = false;
        loop {
            if self.stop.load(Ordering::Acquire) || self.tx.is_closed() {
                break;
            }
            let now = self.clock.now();
            let wait = self
                .view
                .next_lapse()
                .map_or(self.every, |t| t.saturating_since(now.mono).min(self.every));
            let mut changed = false;
            let mut error = None;
            let (view, clock) = (&mut self.view, &self.clock);
            self.reader.poll(wait, 1000, |read| match read {
                Read::Positioned => {}
                Read::Record {
                    offset,
                    heartbeat: Some(hb),
                } => changed |= view.heartbeat(offset, &hb, clock.now()),
                Read::Record {
                    offset,
                    heartbeat: None,
                } => changed |= view.offset(offset),
                Read::Error(e) => error = Some(e),
            });
            match error {
                Some(e) => {
                    if !reported_error {
                        tracing::warn!(topic = %self.topic, error = %e, "observer cannot read the leader topic");
                        reported_error = true;
                    }
                    // Errors come back at once; do not spin on them.
                    std::thread::sleep(self.every);
                }
                None => reported_error = false,
            }
            let lapsed = self.view.tick(self.clock.now().mono);
            if changed || lapsed {
                let current = self.view.current().map(|s| s.info.clone());
                tracing::debug!(topic = %self.topic, leader = ?current.as_ref().map(|l| (&l.candidate, l.token)), "leader changed");
                self.tx.send_replace(current);
            }
        }
        // Nobody waits for the leader any more. Closing the reader may
        // hang on a hung broker: it is bounded, and abandoned past the
        // bound, so this thread always ends.
        let Observing {
            reader,
            topic,
            close_timeout,
            tx,
            ..
        } = self;
        drop(tx);
        crate::reader::close_bounded(reader, close_timeout, &topic);
    }
}
