//! Partial partitions and pauses against a private tansu broker behind a
//! Kafka-aware proxy, checking that no two terms' validity overlaps (the
//! testkit's term log), not only who leads in the end.

mod common;

use std::time::{Duration, Instant};

use common::kproxy::KafkaProxy;
use common::*;
use tenure_kafka::KafkaConfig;
use tenure_testkit::TermLog;

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
    ends_within: Option<Duration>,
) -> Option<Duration> {
    let group = unique(label);
    let (_tansu, proxy, cfg) = proxied(&group).await?;
    let a = named(&cfg, &group, "a");
    leads(&a, Duration::from_secs(30), "a elected").await;
    let b = named(&cfg, &group, "b");
    let log = TermLog::watch(&[&a, &b]);
    settle(&[&a, &b]).await;
    let (leader, other) = if a.is_leader() { (&a, &b) } else { (&b, &a) };
    let term = leader.current_term().expect("settled on a leader");
    let start = Instant::now();
    cut(&proxy, leader.candidate_id());
    if let Some(bound) = ends_within {
        tokio::time::timeout(bound, term.ended())
            .await
            .expect("the cut-off leader's term ends in time");
        eprintln!(
            "MEASURE {label}: the leader's term ended {:?} after the cut",
            start.elapsed()
        );
    }
    leads(
        other,
        Duration::from_secs(90),
        "the other candidate takes over",
    )
    .await;
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
    let _ = take_over_after("zombie", |p, id| p.zombie(id), Duration::from_secs(4), None).await;
}

/// The leader loses its route to the group coordinator only: its own
/// session timer and the coordinator's race. It is fenced once the
/// coordinator has been silent for a heartbeat timeout, well before its
/// session (three of them) can expire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_the_group_coordinator_only_never_overlaps_its_successor() {
    let session = config("unused").session_timeout();
    let _ = take_over_after(
        "coord-cut",
        |p, id| p.cut_group(id),
        Duration::from_secs(4),
        Some(session.checked_sub(H).unwrap()),
    )
    .await;
}

/// Not a test of its own: the body of the child candidates (it returns at
/// once unless run as one).
#[test]
fn child_candidate() {
    child_main();
}

/// Waits until exactly one child leads and nothing changed for 6 s;
/// returns its index.
async fn settled(kids: &mut [ChildCandidate]) -> usize {
    let mut leading = vec![false; kids.len()];
    let mut quiet_since = Instant::now();
    let start = Instant::now();
    loop {
        for (i, kid) in kids.iter_mut().enumerate() {
            while let Ok(line) = kid.lines.try_recv() {
                if line.starts_with("ELECTED") {
                    leading[i] = true;
                    quiet_since = Instant::now();
                } else if line.starts_with("OUSTED") {
                    leading[i] = false;
                    quiet_since = Instant::now();
                }
            }
        }
        if leading.iter().filter(|l| **l).count() == 1
            && quiet_since.elapsed() > Duration::from_secs(6)
        {
            return leading.iter().position(|l| *l).unwrap();
        }
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "no stable leader: {leading:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Hole 2 as a pause: the leader's process is stopped for more than its
/// session timeout, the other candidate takes over, and the paused one
/// wakes with an assignment it has lost. Validity is checked on the boot
/// clock, as each child reports its terms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_paused_past_its_session_never_overlaps_its_successor_when_it_wakes() {
    let Some(brokers) = broker() else { return };
    let group = unique("pause");
    let session = config(&brokers).session_timeout();
    let mut kids = [
        ChildCandidate::spawn("child_candidate", &brokers, &group, "a"),
        ChildCandidate::spawn("child_candidate", &brokers, &group, "b"),
    ];
    let paused = settled(&mut kids).await;
    let other = 1 - paused;
    let stop = Instant::now();
    kids[paused].signal(libc::SIGSTOP);
    kids[other].expect("ELECTED", Duration::from_secs(60)).await;
    eprintln!(
        "MEASURE pause: the other candidate elected {:?} after the leader stopped",
        stop.elapsed()
    );
    // Stopped for at least the session timeout plus a heartbeat timeout.
    tokio::time::sleep((session + H).saturating_sub(stop.elapsed())).await;
    kids[paused].signal(libc::SIGCONT);
    // Let the woken one act on what it believes, then stop both.
    tokio::time::sleep(session).await;
    for kid in &mut kids {
        kid.stop().await;
    }
    let spans: Vec<(String, Span)> = kids
        .iter()
        .zip(["a", "b"])
        .flat_map(|(k, who)| k.spans().into_iter().map(move |s| (who.to_owned(), s)))
        .collect();
    eprintln!("terms: {spans:?}");
    assert!(spans.len() >= 2, "both led at some point: {spans:?}");
    check_spans(&spans);
}

/// Hole 4: a memory-storage broker restarts (every topic, record and group
/// gone) and the topic is created again: offsets, hence tokens, would
/// restart below ones already handed out. The candidate stops with a
/// typed fault instead of leading with a lower token.
///
/// Behind the proxy capping Fetch at version 12 (see [`KafkaProxy`]): tansu
/// answers a fetch for a topic it lost with leader hints that librdkafka
/// 2.12 crashes on when it fetches by topic id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recreated_topic_stops_the_candidate_with_a_typed_fault() {
    let group = unique("recreated");
    let (listener, port) = KafkaProxy::bind().await;
    let Some(mut tansu) = Tansu::start_advertising(port).await else {
        return;
    };
    let proxy = KafkaProxy::forward(listener, tansu.listen.parse().unwrap());
    proxy.cap_fetch(12);
    let cfg = KafkaConfig {
        create_topic: false,
        ..config(&proxy.addr())
    };
    let topic = cfg.resolved_topic(&group);
    tansu.create_topic(&topic).await;
    // Records written before, so tokens are high: 300 of them.
    let filler: Vec<Vec<u8>> = (0..300)
        .map(|i| format!("filler {i}").into_bytes())
        .collect();
    produce_raw(&proxy.addr(), &topic, &filler);
    let (a, status) = candidate(&cfg, &group, "a");
    let term = leads(&a, Duration::from_secs(30), "a elected").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let token = a.current_term().expect("still leading").token();
    assert!(token > 300, "{token}");
    tansu.restart().await;
    tansu.create_topic(&topic).await;
    let err = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            match a.wait_for_leadership().await {
                Ok(t) => {
                    assert!(
                        t.token() >= token,
                        "led again with a lower token: {} after {token}",
                        t.token()
                    );
                    t.ended().await;
                }
                Err(e) => return e,
            }
        }
    })
    .await
    .expect("the candidate stops");
    eprintln!("stopped with: {err}");
    assert!(
        matches!(
            &err,
            tenure::ElectorError::Failed(tenure::Fault::TokenRegressed { highest, next })
                if *highest > *next && *highest >= token
        ),
        "{err:?}"
    );
    assert!(term.is_cancelled());
    let fatal = status
        .fatal_error()
        .expect("kept in the status")
        .to_string();
    assert!(
        fatal.contains(&topic) && fatal.contains("recreated"),
        "{fatal}"
    );
}

