//! etcd stopped for longer than a term, then restarted on its data: the
//! leader steps down by its deadline, there is never more than one leader,
//! exactly one leads afterwards, and tokens continue (they are persisted).

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tenure::{testkit, Elector};
use tenure_etcd::EtcdStore;

use common::EtcdServer;

#[derive(Clone, Debug)]
struct Span {
    token: u64,
    start: Instant,
    end: Option<Instant>,
}

fn track(e: &Elector, spans: Arc<Mutex<Vec<Span>>>) {
    let e = e.clone();
    tokio::spawn(async move {
        while let Ok(term) = e.wait_for_leadership().await {
            let i = {
                let mut s = spans.lock().unwrap();
                s.push(Span {
                    token: term.token(),
                    start: Instant::now(),
                    end: None,
                });
                s.len() - 1
            };
            term.ended().await;
            spans.lock().unwrap()[i].end = Some(Instant::now());
        }
    });
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restart_keeps_one_leader_and_the_token_sequence() {
    let mut server = EtcdServer::start();
    let url = format!("{}?timeout=1s", server.url());
    let a = common::elector(
        EtcdStore::connect(&url).await.unwrap(),
        &testkit::unique_group("restart"),
        "a",
        Duration::from_secs(2),
    );
    let group = a.group().clone();
    let b = common::elector(
        EtcdStore::connect(&url).await.unwrap(),
        &group,
        "b",
        Duration::from_secs(2),
    );
    let spans = Arc::new(Mutex::new(Vec::new()));
    track(&a, spans.clone());
    track(&b, spans.clone());
    let first = common::one_leader(&[&a, &b], Duration::from_secs(5)).await;
    let old_term = [&a, &b][first].current_term().unwrap();
    let old_deadline = old_term.deadline();

    let t_kill = Instant::now();
    server.kill();
    tokio::time::timeout(Duration::from_secs(4), old_term.ended())
        .await
        .expect("the leader steps down while etcd is away");
    let ended = Instant::now();
    assert!(
        ended <= old_deadline + Duration::from_millis(50),
        "ended {:?} after its deadline",
        ended - old_deadline
    );
    eprintln!(
        "etcd down: leader stepped down {:?} after the kill",
        ended - t_kill
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    server.restart();
    let t_up = Instant::now();

    let next = common::one_leader(&[&a, &b], Duration::from_secs(20)).await;
    let new_term = [&a, &b][next].current_term().unwrap();
    eprintln!(
        "etcd restart: {} elected {:?} after etcd was back, token {} (before: {})",
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
        assert_eq!(
            common::one_leader(&[&a, &b], Duration::from_secs(2)).await,
            next
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    a.shutdown().await;
    b.shutdown().await;
    let spans = spans.lock().unwrap().clone();
    let far = Instant::now() + Duration::from_secs(3600);
    for (i, x) in spans.iter().enumerate() {
        for y in &spans[i + 1..] {
            assert!(
                x.end.unwrap_or(far) <= y.start || y.end.unwrap_or(far) <= x.start,
                "two leaders at once: {x:?} {y:?}"
            );
        }
    }
    assert!(
        spans.windows(2).all(|w| w[0].token < w[1].token),
        "{spans:?}"
    );
}
