//! Many groups on one DynamoDB store handle, against dynalite: batched
//! reads that DynamoDB answers in part (`UnprocessedKeys`), throttles, or
//! refuses for want of `dynamodb:BatchGetItem`; one conditional write
//! failing among many; and 200 groups elected by one engine and followed
//! by a second that polls with one batched read per poll interval.

use std::iter::repeat_n;
use std::time::{Duration, Instant};

use tenure::store::{CasOutcome, CasRequest};
use tenure::{Config, Elector, GroupName, LeaseStore, LeaseView, Role, StoreError, Versioned};
use tenure_dynamodb::DynamoDbStore;
use tenure_testkit::{self as testkit, held_by, many_groups};

mod support;
use support::{endpoint, options, store, FaultProxy, Reply, TABLE};

/// Requests creating each of `groups`, the `i`th held by `holder(i)`.
fn creations(groups: &[GroupName], holder: impl Fn(usize) -> String) -> Vec<CasRequest> {
    groups
        .iter()
        .enumerate()
        .map(|(i, g)| CasRequest {
            group: g.clone(),
            expected: None,
            record: held_by(&holder(i), 1),
        })
        .collect()
}

/// `n` fresh groups named after `label`.
fn fresh_groups(label: &str, n: usize) -> Vec<GroupName> {
    (0..n)
        .map(|i| testkit::unique_group(&format!("{label}-{i}")))
        .collect()
}

/// The throttle budget of the tests whose faults must be outlasted.
const PATIENT: Duration = Duration::from_secs(5);

/// A handle that reaches dynalite through a fault proxy, and the groups
/// written for the test.
struct Behind {
    url: String,
    groups: Vec<GroupName>,
    proxy: FaultProxy,
    store: DynamoDbStore,
}

/// A handle that reaches dynalite through a fault proxy with the given
/// throttle budget; no groups written.
async fn behind_a_proxy(budget: Duration) -> Option<Behind> {
    let url = endpoint()?;
    // A direct handle creates the table if it is missing; the proxied one
    // (opened without create=true) expects it.
    store(&url).await;
    let proxy = FaultProxy::start(&url).await;
    let store =
        DynamoDbStore::connect_with(options(&proxy.endpoint(), TABLE).throttle_budget(budget))
            .await
            .unwrap();
    Some(Behind {
        url,
        groups: Vec::new(),
        proxy,
        store,
    })
}

/// `n` groups written straight to dynalite with records held by `c0`,
/// `c1`, …, behind a proxy as [`behind_a_proxy`] makes one.
async fn written_behind_a_proxy(label: &str, n: usize, budget: Duration) -> Option<Behind> {
    let mut behind = behind_a_proxy(budget).await?;
    behind.groups = fresh_groups(label, n);
    let outcomes = store(&behind.url)
        .await
        .compare_and_swap_many(&creations(&behind.groups, |i| format!("c{i}")))
        .await
        .unwrap();
    for r in outcomes {
        assert!(matches!(r, Ok(CasOutcome::Applied(_))), "{r:?}");
    }
    Some(behind)
}

/// Each of `got` read the record [`written_behind_a_proxy`] wrote: the
/// `i`th held by `c{i}`.
fn read_as_written(got: &[Result<Option<Versioned>, StoreError>], context: &str) {
    for (i, r) in got.iter().enumerate() {
        match r {
            Ok(Some(v)) => assert_eq!(v.record.holder_id(), Some(format!("c{i}").as_str())),
            other => panic!("{context}, group {i}: {other:?}"),
        }
    }
}

/// Keys DynamoDB leaves unprocessed are asked for again until every group
/// is read.
#[tokio::test(flavor = "multi_thread")]
async fn unprocessed_keys_are_asked_for_again() {
    let Some(b) = written_behind_a_proxy("unprocessed", 6, PATIENT).await else {
        return;
    };
    b.proxy
        .push_each("BatchGetItem", repeat_n(Reply::UnprocessedAllButFirst, 3));
    let mut asked = b.groups.clone();
    asked.push(testkit::unique_group("never-written"));
    let got = b.store.read_many(&asked).await.unwrap();
    read_as_written(&got[..6], "the written groups");
    assert!(matches!(got[6], Ok(None)), "{:?}", got[6]);
    // Three answers of one key each, then one request for the other four.
    assert_eq!(b.proxy.requests("BatchGetItem"), 4);
    assert_eq!(b.proxy.requests("GetItem"), 0);
}

