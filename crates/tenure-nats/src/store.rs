//! [`NatsStore`]: the [`LeaseStore`] over a JetStream key-value bucket.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::kv::{self, UpdateErrorKind};
use async_nats::jetstream::stream::{DiscardPolicy, LastRawMessageErrorKind, StorageType};
use async_nats::jetstream::{self, context, ErrorCode};
use async_trait::async_trait;
use bytes::Bytes;
use futures_util::TryStreamExt;
use tenure::store::concurrent::InFlight;
use tenure::store::tls::{read_pem, Expected};
use tenure::store::Running;
use tenure::store::{CasOutcome, ChangeFeed, Listed, StoreFeed};
use tenure::{
    EngineSlot, GroupName, LeaseRecord, LeaseStore, LeaseView, StoreError, Version, Versioned,
};

use crate::error::{Concerning, Ctx, NatsStoreError, Violations};
use crate::marker::{self, Kind};
use crate::options::{Auth, NatsOptions};
use crate::{feed, keys};

/// Most requests of a store handle's batches in flight at once on its one
/// connection: JetStream answers them in a pipeline, so a renewal round of
/// thousands of groups takes a few round trips, bounded whatever the
/// number of groups.
const IN_FLIGHT: usize = 256;

/// The operations one batch call takes (see
/// [`Running::batch_size`]): single requests in flight together,
/// so a large batch only queues behind [`IN_FLIGHT`].
const BATCH_SIZE: usize = 2048;

/// PING interval: a connection that stopped answering is dropped (and
/// re-established) after two unanswered pings.
const PING_INTERVAL: Duration = Duration::from_secs(10);

/// Longest pause between reconnection attempts: after a server restart
/// the store is back within a second of the server.
const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(1);

/// A lease store in a NATS JetStream key-value bucket. Clones share one
/// connection, and the engine that runs every group elected through them.
///
/// See the [crate docs](crate) for the key layout.
#[derive(Clone)]
pub struct NatsStore {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    /// The connection, for the change feed's consumers' inboxes.
    pub(crate) client: async_nats::Client,
    pub(crate) kv: kv::Store,
    pub(crate) options: NatsOptions,
    pub(crate) violations: Violations,
    /// Counts the connection's losses: watches start again after each.
    pub(crate) disconnects: tokio::sync::watch::Receiver<u64>,
    in_flight: InFlight,
    engine: EngineSlot,
}

impl fmt::Debug for NatsStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Not the client: its options hold the password.
        f.debug_struct("NatsStore")
            .field("options", &self.inner.options)
            .finish()
    }
}

impl Inner {
    pub(crate) fn ctx(&self) -> Ctx<'_> {
        ctx(&self.options, &self.violations)
    }

    /// The subject of a key in the bucket's stream.
    pub(crate) fn subject(&self, key: &str) -> String {
        format!("{}{key}", self.kv.prefix)
    }

    /// The subject of a JetStream API request about the bucket's stream
    /// (`STREAM.MSG.GET`, `STREAM.INFO`, `CONSUMER.CREATE`), to match the
    /// server's permissions violations against.
    pub(crate) fn api_subject(&self, request: &str) -> String {
        format!("$JS.API.{request}.{}", self.kv.stream_name)
    }
}

fn ctx<'a>(options: &'a NatsOptions, violations: &'a Violations) -> Ctx<'a> {
    Ctx {
        target: options.target(),
        who: options.who(),
        bucket: &options.bucket,
        timeout: options.timeout,
        violations,
    }
}

/// Runs a request within `timeout`: its outcome, or `None` when it ran out.
pub(crate) async fn within<T>(timeout: Duration, request: impl Future<Output = T>) -> Option<T> {
    tokio::time::timeout(timeout, request).await.ok()
}

/// Checks that the TLS files named in the URL can be read and hold what
/// their options say, so that a typo is reported as such rather than as a
/// failed handshake (the client reads them again itself).
fn check_tls_files(options: &NatsOptions) -> Result<(), NatsStoreError> {
    for (option, path, expected) in [
        ("ca", &options.tls_files.ca, Expected::Certificates),
        ("cert", &options.tls_files.cert, Expected::Certificates),
        ("key", &options.tls_files.key, Expected::PrivateKey),
    ] {
        if let Some(path) = path {
            read_pem(option, path, expected)?;
        }
    }
    Ok(())
}

