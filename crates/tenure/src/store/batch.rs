//! Batches over single operations and single operations over batches,
//! for stores that have only one of the two natively.

use super::{BatchResult, CasOutcome, CasRequest, LeaseStore, LeaseView};
use crate::error::StoreError;
use crate::record::{GroupName, LeaseRecord, Version, Versioned};

/// A single read as a batch of one, for a store whose native read is the
/// batch (one statement, one script call): the batch's only entry, or an
/// unavailable store if it answered with none.
pub async fn read_as_batch<S: LeaseView + ?Sized>(
    store: &S,
    group: &GroupName,
) -> Result<Option<Versioned>, StoreError> {
    only_entry(store.read_many(std::slice::from_ref(group)).await?)
}

/// A single compare-and-swap as a batch of one, for a store whose native
/// write is the batch; see [`read_as_batch`].
pub async fn compare_and_swap_as_batch<S: LeaseStore + ?Sized>(
    store: &S,
    group: &GroupName,
    expected: Option<Version>,
    record: &LeaseRecord,
) -> Result<CasOutcome, StoreError> {
    let request = CasRequest {
        group: group.clone(),
        expected,
        record: record.clone(),
    };
    only_entry(
        store
            .compare_and_swap_many(std::slice::from_ref(&request))
            .await?,
    )
}

/// Checks that a store answered a batch of `asked` operations with as many
/// results: a server that answers with more or fewer is not one the
/// results can be matched to (`server` names it, `what` the batch).
pub fn check_batch_answer(
    server: &str,
    what: &str,
    asked: usize,
    answered: usize,
) -> Result<(), StoreError> {
    if asked == answered {
        return Ok(());
    }
    Err(StoreError::Unavailable {
        message: format!("{server} answered {what} of {asked} with {answered} results"),
        source: None,
    })
}

/// Pairs each operation of a batch (`keys`, in the order sent) with its
/// result. A batch that failed as a whole, or was answered with more or
/// fewer results than operations ([`check_batch_answer`]), fails every
/// operation in it with a copy of that error.
/// An iterator, not a list: the engine hands each result on as it comes,
/// and a list of a batch's thousands of pairs was one more large
/// allocation per batch.
pub(crate) fn spread<K, T>(
    keys: impl ExactSizeIterator<Item = K>,
    got: BatchResult<T>,
) -> impl Iterator<Item = (K, Result<T, StoreError>)> {
    let checked = got.and_then(|results| {
        check_batch_answer("the store", "a batch", keys.len(), results.len()).map(|()| results)
    });
    let mut results = checked.map(Vec::into_iter);
    keys.map(move |k| {
        let result = match &mut results {
            // As many results as keys: checked above.
            Ok(each) => each.next().unwrap_or_else(|| Err(missing_entry())),
            Err(e) => Err(e.copy_for_batch()),
        };
        (k, result)
    })
}

/// A batch answer that ran out of entries (which [`check_batch_answer`]
/// rules out before they are paired).
fn missing_entry() -> StoreError {
    StoreError::Unavailable {
        message: "the store answered a batch with fewer entries than operations".into(),
        source: None,
    }
}

fn only_entry<T>(batch: Vec<Result<T, StoreError>>) -> Result<T, StoreError> {
    batch.into_iter().next().unwrap_or_else(|| {
        Err(StoreError::Unavailable {
            message: "the store answered a batch of one with no entry".into(),
            source: None,
        })
    })
}
