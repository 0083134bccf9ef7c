//! Change hints through LISTEN/NOTIFY: every successful write notifies the
//! table's channel with the group name as payload, in the same statement.

use std::time::Duration;

use tenure::{ChangeFeed, GroupName, StoreError};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::options::PostgresOptions;
use crate::{error, session};

/// The least time between two pings of the LISTEN connection.
const MIN_PING_EVERY: Duration = Duration::from_secs(1);

/// Opens a dedicated connection that listens on `channel` and hints the
/// feed for `group`. The feed ends (and the elector polls, and subscribes
/// again) when the connection is lost, or when a ping on it gets no reply
/// within the timeout: a half-open connection would otherwise stay silent
/// forever, and every hand-over would wait for a poll.
pub(crate) async fn subscribe(
    options: &PostgresOptions,
    tls: MakeRustlsConnect,
    channel: String,
    group: &GroupName,
) -> Result<ChangeFeed, StoreError> {
    let target = options.redacted_url().to_owned();
    let timeout = options.timeout;
    let (notes_tx, mut notes_rx) = tokio::sync::mpsc::unbounded_channel();
    let open = async {
        let client = session::connect(options, tls, &target, Some(notes_tx)).await?;
        client
            .batch_execute(&format!("LISTEN \"{channel}\""))
            .await
            .map_err(|e| error::classify("LISTEN", &target, e))?;
        Ok::<_, StoreError>(client)
    };
    let client = match tokio::time::timeout(timeout, open).await {
        Ok(r) => r?,
        Err(_) => return Err(StoreError::Timeout(timeout)),
    };
    let (tx, feed) = ChangeFeed::channel();
    let group = group.as_str().to_owned();
    let ping_every = timeout.max(MIN_PING_EVERY);
    tokio::spawn(async move {
        let mut ping = tokio::time::interval(ping_every);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                note = notes_rx.recv() => match note {
                    Some(payload) if payload == group => {
                        // A full channel already holds a hint.
                        if let Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) = tx.try_send(()) {
                            return;
                        }
                    }
                    Some(_) => {}
                    None => return,
                },
                _ = ping.tick() => {
                    match tokio::time::timeout(timeout, client.simple_query("SELECT 1")).await {
                        Ok(Ok(_)) => {}
                        Ok(Err(e)) => {
                            tracing::debug!(error = %e, "LISTEN connection failed its ping");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!(?timeout, "LISTEN connection did not answer a ping; dropping it");
                            return;
                        }
                    }
                }
                _ = tx.closed() => return,
            }
        }
    });
    Ok(feed)
}
