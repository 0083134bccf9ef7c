//! Typed errors of the Redis store, each naming the server, the problem and
//! the fix, and their mapping onto [`StoreError`]. No message carries a
//! password: only `host:port` and the ACL user name appear.

use std::time::Duration;

use tenure::error::{BackendError, BoxError};
use tenure::StoreError;

use crate::options::RedisOptions;

/// A failure of the Redis store.
///
/// [`RedisStore::connect`](crate::RedisStore::connect) returns it directly;
/// the [`LeaseStore`](tenure::LeaseStore) operations return it converted
/// into a [`StoreError`]: transient failures become
/// [`StoreError::Unavailable`] (the elector retries), everything an operator
/// must fix becomes [`StoreError::Misconfigured`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RedisStoreError {
    /// The URL or an option is malformed.
    #[error("invalid Redis URL: {reason}")]
    InvalidUrl {
        /// What is wrong, without the password.
        reason: String,
    },
    /// A TLS file named in the URL (`ca`, `cert`, `key`) cannot be read,
    /// or does not hold what its option names.
    #[error("{0} (named in the Redis URL)")]
    TlsFile(#[from] tenure::store::tls::PemError),
    /// Redis refused the user name or password.
    #[error("Redis at {target} refused the credentials of {who}: check the user name and password in the URL (redis://user:password@host, %-escape special characters) and that the ACL user exists and is enabled (`ACL SETUSER <user> on`)")]
    Credentials {
        /// `host:port`.
        target: String,
        /// `user "name"` or `the default user`.
        who: String,
    },
    /// Redis needs a password and none was given.
    #[error("Redis at {target} requires authentication: put the credentials in the URL as redis://user:password@host (or redis://:password@host for requirepass)")]
    NoAuth {
        /// `host:port`.
        target: String,
    },
    /// The ACL user may not run a command or touch a key or channel tenure
    /// needs.
    #[error("Redis at {target}: {who} lacks a permission tenure needs ({detail}); grant it with `ACL SETUSER <user> ~{prefix}* &{prefix}* +evalsha +eval +script|load +subscribe +psubscribe +ping +hset +hget +hmget +hincrby +type +time +publish +scan`")]
    Permission {
        /// `host:port`.
        target: String,
        /// `user "name"` or `the default user`.
        who: String,
        /// The key prefix, for the suggested ACL rule.
        prefix: String,
        /// The server's NOPERM message.
        detail: String,
    },
    /// The TLS handshake failed.
    #[error("TLS handshake with Redis at {target} failed ({detail}): if the server does not serve TLS on this port use redis:// instead of rediss://; if it does, check its certificate (give ca=/path/to/ca.pem for a private CA)")]
    Tls {
        /// `host:port`.
        target: String,
        /// What failed.
        detail: String,
    },
    /// The server is a read-only replica.
    #[error("Redis at {target} is a read-only replica: point tenure at the master")]
    ReadOnlyReplica {
        /// `host:port`.
        target: String,
    },
    /// Redis is set to evict keys that tenure must keep.
    #[error("Redis at {target} has maxmemory-policy {policy}: it may evict lease keys, which could let a new leader start while the old one still holds its term; set `maxmemory-policy noeviction` (or a volatile-* policy: tenure's keys never expire)")]
    Eviction {
        /// `host:port`.
        target: String,
        /// The configured policy.
        policy: String,
    },
    /// A key tenure owns holds another Redis type.
    #[error("the Redis key {key:?} holds a {found}, but tenure keeps a hash there: another program uses this key; choose another key prefix (?prefix=...) or remove the key by hand")]
    WrongType {
        /// The key of the other program, which the fix names.
        key: String,
        /// The Redis type found.
        found: String,
    },
    /// Redis lost its data (or is new) and no lease may be created yet.
    #[error("Redis at {target} holds no record of earlier leases under prefix {prefix:?}: it is new, or it lost its data (restart without persistence, FLUSHALL, failover to an empty replica); so that a leader elected before the loss has surely stopped, no new lease is granted for another {remaining:?}. For a brand-new Redis, RedisStore::adopt_empty skips this wait")]
    Quarantine {
        /// `host:port`.
        target: String,
        /// The key prefix.
        prefix: String,
        /// How much longer the quarantine lasts.
        remaining: Duration,
    },
    /// The server could not be reached, or the connection broke.
    #[error("Redis at {target} is unreachable: {detail}")]
    Unreachable {
        /// `host:port`.
        target: String,
        /// What failed.
        detail: String,
        /// The underlying error.
        #[source]
        source: Option<redis::RedisError>,
    },
    /// The server did not answer in time.
    #[error("Redis at {target} did not answer within {after:?}")]
    Timeout {
        /// `host:port`.
        target: String,
        /// The bound that ran out.
        after: Duration,
    },
    /// The server answered something tenure's scripts never return.
    #[error("Redis at {target} gave an unexpected reply to {what}: {detail}")]
    Protocol {
        /// `host:port`.
        target: String,
        /// Which operation.
        what: &'static str,
        /// What came back.
        detail: String,
    },
    /// Any other error the server reported.
    #[error("Redis at {target} failed {what}")]
    Redis {
        /// `host:port`.
        target: String,
        /// Which operation.
        what: &'static str,
        /// The server's error.
        #[source]
        source: redis::RedisError,
    },
}

