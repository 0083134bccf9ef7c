//! etcd stopped for longer than a term, then restarted on its data: the
//! leader steps down by its deadline, there is never more than one leader,
//! exactly one leads afterwards, and tokens continue (they are persisted).

mod common;

use std::time::Duration;

use tenure::testkit::{self, scenarios, TermLog};
use tenure_etcd::EtcdStore;

use common::EtcdServer;

#[tokio::test(flavor = "multi_thread")]
async fn a_restart_keeps_one_leader_and_the_token_sequence() {
    let mut server = EtcdServer::start();
    let url = format!("{}?timeout=1s", server.url());
    let group = testkit::unique_group("restart");
    let term = Duration::from_secs(2);
    let a = common::elector(EtcdStore::connect(&url).await.unwrap(), &group, "a", term);
    let b = common::elector(EtcdStore::connect(&url).await.unwrap(), &group, "b", term);
    let log = TermLog::watch(&[&a, &b]);
    scenarios::one_leader_across_a_restart(&a, &b, "etcd", |up| {
        if up {
            server.restart();
        } else {
            server.kill();
        }
    })
    .await;
    a.shutdown().await;
    b.shutdown().await;
    // No two terms overlap, and tokens rose from term to term.
    let spans = log.check();
    assert!(spans.len() >= 2, "{spans:?}");
}
