//! Typed errors of the NATS store, each naming the servers, the problem
//! and the fix, and their mapping onto [`StoreError`]. No message carries a
//! password or token: only the servers, the user name and the bucket.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream::ErrorCode;
use tenure::error::{error_chain, find_cause, BackendError, BoxError};
use tenure::StoreError;

/// A failure of the NATS store.
///
/// [`NatsStore::connect`](crate::NatsStore::connect) returns it directly;
/// the [`LeaseStore`](tenure::LeaseStore) operations return it converted
/// into a [`StoreError`]: a request without an answer becomes
/// [`StoreError::Timeout`] (it may have been applied), other transient
/// failures [`StoreError::Unavailable`], and everything an operator must
/// fix [`StoreError::Misconfigured`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NatsStoreError {
    /// The URL or an option is malformed.
    #[error("invalid NATS URL: {reason}")]
    InvalidUrl {
        /// What is wrong, without the password or token.
        reason: String,
    },
    /// A TLS file named in the URL (`ca`, `cert`, `key`) cannot be read,
    /// or does not hold what its option names.
    #[error("{0} (named in the NATS URL)")]
    TlsFile(#[from] tenure::store::tls::PemError),
    /// The server refused the credentials given.
    #[error("NATS at {target} refused the credentials ({who}): check the user name and password (nats://user:password@host:port) or the token (nats://TOKEN@host:port) in the URL, %-escaping special characters (a token holding ':' writes it %3A, or it reads as user:password)")]
    Credentials {
        /// The servers as the URL names them, for the message (no credentials).
        target: String,
        /// `user "name"` or `a token`.
        who: String,
    },
    /// The server requires authentication and the URL gave none.
    #[error("NATS at {target} requires authentication: put a user in the URL as nats://user:password@host:port, or a token as nats://TOKEN@host:port")]
    AuthRequired {
        /// The servers as the URL names them, for the message (no credentials).
        target: String,
    },
    /// The user may not use the bucket or the JetStream API.
    #[error("NATS at {target}: {who} may not use the key-value bucket {bucket:?} ({detail}); allow it to publish to $JS.API.> and $KV.{bucket}.> and to subscribe to _INBOX.> in the server's authorization settings")]
    Permission {
        /// The servers as the URL names them, for the message (no credentials).
        target: String,
        /// `user "name"`, `a token` or `no credentials`.
        who: String,
        /// The key-value bucket, which the fix names.
        bucket: String,
        /// The server's message.
        detail: String,
    },
    /// JetStream does not answer: the server runs without it.
    #[error("NATS at {target} has no JetStream ({detail}): start nats-server with JetStream enabled (-js, or a jetstream {{}} block in its configuration)")]
    NoJetStream {
        /// The servers as the URL names them, for the message (no credentials).
        target: String,
        /// What the server answered.
        detail: String,
    },
    /// The bucket exists but cannot keep leases safely.
    #[error("the NATS key-value bucket {bucket:?} at {target} {problem}; name another bucket in the URL (tenure creates it) or create one with `nats kv add <bucket> --history 1 --storage file`")]
    UnsafeBucket {
        /// The servers as the URL names them, for the message (no credentials).
        target: String,
        /// The key-value bucket, which the fix names.
        bucket: String,
        /// What is wrong with it, and what that would do.
        problem: String,
    },
    /// The bucket is missing and could not be created.
    #[error("the NATS key-value bucket {bucket:?} at {target} does not exist and could not be created ({detail}): create it with `nats kv add {bucket} --history 1 --storage file`, or allow this user to create streams")]
    BucketCreate {
        /// The servers as the URL names them, for the message (no credentials).
        target: String,
        /// The key-value bucket, which the fix names.
        bucket: String,
        /// What the server answered.
        detail: String,
    },
    /// The TLS handshake failed, or TLS was expected and not spoken.
    #[error("TLS with NATS at {target} failed ({detail}): if the server serves TLS, use nats+tls:// with ?ca= naming the CA that signed its certificate (and a host name or IP address the certificate names); if it does not, use nats://")]
    Tls {
        /// The servers as the URL names them, for the message (no credentials).
        target: String,
        /// What failed.
        detail: String,
    },
    /// The servers could not be reached, or the connection broke.
    #[error("NATS at {target} is unreachable ({detail})")]
    Unreachable {
        /// The servers as the URL names them, for the message (no credentials).
        target: String,
        /// What failed.
        detail: String,
    },
    /// No answer in time: a write may or may not have been applied.
    #[error("NATS at {target} did not answer within {after:?}")]
    Timeout {
        /// The servers as the URL names them, for the message (no credentials).
        target: String,
        /// The bound that ran out.
        after: Duration,
    },
    /// Any other error the client or the server reported.
    #[error("NATS at {target} failed {what}: {detail}")]
    Nats {
        /// The servers as the URL names them, for the message (no credentials).
        target: String,
        /// Which operation.
        what: &'static str,
        /// The client's or server's message.
        detail: String,
        /// The client's error.
        #[source]
        source: Option<BoxError>,
    },
}

