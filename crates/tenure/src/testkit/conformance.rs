//! The conformance cases. Each is an async function that returns
//! `Err(explanation)` on the first broken expectation; the explanation names
//! the operation and the values seen, because the reader is debugging a
//! store they may not have written.

use std::collections::{HashSet, VecDeque};
use std::error::Error as _;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Barrier;

use super::{
    held_by, panic_message, random_id, released, run_case, CaseOutcome, CaseReport, CatchUnwind,
    ConformanceReport, Harness,
};
use crate::clock::{MonoTime, Now, WallTime};
use crate::config::Config;
use crate::error::{RecordError, StoreError};
use crate::machine::{Action, Input, Machine};
use crate::record::{
    GroupName, Holder, LeaseRecord, Metadata, Version, Versioned, MAX_GROUP_BYTES,
    MAX_METADATA_BYTES,
};
use crate::store::{CasOutcome, LeaseStore};

/// How a case that did not fail ended.
pub(super) enum Verdict {
    Pass,
    Skip(String),
}

/// `Err` explains the failure.
pub(super) type CaseResult = Result<Verdict, String>;

/// How many handles race in the concurrency cases.
const RACERS: usize = 16;

/// Generous: a case does a few dozen round trips; only a hang exceeds this.
const CASE_LIMIT: Duration = Duration::from_secs(120);

/// How long a change feed may take to hint at a write.
const FEED_LIMIT: Duration = Duration::from_secs(5);

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

#[path = "batches.rs"]
mod batches;

/// Names every group of one run, under one random prefix.
struct Run {
    id: String,
}

impl Run {
    fn group(&self, label: &str) -> Result<GroupName, String> {
        GroupName::new(format!("{}-{label}", self.id))
            .map_err(|e| format!("test bug: group name for {label:?}: {e}"))
    }
}

/// An error with its whole source chain, since the useful part of a store
/// error is often its cause.
fn chain(e: &StoreError) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        s.push_str(": ");
        s.push_str(&cause.to_string());
        source = cause.source();
    }
    s
}

trait Ctx<T> {
    /// Turns a store error into a failure naming the operation.
    fn ctx(self, what: &str) -> Result<T, String>;
}

impl<T> Ctx<T> for Result<T, StoreError> {
    fn ctx(self, what: &str) -> Result<T, String> {
        self.map_err(|e| format!("{what} failed: {}", chain(&e)))
    }
}

fn applied(outcome: CasOutcome, what: &str) -> Result<Version, String> {
    match outcome {
        CasOutcome::Applied(v) => Ok(v),
        CasOutcome::Conflict => Err(format!("{what}: got Conflict, expected Applied")),
    }
}

fn conflicted(outcome: CasOutcome, what: &str) -> Result<(), String> {
    match outcome {
        CasOutcome::Conflict => Ok(()),
        CasOutcome::Applied(v) => Err(format!(
            "{what}: got Applied({v}), expected Conflict (a write that must be refused was applied)"
        )),
    }
}

/// Reads a record that must exist.
async fn read_some<S: LeaseStore>(s: &S, g: &GroupName, what: &str) -> Result<Versioned, String> {
    s.read(g)
        .await
        .ctx(what)?
        .ok_or_else(|| format!("{what}: read returned None, but the group has a record"))
}

/// Reads and checks that the store holds exactly `record` at `version`.
async fn expect_record<S: LeaseStore>(
    s: &S,
    g: &GroupName,
    record: &LeaseRecord,
    version: Version,
    what: &str,
) -> Result<(), String> {
    let got = read_some(s, g, what).await?;
    ensure!(
        got.version == version,
        "{what}: read version {}, expected {version} (the version the last applied write returned)",
        got.version
    );
    ensure!(
        &got.record == record,
        "{what}: read back a different record than was written\n    wrote {record:?}\n    read  {:?}",
        got.record
    );
    Ok(())
}

/// Versions to guess that cannot be `actual`: neighbours, extremes.
fn wrong_versions(actual: Option<Version>) -> Vec<Version> {
    let mut guesses = vec![Version(0), Version(1), Version(2), Version(u64::MAX)];
    if let Some(Version(v)) = actual {
        guesses.extend([
            Version(v.wrapping_add(1)),
            Version(v.wrapping_sub(1)),
            Version(v.wrapping_add(1000)),
            Version(v ^ (1 << 63)),
        ]);
    }
    guesses.retain(|g| Some(*g) != actual);
    guesses.sort();
    guesses.dedup();
    guesses
}

