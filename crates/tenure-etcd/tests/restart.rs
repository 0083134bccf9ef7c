//! etcd stopped for longer than a term, then restarted on its data: the
//! leader steps down by its deadline, there is never more than one leader,
//! exactly one leads afterwards, and tokens continue (they are persisted).

mod common;

use tenure_etcd::EtcdStore;
use tenure_testkit::scenarios;

#[tokio::test(flavor = "multi_thread")]
async fn a_restart_keeps_one_leader_and_the_token_sequence() {
    let mut server = common::Etcd::start();
    let url = format!("{}?timeout=1s", server.url());
    scenarios::reported_restart("etcd", &url, EtcdStore::connect, &mut server).await;
}
