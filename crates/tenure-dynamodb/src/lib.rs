//! A DynamoDB lease store for [tenure]: kinsumer's conditional-write
//! lease, kept where it works and fixed where it did not.
//!
//! kinsumer's leader lease is one item written by a conditional `PutItem`
//! (`ID = :ID OR attribute_not_exists(ID) OR LastUpdate <= :cutoff`) and
//! released on stop by `REMOVE ID`. This crate keeps the item, the
//! conditional write and the deregistration, and fixes two things:
//!
//! * **No cross-host clock comparison.** kinsumer's `LastUpdate <= :cutoff`
//!   compares the writer's wall clock with the challenger's. Here the
//!   condition is only the item's version; when a challenger may take over
//!   is decided by tenure's timing model (the record observed unchanged for
//!   `term × (1 + drift)` on the challenger's own monotonic clock, or, if a
//!   skew bound is configured, the record's wall-clock expiry more than
//!   that bound in the past). See [`tenure::config`].
//! * **A fencing token.** Every term carries a token, raised with the change
//!   of holder in the same conditional write, kept by renewals and by
//!   release, so work can pass it to what it writes and a deposed leader's
//!   late writes are refused (see the example below).
//!
//! # The item
//!
//! One item per group, in a table whose only key is the hash key
//! `group_name` (S). Every field of the [`LeaseRecord`](tenure::LeaseRecord)
//! is an attribute of its own, so the console shows who leads:
//!
//! | attribute | type | meaning |
//! |---|---|---|
//! | `group_name` | S | the group, verbatim (hash key) |
//! | `tenure_format` | N | item format, 1; its presence marks the item as tenure's |
//! | `version` | N | 1 on the first write, +1 on every write; every write is conditioned on it |
//! | `holder` | S | the leader's candidate id; **absent** while released |
//! | `incarnation` | N | the leader's elector instance (random per process); absent while released |
//! | `token` | N | fencing token: raised on every change of holder, kept by renewal and release |
//! | `term_ms` | N | the term the holder promised to respect |
//! | `renewed_at_ms` | N | the holder's wall clock when it sent the write (Unix ms) |
//! | `expires_at_ms` | N | `renewed_at_ms + term_ms` |
//! | `metadata` | S | what the leader publishes, a JSON object of strings (`{"address":"10.0.0.7:8080"}`) |
//! | `renewed_at`, `expires_at` | S | the same instants as RFC 3339 text, for people; never read back |
//!
//! The names are in [`attributes`]. Other attributes (a TTL, a note) are
//! left alone and ignored. An item without `tenure_format` reads as
//! [`RecordError::Foreign`](tenure::RecordError::Foreign), one with a newer
//! format as [`TooNew`](tenure::RecordError::TooNew), one with missing,
//! mistyped or contradicting attributes as
//! [`Corrupt`](tenure::RecordError::Corrupt); the elector never writes over
//! such an item. Never delete a lease item: the token would start again
//! from one. To retire a group, release it.
//!
//! Edit an item by hand only together with `version` + 1, so that every
//! writer holding the old version is refused. To take the lease from a live
//! leader without two terms overlapping, write a holder of your own:
//! `holder` = `operator`, `incarnation` = 0, `token` + 1, `version` + 1 and
//! `renewed_at_ms` / `expires_at_ms` of now and now + `term_ms`. The leader's
//! next renewal is refused and it steps down; candidates take over once
//! that record has stood unchanged for its term, by which time the old
//! leader's term is over. Removing `holder` instead frees the lease at
//! once, but the old leader learns of it only at its next renewal (up to
//! term / 3 later), and until then only the fencing token tells the two
//! leaders apart.
//!
//! # The writes
//!
//! Every write is one `UpdateItem` that `SET`s every attribute and the next
//! version under the condition `version = :expected AND tenure_format <= 1`
//! (the format clause keeps a guessed version from overwriting a foreign or
//! newer item; for a group's first write the condition is
//! `attribute_not_exists(group_name)`); a refused condition is a
//! [`CasOutcome::Conflict`](tenure::store::CasOutcome::Conflict). A takeover sets
//! the new holder and the raised token in that one conditional write. A
//! release is kinsumer's deregistration: `REMOVE holder, incarnation` under
//! the version condition, which pins the holder being removed, keeping the
//! token; the next candidate takes it at its next poll without waiting for
//! the term to run out. Reads are `GetItem` with `ConsistentRead`, so a
//! challenger never waits on a record that was already replaced.
//!
//! # Many groups
//!
//! Electors built from clones of one [`DynamoDbStore`] share one engine,
//! which batches their operations. `TransactWriteItems` is all-or-nothing
//! (one group's conflict would undo the others' renewals), so a batch of
//! writes is the conditional `UpdateItem`s above in flight together, at
//! most 64 at once per store handle (so at most that many connections),
//! several writes to one group one after another in order. A batch of
//! reads is `BatchGetItem` with `ConsistentRead`, 100 keys per request;
//! keys DynamoDB leaves unprocessed are asked for again with the
//! throttling back-off below, and those still unread when the budget runs
//! out fail alone. DynamoDB has no change feed, so waiting candidates
//! poll; the engine pulls the polls of all its groups due within half a
//! poll interval into one batched read, so followers make about one
//! batched read per poll interval, whatever the number of groups.
//!
//! # Connecting
//!
//! Region, credentials and endpoint come through the standard AWS chain
//! (environment, profile, SSO, web identity, container and instance roles),
//! or from the URL ([`DynamoDbOptions`]). TLS is rustls with ring, never
//! OpenSSL, trusting the platform's roots and, with `ca=`, a private
//! CA. A connection gets 3 s, a request 10 s; an elector gives up on an
//! operation sooner, at its own deadline.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use tenure_dynamodb::DynamoDbStore;
//! // AWS: region and credentials from the environment or instance role.
//! let store = DynamoDbStore::connect("dynamodb://tenure_leases?region=eu-west-1").await?;
//! // A local server (dynalite, DynamoDB Local) accepts any keys; create the
//! // table on first use.
//! let local = DynamoDbStore::connect(
//!     "dynamodb://tenure_leases?region=local&endpoint=http://127.0.0.1:8000\
//!      &access_key_id=local&secret_access_key=local&create=true",
//! )
//! .await?;
//! # let _ = (store, local); Ok(()) }
//! ```
//!
//! Secret keys and session tokens never appear in logs, errors or
//! [`describe()`](tenure::LeaseView::describe); of an access key id only
//! the last four characters are shown.
//!
//! # The table and its permissions
//!
//! [`DynamoDbStore::connect`] checks with `DescribeTable` that the table
//! exists, is active and has the key schema above, and fails with
//! [`StoreError::Misconfigured`](tenure::StoreError::Misconfigured) naming
//! the fix otherwise. With `create=true` (or
//! [`DynamoDbStore::create_table_if_missing`]) it creates the table with
//! on-demand billing, so a first run needs no capacity planning. The IAM
//! policy needs `dynamodb:GetItem`, `dynamodb:BatchGetItem` and
//! `dynamodb:UpdateItem` on the table (without `BatchGetItem`, reads of
//! many groups fall back to one `GetItem` each, with a warning);
//! `dynamodb:DescribeTable` lets connecting check it (without it the check
//! is skipped with a log line), and `dynamodb:CreateTable` is needed only
//! for `create=true`. Refused credentials, missing permissions, a host
//! clock too far off to sign, a missing table and a wrong key schema each
//! produce their own message.
//!
//! # Throttling
//!
//! `ProvisionedThroughputExceededException`, `ThrottlingException` and
//! `RequestLimitExceeded` are retried inside the operation with jittered
//! exponential back-off (25 ms doubling to 800 ms), for at most the
//! throttle budget (5 s by default, `throttle_budget=` in the URL). The
//! elector drops an operation at its own deadline (term / 4), so a
//! throttled renewal never outlives the term: the leader steps down before
//! its deadline as for any store failure. A throttled request was not
//! carried out, so retrying it can never apply a write twice, and no retry
//! can make a second leader. Each throttled request counts in
//! `tenure_dynamodb_throttled_total{table, op}`, each operation that gave
//! up in `tenure_dynamodb_throttle_exhausted_total{table, op}` (see
//! [`retry`]). The SDK's own retries are off: resending a conditional
//! write after a lost reply would turn "applied" into a false conflict.
//!
//! # What it costs
//!
//! Requests per hour for one group, computed from
//! `tenure::Config::new(term).validate()` by [`cost::comparison_table`]
//! (print it with `cargo run -p tenure-dynamodb --example cost`). Each
//! request is one capacity unit while the item is under 1 KB (writes) or
//! 4 KB (consistent reads), which it is unless the metadata is large.
//!
//! | lease | leader writes / h | waiting candidate reads / h | per month (leader writes, candidate reads) | crash failover |
//! |---|---:|---:|---:|---:|
//! | tenure, term 10s | 1080 | 1200 (1029–1440) | 788400, 876000 | ≤ 13.7 s |
//! | tenure, term 5m | 36 | 40 (34–48) | 26280, 29200 | ≈ 6.9 min |
//! | kinsumer, leaderActionFrequency 1m | 60 | 0 | 43800, 0 | ≈ 6.0 min |
//!
//! At the default term (renew every term / 3, candidates poll every
//! term / 4 plus up to term / 10 of jitter) a leader makes 18 times
//! kinsumer's lease writes and each waiting candidate reads 20 times a
//! minute, in exchange for failover in seconds instead of minutes. At
//! on-demand list prices of the time of writing (us-east-1: $0.625 per
//! million writes, $0.125 per million reads) that is about $0.49 a month for
//! the leader and $0.11 per waiting candidate; check current prices. A
//! longer term buys the cost down linearly: at kinsumer's own lease age of
//! five minutes a tenure leader writes 36 times an hour against kinsumer's
//! 60, and each waiting candidate reads 40 times. kinsumer's figures assume
//! its defaults (`leaderActionFrequency` = `shardCheckFrequency` = 1 min, a
//! lease stale after 5 × `leaderActionFrequency`): only the client first in
//! its clients table calls `registerLeadership`, once a minute whether or
//! not it leads; the others never read the lease but write their row and
//! scan the clients table once a minute, which this table leaves out (see
//! [`cost::Cost::kinsumer`]).
//!
//! # Leader-only duties, as in kinsumer
//!
//! kinsumer's leader refreshes a shard cache every `leaderActionFrequency`.
//! With tenure that is [`Elector::run_periodic_while_leader`]; the write is
//! fenced by the term's token, so a leader that was deposed while paused
//! cannot overwrite what its successor wrote:
//!
//! [`Elector::run_periodic_while_leader`]: tenure::Elector::run_periodic_while_leader
//!
//! ```no_run
//! use std::time::Duration;
//! use tenure::{Elector, Term};
//! use tenure_dynamodb::aws_sdk_dynamodb::{self, types::AttributeValue};
//! use tenure_dynamodb::DynamoDbStore;
//!
//! /// kinsumer's `performLeaderActions`, fenced: write the shard cache only
//! /// if no newer leader has written it.
//! async fn refresh_shard_cache(
//!     client: &aws_sdk_dynamodb::Client,
//!     term: &Term,
//! ) -> Result<(), aws_sdk_dynamodb::Error> {
//!     let shard_ids = list_shards().await;
//!     if shard_ids.is_empty() {
//!         return Ok(()); // kinsumer keeps the old cache too
//!     }
//!     let token = AttributeValue::N(term.token().to_string());
//!     client
//!         .put_item()
//!         .table_name("kinsumer_metadata")
//!         .item("Key", AttributeValue::S("ShardCache".into()))
//!         .item("ShardIDs", AttributeValue::Ss(shard_ids))
//!         .item("FenceToken", token.clone())
//!         .condition_expression("attribute_not_exists(FenceToken) OR FenceToken <= :token")
//!         .expression_attribute_values(":token", token)
//!         .send()
//!         .await?;
//!     Ok(())
//! }
//!
//! # async fn list_shards() -> Vec<String> { vec!["shardId-000000000000".into()] }
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let store = DynamoDbStore::connect("dynamodb://tenure_leases?create=true").await?;
//! let client = store.client().clone();
//! let elector = Elector::builder(store, "kinsumer-shard-cache").start()?;
//! // Runs at once on election, then every minute while leading; a failed
//! // run (a fenced-out write, say) is logged and counted, not fatal.
//! elector
//!     .run_periodic_while_leader(Duration::from_secs(60), |term| {
//!         let client = client.clone();
//!         async move { refresh_shard_cache(&client, &term).await }
//!     })
//!     .await;
//! # Ok(()) }
//! ```

pub mod aws;
mod batch;
pub mod cost;
mod error;
mod item;
mod options;
pub mod retry;
mod store;
mod table;

pub use error::DynamoDbStoreError;
pub use options::{DynamoDbOptions, DEFAULT_THROTTLE_BUDGET};
pub use store::DynamoDbStore;

/// The SDK this crate is built on, for [`DynamoDbStore::from_client`] and
/// the application's own requests.
pub use aws_sdk_dynamodb;

/// The attribute names of a lease item, and its format version.
pub mod attributes {
    pub use crate::item::{
        EXPIRES_AT_MS, EXPIRES_AT_TEXT, FORMAT, HOLDER, INCARNATION, ITEM_FORMAT, KEY, METADATA,
        RENEWED_AT_MS, RENEWED_AT_TEXT, TERM_MS, TOKEN, VERSION,
    };
}
