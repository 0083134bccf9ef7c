//! Typed errors. Each message names the problem and, where there is one, the
//! fix.

use std::time::Duration;

use crate::machine::Fault;
use crate::record::GroupName;

/// A configuration that cannot work, found before anything runs.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A name was empty.
    #[error("the {what} is empty: give a non-empty name")]
    EmptyName {
        /// What the name names (`group name`, `candidate id`, …), for the message.
        what: &'static str,
    },
    /// A name was too long.
    #[error("the {what} is {len} bytes long: at most {max} bytes of UTF-8 are allowed")]
    NameTooLong {
        /// What the name names, for the message.
        what: &'static str,
        /// Its length in bytes.
        len: usize,
        /// The most bytes such a name may have.
        max: usize,
    },
    /// A name held a control character.
    #[error("the {what} contains a control character: use printable text")]
    ControlCharacter {
        /// What the name names, for the message.
        what: &'static str,
    },
    /// Published metadata was too large.
    #[error("the metadata encodes to {len} bytes: at most {max} bytes are allowed, publish a pointer instead of the data")]
    MetadataTooLarge {
        /// Encoded size.
        len: usize,
        /// The most bytes a record may carry as metadata.
        max: usize,
    },
    /// Published metadata used a key tenure keeps for itself.
    #[error("the metadata key {key:?} starts with \"tenure.\", which tenure keeps for itself: choose another key")]
    ReservedMetadataKey {
        /// The key used, for the message (the values are not shown).
        key: String,
    },
    /// The term is shorter than [`MIN_TERM`](crate::config::MIN_TERM): its
    /// derived margins (operation timeout, stop grace) would be shorter
    /// than one stall of a real store or scheduler.
    #[error("invalid timing: a term of {term:?} is too short: the term must be at least {min:?} (its operation timeout and stop grace are a quarter and a tenth of it, shorter than one stall of a real store); use a term of seconds")]
    TermTooShort {
        /// The term given.
        term: std::time::Duration,
        /// The shortest term accepted.
        min: std::time::Duration,
    },
    /// The timing settings contradict each other or the safety rules.
    #[error("invalid timing: {rule}")]
    Timing {
        /// The rule that was broken, with the values involved and the fix.
        rule: String,
    },
    /// A sharded set's shape cannot work: no shards, two of one name, both
    /// a list and a catalog, a set name that would break the key layout.
    #[error("invalid sharded set: {rule}")]
    Shards {
        /// The rule that was broken, and the fix.
        rule: String,
    },
}

impl ConfigError {
    pub(crate) fn timing(rule: impl Into<String>) -> Self {
        ConfigError::Timing { rule: rule.into() }
    }

    pub(crate) fn shards(rule: impl Into<String>) -> Self {
        ConfigError::Shards { rule: rule.into() }
    }
}

/// A record in the store that this build must not interpret or overwrite.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// Not a tenure record at all: something else uses this key.
    #[error("the stored record is not a tenure lease ({detail}); another program may be using this key: choose another group name or clear the key by hand")]
    Foreign {
        /// What did not parse.
        detail: String,
    },
    /// A tenure record whose contents are damaged.
    #[error("the stored tenure lease is corrupt ({detail}); inspect it, then clear it by hand")]
    Corrupt {
        /// What is wrong with it.
        detail: String,
    },
    /// A record written by a newer tenure.
    #[error("the stored lease has format version {found} but this build reads up to {supported}: upgrade tenure on this host")]
    TooNew {
        /// The record's format version.
        found: u32,
        /// The newest version this build reads.
        supported: u32,
    },
}