/// When unprocessed keys outlast the throttle budget, the groups read so
/// far keep their results and only the unread ones fail, transiently,
/// naming the fix.
#[tokio::test(flavor = "multi_thread")]
async fn keys_still_unprocessed_at_the_budget_fail_alone() {
    let Some(b) = written_behind_a_proxy("unprocessed-long", 8, Duration::from_millis(300)).await
    else {
        return;
    };
    b.proxy
        .push_each("BatchGetItem", repeat_n(Reply::UnprocessedAllButFirst, 8));
    let got = b.store.read_many(&b.groups).await.unwrap();
    let read = got.iter().filter(|r| matches!(r, Ok(Some(_)))).count();
    let failed: Vec<&StoreError> = got.iter().filter_map(|r| r.as_ref().err()).collect();
    eprintln!("{read} read, {} failed", failed.len());
    assert!(read >= 1 && !failed.is_empty() && read + failed.len() == 8);
    for e in failed {
        assert!(e.is_transient(), "{e:?}");
        assert!(e.to_string().contains("on-demand capacity"), "{e}");
    }
}

/// A batched read throttled as a whole is retried like a single read.
#[tokio::test(flavor = "multi_thread")]
async fn a_throttled_batched_read_is_retried() {
    let Some(b) = written_behind_a_proxy("throttled-batch", 3, PATIENT).await else {
        return;
    };
    b.proxy.push_each(
        "BatchGetItem",
        [Reply::throughput_exceeded(), Reply::throttling()],
    );
    let got = b.store.read_many(&b.groups).await.unwrap();
    assert!(got.iter().all(|r| matches!(r, Ok(Some(_)))), "{got:?}");
    assert_eq!(b.proxy.requests("BatchGetItem"), 3);
}

/// Credentials without `dynamodb:BatchGetItem` (a policy written for an
/// older tenure) still read, one `GetItem` per group, from then on.
#[tokio::test(flavor = "multi_thread")]
async fn without_batch_get_permission_reads_fall_back_to_get_item() {
    let Some(b) = written_behind_a_proxy("no-batch-get", 4, PATIENT).await else {
        return;
    };
    b.proxy.push(Some("BatchGetItem"), Reply::access_denied());
    for round in 0..2 {
        let got = b.store.read_many(&b.groups).await.unwrap();
        read_as_written(&got, &format!("round {round}"));
    }
    assert_eq!(
        b.proxy.requests("BatchGetItem"),
        1,
        "asked once, then not again"
    );
    assert_eq!(b.proxy.requests("GetItem"), 8);
}

/// One conditional write of a batch fails; the others apply, and the
/// failed one wrote nothing.
#[tokio::test(flavor = "multi_thread")]
async fn one_failed_write_among_many_fails_alone() {
    // Nothing written beforehand: the batch creates its groups.
    let Some(b) = behind_a_proxy(PATIENT).await else {
        return;
    };
    let groups = fresh_groups("one-fails", 6);
    let requests = creations(&groups, |_| "a".to_owned());
    b.proxy.push(Some("UpdateItem"), Reply::internal_error());
    let got = b.store.compare_and_swap_many(&requests).await.unwrap();
    let failed: Vec<usize> = (0..6).filter(|i| got[*i].is_err()).collect();
    assert_eq!(failed.len(), 1, "{got:?}");
    assert!(got[failed[0]].as_ref().unwrap_err().is_transient());
    let direct = store(&b.url).await;
    for (i, g) in groups.iter().enumerate() {
        let found = direct.read(g).await.unwrap();
        assert_eq!(found.is_some(), i != failed[0], "group {i}: {found:?}");
    }
}

/// Refused credentials in a batch: every entry fails as misconfigured,
/// naming the fix, and no message shows the secret key.
#[tokio::test(flavor = "multi_thread")]
async fn refused_credentials_in_a_batch_name_the_fix_without_the_secret() {
    let Some(b) = written_behind_a_proxy("refused", 3, PATIENT).await else {
        return;
    };
    b.proxy
        .push(Some("BatchGetItem"), Reply::unrecognized_client());
    let mut errors: Vec<StoreError> = b
        .store
        .read_many(&b.groups)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.unwrap_err())
        .collect();
    let requests = creations(&b.groups, |_| "x".to_owned());
    b.proxy
        .push_each("UpdateItem", repeat_n(Reply::unrecognized_client(), 3));
    errors.extend(
        b.store
            .compare_and_swap_many(&requests)
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.unwrap_err()),
    );
    assert_eq!(errors.len(), 6);
    for e in errors {
        assert!(matches!(e, StoreError::Misconfigured { .. }), "{e:?}");
        let text = format!("{e} {e:?}");
        assert!(text.contains("refused the credentials"), "{text}");
        assert!(
            !text.contains(support::SECRET_KEY),
            "shows the secret: {text}"
        );
    }
}

