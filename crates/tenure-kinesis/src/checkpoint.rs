//! Checkpoints in DynamoDB, fenced by the shard's token.
//!
//! One item per shard in a table keyed by `shard` (a string):
//!
//! | attribute | type | meaning |
//! |---|---|---|
//! | `shard` | S | the shard id (the key) |
//! | `sequence` | S | the last processed sequence number, as Kinesis wrote it |
//! | `sequence_length` | N | its number of digits (sequence numbers compare by length, then as text) |
//! | `token` | N | the fencing token of the shard's term that wrote the item |
//! | `finished` | BOOL | the shard was read to its end |
//!
//! Every write is one conditional `UpdateItem`: it goes through only if
//! the item is missing or its token is not above the writer's, so the
//! checkpoint of a deposed holder (a lower token) is refused, and a
//! sequence never moves back.

use std::cmp::Ordering as CmpOrdering;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tenure_dynamodb::aws_sdk_dynamodb::error::{
    DisplayErrorContext, ProvideErrorMetadata, SdkError,
};
use tenure_dynamodb::aws_sdk_dynamodb::operation::update_item::UpdateItemOutput;
use tenure_dynamodb::aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType, ReturnValue,
    ReturnValuesOnConditionCheckFailure, ScalarAttributeType, TableStatus,
};
use tenure_dynamodb::aws_sdk_dynamodb::Client;

/// The key attribute: the shard id.
pub const SHARD: &str = "shard";
/// The last processed sequence number (S).
pub const SEQUENCE: &str = "sequence";
/// The number of digits of [`SEQUENCE`] (N).
pub const SEQUENCE_LENGTH: &str = "sequence_length";
/// The fencing token of the term that wrote the item (N).
pub const TOKEN: &str = "token";
/// Whether the shard was read to its end (BOOL).
pub const FINISHED: &str = "finished";
/// The consumer set whose claim wrote the item (S), for a handle made
/// with [`Checkpoints::owned_by`].
pub const OWNER: &str = "owner";

/// How long [`Checkpoints::create_table_if_missing`] waits for a new
/// table to become active.
const CREATE_WAIT: Duration = Duration::from_secs(120);

/// A shard's checkpoint as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    /// The shard id.
    pub shard: String,
    /// The last processed sequence number, or `None` before the first.
    pub sequence: Option<String>,
    /// The fencing token of the term that last wrote it.
    pub token: u64,
    /// Whether the shard was read to its end.
    pub finished: bool,
    /// The consumer set that claimed it, if claimed through a handle
    /// [`owned_by`](Checkpoints::owned_by) one.
    pub owner: Option<String>,
}

/// An error of [`Checkpoints`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// The item carries a higher token than the writer's: the writer's
    /// term of the shard was superseded, and its write was refused. The
    /// writer must stop working the shard.
    #[error(
        "checkpoint of shard {shard:?} refused: written under token {stored_token}, above this \
         term's {token} (the shard has a newer holder; stop reading it)"
    )]
    Stale {
        /// The shard.
        shard: String,
        /// The token of the refused write.
        token: u64,
        /// The token stored.
        stored_token: u64,
    },
    /// The write would move the checkpoint back (a lower sequence number
    /// under the same token): refused.
    #[error(
        "checkpoint of shard {shard:?} refused: sequence {sequence} is before the stored \
         {stored}; a checkpoint never moves back"
    )]
    Backwards {
        /// The shard.
        shard: String,
        /// The sequence number refused.
        sequence: String,
        /// The sequence number stored.
        stored: String,
    },
    /// The item was claimed by another consumer set: two sets (each reads
    /// every record of the stream) share one checkpoint table, and each
    /// would skip what the other checkpointed. Refused, never retried.
    #[error(
        "checkpoint table {table}: shard {shard:?} is claimed by the consumer set {owner:?}, not          {mine:?}: give each consumer set a checkpoint table of its own (or the same set name,          if they are one consumer)"
    )]
    OtherOwner {
        /// The table.
        table: String,
        /// The shard.
        shard: String,
        /// The set stored.
        owner: String,
        /// This handle's set.
        mine: String,
    },
    /// A sequence number that is not a non-empty string of decimal digits.
    #[error("invalid sequence number {sequence:?} for shard {shard:?}: Kinesis sequence numbers are decimal digits")]
    InvalidSequence {
        /// The shard.
        shard: String,
        /// What was given.
        sequence: String,
    },
    /// The stored item does not have the layout above (another program
    /// writes the table?).
    #[error("checkpoint table {table}: the item of shard {shard:?} is malformed ({reason}); use a table of its own for checkpoints")]
    Malformed {
        /// The table.
        table: String,
        /// The shard.
        shard: String,
        /// What is wrong.
        reason: String,
    },
    /// DynamoDB throttled the request, or could not be reached or did not
    /// answer; the write may or may not have happened. Trying again is
    /// safe (every write is conditional and idempotent).
    #[error("checkpoint table {table}: {operation} of shard {shard:?} failed for now: {detail}")]
    Unavailable {
        /// The table.
        table: String,
        /// The shard, or empty for table operations.
        shard: String,
        /// The operation.
        operation: &'static str,
        /// What the SDK reported.
        detail: String,
    },
    /// DynamoDB refused the request (access denied, a missing table, a
    /// validation error): waiting does not help.
    #[error(
        "checkpoint table {table}: {operation} of shard {shard:?} refused ({code}: {message}); \
         check that the table exists with hash key \"shard\" (S) and that the credentials may \
         read and update it"
    )]
    Refused {
        /// The table.
        table: String,
        /// The shard, or empty for table operations.
        shard: String,
        /// The operation.
        operation: &'static str,
        /// The error code DynamoDB sent.
        code: String,
        /// Its message.
        message: String,
    },
}

