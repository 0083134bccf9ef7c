//! `tenure run` on the real servers (`scripts/servers.sh`): SIGKILL the
//! leader's process and the other candidate takes over within the derived
//! crash bound, with a higher token, while the dead leader's process group
//! is gone at once; SIGSTOP it and the watchdog kills its CMD before the
//! other's starts; SIGTERM it and the other takes over through the store's
//! change feed, or within one poll on a store without one. Each store is
//! built in with its cargo feature.

mod common;

use std::time::{Duration, Instant};

use common::{
    bounds, child_lines, frozen_leader_is_replaced_on, group_members, recording_child, run_on,
    run_with_term, wait_for, Groups, Running, Scratch,
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

/// SIGTERM of the leader's `tenure run`: it stops CMD's group, releases
/// and exits 0, and the other candidate takes over through the store's
/// change feed: with a 60 s term (polls every 15 s and more) within 2 s.
fn graceful_handover_on(store: &str, label: &str) -> Duration {
    graceful_handover_within(
        store,
        label,
        Duration::from_secs(60),
        Duration::from_secs(2),
        "not through the change feed (a poll takes 15 s or more)",
    )
}

/// The same on a store without a change feed: the other candidate sees
/// the release at its next poll. With an 8 s term a poll comes every 2 s
/// plus up to 0.8 s of jitter (`graceful_failover_polling`), while
/// waiting out the term would take 8 s: the hand-over comes within one
/// poll, plus the leader's exit and the round trips (1.5 s).
#[cfg_attr(
    not(any(feature = "dynamodb", feature = "object-store")),
    allow(dead_code, reason = "only the polling stores use it")
)]
fn graceful_handover_by_polling_on(store: &str, label: &str) -> Duration {
    let term = Duration::from_secs(8);
    let poll = tenure::Config::new(term)
        .validate()
        .expect("valid")
        .bounds()
        .graceful_failover_polling;
    graceful_handover_within(
        store,
        label,
        term,
        poll + Duration::from_millis(1500),
        &format!("not within one poll ({poll:?}); a term is {term:?}"),
    )
}

/// Two `tenure run` candidates with `term`; SIGTERM to the leader, and
/// the other's CMD must start within `within` of the signal, with the
/// next token.
fn graceful_handover_within(
    store: &str,
    label: &str,
    term: Duration,
    within: Duration,
    otherwise: &str,
) -> Duration {
    let s = Scratch::new(label);
    let child = recording_child(&s);
    let log = s.path("children.log");
    let group = format!("cli-{label}-{:x}", rand::random::<u64>());
    let term_arg = format!("{}s", term.as_secs());
    let run = |id: &str| run_with_term(&s, store, &group, id, &term_arg, &[], &child);
    let mut a = Running::spawn(&mut run("a"));
    let first = wait_for(SLACK, || child_lines(&log).into_iter().next())
        .unwrap_or_else(|| panic!("a did not lead; see a.log in {}", s.dir.display()));
    let _b = Running::spawn(&mut run("b"));
    let mut groups = Groups::default();
    groups.add(first.pgid);
    // Let b settle as a follower, its feed open or its polls under way.
    std::thread::sleep(Duration::from_secs(2));

    let stopped = Instant::now();
    a.signal(libc::SIGTERM);
    let status = a.wait_timeout(SLACK).expect("a exits after SIGTERM");
    assert!(status.success(), "{status:?}");
    assert!(
        group_members(first.pgid).is_empty(),
        "a's child group was stopped before a exited"
    );
    let next =
        wait_for(within + SLACK, || child_lines(&log).into_iter().nth(1)).expect("b took over");
    groups.add(next.pgid);
    let took = stopped.elapsed();
    eprintln!("{label}: b's CMD started {took:?} after SIGTERM to a ({term:?} term)");
    assert_eq!(next.id, "b");
    assert_eq!(next.token, first.token + 1);
    assert!(took < within, "{took:?}: {otherwise}");
    took
}

