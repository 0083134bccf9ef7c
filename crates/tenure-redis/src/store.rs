//! [`RedisStore`]: the [`LeaseStore`] over the Lua scripts of
//! [`script`](crate::script).

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use redis::{ConnectionAddr, ConnectionInfo, ProtocolVersion, RedisConnectionInfo, Value};
use tenure::store::tls::{read_pem, Expected};
use tenure::store::Running;
use tenure::store::{BatchResult, CasOutcome, CasRequest, ChangeFeed, FeedsOff, Listed, StoreFeed};
use tenure::{
    EngineSlot, GroupName, LeaseRecord, LeaseStore, LeaseView, Metadata, RecordError, StoreError,
    Version, Versioned, WallTime,
};

use crate::conn::Conn;
use crate::error::RedisStoreError;
use crate::feed;
use crate::options::RedisOptions;
use crate::script::{self, CasReply, ReadReply, ADOPT, CAS, READ};

/// How long a change feed the server refused stays off before
/// [`LeaseView::changes`] tries again (electors poll meanwhile).
const FEED_RETRY_AFTER: Duration = Duration::from_secs(60);

/// The quarantine after a loss of data is at least this many terms of the
/// lease being created: one for the old leader's term, one for margin
/// against the server's clock rate and peers configured with a longer term.
const QUARANTINE_TERMS: u32 = 2;

/// Most groups in one script call: a larger batch (only a direct caller
/// sends one; the engine's are no larger) becomes several calls, so no
/// script holds the server for long.
const MAX_KEYS: usize = 4096;

/// A lease store in Redis. Clones share one connection.
///
/// See the [crate docs](crate) for the key layout and what happens when
/// Redis loses its data.
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    conn: Conn,
    /// A RESP3 client for change feeds (pushes need RESP3).
    feed_client: redis::Client,
    feeds_off: FeedsOff,
    publish_warned: AtomicBool,
    /// The engine that electors on clones of this handle share.
    engine: EngineSlot,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("options", self.options())
            .finish()
    }
}

pub(crate) fn client(
    options: &RedisOptions,
    protocol: ProtocolVersion,
) -> Result<redis::Client, RedisStoreError> {
    if options.tls {
        // The `redis` crate builds its rustls config from the process-wide
        // provider, which rustls cannot pick on its own when no provider or
        // several are compiled in. Install ring unless the application
        // already chose one (then this is a no-op).
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    let addr = if options.tls {
        ConnectionAddr::TcpTls {
            host: options.host.clone(),
            port: options.port,
            insecure: false,
            tls_params: None,
        }
    } else {
        ConnectionAddr::Tcp(options.host.clone(), options.port)
    };
    let info = ConnectionInfo {
        addr,
        redis: RedisConnectionInfo {
            db: options.db,
            username: options.user.clone(),
            password: options.password.as_ref().map(|p| p.expose().to_owned()),
            protocol,
        },
    };
    if options.tls_files.ca.is_none() && options.tls_files.cert.is_none() {
        return redis::Client::open(info).map_err(|e| RedisStoreError::InvalidUrl {
            reason: format!("the connection settings were refused: {}", e.category()),
        });
    }
    let root_cert = options
        .tls_files
        .ca
        .as_ref()
        .map(|p| read_pem("ca", p, Expected::Certificates))
        .transpose()?;
    let client_tls = match (&options.tls_files.cert, &options.tls_files.key) {
        (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
            client_cert: read_pem("cert", cert, Expected::Certificates)?,
            client_key: read_pem("key", key, Expected::PrivateKey)?,
        }),
        _ => None,
    };
    redis::Client::build_with_tls(
        info,
        redis::TlsCertificates {
            client_tls,
            root_cert,
        },
    )
    .map_err(|e| RedisStoreError::Tls {
        target: options.target(),
        detail: format!(
            "the ca, cert or key file is not usable PEM ({})",
            e.category()
        ),
    })
}

