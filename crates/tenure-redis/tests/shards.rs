//! A sharded set on a real Redis whose database is shared with 200,000
//! keys of something else, so that listing the set's members (a `SCAN`
//! over the whole database) takes longer than the poll at a 2 s term.
//! Eight members started at the same moment used to relist on every
//! member-record change and give up on each listing at the poll: they
//! never saw each other: this test found one member holding all 64 shards
//! and every member seeing only itself after 12 s (and `tenure run --shards
//! 64` × 8 had loads of 52, 16, 10, 8, 6 and 4 CMDs after 40 s). Members
//! now follow each other's records on the change feed.

mod common;

use std::time::Duration;

use tenure_redis::RedisStore;
use tenure_testkit::{catalog, sharded};

#[tokio::test(flavor = "multi_thread")]
async fn eight_members_started_together_balance_beside_200000_other_keys() {
    let server = common::Redis::start(&[]);
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    for chunk in 0..20 {
        let mut pipe = redis::pipe();
        for i in 0..10_000 {
            pipe.cmd("SET")
                .arg(format!("other-app:{chunk}:{i}"))
                .arg("x")
                .ignore();
        }
        let () = pipe.query_async(&mut conn).await.unwrap();
    }
    let first = RedisStore::connect(&server.url()).await.unwrap();
    assert!(first.adopt_empty().await.unwrap());
    let mut handles = vec![first];
    for _ in 1..8 {
        handles.push(RedisStore::connect(&server.url()).await.unwrap());
    }
    let term = Duration::from_secs(2);
    let set = sharded::start_together(handles, "cs", 64, term, None);
    // The documented bound, and time for eight members' first round trips
    // on a loaded machine.
    let within = sharded::settle_bound(term) + Duration::from_secs(5);
    let took = sharded::until_balanced(&set, 64, within).await;
    eprintln!("8 × 64 at 2 s beside 200,000 keys: balanced in {took:?} (bound {within:?})");
    for m in &set {
        m.shutdown().await;
    }
}

/// A set following a changing catalog on Redis, each member on its own
/// connection: the catalog's writes reach the members on the change feed.
#[tokio::test(flavor = "multi_thread")]
async fn three_members_follow_a_split_and_a_removal() {
    let server = common::Redis::start(&[]);
    let mut handles = Vec::new();
    for _ in 0..3 {
        handles.push(RedisStore::connect(&server.url()).await.unwrap());
    }
    catalog::follows_a_split_and_a_removal(handles, "stream", Duration::from_secs(1)).await;
}
