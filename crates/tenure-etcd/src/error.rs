//! Typed errors of the etcd store, each naming the endpoints, the problem
//! and the fix, and their mapping onto [`StoreError`]. No message carries a
//! password: only the endpoints and the user name appear.

use std::time::Duration;

use tenure::error::{error_chain, BackendError, BoxError};
use tenure::StoreError;
use tonic::Code;

use crate::options::EtcdOptions;

/// A failure of the etcd store.
///
/// [`EtcdStore::connect`](crate::EtcdStore::connect) returns it directly;
/// the [`LeaseStore`](tenure::LeaseStore) operations return it converted
/// into a [`StoreError`]: transient failures become
/// [`StoreError::Unavailable`], everything an operator must fix becomes
/// [`StoreError::Misconfigured`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EtcdStoreError {
    /// The URL or an option is malformed.
    #[error("invalid etcd URL: {reason}")]
    InvalidUrl {
        /// What is wrong, without the password.
        reason: String,
    },
    /// A TLS file named in the URL (`ca`, `cert`, `key`) cannot be read,
    /// or does not hold what its option names.
    #[error("{0} (named in the etcd URL)")]
    TlsFile(#[from] tenure::store::tls::PemError),
    /// etcd refused the user name or password.
    #[error("etcd at {target} refused the credentials of user {user:?}: check the user name and password in the URL (etcd://user:password@host:port, %-escape special characters) and that the user exists (`etcdctl user get {user}`)")]
    Credentials {
        /// The endpoints as the URL names them, for the message (no password).
        target: String,
        /// The user name.
        user: String,
    },
    /// etcd has authentication enabled and no user was given.
    #[error("etcd at {target} has authentication enabled: put a user in the URL as etcd://user:password@host:port")]
    AuthRequired {
        /// The endpoints as the URL names them, for the message (no password).
        target: String,
    },
    /// The user may not read or write tenure's keys.
    #[error("etcd at {target}: {who} may not use the keys under {prefix:?} ({detail}); grant a role read-write on them: `etcdctl role grant-permission <role> --prefix=true readwrite {prefix}` and `etcdctl user grant-role <user> <role>`")]
    Permission {
        /// The endpoints as the URL names them, for the message (no password).
        target: String,
        /// `user "name"` or `an anonymous client`.
        who: String,
        /// The key prefix.
        prefix: String,
        /// The server's message.
        detail: String,
    },
    /// The TLS handshake failed, or TLS was expected and not spoken.
    #[error("TLS with etcd at {target} failed ({detail}): if the server does not serve TLS on this port use etcd:// instead of etcds://; if it does, check that ca= names the CA that signed its certificate and that the host name matches it")]
    Tls {
        /// The endpoints as the URL names them, for the message (no password).
        target: String,
        /// What failed.
        detail: String,
    },
    /// The endpoints could not be reached, or the connection broke.
    #[error("etcd at {target} is unreachable ({detail}); if the server serves TLS, use etcds://")]
    Unreachable {
        /// The endpoints as the URL names them, for the message (no password).
        target: String,
        /// What failed.
        detail: String,
    },
    /// No answer in time.
    #[error("etcd at {target} did not answer within {after:?}")]
    Timeout {
        /// The endpoints as the URL names them, for the message (no password).
        target: String,
        /// The bound that ran out.
        after: Duration,
    },
    /// Any other error etcd reported.
    #[error("etcd at {target} failed {what}")]
    Etcd {
        /// The endpoints as the URL names them, for the message (no password).
        target: String,
        /// Which operation.
        what: &'static str,
        /// The client's error.
        #[source]
        source: etcd_client::Error,
    },
}

impl EtcdStoreError {
    /// Whether retrying later may succeed without an operator's help.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            EtcdStoreError::Unreachable { .. }
                | EtcdStoreError::Timeout { .. }
                | EtcdStoreError::Etcd { .. }
        )
    }
}

impl BackendError for EtcdStoreError {
    fn is_transient(&self) -> bool {
        EtcdStoreError::is_transient(self)
    }

    fn into_source(self) -> Option<BoxError> {
        match self {
            EtcdStoreError::Etcd { source, .. } => Some(Box::new(source)),
            EtcdStoreError::TlsFile(e) => e.into_source(),
            _ => None,
        }
    }
}

