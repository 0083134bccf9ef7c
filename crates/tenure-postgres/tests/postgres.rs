//! The PostgreSQL store against a real server (`scripts/servers.sh` starts
//! it; `TENURE_TEST_POSTGRES` names it). Chaos tests start private servers.

use std::time::Duration;

use async_trait::async_trait;
use tenure::testkit::scenarios::elector;
use tenure::testkit::{self, scenarios, Harness, TcpProxy, TermLog};
use tenure::{GroupName, StoreError};
use tenure_postgres::PostgresStore;

mod private_server;
use private_server::PrivatePostgres;

fn url() -> Option<String> {
    testkit::server_url("TENURE_TEST_POSTGRES")
}

struct PgHarness {
    url: String,
    raw: tokio_postgres::Client,
}

impl PgHarness {
    async fn new(url: String) -> PgHarness {
        // The store creates the table on connect.
        PostgresStore::connect(&url).await.expect("connect");
        let (raw, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .expect("raw connect");
        tokio::spawn(conn);
        PgHarness { url, raw }
    }
}

#[async_trait]
impl Harness for PgHarness {
    type Store = PostgresStore;

    async fn store(&self) -> PostgresStore {
        PostgresStore::connect(&self.url).await.expect("connect")
    }

    async fn plant_raw(&self, group: &GroupName, bytes: &[u8]) {
        self.raw
            .execute(
                "INSERT INTO tenure_leases (group_name, version, record) VALUES ($1, 1, $2)
                 ON CONFLICT (group_name) DO UPDATE SET version = tenure_leases.version + 1, record = EXCLUDED.record",
                &[&group.as_str(), &bytes],
            )
            .await
            .expect("plant");
    }

    async fn read_raw(&self, group: &GroupName) -> Option<Vec<u8>> {
        self.raw
            .query_opt(
                "SELECT record FROM tenure_leases WHERE group_name = $1",
                &[&group.as_str()],
            )
            .await
            .expect("read raw")
            .map(|row| row.get(0))
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn conformance() {
    let Some(url) = url() else { return };
    testkit::run_conformance(&PgHarness::new(url).await).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn graceful_release_hands_over_within_a_round_trip_via_notify() {
    let Some(url) = url() else { return };
    let a = PostgresStore::connect(&url).await.unwrap();
    let b = PostgresStore::connect(&url).await.unwrap();
    let took = scenarios::graceful_handover_via_feed(a, b, Duration::from_millis(300)).await;
    eprintln!("graceful hand-over on PostgreSQL: {took:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn wrong_credentials_missing_database_and_tls_are_clear_errors() {
    let Some(url) = url() else { return };
    let wrong = url.replace(":tenure-test@", ":not-the-password@");
    let e = PostgresStore::connect(&wrong).await.unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, StoreError::Misconfigured { .. }), "{e:?}");
    assert!(text.contains("authentication failed"), "{text}");
    assert!(!text.contains("not-the-password"), "secret leaked: {text}");

    let missing = format!("{}/no_such_db", url.rsplit_once('/').unwrap().0);
    let text = PostgresStore::connect(&missing)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        text.contains("no_such_db") && text.contains("create the database"),
        "{text}"
    );

    let tls = format!("{url}?sslmode=require");
    let e = PostgresStore::connect(&tls).await.unwrap_err();
    assert!(matches!(e, StoreError::Misconfigured { .. }), "{e:?}");
    assert!(e.to_string().contains("sslmode"), "{e}");

    let text = PostgresStore::connect("postgres://u:pw@127.0.0.1:1/db")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        text.contains("127.0.0.1:1") && !text.contains("pw@"),
        "{text}"
    );

    let group = testkit::unique_group("pg-wrong-table");
    let (raw, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    raw.batch_execute("CREATE TABLE IF NOT EXISTS not_leases (id INT)")
        .await
        .unwrap();
    let e = PostgresStore::connect(&format!("{url}?table=not_leases"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("layout"), "{e}");
    let _ = group;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_leader_cut_off_from_postgres_steps_down_before_another_takes_over() {
    let Some(url) = url() else { return };
    let proxy = TcpProxy::start("127.0.0.1:55432".parse().unwrap())
        .await
        .unwrap();
    let via_proxy = url.replace("127.0.0.1:55432", &proxy.addr().to_string());
    let figures = scenarios::cut_off_leader_stops_first(
        PostgresStore::connect(&via_proxy).await.unwrap(),
        PostgresStore::connect(&url).await.unwrap(),
        &proxy,
    )
    .await;
    eprintln!("PostgreSQL cut-off: {figures:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restarted_server_never_yields_two_leaders() {
    if url().is_none() {
        return;
    }
    let server = PrivatePostgres::start().await;
    let group = testkit::unique_group("pg-restart");
    let term = Duration::from_secs(2);
    let a = elector(
        PostgresStore::connect(&server.url()).await.unwrap(),
        &group,
        "a",
        term,
    );
    let b = elector(
        PostgresStore::connect(&server.url()).await.unwrap(),
        &group,
        "b",
        term,
    );
    let spans = TermLog::watch(&[&a, &b]);
    let first = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if let Some(t) = a.current_term().or_else(|| b.current_term()) {
                return t;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("a leader");
    server.stop().await;
    // Down for longer than a term: the leader must step down on time.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        !first.is_valid(),
        "the leader stepped down while the server was down"
    );
    assert!(!a.is_leader() && !b.is_leader());
    server.start_again().await;
    let next = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            if let Some(t) = a.current_term().or_else(|| b.current_term()) {
                return t;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("a leader after the restart");
    assert!(
        next.token() > first.token(),
        "the token survives the restart and rises"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!(a.is_leader() && b.is_leader()));
    spans.check();
    a.shutdown().await;
    b.shutdown().await;
}
