//! Typed errors of the ZooKeeper store, each naming the ensemble, the
//! problem and the fix, and their mapping onto [`StoreError`]. No message
//! carries a password: only the hosts, the prefix and the user name appear.

use std::time::Duration;

use tenure::error::{BackendError, BoxError};
use tenure::StoreError;
use zookeeper_client as zk;

/// A failure of the ZooKeeper store.
///
/// [`ZkStore::connect`](crate::ZkStore::connect) returns it directly; the
/// [`LeaseStore`](tenure::LeaseStore) operations return it converted into
/// a [`StoreError`]: what an operator must fix becomes
/// [`StoreError::Misconfigured`]; a request whose reply did not come
/// ([`Timeout`](ZkStoreError::Timeout),
/// [`ConnectionLost`](ZkStoreError::ConnectionLost),
/// [`SessionExpired`](ZkStoreError::SessionExpired)) becomes
/// [`StoreError::Timeout`] or [`StoreError::Unavailable`]: it may or may
/// not have been applied, and is never reported as a conflict.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ZkStoreError {
    /// The URL or an option is malformed.
    #[error("invalid ZooKeeper URL: {reason}")]
    InvalidUrl {
        /// What is wrong, without the password.
        reason: String,
    },
    /// No session could be established with any host.
    #[error("ZooKeeper at {target} is unreachable ({detail}): check the hosts and ports in the URL and that the ensemble is up")]
    Unreachable {
        /// The hosts as the URL names them, for the message (no password).
        target: String,
        /// What failed.
        detail: String,
    },
    /// No reply within the bound; the request may or may not have been
    /// applied.
    #[error("ZooKeeper at {target} did not answer {what} within {after:?}; it may or may not have been applied")]
    Timeout {
        /// The hosts as the URL names them, for the message (no password).
        target: String,
        /// Which operation.
        what: &'static str,
        /// The bound that ran out.
        after: Duration,
    },
    /// The connection broke before the reply came; the request may or may
    /// not have been applied. The client reconnects (to any host) within
    /// the session.
    #[error("the connection to ZooKeeper at {target} was lost before the reply to {what} came; it may or may not have been applied")]
    ConnectionLost {
        /// The hosts as the URL names them, for the message (no password).
        target: String,
        /// Which operation.
        what: &'static str,
    },
    /// The ZooKeeper session ended (expired while the client was cut off,
    /// or closed); the store opens a new one. A request in flight may or
    /// may not have been applied.
    #[error("the ZooKeeper session with {target} ended during {what}; a new session is being opened, and the request may or may not have been applied")]
    SessionExpired {
        /// The hosts as the URL names them, for the message (no password).
        target: String,
        /// Which operation.
        what: &'static str,
    },
    /// The node's ACL does not let this session do what tenure needs.
    #[error("ZooKeeper at {target}: {who} may not {what} under {prefix} (NoAuth); use the user that created the nodes (zk://user:password@...), or grant this one: `setAcl {prefix} digest:<user>:<hash>:crwda` on the prefix node and on each group node under it")]
    NotAuthorized {
        /// The hosts as the URL names them, for the message (no password).
        target: String,
        /// `user "name"` or `an unauthenticated client`.
        who: String,
        /// Which operation.
        what: &'static str,
        /// The prefix node.
        prefix: String,
    },
    /// The server refused the session's authentication.
    #[error("ZooKeeper at {target} refused the authentication of {who}: check the user and password in the URL (zk://user:password@host, %-escape special characters) and the server's authProvider settings")]
    AuthFailed {
        /// The hosts as the URL names them, for the message (no password).
        target: String,
        /// `user "name"` or `an unauthenticated client`.
        who: String,
    },
    /// The server does not offer an operation tenure uses.
    #[error("ZooKeeper at {target} does not support {what}: {fix}")]
    Unsupported {
        /// The hosts as the URL names them, for the message (no password).
        target: String,
        /// Which operation.
        what: &'static str,
        /// What to do about it.
        fix: &'static str,
    },
    /// ZooKeeper refused the request (nothing was applied) for a reason
    /// other than those above: throttled, over a quota, malformed.
    #[error("ZooKeeper at {target} refused {what}")]
    ZooKeeper {
        /// The hosts as the URL names them, for the message (no password).
        target: String,
        /// Which operation.
        what: &'static str,
        /// The client's error.
        #[source]
        source: zk::Error,
    },
}

