//! The batch operations the engine relies on ([`LeaseView::read_many`],
//! [`LeaseStore::compare_and_swap_many`]): every store must pass these,
//! whether it overrides the defaults or not.

use super::{
    applied, case, conflicted, expect_record, held_by, released, write_applies, CaseResult, Cases,
    Ctx, Harness, Run, Verdict,
};
use tenure::error::StoreError;
use tenure::record::{GroupName, LeaseRecord, Version, Versioned};
use tenure::store::{CasOutcome, CasRequest, LeaseStore, LeaseView};

/// Groups per batch in the large-batch case: more than one request of most
/// stores' natural batch size, fewer than any sane limit.
const LARGE: usize = 300;

pub(super) fn cases<'a, H: Harness>(h: &'a H, r: &'a Run) -> Cases<'a> {
    vec![
        case("batch_read", batch_read(h, r)),
        case("batch_cas_independent", batch_cas_independent(h, r)),
        case("batch_cas_same_group", batch_cas_same_group(h, r)),
        case("batch_large", batch_large(h, r)),
        case("batch_empty", batch_empty(h)),
    ]
}

pub(super) fn request(
    group: &GroupName,
    expected: Option<Version>,
    record: LeaseRecord,
) -> CasRequest {
    CasRequest {
        group: group.clone(),
        expected,
        record,
    }
}

/// Sends `batch` in one `compare_and_swap_many`: one outcome per request,
/// in order, or the case fails naming the batch (`what`).
pub(super) async fn cas_many<S: LeaseStore>(
    s: &S,
    batch: &[CasRequest],
    what: &str,
) -> Result<Vec<Result<CasOutcome, StoreError>>, String> {
    one_each(s.compare_and_swap_many(batch).await, batch.len(), what)
}

/// Entry `i` of a batch's outcomes; an error fails the case as
/// "`what` failed".
fn entry(
    got: &[Result<CasOutcome, StoreError>],
    i: usize,
    what: &str,
) -> Result<CasOutcome, String> {
    got[i]
        .as_ref()
        .map(|o| *o)
        .map_err(|e| format!("{what} failed: {e}"))
}

/// One result per request, in order, or the case fails naming the batch.
pub(super) fn one_each<T>(
    got: Result<Vec<Result<T, StoreError>>, StoreError>,
    n: usize,
    what: &str,
) -> Result<Vec<Result<T, StoreError>>, String> {
    let got = got.ctx(what)?;
    ensure!(
        got.len() == n,
        "{what}: {n} operations got {} results (one per operation, in order, is the contract)",
        got.len()
    );
    Ok(got)
}

/// Reads of present, absent, repeated and undecodable groups come back in
/// order, each on its own: a corrupt record fails only its own entry.
async fn batch_read<H: Harness>(h: &H, run: &Run) -> CaseResult {
    let s = h.store().await;
    let [a, b, empty, bad] = run.groups("batch-read", ["a", "b", "empty", "corrupt"])?;
    // Records are built once: each carries the wall time it was made at.
    let (x3, r9) = (held_by("x", 3), released(9));
    let va = write_applies(&s, &a, None, &x3, "write a").await?;
    let vb = write_applies(&s, &b, None, &r9, "write b").await?;
    h.plant_raw(&bad, b"\x00not a tenure record").await;
    let groups = vec![a.clone(), empty.clone(), bad.clone(), b.clone(), a.clone()];
    let got = one_each(s.read_many(&groups).await, groups.len(), "read_many")?;
    let expect = |i: usize, want: Option<(Version, LeaseRecord)>| -> Result<(), String> {
        match (&got[i], want) {
            (Ok(Some(v)), Some((version, record))) => {
                ensure!(
                    v.version == version && v.record == record,
                    "read_many entry {i} ({}): got {v:?}, expected version {version} of {record:?}",
                    groups[i]
                );
                Ok(())
            }
            (Ok(None), None) => Ok(()),
            (other, want) => Err(format!(
                "read_many entry {i} ({}): got {other:?}, expected {want:?}",
                groups[i]
            )),
        }
    };
    expect(0, Some((va, x3.clone())))?;
    expect(1, None)?;
    ensure!(
        matches!(got[2], Err(StoreError::Record { .. })),
        "read_many entry 2 (an undecodable record): got {:?}, expected a Record error for that entry alone",
        got[2]
    );
    expect(3, Some((vb, r9)))?;
    expect(4, Some((va, x3)))?;
    Ok(Verdict::Pass)
}

