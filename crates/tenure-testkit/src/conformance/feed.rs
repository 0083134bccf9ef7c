//! The change feeds: the per-group one hints at a write by another handle;
//! the store-wide one reports every group's writes, with the record where
//! it can.

use super::batches::{cas_many, request};
use super::*;
use tenure::store::{Change, StoreFeed};

pub(super) fn cases<'a, H: Harness>(h: &'a H, r: &'a Run) -> Cases<'a> {
    vec![
        case("changes_feed", changes_feed(h, r)),
        case("watch_reports_writes", watch_reports_writes(h, r)),
    ]
}

/// Waits for one hint, up to [`FEED_LIMIT`].
pub(super) async fn hint(
    feed: &mut tenure::store::ChangeFeed,
    what: &str,
) -> Result<Duration, String> {
    let start = std::time::Instant::now();
    match tokio::time::timeout(FEED_LIMIT, feed.changed()).await {
        Ok(Some(())) => Ok(start.elapsed()),
        Ok(None) => Err(format!("{what}: the change feed ended instead of hinting")),
        Err(_) => Err(format!("{what}: no change hint within {FEED_LIMIT:?}")),
    }
}

/// Lets pending hints pass until the feed is quiet for 250 ms; fails if it
/// never is, since an elector would re-read in a busy loop.
pub(super) async fn drain(feed: &mut tenure::store::ChangeFeed) -> Result<(), String> {
    for _ in 0..40 {
        match tokio::time::timeout(Duration::from_millis(250), feed.changed()).await {
            Ok(Some(())) => continue,
            Ok(None) => return Err("the change feed ended on its own".into()),
            Err(_) => return Ok(()),
        }
    }
    Err(
        "the change feed hints continuously while nothing is written; \
         an elector would re-read in a busy loop"
            .into(),
    )
}

/// If the store can notify: a write by another handle produces a hint
/// within 5 s, and the feed keeps working for the next write. A store whose
/// harness promises the feed fails when it has none.
async fn changes_feed<H: Harness>(h: &H, run: &Run) -> CaseResult {
    let watcher = h.store().await;
    let writer = h.store().await;
    let g = run.group("changes")?;
    let Some(mut feed) = watcher.changes(&g).await.ctx("changes()")? else {
        if h.promised_feeds().per_group {
            return Err(
                "changes() returned None, but the harness promises a per-group change feed: \
                 hand-over would wait for a poll"
                    .into(),
            );
        }
        return Ok(Verdict::Skip(
            "the store has no change feed (changes() returned None); electors poll".into(),
        ));
    };
    // Extra hints are allowed; let any that come with subscribing pass, so
    // the hint checked below is the write's.
    drain(&mut feed).await?;
    let v1 = write_applies(
        &writer,
        &g,
        None,
        &held_by("a", 1),
        "the other handle's first write",
    )
    .await?;
    hint(&mut feed, "after another handle's first write").await?;
    drain(&mut feed).await?;
    write_applies(
        &writer,
        &g,
        Some(v1),
        &released(1),
        "the other handle's release",
    )
    .await?;
    hint(&mut feed, "after another handle's release").await?;
    Ok(Verdict::Pass)
}

/// Waits for the feed to report `group` at `version`, skipping changes of
/// other groups (the feed is store-wide, and other runs may write).
pub(super) async fn report_of(
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
    let v1 = write_applies(&writer, &a, None, &w1, "first write").await?;
    report_of(&mut feed, &a, v1, &w1, "a first write").await?;
    let v2 = write_applies(&writer, &a, Some(v1), &w1, "renewal").await?;
    report_of(&mut feed, &a, v2, &w1, "a renewal").await?;
    let batch = vec![
        request(&b, None, w5.clone()),
        request(&a, Some(v2), released(1)),
    ];
    let got = cas_many(&writer, &batch, "a batch of two writes").await?;
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
