//! `kafka://` in the commands. Leadership on Kafka follows the consumer
//! group's assignment (`tenure-kafka`'s coordinator), so `run` stands
//! through the coordinator, while `status` and `watch` read the leader's
//! heartbeats through a read-only [`LeaseStore`] view of them.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use tenure::{
    CasOutcome, GroupName, Holder, LeaseRecord, LeaseStore, StoreError, Version, Versioned,
    WallTime,
};
use tenure_kafka::{KafkaCoordinator, KafkaObserver};

use crate::store_url::redact;

/// A coordinator for one stint of `tenure run`.
pub fn coordinator(url: &str) -> anyhow::Result<KafkaCoordinator> {
    KafkaCoordinator::from_url(url).map_err(|e| crate::exit::usage(format!("{}: {e}", redact(url))))
}

/// The leader as its heartbeats show it, read through the lease-store seam.
pub struct LeaderView {
    url: String,
    heartbeat_timeout: Duration,
    observers: Mutex<HashMap<GroupName, KafkaObserver>>,
}

/// Opens the view (nothing connects until the first read).
pub fn leader_view(
    url: &str,
) -> Result<std::sync::Arc<dyn LeaseStore>, Box<dyn std::error::Error + Send + Sync>> {
    let config = KafkaCoordinator::from_url(url)?;
    Ok(std::sync::Arc::new(LeaderView {
        url: url.to_owned(),
        heartbeat_timeout: config.config().heartbeat_timeout,
        observers: Mutex::new(HashMap::new()),
    }))
}

impl LeaderView {
    /// The observer of `group`, started on first use; returns whether it
    /// was just started (and so has not read the partition yet).
    fn observer_leader(
        &self,
        group: &GroupName,
    ) -> Result<(Option<tenure::LeaderInfo>, bool), StoreError> {
        let mut observers = self.observers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(o) = observers.get(group) {
            return Ok((o.leader(), false));
        }
        let o = KafkaObserver::from_url(&self.url, group.as_str())
            .map_err(|e| StoreError::misconfigured(format!("Kafka at {}", redact(&self.url)), e))?;
        let leader = o.leader();
        observers.insert(group.clone(), o);
        Ok((leader, true))
    }
}

#[async_trait]
impl LeaseStore for LeaderView {
    async fn read(&self, group: &GroupName) -> Result<Option<Versioned>, StoreError> {
        let (mut leader, fresh) = self.observer_leader(group)?;
        if fresh && leader.is_none() {
            // Give a new observer one heartbeat period to read the newest
            // heartbeat on the partition before answering "no leader".
            let mut watch = {
                let observers = self.observers.lock().unwrap_or_else(|p| p.into_inner());
                observers.get(group).map(KafkaObserver::watch)
            };
            if let Some(w) = watch.as_mut() {
                let _ =
                    tokio::time::timeout(self.heartbeat_timeout, w.wait_for(Option::is_some)).await;
                leader = w.borrow().clone();
            }
        }
        Ok(leader.map(|l| Versioned {
            version: Version(l.token),
            record: LeaseRecord {
                holder: Some(Holder {
                    id: l.candidate,
                    incarnation: 0,
                }),
                token: l.token,
                term: self.heartbeat_timeout,
                renewed_at: WallTime::from(l.renewed_at),
                expires_at: WallTime::from(l.expires_at),
                metadata: l.metadata,
            },
        }))
    }

    async fn compare_and_swap(
        &self,
        _group: &GroupName,
        _expected: Option<Version>,
        _record: &LeaseRecord,
    ) -> Result<CasOutcome, StoreError> {
        Err(StoreError::Misconfigured {
            message: "kafka:// leadership follows the consumer group's assignment: there is no lease to write; stop or restart the leader's process instead".into(),
            source: None,
        })
    }

    fn describe(&self) -> String {
        redact(&self.url)
    }
}