const GROUPS: usize = 200;
const TERM: Duration = Duration::from_secs(10);

fn start(store: &DynamoDbStore, prefix: &str, id: &str) -> Vec<Elector> {
    many_groups::electors_for_groups(store, prefix, GROUPS, id, TERM)
}

async fn wait_until(what: &str, within: Duration, done: impl Fn() -> usize) {
    let began = Instant::now();
    loop {
        let n = done();
        if n == GROUPS {
            eprintln!("{what}: all {GROUPS} after {:.1?}", began.elapsed());
            return;
        }
        assert!(
            began.elapsed() < within,
            "{what}: only {n} of {GROUPS} after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// 200 groups elected by one engine; a second engine (another handle, as
/// another process) follows them all by polling, with about one batched
/// read per poll interval for all of them, never one per group.
#[tokio::test(flavor = "multi_thread")]
async fn two_hundred_groups_lead_on_one_engine_and_followers_poll_in_one_batch() {
    let Some(url) = endpoint() else { return };
    let leading = store(&url).await;
    let following = store(&url).await;
    let prefix = format!("engine-{:x}", testkit::unique_suffix());
    let a = start(&leading, &prefix, "a");
    wait_until("elected", TERM * 4, || {
        a.iter().filter(|e| e.is_leader()).count()
    })
    .await;
    let engine_a = a[0].engine().expect("a lease elector runs in an engine");
    assert_eq!(engine_a.stats().groups, GROUPS as u64, "one engine for all");

    let b = start(&following, &prefix, "b");
    wait_until("following", TERM * 4, || {
        b.iter()
            .filter(|e| matches!(e.role(), Role::Follower { .. }))
            .count()
    })
    .await;
    let engine_b = b[0].engine().unwrap();
    tokio::time::sleep(TERM).await;
    let (a0, b0) = (engine_a.stats(), engine_b.stats());
    let window = TERM * 3;
    tokio::time::sleep(window).await;
    let (a1, b1) = (engine_a.stats(), engine_b.stats());
    // A poll is due a retry interval (plus up to the jitter) after the
    // last: at most ⌊window / interval⌋ + 1 of them fall in the window.
    let timing = Config::new(TERM).validate().unwrap();
    let polls = (window.as_secs_f64() / timing.retry_interval.as_secs_f64()).floor() + 1.0;
    let batches = (b1.read_batches - b0.read_batches) as f64;
    let reads_per_group = (b1.reads - b0.reads) as f64 / GROUPS as f64;
    let renewals = (a1.writes - a0.writes) as f64 / GROUPS as f64 / 3.0;
    eprintln!(
        "leaders: {renewals:.2} writes/group/term in {} batches; followers: {batches} read batches, \
         {reads_per_group:.2} reads per group, for at most {polls} polls",
        a1.write_batches - a0.write_batches
    );
    assert!(
        batches <= polls,
        "{batches} read batches for at most {polls} polls"
    );
    assert!(
        reads_per_group <= polls,
        "{reads_per_group} reads per group"
    );
    assert!(batches >= 2.0, "the followers stopped polling");
    assert_eq!(
        b1.writes, b0.writes,
        "followers wrote while leaders renewed"
    );
    assert!(
        (2.0..=3.0 + 1e-9).contains(&renewals),
        "{renewals} writes per group per term"
    );
    assert_eq!(a.iter().filter(|e| e.is_leader()).count(), GROUPS);
    assert_eq!(b.iter().filter(|e| e.is_leader()).count(), 0);

    // A graceful stop: the followers take over at their next poll.
    let stopping = many_groups::shutdown_all(a.clone());
    wait_until("taken over", TERM * 2, || {
        b.iter().filter(|e| e.is_leader()).count()
    })
    .await;
    stopping.await;
    many_groups::shutdown_all(b).await;
    assert_eq!(engine_b.stats().groups, 0);
}
