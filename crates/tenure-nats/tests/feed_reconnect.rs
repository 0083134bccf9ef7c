//! The store-wide feed across lost connections: each time the connection
//! through a proxy is cut (a write lands meanwhile) and healed, the feed
//! sends `Resync` and then carries the next write again; the watches it
//! left behind on the server go away (no consumer per reconnect).

mod common;

use std::time::Duration;

use async_nats::jetstream;
use tenure::store::{Change, StoreFeed};
use tenure::LeaseView;
use tenure_nats::NatsStore;
use tenure_testkit::{self as testkit, held_by, TcpProxy};

/// Generous: a reconnect takes the client's back-off and the feed's.
const PATIENCE: Duration = Duration::from_secs(30);

/// The next change that is not a hint, within `PATIENCE`.
async fn next_change(feed: &mut StoreFeed) -> Change {
    tokio::time::timeout(PATIENCE, async {
        loop {
            match feed.next().await.expect("the feed is open") {
                Change::Hint { .. } => continue,
                change => return change,
            }
        }
    })
    .await
    .expect("a change in time")
}

#[tokio::test(flavor = "multi_thread")]
async fn each_reconnect_resyncs_then_carries_writes_and_leaves_no_consumer_behind() {
    let server = common::Nats::start();
    let proxy = TcpProxy::start(server.addr()).await.unwrap();
    let direct = NatsStore::connect(&server.url("reconnect")).await.unwrap();
    let via_proxy = NatsStore::connect(&format!("nats://{}/reconnect?timeout=1s", proxy.addr()))
        .await
        .unwrap();
    let mut feed = via_proxy.watch().await.unwrap().expect("a feed");
    let group = testkit::unique_group("reconnect");
    let mut version = testkit::applied(&direct, &group, None, &held_by("a", 1)).await;
    let c = next_change(&mut feed).await;
    assert!(
        matches!(&c, Change::Written { group: g, current } if g == &group && current.version == version),
        "{c:?}"
    );
    for round in 2..5u64 {
        proxy.cut();
        // Written while the feed's connection is cut: the Resync covers it.
        let v = testkit::applied(&direct, &group, Some(version), &held_by("a", round)).await;
        proxy.heal();
        loop {
            match next_change(&mut feed).await {
                Change::Resync => break,
                // The cut write, delivered before the connection went.
                Change::Written { current, .. } if current.version == v => {}
                other => panic!("round {round}: {other:?} before the Resync"),
            }
        }
        let after = testkit::applied(&direct, &group, Some(v), &held_by("a", round * 10)).await;
        let c = next_change(&mut feed).await;
        assert!(
            matches!(&c, Change::Written { current, .. } if current.version == after),
            "round {round}: the write after the reconnect: {c:?}"
        );
        version = after;
    }
    // The watches of the cut connections expire on the server (30 s
    // without interest); the live one stays.
    let js = jetstream::new(
        async_nats::connect(server.addr().to_string())
            .await
            .unwrap(),
    );
    let mut stream = js.get_stream("KV_reconnect").await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let consumers = stream.info().await.unwrap().state.consumer_count;
        if consumers == 1 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{consumers} consumers on the stream two minutes after the reconnects"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // And the live one still carries writes.
    let last = testkit::applied(&direct, &group, Some(version), &held_by("b", 99)).await;
    let c = next_change(&mut feed).await;
    assert!(
        matches!(&c, Change::Written { current, .. } if current.version == last),
        "{c:?}"
    );
}