/// The three scenarios every lease store passes, as a module per store:
/// SIGKILL, SIGSTOP and SIGTERM of the leader's `tenure run`. `$url`
/// gives a URL of the test's own (a fresh prefix, table or bucket where
/// the store has one), or `None` when the server is missing outside CI;
/// `$graceful` is how a SIGTERM hands over: through the change feed or
/// within one poll.
macro_rules! lease_store_scenarios {
    ($feature:literal, $store:ident, $url:expr, $graceful:ident) => {
        #[cfg(feature = $feature)]
        mod $store {
            use super::*;

            fn url(label: &str) -> Option<String> {
                #[allow(clippy::redundant_closure_call, reason = "the macro takes a closure")]
                ($url)(label)
            }

            #[test]
            fn sigkill_of_the_leader() {
                let Some(url) = url("kill") else {
                    return;
                };
                crash_takeover_on(&url, stringify!($store));
            }

            #[test]
            fn sigstop_of_the_leader() {
                let Some(url) = url("stop") else {
                    return;
                };
                let s = Scratch::new(concat!(stringify!($store), "-frozen"));
                let group = format!(
                    concat!("cli-", stringify!($store), "-frozen-{:x}"),
                    rand::random::<u64>()
                );
                frozen_leader_is_replaced_on(&s, &url, &group);
            }

            #[test]
            fn sigterm_hands_over() {
                let Some(url) = url("term") else {
                    return;
                };
                $graceful(&url, concat!(stringify!($store), "-graceful"));
            }
        }
    };
}

/// A suffix that keeps one test's groups, keys or objects apart from every
/// other run's on a shared server.
fn unique(label: &str) -> String {
    format!("tenure-cli-{label}-{:x}", rand::random::<u64>())
}

lease_store_scenarios!(
    "postgres",
    postgres,
    |_: &str| tenure::testkit::server_url("TENURE_TEST_POSTGRES"),
    graceful_handover_on
);

lease_store_scenarios!(
    "redis",
    redis,
    |label: &str| {
        let server = tenure::testkit::server_url("TENURE_TEST_REDIS")?;
        let url = format!("{server}?prefix={}:", unique(label));
        // A prefix without its data-set marker looks like a Redis that lost
        // its data, and its first election would wait out a quarantine of
        // two terms (2 min with the graceful scenario's 60 s term): this
        // prefix is known to be new.
        tokio::runtime::Runtime::new()
            .expect("runtime")
            .block_on(async {
                let store = tenure_redis::RedisStore::connect(&url).await?;
                store.adopt_empty().await
            })
            .expect("mark the test's prefix as new");
        Some(url)
    },
    graceful_handover_on
);

lease_store_scenarios!(
    "etcd",
    etcd,
    |label: &str| {
        let server = tenure::testkit::server_url("TENURE_TEST_ETCD")?;
        let endpoint = server.trim_start_matches("http://");
        Some(format!("etcd://{endpoint}?prefix={}/", unique(label)))
    },
    graceful_handover_on
);

lease_store_scenarios!(
    "dynamodb",
    dynamodb,
    |label: &str| {
        let endpoint = tenure::testkit::server_url("TENURE_TEST_DYNAMODB")?;
        // dynalite accepts any credentials.
        Some(format!(
            "dynamodb://{}?region=us-east-1&endpoint={endpoint}&create=true&access_key_id=test&secret_access_key=test",
            unique(label)
        ))
    },
    graceful_handover_by_polling_on
);

lease_store_scenarios!(
    "zookeeper",
    zookeeper,
    |label: &str| {
        let server = tenure::testkit::server_url("TENURE_TEST_ZOOKEEPER")?;
        Some(format!(
            "{}/{}",
            server.trim_end_matches('/'),
            unique(label)
        ))
    },
    graceful_handover_on
);

lease_store_scenarios!(
    "nats",
    nats,
    |_: &str| {
        let server = tenure::testkit::server_url("TENURE_TEST_NATS")?;
        Some(format!("{}/tenure-cli", server.trim_end_matches('/')))
    },
    graceful_handover_on
);

// moto checks no signature; the keys are there because the client signs
// every request. `scripts/servers.sh` creates the bucket.
lease_store_scenarios!(
    "object-store",
    s3,
    |label: &str| {
        let endpoint = tenure::testkit::server_url("TENURE_TEST_S3")?;
        Some(format!(
            "s3://tenure-test/{}?region=us-east-1&endpoint={endpoint}&access_key_id=AKIDTENURECLI&secret_access_key=test",
            unique(label)
        ))
    },
    graceful_handover_by_polling_on
);

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