type CaseFuture<'a> = Pin<Box<dyn Future<Output = CaseResult> + Send + 'a>>;

pub(super) async fn run_all<H: Harness>(h: &H) -> ConformanceReport {
    let run = Run { id: random_id() };
    // The first handle may panic (an unreachable server); report that as a
    // failed case rather than losing the whole report.
    let probe = CatchUnwind(Box::pin(async { h.store().await.describe() }));
    let store = match tokio::time::timeout(CASE_LIMIT, probe).await {
        Ok(Ok(describe)) => describe,
        failed => {
            let why = match failed {
                Ok(Err(payload)) => format!(
                    "the harness could not open a store: {}",
                    panic_message(payload.as_ref())
                ),
                _ => format!("the harness did not open a store within {CASE_LIMIT:?}"),
            };
            return ConformanceReport {
                store: "(no store)".into(),
                run_id: run.id,
                cases: vec![CaseReport {
                    name: "open_store",
                    outcome: CaseOutcome::Failed(why),
                    elapsed: Duration::ZERO,
                }],
            };
        }
    };
    let r = &run;
    let cases: Vec<(&'static str, CaseFuture<'_>)> = vec![
        ("describe", Box::pin(describe(h))),
        ("acquire_on_empty", Box::pin(acquire_on_empty(h, r))),
        ("conflict", Box::pin(conflict(h, r))),
        ("renew_keeps_token", Box::pin(renew_keeps_token(h, r))),
        (
            "takeover_raises_token",
            Box::pin(takeover_raises_token(h, r)),
        ),
        ("release_then_acquire", Box::pin(release_then_acquire(h, r))),
        ("record_round_trip", Box::pin(record_round_trip(h, r))),
        ("odd_group_names", Box::pin(odd_group_names(h, r))),
        ("concurrent_acquire", Box::pin(concurrent_acquire(h, r))),
        ("concurrent_takeover", Box::pin(concurrent_takeover(h, r))),
        ("corrupt_record_foreign", Box::pin(corrupt_foreign(h, r))),
        ("corrupt_record_too_new", Box::pin(corrupt_too_new(h, r))),
        ("corrupt_record_damaged", Box::pin(corrupt_damaged(h, r))),
        (
            "elector_never_overwrites_undecodable",
            Box::pin(elector_never_overwrites_undecodable(h, r)),
        ),
        ("versions_change", Box::pin(versions_change(h, r))),
        ("changes_feed", Box::pin(changes_feed(h, r))),
    ];
    let mut cases = cases;
    cases.extend(batches::cases(h, r));
    let mut reports = Vec::with_capacity(cases.len());
    for (name, case) in cases {
        reports.push(run_case(name, CASE_LIMIT, case).await);
    }
    ConformanceReport {
        store,
        run_id: run.id,
        cases: reports,
    }
}

/// `describe()` names the store.
async fn describe<H: Harness>(h: &H) -> CaseResult {
    let d = h.store().await.describe();
    ensure!(
        !d.trim().is_empty(),
        "describe() returned an empty string; return something like `sqlite:///path` for logs"
    );
    Ok(Verdict::Pass)
}

/// read → None; CAS(None) → Applied; the record and version read back, from
/// this handle and from another.
async fn acquire_on_empty<H: Harness>(h: &H, run: &Run) -> CaseResult {
    let s = h.store().await;
    let g = run.group("acquire-on-empty")?;
    let before = s.read(&g).await.ctx("read of a never-written group")?;
    ensure!(
        before.is_none(),
        "read of a never-written group returned {before:?}, expected None"
    );
    let rec = held_by("a", 1);
    let v = applied(
        s.compare_and_swap(&g, None, &rec)
            .await
            .ctx("CAS(None) on an empty group")?,
        "CAS(None) on an empty group",
    )?;
    expect_record(&s, &g, &rec, v, "read after acquiring").await?;
    let other = h.store().await;
    expect_record(
        &other,
        &g,
        &rec,
        v,
        "read from another handle after acquiring",
    )
    .await?;
    Ok(Verdict::Pass)
}

