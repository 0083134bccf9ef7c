//! The DynamoDB store against dynalite (`scripts/servers.sh` starts it;
//! `TENURE_TEST_DYNAMODB` names it): the conformance suite, kinsumer's
//! scenarios at store and elector level, the table checks, and DynamoDB's
//! error replies through a fault proxy. Tests that kill a server start
//! their own.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tenure::store::CasOutcome;
use tenure::{Config, Elector, LeaseStore, LeaseView, StoreError};
use tenure_dynamodb::aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType,
};
use tenure_dynamodb::aws_sdk_dynamodb::Client;
use tenure_dynamodb::{DynamoDbStore, DynamoDbStoreError};
use tenure_testkit::{self as testkit, held_by, released, scenarios, CountingRecorder, TermLog};

mod support;
use support::{
    endpoint, options, raw_item, store, unique_table, DynamoHarness, FaultProxy, PrivateDynalite,
    Reply, TlsFiles, TABLE,
};

#[tokio::test(flavor = "multi_thread")]
async fn conformance() {
    let Some(url) = endpoint() else { return };
    testkit::run_conformance(&DynamoHarness::new(url).await).await;
}

fn elector(store: DynamoDbStore, group: &tenure::GroupName, id: &str, term: Duration) -> Elector {
    Elector::builder(store, group.as_str())
        .candidate_id(id)
        .config(Config::new(term))
        .start()
        .expect("elector")
}

fn n(v: &AttributeValue) -> u64 {
    v.as_n().expect("N").parse().expect("u64")
}

// ---- kinsumer's scenarios, store level ----

/// Acquire, refresh, steal, deregister, and the item as the console shows
/// it after each step.
#[tokio::test(flavor = "multi_thread")]
async fn store_acquire_refresh_steal_deregister() {
    let Some(url) = endpoint() else { return };
    let a = store(&url).await;
    let b = store(&url).await;
    let g = testkit::unique_group("kinsumer-store");

    // Acquire: the first write creates the item.
    let rec_a = held_by("a", 1);
    let v1 = testkit::applied(&a, &g, None, &rec_a).await;
    let item = raw_item(a.client(), TABLE, &g).await.unwrap();
    assert_eq!(item["holder"], AttributeValue::S("a".into()));
    assert_eq!(n(&item["token"]), 1);
    assert_eq!(n(&item["version"]), 1);
    assert_eq!(n(&item["tenure_format"]), 1);
    assert_eq!(n(&item["term_ms"]), 10_000);
    assert_eq!(item["metadata"], AttributeValue::S("{}".into()));
    let text = item["expires_at"].as_s().unwrap();
    assert!(
        text.ends_with('Z') && text.len() == 24,
        "readable expiry: {text}"
    );

    // Refresh: same holder and token, new version.
    let mut renewal = rec_a.clone();
    renewal.renewed_at = rec_a.renewed_at + Duration::from_secs(3);
    renewal.expires_at = renewal.renewed_at + renewal.term;
    let v2 = testkit::applied(&a, &g, Some(v1), &renewal).await;
    let item = raw_item(a.client(), TABLE, &g).await.unwrap();
    assert_eq!(n(&item["version"]), 2);
    assert_eq!(n(&item["token"]), 1);
    assert_eq!(n(&item["renewed_at_ms"]), renewal.renewed_at.as_millis());

    // Steal (what b does once the lease expired by tenure's timing): the
    // new holder and the raised token in one conditional write.
    let seen = b.read(&g).await.unwrap().unwrap();
    assert_eq!(seen.version, v2);
    let rec_b = held_by("b", seen.record.token + 1);
    let v3 = testkit::applied(&b, &g, Some(seen.version), &rec_b).await;
    // The old holder is fenced: its stale version is refused.
    testkit::conflicts(&a, &g, Some(v2), &renewal, "the old holder's renewal").await;
    let item = raw_item(a.client(), TABLE, &g).await.unwrap();
    assert_eq!(item["holder"], AttributeValue::S("b".into()));
    assert_eq!(n(&item["token"]), 2);

    // Deregister: REMOVE holder under the version condition, token kept.
    let v4 = testkit::applied(&b, &g, Some(v3), &released(2)).await;
    let item = raw_item(a.client(), TABLE, &g).await.unwrap();
    assert!(
        !item.contains_key("holder"),
        "released: no holder attribute: {item:?}"
    );
    assert!(!item.contains_key("incarnation"));
    assert_eq!(n(&item["token"]), 2, "the token survives the release");
    // A release with a stale version is refused too (a deposed leader
    // cannot deregister its successor).
    testkit::conflicts(
        &b,
        &g,
        Some(v3),
        &released(2),
        "a release on a stale version",
    )
    .await;
    // Immediate takeover: no expiry to wait for.
    let _ = testkit::applied(&a, &g, Some(v4), &held_by("a", 3)).await;
    assert_eq!(a.read(&g).await.unwrap().unwrap().record.token, 3);
}

