//! ZooKeeper killed for longer than a term, then restarted on its data:
//! the leader steps down by its deadline, there is never more than one
//! leader, exactly one leads afterwards, and tokens continue (the nodes,
//! and the sessions, are in ZooKeeper's snapshot and log).

mod common;

use std::time::{Duration, Instant};

use tenure::testkit::{self, TermLog};
use tenure_zookeeper::ZkStore;

use common::{elector, one_leader, ZkServer};

#[tokio::test(flavor = "multi_thread")]
async fn a_restart_keeps_one_leader_and_the_token_sequence() {
    let mut server = ZkServer::start();
    let url = format!("{}?timeout=1s", server.url());
    let group = testkit::unique_group("restart");
    let term = Duration::from_secs(2);
    let a = elector(ZkStore::connect(&url).await.unwrap(), &group, "a", term);
    let b = elector(ZkStore::connect(&url).await.unwrap(), &group, "b", term);
    let log = TermLog::watch(&[&a, &b]);
    let first = one_leader(&[&a, &b], Duration::from_secs(5)).await;
    let old_term = [&a, &b][first].current_term().unwrap();
    let old_deadline = old_term.deadline();

    let t_kill = Instant::now();
    server.kill();
    tokio::time::timeout(Duration::from_secs(4), old_term.ended())
        .await
        .expect("the leader steps down while ZooKeeper is away");
    let ended = Instant::now();
    assert!(
        ended <= old_deadline + Duration::from_millis(50),
        "ended {:?} after its deadline",
        ended - old_deadline
    );
    eprintln!(
        "ZooKeeper down: the leader stepped down {:?} after the kill",
        ended - t_kill
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    server.restart();
    let t_up = Instant::now();

    let next = one_leader(&[&a, &b], Duration::from_secs(20)).await;
    let new_term = [&a, &b][next].current_term().unwrap();
    eprintln!(
        "ZooKeeper restart: {} elected {:?} after ZooKeeper was back, token {} (before: {})",
        [&a, &b][next].candidate_id(),
        t_up.elapsed(),
        new_term.token(),
        old_term.token()
    );
    assert!(
        new_term.token() > old_term.token(),
        "the data survived, so tokens continue"
    );
    for _ in 0..30 {
        assert_eq!(one_leader(&[&a, &b], Duration::from_secs(2)).await, next);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    a.shutdown().await;
    b.shutdown().await;
    // No two terms overlap, and tokens rose from term to term.
    let spans = log.check();
    assert!(spans.len() >= 2, "{spans:?}");
}