impl RedisStore {
    /// Connects to the Redis at `url` (see [`RedisOptions`] for the form)
    /// and checks that tenure can work there: the credentials, TLS, that
    /// the server is a master, and that it will not evict lease keys.
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), tenure_redis::RedisStoreError> {
    /// let store = tenure_redis::RedisStore::connect("redis://127.0.0.1:6379").await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect(url: &str) -> Result<RedisStore, RedisStoreError> {
        RedisStore::connect_with(RedisOptions::from_url(url)?).await
    }

    /// Connects with options already parsed (and perhaps adjusted).
    pub async fn connect_with(options: RedisOptions) -> Result<RedisStore, RedisStoreError> {
        let conn = Conn::new(client(&options, ProtocolVersion::RESP2)?, options.clone());
        let feed_client = client(&options, ProtocolVersion::RESP3)?;
        let store = RedisStore {
            inner: Arc::new(Inner {
                conn,
                feed_client,
                feeds_off: FeedsOff::default(),
                publish_warned: AtomicBool::new(false),
                engine: EngineSlot::new(),
            }),
        };
        store.check().await?;
        Ok(store)
    }

    /// The options in use.
    pub fn options(&self) -> &RedisOptions {
        self.inner.conn.options()
    }

    /// The Redis key (and pub/sub channel) of a group: the prefix followed
    /// by the group name.
    pub fn key(&self, group: &GroupName) -> String {
        format!("{}{}", self.options().prefix, group.as_str())
    }

    /// The key of the data-set marker: the bare prefix.
    pub fn marker_key(&self) -> &str {
        &self.options().prefix
    }

    /// Declares that this Redis has never held tenure leases under this
    /// prefix, so the first leases are granted at once instead of after the
    /// quarantine, and fencing tokens start at 1.
    ///
    /// Only for a brand-new server or prefix: tenure cannot tell a new Redis
    /// from one that lost its data, and adopting one that lost its data
    /// lets a new leader start while one elected before the loss still
    /// holds its term. Returns `false` (and changes nothing) if tenure has
    /// already marked this data set.
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), tenure_redis::RedisStoreError> {
    /// let store = tenure_redis::RedisStore::connect("redis://127.0.0.1:6379").await?;
    /// store.adopt_empty().await?;
    /// # Ok(()) }
    /// ```
    pub async fn adopt_empty(&self) -> Result<bool, RedisStoreError> {
        let marker = self.marker_key().to_owned();
        let reply: Value = self
            .inner
            .conn
            .run("adopt", |mut c| async move {
                ADOPT.key(&marker).invoke_async(&mut c).await
            })
            .await?;
        match &reply {
            Value::Int(1) => Ok(true),
            Value::Int(0) => Ok(false),
            Value::Array(items) => Err(RedisStoreError::WrongType {
                key: self.marker_key().to_owned(),
                found: items
                    .get(2)
                    .and_then(|v| redis::from_redis_value::<String>(v).ok())
                    .unwrap_or_default(),
            }),
            other => Err(self.protocol("adopt", format!("{other:?}"))),
        }
    }

    fn protocol(&self, what: &'static str, detail: String) -> RedisStoreError {
        RedisStoreError::Protocol {
            target: self.options().target(),
            what,
            detail,
        }
    }

    fn wrong_type(&self, group: &GroupName, marker: bool, found: String) -> StoreError {
        if marker {
            RedisStoreError::WrongType {
                key: self.marker_key().to_owned(),
                found,
            }
            .into()
        } else {
            StoreError::Record {
                group: group.clone(),
                source: RecordError::Foreign {
                    detail: format!(
                        "the Redis key {:?} holds a {found}, not tenure's hash",
                        self.key(group)
                    ),
                },
            }
        }
    }

    /// Connects once and checks what can be checked up front.
    async fn check(&self) -> Result<(), RedisStoreError> {
        self.inner
            .conn
            .run("PING", |mut c| async move {
                redis::cmd("PING").query_async::<Value>(&mut c).await
            })
            .await?;
        // Best effort: CONFIG is often renamed or denied on managed Redis.
        let policy = self
            .inner
            .conn
            .run("CONFIG GET", |mut c| async move {
                redis::cmd("CONFIG")
                    .arg("GET")
                    .arg("maxmemory-policy")
                    .query_async::<Vec<String>>(&mut c)
                    .await
            })
            .await;
        match policy {
            Ok(pair) => {
                if let Some(policy) = pair.get(1) {
                    if policy.starts_with("allkeys-") {
                        return Err(RedisStoreError::Eviction {
                            target: self.options().target(),
                            policy: policy.clone(),
                        });
                    }
                }
            }
            Err(e) => {
                tracing::debug!(target = %self.options().target(), error = %e, "cannot check maxmemory-policy")
            }
        }
        Ok(())
    }

    fn quarantine_for(&self, record: &LeaseRecord) -> Duration {
        let by_term = record.term.saturating_mul(QUARANTINE_TERMS);
        self.options()
            .quarantine
            .map_or(by_term, |q| q.max(by_term))
    }

    /// A read reply as the group's record (see the crate docs on data
    /// loss for a missing record in a recovered data set).
    fn versioned(
        &self,
        group: &GroupName,
        reply: ReadReply,
    ) -> Result<Option<Versioned>, StoreError> {
        let bad = |source| StoreError::Record {
            group: group.clone(),
            source,
        };
        match reply {
            ReadReply::WrongType { marker, found } => Err(self.wrong_type(group, marker, found)),
            ReadReply::None {
                floor: None | Some(0),
                ..
            } => Ok(None),
            ReadReply::None {
                floor: Some(floor),
                since_ms,
            } => {
                // A recovered data set: this group's record may have been
                // lost, so it reads as released at the token floor, and the
                // next term's token is above every token issued before.
                let at = WallTime::from_millis(since_ms);
                Ok(Some(Versioned {
                    record: LeaseRecord {
                        holder: None,
                        token: floor,
                        term: Duration::ZERO,
                        renewed_at: at,
                        expires_at: at,
                        metadata: Metadata::new(),
                    },
                    version: Version(0),
                }))
            }
            ReadReply::Hash { version, record } => {
                let (Some(version), Some(record)) = (version, record) else {
                    return Err(bad(RecordError::Foreign {
                        detail: format!(
                            "the Redis hash {:?} lacks tenure's fields v and record",
                            self.key(group)
                        ),
                    }));
                };
                let version = script::version(&version).ok_or_else(|| {
                        bad(RecordError::Corrupt {
                            detail: format!(
                                "the version field v of {:?} is {:?}, not a whole number in plain digits up to {}",
                                self.key(group),
                                String::from_utf8_lossy(&version),
                                script::MAX_VERSION
                            ),
                        })
                    })?;
                let record = LeaseRecord::decode(&record).map_err(bad)?;
                Ok(Some(Versioned {
                    record,
                    version: Version(version),
                }))
            }
        }
    }

    /// A compare-and-swap reply as its outcome.
    fn outcome(&self, group: &GroupName, reply: CasReply) -> Result<CasOutcome, StoreError> {
        match reply {
            CasReply::Applied {
                version,
                publish_error,
            } => {
                if let Some(e) = publish_error {
                    if !self.inner.publish_warned.swap(true, Ordering::Relaxed) {
                        tracing::warn!(
                            target = %self.options().target(),
                            error = %e,
                            "cannot publish lease changes, so waiting candidates poll instead of taking over at once: grant the channel permission &{}*",
                            self.options().prefix
                        );
                    }
                }
                Ok(CasOutcome::Applied(Version(version)))
            }
            CasReply::Conflict => Ok(CasOutcome::Conflict),
            // The group's record, not the store: reported as a read of a
            // version past the last is (certainly not applied, and no
            // retry helps).
            CasReply::Last => Err(StoreError::Record {
                group: group.clone(),
                source: RecordError::Corrupt {
                    detail: format!(
                        "the record of {:?} is at a version no other follows (the last this \
                         store writes is {}): delete the key to start the group again",
                        self.key(group),
                        script::MAX_VERSION
                    ),
                },
            }),
            // Only an update's reply names no version (see cas_chunk).
            CasReply::AppliedAsNamed => Err(self
                .protocol(
                    "compare-and-swap",
                    "the reply 1 (applied at the version named) to a creation".into(),
                )
                .into()),
            CasReply::Quarantine { remaining_ms } => Err(RedisStoreError::Quarantine {
                target: self.options().target(),
                prefix: self.options().prefix.clone(),
                // Whole seconds: the message repeats in logs each retry.
                remaining: Duration::from_secs(remaining_ms.div_ceil(1000)),
            }
            .into()),
            CasReply::WrongType { marker, found } => Err(self.wrong_type(group, marker, found)),
        }
    }

    /// One script call reading `groups`.
    async fn read_chunk(&self, groups: &[GroupName]) -> BatchResult<Option<Versioned>> {
        let mut invocation = READ.key(self.marker_key());
        for g in groups {
            invocation.key(self.key(g));
        }
        let replies = self
            .invoke_each("read", invocation, groups.len(), ReadReply::parse)
            .await?;
        Ok(groups
            .iter()
            .zip(replies)
            .map(|(g, r)| self.versioned(g, r?))
            .collect())
    }

    /// One script call carrying out `requests` in order. The command is
    /// built in one buffer (keys, versions and records written into it
    /// directly, no string per argument), and an applied write's reply is
    /// an integer: what a renewal costs the client is mostly here.
    async fn cas_chunk(&self, requests: &[CasRequest]) -> BatchResult<CasOutcome> {
        let prefix = self.options().prefix.as_bytes();
        let mut cmd = redis::Cmd::with_capacity(
            3 + 4 * requests.len() + 1,
            64 + requests.len() * (2 * prefix.len() + 200),
        );
        cmd.arg("EVALSHA")
            .arg(CAS.get_hash())
            .arg(requests.len() + 1)
            .arg(prefix);
        let mut buf = Vec::with_capacity(256);
        for r in requests {
            buf.clear();
            buf.extend_from_slice(prefix);
            buf.extend_from_slice(r.group.as_str().as_bytes());
            cmd.arg(&buf[..]);
        }
        let mut digits = [0u8; 20];
        for r in requests {
            match r.expected {
                Some(v) => cmd.arg(decimal(v.0, &mut digits)),
                None => cmd.arg(&b""[..]),
            };
            buf.clear();
            r.record.encode_into(&mut buf);
            cmd.arg(&buf[..]);
            match third_argument(r) {
                Third::Next(next) => cmd.arg(decimal(next, &mut digits)),
                // The script refuses the update if it would apply (see
                // `CasReply::Last`).
                Third::NoNext => cmd.arg(&b""[..]),
                Third::Quarantine => {
                    let quarantine = self.quarantine_for(&r.record);
                    let ms = u64::try_from(quarantine.as_millis()).unwrap_or(u64::MAX);
                    cmd.arg(decimal(ms, &mut digits))
                }
            };
        }
        let what = "compare-and-swap";
        let reply: Value = self
            .inner
            .conn
            .run(what, |mut c| async move {
                match cmd.query_async(&mut c).await {
                    Err(e) if e.kind() == redis::ErrorKind::NoScriptError => {
                        // A restarted server forgot the script.
                        CAS.load_async(&mut c).await?;
                        cmd.query_async(&mut c).await
                    }
                    other => other,
                }
            })
            .await?;
        let replies = script::each(&reply, requests.len(), CasReply::parse)
            .map_err(|d| self.protocol(what, d))?;
        Ok(requests
            .iter()
            .zip(replies)
            .map(|(r, reply)| {
                let reply = match reply {
                    Ok(CasReply::AppliedAsNamed) => match third_argument(r) {
                        Third::Next(version) => CasReply::Applied {
                            version,
                            publish_error: None,
                        },
                        Third::NoNext | Third::Quarantine => CasReply::AppliedAsNamed,
                    },
                    other => other.map_err(|d| StoreError::from(self.protocol(what, d)))?,
                };
                self.outcome(&r.group, reply)
            })
            .collect())
    }

    /// Runs one script call for `n` requests (`what` names it in errors)
    /// and parses its reply's entries, one per request, each on its own: a
    /// reply without `n` entries fails the call, a malformed entry only its
    /// request.
    async fn invoke_each<T>(
        &self,
        what: &'static str,
        invocation: redis::ScriptInvocation<'static>,
        n: usize,
        parse: impl Fn(&Value) -> Result<T, String>,
    ) -> BatchResult<T> {
        let reply: Value = self
            .inner
            .conn
            .run(what, |mut c| async move {
                invocation.invoke_async(&mut c).await
            })
            .await?;
        let replies = script::each(&reply, n, parse).map_err(|d| self.protocol(what, d))?;
        Ok(replies
            .into_iter()
            .map(|r| r.map_err(|d| StoreError::from(self.protocol(what, d))))
            .collect())
    }
}