/// 16 clients race one conditional write, on an empty group and over a
/// released lease: exactly one wins each time.
#[tokio::test(flavor = "multi_thread")]
async fn store_sixteen_racers_one_winner() {
    let Some(url) = endpoint() else { return };
    let g = testkit::unique_group("kinsumer-race");
    let mut stores = Vec::new();
    for _ in 0..16 {
        stores.push(store(&url).await);
    }
    let mut expected = None;
    for round in 0..3u64 {
        let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(16));
        let mut tasks = Vec::new();
        for (i, s) in stores.iter().enumerate() {
            let (s, g, barrier) = (s.clone(), g.clone(), barrier.clone());
            tasks.push(tokio::spawn(async move {
                let rec = held_by(&format!("racer-{i}"), round + 1);
                barrier.wait().await;
                s.compare_and_swap(&g, expected, &rec).await
            }));
        }
        let mut winners = Vec::new();
        for t in tasks {
            if let CasOutcome::Applied(v) = t.await.unwrap().expect("no errors while racing") {
                winners.push(v);
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: {winners:?}");
        // Release, so the next round races over a released lease.
        let v = testkit::applied(&stores[0], &g, Some(winners[0]), &released(round + 1)).await;
        expected = Some(v);
    }
}

// ---- kinsumer's scenarios, elector level ----

/// A candidate acquires at once, then keeps the lease by renewing.
#[tokio::test(flavor = "multi_thread")]
async fn elector_acquires_and_refreshes() {
    let Some(url) = endpoint() else { return };
    let g = testkit::unique_group("elector-refresh");
    // Long enough that a loaded CI machine's round trips stay well inside
    // the operation deadline (term / 4).
    let a = elector(store(&url).await, &g, "a", Duration::from_secs(4));
    let term = tokio::time::timeout(Duration::from_secs(5), a.wait_for_leadership())
        .await
        .expect("elected")
        .unwrap();
    assert_eq!(term.token(), 1);
    let raw = store(&url).await;
    let v_before = n(&raw_item(raw.client(), TABLE, &g).await.unwrap()["version"]);
    // Two terms long: the lease is refreshed, the term never ends.
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert!(term.is_valid(), "the leader kept its term by renewing");
    let item = raw_item(raw.client(), TABLE, &g).await.unwrap();
    let renewals = n(&item["version"]) - v_before;
    // Renew every term / 3: about 6 in 8 s.
    assert!((4..=9).contains(&renewals), "{renewals} renewals in 8 s");
    assert_eq!(n(&item["token"]), 1, "renewals keep the token");
    a.shutdown().await;
}

/// The leader is cut off from DynamoDB (as if it crashed): it stops before
/// its deadline, and the other candidate steals the lease only after
/// observing it unchanged for a whole term, with the next token.
#[tokio::test(flavor = "multi_thread")]
async fn elector_steals_after_expiry() {
    let Some(url) = endpoint() else { return };
    let upstream: std::net::SocketAddr = url.trim_start_matches("http://").parse().unwrap();
    let proxy = tenure_testkit::TcpProxy::start(upstream).await.unwrap();
    let via_proxy = tenure_dynamodb::DynamoDbStore::connect_with(options(
        &format!("http://{}", proxy.addr()),
        TABLE,
    ))
    .await
    .unwrap();
    let direct = store(&url).await;
    scenarios::crashed_leader_replaced_within_the_bound(via_proxy, direct, &proxy, "DynamoDB")
        .await;
}

/// A graceful stop deregisters (REMOVE holder): the waiting candidate
/// takes over at its next poll, far sooner than the term, with token + 1.
#[tokio::test(flavor = "multi_thread")]
async fn elector_deregisters_and_the_next_takes_over_at_once() {
    let Some(url) = endpoint() else { return };
    // The default term: the hand-over must take one poll (≤ 3.5 s), not
    // the 10 s a crashed leader's lease takes to expire.
    let (a, b) = (store(&url).await, store(&url).await);
    let handed = scenarios::graceful_stop_hands_over_within_one_poll(a, b, "DynamoDB").await;
    let raw = store(&url).await;
    let item = raw_item(raw.client(), TABLE, &handed.group).await.unwrap();
    assert_eq!(item["holder"], AttributeValue::S("b".into()));
    handed.successor.shutdown().await;
    // b's own shutdown deregistered it: no holder, token kept.
    let item = raw_item(raw.client(), TABLE, &handed.group).await.unwrap();
    assert!(!item.contains_key("holder"), "{item:?}");
    assert_eq!(n(&item["token"]), handed.term.token());
}

/// The hand edit the crate docs describe: an `operator` holder with the
/// next token and version. The leader's next renewal is refused and it
/// steps down; the waiting candidate takes over only after the operator's
/// record stood unchanged for its term, so no two terms overlap.
#[tokio::test(flavor = "multi_thread")]
async fn an_operator_can_take_the_lease_by_hand_without_overlap() {
    let Some(url) = endpoint() else { return };
    let g = testkit::unique_group("forced-release");
    let term = Duration::from_secs(4);
    let a = elector(store(&url).await, &g, "a", term);
    let a_term = a.wait_for_leadership().await.unwrap();
    let mut events = a.events();
    let b = elector(store(&url).await, &g, "b", term);
    let log = TermLog::watch(&[&a, &b]);
    let raw = store(&url).await;
    // Read and edit in one conditional write, retrying if the leader
    // renewed in between, as a careful operator would.
    let edited = loop {
        let item = raw_item(raw.client(), TABLE, &g).await.unwrap();
        let (version, token, term_ms) =
            (n(&item["version"]), n(&item["token"]), n(&item["term_ms"]));
        let now = tenure::WallTime::now().as_millis();
        let num = |x: u64| AttributeValue::N(x.to_string());
        let r = raw
            .client()
            .update_item()
            .table_name(TABLE)
            .key("group_name", AttributeValue::S(g.as_str().to_owned()))
            .update_expression(
                "SET holder = :op, incarnation = :zero, #token = :token, version = :next, \
                 renewed_at_ms = :now, expires_at_ms = :exp",
            )
            .condition_expression("version = :v")
            .expression_attribute_names("#token", "token")
            .expression_attribute_values(":op", AttributeValue::S("operator".into()))
            .expression_attribute_values(":zero", num(0))
            .expression_attribute_values(":token", num(token + 1))
            .expression_attribute_values(":next", num(version + 1))
            .expression_attribute_values(":v", num(version))
            .expression_attribute_values(":now", num(now))
            .expression_attribute_values(":exp", num(now + term_ms))
            .send()
            .await;
        if r.is_ok() {
            break Instant::now();
        }
    };
    let reason = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(e) = events.next().await {
            if let tenure::Event::Ousted { reason, .. } = e {
                return reason;
            }
        }
        panic!("no Ousted event")
    })
    .await
    .expect("a steps down at its next renewal");
    assert_eq!(
        reason,
        tenure::EndReason::Superseded {
            by: Some("operator".into())
        }
    );
    // The next leader is whichever candidate wins once the operator's
    // record has stood for its term: b, or a, which stands again after
    // being ousted.
    let next = scenarios::either_leads(
        &a,
        &b,
        Duration::from_secs(15),
        "a candidate takes over once the operator's record expired",
    )
    .await;
    assert!(
        edited.elapsed() >= term,
        "the next leader waited out the operator's term: {:?}",
        edited.elapsed()
    );
    assert!(a_term.is_cancelled());
    assert_eq!(
        next.token(),
        a_term.token() + 2,
        "the operator's token was skipped over"
    );
    log.check();
    a.shutdown().await;
    b.shutdown().await;
}