/// CAS(None) over a record, and CAS with any wrong version, conflict and
/// write nothing; so does CAS(Some) on an empty group.
async fn conflict<H: Harness>(h: &H, run: &Run) -> CaseResult {
    let s = h.store().await;
    let empty = run.group("conflict-empty")?;
    for guess in wrong_versions(None) {
        let what = format!("CAS({guess}) on a never-written group");
        conflicted(
            s.compare_and_swap(&empty, Some(guess), &held_by("x", 1))
                .await
                .ctx(&what)?,
            &what,
        )?;
    }
    let after = s.read(&empty).await.ctx("read after refused writes")?;
    ensure!(
        after.is_none(),
        "refused CAS(Some(..)) writes on an empty group left a record: {after:?}"
    );

    let g = run.group("conflict")?;
    let rec = held_by("a", 1);
    let v = applied(
        s.compare_and_swap(&g, None, &rec)
            .await
            .ctx("first CAS(None)")?,
        "first CAS(None)",
    )?;
    conflicted(
        s.compare_and_swap(&g, None, &held_by("b", 2))
            .await
            .ctx("CAS(None) over an existing record")?,
        "CAS(None) over an existing record",
    )?;
    expect_record(&s, &g, &rec, v, "read after a refused CAS(None)").await?;
    for guess in wrong_versions(Some(v)) {
        let what = format!("CAS({guess}) when the version is {v}");
        conflicted(
            s.compare_and_swap(&g, Some(guess), &held_by("b", 2))
                .await
                .ctx(&what)?,
            &what,
        )?;
    }
    expect_record(&s, &g, &rec, v, "read after refused wrong-version writes").await?;
    Ok(Verdict::Pass)
}

/// A renewal (same holder and token, current version) applies with a new
/// version; the old version is stale afterwards.
async fn renew_keeps_token<H: Harness>(h: &H, run: &Run) -> CaseResult {
    let s = h.store().await;
    let g = run.group("renew")?;
    let first = held_by("a", 7);
    let v1 = applied(
        s.compare_and_swap(&g, None, &first).await.ctx("acquire")?,
        "acquire",
    )?;
    let mut renewal = first.clone();
    renewal.renewed_at = first.renewed_at + Duration::from_millis(3_000);
    renewal.expires_at = renewal.renewed_at + renewal.term;
    let v2 = applied(
        s.compare_and_swap(&g, Some(v1), &renewal)
            .await
            .ctx("renewal with the current version")?,
        "renewal with the current version",
    )?;
    ensure!(
        v2 != v1,
        "the renewal applied but the version stayed {v1}: every applied write must change the version"
    );
    expect_record(&s, &g, &renewal, v2, "read after renewal").await?;
    ensure!(
        read_some(&s, &g, "read after renewal").await?.record.token == 7,
        "the renewal changed the token"
    );
    conflicted(
        s.compare_and_swap(&g, Some(v1), &renewal)
            .await
            .ctx("a second renewal with the pre-renewal version")?,
        "a second renewal with the pre-renewal version",
    )?;
    Ok(Verdict::Pass)
}

/// Another holder writes token + 1 over the current version; the old leader
/// is fenced out.
async fn takeover_raises_token<H: Harness>(h: &H, run: &Run) -> CaseResult {
    let a = h.store().await;
    let b = h.store().await;
    let g = run.group("takeover")?;
    let v1 = applied(
        a.compare_and_swap(&g, None, &held_by("a", 1))
            .await
            .ctx("a acquires")?,
        "a acquires",
    )?;
    let seen = read_some(&b, &g, "b reads a's record").await?;
    ensure!(
        seen.version == v1,
        "b read version {} right after a wrote {v1}",
        seen.version
    );
    let takeover = held_by("b", seen.record.token + 1);
    let v2 = applied(
        b.compare_and_swap(&g, Some(seen.version), &takeover)
            .await
            .ctx("b takes over with token + 1")?,
        "b takes over with token + 1",
    )?;
    expect_record(&a, &g, &takeover, v2, "a reads after b's takeover").await?;
    conflicted(
        a.compare_and_swap(&g, Some(v1), &held_by("a", 1))
            .await
            .ctx("a renews with its stale version")?,
        "a renews with its stale version after b took over",
    )?;
    expect_record(&b, &g, &takeover, v2, "read after a's refused renewal").await?;
    Ok(Verdict::Pass)
}