/// The boxed cause inside a [`StoreError`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A failed store operation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The store could not be reached or failed transiently; retried.
    #[error("the store is unavailable: {message}")]
    Unavailable {
        /// What happened, without secrets.
        message: String,
        /// The underlying error.
        #[source]
        source: Option<BoxError>,
    },
    /// The operation did not complete in time; it may or may not have been
    /// applied.
    #[error("the store did not answer within {0:?}")]
    Timeout(Duration),
    /// The operation was not carried out, and certainly not applied: the
    /// item was locked by another transaction (an operator's open
    /// `SELECT … FOR UPDATE` or `UPDATE`), or the engine held the operation
    /// back because the store is serving all it can. Retried after a
    /// back-off; if it persists, find what holds the item.
    #[error("the store is busy: {message}; nothing was written")]
    Busy {
        /// What kept the operation from being carried out.
        message: String,
    },
    /// The stored record cannot be used.
    #[error("group {group}: {source}")]
    Record {
        /// The group whose record is bad.
        group: GroupName,
        /// What is wrong with it.
        #[source]
        source: RecordError,
    },
    /// The store does not offer an operation a feature needs (for example
    /// listing groups, for sharded sets).
    #[error(
        "{store} does not support {what}: use a store that does (see the README's store table)"
    )]
    Unsupported {
        /// The operation the feature needs (listing groups by prefix, …).
        what: &'static str,
        /// The store, as it describes itself (no secrets).
        store: String,
    },
    /// The store is reachable but set up wrongly (credentials, missing table
    /// or database, wrong key type); retrying will not help until an
    /// operator fixes it.
    #[error("the store is misconfigured: {message}")]
    Misconfigured {
        /// What is wrong and how to fix it, without secrets.
        message: String,
        /// The underlying error.
        #[source]
        source: Option<BoxError>,
    },
}

/// What a store crate's own error type tells tenure, so that one shared
/// constructor, [`StoreError::from_backend`], turns any of them into a
/// [`StoreError`] and each crate's `From<…> for StoreError` is one line.
///
/// ```
/// use tenure::error::{BackendError, BoxError};
/// use tenure::StoreError;
///
/// #[derive(Debug, thiserror::Error)]
/// enum MyStoreError {
///     #[error("my store at {0} refused the password: check it in the URL")]
///     Credentials(String),
///     #[error("my store at {target} is unreachable")]
///     Unreachable { target: String, #[source] source: std::io::Error },
/// }
///
/// impl BackendError for MyStoreError {
///     fn is_transient(&self) -> bool {
///         matches!(self, MyStoreError::Unreachable { .. })
///     }
///     fn into_source(self) -> Option<BoxError> {
///         match self {
///             MyStoreError::Unreachable { source, .. } => Some(Box::new(source)),
///             MyStoreError::Credentials(_) => None,
///         }
///     }
/// }
///
/// impl From<MyStoreError> for StoreError {
///     fn from(e: MyStoreError) -> Self {
///         StoreError::from_backend(e)
///     }
/// }
///
/// let e = StoreError::from(MyStoreError::Credentials("db:1".into()));
/// assert!(matches!(e, StoreError::Misconfigured { .. }));
/// assert!(e.to_string().contains("refused the password"));
/// ```
pub trait BackendError: std::error::Error + Send + Sync + Sized + 'static {
    /// Whether retrying may succeed (the server is unreachable, busy or
    /// slow) rather than an operator having to fix something first.
    fn is_transient(&self) -> bool;

    /// The bound a request outlasted, when the error is one: reported as
    /// [`StoreError::Timeout`] (the outcome is unknown).
    fn timed_out(&self) -> Option<Duration> {
        None
    }

    /// The cause, kept as the [`StoreError`]'s source (the error's own
    /// message becomes the `StoreError`'s message, so the cause is what
    /// lies beneath it, not the error itself).
    fn into_source(self) -> Option<BoxError>;

    /// The [`StoreError`] this error carries whole, if it is one: a crate
    /// whose `connect` runs the same code as its operations keeps their
    /// `StoreError` in a variant of its own error, and gets it back
    /// unchanged. The default carries none.
    fn into_store_error(self) -> Result<StoreError, Self> {
        Err(self)
    }
}

