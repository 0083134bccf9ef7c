//! The change feed is a hint, never authority: a Redis user allowed to
//! PUBLISH on tenure's channels but not to touch its keys forges records
//! (a release of a held lease, the highest token there is, a transfer
//! request). The waiting candidate reads before it acts, so nothing of it
//! fails, no term is cut short, and the lease moves only as the store
//! says.

mod common;

use std::time::Duration;

use tenure::{LeaseRecord, Role};
use tenure_redis::RedisStore;
use tenure_testkit::{self as testkit, scenarios};

#[tokio::test(flavor = "multi_thread")]
async fn forged_feed_records_from_a_publish_only_user_change_nothing() {
    let Some(server) = testkit::server_url("TENURE_TEST_REDIS") else {
        return;
    };
    let suffix = testkit::unique_suffix();
    let prefix = format!("tenure-forged-{suffix:x}:");
    let url = format!("{server}?prefix={prefix}");
    let a = RedisStore::connect(&url).await.unwrap();
    assert!(a.adopt_empty().await.unwrap());
    let b = RedisStore::connect(&url).await.unwrap();
    let term = Duration::from_secs(2);
    let group = testkit::unique_group("forged");
    let leader = scenarios::elector(a, &group, "a", term);
    let first = scenarios::leads_within(&leader, Duration::from_secs(5), "a elected").await;
    let follower = scenarios::elector(b, &group, "b", term);
    let mut roles = follower.watch_role();
    tokio::time::timeout(
        Duration::from_secs(5),
        roles.wait_for(|r| matches!(r, Role::Follower { .. })),
    )
    .await
    .expect("b follows a")
    .unwrap();

    // The forger: PUBLISH on tenure's channels, no key at all.
    let mut admin = redis::Client::open(server.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let user = format!("tenure-forger-{suffix:x}");
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg(&user)
        .arg("on")
        .arg(">forger-pw")
        .arg(format!("&{prefix}*"))
        .arg("+publish")
        .query_async(&mut admin)
        .await
        .expect("ACL SETUSER");
    let host = server.trim_start_matches("redis://");
    let mut forger = redis::Client::open(format!("redis://{user}:forger-pw@{host}"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let released_at_max = LeaseRecord {
        holder: None,
        ..testkit::held_by("mallory", u64::MAX)
    };
    // A transfer request in a's own record, as the forger saw it go by.
    let seen = RedisStore::connect(&url).await.unwrap();
    let mut transfer = tenure::LeaseView::read(&seen, &group)
        .await
        .unwrap()
        .expect("a's record")
        .record;
    transfer.metadata.insert("tenure.transfer-to", "mallory");
    let channel = format!("{prefix}{}", group.as_str());
    for (version, record) in [
        (u64::MAX / 2, released_at_max),
        (u64::MAX / 2 + 1, transfer),
    ] {
        let mut payload = format!("1:{version}:").into_bytes();
        payload.extend_from_slice(&record.encode());
        let _: i64 = redis::cmd("PUBLISH")
            .arg(&channel)
            .arg(payload)
            .query_async(&mut forger)
            .await
            .expect("the forger may publish");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // A term and a half later: a still leads the same term, b still waits.
    tokio::time::sleep(term * 3 / 2).await;
    assert!(
        follower.fault().is_none(),
        "b failed: {:?}",
        follower.fault()
    );
    assert!(
        matches!(follower.role(), Role::Follower { .. }),
        "{:?}",
        follower.role()
    );
    let now = leader.current_term().expect("a still leads");
    assert_eq!(now.token(), first.token(), "a's term went on");

    // A real hand-over still works, and the token rises from the stored one.
    leader.shutdown().await;
    let next = scenarios::leads_within(&follower, Duration::from_secs(5), "b takes over").await;
    assert_eq!(next.token(), first.token() + 1);
    follower.shutdown().await;
    let _: () = redis::cmd("ACL")
        .arg("DELUSER")
        .arg(&user)
        .query_async(&mut admin)
        .await
        .unwrap();
}
