//! Opening one connection: connect, drive it in the background (server
//! notices go to the debug log, not tokio-postgres's INFO line), and bound
//! what the server may spend on each statement.

use std::future::poll_fn;

use tenure::StoreError;
use tokio::sync::mpsc::UnboundedSender;
use tokio_postgres::{AsyncMessage, Client};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::error;
use crate::options::PostgresOptions;

/// Connects and bounds the server's work on each statement below the
/// store's timeout (the client's wait for a reply): `lock_timeout` at half
/// of it, `statement_timeout` at three quarters, so that a statement
/// waiting for a row lock an operator's open transaction holds fails fast
/// and says why, before the client gives up on the reply.
/// Notifications go to `notes` (the sender's process id and the payload),
/// if given.
pub(crate) async fn connect(
    options: &PostgresOptions,
    tls: MakeRustlsConnect,
    target: &str,
    notes: Option<UnboundedSender<(i32, String)>>,
) -> Result<Client, StoreError> {
    let (client, mut connection) = options
        .config
        .connect(tls)
        .await
        .map_err(|e| error::classify("connect", target, e))?;
    tokio::spawn(async move {
        while let Some(message) = poll_fn(|cx| connection.poll_message(cx)).await {
            match message {
                Ok(AsyncMessage::Notification(n)) => {
                    if let Some(tx) = &notes {
                        if tx.send((n.process_id(), n.payload().to_owned())).is_err() {
                            return;
                        }
                    }
                }
                Ok(AsyncMessage::Notice(notice)) => {
                    tracing::debug!(
                        severity = notice.severity(),
                        message = notice.message(),
                        "PostgreSQL notice"
                    );
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(error = %e, "PostgreSQL connection closed");
                    return;
                }
            }
        }
    });
    // PostgreSQL takes at most i32::MAX milliseconds (24.8 days) here.
    let ms = options.timeout.as_millis().clamp(4, i32::MAX as u128);
    let (lock_ms, statement_ms) = (ms / 2, ms * 3 / 4);
    client
        .batch_execute(&format!(
            "SET statement_timeout = {statement_ms}; SET lock_timeout = {lock_ms}"
        ))
        .await
        .map_err(|e| error::classify("setting the session's timeouts", target, e))?;
    Ok(client)
}