fn connect_options(
    options: &NatsOptions,
    violations: &Violations,
    disconnects: tokio::sync::watch::Sender<u64>,
) -> async_nats::ConnectOptions {
    let violations = violations.clone();
    let disconnects = Arc::new(disconnects);
    let mut co = async_nats::ConnectOptions::new()
        .name("tenure")
        .connection_timeout(options.timeout)
        .request_timeout(Some(options.timeout))
        .ping_interval(PING_INTERVAL)
        // Reconnect for ever, soon: a lease store is no use disconnected.
        .max_reconnects(None)
        .reconnect_delay_callback(|attempts| {
            let exp = u32::try_from(attempts.min(16)).unwrap_or(16);
            (Duration::from_millis(25) * 2u32.pow(exp) / 2).min(MAX_RECONNECT_DELAY)
        })
        .event_callback(move |event| {
            let violations = violations.clone();
            let disconnects = disconnects.clone();
            async move {
                use async_nats::{Event, ServerError};
                match event {
                    Event::ServerError(ServerError::Other(text))
                        if text.to_ascii_lowercase().contains("permissions violation") =>
                    {
                        tracing::warn!(error = %text, "NATS refused a request of tenure's");
                        violations.record(text);
                    }
                    Event::ServerError(ServerError::AuthorizationViolation) => {
                        tracing::warn!("NATS refused tenure's credentials on reconnecting");
                        violations.record("authorization violation".into());
                    }
                    Event::Disconnected => {
                        tracing::info!("disconnected from NATS; reconnecting");
                        disconnects.send_modify(|n| *n += 1);
                    }
                    Event::Connected => tracing::info!("connected to NATS"),
                    other => tracing::debug!(event = %other, "NATS client event"),
                }
            }
        });
    match &options.auth {
        Auth::None => {}
        Auth::UserPassword { user, password } => {
            co = co.user_and_password(user.clone(), password.clone())
        }
        Auth::Token(token) => co = co.token(token.clone()),
    }
    if options.tls {
        co = co.require_tls(true);
        if let Some(ca) = &options.tls_files.ca {
            co = co.add_root_certificates(ca.clone());
        }
        if let (Some(cert), Some(key)) = (&options.tls_files.cert, &options.tls_files.key) {
            co = co.add_client_certificate(cert.clone(), key.clone());
        }
    }
    co
}

/// What the bucket's stream settings would do to leases, if anything bad.
fn unsafe_bucket(config: &jetstream::stream::Config) -> Option<String> {
    const LOST: &str = "leases would vanish and fencing tokens go back";
    if config.storage == StorageType::Memory {
        return Some(format!(
            "keeps its data in memory, which a server restart wipes: {LOST}"
        ));
    }
    if !config.max_age.is_zero() {
        return Some(format!(
            "expires its entries after {:?} (max_age): {LOST}",
            config.max_age
        ));
    }
    if config.discard == DiscardPolicy::Old && (config.max_bytes > 0 || config.max_messages > 0) {
        return Some(format!(
            "drops its oldest entries when full (discard policy old with a size limit): {LOST}"
        ));
    }
    if config.mirror.is_some() {
        return Some(
            "mirrors another bucket: writes go to its origin and reads lag behind them".into(),
        );
    }
    None
}

/// What the bucket's settings leave open to an operator that tenure
/// cannot see afterwards, if anything: a purge of the whole stream leaves
/// no marker, so every group would read as never written.
fn purge_risk(config: &jetstream::stream::Config) -> Option<&'static str> {
    (!config.deny_purge || config.allow_rollup).then_some(
        "the NATS key-value bucket allows purges (`nats stream purge`, `nats kv purge`): \
         purging the whole stream would send every group's fencing token back unseen. \
         Buckets tenure creates refuse purges; to get one, stop every candidate for at least \
         one term, delete the bucket (`nats kv rm`) and let tenure create it",
    )
}

