//! The [`LeaseStore`] on a bucket: GET to read, conditional PUT to
//! compare-and-swap, LIST to enumerate.

use std::sync::Arc;

use async_trait::async_trait;
use futures_util::StreamExt;
use object_store::path::Path;
use object_store::{
    Attribute, Attributes, GetOptions, ObjectStore, PutMode, PutOptions, PutPayload, UpdateVersion,
};
use tenure::store::concurrent::InFlight;
use tenure::store::LastSeen;
use tenure::store::Running;
use tenure::store::{CasOutcome, Listed};
use tenure::{
    EngineSlot, GroupName, LeaseRecord, LeaseStore, LeaseView, RecordError, StoreError, Version,
    Versioned, WallTime,
};

use crate::backend;
use crate::error::{classify, missing_bucket, BackendKind, BucketStoreError, Failure, Place};
use crate::key::Layout;
use crate::object::{self, MAX_OBJECT_BYTES};
use crate::options::BucketOptions;

/// Requests in flight at once per store handle (its clones share the
/// bound), so connections do not grow with the number of groups.
const IN_FLIGHT: usize = 64;

/// How many operations one batch call takes: a quarter of [`IN_FLIGHT`],
/// so that the engine's four batches in flight (its default) fill the
/// handle's requests in flight and no batch queues inside itself. A batch
/// is single requests, so a larger one saves no round trip; and the
/// engine gives up on a batch as a whole at its deadline, so a batch that
/// queued inside itself behind a slow server (moto's few hundred requests
/// a second) would time out whole, its finished requests with it, again
/// and again: a thousand groups in one batch of reads were never elected.
/// Small batches leave the queue to the engine, which times out only the
/// operations still waiting, and the others get through.
const BATCH_SIZE: usize = IN_FLIGHT / 4;

/// A lease store in an object-storage bucket: one object per group,
/// written with conditional puts. Cheap to clone; clones share one HTTP
/// client, the versions seen, and the engine that runs every group
/// elected through them.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use tenure_object_store::BucketStore;
/// // Region and credentials from the environment (AWS_REGION, AWS_ACCESS_KEY_ID …,
/// // or the instance role); the bucket must exist.
/// let store = BucketStore::connect("s3://my-bucket/tenure?region=eu-west-1").await?;
/// let elector = tenure::Elector::builder(store, "nightly-billing").start()?;
/// let term = elector.wait_for_leadership().await?;
/// println!("leading with fencing token {}", term.token());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct BucketStore {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<dyn ObjectStore>,
    layout: Layout,
    place: Place,
    /// The last object seen of each group: its version and what a
    /// conditional put must name to replace exactly it.
    seen: LastSeen<Seen>,
    in_flight: InFlight,
    engine: EngineSlot,
}

/// One object as seen: the version counter in it, and its ETag and
/// object version (GCS's generation) as the server reported them.
#[derive(Clone, Debug)]
struct Seen {
    version: u64,
    tag: UpdateVersion,
}

impl std::fmt::Debug for BucketStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BucketStore")
            .field("store", &self.inner.place.describe)
            .finish()
    }
}

/// What a GET found.
enum Fetched {
    Missing,
    Found {
        decoded: Result<(LeaseRecord, Version), RecordError>,
        tag: UpdateVersion,
    },
}

impl BucketStore {
    /// Connects to the bucket named by an `s3://`, `gs://` or `az://` URL
    /// (see [`BucketOptions`]) and checks, with one LIST of the prefix,
    /// that the bucket exists and the credentials are accepted; fails with
    /// a message naming the fix otherwise.
    pub async fn connect(url: &str) -> Result<Self, BucketStoreError> {
        Self::connect_with(BucketOptions::from_url(url)?).await
    }