impl ZkStoreError {
    /// Whether retrying later may succeed without an operator's help.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            ZkStoreError::Unreachable { .. }
                | ZkStoreError::Timeout { .. }
                | ZkStoreError::ConnectionLost { .. }
                | ZkStoreError::SessionExpired { .. }
                | ZkStoreError::ZooKeeper { .. }
        )
    }
}

impl BackendError for ZkStoreError {
    fn is_transient(&self) -> bool {
        ZkStoreError::is_transient(self)
    }

    fn timed_out(&self) -> Option<Duration> {
        match self {
            ZkStoreError::Timeout { after, .. } => Some(*after),
            _ => None,
        }
    }

    fn into_source(self) -> Option<BoxError> {
        match self {
            ZkStoreError::ZooKeeper { source, .. } => Some(Box::new(source)),
            _ => None,
        }
    }
}

impl From<ZkStoreError> for StoreError {
    fn from(e: ZkStoreError) -> Self {
        StoreError::from_backend(e)
    }
}

/// What an error message says about the store: its hosts, prefix and user.
#[derive(Clone, Debug)]
pub(crate) struct Ctx {
    pub(crate) target: String,
    pub(crate) prefix: String,
    pub(crate) user: Option<String>,
    pub(crate) timeout: Duration,
}

impl Ctx {
    fn who(&self) -> String {
        match &self.user {
            Some(u) => format!("user {u:?}"),
            None => "an unauthenticated client".into(),
        }
    }

    /// The request `what` got no reply within the bound.
    pub(crate) fn timeout(&self, what: &'static str) -> ZkStoreError {
        ZkStoreError::Timeout {
            target: self.target.clone(),
            what,
            after: self.timeout,
        }
    }

    /// Classifies an error of the request `what`. Every error that is not
    /// the server's answer to it (a lost, silent or garbled connection, an
    /// ended session) is one whose request may have been applied.
    pub(crate) fn classify(&self, what: &'static str, e: zk::Error) -> ZkStoreError {
        let target = self.target.clone();
        match e {
            // The connection broke, went silent, or garbled a reply: the
            // request may have reached the server and been applied.
            zk::Error::ConnectionLoss
            | zk::Error::Custom(_)
            | zk::Error::UnexpectedError(_)
            | zk::Error::UnmarshalError { .. } => ZkStoreError::ConnectionLost { target, what },
            zk::Error::SessionExpired | zk::Error::SessionMoved | zk::Error::ClientClosed => {
                ZkStoreError::SessionExpired { target, what }
            }
            zk::Error::NoAuth => ZkStoreError::NotAuthorized {
                target,
                who: self.who(),
                what,
                prefix: self.prefix.clone(),
            },
            zk::Error::AuthFailed => ZkStoreError::AuthFailed {
                target,
                who: self.who(),
            },
            zk::Error::Unimplemented if what == "watch" => ZkStoreError::Unsupported {
                target,
                what: "persistent recursive watches (addWatch)",
                fix: "upgrade ZooKeeper to 3.6 or later for instant hand-over; until then candidates poll",
            },
            zk::Error::NoHosts | zk::Error::Timeout => ZkStoreError::Unreachable {
                target,
                detail: e.to_string(),
            },
            source => ZkStoreError::ZooKeeper {
                target,
                what,
                source,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> Ctx {
        Ctx {
            target: "h:2181".into(),
            prefix: "/tenure".into(),
            user: Some("app".into()),
            timeout: Duration::from_secs(5),
        }
    }

    #[test]
    fn lost_replies_are_transient_never_misconfigured() {
        for e in [
            zk::Error::ConnectionLoss,
            zk::Error::SessionExpired,
            zk::Error::ClientClosed,
        ] {
            let err = StoreError::from(ctx().classify("compare-and-swap", e));
            assert!(err.is_transient(), "{err}");
            assert!(err.to_string().contains("may or may not"), "{err}");
        }
        assert!(matches!(
            StoreError::from(ctx().timeout("read")),
            StoreError::Timeout(d) if d == Duration::from_secs(5)
        ));
    }

    #[test]
    fn refusals_are_misconfigured_and_name_the_fix() {
        let e = StoreError::from(ctx().classify("write", zk::Error::NoAuth));
        assert_eq!(e.kind(), "misconfigured");
        assert!(e.to_string().contains("setAcl /tenure"), "{e}");
        assert!(e.to_string().contains("user \"app\""), "{e}");
        let e = StoreError::from(ctx().classify("watch", zk::Error::Unimplemented));
        assert!(e.to_string().contains("3.6"), "{e}");
    }
}