/// A release is a write without a holder that keeps the token; the record
/// is never deleted, so the next holder continues from the token.
async fn release_then_acquire<H: Harness>(h: &H, run: &Run) -> CaseResult {
    let a = h.store().await;
    let b = h.store().await;
    let g = run.group("release")?;
    let v1 = applied(
        a.compare_and_swap(&g, None, &held_by("a", 3))
            .await
            .ctx("a acquires")?,
        "a acquires",
    )?;
    let rel = released(3);
    let v2 = applied(
        a.compare_and_swap(&g, Some(v1), &rel)
            .await
            .ctx("a releases")?,
        "a releases",
    )?;
    ensure!(v2 != v1, "the release applied but the version stayed {v1}");
    expect_record(
        &b,
        &g,
        &rel,
        v2,
        "b reads the released record (it must not be deleted)",
    )
    .await?;
    conflicted(
        b.compare_and_swap(&g, None, &held_by("b", 1))
            .await
            .ctx("CAS(None) over a released record")?,
        "CAS(None) over a released record (a release must not delete the record, or tokens restart)",
    )?;
    let next = held_by("b", 4);
    let v3 = applied(
        b.compare_and_swap(&g, Some(v2), &next)
            .await
            .ctx("b acquires the released lease with token + 1")?,
        "b acquires the released lease with token + 1",
    )?;
    expect_record(&a, &g, &next, v3, "a reads b's record").await?;
    Ok(Verdict::Pass)
}