impl CheckpointError {
    /// Whether the same call may succeed later unchanged: throttling, an
    /// unreachable or slow endpoint.
    pub fn is_transient(&self) -> bool {
        matches!(self, CheckpointError::Unavailable { .. })
    }
}

/// The checkpoint table: fenced saves, loads and finish marks.
///
/// Cheap to clone; clones share the client and the count of stale
/// refusals. Build the client as for the lease store, for example
/// [`DynamoDbStore::client`](tenure_dynamodb::DynamoDbStore::client) of a
/// store opened from a `dynamodb://` URL (its SDK retries are off; every
/// checkpoint write is conditional, so retrying one is safe either way).
#[derive(Clone)]
pub struct Checkpoints {
    client: Client,
    table: String,
    stale: Arc<AtomicU64>,
    /// The consumer set this handle claims for, if any.
    owner: Option<String>,
}

/// Not derived: the SDK client's `Debug` prints the access key id of
/// its credentials.
impl std::fmt::Debug for Checkpoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpoints")
            .field("table", &self.table)
            .field("owner", &self.owner)
            .field("stale_refusals", &self.stale.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// Compares two sequence numbers: by length, then as text (they are
/// decimal strings of up to 128 digits without leading zeros).
pub fn compare_sequences(a: &str, b: &str) -> CmpOrdering {
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

type Item = HashMap<String, AttributeValue>;

impl Checkpoints {
    /// Checkpoints in `table`, through `client`. Nothing is sent yet; see
    /// [`create_table_if_missing`](Checkpoints::create_table_if_missing).
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Checkpoints {
            client,
            table: table.into(),
            stale: Arc::new(AtomicU64::new(0)),
            owner: None,
        }
    }

    /// The same table, claiming for the consumer set `set`: each claim
    /// writes the set into the item ([`OWNER`]) and is refused as
    /// [`OtherOwner`](CheckpointError::OtherOwner) if another set's name
    /// is there. [`KinesisConsumer`](crate::KinesisConsumer) does this
    /// with its set's name.
    pub fn owned_by(mut self, set: impl Into<String>) -> Self {
        self.owner = Some(set.into());
        self
    }

    /// The consumer set this handle claims for, if any.
    pub fn owner(&self) -> Option<&str> {
        self.owner.as_deref()
    }

    /// The table.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The SDK client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// How many writes through this handle (and its clones) were refused
    /// as [`Stale`](CheckpointError::Stale).
    pub fn stale_refusals(&self) -> u64 {
        self.stale.load(Ordering::Relaxed)
    }

    /// Creates the table if it is missing (hash key `shard`, on-demand
    /// billing) and waits until it is active. Returns whether this call
    /// created it; processes racing to create it all succeed.
    pub async fn create_table_if_missing(&self) -> Result<bool, CheckpointError> {
        let created = match self.describe().await? {
            Some(_) => false,
            None => {
                let key = KeySchemaElement::builder()
                    .attribute_name(SHARD)
                    .key_type(KeyType::Hash)
                    .build()
                    .map_err(|e| self.refused_build("CreateTable", &e))?;
                let attr = AttributeDefinition::builder()
                    .attribute_name(SHARD)
                    .attribute_type(ScalarAttributeType::S)
                    .build()
                    .map_err(|e| self.refused_build("CreateTable", &e))?;
                match self
                    .client
                    .create_table()
                    .table_name(&self.table)
                    .key_schema(key)
                    .attribute_definitions(attr)
                    .billing_mode(BillingMode::PayPerRequest)
                    .send()
                    .await
                {
                    Ok(_) => true,
                    Err(e) if e.code() == Some("ResourceInUseException") => false,
                    Err(e) => return Err(self.sdk_error(&e, "", "CreateTable")),
                }
            }
        };
        let start = Instant::now();
        loop {
            match self.describe().await? {
                Some(TableStatus::Active | TableStatus::Updating) => return Ok(created),
                _ if start.elapsed() > CREATE_WAIT => {
                    return Err(CheckpointError::Unavailable {
                        table: self.table.clone(),
                        shard: String::new(),
                        operation: "CreateTable",
                        detail: format!("the table is not ACTIVE after {CREATE_WAIT:?}"),
                    })
                }
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// The table's status, or `None` if it does not exist.
    async fn describe(&self) -> Result<Option<TableStatus>, CheckpointError> {
        match self
            .client
            .describe_table()
            .table_name(&self.table)
            .send()
            .await
        {
            Ok(out) => Ok(Some(
                out.table()
                    .and_then(|t| t.table_status())
                    .cloned()
                    .unwrap_or(TableStatus::Active),
            )),
            Err(e) if e.code() == Some("ResourceNotFoundException") => Ok(None),
            Err(e) => Err(self.sdk_error(&e, "", "DescribeTable")),
        }
    }

    /// The shard's checkpoint (a consistent read), or `None` if none was
    /// ever written.
    pub async fn load(&self, shard: &str) -> Result<Option<Checkpoint>, CheckpointError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(SHARD, AttributeValue::S(shard.to_owned()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| self.sdk_error(&e, shard, "GetItem"))?;
        out.item().map(|item| self.decode(shard, item)).transpose()
    }

    /// Takes the shard's checkpoint for a term: raises the stored token to
    /// `token` (creating the item if missing) without changing the
    /// sequence, and returns the checkpoint. From then on a holder with a
    /// lower token can write nothing, so what it returns is where this
    /// term starts. Refused as [`Stale`](CheckpointError::Stale) if a
    /// higher token is stored.
    pub async fn claim(&self, shard: &str, token: u64) -> Result<Checkpoint, CheckpointError> {
        let update = self.update(shard, token);
        let update = match &self.owner {
            Some(owner) => update
                .update_expression("SET #t = :t, #o = :o")
                .condition_expression(
                    "(attribute_not_exists(#k) OR #t <= :t) AND \
                     (attribute_not_exists(#o) OR #o = :o)",
                )
                .expression_attribute_names("#o", OWNER)
                .expression_attribute_values(":o", AttributeValue::S(owner.clone())),
            None => update.update_expression("SET #t = :t"),
        };
        let out = update.return_values(ReturnValue::AllNew).send().await;
        let out = self
            .conditional(shard, token, None, out, "UpdateItem (claim)")
            .await?;
        match out.attributes() {
            Some(item) => self.decode(shard, item),
            None => Err(self.malformed(shard, "UpdateItem returned no attributes")),
        }
    }

    /// Saves `sequence` as the last processed of `shard`, under the term's
    /// `token`. One conditional `UpdateItem`: refused as
    /// [`Stale`](CheckpointError::Stale) if the stored token is higher (the
    /// count [`stale_refusals`](Checkpoints::stale_refusals) rises), as
    /// [`Backwards`](CheckpointError::Backwards) if the stored sequence is
    /// after `sequence`. Saving the stored sequence again succeeds.
    pub async fn save(
        &self,
        shard: &str,
        sequence: &str,
        token: u64,
    ) -> Result<(), CheckpointError> {
        if sequence.is_empty() || !sequence.bytes().all(|b| b.is_ascii_digit()) {
            return Err(CheckpointError::InvalidSequence {
                shard: shard.to_owned(),
                sequence: sequence.to_owned(),
            });
        }
        let out = self
            .update(shard, token)
            .update_expression("SET #t = :t, #s = :s, #l = :l")
            .condition_expression(
                "attribute_not_exists(#k) OR (#t <= :t AND (attribute_not_exists(#l) OR #l < :l \
                 OR (#l = :l AND #s <= :s)))",
            )
            .expression_attribute_names("#s", SEQUENCE)
            .expression_attribute_names("#l", SEQUENCE_LENGTH)
            .expression_attribute_values(":s", AttributeValue::S(sequence.to_owned()))
            .expression_attribute_values(":l", AttributeValue::N(sequence.len().to_string()))
            .send()
            .await;
        self.conditional(shard, token, Some(sequence), out, "UpdateItem (save)")
            .await
            .map(drop)
    }

    /// Marks `shard` finished (read to its end) under `token`; refused as
    /// [`Stale`](CheckpointError::Stale) if a higher token is stored.
    pub async fn finish(&self, shard: &str, token: u64) -> Result<(), CheckpointError> {
        let out = self
            .update(shard, token)
            .update_expression("SET #t = :t, #f = :f")
            .expression_attribute_names("#f", FINISHED)
            .expression_attribute_values(":f", AttributeValue::Bool(true))
            .send()
            .await;
        self.conditional(shard, token, None, out, "UpdateItem (finish)")
            .await
            .map(drop)
    }

    /// An `UpdateItem` of the shard's item fenced by `token` (the save
    /// replaces the condition with one that also checks the sequence).
    fn update(
        &self,
        shard: &str,
        token: u64,
    ) -> tenure_dynamodb::aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder
    {
        self.client
            .update_item()
            .table_name(&self.table)
            .key(SHARD, AttributeValue::S(shard.to_owned()))
            .condition_expression("attribute_not_exists(#k) OR #t <= :t")
            .expression_attribute_names("#k", SHARD)
            .expression_attribute_names("#t", TOKEN)
            .expression_attribute_values(":t", AttributeValue::N(token.to_string()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
    }

    /// Sorts the result of a fenced update: a failed condition becomes
    /// `Stale` or `Backwards`, from the old item (sent back, or read).
    async fn conditional<R: std::fmt::Debug>(
        &self,
        shard: &str,
        token: u64,
        sequence: Option<&str>,
        out: Result<
            UpdateItemOutput,
            SdkError<tenure_dynamodb::aws_sdk_dynamodb::operation::update_item::UpdateItemError, R>,
        >,
        operation: &'static str,
    ) -> Result<UpdateItemOutput, CheckpointError> {
        let err = match out {
            Ok(out) => return Ok(out),
            Err(e) => e,
        };
        if err.code() != Some("ConditionalCheckFailedException") {
            return Err(self.sdk_error(&err, shard, operation));
        }
        let sent_back = err
            .as_service_error()
            .and_then(|e| match e {
                tenure_dynamodb::aws_sdk_dynamodb::operation::update_item::UpdateItemError::ConditionalCheckFailedException(c) => c.item().cloned(),
                _ => None,
            });
        let stored = match sent_back {
            Some(item) => Some(self.decode(shard, &item)?),
            None => self.load(shard).await?,
        };
        if let (Some(owner), Some(mine)) = (
            stored.as_ref().and_then(|s| s.owner.as_ref()),
            self.owner.as_ref(),
        ) {
            if owner != mine {
                return Err(CheckpointError::OtherOwner {
                    table: self.table.clone(),
                    shard: shard.to_owned(),
                    owner: owner.clone(),
                    mine: mine.clone(),
                });
            }
        }
        let Some(stored) = stored else {
            // Refused, yet no item: deleted in between. Nothing was
            // written; the caller may try again.
            return Err(CheckpointError::Unavailable {
                table: self.table.clone(),
                shard: shard.to_owned(),
                operation,
                detail: "the condition failed but the item is gone".into(),
            });
        };
        if stored.token > token {
            self.stale.fetch_add(1, Ordering::Relaxed);
            return Err(CheckpointError::Stale {
                shard: shard.to_owned(),
                token,
                stored_token: stored.token,
            });
        }
        match (sequence, stored.sequence) {
            (Some(sequence), Some(stored)) if compare_sequences(sequence, &stored).is_lt() => {
                Err(CheckpointError::Backwards {
                    shard: shard.to_owned(),
                    sequence: sequence.to_owned(),
                    stored,
                })
            }
            // The item changed between the refusal and the read (a newer
            // token wrote, then ...): report what was seen as a stale
            // write, which it was.
            _ => Err(CheckpointError::Unavailable {
                table: self.table.clone(),
                shard: shard.to_owned(),
                operation,
                detail: "the condition failed, and the item read after it allows the write: \
                         it changed in between; try again"
                    .into(),
            }),
        }
    }

    fn decode(&self, shard: &str, item: &Item) -> Result<Checkpoint, CheckpointError> {
        let token = match item.get(TOKEN) {
            Some(AttributeValue::N(n)) => n
                .parse::<u64>()
                .map_err(|_| self.malformed(shard, "token is not a whole number"))?,
            None => 0,
            Some(_) => return Err(self.malformed(shard, "token is not a number")),
        };
        let sequence = match item.get(SEQUENCE) {
            Some(AttributeValue::S(s)) => Some(s.clone()),
            None => None,
            Some(_) => return Err(self.malformed(shard, "sequence is not a string")),
        };
        // The saves compare by the stored length: one that does not match
        // the sequence would refuse every save (or let one move back).
        let length = match item.get(SEQUENCE_LENGTH) {
            Some(AttributeValue::N(n)) => Some(n.as_str()),
            None => None,
            Some(_) => return Err(self.malformed(shard, "sequence_length is not a number")),
        };
        match (&sequence, length) {
            (Some(s), Some(l))
                if !s.is_empty()
                    && s.bytes().all(|b| b.is_ascii_digit())
                    && l == s.len().to_string() => {}
            (None, None) => {}
            (Some(_), Some(_)) => {
                return Err(self.malformed(
                    shard,
                    "sequence is not a decimal number of sequence_length digits",
                ))
            }
            (Some(_), None) => return Err(self.malformed(shard, "sequence_length is missing")),
            (None, Some(_)) => return Err(self.malformed(shard, "sequence is missing")),
        }
        let finished = match item.get(FINISHED) {
            Some(AttributeValue::Bool(b)) => *b,
            None => false,
            Some(_) => return Err(self.malformed(shard, "finished is not a boolean")),
        };
        let owner = match item.get(OWNER) {
            Some(AttributeValue::S(s)) => Some(s.clone()),
            None => None,
            Some(_) => return Err(self.malformed(shard, "owner is not a string")),
        };
        Ok(Checkpoint {
            shard: shard.to_owned(),
            sequence,
            token,
            finished,
            owner,
        })
    }

    fn malformed(&self, shard: &str, reason: &str) -> CheckpointError {
        CheckpointError::Malformed {
            table: self.table.clone(),
            shard: shard.to_owned(),
            reason: reason.to_owned(),
        }
    }

    fn refused_build(&self, operation: &'static str, e: &dyn std::error::Error) -> CheckpointError {
        CheckpointError::Refused {
            table: self.table.clone(),
            shard: String::new(),
            operation,
            code: "BuildError".into(),
            message: e.to_string(),
        }
    }

    fn sdk_error<E, R>(
        &self,
        err: &SdkError<E, R>,
        shard: &str,
        operation: &'static str,
    ) -> CheckpointError
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
        R: std::fmt::Debug,
    {
        let (table, shard) = (self.table.clone(), shard.to_owned());
        if !matches!(err, SdkError::ServiceError(_)) {
            return CheckpointError::Unavailable {
                table,
                shard,
                operation,
                detail: DisplayErrorContext(err).to_string(),
            };
        }
        let code = err.code().unwrap_or("no error code").to_owned();
        match code.as_str() {
            "ProvisionedThroughputExceededException"
            | "ThrottlingException"
            | "RequestLimitExceeded"
            | "InternalServerError"
            | "ServiceUnavailable" => CheckpointError::Unavailable {
                table,
                shard,
                operation,
                detail: code,
            },
            _ => CheckpointError::Refused {
                table,
                shard,
                operation,
                message: err.message().unwrap_or("").to_owned(),
                code,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::compare_sequences;
    use std::cmp::Ordering;

    #[test]
    fn sequences_compare_by_length_then_text() {
        assert_eq!(compare_sequences("9", "10"), Ordering::Less);
        assert_eq!(compare_sequences("10", "9"), Ordering::Greater);
        assert_eq!(compare_sequences("123", "123"), Ordering::Equal);
        let long = "4".repeat(128);
        let longer_lower = format!("1{}", "0".repeat(127));
        assert_eq!(
            compare_sequences(&"9".repeat(127), &longer_lower),
            Ordering::Less
        );
        assert_eq!(compare_sequences(&long, &longer_lower), Ordering::Greater);
    }
}
