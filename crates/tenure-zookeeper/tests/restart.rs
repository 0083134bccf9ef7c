//! ZooKeeper killed for longer than a term, then restarted on its data:
//! the leader steps down by its deadline, there is never more than one
//! leader, exactly one leads afterwards, and tokens continue (the nodes,
//! and the sessions, are in ZooKeeper's snapshot and log).

mod common;

use tenure_testkit::scenarios;
use tenure_zookeeper::ZkStore;

#[tokio::test(flavor = "multi_thread")]
async fn a_restart_keeps_one_leader_and_the_token_sequence() {
    let mut server = common::Zk::start();
    let url = format!("{}?timeout=1s", server.url());
    scenarios::reported_restart("ZooKeeper", &url, ZkStore::connect, &mut server).await;
}
