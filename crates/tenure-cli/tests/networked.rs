//! `tenure run` on the real servers (`scripts/servers.sh`): SIGKILL the
//! leader's process and the other candidate takes over within the derived
//! crash bound, with a higher token, while the dead leader's process group
//! is gone at once. Each store is built in with its cargo feature.

mod common;

use std::time::{Duration, Instant};

use common::{
    bounds, child_lines, group_members, recording_child, run_on, wait_for, Groups, Running, Scratch,
};

/// Process start-up and server round trips on top of the promised bounds;
/// the first election on a fresh Redis prefix also waits out its
/// data-loss quarantine (twice the 2 s term).
const SLACK: Duration = Duration::from_secs(8);

fn crash_takeover_on(store: &str, label: &str) {
    let s = Scratch::new(label);
    let child = recording_child(&s);
    let log = s.path("children.log");
    let group = format!("cli-{label}-{:x}", rand::random::<u64>());
    let a = Running::spawn(&mut run_on(&s, store, &group, "a", &[], &child));
    let b = Running::spawn(&mut run_on(&s, store, &group, "b", &[], &child));
    let mut groups = Groups::default();

    let first = wait_for(bounds().crash_failover + SLACK, || {
        child_lines(&log).into_iter().next()
    })
    .unwrap_or_else(|| {
        panic!(
            "no child started on {label}; see the a.log and b.log in {}",
            s.dir.display()
        )
    });
    groups.add(first.pgid);
    let leader = if first.id == "a" { &a } else { &b };

    let killed = Instant::now();
    leader.signal(libc::SIGKILL);
    wait_for(bounds().takeover_wait, || {
        group_members(first.pgid).is_empty().then_some(())
    })
    .expect("the dead leader's process group is gone");

    let next = wait_for(bounds().crash_failover + SLACK, || {
        child_lines(&log).into_iter().nth(1)
    })
    .expect("the other candidate's child started");
    groups.add(next.pgid);
    let took = killed.elapsed();
    eprintln!(
        "{label}: took over {took:?} after SIGKILL (bound {:?})",
        bounds().crash_failover
    );
    assert_ne!(next.id, first.id);
    assert!(next.token > first.token, "{next:?} after {first:?}");
    assert!(
        took <= bounds().crash_failover + Duration::from_secs(2),
        "took over after {took:?}; promised {:?} plus round trips",
        bounds().crash_failover
    );
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_sigkill_of_the_leader() {
    let Some(url) = tenure::testkit::server_url("TENURE_TEST_POSTGRES") else {
        return;
    };
    crash_takeover_on(&url, "postgres");
}

#[cfg(feature = "redis")]
#[test]
fn redis_sigkill_of_the_leader() {
    let Some(url) = tenure::testkit::server_url("TENURE_TEST_REDIS") else {
        return;
    };
    let url = format!("{url}?prefix=tenure-cli-{:x}:", rand::random::<u64>());
    crash_takeover_on(&url, "redis");
}

#[cfg(feature = "etcd")]
#[test]
fn etcd_sigkill_of_the_leader() {
    let Some(url) = tenure::testkit::server_url("TENURE_TEST_ETCD") else {
        return;
    };
    let endpoint = url.trim_start_matches("http://");
    crash_takeover_on(&format!("etcd://{endpoint}"), "etcd");
}

#[cfg(feature = "dynamodb")]
#[test]
fn dynamodb_sigkill_of_the_leader() {
    let Some(endpoint) = tenure::testkit::server_url("TENURE_TEST_DYNAMODB") else {
        return;
    };
    // dynalite accepts any credentials.
    let url = format!(
        "dynamodb://tenure-cli-{:x}?region=us-east-1&endpoint={endpoint}&create=true&access_key_id=test&secret_access_key=test",
        rand::random::<u32>()
    );
    crash_takeover_on(&url, "dynamodb");
}

/// On Kafka, leadership follows the consumer group: a SIGKILLed leader is
/// replaced after the session timeout (3 × the heartbeat timeout, which
/// `--term 2s` sets: the URL does not) and a rebalance, and `status` reads
/// the leader from its heartbeats.
#[cfg(feature = "kafka")]
#[test]
fn kafka_run_status_and_sigkill_of_the_leader() {
    use common::{run_to_end, tenure};

    let Some(broker) = tenure::testkit::server_url("TENURE_TEST_KAFKA") else {
        return;
    };
    let s = Scratch::new("kafka");
    let child = recording_child(&s);
    let log = s.path("children.log");
    let group = format!("cli-kafka-{:x}", rand::random::<u64>());
    // No heartbeat_timeout here: `run_on` passes --term 2s, which sets it.
    let store = format!("kafka://{broker}/{group}.leader");
    let a = Running::spawn(&mut run_on(&s, &store, &group, "a", &[], &child));
    let b = Running::spawn(&mut run_on(&s, &store, &group, "b", &[], &child));
    let mut groups = Groups::default();
    let first = wait_for(Duration::from_secs(30), || {
        child_lines(&log).into_iter().next()
    })
    .unwrap_or_else(|| panic!("no child started; see the logs in {}", s.dir.display()));
    groups.add(first.pgid);

    let out = run_to_end(tenure().args(["status", "--group", &group, "--json", "--store", &store]));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("status JSON");
    assert_eq!(v["leader"]["candidate"], first.id.as_str(), "{v}");

    let leader = if first.id == "a" { &a } else { &b };
    let killed = Instant::now();
    leader.signal(libc::SIGKILL);
    let next = wait_for(Duration::from_secs(30), || {
        child_lines(&log).into_iter().nth(1)
    })
    .expect("the other candidate's child started");
    groups.add(next.pgid);
    eprintln!(
        "kafka: took over {:?} after SIGKILL (session timeout 6 s)",
        killed.elapsed()
    );
    assert_ne!(next.id, first.id);
    assert!(next.token > first.token, "{next:?} after {first:?}");
    // With the URL's default heartbeat timeout (5 s) the session would be
    // 15 s: --term took effect.
    assert!(
        killed.elapsed() < Duration::from_secs(15),
        "--term 2s was not applied: {:?}",
        killed.elapsed()
    );
}
