//! The store: one item per group, compare-and-swap by a conditional
//! `UpdateItem` on the item's version, strongly consistent reads.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use aws_smithy_runtime_api::http::Response;
use tenure::store::concurrent::InFlight;
use tenure::store::Running;
use tenure::store::{BatchResult, CasOutcome, Listed};
use tenure::{
    EngineSlot, GroupName, LeaseRecord, LeaseStore, LeaseView, StoreError, Version, Versioned,
};

use crate::aws::{self, AwsAccess};
use crate::batch::{self, BatchGetError};
use crate::error::{self, classify, DynamoDbStoreError, Failure, Target};
use crate::item::{self, KEY};
use crate::options::{DynamoDbOptions, DEFAULT_THROTTLE_BUDGET};
use crate::retry::Throttle;
use crate::table::{self, Found};

/// Most requests of a store handle's batches in flight at once: each is an
/// HTTP request on a connection of its own, so this bounds the connections
/// whatever the number of groups, and at a few milliseconds per request
/// still carries thousands of renewals a second.
const IN_FLIGHT: usize = 64;

/// The operations one batch call takes (see
/// [`Running::batch_size`]): the engine's default batch.
const BATCH_SIZE: usize = 2048;

/// A lease store on a DynamoDB table. Cheap to clone; clones share one SDK
/// client and its connection pool, and the engine that runs every group
/// elected through them.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use tenure_dynamodb::DynamoDbStore;
/// // Region and credentials from the standard AWS chain; the table must exist.
/// let store = DynamoDbStore::connect("dynamodb://tenure_leases").await?;
/// let elector = tenure::Elector::builder(store, "shard-cache").start()?;
/// # let _ = elector; Ok(()) }
/// ```
#[derive(Clone)]
pub struct DynamoDbStore {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    target: Target,
    throttle: Throttle,
    describe: String,
    in_flight: InFlight,
    engine: EngineSlot,
    /// The credentials may not call `BatchGetItem`: batched reads are
    /// single reads in flight together.
    batch_get_denied: AtomicBool,
}

impl Inner {
    /// Sends a request without a condition (`what` names it in errors),
    /// again after a back-off while DynamoDB throttles it: its output, or
    /// its failure as a [`StoreError`].
    async fn unconditional<T, E, Fut>(
        &self,
        what: &'static str,
        send: impl Fn() -> Fut,
    ) -> Result<T, StoreError>
    where
        Fut: std::future::Future<Output = Result<T, SdkError<E, Response>>>,
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        self.throttle
            .run(what, || async {
                send().await.map_err(|e| classify(e, &self.target, what))
            })
            .await
            .map_err(|f| store_error(f, what, &self.target))
    }
}

impl std::fmt::Debug for DynamoDbStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamoDbStore")
            .field("store", &self.inner.describe)
            .finish()
    }
}

impl DynamoDbStore {
    /// Connects to the table named by a `dynamodb://TABLE?…` URL (see
    /// [`DynamoDbOptions`]), checks that it exists with tenure's key schema
    /// (or creates it with `create=true`), and fails with a message naming
    /// the fix if it is missing, has another key schema, or the credentials
    /// are refused.
    pub async fn connect(url: &str) -> Result<Self, DynamoDbStoreError> {
        Self::connect_with(DynamoDbOptions::from_url(url)?).await
    }

    /// Connects with options built in code.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), tenure_dynamodb::DynamoDbStoreError> {
    /// use tenure_dynamodb::{DynamoDbOptions, DynamoDbStore};
    /// let store = DynamoDbStore::connect_with(
    ///     DynamoDbOptions::new("tenure_leases")?
    ///         .region("local")
    ///         .endpoint("http://127.0.0.1:8000")
    ///         .static_credentials("local", "local")
    ///         .create_if_missing(true),
    /// )
    /// .await?;
    /// # let _ = store; Ok(()) }
    /// ```
    pub async fn connect_with(options: DynamoDbOptions) -> Result<Self, DynamoDbStoreError> {
        options
            .check()
            .map_err(|why| DynamoDbStoreError::InvalidUrl {
                store: "DynamoDB store",
                url: options.redacted_url(),
                reason: why,
            })?;
        let client = build_client(&options).await?;
        let region = client.config().region().map(|r| r.to_string());
        let target = Target::new(
            &options.table,
            region.as_deref(),
            options.endpoint.as_deref(),
        );
        let store = DynamoDbStore::assemble(
            client,
            target,
            options.throttle_budget,
            options.redacted_url(),
        );
        if options.create_if_missing {
            store.create_table_if_missing().await?;
        } else {
            store.check_table().await?;
        }
        Ok(store)
    }