/// Metadata with several keys, unicode and characters that need escaping,
/// filled to exactly the 4 KiB limit, plus extreme numbers, round trip
/// unchanged.
async fn record_round_trip<H: Harness>(h: &H, run: &Run) -> CaseResult {
    let s = h.store().await;
    let g = run.group("round-trip")?;
    let mut md = Metadata::address("10.0.0.7:8080")
        .with("zone", "eu-west-1a")
        .with("ключ", "значение")
        .with("emoji 🦀", "🔒🗝️ 👨‍👩‍👧")
        .with("quotes", r#"he said "hi" \ 'bye' `tick`"#)
        .with("newline and tab", "line one\nline two\tand a NUL \0 too")
        .with("", "empty key")
        .with("empty value", "");
    md.insert("pad", "");
    let base = serde_json::to_vec(&md)
        .map_err(|e| format!("test bug: {e}"))?
        .len();
    ensure!(
        base < MAX_METADATA_BYTES,
        "test bug: base metadata already {base} bytes"
    );
    md.insert("pad", "x".repeat(MAX_METADATA_BYTES - base));
    ensure!(
        md.validate().is_ok(),
        "test bug: metadata of exactly {MAX_METADATA_BYTES} bytes does not validate"
    );

    let mut rec = held_by("a", (1 << 53) + 1);
    rec.holder = Some(Holder {
        id: "ünïcödé holder 🦀".into(),
        incarnation: u64::MAX,
    });
    rec.metadata = md;
    let v = applied(
        s.compare_and_swap(&g, None, &rec)
            .await
            .ctx("write of a record with 4 KiB of metadata")?,
        "write of a record with 4 KiB of metadata",
    )?;
    expect_record(&s, &g, &rec, v, "read of a record with 4 KiB of metadata").await?;

    // Tokens near the top of the range survive too (2^53 + 1 above is the
    // first integer a float-based JSON reader gets wrong).
    let mut top = held_by("b", u64::MAX - 1);
    top.renewed_at = WallTime::from_millis(u64::MAX / 2);
    top.expires_at = top.renewed_at + top.term;
    let v2 = applied(
        s.compare_and_swap(&g, Some(v), &top)
            .await
            .ctx("write of a record with token u64::MAX - 1")?,
        "write of a record with token u64::MAX - 1",
    )?;
    let other = h.store().await;
    expect_record(
        &other,
        &g,
        &top,
        v2,
        "read of a record with token u64::MAX - 1",
    )
    .await?;
    Ok(Verdict::Pass)
}

/// Group names a store might mangle: each is its own group, byte for byte.
async fn odd_group_names<H: Harness>(h: &H, run: &Run) -> CaseResult {
    for bad in ["", "a\nb", "tab\there", "nul\0"] {
        ensure!(
            GroupName::new(bad).is_err(),
            "GroupName::new({bad:?}) was accepted; it must be rejected"
        );
    }
    ensure!(
        GroupName::new("x".repeat(MAX_GROUP_BYTES + 1)).is_err(),
        "a group name of {} bytes was accepted",
        MAX_GROUP_BYTES + 1
    );

    // Pairs that differ only in case, trailing space, unicode normalisation
    // or a pattern character must stay distinct groups.
    let labels = [
        "épée/🦀",
        "名前 with spaces",
        "family 👨‍👩‍👧 and keycap 1️⃣",
        "slash/and\\backslash",
        "../../etc/passwd",
        "quotes ' \" `",
        "percent % and underscore _",
        "star * ? [a-z] {x} ^$ .+",
        "'); DROP TABLE tenure_leases; --",
        "\" OR \"1\"=\"1",
        "redis:key:{hashtag} KEYS *",
        "CamelCase",
        "camelcase",
        "trailing space ",
        "trailing space",
        "nfc \u{e9}",
        "nfd e\u{301}",
        "a",
        "a%",
        "a_",
        "a*",
        "NULL",
        "0",
        "-1",
        "zero\u{200b}width",
    ];
    let mut names = Vec::new();
    for label in labels {
        names.push(run.group(label)?);
    }
    // Exactly at the length limit, in 1-, 2- and 4-byte characters.
    for fill in ['x', 'ü', '🦀'] {
        let mut name = format!("{}-max-", run.id);
        while name.len() + fill.len_utf8() <= MAX_GROUP_BYTES {
            name.push(fill);
        }
        while name.len() < MAX_GROUP_BYTES {
            name.push('.');
        }
        names.push(
            GroupName::new(name)
                .map_err(|e| format!("a name of exactly {MAX_GROUP_BYTES} bytes: {e}"))?,
        );
    }

    let s = h.store().await;
    let mut versions = Vec::new();
    for (i, g) in names.iter().enumerate() {
        let rec = held_by("a", i as u64 + 1);
        let what = format!("CAS(None) on group {:?}", g.as_str());
        versions.push(applied(
            s.compare_and_swap(g, None, &rec).await.ctx(&what)?,
            &what,
        )?);
    }
    // Read everything back after all writes, so a collision shows as a
    // wrong token.
    let other = h.store().await;
    for (i, (g, v)) in names.iter().zip(&versions).enumerate() {
        let got = read_some(&other, g, &format!("read of group {:?}", g.as_str())).await?;
        ensure!(
            got.record.token == i as u64 + 1 && got.version == *v,
            "group {:?} reads token {} at {}, expected token {} at {v}: \
             the store mapped two distinct group names to one key",
            g.as_str(),
            got.record.token,
            got.version,
            i + 1
        );
        let what = format!("renewal on group {:?}", g.as_str());
        applied(
            other
                .compare_and_swap(g, Some(*v), &held_by("a", i as u64 + 1))
                .await
                .ctx(&what)?,
            &what,
        )?;
    }
    Ok(Verdict::Pass)
}

/// Runs `RACERS` compare-and-swaps at once, each on its own handle, after
/// a barrier; returns each racer's outcome.
async fn race<H: Harness>(
    h: &H,
    g: &GroupName,
    expected: Option<Version>,
    token: u64,
) -> Result<Vec<(String, Result<CasOutcome, String>)>, String> {
    let mut handles = Vec::with_capacity(RACERS);
    for _ in 0..RACERS {
        handles.push(h.store().await);
    }
    let barrier = Arc::new(Barrier::new(RACERS));
    let mut tasks = Vec::with_capacity(RACERS);
    for (i, store) in handles.into_iter().enumerate() {
        let barrier = barrier.clone();
        let g = g.clone();
        let id = format!("racer-{i}");
        let rec = held_by(&id, token);
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let r = store
                .compare_and_swap(&g, expected, &rec)
                .await
                .map_err(|e| chain(&e));
            (id, r)
        }));
    }
    let mut results = Vec::with_capacity(RACERS);
    for task in tasks {
        results.push(
            task.await
                .map_err(|e| format!("a racer task failed: {e}"))?,
        );
    }
    Ok(results)
}

