//! Conformance cases for the batch operations ([`LeaseStore::read_many`],
//! [`LeaseStore::compare_and_swap_many`]) and the store-wide change feed
//! ([`LeaseStore::watch`]) that the engine relies on. Every store must pass
//! the batch cases, whether it overrides the defaults or not; the feed
//! cases apply to stores whose `watch` returns a feed.

use std::time::Duration;

use super::{
    applied, conflicted, expect_record, held_by, released, CaseFuture, CaseResult, Ctx, Harness,
    Run, Verdict,
};
use crate::error::StoreError;
use crate::record::{GroupName, LeaseRecord, Version, Versioned};
use crate::store::{CasOutcome, CasRequest, Change, LeaseStore, StoreFeed};
use std::collections::BTreeMap;

/// How long a store-wide feed may take to report a write.
const FEED_LIMIT: Duration = Duration::from_secs(5);

/// Groups per batch in the large-batch case: more than one request of most
/// stores' natural batch size, fewer than any sane limit.
const LARGE: usize = 300;

pub(super) fn cases<'a, H: Harness>(h: &'a H, r: &'a Run) -> Vec<(&'static str, CaseFuture<'a>)> {
    vec![
        ("batch_read", Box::pin(batch_read(h, r))),
        (
            "batch_cas_independent",
            Box::pin(batch_cas_independent(h, r)),
        ),
        ("batch_cas_same_group", Box::pin(batch_cas_same_group(h, r))),
        ("batch_large", Box::pin(batch_large(h, r))),
        ("batch_empty", Box::pin(batch_empty(h))),
        ("watch_reports_writes", Box::pin(watch_reports_writes(h, r))),
        ("list_by_prefix", Box::pin(list_by_prefix(h, r))),
    ]
}

fn request(group: &GroupName, expected: Option<Version>, record: LeaseRecord) -> CasRequest {
    CasRequest {
        group: group.clone(),
        expected,
        record,
    }
}