/// 16 electors on one group: one leader at a time, tokens rising, through
/// two hand-overs.
#[tokio::test(flavor = "multi_thread")]
async fn elector_sixteen_racers_one_leader() {
    let Some(url) = endpoint() else { return };
    let g = testkit::unique_group("elector-race");
    let term = Duration::from_secs(3);
    let mut electors = Vec::new();
    for i in 0..16 {
        electors.push(elector(store(&url).await, &g, &format!("racer-{i}"), term));
    }
    let log = TermLog::watch(&electors.iter().collect::<Vec<_>>());
    for round in 0..3 {
        let deadline = Instant::now() + Duration::from_secs(15);
        let leader = loop {
            let leaders: Vec<usize> = (0..electors.len())
                .filter(|&i| electors[i].is_leader())
                .collect();
            assert!(
                leaders.len() <= 1,
                "round {round}: two leaders at once: {leaders:?}"
            );
            if let [one] = leaders[..] {
                break one;
            }
            assert!(
                Instant::now() < deadline,
                "round {round}: no leader within 15 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        // Everyone else follows the same leader.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let leaders = electors.iter().filter(|e| e.is_leader()).count();
        assert_eq!(leaders, 1, "round {round}");
        electors.remove(leader).shutdown().await;
    }
    let spans = log.check();
    assert_eq!(spans.len(), 3, "{spans:?}");
    for e in &electors {
        e.shutdown().await;
    }
}

// ---- the table ----

/// The text of `e`, after checking it is a misconfiguration (`what` names
/// the case in a failure).
fn misconfigured(e: &DynamoDbStoreError, what: &str) -> String {
    assert!(
        matches!(
            e,
            DynamoDbStoreError::Store(StoreError::Misconfigured { .. })
        ),
        "{what}: {e:?}"
    );
    e.to_string()
}

async fn raw_client(url: &str) -> Client {
    store(url).await.client().clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_table_is_a_clear_error_and_create_makes_it() {
    let Some(url) = endpoint() else { return };
    let table = unique_table("missing");
    let e = DynamoDbStore::connect_with(options(&url, &table))
        .await
        .unwrap_err();
    let text = misconfigured(&e, "connecting");
    assert!(
        text.contains(&format!("table {table} does not exist")),
        "{text}"
    );
    assert!(
        text.contains("create=true") && text.contains("aws dynamodb create-table"),
        "{text}"
    );
    assert!(
        !text.contains("tenure-test-secret"),
        "secret leaked: {text}"
    );

    // A store built without the check finds out on its first operation.
    let client = raw_client(&url).await;
    let unchecked = DynamoDbStore::from_client(client.clone(), &table).unwrap();
    let e = unchecked
        .read(&testkit::unique_group("x"))
        .await
        .unwrap_err();
    testkit::assert_misconfigured(&e, "does not exist");
    let e = unchecked
        .compare_and_swap(&testkit::unique_group("x"), None, &held_by("a", 1))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("does not exist"), "{e}");

    // create=true: on-demand, hash key group_name (S); racing creators all
    // succeed, and exactly one of them created it.
    let url_text = format!(
        "dynamodb://{table}?region=local&endpoint={url}&access_key_id=AKIDTENURETEST&secret_access_key=tenure-test-secret&create=true"
    );
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let u = url_text.clone();
        tasks.push(tokio::spawn(
            async move { DynamoDbStore::connect(&u).await },
        ));
    }
    let mut stores = Vec::new();
    for t in tasks {
        stores.push(t.await.unwrap().expect("create=true connects"));
    }
    assert!(
        !stores[0].describe().contains("tenure-test-secret"),
        "{}",
        stores[0].describe()
    );
    let d = client
        .describe_table()
        .table_name(&table)
        .send()
        .await
        .unwrap()
        .table
        .unwrap();
    assert_eq!(
        d.billing_mode_summary().and_then(|b| b.billing_mode()),
        Some(&BillingMode::PayPerRequest)
    );
    assert_eq!(d.key_schema().len(), 1);
    assert_eq!(d.key_schema()[0].attribute_name(), "group_name");
    assert!(
        !stores[0].create_table_if_missing().await.unwrap(),
        "already there"
    );
    let g = testkit::unique_group("fresh-table");
    testkit::applied(&stores[1], &g, None, &held_by("a", 1)).await;
    delete_table(&client, &table).await;
}

async fn delete_table(client: &Client, table: &str) {
    client
        .delete_table()
        .table_name(table)
        .send()
        .await
        .unwrap();
}

async fn create_table(client: &Client, table: &str, keys: &[(&str, KeyType, ScalarAttributeType)]) {
    let mut req = client
        .create_table()
        .table_name(table)
        .billing_mode(BillingMode::PayPerRequest);
    for (name, kt, at) in keys {
        req = req
            .key_schema(
                KeySchemaElement::builder()
                    .attribute_name(*name)
                    .key_type(kt.clone())
                    .build()
                    .unwrap(),
            )
            .attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name(*name)
                    .attribute_type(at.clone())
                    .build()
                    .unwrap(),
            );
    }
    req.send().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_table_with_another_key_schema_is_refused_naming_it() {
    let Some(url) = endpoint() else { return };
    let client = raw_client(&url).await;
    type Keys = Vec<(&'static str, KeyType, ScalarAttributeType)>;
    let cases: [(&str, Keys, &str); 3] = [
        (
            "wrongname",
            vec![("Key", KeyType::Hash, ScalarAttributeType::S)],
            "[HASH Key (S)]",
        ),
        (
            "wrongtype",
            vec![("group_name", KeyType::Hash, ScalarAttributeType::N)],
            "[HASH group_name (N)]",
        ),
        (
            "sortkey",
            vec![
                ("group_name", KeyType::Hash, ScalarAttributeType::S),
                ("sk", KeyType::Range, ScalarAttributeType::S),
            ],
            "[HASH group_name (S), RANGE sk (S)]",
        ),
    ];
    for (label, keys, shown) in cases {
        let table = unique_table(label);
        create_table(&client, &table, &keys).await;
        for create in [false, true] {
            let e = DynamoDbStore::connect_with(options(&url, &table).create_if_missing(create))
                .await
                .unwrap_err();
            let text = misconfigured(&e, label);
            assert!(text.contains(shown), "{label}: {text}");
            assert!(
                text.contains("hash key group_name of type S"),
                "{label}: {text}"
            );
        }
        // Without the check, the first operation says the same, from
        // DynamoDB's own validation error.
        let unchecked = DynamoDbStore::from_client(client.clone(), &table).unwrap();
        let e = unchecked
            .read(&testkit::unique_group("x"))
            .await
            .unwrap_err();
        assert!(
            matches!(e, StoreError::Misconfigured { .. }),
            "{label}: {e:?}"
        );
        assert!(e.to_string().contains("key schema"), "{label}: {e}");
        delete_table(&client, &table).await;
    }
}

// ---- DynamoDB's error replies, through the fault proxy ----

/// Throttled requests are retried inside the operation, counted in the
/// metric, and the operation succeeds once DynamoDB lets it through.
#[tokio::test(flavor = "current_thread")]
async fn throttled_requests_are_retried_and_counted() {
    let Some(url) = endpoint() else { return };
    store(&url).await; // the table exists
    let proxy = FaultProxy::start(&url).await;
    let recorder = CountingRecorder::default();
    let _guard = metrics::set_default_local_recorder(&recorder);
    let s = DynamoDbStore::connect_with(options(&proxy.endpoint(), TABLE))
        .await
        .unwrap();
    let g = testkit::unique_group("throttled");
    for r in [
        Reply::throughput_exceeded(),
        Reply::throttling(),
        Reply::throughput_exceeded(),
    ] {
        proxy.push(Some("UpdateItem"), r);
    }
    let start = Instant::now();
    let outcome = s
        .compare_and_swap(&g, None, &held_by("a", 1))
        .await
        .unwrap();
    assert!(matches!(outcome, CasOutcome::Applied(_)), "{outcome:?}");
    eprintln!("3 throttled attempts then success in {:?}", start.elapsed());
    proxy.push(Some("GetItem"), Reply::throttling());
    let got = s.read(&g).await.unwrap().unwrap();
    assert_eq!(got.record.holder_id(), Some("a"));
    assert_eq!(proxy.injected(), 4);
    assert_eq!(
        recorder.count("tenure_dynamodb_throttled_total", &[("op", "write")]),
        3
    );
    assert_eq!(
        recorder.count("tenure_dynamodb_throttled_total", &[("op", "read")]),
        1
    );

    // Throttled for longer than the budget: a transient error naming the
    // fix, and the write was never applied.
    let tight = DynamoDbStore::connect_with(
        options(&proxy.endpoint(), TABLE).throttle_budget(Duration::from_millis(300)),
    )
    .await
    .unwrap();
    proxy.throttle_ratio(1.0);
    let e = tight
        .compare_and_swap(&g, Some(got.version), &held_by("b", 2))
        .await
        .unwrap_err();
    proxy.throttle_ratio(0.0);
    assert!(e.is_transient(), "{e:?}");
    assert!(e.to_string().contains("on-demand capacity"), "{e}");
    assert_eq!(
        recorder.count(
            "tenure_dynamodb_throttle_exhausted_total",
            &[("op", "write")]
        ),
        1
    );
    assert_eq!(
        s.read(&g).await.unwrap().unwrap().record.holder_id(),
        Some("a")
    );
}

/// Two electors while DynamoDB throttles a third of all requests: still
/// one leader at a time, and the throttling shows in the metric.
#[tokio::test(flavor = "multi_thread")]
async fn throttling_never_makes_two_leaders() {
    let Some(url) = endpoint() else { return };
    store(&url).await;
    let recorder = Arc::new(CountingRecorder::default());
    // nextest runs each test in its own process, so the global recorder is
    // this test's alone; under `cargo test` another test may hold it.
    let global = metrics::set_global_recorder(recorder.clone()).is_ok();
    let proxy = FaultProxy::start(&url).await;
    proxy.throttle_ratio(0.33);
    let g = testkit::unique_group("throttled-electors");
    let term = Duration::from_secs(2);
    let mut electors = Vec::new();
    for id in ["a", "b", "c"] {
        let s = DynamoDbStore::connect_with(options(&proxy.endpoint(), TABLE))
            .await
            .unwrap();
        electors.push(elector(s, &g, id, term));
    }
    let log = TermLog::watch(&electors.iter().collect::<Vec<_>>());
    let end = Instant::now() + Duration::from_secs(8);
    let mut handovers = 0;
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        if let Some(i) = electors.iter().position(|e| e.is_leader()) {
            // Resign now and then so the lease changes hands under throttling.
            electors[i].resign();
            handovers += 1;
        }
    }
    let spans = log.check();
    eprintln!(
        "{} terms, {handovers} resignations, {} throttled replies, {} forwarded",
        spans.len(),
        proxy.injected(),
        proxy.forwarded()
    );
    assert!(
        spans.len() >= 2,
        "leadership moved under throttling: {spans:?}"
    );
    assert!(proxy.injected() > 0);
    if global {
        let throttled = recorder.count("tenure_dynamodb_throttled_total", &[]);
        assert!(
            throttled > 0 && throttled <= proxy.injected(),
            "{throttled} vs {}",
            proxy.injected()
        );
    }
    for e in &electors {
        e.shutdown().await;
    }
}

/// Permission and credential refusals, as DynamoDB words them, become
/// operator errors naming the fix.
#[tokio::test(flavor = "current_thread")]
async fn refused_permissions_and_credentials_name_the_fix() {
    let Some(url) = endpoint() else { return };
    store(&url).await;
    let proxy = FaultProxy::start(&url).await;
    let s = DynamoDbStore::connect_with(options(&proxy.endpoint(), TABLE))
        .await
        .unwrap();
    let g = testkit::unique_group("denied");

    proxy.push(Some("GetItem"), Reply::access_denied());
    let e = s.read(&g).await.unwrap_err();
    assert!(matches!(e, StoreError::Misconfigured { .. }), "{e:?}");
    let text = e.to_string();
    assert!(text.contains("lack permission"), "{text}");
    assert!(
        text.contains("dynamodb:GetItem, dynamodb:BatchGetItem and dynamodb:UpdateItem"),
        "{text}"
    );

    proxy.push(Some("UpdateItem"), Reply::unrecognized_client());
    let e = s
        .compare_and_swap(&g, None, &held_by("a", 1))
        .await
        .unwrap_err();
    let text = e.to_string();
    assert!(text.contains("refused the credentials"), "{text}");
    assert!(
        !text.contains("tenure-test-secret"),
        "secret leaked: {text}"
    );

    // Connecting without DescribeTable permission still works: the check
    // is skipped, the lease operations do not need it.
    proxy.push(Some("DescribeTable"), Reply::access_denied());
    let s2 = DynamoDbStore::connect_with(options(&proxy.endpoint(), TABLE))
        .await
        .unwrap();
    assert!(s2.read(&g).await.unwrap().is_none());
}

// ---- a server that goes away ----

/// DynamoDB unreachable: a transient error naming the endpoint; after the
/// server comes back (same data), the lease continues where it was.
#[tokio::test(flavor = "multi_thread")]
async fn a_restarted_server_is_transient_and_the_lease_survives() {
    if endpoint().is_none() {
        return;
    }
    let mut server = PrivateDynalite::start(true).await;
    let s = DynamoDbStore::connect_with(options(&server.endpoint(), TABLE).create_if_missing(true))
        .await
        .unwrap();
    let g = testkit::unique_group("restart");
    let v = testkit::applied(&s, &g, None, &held_by("a", 1)).await;
    server.kill().await;
    let e = s.read(&g).await.unwrap_err();
    assert!(e.is_transient(), "{e:?}");
    assert!(
        e.to_string()
            .contains(&format!("127.0.0.1:{}", server.port)),
        "{e}"
    );
    let e = s
        .compare_and_swap(&g, Some(v), &held_by("a", 1))
        .await
        .unwrap_err();
    assert!(e.is_transient(), "{e:?}");
    server.start_again().await;
    let got = s.read(&g).await.unwrap().unwrap();
    assert_eq!(got.version, v);
    testkit::applied(&s, &g, Some(v), &held_by("a", 1)).await;
}

/// HTTPS to a server whose certificate comes from a private CA: refused
/// (rustls does not know the CA) with a message naming `ca=`, and
/// accepted once the CA is given (as `ca`, or by its former name
/// `ca_file`).
#[tokio::test(flavor = "multi_thread")]
async fn https_with_a_private_ca_needs_ca() {
    if endpoint().is_none() {
        return;
    }
    let server = PrivateDynalite::start_tls(TlsFiles::make()).await;
    let e = DynamoDbStore::connect_with(options(&server.endpoint(), TABLE).create_if_missing(true))
        .await
        .unwrap_err();
    let text = misconfigured(&e, "connecting");
    assert!(text.contains("TLS") && text.contains("ca="), "{text}");
    let ca = server.tls().unwrap().ca.display().to_string();
    for option in ["ca_file", "ca"] {
        let url = format!(
            "dynamodb://{TABLE}?region=local&endpoint={}&{option}={ca}&access_key_id=AKIDTENURETEST&secret_access_key=x&create=true",
            server.endpoint()
        );
        let s = DynamoDbStore::connect(&url)
            .await
            .expect("trusted with the CA");
        assert!(
            s.describe().contains(&format!("{option}=")),
            "{}",
            s.describe()
        );
    }
    let s = DynamoDbStore::connect(&format!(
        "dynamodb://{TABLE}?region=local&endpoint={}&ca={ca}&access_key_id=AKIDTENURETEST&secret_access_key=x",
        server.endpoint()
    ))
    .await
    .expect("trusted with ca");
    let g = testkit::unique_group("tls");
    testkit::applied(&s, &g, None, &held_by("a", 1)).await;
    assert_eq!(s.read(&g).await.unwrap().unwrap().record.token, 1);
}

/// Nothing in the standard chain: no region, then no credentials, each a
/// clear error naming where to put them.
#[tokio::test(flavor = "current_thread")]
async fn no_region_or_credentials_in_the_chain_are_clear_errors() {
    let Some(url) = endpoint() else { return };
    // Keep the chain off instance metadata (there is no network to it) and
    // away from the environment and any profile. nextest runs each test in
    // its own process, so this environment is this test's alone; other
    // tests pass explicit region and keys and do not read it.
    std::env::set_var("AWS_EC2_METADATA_DISABLED", "true");
    std::env::set_var("AWS_CONFIG_FILE", "/nonexistent/tenure-test/config");
    std::env::set_var(
        "AWS_SHARED_CREDENTIALS_FILE",
        "/nonexistent/tenure-test/credentials",
    );
    for var in [
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_PROFILE",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    ] {
        std::env::remove_var(var);
    }
    let e = DynamoDbStore::connect(&format!("dynamodb://{TABLE}?endpoint={url}"))
        .await
        .unwrap_err();
    assert!(matches!(e, DynamoDbStoreError::InvalidUrl { .. }), "{e:?}");
    assert!(
        e.to_string().contains("no AWS region") && e.to_string().contains("AWS_REGION"),
        "{e}"
    );

    let e = DynamoDbStore::connect(&format!("dynamodb://{TABLE}?endpoint={url}&region=local"))
        .await
        .unwrap_err();
    let text = misconfigured(&e, "connecting");
    assert!(
        text.contains("no usable AWS credentials") && text.contains("AWS_ACCESS_KEY_ID"),
        "{text}"
    );
}

/// Connecting to nothing: a transient error that names the endpoint.
#[tokio::test(flavor = "current_thread")]
async fn an_unreachable_endpoint_is_transient_and_named() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let e = DynamoDbStore::connect_with(options(&format!("http://127.0.0.1:{port}"), TABLE))
        .await
        .unwrap_err();
    assert!(e.is_transient(), "{e:?}");
    let text = e.to_string();
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    assert!(!text.contains("tenure-test-secret"), "{text}");
}