impl NatsStore {
    /// Connects to NATS at `url` (see [`NatsOptions`] for the form), opens
    /// the key-value bucket, creating it (history 1, file storage) if it is
    /// missing, and checks that it keeps its entries.
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), tenure_nats::NatsStoreError> {
    /// let store = tenure_nats::NatsStore::connect("nats://127.0.0.1:4222/tenure").await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect(url: &str) -> Result<NatsStore, NatsStoreError> {
        NatsStore::connect_with(NatsOptions::from_url(url)?).await
    }

    /// Connects with options already parsed (and perhaps adjusted).
    pub async fn connect_with(options: NatsOptions) -> Result<NatsStore, NatsStoreError> {
        check_tls_files(&options)?;
        let violations = Violations::default();
        let (disconnects_tx, disconnects) = tokio::sync::watch::channel(0);
        let ctx = ctx(&options, &violations);
        let servers: Vec<async_nats::ServerAddr> = options
            .servers()
            .iter()
            .map(|s| {
                s.parse().map_err(|_| NatsStoreError::InvalidUrl {
                    reason: format!("server {s}: not a host and port the client accepts"),
                })
            })
            .collect::<Result<_, _>>()?;
        let client = match within(
            options.timeout,
            connect_options(&options, &violations, disconnects_tx).connect(servers),
        )
        .await
        {
            Some(Ok(c)) => c,
            Some(Err(e)) => return Err(ctx.connect(e)),
            None => return Err(ctx.timeout(Concerning::Any)),
        };
        let mut js = jetstream::new(client);
        js.set_timeout(options.timeout);
        let kv = open_bucket(&js, &options, &ctx).await?;
        if let Some(problem) = unsafe_bucket(&kv.stream.cached_info().config) {
            return Err(NatsStoreError::UnsafeBucket {
                target: options.target(),
                bucket: options.bucket.clone(),
                problem,
            });
        }
        if let Some(risk) = purge_risk(&kv.stream.cached_info().config) {
            tracing::warn!(bucket = %options.bucket, "{risk}");
        }
        Ok(NatsStore {
            inner: Arc::new(Inner {
                client: js.client(),
                kv,
                options,
                violations,
                disconnects,
                in_flight: InFlight::new(IN_FLIGHT),
                engine: EngineSlot::new(),
            }),
        })
    }

    /// The options in use.
    pub fn options(&self) -> &NatsOptions {
        &self.inner.options
    }

    /// The key of a group in the bucket (see the [crate docs](crate#key-layout)).
    ///
    /// ```
    /// use tenure::GroupName;
    /// use tenure_nats::NatsStore;
    /// let group = GroupName::new("set/members/host a").unwrap();
    /// assert_eq!(NatsStore::key_of(&group), "tenure.set.members.host=20a");
    /// assert_eq!(NatsStore::group_of_key("tenure.set.members.host=20a"), Some(group));
    /// ```
    pub fn key_of(group: &GroupName) -> String {
        keys::key_of(group)
    }

    /// The group a key of the bucket names, if it is one tenure writes.
    pub fn group_of_key(key: &str) -> Option<GroupName> {
        keys::group_of(key)
    }

    /// A stored message as the group's record and version; a marker (see
    /// [`marker`](crate::marker)) is an error, never "no record".
    fn versioned(
        &self,
        group: &GroupName,
        headers: Option<&async_nats::HeaderMap>,
        payload: &[u8],
        sequence: u64,
    ) -> Result<Versioned, StoreError> {
        if let Kind::Marker(what) = marker::kind_of(headers) {
            return Err(self.marker_error(group, &what));
        }
        let record = LeaseRecord::decode(payload).map_err(|source| StoreError::Record {
            group: group.clone(),
            source,
        })?;
        Ok(Versioned {
            record,
            version: Version(sequence),
        })
    }

    fn marker_error(&self, group: &GroupName, what: &str) -> StoreError {
        marker::marker_error(
            group,
            &self.inner.options.bucket,
            &keys::key_of(group),
            what,
        )
    }

    /// The last message of a key: its sequence and whether it is a record
    /// (or a deletion marker); `None` if the key has none.
    async fn last_message(
        &self,
        group: &GroupName,
    ) -> Result<Option<async_nats::jetstream::message::StreamMessage>, StoreError> {
        let inner = &self.inner;
        let subject = inner.subject(&keys::key_of(group));
        // The stream's own get (through its leader), not a direct get that
        // a replica may answer from behind.
        let got = within(
            inner.options.timeout,
            inner.kv.stream.get_last_raw_message_by_subject(&subject),
        )
        .await;
        let api = inner.api_subject("STREAM.MSG.GET");
        match got {
            None => Err(inner.ctx().timeout(Concerning::Subject(&api)).into()),
            Some(Ok(message)) => Ok(Some(message)),
            Some(Err(e)) => match e.kind() {
                LastRawMessageErrorKind::NoMessageFound => Ok(None),
                _ => Err(inner
                    .ctx()
                    .operation("read", Concerning::Subject(&api), e)
                    .into()),
            },
        }
    }

    /// `update` of the key with `expected` as its last sequence (0: the key
    /// has no message at all): the new sequence, or `None` when the server
    /// refused because the key's last sequence differs. A request that
    /// got no answer is an error, never a refusal.
    async fn update(
        &self,
        group: &GroupName,
        bytes: Bytes,
        expected: u64,
    ) -> Result<Option<u64>, StoreError> {
        let inner = &self.inner;
        let key = keys::key_of(group);
        let put = within(
            inner.options.timeout,
            inner.kv.update(&key, bytes, expected),
        )
        .await;
        let subject = inner.subject(&key);
        let subject = Concerning::Subject(&subject);
        match put {
            None => Err(inner.ctx().timeout(subject).into()),
            Some(Ok(sequence)) => Ok(Some(sequence)),
            Some(Err(e)) => match e.kind() {
                UpdateErrorKind::WrongLastRevision => Ok(None),
                UpdateErrorKind::TimedOut => Err(inner.ctx().timeout(subject).into()),
                _ => Err(classify_publish(inner, subject, e).into()),
            },
        }
    }

    async fn create(&self, group: &GroupName, bytes: Bytes) -> Result<CasOutcome, StoreError> {
        if let Some(sequence) = self.update(group, bytes, 0).await? {
            return Ok(CasOutcome::Applied(Version(sequence)));
        }
        // The key has a message: a record (a conflict), or a marker where
        // someone deleted or purged it, which is never written over (the
        // group's tokens would start again at 1).
        if let Some(last) = self.last_message(group).await? {
            if let Kind::Marker(what) = marker::kind_of(Some(&last.headers)) {
                return Err(self.marker_error(group, &what));
            }
        }
        Ok(CasOutcome::Conflict)
    }

    /// Reads one group for a batch.
    async fn read_one(&self, group: &GroupName) -> Result<Option<Versioned>, StoreError> {
        match self.last_message(group).await? {
            None => Ok(None),
            Some(m) => self
                .versioned(group, Some(&m.headers), &m.payload, m.sequence)
                .map(Some),
        }
    }
}