/// One result per request, in order, or the case fails naming the batch.
fn one_each<T>(
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
    let (a, b, empty, bad) = (
        run.group("batch-read-a")?,
        run.group("batch-read-b")?,
        run.group("batch-read-empty")?,
        run.group("batch-read-corrupt")?,
    );
    // Records are built once: each carries the wall time it was made at.
    let (x3, r9) = (held_by("x", 3), released(9));
    let va = applied(
        s.compare_and_swap(&a, None, &x3).await.ctx("write a")?,
        "write a",
    )?;
    let vb = applied(
        s.compare_and_swap(&b, None, &r9).await.ctx("write b")?,
        "write b",
    )?;
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
    let (fresh, held, stale, taken) = (
        run.group("batch-cas-fresh")?,
        run.group("batch-cas-held")?,
        run.group("batch-cas-stale")?,
        run.group("batch-cas-taken")?,
    );
    let (a1, b1, b2) = (held_by("a", 1), held_by("b", 1), held_by("b", 2));
    let v_held = applied(
        s.compare_and_swap(&held, None, &a1)
            .await
            .ctx("prepare held")?,
        "prepare held",
    )?;
    let v_stale = applied(
        s.compare_and_swap(&stale, None, &a1)
            .await
            .ctx("prepare stale")?,
        "prepare stale",
    )?;
    let v_stale_now = applied(
        s.compare_and_swap(&stale, Some(v_stale), &a1)
            .await
            .ctx("move stale on")?,
        "move stale on",
    )?;
    applied(
        s.compare_and_swap(&taken, None, &a1)
            .await
            .ctx("prepare taken")?,
        "prepare taken",
    )?;
    let batch = vec![
        request(&fresh, None, b1.clone()),
        request(&held, Some(v_held), a1.clone()),
        request(&stale, Some(v_stale), b2.clone()),
        request(&taken, None, b2),
    ];
    let got = one_each(
        s.compare_and_swap_many(&batch).await,
        batch.len(),
        "compare_and_swap_many",
    )?;
    let outcome = |i: usize| -> Result<CasOutcome, String> {
        got[i]
            .as_ref()
            .map(|o| *o)
            .map_err(|e| format!("compare_and_swap_many entry {i} failed: {e}"))
    };
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
    let got = one_each(
        s.compare_and_swap_many(&batch).await,
        batch.len(),
        "two acquisitions of one group in one batch",
    )?;
    let first = got[0]
        .as_ref()
        .map_err(|e| format!("first acquisition failed: {e}"))?;
    let second = got[1]
        .as_ref()
        .map_err(|e| format!("second acquisition failed: {e}"))?;
    let v = applied(*first, "the first acquisition in the batch")?;
    conflicted(
        *second,
        "the second acquisition of the same group in the batch",
    )?;
    expect_record(&s, &g, &first1, v, "the group after the batch").await?;
    // A renewal followed by a stale write to the same group.
    let batch = vec![
        request(&g, Some(v), first1.clone()),
        request(&g, Some(v), second2),
    ];
    let got = one_each(
        s.compare_and_swap_many(&batch).await,
        batch.len(),
        "a renewal and a stale write in one batch",
    )?;
    let renewed = got[0]
        .as_ref()
        .map_err(|e| format!("the renewal failed: {e}"))?;
    let v2 = applied(*renewed, "the renewal first in the batch")?;
    let stale = got[1]
        .as_ref()
        .map_err(|e| format!("the stale write failed: {e}"))?;
    conflicted(*stale, "a write with the version the renewal replaced")?;
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
    let got = one_each(
        s.compare_and_swap_many(&acquire).await,
        LARGE,
        "acquiring 300 groups",
    )?;
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
    let got = one_each(
        s.compare_and_swap_many(&release).await,
        LARGE,
        "releasing 300 groups",
    )?;
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

/// Waits for the feed to report `group` at `version`, skipping changes of
/// other groups (the feed is store-wide, and other runs may write).
async fn report_of(
    feed: &mut StoreFeed,
    group: &GroupName,
    version: Version,
    record: &LeaseRecord,
    what: &str,
) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + FEED_LIMIT;
    loop {
        let change = tokio::time::timeout_at(deadline, feed.next())
            .await
            .map_err(|_| format!("{what}: the feed did not report it within {FEED_LIMIT:?}"))?
            .ok_or_else(|| format!("{what}: the feed ended"))?;
        match change {
            Change::Written { group: g, current } if &g == group => {
                if current.version < version {
                    continue; // an earlier write of the group, reported late
                }
                ensure!(
                    current.version == version && &current.record == record,
                    "{what}: the feed reported version {} of {:?}, expected version {version} of {record:?}",
                    current.version,
                    current.record
                );
                return Ok(());
            }
            // A hint or a resync is a correct, if costlier, report.
            Change::Hint { group: g } if &g == group => return Ok(()),
            Change::Resync => return Ok(()),
            _ => continue,
        }
    }
}

/// If the store has a store-wide feed: writes by another handle, to any
/// group, are reported (with the record as written, or as a hint), and the
/// feed keeps working.
async fn watch_reports_writes<H: Harness>(h: &H, run: &Run) -> CaseResult {
    let watcher = h.store().await;
    let writer = h.store().await;
    let Some(mut feed) = watcher.watch().await.ctx("watch()")? else {
        if h.promised_feeds().store_wide {
            return Err(
                "watch() returned None, but the harness promises a store-wide change feed".into(),
            );
        }
        return Ok(Verdict::Skip(
            "the store has no store-wide feed (watch() returned None); the engine subscribes per group or polls"
                .into(),
        ));
    };
    let (a, b) = (run.group("watch-a")?, run.group("watch-b")?);
    let (w1, w5) = (held_by("w", 1), held_by("w", 5));
    let v1 = applied(
        writer
            .compare_and_swap(&a, None, &w1)
            .await
            .ctx("first write")?,
        "first write",
    )?;
    report_of(&mut feed, &a, v1, &w1, "a first write").await?;
    let v2 = applied(
        writer
            .compare_and_swap(&a, Some(v1), &w1)
            .await
            .ctx("renewal")?,
        "renewal",
    )?;
    report_of(&mut feed, &a, v2, &w1, "a renewal").await?;
    let batch = vec![
        request(&b, None, w5.clone()),
        request(&a, Some(v2), released(1)),
    ];
    let got = one_each(
        writer.compare_and_swap_many(&batch).await,
        2,
        "a batch of two writes",
    )?;
    let vb = match &got[0] {
        Ok(CasOutcome::Applied(v)) => *v,
        other => return Err(format!("batched acquisition: got {other:?}")),
    };
    if !matches!(got[1], Ok(CasOutcome::Applied(_))) {
        return Err(format!("batched release: got {:?}", got[1]));
    }
    // The two groups' writes may be reported in either order.
    report_of(&mut feed, &b, vb, &w5, "a batched write of another group").await?;
    Ok(Verdict::Pass)
}

