//! [`KafkaLeaseView`]: the leader of Kafka groups as a read-only
//! [`LeaseView`], so that what reads lease stores (tenure's
//! [`Observer`](tenure::Observer), `tenure status` and `tenure watch`)
//! serves groups led through Kafka too.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use tenure::store::url::redact;
use tenure::{
    GroupName, Holder, LeaderInfo, LeaseRecord, LeaseView, StoreError, Version, Versioned, WallTime,
};
use tokio::sync::watch;

use crate::{KafkaBackendError, KafkaConfig, KafkaObserver};

/// The leader of each group as its heartbeats on the leader topic show it,
/// read through the lease-store seam: a [`KafkaObserver`] per group,
/// started on the group's first read. There is no lease to write (on Kafka
/// leadership follows the consumer group's assignment), so this is a
/// [`LeaseView`] only.
///
/// A group's record is the leader's last heartbeat: its holder the
/// candidate, its token and version the heartbeat's token, its term the
/// heartbeat timeout, its metadata what the leader published.
///
/// ```no_run
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// use tenure::Observer;
/// let view = tenure_kafka::KafkaLeaseView::from_url("kafka://10.0.0.5:9092")?;
/// let observer = Observer::builder(view, "billing").start()?;
/// # Ok(()) }
/// ```
pub struct KafkaLeaseView {
    config: KafkaConfig,
    /// The store as `describe` and errors show it, redacted (a secret
    /// option is masked whatever its name's escapes).
    described: String,
    observers: Mutex<HashMap<GroupName, KafkaObserver>>,
}

impl KafkaLeaseView {
    /// A view of the groups on the brokers `config` names (nothing
    /// connects until the first read).
    pub fn new(config: KafkaConfig) -> Result<KafkaLeaseView, KafkaBackendError> {
        config.validate()?;
        let described = redact(&format!("kafka://{}", config.brokers));
        Ok(KafkaLeaseView {
            config,
            described,
            observers: Mutex::new(HashMap::new()),
        })
    }

    /// A view from a `kafka://` URL (see
    /// [`KafkaCoordinator::from_url`](crate::KafkaCoordinator::from_url)).
    pub fn from_url(url: &str) -> Result<KafkaLeaseView, KafkaBackendError> {
        let mut view = KafkaLeaseView::new(crate::url::parse(url)?)?;
        view.described = redact(url);
        Ok(view)
    }

    /// A watch of `group`'s leader, its observer started on first use;
    /// and whether it was just started (and so has not read the partition
    /// yet).
    fn leader_watch(
        &self,
        group: &GroupName,
    ) -> Result<(watch::Receiver<Option<LeaderInfo>>, bool), StoreError> {
        let mut observers = self.observers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(o) = observers.get(group) {
            return Ok((o.watch(), false));
        }
        let o = KafkaObserver::start(self.config.clone(), group.as_str())
            .map_err(|e| StoreError::misconfigured(format!("Kafka at {}", self.described), e))?;
        let watch = o.watch();
        observers.insert(group.clone(), o);
        Ok((watch, true))
    }

    fn heartbeat_timeout(&self) -> Duration {
        self.config.heartbeat_timeout
    }
}

#[async_trait]
impl LeaseView for KafkaLeaseView {
    async fn read(&self, group: &GroupName) -> Result<Option<Versioned>, StoreError> {
        let (mut watch, fresh) = self.leader_watch(group)?;
        if fresh && watch.borrow().is_none() {
            // Give a new observer one heartbeat period to read the newest
            // heartbeat on the partition before answering "no leader".
            let _ = tokio::time::timeout(self.heartbeat_timeout(), watch.wait_for(Option::is_some))
                .await;
        }
        let leader = watch.borrow().clone();
        Ok(leader.map(|l| Versioned {
            version: Version(l.token),
            record: LeaseRecord {
                holder: Some(Holder {
                    id: l.candidate,
                    incarnation: 0,
                }),
                token: l.token,
                term: self.heartbeat_timeout(),
                renewed_at: WallTime::from(l.renewed_at),
                expires_at: WallTime::from(l.expires_at),
                metadata: l.metadata,
            },
        }))
    }

    fn describe(&self) -> String {
        self.described.clone()
    }
}

impl std::fmt::Debug for KafkaLeaseView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaLeaseView")
            .field("brokers", &self.described)
            .finish_non_exhaustive()
    }
}
