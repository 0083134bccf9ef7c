//! Watching who leads a group without standing: service discovery, vimeo's
//! `LeaderChanged` watcher.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::clock::{Clock, MonoTime, SystemClock};
use crate::config::takeover_wait;
use crate::error::{ConfigError, StoreError};
use crate::record::{GroupName, Version};
use crate::role::LeaderInfo;
use crate::store::{ChangeFeed, LeaseView};

/// Follows a group's leader and publishes it through a watch channel.
///
/// A record counts as leading until it has been seen unchanged for its term
/// × (1 + drift): after that its holder has stopped, whatever its wall-clock
/// fields say.
///
/// ```
/// use std::time::Duration;
/// use tenure::{Elector, MemoryStore, Metadata, Observer};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryStore::new();
/// let elector = Elector::builder(store.clone(), "api")
///     .metadata(Metadata::address("10.0.0.7:8080"))
///     .start()?;
/// let mut observer = Observer::builder(store, "api").start()?;
/// let leader = observer.wait_for_leader().await.expect("a leader");
/// assert_eq!(leader.metadata.get("address"), Some("10.0.0.7:8080"));
/// # elector.shutdown().await;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Observer {
    rx: watch::Receiver<Option<LeaderInfo>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Observer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Configures an [`Observer`]; see [`Observer::builder`].
pub struct ObserverBuilder {
    store: Arc<dyn LeaseView>,
    group: Result<GroupName, ConfigError>,
    poll_interval: Duration,
    read_timeout: Duration,
    drift: f64,
    clock: Arc<dyn Clock>,
}

impl ObserverBuilder {
    /// How often to re-read the record when the store cannot notify
    /// (default 1 s).
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.poll_interval = every;
        self
    }

    /// How long one read may take before it counts as failed (default 5 s).
    /// A read that hangs must not keep a dead leader on display: while reads
    /// fail, a leader still lapses once its record has gone unrenewed for
    /// its term × (1 + drift).
    pub fn read_timeout(mut self, timeout: Duration) -> Self {
        self.read_timeout = timeout;
        self
    }

    /// The clock-drift bound used to decide that a silent leader has gone
    /// (default 0.01, as for electors).
    pub fn drift(mut self, drift: f64) -> Self {
        self.drift = drift;
        self
    }

    /// The clock (default [`SystemClock`]).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Starts observing. Must be called within a tokio runtime.
    pub fn start(self) -> Result<Observer, crate::ElectorError> {
        let group = self.group?;
        if self.poll_interval.is_zero() {
            return Err(ConfigError::timing(
                "observer poll interval is zero: give a positive interval",
            )
            .into());
        }
        if self.read_timeout.is_zero() {
            return Err(ConfigError::timing(
                "observer read timeout is zero: give a positive timeout",
            )
            .into());
        }
        if !(self.drift.is_finite() && (0.0..0.5).contains(&self.drift)) {
            return Err(ConfigError::timing("observer drift bound is outside [0, 0.5)").into());
        }
        let runtime =
            tokio::runtime::Handle::try_current().map_err(|_| crate::ElectorError::NoRuntime)?;
        let (tx, rx) = watch::channel(None);
        let task = runtime.spawn(observe(
            Watched {
                store: self.store,
                group,
                poll: self.poll_interval,
                read_timeout: self.read_timeout,
                drift: self.drift,
                clock: self.clock,
            },
            tx,
        ));
        Ok(Observer { rx, task })
    }
}

