//! The conformance cases. Each is an async function that returns
//! `Err(explanation)` on the first broken expectation; the explanation names
//! the operation and the values seen, because the reader is debugging a
//! store they may not have written.

use std::collections::{HashSet, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Barrier;

use super::{
    held_by, panic_message, random_id, released, run_case, CaseOutcome, CaseReport, CatchUnwind,
    ConformanceReport, Harness,
};
use tenure::clock::{MonoTime, Now, WallTime};
use tenure::config::Config;
use tenure::error::{error_chain as chain, RecordError, StoreError};
use tenure::machine::{Action, Input, Machine};
use tenure::record::{
    GroupName, Holder, LeaseRecord, Metadata, Version, Versioned, MAX_GROUP_BYTES,
    MAX_METADATA_BYTES,
};
use tenure::store::{CasOutcome, LeaseStore, LeaseView};

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

mod batches;
mod cas;
mod concurrency;
mod corrupt;
mod feed;
mod listing;

/// Names every group of one run, under one random prefix.
struct Run {
    id: String,
}

impl Run {
    fn group(&self, label: &str) -> Result<GroupName, String> {
        GroupName::new(format!("{}-{label}", self.id))
            .map_err(|e| format!("test bug: group name for {label:?}: {e}"))
    }

    /// The groups `{case}-{label}` of one case, one for each label.
    fn groups<const N: usize>(
        &self,
        case: &str,
        labels: [&str; N],
    ) -> Result<[GroupName; N], String> {
        let mut names = Vec::with_capacity(N);
        for label in labels {
            names.push(self.group(&format!("{case}-{label}"))?);
        }
        names
            .try_into()
            .map_err(|_| format!("test bug: not {N} groups for {case:?}"))
    }
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

/// Writes `record` to `g` expecting `expected`; the write must apply.
/// `what` names the step in a failure.
async fn write_applies<S: LeaseStore>(
    s: &S,
    g: &GroupName,
    expected: Option<Version>,
    record: &LeaseRecord,
    what: &str,
) -> Result<Version, String> {
    applied(
        s.compare_and_swap(g, expected, record).await.ctx(what)?,
        what,
    )
}

/// Writes `record` to `g` expecting `expected`; the write must be refused
/// as a conflict. `what` names the step in a failure.
async fn write_conflicts<S: LeaseStore>(
    s: &S,
    g: &GroupName,
    expected: Option<Version>,
    record: &LeaseRecord,
    what: &str,
) -> Result<(), String> {
    conflicted(
        s.compare_and_swap(g, expected, record).await.ctx(what)?,
        what,
    )
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

/// A module's cases, in the order they run: each name with its boxed run.
type Cases<'a> = Vec<(&'static str, CaseFuture<'a>)>;

/// One entry of the list of cases: its name and its boxed run.
fn case<'a>(
    name: &'static str,
    run: impl Future<Output = CaseResult> + Send + 'a,
) -> (&'static str, CaseFuture<'a>) {
    (name, Box::pin(run))
}

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
    // Each module lists its own cases, next to them: a new case is added
    // in one place.
    let cases: Vec<_> = [
        cas::cases(h, r),
        concurrency::cases(h, r),
        corrupt::cases(h, r),
        feed::cases(h, r),
        batches::cases(h, r),
        listing::cases(h, r),
    ]
    .into_iter()
    .flatten()
    .collect();
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