/// The last heartbeat of `candidate` in partition 0 of `topic`, as JSON.
fn last_heartbeat_of(brokers: &str, topic: &str, candidate: &str) -> serde_json::Value {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::Message;
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "forger")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, rdkafka::Offset::OffsetTail(20))
        .unwrap();
    consumer.assign(&tpl).unwrap();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(20) {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
            if let Some(v) = m
                .payload()
                .and_then(|p| serde_json::from_slice::<serde_json::Value>(p).ok())
                .filter(|v| v["candidate"] == candidate && v["token"].is_u64())
            {
                return v;
            }
        }
    }
    panic!("no heartbeat of {candidate} in {topic}");
}

/// Hole 5: records written by a plain producer, as anyone with write
/// access to the topic could: an impossible token, a heartbeat of another
/// group sharing the topic, a copy of the leader's own heartbeat sent "in
/// the future" with a sequence number it never used, an absurd timeout.
/// None deposes the leader, renews it, or poisons an observer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_forged_by_a_plain_producer_neither_depose_renew_nor_poison() {
    let Some(brokers) = broker() else { return };
    let group = unique("forged");
    let cfg = config(&brokers);
    let topic = cfg.resolved_topic(&group);
    let (a, _) = candidate(&cfg, &group, "a");
    let log = TermLog::watch(&[&a]);
    let term = leads(&a, Duration::from_secs(30), "a elected").await;
    let observer = tenure_kafka::KafkaObserver::start(cfg.clone(), &group).unwrap();
    let mut seen = observer.watch();
    observer_sees(&mut seen, "a").await;

    let mine = last_heartbeat_of(&brokers, &topic, "a");
    let mut records = Vec::new();
    // An impossible token, from someone who is not a candidate.
    let mut v = mine.clone();
    v["candidate"] = "mallory".into();
    v["incarnation"] = 1.into();
    v["token"] = u64::MAX.into();
    records.push(v);
    // A heartbeat of another consumer group sharing the topic, with a
    // token that fits any offset above 1.
    let mut v = mine.clone();
    v["candidate"] = "other-group".into();
    v["incarnation"] = 2.into();
    v["group"] = "someone-else".into();
    v["token"] = 1.into();
    records.push(v);
    // The leader's own heartbeat, sent an hour "later", with a sequence
    // number it never used: it must not renew the term that far.
    let mut v = mine.clone();
    v["seq"] = (mine["seq"].as_u64().unwrap() + 1_000_000).into();
    v["sent_mono_ns"] = (mine["sent_mono_ns"].as_u64().unwrap() + 3_600_000_000_000).into();
    records.push(v);
    // An absurd timeout: not a heartbeat at all.
    let mut v = mine.clone();
    v["candidate"] = "phantom".into();
    v["incarnation"] = 3.into();
    v["timeout_ms"] = u64::MAX.into();
    records.push(v);
    let bytes: Vec<Vec<u8>> = records
        .iter()
        .map(|v| serde_json::to_vec(v).unwrap())
        .collect();
    produce_raw(&brokers, &topic, &bytes);
    tokio::time::sleep(Duration::from_secs(1)).await;

    assert!(term.is_valid(), "a was deposed: {term:?}");
    assert_eq!(a.current_term().map(|t| t.token()), Some(term.token()));
    assert!(
        term.remaining() <= H * 6 / 5,
        "renewed by a forged heartbeat: {:?} left",
        term.remaining()
    );
    let leader = observer.leader().expect("the observer still sees a leader");
    assert_eq!(
        (leader.candidate.as_str(), leader.token),
        ("a", term.token())
    );
    // A later honest leader still shows: a resigns, and b takes over.
    let (b, _) = candidate(&cfg, &group, "b");
    a.shutdown().await;
    let b_term = leads(&b, Duration::from_secs(30), "b elected").await;
    observer_sees(&mut seen, "b").await;
    assert!(b_term.token() > term.token());
    b.shutdown().await;
    log.check();
}