// ---- the kinsumer duty from the crate docs ----

/// kinsumer's shard-cache refresh, fenced by the token, as in the crate
/// docs: the leader refreshes periodically; after a hand-over the new
/// leader's writes carry a higher token and the deposed leader's are
/// refused.
#[tokio::test(flavor = "multi_thread")]
async fn periodic_shard_cache_refresh_is_fenced() {
    let Some(url) = endpoint() else { return };
    let leases = store(&url).await;
    let client = leases.client().clone();
    let metadata_table = unique_table("kinsumer_metadata");
    create_table(
        &client,
        &metadata_table,
        &[("Key", KeyType::Hash, ScalarAttributeType::S)],
    )
    .await;
    let g = testkit::unique_group("shard-cache");

    async fn refresh(
        client: &Client,
        table: &str,
        token: u64,
        shards: Vec<String>,
    ) -> Result<(), tenure_dynamodb::aws_sdk_dynamodb::Error> {
        let token = AttributeValue::N(token.to_string());
        client
            .put_item()
            .table_name(table)
            .item("Key", AttributeValue::S("ShardCache".into()))
            .item("ShardIDs", AttributeValue::Ss(shards))
            .item("FenceToken", token.clone())
            .condition_expression("attribute_not_exists(FenceToken) OR FenceToken <= :token")
            .expression_attribute_values(":token", token)
            .send()
            .await?;
        Ok(())
    }

    let runs = Arc::new(Mutex::new(Vec::<u64>::new()));
    let mut electors = Vec::new();
    let mut duties = Vec::new();
    for id in ["a", "b"] {
        let e = elector(store(&url).await, &g, id, Duration::from_secs(3));
        let (client, table, runs, e2) = (
            client.clone(),
            metadata_table.clone(),
            runs.clone(),
            e.clone(),
        );
        duties.push(tokio::spawn(async move {
            e2.run_periodic_while_leader(Duration::from_millis(200), |term| {
                let (client, table, runs) = (client.clone(), table.clone(), runs.clone());
                async move {
                    refresh(
                        &client,
                        &table,
                        term.token(),
                        vec!["shardId-000000000000".into()],
                    )
                    .await?;
                    runs.lock().unwrap().push(term.token());
                    Ok::<(), tenure_dynamodb::aws_sdk_dynamodb::Error>(())
                }
            })
            .await
        }));
        electors.push(e);
    }
    let first = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if let Some(e) = electors.iter().find(|e| e.is_leader()) {
                return e.clone();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("a leader");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let first_token = first.current_term().unwrap().token();
    first.shutdown().await;
    let second = electors
        .iter()
        .find(|e| e.candidate_id() != first.candidate_id())
        .unwrap()
        .clone();
    let second_term = tokio::time::timeout(Duration::from_secs(10), second.wait_for_leadership())
        .await
        .expect("hand-over")
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let tokens: Vec<u64> = runs.lock().unwrap().clone();
    assert!(
        tokens.iter().filter(|&&t| t == first_token).count() >= 3,
        "periodic: {tokens:?}"
    );
    assert!(
        tokens.contains(&second_term.token()),
        "the new leader refreshed: {tokens:?}"
    );
    assert!(
        tokens.windows(2).all(|w| w[0] <= w[1]),
        "tokens never fall: {tokens:?}"
    );
    let item = client
        .get_item()
        .table_name(&metadata_table)
        .key("Key", AttributeValue::S("ShardCache".into()))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
        .unwrap();
    assert_eq!(n(&item["FenceToken"]), second_term.token());
    // The deposed leader's late write (a process that woke from a pause)
    // is refused by the fence.
    let late = refresh(&client, &metadata_table, first_token, vec!["stale".into()]).await;
    let err = late.expect_err("a deposed leader's write is fenced out");
    assert!(
        format!("{err:?}").contains("ConditionalCheckFailed"),
        "{err:?}"
    );
    second.shutdown().await;
    for d in duties {
        d.await.unwrap().unwrap();
    }
    delete_table(&client, &metadata_table).await;
}