/// Exactly one of the racers applied; the read shows it. Returns the
/// winner's version.
async fn one_winner<H: Harness>(
    h: &H,
    g: &GroupName,
    results: &[(String, Result<CasOutcome, String>)],
    token: u64,
    what: &str,
) -> Result<Version, String> {
    let errors: Vec<_> = results
        .iter()
        .filter_map(|(id, r)| r.as_ref().err().map(|e| format!("{id}: {e}")))
        .collect();
    ensure!(
        errors.is_empty(),
        "{what}: {} of {RACERS} racers got an error instead of Applied or Conflict: {}",
        errors.len(),
        errors.join("; ")
    );
    let winners: Vec<_> = results
        .iter()
        .filter_map(|(id, r)| match r {
            Ok(CasOutcome::Applied(v)) => Some((id.clone(), *v)),
            _ => None,
        })
        .collect();
    ensure!(
        winners.len() == 1,
        "{what}: {} of {RACERS} racers got Applied, expected exactly one: {winners:?} \
         (the store's compare-and-swap is not atomic)",
        winners.len()
    );
    let (id, v) = &winners[0];
    let got = read_some(&h.store().await, g, &format!("{what}: read after the race")).await?;
    ensure!(
        got.record.holder_id() == Some(id.as_str())
            && got.record.token == token
            && got.version == *v,
        "{what}: {id} won at {v} with token {token}, but the read shows {:?} with token {} at {}",
        got.record.holder_id(),
        got.record.token,
        got.version
    );
    Ok(*v)
}

/// 16 handles race CAS(None) on an empty group: exactly one wins.
async fn concurrent_acquire<H: Harness>(h: &H, run: &Run) -> CaseResult {
    for round in 0..3 {
        let g = run.group(&format!("race-acquire-{round}"))?;
        let results = race(h, &g, None, 1).await?;
        one_winner(h, &g, &results, 1, &format!("round {round}")).await?;
    }
    Ok(Verdict::Pass)
}

/// 16 handles race to take over the same version: exactly one wins, round
/// after round.
async fn concurrent_takeover<H: Harness>(h: &H, run: &Run) -> CaseResult {
    let g = run.group("race-takeover")?;
    let s = h.store().await;
    let mut version = applied(
        s.compare_and_swap(&g, None, &held_by("first", 1))
            .await
            .ctx("initial acquire")?,
        "initial acquire",
    )?;
    for round in 0..5u64 {
        let token = round + 2;
        let results = race(h, &g, Some(version), token).await?;
        version = one_winner(h, &g, &results, token, &format!("round {round}")).await?;
    }
    Ok(Verdict::Pass)
}

/// Plants `bytes` and checks that reads fail with the expected kind, that
/// CAS(None) still conflicts (a record exists), and that the bytes are
/// untouched.
async fn undecodable<H: Harness>(
    h: &H,
    g: &GroupName,
    bytes: &[u8],
    kind: &str,
    is_kind: fn(&RecordError) -> bool,
) -> Result<(), String> {
    h.plant_raw(g, bytes).await;
    let s = h.store().await;
    for attempt in ["first read", "second read"] {
        match s.read(g).await {
            Err(StoreError::Record { group, source }) => {
                ensure!(
                    &group == g,
                    "{attempt}: the record error names group {:?}, expected {:?}",
                    group.as_str(),
                    g.as_str()
                );
                ensure!(
                    is_kind(&source),
                    "{attempt}: read returned RecordError {source:?}, expected RecordError::{kind}"
                );
            }
            Err(other) => {
                return Err(format!(
                    "{attempt}: read returned {}, expected StoreError::Record(RecordError::{kind})",
                    chain(&other)
                ))
            }
            Ok(v) => {
                return Err(format!(
                    "{attempt}: read of planted bytes {:?} returned {v:?}, expected StoreError::Record(RecordError::{kind})",
                    String::from_utf8_lossy(bytes)
                ))
            }
        }
    }
    conflicted(
        s.compare_and_swap(g, None, &held_by("a", 1))
            .await
            .ctx("CAS(None) over an undecodable record")?,
        "CAS(None) over an undecodable record",
    )?;
    let raw = h.read_raw(g).await;
    ensure!(
        raw.as_deref() == Some(bytes),
        "the planted bytes changed: planted {:?}, now {:?}",
        String::from_utf8_lossy(bytes),
        raw.as_deref().map(String::from_utf8_lossy)
    );
    Ok(())
}