impl NatsStoreError {
    /// Whether retrying later may succeed without an operator's help.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            NatsStoreError::Unreachable { .. }
                | NatsStoreError::Timeout { .. }
                | NatsStoreError::Nats { .. }
        )
    }
}

impl BackendError for NatsStoreError {
    fn is_transient(&self) -> bool {
        NatsStoreError::is_transient(self)
    }

    fn timed_out(&self) -> Option<Duration> {
        match self {
            NatsStoreError::Timeout { after, .. } => Some(*after),
            _ => None,
        }
    }

    fn into_source(self) -> Option<BoxError> {
        match self {
            NatsStoreError::Nats { source, .. } => source,
            NatsStoreError::TlsFile(e) => e.into_source(),
            _ => None,
        }
    }
}

impl From<NatsStoreError> for StoreError {
    fn from(e: NatsStoreError) -> Self {
        StoreError::from_backend(e)
    }
}

/// The permissions violations the server reported on this connection
/// lately (it reports them apart from the request, which then goes
/// unanswered), so that a request that timed out because of one says so.
///
/// A violation explains a timeout only if it names the request's own
/// subject (or is a refused subscription, which every request's reply
/// needs): the engine runs many groups' requests on one connection, and a
/// refusal of one group's key says nothing about another request that
/// timed out because the server stopped answering. That one must stay a
/// [`StoreError::Timeout`] (it may have been applied).
#[derive(Clone, Debug, Default)]
pub(crate) struct Violations(Arc<Mutex<Vec<(Instant, String)>>>);

/// How many recent violations are kept to match timeouts against.
const VIOLATIONS_KEPT: usize = 64;

impl Violations {
    pub(crate) fn record(&self, text: String) {
        let mut kept = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if kept.len() == VIOLATIONS_KEPT {
            kept.remove(0);
        }
        kept.push((Instant::now(), text));
    }

    /// The latest violation reported within `within` that concerns a
    /// request on `subject` (see [`Concerning`]), if any.
    fn recent(&self, within: Duration, subject: &Concerning<'_>) -> Option<String> {
        let kept = self.0.lock().unwrap_or_else(|p| p.into_inner());
        kept.iter()
            .rev()
            .take_while(|(at, _)| at.elapsed() <= within)
            .find(|(_, text)| subject.matches(text))
            .map(|(_, text)| text.clone())
    }
}

/// Which violations may explain a request's timeout.
#[derive(Clone, Copy)]
pub(crate) enum Concerning<'a> {
    /// Any: the connection is new and private to this call (connecting,
    /// opening the bucket), so nothing else could have caused one.
    Any,
    /// Violations naming exactly this subject.
    Subject(&'a str),
    /// Violations naming a subject that starts with this.
    SubjectPrefix(&'a str),
}

impl Concerning<'_> {
    fn matches(&self, text: &str) -> bool {
        // The server quotes the subject: `Permissions Violation for
        // Publish to "$KV.b.tenure.g"`. A refused subscription (the
        // replies' inbox) leaves every request unanswered.
        if text.to_ascii_lowercase().contains("subscription") {
            return true;
        }
        match self {
            Concerning::Any => true,
            Concerning::Subject(s) => text.contains(&format!("\"{s}\"")),
            Concerning::SubjectPrefix(p) => text.contains(&format!("\"{p}")),
        }
    }
}