impl Observer {
    /// Starts configuring an observer of `group` on `store`: any
    /// [`LeaseStore`](crate::LeaseStore), or a read-only [`LeaseView`].
    pub fn builder(store: impl LeaseView, group: impl AsRef<str>) -> ObserverBuilder {
        ObserverBuilder {
            store: Arc::new(store),
            group: GroupName::new(group.as_ref()),
            poll_interval: Duration::from_secs(1),
            read_timeout: Duration::from_secs(5),
            drift: 0.01,
            clock: Arc::new(SystemClock),
        }
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
    /// observer's task ended.
    pub async fn wait_for_leader(&mut self) -> Option<LeaderInfo> {
        self.rx
            .wait_for(Option::is_some)
            .await
            .ok()
            .and_then(|l| l.clone())
    }
}

/// What an observer watches, and how.
struct Watched {
    store: Arc<dyn LeaseView>,
    group: GroupName,
    poll: Duration,
    read_timeout: Duration,
    drift: f64,
    clock: Arc<dyn Clock>,
}

impl Watched {
    /// One read, bounded by the read timeout.
    async fn read(&self) -> Result<Option<crate::record::Versioned>, StoreError> {
        let deadline = self.clock.now().mono + self.read_timeout;
        tokio::select! {
            biased;
            r = self.store.read(&self.group) => r,
            _ = self.clock.sleep_until(deadline) => Err(StoreError::Timeout(self.read_timeout)),
        }
    }

    /// Subscribes to change hints, bounded like a read; polls without.
    async fn subscribe(&self) -> Option<ChangeFeed> {
        let deadline = self.clock.now().mono + self.read_timeout;
        tokio::select! {
            biased;
            r = self.store.changes(&self.group) => r.unwrap_or(None),
            _ = self.clock.sleep_until(deadline) => None,
        }
    }
}

async fn observe(w: Watched, tx: watch::Sender<Option<LeaderInfo>>) {
    let mut feed: Option<ChangeFeed> = w.subscribe().await;
    // The version last seen, when it was first seen, and when it lapses.
    let mut seen: Option<(Version, MonoTime, Option<MonoTime>)> = None;
    let mut reported_error = false;
    loop {
        // A silent leader lapses on time even while a read is slow.
        let mut lapse = seen.as_ref().and_then(|s| s.2);
        let read = w.read();
        tokio::pin!(read);
        let result = loop {
            tokio::select! {
                biased;
                r = &mut read => break r,
                _ = sleep_until(&w.clock, lapse) => {
                    tx.send_if_modified(|old| replace_if_changed(old, None));
                    lapse = None;
                }
            }
        };
        // First sight is the reply's receipt: the record was as read at
        // some instant before now, never after.
        let now = w.clock.now();
        match result {
            Ok(current) => {
                reported_error = false;
                let version = current.as_ref().map(|v| v.version);
                let fresh = seen.as_ref().map(|s| Some(s.0)) != Some(version);
                if fresh {
                    seen = current.as_ref().map(|v| {
                        let lapse = v
                            .record
                            .holder
                            .as_ref()
                            .map(|_| now.mono + takeover_wait(v.record.term, w.drift));
                        (v.version, now.mono, lapse)
                    });
                    let leader = current.as_ref().and_then(LeaderInfo::from_record);
                    tx.send_if_modified(|old| replace_if_changed(old, leader));
                }
            }
            Err(e) => {
                if !reported_error {
                    tracing::warn!(group = %w.group, error = %e, "observer cannot read the lease");
                    reported_error = true;
                }
            }
        }
        let now = w.clock.now();
        let lapse = seen.as_ref().and_then(|s| s.2);
        if lapse.is_some_and(|t| now.mono >= t) {
            tx.send_if_modified(|old| replace_if_changed(old, None));
        }
        let mut wake = now.mono + w.poll;
        if let Some(t) = lapse.filter(|t| *t > now.mono) {
            wake = wake.min(t);
        }
        tokio::select! {
            biased;
            hint = async {
                match feed.as_mut() {
                    Some(f) => f.changed().await,
                    None => std::future::pending().await,
                }
            } => {
                if hint.is_none() {
                    feed = None;
                }
            }
            _ = w.clock.sleep_until(wake) => {}
            _ = tx.closed() => return,
        }
    }
}

async fn sleep_until(clock: &Arc<dyn Clock>, at: Option<MonoTime>) {
    match at {
        Some(t) => clock.sleep_until(t).await,
        None => std::future::pending().await,
    }
}

fn replace_if_changed(old: &mut Option<LeaderInfo>, new: Option<LeaderInfo>) -> bool {
    let same = match (&*old, &new) {
        (Some(a), Some(b)) => {
            a.candidate == b.candidate && a.token == b.token && a.metadata == b.metadata
        }
        (None, None) => true,
        _ => false,
    };
    if !same {
        *old = new;
    }
    !same
}