/// Garbage, and JSON that is not a tenure record, read as `Foreign`.
async fn corrupt_foreign<H: Harness>(h: &H, run: &Run) -> CaseResult {
    let cases: [(&str, &[u8]); 4] = [
        ("garbage", b"\x00\xff\xfenot a tenure record\x80"),
        ("empty", b""),
        ("other-json", br#"{"owner":"someone else","ttl":30}"#),
        ("text", b"locked by cron since 2019"),
    ];
    for (label, bytes) in cases {
        let g = run.group(&format!("foreign-{label}"))?;
        undecodable(h, &g, bytes, "Foreign", |e| {
            matches!(e, RecordError::Foreign { .. })
        })
        .await
        .map_err(|e| format!("{label}: {e}"))?;
    }
    Ok(Verdict::Pass)
}

/// A record from a newer format reads as `TooNew`.
async fn corrupt_too_new<H: Harness>(h: &H, run: &Run) -> CaseResult {
    let g = run.group("too-new")?;
    undecodable(h, &g, br#"{"v":99}"#, "TooNew { found: 99 }", |e| {
        matches!(e, RecordError::TooNew { found: 99, .. })
    })
    .await?;
    Ok(Verdict::Pass)
}

/// A tenure record with contradicting fields reads as `Corrupt`.
async fn corrupt_damaged<H: Harness>(h: &H, run: &Run) -> CaseResult {
    let g = run.group("damaged")?;
    let bytes = br#"{"v":1,"holder":{"id":"a","incarnation":1},"token":0,"term_ms":10000,"renewed_at_ms":0,"expires_at_ms":10000}"#;
    undecodable(h, &g, bytes, "Corrupt", |e| {
        matches!(e, RecordError::Corrupt { .. })
    })
    .await?;
    Ok(Verdict::Pass)
}

/// Drives the election [`Machine`] against a store handle, with simulated
/// monotonic time, carrying out every read and compare-and-swap it asks
/// for. Returns the outcome of each compare-and-swap it attempted.
async fn drive_machine<S: LeaseStore>(
    machine: &mut Machine,
    store: &S,
    g: &GroupName,
    clock: &mut u64,
    step: Duration,
    steps: usize,
) -> Vec<(Option<Version>, Result<CasOutcome, String>)> {
    let mut cas = Vec::new();
    let mut inputs = VecDeque::new();
    for _ in 0..steps {
        let input = match inputs.pop_front() {
            Some(input) => input,
            None => {
                *clock += u64::try_from(step.as_nanos()).unwrap_or(u64::MAX);
                Input::Tick
            }
        };
        let now = Now {
            mono: MonoTime::from_nanos(*clock),
            wall: WallTime::now(),
        };
        for action in machine.step(now, input) {
            match action {
                Action::Read { op, .. } => {
                    let result = store.read(g).await;
                    inputs.push_back(Input::ReadDone { op, result });
                }
                Action::Cas {
                    op,
                    expected,
                    record,
                    ..
                } => {
                    let result = store.compare_and_swap(g, expected, &record).await;
                    cas.push((expected, result.as_ref().map(|o| *o).map_err(chain)));
                    inputs.push_back(Input::CasDone { op, result });
                }
                _ => {}
            }
        }
    }
    cas
}

/// What the elector does with an undecodable record: it never writes over
/// it. A candidate that never decoded the record never writes at all; one
/// that saw an older, valid record may try its stale version, which the
/// store must refuse because planting the bytes changed the version.
async fn elector_never_overwrites_undecodable<H: Harness>(h: &H, run: &Run) -> CaseResult {
    let timing = Config::new(Duration::from_secs(10))
        .validate()
        .map_err(|e| format!("test bug: {e}"))?;
    let step = timing.term; // every tick passes a whole term
    let me = Holder {
        id: "testkit-candidate".into(),
        incarnation: rand::random(),
    };
    let garbage: &[u8] = b"\x00\xffnot a tenure record";
    let s = h.store().await;

    // A: the record was undecodable from the start.
    let g = run.group("elector-foreign")?;
    h.plant_raw(&g, garbage).await;
    let start = Now {
        mono: MonoTime::from_nanos(1),
        wall: WallTime::now(),
    };
    let mut clock = 1;
    let mut m = Machine::new(timing.clone(), me.clone(), Metadata::new(), 1, start);
    let cas = drive_machine(&mut m, &s, &g, &mut clock, step, 40).await;
    ensure!(
        cas.is_empty(),
        "a candidate that could never decode the record attempted compare-and-swaps {cas:?}"
    );
    let raw = h.read_raw(&g).await;
    ensure!(
        raw.as_deref() == Some(garbage),
        "the undecodable record changed under a candidate: now {:?}",
        raw.as_deref().map(String::from_utf8_lossy)
    );

    // B: the candidate saw a valid record held by another, then the record
    // became undecodable before the holder's term ran out.
    let g = run.group("elector-went-bad")?;
    applied(
        s.compare_and_swap(&g, None, &held_by("other", 5))
            .await
            .ctx("write of the other holder's record")?,
        "write of the other holder's record",
    )?;
    let mut clock = 1;
    let mut m = Machine::new(timing, me, Metadata::new(), 2, start);
    let first = drive_machine(&mut m, &s, &g, &mut clock, Duration::ZERO, 4).await;
    ensure!(
        first.is_empty(),
        "the candidate wrote over a live lease before its term ran out: {first:?}"
    );
    h.plant_raw(&g, garbage).await;
    let cas = drive_machine(&mut m, &s, &g, &mut clock, step, 40).await;
    let applied_over: Vec<_> = cas
        .iter()
        .filter(|(_, r)| !matches!(r, Ok(CasOutcome::Conflict)))
        .collect();
    ensure!(
        applied_over.is_empty(),
        "compare-and-swaps with a version read before the record went bad were not refused: \
         {applied_over:?} (plant_raw must change the version, and the store must compare it)"
    );
    let raw = h.read_raw(&g).await;
    ensure!(
        raw.as_deref() == Some(garbage),
        "the undecodable record changed under a candidate: now {:?}",
        raw.as_deref().map(String::from_utf8_lossy)
    );
    Ok(Verdict::Pass)
}

