//! `kafka://` in the commands. Leadership on Kafka follows the consumer
//! group's assignment (`tenure-kafka`'s coordinator), so `run` stands
//! through the coordinator, while `status` and `watch` read the leader's
//! heartbeats through a [`LeaseView`] of them: reads only, for there is no
//! lease to write.

use std::time::Duration;

use tenure::LeaseView;
use tenure_kafka::{KafkaCoordinator, KafkaLeaseView};

use tenure::store::url::redact;

/// A coordinator for one stint of `tenure run` (or a demo candidate).
///
/// On `kafka://` the term is the heartbeat timeout: both say how long a
/// leader keeps its term after its last successful renewal (here, the send
/// of its last heartbeat that came back), and the group's session timeout
/// is three of them. So `term`, when the user gave one, sets the heartbeat
/// timeout; a URL that sets `heartbeat_timeout` to something else is
/// refused rather than one of them silently ignored.
pub fn coordinator(url: &str, term: Option<Duration>) -> anyhow::Result<KafkaCoordinator> {
    let bad = |e: &dyn std::fmt::Display| crate::exit::usage(format!("{}: {e}", redact(url)));
    let from_url = KafkaCoordinator::from_url(url).map_err(|e| bad(&e))?;
    let Some(term) = term else {
        return Ok(from_url);
    };
    let mut config = from_url.config().clone();
    if sets_heartbeat_timeout(url) && config.heartbeat_timeout != term {
        return Err(crate::exit::usage(format!(
            "--term {} and heartbeat_timeout={} in the kafka:// URL disagree: on kafka:// the term \
             is the heartbeat timeout (a leader is fenced once its heartbeats of the last term have \
             not come back; the group's session is 3 of them); give one of them",
            humantime::format_duration(term),
            humantime::format_duration(config.heartbeat_timeout),
        )));
    }
    config.heartbeat_timeout = term;
    KafkaCoordinator::new(config).map_err(|e| bad(&e))
}

/// Whether the URL's query sets `heartbeat_timeout`.
fn sets_heartbeat_timeout(url: &str) -> bool {
    url.split_once('?').is_some_and(|(_, query)| {
        tenure::store::url::query_pairs(query)
            .any(|p| p.is_ok_and(|(k, _)| k == "heartbeat_timeout"))
    })
}

/// Why `release` cannot work on `kafka://`, and what does instead.
pub const READ_ONLY: &str = "kafka:// leadership follows the consumer group's assignment: there is no lease to write; stop or restart the leader's process instead";

/// The leader as its heartbeats show it, read through the lease-store seam
/// (nothing connects until the first read).
pub fn leader_view(
    url: &str,
) -> Result<std::sync::Arc<dyn LeaseView>, Box<dyn std::error::Error + Send + Sync>> {
    Ok(std::sync::Arc::new(KafkaLeaseView::from_url(url)?))
}
