//! Lost replies and ended sessions: a request whose reply never came may
//! have been applied, and the store says so (a transient error, never a
//! conflict and never "applied"); a session that ended is replaced, and
//! the store goes on with the versions it knew.

mod common;

use std::time::Duration;

use tenure::store::CasOutcome;
use tenure::{GroupName, LeaseStore, LeaseView, StoreError};
use tenure_testkit::{self as testkit, held_by, released, TcpProxy};
use tenure_zookeeper::ZkStore;

fn ambiguous(result: Result<CasOutcome, StoreError>, what: &str) {
    match result {
        Err(e) if e.is_transient() => {
            assert!(
                matches!(e, StoreError::Timeout(_)) || e.to_string().contains("may or may not"),
                "{what}: the error must say the outcome is unknown: {e}"
            );
        }
        other => panic!("{what}: a lost reply must be an error of unknown outcome, got {other:?}"),
    }
}

/// The proxy lets the requests through and throws the replies away: the
/// create and the overwrite are applied by ZooKeeper, and the store
/// reports neither as applied nor as a conflict. Once healed, the same
/// handle sees what happened.
#[tokio::test(flavor = "multi_thread")]
async fn a_write_whose_reply_is_lost_is_reported_as_unknown() {
    let Some(server) = testkit::server_url("TENURE_TEST_ZOOKEEPER") else {
        return;
    };
    let prefix = common::unique_prefix("lost-reply");
    let hosts = common::hosts(&server);
    let target: std::net::SocketAddr = hosts.parse().expect("a 127.0.0.1:PORT server");
    let proxy = TcpProxy::start(target).await.unwrap();
    let via = ZkStore::connect(&format!("zk://{}{prefix}?timeout=1s", proxy.addr()))
        .await
        .unwrap();
    let direct = ZkStore::connect(&format!("{server}{prefix}"))
        .await
        .unwrap();
    let (fresh, old) = (
        testkit::unique_group("created"),
        testkit::unique_group("replaced"),
    );
    let v1 = common::write_held_by(&via, &old, None, "a").await;
    // Renewed once: the first write over a node gives it its guard (one
    // more request, which would be the one whose reply is lost).
    let v1 = common::write_held_by(&via, &old, Some(v1), "a").await;

    proxy.drop_replies();
    ambiguous(
        via.compare_and_swap(&fresh, None, &held_by("lost", 1))
            .await,
        "a create whose reply was lost",
    );
    ambiguous(
        via.compare_and_swap(&old, Some(v1), &released(1)).await,
        "an overwrite whose reply was lost",
    );
    // They were applied all the same.
    let created = direct
        .read(&fresh)
        .await
        .unwrap()
        .expect("the create applied");
    assert_eq!(created.record.holder_id(), Some("lost"));
    let replaced = direct.read(&old).await.unwrap().expect("a record");
    assert!(replaced.version > v1, "the overwrite applied");
    assert_eq!(replaced.record.holder_id(), None, "released");

    proxy.heal();
    // The same handle reconnects (same session) and now gets the definite
    // answers: its retries conflict, and a read shows its writes.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let again = loop {
        match via.compare_and_swap(&old, Some(v1), &released(1)).await {
            Ok(outcome) => break outcome,
            Err(e) if e.is_transient() && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("after the heal: {e}"),
        }
    };
    assert_eq!(again, CasOutcome::Conflict, "the first attempt had applied");
    assert_eq!(
        via.read(&old).await.unwrap().unwrap().version,
        replaced.version
    );
    testkit::conflicts(
        &via,
        &fresh,
        None,
        &held_by("again", 1),
        "creating the group whose lost create applied",
    )
    .await;
}

/// Cut off for longer than its session timeout, the handle's session
/// expires (on the server, and in the client). Requests meanwhile fail as
/// unknown; once the network is back, the handle opens a new session by
/// itself and goes on: its versions still hold (they are zxids, not
/// session-bound), and both change feeds come back.
#[tokio::test(flavor = "multi_thread")]
async fn an_expired_session_is_replaced_and_the_store_goes_on() {
    let server = common::Zk::start();
    let proxy = TcpProxy::start(server.addr()).await.unwrap();
    let (via, direct) = common::proxied_and_direct(&proxy, &server.url(), "/expiry", "1s").await;
    let g = GroupName::new("g").unwrap();
    let mut feed = via.watch().await.unwrap().expect("a store-wide feed");
    let mut hints = via.changes(&g).await.unwrap().expect("a per-group feed");
    let v1 = common::write_held_by(&via, &g, None, "a").await;

    proxy.cut();
    ambiguous(
        via.compare_and_swap(&g, Some(v1), &held_by("a", 1)).await,
        "a renewal while cut off",
    );
    // Well past the session timeout (1 s; the client gives up on its own
    // at 1.4 s), so the session is gone on both sides.
    tokio::time::sleep(Duration::from_secs(4)).await;
    proxy.heal();

    // The handle's next requests open a new session.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let v2 = loop {
        match via.compare_and_swap(&g, Some(v1), &held_by("a", 1)).await {
            Ok(CasOutcome::Applied(v)) => break v,
            Err(e) if e.is_transient() && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => panic!("a renewal on the new session: {other:?}"),
        }
    };
    assert!(v2 > v1);

    // The store-wide feed watched again on the new session and asks every
    // group to read once (what happened meanwhile was not watched); then
    // it reports writes as before.
    let within = Duration::from_secs(10);
    loop {
        let change = tokio::time::timeout(within, feed.next())
            .await
            .expect("the feed asks for a resync after the session expired")
            .expect("the feed goes on");
        if change == tenure::store::Change::Resync {
            break;
        }
    }
    let v3 = common::write_held_by(&direct, &g, Some(v2), "b").await;
    loop {
        let change = tokio::time::timeout(within, feed.next())
            .await
            .expect("the feed reports writes on the new session")
            .expect("the feed goes on");
        if let tenure::store::Change::Written { group, current } = change {
            if group == g && current.version == v3 {
                break;
            }
        }
    }
    // The per-group feed armed its watch again too: a later write hints.
    while tokio::time::timeout(Duration::from_millis(300), hints.changed())
        .await
        .is_ok()
    {}
    common::write_held_by(&direct, &g, Some(v3), "c").await;
    tokio::time::timeout(within, hints.changed())
        .await
        .expect("a hint after the session expired")
        .expect("the per-group feed goes on");
}