/// Every applied write changes the version to one never seen before in
/// the group, and every earlier version is refused afterwards.
async fn versions_change<H: Harness>(h: &H, run: &Run) -> CaseResult {
    let s = h.store().await;
    let g = run.group("versions")?;
    let mut seen = Vec::new();
    let mut token = 1;
    let mut current = applied(
        s.compare_and_swap(&g, None, &held_by("a", token))
            .await
            .ctx("acquire")?,
        "acquire",
    )?;
    seen.push(current);
    for i in 0..24 {
        // Renew, release, take over: every kind of write.
        let rec = match i % 3 {
            0 => held_by("a", token),
            1 => released(token),
            _ => {
                token += 1;
                held_by("a", token)
            }
        };
        let what = format!("write {} (token {token})", i + 2);
        let next = applied(
            s.compare_and_swap(&g, Some(current), &rec)
                .await
                .ctx(&what)?,
            &what,
        )?;
        ensure!(
            !seen.contains(&next),
            "{what} returned {next}, a version the group already had ({seen:?}): \
             a reused version lets a stale writer succeed (ABA)"
        );
        expect_record(&s, &g, &rec, next, &format!("read after {what}")).await?;
        seen.push(next);
        current = next;
    }
    let unique: HashSet<_> = seen.iter().collect();
    ensure!(unique.len() == seen.len(), "versions repeated: {seen:?}");
    for stale in &seen[..seen.len() - 1] {
        let what = format!("CAS with the stale version {stale}");
        conflicted(
            s.compare_and_swap(&g, Some(*stale), &held_by("late", token + 1))
                .await
                .ctx(&what)?,
            &what,
        )?;
    }
    Ok(Verdict::Pass)
}

/// Waits for one hint, up to [`FEED_LIMIT`].
async fn hint(feed: &mut crate::store::ChangeFeed, what: &str) -> Result<Duration, String> {
    let start = std::time::Instant::now();
    match tokio::time::timeout(FEED_LIMIT, feed.changed()).await {
        Ok(Some(())) => Ok(start.elapsed()),
        Ok(None) => Err(format!("{what}: the change feed ended instead of hinting")),
        Err(_) => Err(format!("{what}: no change hint within {FEED_LIMIT:?}")),
    }
}

/// Lets pending hints pass until the feed is quiet for 250 ms; fails if it
/// never is, since an elector would re-read in a busy loop.
async fn drain(feed: &mut crate::store::ChangeFeed) -> Result<(), String> {
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
    let v1 = applied(
        writer
            .compare_and_swap(&g, None, &held_by("a", 1))
            .await
            .ctx("the other handle's first write")?,
        "the other handle's first write",
    )?;
    hint(&mut feed, "after another handle's first write").await?;
    drain(&mut feed).await?;
    applied(
        writer
            .compare_and_swap(&g, Some(v1), &released(1))
            .await
            .ctx("the other handle's release")?,
        "the other handle's release",
    )?;
    hint(&mut feed, "after another handle's release").await?;
    Ok(Verdict::Pass)
}
