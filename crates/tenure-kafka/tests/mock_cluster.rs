//! The cases tansu gets wrong against librdkafka's own mock cluster, which
//! behaves as Kafka does: a candidate joining while the owner of
//! partition 0 is hung (the hung owner's session, or poll interval,
//! expires, and the newcomer is assigned), and cooperative-sticky
//! assignment (tansu revokes partition 0 from its holder when another
//! member joins).

mod common;

use std::time::{Duration, Instant};

use common::*;
use rdkafka::mocking::MockCluster;
use tenure::{EndReason, Event};

/// The body of the child candidates (returns at once unless run as one).
#[test]
fn child_candidate() {
    child_main();
}

fn cluster(topic: &str) -> MockCluster<'static, rdkafka::producer::DefaultProducerContext> {
    logs();
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic(topic, 1, 1).unwrap();
    cluster
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_candidate_joining_while_the_leader_process_is_hung_takes_over_after_its_session() {
    let group = unique("mock-hung");
    let cfg = config("unused");
    let mock = cluster(&cfg.resolved_topic(&group));
    let brokers = mock.bootstrap_servers();
    let cfg = config(&brokers);
    let mut a = ChildCandidate::spawn("child_candidate", &brokers, &group, "a");
    a.expect("ELECTED", Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_secs(1)).await;

    let hung = Instant::now();
    a.signal(libc::SIGSTOP);
    let rec = Recorder::default();
    let (b, _) = rec.candidate(&cfg, &group, "b");
    let term = leads(
        &b,
        Duration::from_secs(60),
        "b takes over from the hung leader",
    )
    .await;
    taken_over_after_the_session(
        "hung leader (mock cluster), b elected after a hung",
        hung,
        &cfg,
    );
    assert!(term.token() >= 2);
    a.signal(libc::SIGKILL);
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_stops_pulsing_loses_the_partition_through_max_poll_interval() {
    let group = unique("mock-pulse");
    let topic = config("unused").resolved_topic(&group);
    let mock = cluster(&topic);
    let cfg = config(&mock.bootstrap_servers());
    let rec = Recorder::default();
    let coordinator = tenure_kafka::KafkaCoordinator::new(cfg.clone()).unwrap();
    let a = tenure::Elector::with_coordinator(coordinator, &group)
        .candidate_id("a")
        .liveness_timeout(cfg.session_timeout())
        .start()
        .unwrap();
    rec.watch("a", &a);
    let pulser = a.clone();
    let pulsing = tokio::spawn(async move {
        loop {
            pulser.pulse();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    let term = leads(&a, Duration::from_secs(30), "a elected").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    pulsing.abort();
    let silent = Instant::now();
    // b joins at once, while a is still a member that does not poll.
    let (b, _) = rec.candidate(&cfg, &group, "b");
    term.cancelled().await;
    let b_term = leads(&b, Duration::from_secs(60), "b takes over").await;
    let took = silent.elapsed();
    eprintln!(
        "MEASURE stopped pulsing (mock cluster): b elected {took:?} after a's last pulse \
         (max.poll.interval.ms {:?})",
        cfg.session_timeout()
    );
    assert!(b_term.token() > term.token());
    let ousted: Vec<_> = rec
        .events()
        .into_iter()
        .filter_map(|(_, who, e)| match e {
            Event::Ousted { reason, .. } if who == "a" => Some(reason),
            _ => None,
        })
        .collect();
    assert_eq!(ousted.first(), Some(&EndReason::LivenessLost), "{ousted:?}");
    assert!(!a.is_leader());
    b.shutdown().await;
    a.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cooperative_sticky_assignment_keeps_the_leader_and_hands_over_without_overlap() {
    let group = unique("mock-sticky");
    let mock = cluster(&config("unused").resolved_topic(&group));
    let cfg = config(&mock.bootstrap_servers())
        .property("partition.assignment.strategy", "cooperative-sticky");
    let (a, _) = candidate(&cfg, &group, "a");
    let first = leads(&a, Duration::from_secs(30), "a elected").await;
    let (b, _) = candidate(&cfg, &group, "b");
    let log = tenure_testkit::TermLog::watch(&[&a, &b]);
    // b's join rebalances incrementally: partition 0 stays with a, whose
    // term is never interrupted.
    let mut roles = b.watch_role();
    tokio::time::timeout(
        Duration::from_secs(30),
        roles.wait_for(
            |r| matches!(r, tenure::Role::Follower { leader } if leader.candidate == "a"),
        ),
    )
    .await
    .expect("b follows a")
    .unwrap();
    tokio::time::sleep(cfg.session_timeout()).await;
    assert!(first.is_valid(), "a's term survived b's join: {first:?}");
    assert_eq!(a.current_term().map(|t| t.token()), Some(first.token()));
    let stop = Instant::now();
    a.shutdown().await;
    let term = leads(&b, Duration::from_secs(30), "b takes over").await;
    eprintln!(
        "MEASURE cooperative-sticky graceful hand-over: {:?}",
        stop.elapsed()
    );
    // (How long the mock cluster takes to rebalance after a's LeaveGroup
    // varies with the machine's load, 5 to 9 s here: not asserted.)
    assert!(term.token() > first.token());
    b.shutdown().await;
    log.check();
}