/// An `update` that failed for another reason than a conflict or a
/// timeout: a connection lost after sending (it may have applied), no
/// JetStream to answer (it did not), or a refusal.
fn classify_publish(inner: &Inner, subject: Concerning<'_>, e: kv::UpdateError) -> NatsStoreError {
    use async_nats::jetstream::context::{PublishError, PublishErrorKind};
    let ctx = inner.ctx();
    let publish = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<PublishError>());
    match publish.map(|p| p.kind()) {
        Some(PublishErrorKind::TimedOut) => ctx.timeout(subject),
        Some(PublishErrorKind::StreamNotFound) => ctx.unreachable(format!(
            "no JetStream answered for bucket {:?}: the server is starting, has no JetStream, or the bucket was deleted",
            inner.options.bucket
        )),
        Some(PublishErrorKind::BrokenPipe) => {
            ctx.unreachable("the connection was lost before the write was acknowledged")
        }
        _ => ctx.operation("compare-and-swap", subject, e),
    }
}

/// The stream of a key-value bucket as `nats kv add BUCKET --history 1`
/// makes it, with file storage, except that it refuses what would send
/// fencing tokens back: deleting messages and purging the stream through
/// the API (`deny_delete`, `deny_purge`: `nats stream rmm` and `nats stream
/// purge`), and roll-ups (`allow_rollup: false`: `nats kv purge`, which
/// is a roll-up). A `nats kv del` is an ordinary publish that no setting
/// refuses; it leaves a marker that reads as an error (see
/// [`marker`](crate::marker)). Created as a stream rather than through the
/// client's bucket creation, which first reads the account's JetStream
/// limits in a form servers before 2.10 do not send.
fn bucket_stream(bucket: &str) -> jetstream::stream::Config {
    jetstream::stream::Config {
        name: format!("KV_{bucket}"),
        description: Some("tenure leases: one key per group, never deleted or purged".into()),
        subjects: vec![format!("$KV.{bucket}.>")],
        max_messages_per_subject: 1,
        storage: StorageType::File,
        discard: DiscardPolicy::New,
        allow_rollup: false,
        deny_delete: true,
        deny_purge: true,
        allow_direct: true,
        num_replicas: 1,
        ..Default::default()
    }
}