impl RedisStoreError {
    /// Whether retrying later may succeed without an operator's help.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            RedisStoreError::Quarantine { .. }
                | RedisStoreError::Unreachable { .. }
                | RedisStoreError::Timeout { .. }
                | RedisStoreError::Protocol { .. }
                | RedisStoreError::Redis { .. }
                // A replica may be promoted by a failover in progress.
                | RedisStoreError::ReadOnlyReplica { .. }
        )
    }
}

impl BackendError for RedisStoreError {
    fn is_transient(&self) -> bool {
        RedisStoreError::is_transient(self)
    }

    fn into_source(self) -> Option<BoxError> {
        match self {
            RedisStoreError::Redis { source, .. } => Some(Box::new(source)),
            RedisStoreError::Unreachable {
                source: Some(source),
                ..
            } => Some(Box::new(source)),
            RedisStoreError::TlsFile(e) => e.into_source(),
            _ => None,
        }
    }
}

impl From<RedisStoreError> for StoreError {
    fn from(e: RedisStoreError) -> Self {
        StoreError::from_backend(e)
    }
}

/// Who is connecting, for messages: never the password.
pub(crate) fn who(user: Option<&str>) -> String {
    match user {
        Some(u) => format!("user {u:?}"),
        None => "the default user".into(),
    }
}

/// Context for classifying a `redis` error: the options (user, prefix,
/// TLS, timeout) and the server as messages name it.
pub(crate) struct Ctx<'a> {
    pub(crate) options: &'a RedisOptions,
    pub(crate) target: String,
}

impl Ctx<'_> {
    /// Classifies an error from the `redis` crate.
    pub(crate) fn classify(&self, what: &'static str, e: redis::RedisError) -> RedisStoreError {
        let target = self.target.clone();
        let code = e.code().unwrap_or_default().to_owned();
        let detail = e.detail().unwrap_or_default().to_owned();
        match code.as_str() {
            "WRONGPASS" => {
                return RedisStoreError::Credentials {
                    target,
                    who: who(self.options.user.as_deref()),
                }
            }
            "NOAUTH" => return RedisStoreError::NoAuth { target },
            "NOPERM" => {
                return RedisStoreError::Permission {
                    target,
                    who: who(self.options.user.as_deref()),
                    prefix: self.options.prefix.clone(),
                    detail,
                }
            }
            "READONLY" => return RedisStoreError::ReadOnlyReplica { target },
            _ => {}
        }
        if e.kind() == redis::ErrorKind::AuthenticationFailed {
            return RedisStoreError::Credentials {
                target,
                who: who(self.options.user.as_deref()),
            };
        }
        if e.is_timeout() {
            return RedisStoreError::Timeout {
                target,
                after: self.options.timeout,
            };
        }
        // Only while connecting: a reset later on is a broken connection, not
        // a TLS setting to fix.
        if self.options.tls && what == "connect" && looks_like_tls_failure(&e) {
            return RedisStoreError::Tls {
                target,
                detail: e.to_string(),
            };
        }
        if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() {
            return RedisStoreError::Unreachable {
                target,
                detail: e.to_string(),
                source: Some(e),
            };
        }
        RedisStoreError::Redis {
            target,
            what,
            source: e,
        }
    }
}

/// rustls reports a server that answers plain text, or a certificate it
/// does not trust, as an I/O error of kind `InvalidData`; a server that
/// closes or resets the connection on a ClientHello shows as EOF or reset.
fn looks_like_tls_failure(e: &redis::RedisError) -> bool {
    let text = e.to_string().to_ascii_lowercase();
    [
        "eof",
        "connection reset",
        "tls",
        "certificate",
        "handshake",
        "corrupt message",
        "invalidcontenttype",
        "invalid data",
        "unknownissuer",
        "peer",
    ]
    .iter()
    .any(|needle| text.contains(needle))
}