/// Listing by prefix returns exactly the groups whose names start with it,
/// byte for byte (wildcard characters of the store's query language are
/// literal), each with its record; an undecodable record fails alone.
async fn list_by_prefix<H: Harness>(h: &H, run: &Run) -> CaseResult {
    let s = h.store().await;
    let names = [
        "list-p/a",
        "list-p/b",
        "list-p/released",
        "list-pq",
        "list-x/c",
        "list%_*?[\\/a",
        "listX_*?[\\/b",
    ];
    let groups: Vec<GroupName> = names
        .iter()
        .map(|n| run.group(n))
        .collect::<Result<_, _>>()?;
    let mut written = BTreeMap::new();
    for (i, g) in groups.iter().enumerate() {
        let record = if names[i].ends_with("released") {
            released(4)
        } else {
            held_by(&format!("m{i}"), i as u64 + 1)
        };
        let v = applied(
            s.compare_and_swap(g, None, &record)
                .await
                .ctx(&format!("writing {}", g))?,
            "a write to list",
        )?;
        written.insert(g.to_string(), (v, record));
    }
    let bad = run.group("list-p/corrupt")?;
    h.plant_raw(&bad, b"\x00not a tenure record").await;
    let prefix = format!("{}-list-p/", run.id);
    let listed =
        match s.list(&prefix).await {
            Err(StoreError::Unsupported { .. }) => return Ok(Verdict::Skip(
                "the store cannot list groups (list() is unsupported); it cannot host sharded sets"
                    .into(),
            )),
            other => other.ctx("list()")?,
        };
    let mut seen = BTreeMap::new();
    for entry in listed {
        ensure!(
            entry.group.as_str().starts_with(&prefix),
            "list({prefix:?}) returned {}, which does not start with the prefix",
            entry.group
        );
        ensure!(
            seen.insert(entry.group.to_string(), entry.record).is_none(),
            "list returned {} twice",
            entry.group
        );
    }
    let want: Vec<String> = ["list-p/a", "list-p/b", "list-p/corrupt", "list-p/released"]
        .iter()
        .map(|n| format!("{}-{n}", run.id))
        .collect();
    let got: Vec<String> = seen.keys().cloned().collect();
    ensure!(
        got == want,
        "list({prefix:?}) returned {got:?}, expected {want:?}"
    );
    for (name, record) in &seen {
        if name.ends_with("corrupt") {
            ensure!(
                matches!(record, Err(StoreError::Record { .. })),
                "the undecodable record under {name} was listed as {record:?}, expected a Record error for it alone"
            );
            continue;
        }
        let (version, want) = &written[name];
        match record {
            Ok(v) if v.version == *version && &v.record == want => {}
            other => {
                return Err(format!(
                    "list entry {name}: got {other:?}, expected version {version} of {want:?}"
                ))
            }
        }
    }
    // Characters that are wildcards in SQL LIKE, glob and regular
    // expressions are matched literally.
    let literal = format!("{}-list%_*?[\\/", run.id);
    let listed = s
        .list(&literal)
        .await
        .ctx("list() with wildcard characters")?;
    let got: Vec<String> = listed.iter().map(|l| l.group.to_string()).collect();
    ensure!(
        got == [format!("{}-list%_*?[\\/a", run.id)],
        "list({literal:?}) returned {got:?}: wildcard characters in a prefix must match only themselves"
    );
    let none = s
        .list(&format!("{}-nothing-here/", run.id))
        .await
        .ctx("list() of an unused prefix")?;
    ensure!(
        none.is_empty(),
        "list() of an unused prefix returned {} groups",
        none.len()
    );
    Ok(Verdict::Pass)
}
