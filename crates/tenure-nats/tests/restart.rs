//! nats-server killed for longer than a term, then restarted on its store
//! directory: the leader steps down by its deadline, there is never more
//! than one leader, exactly one leads afterwards, tokens continue (the
//! bucket is on file storage), and the engines' watches work again (a
//! graceful hand-over after the restart is taken over through them, not
//! after a poll).

mod common;

use std::time::{Duration, Instant};

use tenure::testkit::{self, scenarios, TermLog};
use tenure_nats::NatsStore;

use common::NatsServer;

#[tokio::test(flavor = "multi_thread")]
async fn a_restart_keeps_one_leader_and_the_token_sequence() {
    let mut server = NatsServer::start();
    let url = format!("{}?timeout=1s", server.url("restart"));
    let term = Duration::from_secs(2);
    let group = testkit::unique_group("restart");
    let (sa, sb) = (
        NatsStore::connect(&url).await.unwrap(),
        NatsStore::connect(&url).await.unwrap(),
    );
    let a = common::elector(sa.clone(), &group, "a", term);
    let b = common::elector(sb.clone(), &group, "b", term);
    let log = TermLog::watch(&[&a, &b]);
    let first = common::one_leader(&[&a, &b], Duration::from_secs(5)).await;
    let old_term = [&a, &b][first].current_term().unwrap();
    let old_deadline = old_term.deadline();

    let t_kill = Instant::now();
    server.kill();
    tokio::time::timeout(Duration::from_secs(4), old_term.ended())
        .await
        .expect("the leader steps down while NATS is away");
    let ended = Instant::now();
    assert!(
        ended <= old_deadline + Duration::from_millis(50),
        "ended {:?} after its deadline",
        ended - old_deadline
    );
    eprintln!(
        "nats down: leader stepped down {:?} after the kill",
        ended - t_kill
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    server.restart();
    let t_up = Instant::now();

    let next = common::one_leader(&[&a, &b], Duration::from_secs(20)).await;
    let leader = [&a, &b][next];
    let new_term = leader.current_term().unwrap();
    eprintln!(
        "nats restart: {} elected {:?} after the server was back, token {} (before: {})",
        leader.candidate_id(),
        t_up.elapsed(),
        new_term.token(),
        old_term.token()
    );
    assert!(
        new_term.token() > old_term.token(),
        "the bucket survived, so tokens continue"
    );
    for _ in 0..20 {
        assert_eq!(
            common::one_leader(&[&a, &b], Duration::from_secs(2)).await,
            next
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    a.shutdown().await;
    b.shutdown().await;
    log.check();

    // The engines' watches came back with the server: on the same store
    // handles (so the same engines and feeds), a release with a 60 s term
    // (polls every 15 s) is taken over through the watch.
    let took = scenarios::graceful_handover_via_feed(sa, sb, Duration::from_secs(2)).await;
    eprintln!("nats hand-over after the restart: {took:?}");
}