/// What a request's third argument to the script carries.
enum Third {
    /// An update (an expected version from 1 up): the version it writes.
    Next(u64),
    /// An update over a version no other follows.
    NoNext,
    /// A creation (no expected version, or 0: a record lost): the
    /// quarantine.
    Quarantine,
}

fn third_argument(r: &CasRequest) -> Third {
    match r.expected {
        Some(v) if v.0 >= 1 => script::next_version(v.0).map_or(Third::NoNext, Third::Next),
        _ => Third::Quarantine,
    }
}

/// `n` in decimal, written into `buf` (a `u64` has at most 20 digits).
fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + u8::try_from(n % 10).unwrap_or(0);
        n /= 10;
        if n == 0 {
            return &buf[at..];
        }
    }
}

/// Runs `chunk` on each piece of `items` in order. A piece that fails as a
/// whole fails the batch if it was the first, else its entries and every
/// later one fail with its error (earlier pieces' outcomes stand).
async fn chunked<'a, I, T, F, Fut>(items: &'a [I], mut chunk: F) -> BatchResult<T>
where
    F: FnMut(&'a [I]) -> Fut,
    Fut: std::future::Future<Output = BatchResult<T>>,
{
    let mut out = Vec::with_capacity(items.len());
    let mut failed: Option<StoreError> = None;
    for piece in items.chunks(MAX_KEYS) {
        if let Some(e) = &failed {
            out.extend(piece.iter().map(|_| Err(e.copy_for_batch())));
            continue;
        }
        match chunk(piece).await {
            Ok(results) => out.extend(results),
            Err(e) if out.is_empty() => return Err(e),
            Err(e) => {
                out.extend(piece.iter().map(|_| Err(e.copy_for_batch())));
                failed = Some(e);
            }
        }
    }
    Ok(out)
}

#[async_trait]
impl LeaseView for RedisStore {
    async fn read(&self, group: &GroupName) -> Result<Option<Versioned>, StoreError> {
        tenure::store::read_as_batch(self, group).await
    }

    /// One script call per 4096 groups, all read in one atomic step.
    async fn read_many(&self, groups: &[GroupName]) -> BatchResult<Option<Versioned>> {
        chunked(groups, |piece| self.read_chunk(piece)).await
    }

    async fn changes(&self, group: &GroupName) -> Result<Option<ChangeFeed>, StoreError> {
        if self.inner.feeds_off.now() {
            return Ok(None);
        }
        let (tx, feed) = ChangeFeed::channel();
        let store = self.clone();
        let channel = self.key(group);
        tokio::spawn(async move {
            let client = store.inner.feed_client.clone();
            let options = store.options().clone();
            if let Err(e) = feed::run(client, options, channel.clone(), tx).await {
                tracing::warn!(
                    channel,
                    error = %e,
                    "Redis refused the change feed; candidates poll instead of taking over at once"
                );
                store.inner.feeds_off.for_a_while(FEED_RETRY_AFTER);
            }
        });
        Ok(Some(feed))
    }

    /// One connection subscribed to the pattern `<prefix>*`: every group's
    /// writes, with their records (see [the crate docs](crate#many-groups)).
    /// A server that refuses the pattern (an ACL without `+psubscribe`)
    /// gives no store-wide feed: the engine subscribes group by group.
    async fn watch(&self) -> Result<Option<StoreFeed>, StoreError> {
        match feed::watch(self.inner.feed_client.clone(), self.options().clone()).await {
            Ok(feed) => Ok(Some(feed)),
            Err(e) if !e.is_transient() => {
                tracing::warn!(
                    target = %self.options().target(),
                    error = %e,
                    "Redis refused the store-wide change feed (PSUBSCRIBE {}*); each group subscribes on its own connection instead",
                    self.options().prefix
                );
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// `SCAN … MATCH <prefix>*` (the prefix's glob characters escaped)
    /// for the keys, then the usual read script for their records. SCAN
    /// walks the whole keyspace, so a sharded set is best given a database
    /// or a prefix of its own on a busy server.
    async fn list(&self, prefix: &str) -> Result<Vec<Listed>, StoreError> {
        let store_prefix = self.options().prefix.clone();
        let pattern = feed::pattern(&format!("{store_prefix}{prefix}"));
        let mut names: Vec<String> = Vec::new();
        let mut cursor: u64 = 0;
        loop {
            let pattern = pattern.clone();
            let (next, keys): (u64, Vec<Vec<u8>>) = self
                .inner
                .conn
                .run("list", |mut c| async move {
                    redis::cmd("SCAN")
                        .arg(cursor)
                        .arg("MATCH")
                        .arg(&pattern)
                        .arg("COUNT")
                        .arg(1000)
                        .query_async(&mut c)
                        .await
                })
                .await?;
            for key in keys {
                // The data-set marker is the bare prefix: not a group.
                if let Some(name) = std::str::from_utf8(&key)
                    .ok()
                    .and_then(|k| k.strip_prefix(store_prefix.as_str()))
                    .filter(|n| !n.is_empty())
                {
                    names.push(name.to_owned());
                }
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
        names.sort();
        names.dedup();
        let groups: Vec<GroupName> = names
            .into_iter()
            .filter_map(|n| GroupName::new(n).ok())
            .collect();
        let records = self.read_many(&groups).await?;
        Ok(Listed::from_reads(groups, records))
    }

    fn describe(&self) -> String {
        self.options().describe()
    }

    fn running(&self) -> Running<'_> {
        // One script call's worth: a renewal round of thousands of groups goes
        // out in a call or two.
        Running::new(MAX_KEYS, &self.inner.engine)
    }
}

#[async_trait]
impl LeaseStore for RedisStore {
    async fn compare_and_swap(
        &self,
        group: &GroupName,
        expected: Option<Version>,
        record: &LeaseRecord,
    ) -> Result<CasOutcome, StoreError> {
        tenure::store::compare_and_swap_as_batch(self, group, expected, record).await
    }

    /// One script call per 4096 requests, each compare-and-swap on its own
    /// and in order (a later request for a group sees what an earlier one
    /// wrote), each applied write published with its record to whoever subscribes.
    async fn compare_and_swap_many(&self, requests: &[CasRequest]) -> BatchResult<CasOutcome> {
        chunked(requests, |piece| self.cas_chunk(piece)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_are_written_whole() {
        let mut buf = [0u8; 20];
        assert_eq!(decimal(0, &mut buf), b"0");
        assert_eq!(
            decimal(1_700_000_000_000_001, &mut buf),
            b"1700000000000001"
        );
        assert_eq!(decimal(u64::MAX, &mut buf), u64::MAX.to_string().as_bytes());
    }
}
