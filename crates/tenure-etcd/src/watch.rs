//! The change feed: an etcd watch on the group's key.
//!
//! A watch started without a revision reports changes after it was
//! created, so the feed hints once when etcd confirms the watch (after
//! every re-creation too): the elector re-reads and misses nothing that
//! happened while the watch was down. A broken stream is re-created with
//! back-off; HTTP/2 keep-alive pings find a silent connection.

use tokio::sync::mpsc;

use crate::error::{Ctx, EtcdStoreError};
use crate::options::EtcdOptions;

/// Watches `key` and hints `tx` on every change until `tx` closes (`Ok`)
/// or etcd refuses the watch for good (`Err`: something an operator must
/// fix, a permission; electors poll).
pub(crate) async fn run(
    client: etcd_client::Client,
    options: std::sync::Arc<EtcdOptions>,
    key: Vec<u8>,
    tx: mpsc::Sender<()>,
) -> Result<(), EtcdStoreError> {
    tenure::store::keep_hinting(
        &tx,
        |attempt| watching(&client, &options, &key, &tx, attempt),
        |e| tracing::debug!(error = %e, "etcd watch lost; watching again"),
    )
    .await
}

/// One watch: `Ok(())` once the receiver is gone, `Err` when it broke.
async fn watching(
    client: &etcd_client::Client,
    options: &EtcdOptions,
    key: &[u8],
    tx: &mpsc::Sender<()>,
    attempt: tenure::store::HintAttempt,
) -> Result<(), EtcdStoreError> {
    let ctx = crate::store::ctx(options);
    let mut watch = client.watch_client();
    let mut stream = match tokio::time::timeout(options.timeout, watch.watch(key, None)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(ctx.classify("watch", e)),
        Err(_) => return Err(ctx.timeout()),
    };
    loop {
        match stream.message().await {
            Ok(Some(resp)) => {
                if resp.canceled() {
                    return Err(cancelled(&ctx, resp.cancel_reason()));
                }
                if resp.created() {
                    attempt.connected();
                }
                if (resp.created() || !resp.events().is_empty()) && !tenure::store::send_hint(tx) {
                    return Ok(());
                }
            }
            Ok(None) => {
                return Err(EtcdStoreError::Unreachable {
                    target: options.target(),
                    detail: "the watch stream ended".into(),
                })
            }
            Err(e) => return Err(ctx.classify("watch", e)),
        }
    }
}

pub(crate) fn cancelled(ctx: &Ctx<'_>, reason: &str) -> EtcdStoreError {
    if reason.contains("permission denied") {
        EtcdStoreError::Permission {
            target: ctx.target.clone(),
            who: ctx.who(),
            prefix: ctx.options.prefix.clone(),
            detail: reason.to_owned(),
        }
    } else {
        EtcdStoreError::Unreachable {
            target: ctx.target.clone(),
            detail: format!("etcd cancelled the watch: {reason}"),
        }
    }
}
