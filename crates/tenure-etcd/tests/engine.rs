//! Many groups on one etcd store handle: 1,000 groups elected by one
//! engine, followed by a second engine (a second handle, as a second
//! process would be) that learns every renewal from the prefix watch and
//! reads nothing, then takes every group over when the first stops.
//! Real time, generous bounds.

use std::time::{Duration, Instant};

use tenure::{testkit, Config, Elector, Role};
use tenure_etcd::EtcdStore;

const GROUPS: usize = 1000;
const TERM: Duration = Duration::from_secs(5);

fn start(store: &EtcdStore, prefix: &str, id: &str) -> Vec<Elector> {
    (0..GROUPS)
        .map(|i| {
            // Clones of one handle: one engine for all of them.
            Elector::builder(store.clone(), format!("{prefix}-{i}"))
                .candidate_id(id)
                .config(Config::new(TERM))
                .start()
                .expect("valid config")
        })
        .collect()
}

async fn wait_until(what: &str, within: Duration, done: impl Fn() -> usize) {
    let began = Instant::now();
    loop {
        let n = done();
        if n == GROUPS {
            eprintln!("{what}: all {GROUPS} after {:.1?}", began.elapsed());
            return;
        }
        assert!(
            began.elapsed() < within,
            "{what}: only {n} of {GROUPS} after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_thousand_groups_lead_on_one_engine_and_a_second_follows_them_without_reads() {
    let Some(server) = testkit::server_url("TENURE_TEST_ETCD") else {
        return;
    };
    let leading = EtcdStore::connect(&server).await.unwrap();
    let following = EtcdStore::connect(&server).await.unwrap();
    let prefix = format!("engine-{:x}", testkit::unique_suffix());

    let a = start(&leading, &prefix, "a");
    wait_until("elected", TERM * 6, || {
        a.iter().filter(|e| e.is_leader()).count()
    })
    .await;
    let engine_a = a[0].engine().expect("a lease elector runs in an engine");
    assert_eq!(engine_a.stats().groups, GROUPS as u64, "one engine for all");
    assert!(engine_a.stats().write_batches < GROUPS as u64 / 10);

    let b = start(&following, &prefix, "b");
    wait_until("following", TERM * 6, || {
        b.iter()
            .filter(|e| matches!(e.role(), Role::Follower { .. }))
            .count()
    })
    .await;
    let engine_b = b[0].engine().unwrap();
    assert_eq!(engine_b.stats().groups, GROUPS as u64);
    // Settle, then watch several renewals of every group.
    tokio::time::sleep(TERM).await;
    let (a0, b0) = (engine_a.stats(), engine_b.stats());
    let window = TERM * 3;
    tokio::time::sleep(window).await;
    let (a1, b1) = (engine_a.stats(), engine_b.stats());
    let per_group_term = |n: u64| n as f64 / GROUPS as f64 / 3.0;
    let renewals = per_group_term(a1.writes - a0.writes);
    eprintln!(
        "leaders: {renewals:.2} writes/group/term in {} batches; followers: {} reads, {} writes, {} changes",
        a1.write_batches - a0.write_batches,
        b1.reads - b0.reads,
        b1.writes - b0.writes,
        b1.changes - b0.changes
    );
    assert!(
        (2.0..=3.0 + 1e-9).contains(&renewals),
        "{renewals} writes per group per term"
    );
    assert_eq!(b1.reads, b0.reads, "followers read while leaders renewed");
    assert_eq!(
        b1.writes, b0.writes,
        "followers wrote while leaders renewed"
    );
    assert!(
        b1.changes - b0.changes >= (a1.writes - a0.writes) / 2,
        "the feed delivered the renewals: {} changes for {} renewals",
        b1.changes - b0.changes,
        a1.writes - a0.writes
    );
    assert_eq!(a.iter().filter(|e| e.is_leader()).count(), GROUPS);
    assert_eq!(b.iter().filter(|e| e.is_leader()).count(), 0);

    // The leaders stop; their releases reach the followers through the
    // feed, and every group changes hands well within a term.
    let began = Instant::now();
    let stopping = shutdown_all(&a);
    wait_until("taken over", TERM * 2, || {
        b.iter().filter(|e| e.is_leader()).count()
    })
    .await;
    eprintln!("hand-over of every group took {:.1?}", began.elapsed());
    stopping.await;
    shutdown_all(&b).await;
    assert_eq!(engine_b.stats().groups, 0);
}

/// Shuts every elector down at once (each shutdown waits for its release).
fn shutdown_all(electors: &[Elector]) -> impl std::future::Future<Output = ()> {
    let tasks: Vec<_> = electors
        .iter()
        .cloned()
        .map(|e| tokio::spawn(async move { e.shutdown().await }))
        .collect();
    async move {
        for t in tasks {
            t.await.expect("shutdown");
        }
    }
}
