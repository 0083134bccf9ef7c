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
    bounds, frozen_leader_is_replaced_on, graceful_handover, group_members, unique, wait_for,
    wait_logged, Election, Scratch,
};

/// Process start-up and server round trips on top of the promised bounds;
/// the first election on a fresh Redis prefix also waits out its
/// data-loss quarantine (twice the 2 s term).
const SLACK: Duration = Duration::from_secs(8);

fn crash_takeover_on(store: &str, label: &str) {
    let group = unique(label);
    let mut e = Election::on(Scratch::new(label), store, &group);
    let (a, b, first) = e.two_candidates(bounds().crash_failover + SLACK);
    let leader = if first.id == "a" { &a } else { &b };
    // The kill comes once tenure has logged CMD's start, after the whole
    // start (CMD passes its exec gate only once the watchdog is armed;
    // `cmd_starts_only_once_its_watchdog_is_armed` pins that).
    wait_logged(
        &e.s.path(&format!("{}.log", first.id)),
        "leading: started CMD",
        SLACK,
    )
    .expect("the leader logged that it started CMD");

    let killed = Instant::now();
    leader.signal(libc::SIGKILL);
    wait_for(bounds().takeover_wait, || {
        group_members(first.pgid).is_empty().then_some(())
    })
    .expect("the dead leader's process group is gone");

    let next = e
        .started(1, bounds().crash_failover + SLACK)
        .unwrap_or_else(|| panic!("the other candidate's child did not start\n{}", e.logs()));
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

/// [`graceful_handover`] of two candidates with `term` on `store`, in a
/// group of the test's own.
fn graceful_handover_within(
    store: &str,
    label: &str,
    term: Duration,
    within: Duration,
    otherwise: &str,
) -> Duration {
    let group = unique(label);
    let mut e = Election::on(Scratch::new(label), store, &group);
    e.term = format!("{}s", term.as_secs());
    graceful_handover(e, within, otherwise)
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
                let group = unique(concat!(stringify!($store), "-frozen"));
                frozen_leader_is_replaced_on(Election::on(s, &url, &group));
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

lease_store_scenarios!(
    "postgres",
    postgres,
    |_: &str| tenure_testkit::server_url("TENURE_TEST_POSTGRES"),
    graceful_handover_on
);

lease_store_scenarios!(
    "redis",
    redis,
    |label: &str| {
        let server = tenure_testkit::server_url("TENURE_TEST_REDIS")?;
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
        let server = tenure_testkit::server_url("TENURE_TEST_ETCD")?;
        let endpoint = server.trim_start_matches("http://");
        Some(format!("etcd://{endpoint}?prefix={}/", unique(label)))
    },
    graceful_handover_on
);

lease_store_scenarios!(
    "dynamodb",
    dynamodb,
    |label: &str| {
        let endpoint = tenure_testkit::server_url("TENURE_TEST_DYNAMODB")?;
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
        let server = tenure_testkit::server_url("TENURE_TEST_ZOOKEEPER")?;
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
        let server = tenure_testkit::server_url("TENURE_TEST_NATS")?;
        Some(format!("{}/tenure-cli", server.trim_end_matches('/')))
    },
    graceful_handover_on
);

// MariaDB's change feed is polled (every 250 ms): the 60 s term's hand-over
// within 2 s is through it, not through a candidate's own poll. A table
// of the test's own.
lease_store_scenarios!(
    "mysql",
    mysql,
    |label: &str| {
        let server = tenure_testkit::server_url("TENURE_TEST_MYSQL")?;
        Some(format!(
            "{server}?table=cli_{}",
            unique(label).replace('-', "_")
        ))
    },
    graceful_handover_on
);

// Leases on this repository's Kubernetes API server (tenure-kube-testserver,
// TENURE_TEST_KUBERNETES is its kubeconfig), one label of the test's own.
lease_store_scenarios!(
    "kubernetes",
    kubernetes,
    |label: &str| {
        let kubeconfig = tenure_testkit::server_url("TENURE_TEST_KUBERNETES")?;
        Some(format!(
            "k8s://tenure-test?kubeconfig={kubeconfig}&label=tenure-cli={}",
            unique(label)
        ))
    },
    graceful_handover_on
);

/// The leader's `tenure run` cut off from the Kubernetes API server (its
/// kubeconfig names a proxy that goes silent), the other candidate still
/// reaching it: the same checks as on MariaDB.
#[cfg(feature = "kubernetes")]
#[test]
fn kubernetes_partition_of_the_leader_never_overlaps_its_successor() {
    let Some(kubeconfig) = tenure_testkit::server_url("TENURE_TEST_KUBERNETES") else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let mut kc: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(&kubeconfig).expect("the kubeconfig servers.sh wrote"),
    )
    .expect("the test server writes JSON");
    let server = kc["clusters"][0]["cluster"]["server"]
        .as_str()
        .expect("a server")
        .to_owned();
    let addr = server.trim_start_matches("https://").to_owned();
    let proxy = rt
        .block_on(tenure_testkit::TcpProxy::start(
            addr.parse().expect("host:port"),
        ))
        .expect("proxy");
    kc["clusters"][0]["cluster"]["server"] =
        serde_json::Value::String(format!("https://{}", proxy.addr()));
    let label = "kubernetes-partition";
    let s = Scratch::new(label);
    let via = s.path("kubeconfig-via-proxy");
    std::fs::write(&via, kc.to_string()).expect("write the proxied kubeconfig");
    let run = unique(label);
    let direct =
        format!("k8s://tenure-test?kubeconfig={kubeconfig}&label=tenure-cli={run}&timeout=1s");
    let cut_off = format!(
        "k8s://tenure-test?kubeconfig={}&label=tenure-cli={run}&timeout=1s",
        via.display()
    );
    let mut e = Election::on(s, &cut_off, &unique(label)).stamping();
    let (_a, first) = e.leader("a", &[], bounds().crash_failover + SLACK);
    e.store = direct;
    let _b = e.candidate("b", &[]);
    std::thread::sleep(Duration::from_secs(2));
    let cut = Instant::now();
    proxy.cut();
    let next = e
        .started(1, bounds().crash_failover + SLACK)
        .unwrap_or_else(|| panic!("b did not take over\n{}", e.logs()));
    let took = cut.elapsed();
    std::thread::sleep(Duration::from_millis(500));
    proxy.heal();
    let spans = common::stamp_spans(&e.s);
    let (Some(old), Some(new)) = (spans.get(&first.token), spans.get(&next.token)) else {
        panic!("both CMDs stamped: {spans:?}");
    };
    eprintln!(
        "kubernetes partition: b's CMD started {took:?} after the cut; old CMD's last stamp {:.2} s, \
         new CMD's first {:.2} s (gap {:.0} ms, dual activity 0 s)",
        old.1,
        new.0,
        (new.0 - old.1) * 1000.0
    );
    assert_eq!(next.id, "b");
    assert!(next.token > first.token, "{next:?} after {first:?}");
    assert!(
        old.1 < new.0,
        "the cut-off leader's CMD (token {}) still worked at {:.3} s after the new one (token {}) started at {:.3} s",
        first.token,
        old.1,
        next.token,
        new.0
    );
}

/// The leader's `tenure run` cut off from MariaDB (its connections go
/// through a proxy that goes silent, as in a partition), while the other
/// candidate still reaches it: the other takes over once the lease
/// expired, and the old CMD, which the cut-off tenure stops by its
/// deadline, stamped its last before the new one's first (no dual
/// activity), with a higher token.
#[cfg(feature = "mysql")]
#[test]
fn mysql_partition_of_the_leader_never_overlaps_its_successor() {
    let Some(server) = tenure_testkit::server_url("TENURE_TEST_MYSQL") else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let addr = {
        let rest = server.split_once('@').map_or(server.as_str(), |(_, r)| r);
        rest.split('/').next().unwrap_or(rest).to_owned()
    };
    let proxy = rt
        .block_on(tenure_testkit::TcpProxy::start(
            addr.parse().expect("host:port"),
        ))
        .expect("proxy");
    let table = format!("cli_{}", unique("partition").replace('-', "_"));
    let direct = format!("{server}?table={table}&timeout=1s");
    let cut_off = direct.replace(&addr, &proxy.addr().to_string());
    let label = "mysql-partition";
    let mut e = Election::on(Scratch::new(label), &cut_off, &unique(label)).stamping();
    let (_a, first) = e.leader("a", &[], bounds().crash_failover + SLACK);
    e.store = direct;
    let _b = e.candidate("b", &[]);
    // b settles as a follower; a renews a few times.
    std::thread::sleep(Duration::from_secs(2));
    let cut = Instant::now();
    proxy.cut();
    let next = e
        .started(1, bounds().crash_failover + SLACK)
        .unwrap_or_else(|| panic!("b did not take over\n{}", e.logs()));
    let took = cut.elapsed();
    // Let the new CMD stamp a little, then compare what both did.
    std::thread::sleep(Duration::from_millis(500));
    proxy.heal();
    let spans = common::stamp_spans(&e.s);
    let (Some(old), Some(new)) = (spans.get(&first.token), spans.get(&next.token)) else {
        panic!("both CMDs stamped: {spans:?}");
    };
    let gap = new.0 - old.1;
    eprintln!(
        "mysql partition: b's CMD started {took:?} after the cut; old CMD's last stamp {:.2} s, \
         new CMD's first {:.2} s (gap {:.0} ms, dual activity 0 s)",
        old.1,
        new.0,
        gap * 1000.0
    );
    assert_eq!(next.id, "b");
    assert!(next.token > first.token, "{next:?} after {first:?}");
    assert!(
        old.1 < new.0,
        "the cut-off leader's CMD (token {}) still worked at {:.3} s after the new one (token {}) started at {:.3} s",
        first.token,
        old.1,
        next.token,
        new.0
    );
}

// moto checks no signature; the keys are there because the client signs
// every request. `scripts/servers.sh` creates the bucket.
lease_store_scenarios!(
    "object-store",
    s3,
    |label: &str| {
        let endpoint = tenure_testkit::server_url("TENURE_TEST_S3")?;
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
    let Some(broker) = tenure_testkit::server_url("TENURE_TEST_KAFKA") else {
        return;
    };
    let group = unique("kafka");
    // No heartbeat_timeout here: the candidates' --term 2s sets it.
    let store = format!("kafka://{broker}/{group}.leader");
    let mut e = Election::on(Scratch::new("kafka"), &store, &group);
    let (a, b, first) = e.two_candidates(Duration::from_secs(30));
    let v = e.status();
    assert_eq!(v["leader"]["candidate"], first.id.as_str(), "{v}");

    let leader = if first.id == "a" { &a } else { &b };
    let killed = Instant::now();
    leader.signal(libc::SIGKILL);
    let next = e
        .started(1, Duration::from_secs(30))
        .expect("the other candidate's child started");
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