/// Writes in one batch are independent: each applies or conflicts on its
/// own, and a conflict never undoes another group's write.
async fn batch_cas_independent<H: Harness>(h: &H, run: &Run) -> CaseResult {
    let s = h.store().await;
    let [fresh, held, stale, taken] =
        run.groups("batch-cas", ["fresh", "held", "stale", "taken"])?;
    let (a1, b1, b2) = (held_by("a", 1), held_by("b", 1), held_by("b", 2));
    let v_held = write_applies(&s, &held, None, &a1, "prepare held").await?;
    let v_stale = write_applies(&s, &stale, None, &a1, "prepare stale").await?;
    let v_stale_now = write_applies(&s, &stale, Some(v_stale), &a1, "move stale on").await?;
    write_applies(&s, &taken, None, &a1, "prepare taken").await?;
    let batch = vec![
        request(&fresh, None, b1.clone()),
        request(&held, Some(v_held), a1.clone()),
        request(&stale, Some(v_stale), b2.clone()),
        request(&taken, None, b2),
    ];
    let got = cas_many(&s, &batch, "compare_and_swap_many").await?;
    let outcome = |i: usize| entry(&got, i, &format!("compare_and_swap_many entry {i}"));
    let v_fresh = applied(outcome(0)?, "batch entry 0: acquire an empty group")?;
    let v_held2 = applied(outcome(1)?, "batch entry 1: renew with the right version")?;
    conflicted(outcome(2)?, "batch entry 2: a stale version")?;
    conflicted(
        outcome(3)?,
        "batch entry 3: expected no record, but one exists",
    )?;
    expect_record(&s, &fresh, &b1, v_fresh, "the acquired group").await?;
    expect_record(&s, &held, &a1, v_held2, "the renewed group").await?;
    expect_record(
        &s,
        &stale,
        &a1,
        v_stale_now,
        "the group whose write conflicted",
    )
    .await?;
    ensure!(
        v_held2 != v_held,
        "a renewal in a batch kept the old version {v_held}"
    );
    Ok(Verdict::Pass)
}

/// Several writes to one group in one batch (two candidates of a group in
/// one process) apply as if one after another, in order: the first of two
/// acquisitions of an empty group wins, the second conflicts.
async fn batch_cas_same_group<H: Harness>(h: &H, run: &Run) -> CaseResult {
    let s = h.store().await;
    let g = run.group("batch-same")?;
    let (first1, second1, second2) = (
        held_by("first", 1),
        held_by("second", 1),
        held_by("second", 2),
    );
    let batch = vec![
        request(&g, None, first1.clone()),
        request(&g, None, second1),
    ];
    let got = cas_many(&s, &batch, "two acquisitions of one group in one batch").await?;
    let first = entry(&got, 0, "first acquisition")?;
    let second = entry(&got, 1, "second acquisition")?;
    let v = applied(first, "the first acquisition in the batch")?;
    conflicted(
        second,
        "the second acquisition of the same group in the batch",
    )?;
    expect_record(&s, &g, &first1, v, "the group after the batch").await?;
    // A renewal followed by a stale write to the same group.
    let batch = vec![
        request(&g, Some(v), first1.clone()),
        request(&g, Some(v), second2),
    ];
    let got = cas_many(&s, &batch, "a renewal and a stale write in one batch").await?;
    let renewed = entry(&got, 0, "the renewal")?;
    let v2 = applied(renewed, "the renewal first in the batch")?;
    let stale = entry(&got, 1, "the stale write")?;
    conflicted(stale, "a write with the version the renewal replaced")?;
    expect_record(&s, &g, &first1, v2, "the group after the renewal").await?;
    Ok(Verdict::Pass)
}

/// A batch of hundreds of groups: acquired, read back and released in one
/// call each.
async fn batch_large<H: Harness>(h: &H, run: &Run) -> CaseResult {
    let s = h.store().await;
    let groups: Vec<GroupName> = (0..LARGE)
        .map(|i| run.group(&format!("batch-large-{i}")))
        .collect::<Result<_, _>>()?;
    // Built once: a record carries the wall time it was made at.
    let records: Vec<LeaseRecord> = (0..LARGE)
        .map(|i| held_by(&format!("c{i}"), i as u64 + 1))
        .collect();
    let acquire: Vec<CasRequest> = groups
        .iter()
        .zip(&records)
        .map(|(g, record)| request(g, None, record.clone()))
        .collect();
    let got = cas_many(&s, &acquire, "acquiring 300 groups").await?;
    let mut versions = Vec::with_capacity(LARGE);
    for (i, r) in got.into_iter().enumerate() {
        let outcome = r.map_err(|e| format!("acquisition {i} failed: {e}"))?;
        versions.push(applied(outcome, &format!("acquisition {i}"))?);
    }
    let read = one_each(s.read_many(&groups).await, LARGE, "reading 300 groups")?;
    for (i, r) in read.into_iter().enumerate() {
        let want = &records[i];
        match r {
            Ok(Some(Versioned { record, version }))
                if &record == want && version == versions[i] => {}
            other => {
                return Err(format!(
                    "read_many entry {i}: got {other:?}, expected version {} of {want:?}",
                    versions[i]
                ))
            }
        }
    }
    let release: Vec<CasRequest> = groups
        .iter()
        .enumerate()
        .map(|(i, g)| request(g, Some(versions[i]), released(i as u64 + 1)))
        .collect();
    let got = cas_many(&s, &release, "releasing 300 groups").await?;
    for (i, r) in got.into_iter().enumerate() {
        let outcome = r.map_err(|e| format!("release {i} failed: {e}"))?;
        applied(outcome, &format!("release {i}"))?;
    }
    Ok(Verdict::Pass)
}

async fn batch_empty<H: Harness>(h: &H) -> CaseResult {
    let s = h.store().await;
    let read = s.read_many(&[]).await.ctx("read_many of no groups")?;
    ensure!(
        read.is_empty(),
        "read_many(&[]) returned {} entries",
        read.len()
    );
    let written = s
        .compare_and_swap_many(&[])
        .await
        .ctx("compare_and_swap_many of no requests")?;
    ensure!(
        written.is_empty(),
        "compare_and_swap_many(&[]) returned {} entries",
        written.len()
    );
    Ok(Verdict::Pass)
}