/// The first error of type `T` in `e`'s chain of sources, `e` itself
/// included: for telling failures apart by a cause that a client wraps.
///
/// ```
/// let io = std::io::Error::other("refused");
/// let e = tenure::StoreError::unavailable("cannot connect", io);
/// let found = tenure::error::find_cause::<std::io::Error>(&e);
/// assert_eq!(found.map(|io| io.to_string()), Some("refused".into()));
/// ```
pub fn find_cause<'a, T: std::error::Error + 'static>(
    e: &'a (dyn std::error::Error + 'static),
) -> Option<&'a T> {
    let mut next = Some(e);
    while let Some(err) = next {
        if let Some(found) = err.downcast_ref::<T>() {
            return Some(found);
        }
        next = err.source();
    }
    None
}

/// Why a store could not connect, for the store crates whose operations
/// report [`StoreError`]s directly (PostgreSQL, DynamoDB, object stores):
/// their URL is wrong, a TLS file is, or connecting met what an operation
/// would report. Those crates name it after themselves
/// (`PostgresStoreError`, `DynamoDbStoreError`, `BucketStoreError`), as
/// every store crate names its error `{Backend}StoreError`; crates with
/// failures of their own (Redis, etcd, …) have enums of their own.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The URL, an option or a name in it is malformed.
    #[error("bad {store} URL {url}: {reason}")]
    InvalidUrl {
        /// Which store's URL (`PostgreSQL`, `DynamoDB store`, …).
        store: &'static str,
        /// The URL, without secrets.
        url: String,
        /// What is wrong and how to write it instead.
        reason: String,
    },
    /// A TLS file the URL names (`ca=`) cannot be read or does not hold
    /// what its option says.
    #[error(transparent)]
    TlsFile(#[from] crate::store::tls::PemError),
    /// Connecting failed as an operation would (credentials refused, the
    /// database or table missing or wrong, the server unreachable, a
    /// timeout): the message names the fix.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl ConnectError {
    /// Whether retrying later may succeed without an operator's help.
    pub fn is_transient(&self) -> bool {
        match self {
            ConnectError::Store(e) => e.is_transient(),
            ConnectError::InvalidUrl { .. } | ConnectError::TlsFile(_) => false,
        }
    }
}

impl BackendError for ConnectError {
    fn is_transient(&self) -> bool {
        ConnectError::is_transient(self)
    }

    fn into_source(self) -> Option<BoxError> {
        match self {
            ConnectError::TlsFile(e) => e.into_source(),
            ConnectError::InvalidUrl { .. } | ConnectError::Store(_) => None,
        }
    }

    fn into_store_error(self) -> Result<StoreError, Self> {
        match self {
            ConnectError::Store(e) => Ok(e),
            other => Err(other),
        }
    }
}

impl From<ConnectError> for StoreError {
    fn from(e: ConnectError) -> Self {
        StoreError::from_backend(e)
    }
}

/// An error and its causes on one line (each cause once: a message that
/// already contains its cause's text is not repeated), for one-line error
/// output and for matching on details that clients only expose as text.
///
/// ```
/// let io = std::io::Error::other("connection refused");
/// let e = tenure::StoreError::unavailable("cannot reach db:5432", io);
/// assert_eq!(
///     tenure::error::error_chain(&e),
///     "the store is unavailable: cannot reach db:5432: connection refused"
/// );
/// ```
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out.replace('\n', " ")
}

/// So that work returning `std::io::Error` can use
/// [`Elector::run_while_leader`](crate::Elector::run_while_leader), which
/// ends with the elector's error when it stops for good.
impl From<ElectorError> for std::io::Error {
    fn from(e: ElectorError) -> Self {
        std::io::Error::other(e)
    }
}