impl From<EtcdStoreError> for StoreError {
    fn from(e: EtcdStoreError) -> Self {
        StoreError::from_backend(e)
    }
}

/// Context for classifying a client error: the options (user, prefix,
/// TLS, timeout) and the endpoints as messages name them.
pub(crate) struct Ctx<'a> {
    pub(crate) options: &'a EtcdOptions,
    pub(crate) target: String,
}

impl Ctx<'_> {
    /// Who is connecting, for messages: never the password.
    pub(crate) fn who(&self) -> String {
        match &self.options.user {
            Some(u) => format!("user {u:?}"),
            None => "an anonymous client".into(),
        }
    }

    pub(crate) fn timeout(&self) -> EtcdStoreError {
        EtcdStoreError::Timeout {
            target: self.target.clone(),
            after: self.options.timeout,
        }
    }

    /// Classifies an error from `etcd-client`.
    pub(crate) fn classify(&self, what: &'static str, e: etcd_client::Error) -> EtcdStoreError {
        let target = self.target.clone();
        let text = error_chain(&e);
        let lower = text.to_ascii_lowercase();
        let who = self.who();
        if let etcd_client::Error::GRpcStatus(status) = &e {
            let msg = status.message().to_owned();
            match status.code() {
                _ if msg.contains("authentication failed") || msg.contains("invalid user") => {
                    return match self.options.user.as_deref() {
                        Some(u) => EtcdStoreError::Credentials {
                            target,
                            user: u.to_owned(),
                        },
                        None => EtcdStoreError::AuthRequired { target },
                    }
                }
                _ if msg.contains("user name is empty") => {
                    return EtcdStoreError::AuthRequired { target }
                }
                Code::PermissionDenied => {
                    return EtcdStoreError::Permission {
                        target,
                        who,
                        prefix: self.options.prefix.clone(),
                        detail: msg,
                    }
                }
                Code::DeadlineExceeded => return self.timeout(),
                Code::Unauthenticated if self.options.user.is_none() => {
                    return EtcdStoreError::AuthRequired { target }
                }
                _ => {}
            }
        }
        // A plain-text server answers a ClientHello by closing or resetting
        // the connection, which rustls reports without mentioning TLS.
        // Only failures to set up a connection: a reset of an established
        // one is a broken connection, not a TLS setting to fix.
        let connecting = lower.contains("connecterror") && !lower.contains("refused");
        if self.options.tls
            && connecting
            && [
                "eof",
                "connection reset",
                "broken pipe",
                "tls",
                "certificate",
                "handshake",
                "corrupt message",
                "invalidcontenttype",
                "unknownissuer",
            ]
            .iter()
            .any(|n| lower.contains(n))
        {
            return EtcdStoreError::Tls {
                target,
                detail: plain_detail(&e),
            };
        }
        if lower.contains("timed out") || lower.contains("deadline") {
            return self.timeout();
        }
        let transport = matches!(
            e,
            etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_)
        ) || matches!(&e, etcd_client::Error::GRpcStatus(s) if s.code() == Code::Unavailable);
        if transport {
            return EtcdStoreError::Unreachable {
                target,
                detail: plain_detail(&e),
            };
        }
        EtcdStoreError::Etcd {
            target,
            what,
            source: e,
        }
    }
}

/// What failed, for people: tonic's and hyper's transport errors display
/// their causes with `Debug` (`ConnectError("tcp connect error", Os { code:
/// 111, kind: ConnectionRefused, .. })`), so the detail is the innermost
/// I/O error's own text where there is one, a gRPC status's message, or
/// else the error's first line cut before any `Debug` structure.
fn plain_detail(e: &etcd_client::Error) -> String {
    if let etcd_client::Error::GRpcStatus(status) = e {
        return format!("{}: {}", status.code().description(), status.message());
    }
    let mut innermost_io = None;
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            innermost_io = Some(io.to_string());
        }
        cause = c.source();
    }
    if let Some(io) = innermost_io {
        return io;
    }
    let text = e.to_string();
    let first = text.lines().next().unwrap_or_default();
    let cut = first
        .find(['(', '{'])
        .map_or(first, |i| first[..i].trim_end());
    cut.trim_end_matches(':').to_owned()
}