/// Opens the bucket, creating it if it does not exist.
async fn open_bucket(
    js: &context::Context,
    options: &NatsOptions,
    ctx: &Ctx<'_>,
) -> Result<kv::Store, NatsStoreError> {
    let bucket = options.bucket.as_str();
    // Why a creation found the bucket's subjects taken, if it did.
    let mut overlap: Option<String> = None;
    for attempt in 0..OPEN_ATTEMPTS {
        match within(options.timeout, js.get_key_value(bucket)).await {
            None => return Err(ctx.timeout(Concerning::Any)),
            Some(Ok(kv)) => return Ok(kv),
            Some(Err(e)) => match stream_error_code(&e) {
                Lookup::NotFound => {}
                Lookup::NoJetStream(detail) => {
                    return Err(NatsStoreError::NoJetStream {
                        target: ctx.target.clone(),
                        detail,
                    })
                }
                Lookup::Other => {
                    if matches!(e.kind(), context::KeyValueErrorKind::InvalidStoreName) {
                        return Err(NatsStoreError::UnsafeBucket {
                            target: ctx.target.clone(),
                            bucket: bucket.to_owned(),
                            problem: "is a stream but no key-value bucket (it keeps no per-key history limit)".into(),
                        });
                    }
                    return Err(ctx.operation("to open the bucket", Concerning::Any, e));
                }
            },
        }
        match within(options.timeout, js.create_stream(bucket_stream(bucket))).await {
            None => return Err(ctx.timeout(Concerning::Any)),
            Some(Ok(_)) => {
                overlap = None;
                tracing::info!(
                    bucket,
                    "created the NATS key-value bucket for tenure's leases"
                );
                // Opened on the next turn, as any existing bucket.
                continue;
            }
            // Created meanwhile by another process (with other settings):
            // open what is there.
            Some(Err(e)) if chain_has(&e, "already in use") => {
                overlap = None;
                continue;
            }
            // Another process's creation of the same bucket, which the
            // server may report so while it is under way (seen: two `tenure
            // run` starting at once, one failed); or a stream of someone
            // else's that owns the subjects, which no retry mends. Look
            // again a little later, and name it if it stays.
            Some(Err(e)) if chain_has(&e, "subjects overlap") => {
                overlap = Some(tenure::error::error_chain(&e));
                if attempt + 1 < OPEN_ATTEMPTS {
                    tokio::time::sleep(Duration::from_millis(25 << attempt.min(5))).await;
                }
                continue;
            }
            Some(Err(e)) => {
                let detail = tenure::error::error_chain(&e);
                if detail.to_ascii_lowercase().contains("timed out") {
                    return Err(ctx.timeout(Concerning::Any));
                }
                return Err(NatsStoreError::BucketCreate {
                    target: ctx.target.clone(),
                    bucket: bucket.to_owned(),
                    detail,
                });
            }
        }
    }
    if let Some(detail) = overlap {
        return Err(NatsStoreError::BucketCreate {
            target: ctx.target.clone(),
            bucket: bucket.to_owned(),
            detail: format!("{detail}; another stream holds the subjects $KV.{bucket}.>"),
        });
    }
    Err(ctx.operation(
        "to open the bucket",
        Concerning::Any,
        std::io::Error::other("it was created and then deleted again while opening it"),
    ))
}

/// How many times opening a bucket looks it up (and creates it if
/// missing): a bucket created or deleted by others meanwhile is looked up
/// again. With the back-off after an overlap, about 2.4 s of waiting.
const OPEN_ATTEMPTS: u32 = 8;

fn chain_has(e: &dyn std::error::Error, needle: &str) -> bool {
    tenure::error::error_chain(e).contains(needle)
}

/// What looking up a bucket's stream found.
enum Lookup {
    NotFound,
    NoJetStream(String),
    Other,
}