impl StoreError {
    /// A transient failure with a message and cause.
    pub fn unavailable(message: impl Into<String>, source: impl Into<BoxError>) -> Self {
        StoreError::Unavailable {
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// An operation that was not carried out (see [`StoreError::Busy`]).
    pub fn busy(message: impl Into<String>) -> Self {
        StoreError::Busy {
            message: message.into(),
        }
    }

    /// Whether the operation certainly did not apply, so that a caller may
    /// go on from what it knew before it (a [`Busy`](StoreError::Busy)
    /// store). Any other failure of a write leaves its outcome unknown.
    pub fn not_applied(&self) -> bool {
        matches!(self, StoreError::Busy { .. })
    }

    /// A configuration failure with a message and cause.
    pub fn misconfigured(message: impl Into<String>, source: impl Into<BoxError>) -> Self {
        StoreError::Misconfigured {
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// A store crate's own error as a `StoreError`: a timeout stays a
    /// timeout, a transient error is [`Unavailable`](StoreError::Unavailable),
    /// anything else [`Misconfigured`](StoreError::Misconfigured), with the
    /// error's message and its cause (see [`BackendError`]).
    pub fn from_backend<E: BackendError>(e: E) -> StoreError {
        let e = match e.into_store_error() {
            Ok(carried) => return carried,
            Err(e) => e,
        };
        if let Some(after) = e.timed_out() {
            return StoreError::Timeout(after);
        }
        let transient = e.is_transient();
        let message = e.to_string();
        let source = e.into_source();
        if transient {
            StoreError::Unavailable { message, source }
        } else {
            StoreError::Misconfigured { message, source }
        }
    }

    /// The kind of failure, as a short label ("unavailable", "timeout",
    /// "busy", "record", "misconfigured"): stable across retries, unlike
    /// the message.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::Unavailable { .. } => "unavailable",
            StoreError::Timeout(_) => "timeout",
            StoreError::Busy { .. } => "busy",
            StoreError::Record { .. } => "record",
            StoreError::Misconfigured { .. } => "misconfigured",
            StoreError::Unsupported { .. } => "unsupported",
        }
    }

    /// A copy of this error for each operation of a batch that failed as a
    /// whole: the same kind and message, with the cause kept as text.
    pub fn copy_for_batch(&self) -> StoreError {
        let text = |source: &Option<BoxError>| -> Option<BoxError> {
            source.as_ref().map(|e| e.to_string().into())
        };
        match self {
            StoreError::Unavailable { message, source } => StoreError::Unavailable {
                message: message.clone(),
                source: text(source),
            },
            StoreError::Timeout(d) => StoreError::Timeout(*d),
            StoreError::Busy { message } => StoreError::Busy {
                message: message.clone(),
            },
            StoreError::Record { group, source } => StoreError::Record {
                group: group.clone(),
                source: source.clone(),
            },
            StoreError::Misconfigured { message, source } => StoreError::Misconfigured {
                message: message.clone(),
                source: text(source),
            },
            StoreError::Unsupported { what, store } => StoreError::Unsupported {
                what,
                store: store.clone(),
            },
        }
    }

    /// Whether retrying the same operation later may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            StoreError::Unavailable { .. } | StoreError::Timeout(_) | StoreError::Busy { .. }
        )
    }
}

/// Errors from the [`Elector`](crate::Elector) handle.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ElectorError {
    /// The elector was configured wrongly.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The elector has stopped; nothing more will happen.
    #[error("the elector has stopped")]
    Stopped,
    /// The elector stopped because it can never lead in its group again.
    #[error("the elector stopped: {0}")]
    Failed(Fault),
    /// A bounded wait for leadership ran out.
    #[error("not leading after waiting {waited:?}: another candidate leads, or the store is unreachable")]
    NotLeader {
        /// How long it waited.
        waited: std::time::Duration,
    },
    /// The backend cannot do what was asked (a coordinator-decided group
    /// cannot hand its lease to a named candidate, for instance).
    #[error("{what} is not supported by this elector's backend")]
    Unsupported {
        /// What was asked.
        what: &'static str,
    },
    /// `start()` was called outside a tokio runtime.
    #[error("no tokio runtime: call start() from within a tokio runtime")]
    NoRuntime,
}