    /// Connects with options built in code.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), tenure_object_store::BucketStoreError> {
    /// use tenure_object_store::{BucketOptions, BucketStore};
    /// let store = BucketStore::connect_with(
    ///     BucketOptions::s3("leases")?
    ///         .prefix_path("prod/tenure")?
    ///         .region("us-east-1")
    ///         .endpoint("http://127.0.0.1:9000")
    ///         .static_credentials("test", "test", None),
    /// )
    /// .await?;
    /// # let _ = store; Ok(()) }
    /// ```
    pub async fn connect_with(options: BucketOptions) -> Result<Self, BucketStoreError> {
        let s = Self::open(options)?;
        s.check_bucket().await?;
        Ok(s)
    }

    /// Builds the client without sending anything (no bucket check): the
    /// first request is the first lease operation. For servers whose
    /// LIST misbehaves, or to connect before the bucket exists.
    pub fn open(options: BucketOptions) -> Result<Self, BucketStoreError> {
        options
            .check()
            .map_err(|why| BucketStoreError::InvalidUrl {
                store: "object store",
                url: options.redacted_url(),
                reason: why,
            })?;
        let place = Place {
            describe: options.redacted_url(),
            secrets: options.secrets(),
            timeout: options.timeout,
            kind: options.kind,
        };
        let store = backend::build(&options, &place)?;
        Ok(Self::assemble(store, options.layout.clone(), place))
    }

    /// A store on an `object_store` client you configured yourself,
    /// keeping the lease objects under `prefix`. Nothing is sent until the
    /// first operation; call [`check_bucket`](BucketStore::check_bucket)
    /// to check at once.
    ///
    /// The client must do conditional puts (`PutMode::Create` and
    /// `PutMode::Update`; on S3, `S3ConditionalPut::ETagMatch`, the
    /// default) and should not retry: a conditional put sent again after
    /// a lost reply comes back as a conflict with its own effect (see the
    /// crate docs).
    pub fn from_object_store(
        store: Arc<dyn ObjectStore>,
        kind: BackendKind,
        prefix: &str,
    ) -> Result<Self, BucketStoreError> {
        let layout = Layout::new(prefix).map_err(|why| BucketStoreError::InvalidUrl {
            store: "object store",
            url: store.to_string(),
            reason: why.to_owned(),
        })?;
        let place = Place {
            describe: format!("{store}/{}", layout.prefix()),
            secrets: Vec::new(),
            timeout: crate::options::DEFAULT_TIMEOUT,
            kind,
        };
        Ok(Self::assemble(store, layout, place))
    }

    fn assemble(store: Arc<dyn ObjectStore>, layout: Layout, place: Place) -> Self {
        BucketStore {
            inner: Arc::new(Inner {
                store,
                layout,
                place,
                seen: LastSeen::default(),
                in_flight: InFlight::new(IN_FLIGHT),
                engine: EngineSlot::new(),
            }),
        }
    }

    /// Checks that the bucket exists and the credentials may list the
    /// prefix, with one LIST request.
    pub async fn check_bucket(&self) -> Result<(), StoreError> {
        let i = &self.inner;
        let dir = i.layout.dir();
        let first = i.store.list(Some(&dir)).next().await;
        match first {
            None | Some(Ok(_)) => Ok(()),
            Some(Err(e)) => Err(match classify(e, "listing of the prefix", &i.place) {
                Failure::Store(e) => e,
                // A listing has no condition; a 404 is the bucket's.
                Failure::Missing | Failure::Conflict => {
                    missing_bucket("", "listing of the prefix", &i.place)
                }
            }),
        }
    }

    /// The object key of a group's lease, for inspecting it with the
    /// provider's tools (`aws s3 cp s3://BUCKET/KEY -`).
    pub fn object_key(&self, group: &GroupName) -> String {
        self.inner.layout.key(group).to_string()
    }

    /// The `object_store` client, for the application's own objects on
    /// the same connections.
    pub fn object_store(&self) -> &Arc<dyn ObjectStore> {
        &self.inner.store
    }

