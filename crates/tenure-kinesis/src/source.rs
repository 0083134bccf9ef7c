//! The stream's shards as a [`ShardSource`]: `ListShards`, paged.

use async_trait::async_trait;
use aws_sdk_kinesis::types::Shard;
use aws_sdk_kinesis::Client;
use tenure::shards::{ShardSource, SourceError, SourceShard};
use tenure_dynamodb::aws::{self, AwsAccess};

use crate::error::{classify, KinesisError};
use crate::options::{KinesisOptions, DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE};

/// A Kinesis stream's shards, listed for a sharded set's catalog.
///
/// Each listing is `ListShards`, paged with `NextToken` until the last
/// page, and each shard becomes a [`SourceShard`] named by its shard id
/// that waits for its parents (`ParentShardId` and, after a merge,
/// `AdjacentParentShardId`): a child of a split or a merge is assigned
/// only once its parents are finished
/// ([`Shards::mark_finished`](tenure::Shards::mark_finished)) and dropped
/// from the catalog. Closed shards stay listed until the stream's retention
/// period removes them; a parent Kinesis no longer lists is gone, and its
/// children are ready.
///
/// ```no_run
/// use std::time::Duration;
/// use tenure::{MemoryStore, Shards};
/// use tenure_kinesis::KinesisShards;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let source = KinesisShards::connect(
///     "kinesis://orders?region=us-east-1&endpoint=http://127.0.0.1:4567\
///      &access_key_id=local&secret_access_key=local",
/// )
/// .await?;
/// let shards = Shards::builder(MemoryStore::new(), "orders-consumers")
///     .member_id("host-a")
///     .catalog(source, Duration::from_secs(30))
///     .start()?;
/// shards
///     .run_per_shard(|shard, term| async move {
///         // Read `shard` from its checkpoint. When its iterator ends (no
///         // NextShardIterator), mark it finished so its children start:
///         // shards.mark_finished(&shard, &term).await
///         term.cancelled().await;
///         let _ = shard;
///         Ok::<(), std::io::Error>(())
///     })
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct KinesisShards {
    client: Client,
    stream: String,
    page_size: u32,
    /// Where the stream is, for messages: ` at ENDPOINT` (redacted) or
    /// empty.
    place: String,
}

/// Not derived: the SDK client's `Debug` prints the access key id of
/// its credentials.
impl std::fmt::Debug for KinesisShards {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KinesisShards")
            .field("stream", &self.stream)
            .field("page_size", &self.page_size)
            .field("place", &self.place)
            .finish_non_exhaustive()
    }
}

impl KinesisShards {
    /// Lists the stream a `kinesis://STREAM?…` URL names, with a client
    /// built from its options (see [`KinesisOptions`]). Nothing is sent
    /// yet: a missing stream shows at the first listing.
    pub async fn connect(url: &str) -> Result<Self, KinesisError> {
        Self::connect_with(KinesisOptions::from_url(url)?).await
    }

    /// [`connect`](KinesisShards::connect) with options set in code.
    pub async fn connect_with(options: KinesisOptions) -> Result<Self, KinesisError> {
        // The SDK's own retries are off (see tenure_dynamodb::aws): the
        // consumer backs off from throttling itself (its back-off is the
        // one documented and tested), and the catalog leader lists again at
        // its next retry.
        let access = AwsAccess {
            region: options.region.as_deref(),
            endpoint: options.endpoint.as_deref(),
            profile: options.profile.as_deref(),
            credentials: options.credentials.as_ref(),
            ca: None,
        };
        let config = aws::sdk_config(access, "tenure-kinesis-static")
            .await
            // Only a CA file can fail here, and none is given.
            .map_err(|e| KinesisError::Unavailable {
                stream: options.stream.clone(),
                place: String::new(),
                detail: e.to_string(),
            })?;
        if config.region().is_none() {
            return Err(KinesisError::NoRegion {
                stream: options.stream,
            });
        }
        let place = options
            .endpoint
            .as_deref()
            .map(|e| format!(" at {}", tenure::store::url::redact(e)))
            .unwrap_or_default();
        Ok(KinesisShards {
            client: Client::new(&config),
            stream: options.stream,
            page_size: options.page_size,
            place,
        })
    }

    /// Lists `stream` with a client built by the caller (its region,
    /// endpoint, credentials, retries and HTTP client as configured there).
    pub fn from_client(client: Client, stream: impl Into<String>) -> Self {
        KinesisShards {
            client,
            stream: stream.into(),
            page_size: DEFAULT_PAGE_SIZE,
            place: String::new(),
        }
    }

    /// Shards asked for per `ListShards` page, clamped to 1 to
    /// [`MAX_PAGE_SIZE`] (default [`DEFAULT_PAGE_SIZE`]).
    pub fn page_size(mut self, shards: u32) -> Self {
        self.page_size = shards.clamp(1, MAX_PAGE_SIZE);
        self
    }

    /// The stream listed.
    pub fn stream(&self) -> &str {
        &self.stream
    }

    /// The SDK client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Every shard of the stream now, open and closed, each with the
    /// parents it waits for, in the order Kinesis lists them.
    pub async fn list_shards(&self) -> Result<Vec<SourceShard>, KinesisError> {
        let max_results = i32::try_from(self.page_size).unwrap_or(i32::MAX);
        let mut shards = Vec::new();
        let mut next_token: Option<String> = None;
        let mut empty_pages = 0;
        loop {
            // With a NextToken, the stream name must not be sent: Kinesis
            // refuses the two together.
            let request = self.client.list_shards().max_results(max_results);
            let request = match next_token.take() {
                Some(token) => request.next_token(token),
                None => request.stream_name(&self.stream),
            };
            let page = request
                .send()
                .await
                .map_err(|e| classify(&e, &self.stream, &self.place))?;
            shards.extend(page.shards().iter().map(source_shard));
            empty_pages = if page.shards().is_empty() {
                empty_pages + 1
            } else {
                0
            };
            if shards.len() > MAX_LISTED_SHARDS || empty_pages > MAX_EMPTY_PAGES {
                return Err(KinesisError::Endless {
                    stream: self.stream.clone(),
                    place: self.place.clone(),
                    detail: format!(
                        "{} shards, the last {empty_pages} pages empty",
                        shards.len()
                    ),
                });
            }
            match page.next_token() {
                Some(token) if !token.is_empty() => next_token = Some(token.to_owned()),
                _ => return Ok(shards),
            }
        }
    }
}

/// The most shards a listing gathers: far beyond any stream (the default
/// quota is 500 per stream, 20,000 when raised), and a bound on what an
/// endpoint that pages for ever can make this process hold.
pub const MAX_LISTED_SHARDS: usize = 100_000;

/// Empty pages in a row, each with a `NextToken`, after which a listing
/// is given up.
const MAX_EMPTY_PAGES: u32 = 100;

/// A shard as the catalog takes it: its id, after its parents.
pub(crate) fn source_shard(shard: &Shard) -> SourceShard {
    let parents = [shard.parent_shard_id(), shard.adjacent_parent_shard_id()]
        .into_iter()
        .flatten()
        .filter(|p| !p.is_empty());
    SourceShard::new(shard.shard_id()).after(parents)
}

#[async_trait]
impl ShardSource for KinesisShards {
    async fn list(&self) -> Result<Vec<SourceShard>, SourceError> {
        Ok(self.list_shards().await?)
    }
}
