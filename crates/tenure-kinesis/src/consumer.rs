//! A Kinesis consumer on a sharded set: each shard held by one member at
//! a time, read from its fenced checkpoint, parents before children.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_kinesis::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_kinesis::types::ShardIteratorType;
use aws_sdk_kinesis::Client;
use tenure::shards::FinishError;
use tenure::{ElectorError, LeaseStore, Shards, ShardsBuilder, Term};

use crate::checkpoint::{CheckpointError, Checkpoints};
use crate::source::KinesisShards;

/// The default period of the catalog's `ListShards`.
pub const DEFAULT_REFRESH: Duration = Duration::from_secs(10);

/// The default wait after a `GetRecords` page that was empty.
pub const DEFAULT_IDLE: Duration = Duration::from_millis(250);

/// The shortest wait after an empty page [`idle`](KinesisConsumerBuilder::idle)
/// accepts.
pub const MIN_IDLE: Duration = Duration::from_millis(10);

/// The default most records asked for per `GetRecords` page.
pub const DEFAULT_BATCH: i32 = 1000;

/// The first and the longest back-off after throttling or an unreachable
/// service.
const BACKOFF_FIRST: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// One record of a `GetRecords` page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Its sequence number (decimal digits; compare with
    /// [`compare_sequences`](crate::checkpoint::compare_sequences)).
    pub sequence_number: String,
    /// Its partition key.
    pub partition_key: String,
    /// Its data.
    pub data: Vec<u8>,
}

/// An error that ends [`KinesisConsumer::run`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConsumerError {
    /// The handler failed on a page of a shard; the shard's term is
    /// resigned (its checkpoint was not moved past the page), every other
    /// shard's work is dropped.
    #[error("the handler failed on shard {shard:?}: {source}")]
    Handler {
        /// The shard.
        shard: String,
        /// What the handler returned.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The checkpoint table refused a request for good (not a stale
    /// write, which only ends the shard's work).
    #[error("checkpoint of shard {shard:?}: {source}")]
    Checkpoint {
        /// The shard.
        shard: String,
        /// What the table said.
        #[source]
        source: Box<CheckpointError>,
    },
    /// Kinesis refused a request for good (a missing stream or shard,
    /// access denied, an invalid argument).
    #[error(
        "Kinesis refused {operation} on shard {shard:?} of stream {stream:?} ({code}: {message})"
    )]
    Kinesis {
        /// The stream.
        stream: String,
        /// The shard.
        shard: String,
        /// The operation.
        operation: &'static str,
        /// The error code Kinesis sent.
        code: String,
        /// Its message.
        message: String,
    },
    /// The set's electors failed or could not start.
    #[error(transparent)]
    Elector(#[from] ElectorError),
}

/// Builds a [`KinesisConsumer`]; see [`KinesisConsumer::builder`].
pub struct KinesisConsumerBuilder {
    source: KinesisShards,
    /// The set's builder on the lease store, for the set's name.
    shards: Box<dyn FnOnce(String) -> ShardsBuilder + Send>,
    checkpoints: Checkpoints,
    set: Option<String>,
    member_id: Option<String>,
    term: Option<Duration>,
    refresh: Duration,
    idle: Duration,
    batch: i32,
}

impl std::fmt::Debug for KinesisConsumerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KinesisConsumerBuilder")
            .field("stream", &self.source.stream())
            .field("set", &self.set)
            .finish_non_exhaustive()
    }
}

impl KinesisConsumerBuilder {
    /// The sharded set's name in the lease store (default: the stream's
    /// name). Consumers of one stream with the same set share its shards;
    /// each set reads every record, and needs a checkpoint table of its
    /// own (a claim of another set's item is refused as
    /// [`OtherOwner`](crate::CheckpointError::OtherOwner)). A stream
    /// deleted and created again under the same name is a new stream whose
    /// shard ids start again at `shardId-000000000000`: give its consumers
    /// a new set and a new checkpoint table, or the old finished marks and
    /// checkpoints would say its shards were read.
    pub fn set(mut self, set: impl Into<String>) -> Self {
        self.set = Some(set.into());
        self
    }

