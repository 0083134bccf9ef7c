//! nats-server killed for longer than a term, then restarted on its store
//! directory: the leader steps down by its deadline, there is never more
//! than one leader, exactly one leads afterwards, tokens continue (the
//! bucket is on file storage), and the engines' watches work again (a
//! graceful hand-over after the restart is taken over through them, not
//! after a poll).

mod common;

use std::time::Duration;

use tenure_nats::NatsStore;
use tenure_testkit::scenarios;

#[tokio::test(flavor = "multi_thread")]
async fn a_restart_keeps_one_leader_and_the_token_sequence() {
    let mut server = common::Nats::start();
    let url = format!("{}?timeout=1s", server.url("restart"));
    let (sa, sb) = (NatsStore::connect(&url), NatsStore::connect(&url));
    let (sa, sb) = (sa.await.unwrap(), sb.await.unwrap());
    scenarios::one_leader_across_a_restart(sa.clone(), sb.clone(), "NATS", &mut server).await;

    // The engines' watches came back with the server: on the same store
    // handles (so the same engines and feeds), a release with a 60 s term
    // (polls every 15 s) is taken over through the watch.
    let took = scenarios::graceful_handover_via_feed(sa, sb, Duration::from_secs(2)).await;
    eprintln!("nats hand-over after the restart: {took:?}");
}