    /// A store on an SDK client you configured yourself (a shared
    /// `SdkConfig`, your own retry or timeout settings, an assumed role).
    /// Nothing is checked until the first operation; call
    /// [`check_table`](DynamoDbStore::check_table) to check at once.
    ///
    /// The client's own retries should stay off or minimal: the store
    /// retries throttling itself and must see every other failure (see the
    /// crate docs).
    pub fn from_client(
        client: Client,
        table: impl Into<String>,
    ) -> Result<Self, DynamoDbStoreError> {
        let options = DynamoDbOptions::new(table)?;
        let region = client.config().region().map(|r| r.to_string());
        let target = Target::new(&options.table, region.as_deref(), None);
        let describe = match &region {
            Some(r) => format!("dynamodb://{}?region={r}", options.table),
            None => format!("dynamodb://{}", options.table),
        };
        Ok(DynamoDbStore::assemble(
            client,
            target,
            DEFAULT_THROTTLE_BUDGET,
            describe,
        ))
    }

    fn assemble(client: Client, target: Target, budget: Duration, describe: String) -> Self {
        let throttle = Throttle {
            table: target.table.clone(),
            budget,
        };
        DynamoDbStore {
            inner: Arc::new(Inner {
                client,
                target,
                throttle,
                describe,
                in_flight: InFlight::new(IN_FLIGHT),
                engine: EngineSlot::new(),
                batch_get_denied: AtomicBool::new(false),
            }),
        }
    }

    /// Creates the lease table if it is missing: hash key `group_name` (S),
    /// on-demand billing, so a first run needs no capacity planning. Waits
    /// until it is active. Returns whether this call created it; processes
    /// racing to create it all succeed. Needs `dynamodb:CreateTable` and
    /// `dynamodb:DescribeTable`.
    pub async fn create_table_if_missing(&self) -> Result<bool, StoreError> {
        let i = &self.inner;
        table::create_if_missing(&i.client, &i.target, &i.throttle).await
    }

    /// Checks that the table exists, is active and has tenure's key schema.
    /// Fails with [`StoreError::Misconfigured`] naming the fix otherwise.
    /// Credentials without `dynamodb:DescribeTable` skip the check (with a
    /// log line): the lease operations do not need that permission.
    pub async fn check_table(&self) -> Result<(), StoreError> {
        let i = &self.inner;
        match table::inspect(&i.client, &i.target, &i.throttle).await? {
            Found::Ready | Found::NotAllowed => Ok(()),
            Found::Creating => Err(StoreError::Unavailable {
                message: format!(
                    "DynamoDB table {} {} is still being created: retry in a few seconds",
                    i.target.table, i.target.place
                ),
                source: None,
            }),
            Found::Missing => Err(StoreError::Misconfigured {
                message: error::missing_table(&i.target, "DescribeTable found no such table"),
                source: None,
            }),
        }
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.inner.target.table
    }

    /// The SDK client, for the application's own items (a fenced write of
    /// leader-only work, say) on the same connections.
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    fn key(group: &GroupName) -> AttributeValue {
        AttributeValue::S(group.as_str().to_owned())
    }

    /// Reads up to 100 groups in one `BatchGetItem`, or one by one if the
    /// credentials may not batch.
    async fn read_part(&self, part: &[GroupName]) -> BatchResult<Option<Versioned>> {
        let i = &self.inner;
        if !i.batch_get_denied.load(Ordering::Relaxed) {
            match batch::read(&i.client, &i.target, &i.throttle, part).await {
                Ok(results) => return Ok(results),
                Err(BatchGetError::Failed(e)) => return Err(e),
                Err(BatchGetError::NotAllowed(e)) => {
                    if !i.batch_get_denied.swap(true, Ordering::Relaxed) {
                        tracing::warn!(
                            error = %e,
                            "grant dynamodb:BatchGetItem on the table to read many groups in one request; \
                             reading them one by one meanwhile"
                        );
                    }
                }
            }
        }
        let mut out = Vec::with_capacity(part.len());
        for group in part {
            out.push(self.read(group).await);
        }
        Ok(out)
    }
}

/// An SDK client on rustls (ring), with the SDK's retries off (see
/// retry.rs: throttling is retried by the store).
async fn build_client(options: &DynamoDbOptions) -> Result<Client, DynamoDbStoreError> {
    let access = AwsAccess {
        region: options.region.as_deref(),
        endpoint: options.endpoint.as_deref(),
        profile: options.profile.as_deref(),
        credentials: options.credentials.as_ref(),
        ca: options.ca.as_ref().map(|(o, p)| (*o, p.as_path())),
    };
    let config = aws::sdk_config(access, "tenure-dynamodb-static").await?;
    if config.region().is_none() {
        return Err(DynamoDbStoreError::InvalidUrl {
            store: "DynamoDB store",
            url: options.redacted_url(),
            reason:
                "no AWS region: add region= to the store URL, or set AWS_REGION (or a region in \
                     the AWS profile)"
                    .into(),
        });
    }
    Ok(Client::new(&config))
}