/// What classifying an error needs to know.
pub(crate) struct Ctx<'a> {
    pub(crate) target: String,
    pub(crate) who: String,
    pub(crate) bucket: &'a str,
    pub(crate) timeout: Duration,
    pub(crate) violations: &'a Violations,
}

/// The JetStream API error somewhere in an error's chain, if any.
fn jetstream_code(e: &(dyn std::error::Error + 'static)) -> Option<(ErrorCode, String)> {
    find_cause::<async_nats::jetstream::Error>(e).map(|js| (js.error_code(), js.to_string()))
}

impl Ctx<'_> {
    /// No answer in time to a request on `subject`; a permissions
    /// violation concerning it reported meanwhile is the likelier reason,
    /// and says what to fix.
    pub(crate) fn timeout(&self, subject: Concerning<'_>) -> NatsStoreError {
        if let Some(detail) = self.violations.recent(self.timeout * 2, &subject) {
            return self.permission(detail);
        }
        NatsStoreError::Timeout {
            target: self.target.clone(),
            after: self.timeout,
        }
    }

    pub(crate) fn permission(&self, detail: String) -> NatsStoreError {
        NatsStoreError::Permission {
            target: self.target.clone(),
            who: self.who.clone(),
            bucket: self.bucket.to_owned(),
            detail,
        }
    }

    pub(crate) fn unreachable(&self, detail: impl Into<String>) -> NatsStoreError {
        NatsStoreError::Unreachable {
            target: self.target.clone(),
            detail: detail.into(),
        }
    }

    /// Classifies a connect error.
    pub(crate) fn connect(&self, e: async_nats::ConnectError) -> NatsStoreError {
        use async_nats::ConnectErrorKind as K;
        let target = self.target.clone();
        let detail = error_chain(&e);
        match e.kind() {
            K::AuthorizationViolation | K::Authentication if self.who == "no credentials" => {
                NatsStoreError::AuthRequired { target }
            }
            K::AuthorizationViolation | K::Authentication => NatsStoreError::Credentials {
                target,
                who: self.who.clone(),
            },
            K::Tls => NatsStoreError::Tls { target, detail },
            K::TimedOut => self.timeout(Concerning::Any),
            K::ServerParse => NatsStoreError::Nats {
                target,
                what: "to parse the server addresses",
                detail,
                source: Some(Box::new(e)),
            },
            K::Dns | K::Io | K::MaxReconnects => {
                // A plain-text client meeting a TLS-only server (or the
                // reverse) fails the handshake as I/O.
                let lower = detail.to_ascii_lowercase();
                if ["tls", "certificate", "handshake", "invalidcontenttype"]
                    .iter()
                    .any(|n| lower.contains(n))
                {
                    NatsStoreError::Tls { target, detail }
                } else {
                    NatsStoreError::Unreachable { target, detail }
                }
            }
        }
    }

    /// Classifies any other error of an operation: a request nobody
    /// answered in time is a timeout (it may have been applied), a server
    /// without JetStream or a refused permission is the operator's to fix,
    /// the rest is transient.
    pub(crate) fn operation(
        &self,
        what: &'static str,
        subject: Concerning<'_>,
        e: impl std::error::Error + Send + Sync + 'static,
    ) -> NatsStoreError {
        let detail = error_chain(&e);
        let lower = detail.to_ascii_lowercase();
        if let Some((code, text)) = jetstream_code(&e) {
            if code == ErrorCode::JETSTREAM_NOT_ENABLED
                || code == ErrorCode::JETSTREAM_NOT_ENABLED_FOR_ACCOUNT
            {
                return NatsStoreError::NoJetStream {
                    target: self.target.clone(),
                    detail: text,
                };
            }
        }
        if lower.contains("permissions violation") || lower.contains("authorization violation") {
            return self.permission(detail);
        }
        if lower.contains("timed out") || lower.contains("timeout") {
            return self.timeout(subject);
        }
        NatsStoreError::Nats {
            target: self.target.clone(),
            what,
            detail,
            source: Some(Box::new(e)),
        }
    }
}