    /// GETs a group's object; a record too large to be a lease is refused
    /// before its body is read.
    async fn fetch(&self, group: &GroupName) -> Result<Fetched, StoreError> {
        let i = &self.inner;
        let path = i.layout.key(group);
        let what = || format!("read of {path}");
        let got = match i.store.get_opts(&path, GetOptions::default()).await {
            Ok(got) => got,
            Err(e) => {
                return match classify(e, &what(), &i.place) {
                    Failure::Missing => Ok(Fetched::Missing),
                    Failure::Store(e) => Err(e),
                    Failure::Conflict => Err(StoreError::Unavailable {
                        message: format!(
                            "{} reported a failed condition for the {}, which has none",
                            i.place.describe,
                            what()
                        ),
                        source: None,
                    }),
                };
            }
        };
        let tag = UpdateVersion {
            e_tag: got.meta.e_tag.clone(),
            version: got.meta.version.clone(),
        };
        if got.meta.size > MAX_OBJECT_BYTES {
            return Ok(Fetched::Found {
                decoded: Err(RecordError::Foreign {
                    detail: format!(
                        "an object of {} bytes (a lease is a few KiB at most)",
                        got.meta.size
                    ),
                }),
                tag,
            });
        }
        let bytes = match got.bytes().await {
            Ok(b) => b,
            Err(e) => {
                return Err(match classify(e, &what(), &i.place) {
                    Failure::Store(e) => e,
                    _ => StoreError::Unavailable {
                        message: format!("{}: the {} broke off", i.place.describe, what()),
                        source: None,
                    },
                })
            }
        };
        // A body longer than its announced size is not a lease either.
        let decoded = if bytes.len() as u64 > MAX_OBJECT_BYTES {
            Err(RecordError::Foreign {
                detail: format!("an object of {} bytes", bytes.len()),
            })
        } else {
            object::decode(&bytes)
        };
        Ok(Fetched::Found { decoded, tag })
    }

    /// The conditional put that replaces the object seen as `seen`.
    async fn put(
        &self,
        group: &GroupName,
        mode: PutMode,
        record: &LeaseRecord,
        version: u64,
    ) -> Result<CasOutcome, StoreError> {
        let i = &self.inner;
        let path: Path = i.layout.key(group);
        let mut attributes = Attributes::new();
        attributes.insert(Attribute::ContentType, "application/json".into());
        let opts = PutOptions {
            mode,
            attributes,
            ..PutOptions::default()
        };
        let body = PutPayload::from(object::encode(record, version));
        match i.store.put_opts(&path, body, opts).await {
            Ok(put) => {
                self.inner.seen.remember(
                    group,
                    Some(Seen {
                        version,
                        tag: UpdateVersion {
                            e_tag: put.e_tag,
                            version: put.version,
                        },
                    }),
                );
                Ok(CasOutcome::Applied(Version(version)))
            }
            Err(e) => match classify(e, &format!("conditional write of {path}"), &i.place) {
                Failure::Conflict | Failure::Missing => {
                    // Whatever is stored now is not what was seen.
                    self.inner.seen.remember(group, None);
                    Ok(CasOutcome::Conflict)
                }
                Failure::Store(e) => {
                    // The write may have been applied: what was seen may
                    // be gone.
                    self.inner.seen.remember(group, None);
                    Err(e)
                }
            },
        }
    }
}

#[async_trait]
impl LeaseView for BucketStore {
    /// One strongly consistent GET (S3, GCS and Azure Blob Storage all
    /// read their latest write).
    async fn read(&self, group: &GroupName) -> Result<Option<Versioned>, StoreError> {
        match self.fetch(group).await? {
            Fetched::Missing => {
                self.inner.seen.remember(group, None);
                Ok(None)
            }
            Fetched::Found { decoded, tag } => match decoded {
                Ok((record, version)) => {
                    self.inner.seen.remember(
                        group,
                        Some(Seen {
                            version: version.0,
                            tag,
                        }),
                    );
                    Ok(Some(Versioned { record, version }))
                }
                Err(source) => {
                    self.inner.seen.remember(group, None);
                    Err(StoreError::Record {
                        group: group.clone(),
                        source,
                    })
                }
            },
        }
    }