    /// This member's id (default: tenure's, the host name and a suffix).
    pub fn member_id(mut self, id: impl Into<String>) -> Self {
        self.member_id = Some(id.into());
        self
    }

    /// The term of each shard's lease (see [`tenure::ShardsBuilder::term`]).
    pub fn term(mut self, term: Duration) -> Self {
        self.term = Some(term);
        self
    }

    /// How often the catalog's leader lists the stream's shards (default
    /// [`DEFAULT_REFRESH`]).
    pub fn refresh(mut self, refresh: Duration) -> Self {
        self.refresh = refresh;
        self
    }

    /// How long to wait after an empty page (default [`DEFAULT_IDLE`], at
    /// least [`MIN_IDLE`]).
    pub fn idle(mut self, idle: Duration) -> Self {
        // Never zero: an empty shard would be polled as fast as the
        // network allows, throttling every reader of it.
        self.idle = idle.max(MIN_IDLE);
        self
    }

    /// The most records per `GetRecords` page, 1 to 10,000 (default
    /// [`DEFAULT_BATCH`]).
    pub fn batch(mut self, records: i32) -> Self {
        self.batch = records.clamp(1, 10_000);
        self
    }

    /// Starts the set's member; nothing is read until
    /// [`run`](KinesisConsumer::run).
    pub fn start(self) -> Result<KinesisConsumer, ConsumerError> {
        let set = self.set.unwrap_or_else(|| self.source.stream().to_owned());
        // Claims carry the set's name: a second set on the same table is
        // refused instead of skipping what this one checkpointed.
        let checkpoints = match self.checkpoints.owner() {
            Some(_) => self.checkpoints,
            None => self.checkpoints.owned_by(set.clone()),
        };
        let mut b = (self.shards)(set).catalog(self.source.clone(), self.refresh);
        if let Some(id) = self.member_id {
            b = b.member_id(id);
        }
        if let Some(t) = self.term {
            b = b.term(t);
        }
        let shards = b.start()?;
        Ok(KinesisConsumer {
            inner: Arc::new(Inner {
                kinesis: self.source.client().clone(),
                stream: self.source.stream().to_owned(),
                shards,
                checkpoints,
                idle: self.idle,
                batch: self.batch,
            }),
        })
    }
}

struct Inner {
    kinesis: Client,
    stream: String,
    shards: Shards,
    checkpoints: Checkpoints,
    idle: Duration,
    batch: i32,
}

/// A Kinesis consumer: a member of a sharded set over the stream's shards
/// (a [`KinesisShards`] catalog), reading each shard it holds from its
/// checkpoint and handing every page to the handler.
///
/// For each shard it holds, under the shard's [`Term`]:
///
/// 1. [`claim`](Checkpoints::claim) the checkpoint with the term's token
///    (from then on a deposed holder's checkpoint is refused);
/// 2. `GetShardIterator` `AFTER_SEQUENCE_NUMBER` the checkpoint, or
///    `TRIM_HORIZON` without one;
/// 3. `GetRecords` page by page: the handler gets each non-empty page,
///    and when it returns `Ok` the last record's sequence number is
///    [`save`](Checkpoints::save)d under the term's token. A
///    [`Stale`](CheckpointError::Stale) refusal ends the shard's work (its
///    term was superseded);
/// 4. when a page has no `NextShardIterator`, the shard is closed and
///    read: [`finish`](Checkpoints::finish) in the table, then
///    [`Shards::mark_finished`], which lets its children be assigned.
///
/// A stale refusal of the claim or a save ends the term's work after a
/// pause of up to 5 s (repeated refusals in the log mean the checkpoints
/// carry tokens of another lease table, one recreated, say: their tokens
/// start again at 1).
///
/// Reading stops when the term is cancelled. An expired iterator is got
/// again from the last checkpoint; throttling and an unreachable service
/// back off (100 ms doubling to 5 s) and try again. Records are delivered
/// at least once: a page handled but not yet checkpointed when a term ends
/// is handled again by the next holder.
#[derive(Clone)]
pub struct KinesisConsumer {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for KinesisConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KinesisConsumer")
            .field("stream", &self.inner.stream)
            .field("member", &self.inner.shards.member_id())
            .finish_non_exhaustive()
    }
}

