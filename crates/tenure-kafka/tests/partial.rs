//! Partial partitions and pauses against a private tansu broker behind a
//! Kafka-aware proxy, checking that no two terms' validity overlaps (the
//! testkit's term log), not only who leads in the end.

mod common;

use std::time::{Duration, Instant};

use common::kproxy::KafkaProxy;
use common::*;
use tenure::testkit::TermLog;
use tenure_kafka::KafkaConfig;

/// A private broker behind a proxy, with the group's topic created.
async fn proxied(group: &str) -> Option<(Tansu, KafkaProxy, KafkaConfig)> {
    let (listener, port) = KafkaProxy::bind().await;
    let tansu = Tansu::start_advertising(port).await?;
    let proxy = KafkaProxy::forward(listener, tansu.listen.parse().unwrap());
    let cfg = KafkaConfig {
        create_topic: false,
        ..config(&proxy.addr())
    };
    tansu.create_topic(&cfg.resolved_topic(group)).await;
    Some((tansu, proxy, cfg))
}

/// A candidate whose clients call themselves `id` (for the proxy).
fn named(cfg: &KafkaConfig, group: &str, id: &str) -> tenure::Elector {
    candidate(&cfg.clone().property("client.id", id), group, id).0
}

/// Two settled candidates; `cut` is applied to the leader; the other must
/// take over, with no overlap of the terms. Returns the takeover time.
async fn take_over_after(
    label: &str,
    cut: impl Fn(&KafkaProxy, &str),
    heal_after: Duration,
) -> Option<Duration> {
    let group = unique(label);
    let (_tansu, proxy, cfg) = proxied(&group).await?;
    let a = named(&cfg, &group, "a");
    tokio::time::timeout(Duration::from_secs(30), a.wait_for_leadership())
        .await
        .expect("a elected")
        .unwrap();
    let b = named(&cfg, &group, "b");
    let log = TermLog::watch(&[&a, &b]);
    settle(&[&a, &b]).await;
    let (leader, other) = if a.is_leader() { (&a, &b) } else { (&b, &a) };
    let start = Instant::now();
    cut(&proxy, leader.candidate_id());
    tokio::time::timeout(Duration::from_secs(90), other.wait_for_leadership())
        .await
        .expect("the other candidate takes over")
        .unwrap();
    let took = start.elapsed();
    eprintln!(
        "MEASURE {label}: {} elected {took:?} after the cut (session timeout {:?})",
        other.candidate_id(),
        cfg.session_timeout()
    );
    tokio::time::sleep(heal_after).await;
    proxy.heal(leader.candidate_id());
    settle(&[&a, &b]).await;
    let spans = log.check();
    eprintln!("terms: {spans:?}");
    a.shutdown().await;
    b.shutdown().await;
    Some(took)
}

/// The leader keeps producing and reading its heartbeats and believes it
/// is still a member (a stale coordinator answers its group heartbeats),
/// while the real coordinator expires its session and gives partition 0
/// away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_group_session_lapses_unnoticed_never_overlaps_its_successor() {
    let _ = take_over_after("zombie", |p, id| p.zombie(id), Duration::from_secs(4)).await;
}

/// The leader loses its route to the group coordinator only: its own
/// session timer and the coordinator's race.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_the_group_coordinator_only_never_overlaps_its_successor() {
    let _ = take_over_after("coord-cut", |p, id| p.cut_group(id), Duration::from_secs(4)).await;
}