    /// A LIST of the keys from the prefix's encoding on (`start-after`,
    /// in the services' lexicographic order), stopping at the first key
    /// past it, then a GET of each (in flight together). A group named
    /// exactly `prefix` is read directly: `start-after` excludes it.
    async fn list(&self, prefix: &str) -> Result<Vec<Listed>, StoreError> {
        let i = &self.inner;
        let dir = i.layout.dir();
        let key_prefix = i.layout.key_prefix(prefix);
        let offset = Path::parse(&key_prefix).unwrap_or_else(|_| dir.clone());
        let mut groups = Vec::new();
        if let Ok(exact) = GroupName::new(prefix) {
            groups.push(exact);
        }
        let mut listing = i.store.list_with_offset(Some(&dir), &offset);
        while let Some(item) = listing.next().await {
            let meta = match item {
                Ok(m) => m,
                Err(e) => {
                    return Err(match classify(e, "listing of the prefix", &i.place) {
                        Failure::Store(e) => e,
                        _ => missing_bucket("", "listing of the prefix", &i.place),
                    })
                }
            };
            let key = meta.location.as_ref();
            if !key.starts_with(&key_prefix) {
                if key > key_prefix.as_str() {
                    // Keys come in order: none further on can match.
                    break;
                }
                continue;
            }
            if let Some(g) = i.layout.group_of(&meta.location) {
                if g.as_str() != prefix {
                    groups.push(g);
                }
            }
        }
        let read = self.read_many(&groups).await?;
        Ok(Listed::from_reads(groups, read))
    }

    fn describe(&self) -> String {
        self.inner.place.describe.clone()
    }

    fn running(&self) -> Running<'_> {
        // Batches are GETs and conditional PUTs in flight together, at most
        // 64 at once per handle.
        Running::new(BATCH_SIZE, &self.inner.engine).bounded_by(&self.inner.in_flight)
    }
}

#[async_trait]
impl LeaseStore for BucketStore {
    /// A PUT with `If-None-Match: *` (GCS: `x-goog-if-generation-match:
    /// 0`) to create, with `If-Match: <ETag>` (GCS: the generation) of
    /// the object that held version `expected` to replace. The ETag is the
    /// one this handle saw with that version; if it saw another, it reads
    /// first (one more round trip) and writes only if the object still
    /// holds `expected`.
    async fn compare_and_swap(
        &self,
        group: &GroupName,
        expected: Option<Version>,
        record: &LeaseRecord,
    ) -> Result<CasOutcome, StoreError> {
        // Never write an object that reads back as corrupt.
        record.check().map_err(|e| StoreError::Misconfigured {
            message: format!("refusing to write an invalid lease record for group {group}: {e}"),
            source: None,
        })?;
        let Some(Version(expected)) = expected else {
            let first = object::first_version(WallTime::now());
            return self.put(group, PutMode::Create, record, first).await;
        };
        let seen = match self.inner.seen.recall(group) {
            Some(s) if s.version == expected => s,
            _ => match self.fetch(group).await? {
                Fetched::Found {
                    decoded: Ok((_, Version(v))),
                    tag,
                } if v == expected => Seen { version: v, tag },
                // Missing, another version, or undecodable: never ours to
                // replace.
                _ => return Ok(CasOutcome::Conflict),
            },
        };
        if seen.tag.e_tag.is_none() && seen.tag.version.is_none() {
            return Err(StoreError::Misconfigured {
                message: format!(
                    "{} returned neither an ETag nor an object version for {}: conditional \
                     writes are impossible on it",
                    self.inner.place.describe,
                    self.object_key(group)
                ),
                source: None,
            });
        }
        let Some(next) = expected.checked_add(1) else {
            return Err(StoreError::Record {
                group: group.clone(),
                source: RecordError::Corrupt {
                    detail: "the version counter is at its maximum and cannot rise".into(),
                },
            });
        };
        self.put(group, PutMode::Update(seen.tag), record, next)
            .await
    }
}

impl BucketStore {
    /// Which API the bucket speaks.
    pub fn kind(&self) -> BackendKind {
        self.inner.place.kind
    }
}