/// What ends the work of one shard's term.
enum Stop {
    /// Done for this term (cancelled, superseded, finished).
    Done,
    /// The whole run fails.
    Fail(ConsumerError),
}

impl KinesisConsumer {
    /// A consumer of the stream `source` lists, its leases in `store`
    /// (shared by every consumer of the stream), its checkpoints in
    /// `checkpoints`. The source is built from a `kinesis://` URL
    /// ([`KinesisShards::connect`]) or an SDK client
    /// ([`KinesisShards::from_client`]); its client also reads the records.
    pub fn builder(
        source: KinesisShards,
        store: impl LeaseStore,
        checkpoints: Checkpoints,
    ) -> KinesisConsumerBuilder {
        KinesisConsumerBuilder {
            source,
            shards: Box::new(move |set| Shards::builder(store, set)),
            checkpoints,
            set: None,
            member_id: None,
            term: None,
            refresh: DEFAULT_REFRESH,
            idle: DEFAULT_IDLE,
            batch: DEFAULT_BATCH,
        }
    }

    /// The set's member, for its shards, events and shutdown.
    pub fn shards(&self) -> &Shards {
        &self.inner.shards
    }

    /// The checkpoint table.
    pub fn checkpoints(&self) -> &Checkpoints {
        &self.inner.checkpoints
    }

    /// Leaves the set: every shard's work is told to stop, drained and
    /// released; [`run`](KinesisConsumer::run) then returns `Ok(())`.
    pub async fn shutdown(&self) {
        self.inner.shards.shutdown().await;
    }

    /// Reads every shard this member holds, calling `handler` with the
    /// shard id, a page of records and the shard's term, until the member
    /// stops ([`shutdown`](KinesisConsumer::shutdown)): then `Ok(())`.
    /// Fails if the handler fails, or the checkpoint table or Kinesis
    /// refuse a request for good; the consumer has then left the set
    /// (as by [`shutdown`](KinesisConsumer::shutdown)), so that the other
    /// consumers take its shards over instead of their leases being held
    /// with nobody reading.
    pub async fn run<H, Fut, E>(&self, handler: H) -> Result<(), ConsumerError>
    where
        H: Fn(String, Vec<Record>, Term) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Into<Box<dyn std::error::Error + Send + Sync>> + 'static,
    {
        let handler = Arc::new(handler);
        let inner = self.inner.clone();
        let result = self
            .inner
            .shards
            .run_per_shard(move |shard, term| {
                let (inner, handler) = (inner.clone(), handler.clone());
                async move {
                    match read_shard(&inner, &shard, &term, &*handler).await {
                        Stop::Done => Ok(()),
                        Stop::Fail(e) => Err(e),
                    }
                }
            })
            .await;
        if result.is_err() {
            self.shutdown().await;
        }
        result
    }
}

/// Sleeps `d`, or less if the term is cancelled first; `false` then.
async fn pause(term: &Term, d: Duration) -> bool {
    tokio::select! {
        () = tokio::time::sleep(d) => true,
        () = term.cancelled() => false,
    }
}

fn next_backoff(d: Duration) -> Duration {
    (d * 2).min(BACKOFF_MAX)
}