fn stream_error_code(e: &context::KeyValueError) -> Lookup {
    use context::{GetStreamError, GetStreamErrorKind, RequestError, RequestErrorKind};
    let Some(get) = std::error::Error::source(e).and_then(|s| s.downcast_ref::<GetStreamError>())
    else {
        return Lookup::Other;
    };
    match get.kind() {
        GetStreamErrorKind::JetStream(js) if js.error_code() == ErrorCode::STREAM_NOT_FOUND => {
            Lookup::NotFound
        }
        GetStreamErrorKind::JetStream(js)
            if js.error_code() == ErrorCode::JETSTREAM_NOT_ENABLED
                || js.error_code() == ErrorCode::JETSTREAM_NOT_ENABLED_FOR_ACCOUNT =>
        {
            Lookup::NoJetStream(js.to_string())
        }
        GetStreamErrorKind::Request => {
            let request = std::error::Error::source(get)
                .and_then(|s| s.downcast_ref::<RequestError>())
                .map(|r| r.kind());
            if request == Some(RequestErrorKind::NoResponders) {
                Lookup::NoJetStream("nothing answers the JetStream API".into())
            } else {
                Lookup::Other
            }
        }
        _ => Lookup::Other,
    }
}

#[async_trait]
impl LeaseView for NatsStore {
    async fn read(&self, group: &GroupName) -> Result<Option<Versioned>, StoreError> {
        self.read_one(group).await
    }

    /// The keys under the prefix's complete `/`-segments, as the stream
    /// lists its subjects, then each group's record.
    async fn list(&self, prefix: &str) -> Result<Vec<Listed>, StoreError> {
        let inner = &self.inner;
        let filter = inner.subject(&keys::filter_for_prefix(prefix));
        let subjects = async {
            inner
                .kv
                .stream
                .info_with_subjects(filter)
                .await?
                .try_collect::<Vec<(String, usize)>>()
                .await
        };
        let api = inner.api_subject("STREAM.INFO");
        let api = || Concerning::Subject(&api);
        let subjects = match within(inner.options.timeout, subjects).await {
            None => return Err(inner.ctx().timeout(api()).into()),
            Some(Err(e)) => return Err(inner.ctx().operation("to list keys", api(), e).into()),
            Some(Ok(s)) => s,
        };
        let groups: Vec<GroupName> = subjects
            .iter()
            .filter_map(|(subject, _)| subject.strip_prefix(inner.kv.prefix.as_str()))
            .filter_map(keys::group_of)
            .filter(|g| g.as_str().starts_with(prefix))
            .collect();
        let records = self.read_many(&groups).await?;
        Ok(Listed::from_reads(groups, records))
    }

    /// One watch of every key tenure writes, its messages carrying the
    /// records (see [the crate docs](crate#change-feed)).
    async fn watch(&self) -> Result<Option<StoreFeed>, StoreError> {
        Ok(Some(feed::store_wide(self.inner.clone()).await?))
    }

    async fn changes(&self, group: &GroupName) -> Result<Option<ChangeFeed>, StoreError> {
        Ok(Some(feed::per_group(self.inner.clone(), group).await?))
    }

    fn describe(&self) -> String {
        self.inner.options.describe()
    }

    fn running(&self) -> Running<'_> {
        // Batches are one request per group (a `get`, an `update`), in
        // flight together on the one connection (at most 256 at once per
        // handle).
        Running::new(BATCH_SIZE, &self.inner.engine).bounded_by(&self.inner.in_flight)
    }
}

#[async_trait]
impl LeaseStore for NatsStore {
    async fn compare_and_swap(
        &self,
        group: &GroupName,
        expected: Option<Version>,
        record: &LeaseRecord,
    ) -> Result<CasOutcome, StoreError> {
        let bytes = Bytes::from(record.encode());
        match expected {
            None => self.create(group, bytes).await,
            // Stream sequences start at 1: no record has version 0, and an
            // update expecting 0 would create the key instead.
            Some(Version(0)) => Ok(CasOutcome::Conflict),
            Some(Version(v)) => Ok(match self.update(group, bytes, v).await? {
                Some(sequence) => CasOutcome::Applied(Version(sequence)),
                None => CasOutcome::Conflict,
            }),
        }
    }
}