pub(crate) fn store_error(f: Failure, what: &str, target: &Target) -> StoreError {
    match f {
        Failure::Other(e) | Failure::Throttled(e) => e,
        // Only conditional writes have conditions.
        Failure::ConditionFailed => StoreError::Unavailable {
            message: format!(
                "DynamoDB {} reported a failed condition for the {what} on table {}, which has none",
                target.place, target.table
            ),
            source: None,
        },
    }
}

#[async_trait]
impl LeaseView for DynamoDbStore {
    async fn read(&self, group: &GroupName) -> Result<Option<Versioned>, StoreError> {
        let i = &self.inner;
        let key = Self::key(group);
        let out = i
            .unconditional("read", || {
                i.client
                    .get_item()
                    .table_name(&i.target.table)
                    .key(KEY, key.clone())
                    // A lease read must see the latest write: an eventually
                    // consistent read could show a version already replaced,
                    // and the challenger would wait on a stale record.
                    .consistent_read(true)
                    .send()
            })
            .await?;
        let Some(found) = out.item else {
            return Ok(None);
        };
        item::decode(&found)
            .map(Some)
            .map_err(|source| StoreError::Record {
                group: group.clone(),
                source,
            })
    }

    /// `BatchGetItem` with `ConsistentRead`, 100 keys per request, requests
    /// in flight together; unprocessed keys are asked for again with the
    /// throttling back-off. Credentials without `dynamodb:BatchGetItem`
    /// fall back to single `GetItem`s in flight together (logged once).
    async fn read_many(&self, groups: &[GroupName]) -> BatchResult<Option<Versioned>> {
        Ok(self
            .inner
            .in_flight
            .read_chunks(groups, batch::KEYS_PER_REQUEST, |part| self.read_part(part))
            .await)
    }

    /// A strongly consistent `Scan` of the table filtered on the group name
    /// (`begins_with`), page by page. A scan reads the whole table, so its
    /// cost grows with every group in it, not only the listed ones: a
    /// sharded set on DynamoDB is best given a table of its own.
    async fn list(&self, prefix: &str) -> Result<Vec<Listed>, StoreError> {
        let i = &self.inner;
        let mut out = Vec::new();
        let mut start: Option<std::collections::HashMap<String, AttributeValue>> = None;
        loop {
            let page = i
                .unconditional("list", || {
                    i.client
                        .scan()
                        .table_name(&i.target.table)
                        .consistent_read(true)
                        .filter_expression("begins_with(#g, :p)")
                        .expression_attribute_names("#g", KEY)
                        .expression_attribute_values(":p", AttributeValue::S(prefix.to_owned()))
                        .set_exclusive_start_key(start.clone())
                        .send()
                })
                .await?;
            for found in page.items() {
                let Some(AttributeValue::S(name)) = found.get(KEY) else {
                    continue;
                };
                // A key tenure would refuse was written by something else.
                let Ok(group) = GroupName::new(name.as_str()) else {
                    continue;
                };
                let record = item::decode(found).map_err(|source| StoreError::Record {
                    group: group.clone(),
                    source,
                });
                out.push(Listed { group, record });
            }
            match page.last_evaluated_key {
                Some(key) if !key.is_empty() => start = Some(key),
                _ => return Ok(out),
            }
        }
    }

    fn describe(&self) -> String {
        self.inner.describe.clone()
    }

    fn running(&self) -> Running<'_> {
        // A batch of writes is one conditional `UpdateItem` per request,
        // never several groups in one `TransactWriteItems` (all-or-nothing:
        // one group's conflict would undo the others' renewals). They go out
        // together, at most 64 at once per handle.
        Running::new(BATCH_SIZE, &self.inner.engine).bounded_by(&self.inner.in_flight)
    }
}

#[async_trait]
impl LeaseStore for DynamoDbStore {
    async fn compare_and_swap(
        &self,
        group: &GroupName,
        expected: Option<Version>,
        record: &LeaseRecord,
    ) -> Result<CasOutcome, StoreError> {
        let i = &self.inner;
        // Never write an item that reads back as corrupt.
        record.check().map_err(|e| StoreError::Misconfigured {
            message: format!("refusing to write an invalid lease record for group {group}: {e}"),
            source: None,
        })?;
        let Some(w) = item::write(expected, record) else {
            return Ok(CasOutcome::Conflict);
        };
        let key = Self::key(group);
        i.throttle
            .run("write", || async {
                let sent = i
                    .client
                    .update_item()
                    .table_name(&i.target.table)
                    .key(KEY, key.clone())
                    .update_expression(&w.update)
                    .condition_expression(&w.condition)
                    .set_expression_attribute_names(Some(w.names.clone()))
                    .set_expression_attribute_values(Some(w.values.clone()))
                    .send()
                    .await;
                match sent {
                    Ok(_) => Ok(CasOutcome::Applied(w.next)),
                    Err(e) => match classify(e, &i.target, "compare-and-swap") {
                        Failure::ConditionFailed => Ok(CasOutcome::Conflict),
                        other => Err(other),
                    },
                }
            })
            .await
            .map_err(|f| store_error(f, "compare-and-swap", &i.target))
    }
}