/// Runs a checkpoint operation until it succeeds, fails for good, or the
/// term is cancelled (`Err(Stop::Done)`); a stale refusal is `Stop::Done`.
async fn with_retry<T, F, Fut>(term: &Term, shard: &str, mut op: F) -> Result<T, Stop>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, CheckpointError>>,
{
    let mut backoff = BACKOFF_FIRST;
    loop {
        match op().await {
            Ok(v) => return Ok(v),
            Err(CheckpointError::Stale { stored_token, .. }) => {
                tracing::warn!(
                    shard,
                    token = term.token(),
                    stored_token,
                    "checkpoint refused as stale: the shard has a newer holder (if this repeats, \
                     the checkpoints carry tokens of another lease table: one recreated, say)"
                );
                // The term is superseded and ends soon; a pause keeps a
                // checkpoint table with tokens from elsewhere from making
                // this member take and resign the shard in a tight loop.
                pause(term, BACKOFF_MAX).await;
                return Err(Stop::Done);
            }
            Err(e) if e.is_transient() => {
                tracing::warn!(shard, error = %e, "checkpoint failed; trying again");
                if !pause(term, backoff).await {
                    return Err(Stop::Done);
                }
                backoff = next_backoff(backoff);
            }
            Err(source) => {
                return Err(Stop::Fail(ConsumerError::Checkpoint {
                    shard: shard.to_owned(),
                    source: Box::new(source),
                }))
            }
        }
    }
}

/// How a Kinesis call failed.
enum Failed {
    /// Try again after a back-off.
    Transient(String),
    /// The iterator expired: get another from the checkpoint.
    Expired,
    /// Fails the run.
    Fatal(ConsumerError),
}

fn sort_kinesis<E, R>(
    err: &SdkError<E, R>,
    stream: &str,
    shard: &str,
    operation: &'static str,
) -> Failed
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug,
{
    if !matches!(err, SdkError::ServiceError(_)) {
        return Failed::Transient(DisplayErrorContext(err).to_string());
    }
    match err.code().unwrap_or("") {
        "ExpiredIteratorException" => Failed::Expired,
        "ProvisionedThroughputExceededException"
        | "LimitExceededException"
        | "ThrottlingException"
        | "KMSThrottlingException"
        | "InternalFailure"
        | "ServiceUnavailable" => Failed::Transient(err.code().unwrap_or("").to_owned()),
        code => Failed::Fatal(ConsumerError::Kinesis {
            stream: stream.to_owned(),
            shard: shard.to_owned(),
            operation,
            code: if code.is_empty() {
                "no error code".into()
            } else {
                code.to_owned()
            },
            message: err.message().unwrap_or("").to_owned(),
        }),
    }
}

/// An iterator from the checkpoint `after` (or the shard's start).
async fn iterator(
    inner: &Inner,
    term: &Term,
    shard: &str,
    after: Option<&str>,
) -> Result<String, Stop> {
    let mut backoff = BACKOFF_FIRST;
    loop {
        let request = inner
            .kinesis
            .get_shard_iterator()
            .stream_name(&inner.stream)
            .shard_id(shard);
        let request = match after {
            Some(seq) => request
                .shard_iterator_type(ShardIteratorType::AfterSequenceNumber)
                .starting_sequence_number(seq),
            None => request.shard_iterator_type(ShardIteratorType::TrimHorizon),
        };
        let out = tokio::select! {
            out = request.send() => out,
            () = term.cancelled() => return Err(Stop::Done),
        };
        let failed = match out {
            Ok(out) => match out.shard_iterator() {
                Some(it) => return Ok(it.to_owned()),
                None => Failed::Transient("GetShardIterator returned no iterator".into()),
            },
            Err(e) => sort_kinesis(&e, &inner.stream, shard, "GetShardIterator"),
        };
        match failed {
            Failed::Fatal(e) => return Err(Stop::Fail(e)),
            Failed::Transient(why) => {
                tracing::warn!(shard, why, "GetShardIterator failed; backing off");
            }
            Failed::Expired => {}
        }
        if !pause(term, backoff).await {
            return Err(Stop::Done);
        }
        backoff = next_backoff(backoff);
    }
}

/// One term's work on `shard`: claim, read, hand over, checkpoint,
/// finish.
async fn read_shard<H, Fut, E>(inner: &Inner, shard: &str, term: &Term, handler: &H) -> Stop
where
    H: Fn(String, Vec<Record>, Term) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    match read(inner, shard, term, handler).await {
        Ok(()) | Err(Stop::Done) => Stop::Done,
        Err(fail) => fail,
    }
}

