//! Reading many groups: `BatchGetItem` with `ConsistentRead`, 100 keys per
//! request (DynamoDB's limit), keys that DynamoDB left unprocessed asked
//! for again with the throttling back-off.
//!
//! Writes need nothing here: `TransactWriteItems` is all-or-nothing (one
//! group's conflict would undo the others' renewals), so a batch of
//! compare-and-swaps is the single-group conditional writes in flight
//! together (see `DynamoDbStore::compare_and_swap_many`).

use std::collections::{HashMap, HashSet};

use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes};
use aws_sdk_dynamodb::Client;
use tenure::{GroupName, StoreError, Versioned};

use crate::error::{classify, Failure, Target};
use crate::item::{self, KEY};
use crate::retry::Throttle;

/// Most keys in one `BatchGetItem` request.
pub(crate) const KEYS_PER_REQUEST: usize = 100;

/// Why a batched read did not give its results.
pub(crate) enum BatchGetError {
    /// The credentials may not call `BatchGetItem`: read one by one.
    NotAllowed(StoreError),
    /// Anything else: every group of the request fails with it.
    Failed(StoreError),
}

/// Reads up to [`KEYS_PER_REQUEST`] groups (repeats allowed) with
/// strongly consistent reads; one result per group, in order.
pub(crate) async fn read(
    client: &Client,
    target: &Target,
    throttle: &Throttle,
    groups: &[GroupName],
) -> Result<Vec<Result<Option<Versioned>, StoreError>>, BatchGetError> {
    // DynamoDB refuses a request that names a key twice.
    let mut seen = HashSet::new();
    let mut pending: Vec<HashMap<String, AttributeValue>> = groups
        .iter()
        .filter(|g| seen.insert(g.as_str()))
        .map(|g| key_of(g.as_str()))
        .collect();
    let asked = pending.len();
    let mut found: HashMap<String, HashMap<String, AttributeValue>> = HashMap::new();
    let mut backoff = throttle.backoff("read");
    let mut given_up: Option<StoreError> = None;
    while !pending.is_empty() {
        let keys = KeysAndAttributes::builder()
            .set_keys(Some(std::mem::take(&mut pending)))
            // A lease read must see the latest write (see `read`).
            .consistent_read(true)
            .build()
            .map_err(|e| {
                BatchGetError::Failed(StoreError::Misconfigured {
                    message: format!("cannot build a BatchGetItem request: {e}"),
                    source: None,
                })
            })?;
        let sent = client
            .batch_get_item()
            .request_items(&target.table, keys.clone())
            .send()
            .await;
        let out = match sent {
            Ok(out) => out,
            Err(e) if e.code() == Some("AccessDeniedException") => {
                return Err(BatchGetError::NotAllowed(failure(
                    classify(e, target, "batched read"),
                    target,
                )))
            }
            Err(e) => match classify(e, target, "batched read") {
                Failure::Throttled(err) => {
                    // Nothing was read: ask for the same keys again.
                    pending = keys.keys;
                    if let Err(f) = backoff.wait(err).await {
                        given_up = Some(failure(f, target));
                        break;
                    }
                    continue;
                }
                other => return Err(BatchGetError::Failed(failure(other, target))),
            },
        };
        for item in out
            .responses
            .and_then(|mut r| r.remove(&target.table))
            .unwrap_or_default()
        {
            if let Some(AttributeValue::S(name)) = item.get(KEY) {
                found.insert(name.clone(), item);
            }
        }
        pending = out
            .unprocessed_keys
            .and_then(|mut u| u.remove(&target.table))
            .map(|k| k.keys)
            .unwrap_or_default();
        if !pending.is_empty() {
            // DynamoDB leaves keys unprocessed when the request went over
            // the table's capacity or a response size limit: as throttling.
            let err = StoreError::Unavailable {
                message: format!(
                    "DynamoDB left {} of {asked} keys unprocessed in a batched read on table {} {}",
                    pending.len(),
                    target.table,
                    target.place
                ),
                source: None,
            };
            if let Err(f) = backoff.wait(err).await {
                given_up = Some(failure(f, target));
                break;
            }
        }
    }
    let unread: HashSet<String> = pending
        .iter()
        .filter_map(|k| match k.get(KEY) {
            Some(AttributeValue::S(name)) => Some(name.clone()),
            _ => None,
        })
        .collect();
    Ok(groups
        .iter()
        .map(|g| {
            if let (true, Some(e)) = (unread.contains(g.as_str()), &given_up) {
                return Err(e.copy_for_batch());
            }
            match found.get(g.as_str()) {
                None => Ok(None),
                Some(item) => item::decode(item)
                    .map(Some)
                    .map_err(|source| StoreError::Record {
                        group: g.clone(),
                        source,
                    }),
            }
        })
        .collect())
}

fn key_of(group: &str) -> HashMap<String, AttributeValue> {
    HashMap::from([(KEY.to_owned(), AttributeValue::S(group.to_owned()))])
}

/// A failure as the store reports it.
fn failure(f: Failure, target: &Target) -> StoreError {
    crate::store::store_error(f, "batched read", target)
}
