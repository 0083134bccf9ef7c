//! The ZooKeeper session a store handle and its clones share, and a new
//! one when it ends.
//!
//! Within a session the client rides out a lost connection by itself: it
//! reconnects (to any host of the ensemble) and re-registers one-shot
//! watches, and requests in flight when the connection broke fail with
//! `ConnectionLoss` (their fate unknown). A session that ends (expired
//! while the client was cut off for longer than the session timeout,
//! closed, or refused) never comes back: every later request fails at
//! once. [`Session::client`] then opens a new session, once for all the
//! callers that find the old one ended; the change feeds, told by their
//! watches that the session ended, re-arm them on the new one.

use std::sync::Mutex;

use zookeeper_client as zk;

use crate::error::{Ctx, ZkStoreError};
use crate::options::ZkOptions;

/// The current client, replaced when its session ends.
pub(crate) struct Session {
    options: ZkOptions,
    ctx: Ctx,
    current: Mutex<zk::Client>,
    /// Held while a new session is being opened, so that only one is.
    opening: tokio::sync::Mutex<()>,
}

impl Session {
    /// Opens the first session.
    pub(crate) async fn open(options: ZkOptions, ctx: Ctx) -> Result<Session, ZkStoreError> {
        let client = connect(&options, &ctx).await?;
        Ok(Session {
            options,
            ctx,
            current: Mutex::new(client),
            opening: tokio::sync::Mutex::new(()),
        })
    }

    fn peek(&self) -> zk::Client {
        self.current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// A client whose session has not ended: the current one, or a new
    /// one if the current session ended (bounded by the timeout).
    pub(crate) async fn client(&self) -> Result<zk::Client, ZkStoreError> {
        let client = self.peek();
        if !client.state().is_terminated() {
            return Ok(client);
        }
        let _opening = self.opening.lock().await;
        let client = self.peek();
        if !client.state().is_terminated() {
            return Ok(client);
        }
        tracing::info!(
            store = %self.options.describe(),
            state = %client.state(),
            "the ZooKeeper session ended; opening a new one"
        );
        let fresh = connect(&self.options, &self.ctx).await?;
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = fresh.clone();
        Ok(fresh)
    }
}

/// Establishes a session within the timeout, authenticated with the
/// digest scheme when the options carry a user.
async fn connect(options: &ZkOptions, ctx: &Ctx) -> Result<zk::Client, ZkStoreError> {
    let mut connector = zk::Client::connector()
        .with_session_timeout(options.session_timeout)
        // How long a silent connection is given before the client gives it
        // up and moves to another host (pings go out well within it).
        .with_connection_timeout(options.timeout);
    if let (Some(user), Some(password)) = (&options.user, &options.password) {
        connector =
            connector.with_auth("digest", format!("{user}:{}", password.expose()).as_bytes());
    }
    match tokio::time::timeout(
        options.timeout,
        connector.connect(&options.connect_string()),
    )
    .await
    {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(e)) => Err(match ctx.classify("connect", e) {
            // A connection lost while connecting is an unreachable ensemble.
            ZkStoreError::ConnectionLost { target, .. } => ZkStoreError::Unreachable {
                target,
                detail: "the connection broke while the session was being established".into(),
            },
            other => other,
        }),
        Err(_) => Err(ZkStoreError::Unreachable {
            target: ctx.target.clone(),
            detail: format!("no session within {:?}", options.timeout),
        }),
    }
}