async fn read<H, Fut, E>(inner: &Inner, shard: &str, term: &Term, handler: &H) -> Result<(), Stop>
where
    H: Fn(String, Vec<Record>, Term) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let token = term.token();
    let cps = &inner.checkpoints;
    let claimed = with_retry(term, shard, || cps.claim(shard, token)).await?;
    if claimed.finished {
        return finished(inner, shard, term).await;
    }
    // The last sequence number checkpointed (or handled and about to be).
    let mut last = claimed.sequence;
    let mut it = iterator(inner, term, shard, last.as_deref()).await?;
    let mut backoff = BACKOFF_FIRST;
    loop {
        if term.is_cancelled() {
            return Err(Stop::Done);
        }
        let request = inner
            .kinesis
            .get_records()
            .shard_iterator(&it)
            .limit(inner.batch);
        let out = tokio::select! {
            out = request.send() => out,
            () = term.cancelled() => return Err(Stop::Done),
        };
        let page = match out {
            Ok(page) => page,
            Err(e) => match sort_kinesis(&e, &inner.stream, shard, "GetRecords") {
                Failed::Fatal(e) => return Err(Stop::Fail(e)),
                Failed::Expired => {
                    tracing::debug!(
                        shard,
                        "the iterator expired; getting another from the checkpoint"
                    );
                    it = iterator(inner, term, shard, last.as_deref()).await?;
                    continue;
                }
                Failed::Transient(why) => {
                    tracing::warn!(shard, why, "GetRecords failed; backing off");
                    if !pause(term, backoff).await {
                        return Err(Stop::Done);
                    }
                    backoff = next_backoff(backoff);
                    continue;
                }
            },
        };
        backoff = BACKOFF_FIRST;
        let records: Vec<Record> = page
            .records()
            .iter()
            .map(|r| Record {
                sequence_number: r.sequence_number().to_owned(),
                partition_key: r.partition_key().unwrap_or_default().to_owned(),
                data: r.data().as_ref().to_vec(),
            })
            .collect();
        if let Some(newest) = records.last().map(|r| r.sequence_number.clone()) {
            if term.is_cancelled() {
                return Err(Stop::Done);
            }
            handler(shard.to_owned(), records, term.clone())
                .await
                .map_err(|e| {
                    Stop::Fail(ConsumerError::Handler {
                        shard: shard.to_owned(),
                        source: e.into(),
                    })
                })?;
            with_retry(term, shard, || cps.save(shard, &newest, token)).await?;
            last = Some(newest);
        }
        match page.next_shard_iterator() {
            Some(next) if !next.is_empty() => {
                it = next.to_owned();
                if page.records().is_empty() && !pause(term, inner.idle).await {
                    return Err(Stop::Done);
                }
            }
            // The shard is closed and read to its end.
            _ => {
                with_retry(term, shard, || cps.finish(shard, token)).await?;
                return finished(inner, shard, term).await;
            }
        }
    }
}

/// The shard is read to its end: mark it finished in the set (its
/// children become ready), then wait for the term to be cancelled (the
/// catalog drops the shard and its holder releases it).
async fn finished(inner: &Inner, shard: &str, term: &Term) -> Result<(), Stop> {
    let mut backoff = BACKOFF_FIRST;
    loop {
        match inner.shards.mark_finished(shard, term).await {
            Ok(()) => break,
            Err(FinishError::NotHeld { .. }) => return Err(Stop::Done),
            Err(e) => {
                tracing::warn!(shard, error = %e, "marking the shard finished failed; trying again");
                if !pause(term, backoff).await {
                    return Err(Stop::Done);
                }
                backoff = next_backoff(backoff);
            }
        }
    }
    tracing::info!(shard, "shard read to its end and marked finished");
    term.cancelled().await;
    Ok(())
}
