//! Change hints through LISTEN/NOTIFY: every successful write notifies the
//! table's channel with the group name as payload, in the same statement.

use std::future::poll_fn;

use tenure::{ChangeFeed, GroupName, StoreError};
use tokio_postgres::AsyncMessage;

use crate::options::PostgresOptions;
use crate::{error, tls};

/// The channel a table's writes notify.
pub(crate) fn channel(options: &PostgresOptions) -> String {
    format!("tenure:{}", options.table.name)
}

/// Opens a dedicated connection that listens for the table's notifications
/// and hints the feed for `group`. The task ends when the feed is dropped or
/// the connection is lost (the elector then polls, and subscribes again).
pub(crate) async fn subscribe(
    options: &PostgresOptions,
    group: &GroupName,
) -> Result<ChangeFeed, StoreError> {
    let target = options.redacted_url().to_owned();
    let tls = tls::connector(options.root_cert.as_deref())?;
    let (client, mut connection) = options
        .config
        .connect(tls)
        .await
        .map_err(|e| error::classify("connect", &target, e))?;
    let (tx, feed) = ChangeFeed::channel();
    let group = group.as_str().to_owned();
    // The connection must be polled for LISTEN to complete, so drive it
    // first and issue LISTEN from a second task.
    let (notes_tx, mut notes_rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(message) = poll_fn(|cx| connection.poll_message(cx)).await {
            match message {
                Ok(AsyncMessage::Notification(n)) => {
                    if notes_tx.send(n.payload().to_owned()).is_err() {
                        return;
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(error = %e, "LISTEN connection lost");
                    return;
                }
            }
        }
    });
    let listen = format!("LISTEN \"{}\"", channel(options));
    client
        .batch_execute(&listen)
        .await
        .map_err(|e| error::classify("LISTEN", &target, e))?;
    tokio::spawn(async move {
        // Keeps the client (and so the session and its LISTEN) alive.
        let _client = client;
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
                _ = tx.closed() => return,
            }
        }
    });
    Ok(feed)
}
