//! The PostgreSQL store against a real server (`scripts/servers.sh` starts
//! it; `TENURE_TEST_POSTGRES` names it). Chaos tests start private servers.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use tenure::store::StoreFeed;
use tenure::{GroupName, StoreError, Version, Versioned};
use tenure_postgres::{PostgresStore, PostgresStoreError};
use tenure_testkit::{
    self as testkit, many_groups, scenarios, sharded, Feeds, RawAccess, TcpProxy, UrlHarness,
};

mod private_server;
use private_server::PrivatePostgres;

fn url() -> Option<String> {
    testkit::server_url("TENURE_TEST_POSTGRES")
}

/// The server's `host:port`, read from the URL (never assumed).
fn server_addr(url: &str) -> String {
    let config: tokio_postgres::Config = url.parse().expect("TENURE_TEST_POSTGRES parses");
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!("127.0.0.1:{port}")
}

/// A plain superuser connection, for setting things up behind the store's back.
async fn raw(url: &str) -> tokio_postgres::Client {
    let (raw, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("raw connect");
    tokio::spawn(conn);
    raw
}

/// A store whose connections carry an application name of their own
/// (`tenure_{label}_…`), to find them in `pg_stat_activity`; and the name.
async fn named_store(url: &str, label: &str) -> (PostgresStore, String) {
    let app = format!("tenure_{label}_{:x}", testkit::unique_suffix());
    let store = PostgresStore::connect(&format!("{url}?application_name={app}"))
        .await
        .unwrap();
    (store, app)
}

/// `SELECT aggregate FROM pg_stat_activity` over the connections of
/// application `app`.
async fn over_connections(admin: &tokio_postgres::Client, aggregate: &str, app: &str) -> i64 {
    let sql = format!("SELECT {aggregate} FROM pg_stat_activity WHERE application_name = $1");
    admin.query_one(&sql, &[&app]).await.unwrap().get(0)
}

/// Reads `group` and returns what the read gave and how long it took;
/// panics if it has not returned within 20 s (a hang, not a slow read).
async fn timed_read(
    store: &PostgresStore,
    group: &GroupName,
) -> (Result<Option<Versioned>, StoreError>, Duration) {
    let started = Instant::now();
    let read = tokio::time::timeout(
        Duration::from_secs(20),
        tenure::LeaseView::read(store, group),
    )
    .await
    .expect("the read returned instead of hanging");
    (read, started.elapsed())
}

/// The handle's store-wide feed, which PostgreSQL always offers (LISTEN).
async fn store_feed(store: &PostgresStore) -> StoreFeed {
    tenure::LeaseView::watch(store)
        .await
        .unwrap()
        .expect("a store-wide feed")
}

/// A store on `url` with `query` (such as `timeout=1s`), a fresh group
/// (`label`), the version of the first record the store wrote to it, and
/// an operator's open transaction holding that record's row lock.
async fn locked_row(
    url: &str,
    query: &str,
    label: &str,
) -> (PostgresStore, GroupName, Version, RowLock) {
    let store = PostgresStore::connect(&format!("{url}?{query}"))
        .await
        .unwrap();
    let group = testkit::unique_group(label);
    let v1 = testkit::applied(&store, &group, None, &testkit::held_by("a", 1)).await;
    let operator = RowLock::hold(url, &group).await;
    (store, group, v1, operator)
}

/// An operator's open transaction holding a lease row's lock.
struct RowLock(tokio_postgres::Client);

impl RowLock {
    async fn hold(url: &str, group: &GroupName) -> RowLock {
        let operator = raw(url).await;
        operator.batch_execute("BEGIN").await.unwrap();
        operator
            .query(
                "SELECT * FROM tenure_leases WHERE group_name = $1 FOR UPDATE",
                &[&group.as_str()],
            )
            .await
            .unwrap();
        RowLock(operator)
    }

    /// Ends the transaction (it wrote nothing: ending it only releases
    /// the lock).
    async fn release(self) {
        self.0.batch_execute("ROLLBACK").await.unwrap();
    }
}

/// The store's table, read and written by a plain client.
struct LeaseTable {
    client: tokio_postgres::Client,
    table: String,
}

#[async_trait]
impl RawAccess for LeaseTable {
    async fn plant_raw(&self, group: &GroupName, bytes: &[u8]) {
        let t = &self.table;
        self.client
            .execute(
                &format!(
                    "INSERT INTO {t} (group_name, version, record) VALUES ($1, 1, $2)
                     ON CONFLICT (group_name) DO UPDATE SET version = {t}.version + 1, record = EXCLUDED.record"
                ),
                &[&group.as_str(), &bytes],
            )
            .await
            .expect("plant");
    }

    async fn read_raw(&self, group: &GroupName) -> Option<Vec<u8>> {
        self.client
            .query_opt(
                &format!("SELECT record FROM {} WHERE group_name = $1", self.table),
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
    // The store creates the table on connect.
    PostgresStore::connect(&url).await.expect("connect");
    let table = LeaseTable {
        client: raw(&url).await,
        table: "tenure_leases".into(),
    };
    // Every write notifies: the feed case fails, not skips, if that
    // breaks.
    let harness = UrlHarness::new(url, PostgresStore::connect, table).promising(Feeds::ALL);
    testkit::run_conformance(&harness).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn graceful_release_hands_over_within_a_round_trip_via_notify() {
    let Some(url) = url() else { return };
    let a = PostgresStore::connect(&url).await.unwrap();
    let b = PostgresStore::connect(&url).await.unwrap();
    let took = scenarios::graceful_handover_via_feed(a, b, Duration::from_secs(2)).await;
    eprintln!("graceful hand-over on PostgreSQL: {took:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn wrong_credentials_missing_database_and_tls_are_clear_errors() {
    let Some(url) = url() else { return };
    let wrong = url.replace(":tenure-test@", ":not-the-password@");
    let e = PostgresStore::connect(&wrong).await.unwrap_err();
    let text = e.to_string();
    assert!(
        matches!(
            e,
            PostgresStoreError::Store(StoreError::Misconfigured { .. })
        ),
        "{e:?}"
    );
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
    assert!(
        matches!(
            e,
            PostgresStoreError::Store(StoreError::Misconfigured { .. })
        ),
        "{e:?}"
    );
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
    let addr = server_addr(&url);
    let proxy = TcpProxy::start(addr.parse().unwrap()).await.unwrap();
    let via_proxy = url.replace(&addr, &proxy.addr().to_string());
    let figures = scenarios::cut_off_leader_stops_first(
        PostgresStore::connect(&via_proxy).await.unwrap(),
        PostgresStore::connect(&url).await.unwrap(),
        &proxy,
    )
    .await;
    eprintln!("PostgreSQL cut-off: {figures:?}");
}

/// The server stopped for longer than a term, then restarted on its data
/// (the shared scenario): the leader steps down by its deadline, exactly
/// one leads afterwards with a higher token (tokens are persisted), and no
/// two terms overlap.
#[tokio::test(flavor = "multi_thread")]
async fn a_restarted_server_never_yields_two_leaders() {
    if url().is_none() {
        return;
    }
    let mut server = PrivatePostgres::start().await;
    let url = format!("{}?timeout=1s", server.url());
    scenarios::reported_restart("PostgreSQL", &url, PostgresStore::connect, &mut server).await;
}

/// A password holding every URL delimiter.
const HOSTILE_PASSWORD: &str = "Qa1/Qb2?Qc3#Qd4@Qe5+Qf6";
/// The same password as a URL carries it: `/ ? # @` percent-encoded (a raw
/// `/ ? #` in a password is refused, see `tenure::store::url`).
const HOSTILE_ESCAPED: &str = "Qa1%2FQb2%3FQc3%23Qd4%40Qe5+Qf6";

/// A role with exactly the documented grants, on a table of its own.
struct LeastPrivilege {
    table: String,
    role: String,
    admin: tokio_postgres::Client,
}

impl LeastPrivilege {
    async fn new(url: &str) -> LeastPrivilege {
        let suffix = testkit::unique_suffix();
        let table = format!("tenure_lp_{suffix:x}");
        let role = format!("tenure_app_{suffix:x}");
        // The owner creates the table once.
        PostgresStore::connect(&format!("{url}?table={table}"))
            .await
            .expect("the owner creates the table");
        let admin = raw(url).await;
        admin
            .batch_execute(&format!(
                "CREATE ROLE {role} LOGIN PASSWORD '{HOSTILE_PASSWORD}';
                 GRANT SELECT, INSERT, UPDATE ON {table} TO {role};"
            ))
            .await
            .expect("create the role");
        LeastPrivilege { table, role, admin }
    }

    /// The role's URL, its password percent-encoded.
    fn url(&self, server: &str) -> String {
        format!(
            "postgres://{}:{HOSTILE_ESCAPED}@{server}/postgres?table={}",
            self.role, self.table
        )
    }

    async fn drop_all(self) {
        let (t, r) = (&self.table, &self.role);
        let _ = self
            .admin
            .batch_execute(&format!(
                "DROP TABLE IF EXISTS {t}; DROP ROLE IF EXISTS {r};"
            ))
            .await;
    }
}

/// A user with only `SELECT, INSERT, UPDATE` on
/// an existing table (PostgreSQL 15 refuses it `CREATE` on `public`) opens
/// the store and passes the whole suite, change feed included, with a
/// password holding `/ ? # @ +` (percent-encoded in the URL).
#[tokio::test(flavor = "multi_thread")]
async fn a_least_privilege_user_with_a_hostile_password_passes_the_suite() {
    let Some(url) = url() else { return };
    let lp = LeastPrivilege::new(&url).await;
    let role_url = lp.url(&server_addr(&url));
    let store = PostgresStore::connect(&role_url)
        .await
        .expect("the documented grants suffice");
    for shown in [format!("{store:?}"), tenure::LeaseView::describe(&store)] {
        assert!(!shown.contains("Qb2") && !shown.contains("Qe5"), "{shown}");
    }
    let table = LeaseTable {
        client: raw(&url).await,
        table: lp.table.clone(),
    };
    // The change feed included: a missing one fails its case.
    let harness = UrlHarness::new(role_url, PostgresStore::connect, table).promising(Feeds::ALL);
    let report = testkit::check_conformance(&harness).await;
    lp.drop_all().await;
    assert!(report.passed(), "{report}");
}

/// A table the user may not touch at all: the error names the grants.
#[tokio::test(flavor = "multi_thread")]
async fn a_user_without_grants_is_told_which_to_ask_for() {
    let Some(url) = url() else { return };
    let lp = LeastPrivilege::new(&url).await;
    lp.admin
        .batch_execute(&format!("REVOKE ALL ON {} FROM {}", lp.table, lp.role))
        .await
        .unwrap();
    let store = PostgresStore::connect(&lp.url(&server_addr(&url))).await;
    let group = testkit::unique_group("pg-nogrant");
    let e = match store {
        Err(e) => StoreError::from(e),
        Ok(s) => tenure::LeaseView::read(&s, &group).await.unwrap_err(),
    };
    lp.drop_all().await;
    testkit::assert_misconfigured(&e, "SELECT, INSERT and UPDATE");
    let text = e.to_string();
    assert!(!text.contains("Qb2") && !text.contains("Qe5"), "{text}");
}

/// An operator's open transaction holding the lease row's lock
/// makes a compare-and-swap fail after `lock_timeout` with an error saying
/// so, instead of stalling the store (and every later operation) for as
/// long as the transaction stays open.
#[tokio::test(flavor = "multi_thread")]
async fn a_row_lock_held_by_an_open_transaction_fails_fast() {
    let Some(url) = url() else { return };
    let (store, group, v1, operator) = locked_row(&url, "timeout=1s", "pg-locked").await;

    let started = Instant::now();
    let outcome = tokio::time::timeout(
        Duration::from_secs(20),
        tenure::LeaseStore::compare_and_swap(&store, &group, Some(v1), &testkit::held_by("a", 1)),
    )
    .await
    .expect("the compare-and-swap returned instead of waiting for the lock");
    let took = started.elapsed();
    let e = outcome.expect_err("the row is locked");
    assert!(e.is_transient(), "{e:?}");
    assert!(e.not_applied(), "a locked row is busy, not unknown: {e:?}");
    assert!(e.to_string().contains("lock"), "{e}");
    assert!(took < Duration::from_secs(5), "failed after {took:?}");
    // Reads do not wait for row locks, and the store is still usable.
    assert!(tenure::LeaseView::read(&store, &group)
        .await
        .unwrap()
        .is_some());

    operator.release().await;
    let outcome =
        tenure::LeaseStore::compare_and_swap(&store, &group, Some(v1), &testkit::held_by("a", 1))
            .await
            .unwrap();
    assert!(
        matches!(outcome, tenure::store::CasOutcome::Applied(_)),
        "{outcome:?}"
    );
}

/// A connection that went silent (a partition, a dead host: no
/// reset, no reply) fails the operation within the timeout, and the next
/// operation opens a new connection. The LISTEN connection is pinged, so
/// its feed ends and the elector subscribes again.
#[tokio::test(flavor = "multi_thread")]
async fn a_half_open_connection_fails_fast_and_is_replaced() {
    let Some(url) = url() else { return };
    let addr = server_addr(&url);
    let proxy = TcpProxy::start(addr.parse().unwrap()).await.unwrap();
    let via_proxy = format!(
        "{}?timeout=1s",
        url.replace(&addr, &proxy.addr().to_string())
    );
    let store = PostgresStore::connect(&via_proxy).await.unwrap();
    let group = testkit::unique_group("pg-half-open");
    tenure::LeaseView::read(&store, &group).await.unwrap();
    let mut feed = tenure::LeaseView::changes(&store, &group)
        .await
        .unwrap()
        .expect("a feed");

    proxy.cut();
    let (r, took) = timed_read(&store, &group).await;
    assert!(r.is_err(), "{r:?}");
    assert!(took < Duration::from_secs(4), "{took:?}");
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        while feed.changed().await.is_some() {}
    })
    .await;
    assert!(ended.is_ok(), "the feed on a silent connection ended");

    proxy.heal();
    let r = tenure::LeaseView::read(&store, &group).await;
    assert!(r.is_ok(), "a new connection after healing: {r:?}");
}

/// `t` and `public.t` notify on one channel, and a table name long
/// enough that `tenure:<name>` exceeds an identifier still works, feed and
/// all.
#[tokio::test(flavor = "multi_thread")]
async fn channels_are_normalised_and_short() {
    let Some(url) = url() else { return };
    for table in [
        format!("tenure_ch_{:x}", testkit::unique_suffix()),
        format!(
            "tenure_long_{:x}_{}",
            testkit::unique_suffix(),
            "x".repeat(30)
        ),
    ] {
        assert!(table.len() <= 63);
        let writer = PostgresStore::connect(&format!("{url}?table=public.{table}"))
            .await
            .unwrap();
        let watcher = PostgresStore::connect(&format!("{url}?table={table}"))
            .await
            .unwrap();
        let group = testkit::unique_group("pg-channel");
        let mut feed = tenure::LeaseView::changes(&watcher, &group)
            .await
            .unwrap()
            .expect("a feed");
        let outcome =
            tenure::LeaseStore::compare_and_swap(&writer, &group, None, &testkit::held_by("a", 1))
                .await
                .unwrap_or_else(|e| panic!("{table}: {e}"));
        assert!(matches!(outcome, tenure::store::CasOutcome::Applied(_)));
        tokio::time::timeout(Duration::from_secs(5), feed.changed())
            .await
            .unwrap_or_else(|_| panic!("{table}: no hint across t and public.t"))
            .expect("the feed is open");
        raw(&url)
            .await
            .batch_execute(&format!("DROP TABLE {table}"))
            .await
            .unwrap();
    }
}

/// A row deleted behind tenure's back and created again gets a
/// version above every earlier one, so a compare-and-swap delayed from
/// before the deletion cannot apply to the new record (ABA).
#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_and_recreated_row_never_reuses_a_version() {
    let Some(url) = url() else { return };
    let store = PostgresStore::connect(&url).await.unwrap();
    let group = testkit::unique_group("pg-aba");
    let acquire = |holder: &'static str| {
        let store = store.clone();
        let group = group.clone();
        async move {
            match tenure::LeaseStore::compare_and_swap(
                &store,
                &group,
                None,
                &testkit::held_by(holder, 1),
            )
            .await
            .unwrap()
            {
                tenure::store::CasOutcome::Applied(v) => v,
                other => panic!("{other:?}"),
            }
        }
    };
    let old = acquire("a").await;
    raw(&url)
        .await
        .execute(
            "DELETE FROM tenure_leases WHERE group_name = $1",
            &[&group.as_str()],
        )
        .await
        .unwrap();
    let new = acquire("b").await;
    assert!(new > old, "{new:?} after {old:?}");
    let stale =
        tenure::LeaseStore::compare_and_swap(&store, &group, Some(old), &testkit::held_by("a", 1))
            .await
            .unwrap();
    assert_eq!(
        stale,
        tenure::store::CasOutcome::Conflict,
        "a stale version never matches"
    );
}

/// An operation the caller abandoned (the elector's own deadline dropped
/// it) takes its connection with it, so the next operation does not queue
/// behind a statement still waiting for a row lock. (A single write waits
/// for the lock; a batch skips locked rows and does not.)
#[tokio::test(flavor = "multi_thread")]
async fn an_abandoned_operation_does_not_hold_up_the_next() {
    let Some(url) = url() else { return };
    // One connection: the next operation runs where the abandoned one ran.
    let (store, group, v1, operator) = locked_row(&url, "timeout=10s&pool=1", "pg-abandoned").await;
    // A single write, abandoned at its deadline.
    let abandoned = tokio::time::timeout(
        Duration::from_millis(300),
        tenure::LeaseStore::compare_and_swap(&store, &group, Some(v1), &testkit::held_by("a", 1)),
    )
    .await;
    assert!(
        abandoned.is_err(),
        "the write waits for the lock: {abandoned:?}"
    );
    let (read, took) = timed_read(&store, &group).await;
    assert!(read.unwrap().is_some());
    assert!(
        took < Duration::from_secs(2),
        "the read waited {took:?} behind the abandoned write"
    );
    operator.release().await;
}

/// A thousand groups on clones of one store handle are elected
/// by one engine, and a second handle (another process, in effect)
/// follows every renewal through the one LISTEN connection's records,
/// reading nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_thousand_groups_are_led_by_one_engine_and_followed_without_reads() {
    let Some(url) = url() else { return };
    // The target: at most three batched round trips per renew
    // interval (the window is one term, three renew intervals).
    scenarios::reported_thousand_groups("PostgreSQL", &url, PostgresStore::connect, Some(9)).await;
}

const CHANNEL: &str = "tenure:public.tenure_leases";

fn applied(outcome: Result<tenure::store::CasOutcome, StoreError>) -> tenure::Version {
    match outcome {
        Ok(tenure::store::CasOutcome::Applied(v)) => v,
        other => panic!("{other:?}"),
    }
}

/// The store-wide feed carries the record as written, so followers need
/// no read; a record too large for a NOTIFY payload (and one holding
/// characters a LATIN1 database could not take raw) is still written, and
/// reported as a hint.
#[tokio::test(flavor = "multi_thread")]
async fn the_feed_carries_records_and_hints_when_one_does_not_fit() {
    let Some(url) = url() else { return };
    let watcher = PostgresStore::connect(&url).await.unwrap();
    let writer = PostgresStore::connect(&url).await.unwrap();
    let mut feed = store_feed(&watcher).await;
    let group = testkit::unique_group("pg-feed-records");
    let (_, v1) = testkit::write_carried_whole(&writer, &mut feed, &group).await;
    // 1340 snowmen: 4 KiB of metadata, twice that once escaped to ASCII.
    let mut big = testkit::held_by("a", 1);
    big.metadata = tenure::Metadata::new().with("m", "☃".repeat(1340));
    big.metadata.validate().expect("within the metadata limit");
    let v2 = applied(tenure::LeaseStore::compare_and_swap(&writer, &group, Some(v1), &big).await);
    assert_eq!(
        testkit::next_change_about(&mut feed, &group).await,
        tenure::store::Change::Hint {
            group: group.clone()
        }
    );
    let read = tenure::LeaseView::read(&writer, &group)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((read.version, read.record), (v2, big));
}

/// Any user of the database may NOTIFY on the channel. A forged record
/// from a user who may not write the table is only a hint (the engine
/// reads the group and learns the truth), garbage is dropped or a hint,
/// and the feed goes on reporting real writes.
#[tokio::test(flavor = "multi_thread")]
async fn forged_and_garbage_notifications_never_pass_for_records() {
    let Some(url) = url() else { return };
    let watcher = PostgresStore::connect(&url).await.unwrap();
    let mut feed = store_feed(&watcher).await;
    let group = testkit::unique_group("pg-forged");
    let admin = raw(&url).await;
    let role = format!("tenure_forger_{:x}", testkit::unique_suffix());
    admin
        .batch_execute(&format!("CREATE ROLE {role} LOGIN PASSWORD 'forger'"))
        .await
        .unwrap();
    let forger_url = format!("postgres://{role}:forger@{}/postgres", server_addr(&url));
    let forger = raw(&forger_url).await;
    let record = String::from_utf8(testkit::held_by("mallory", 99).encode()).unwrap();
    let g = group.as_str();
    let payloads = [
        format!("1:{}:{g}:{}:{record}", g.len(), i64::MAX),
        String::new(),
        ":::".into(),
        format!("1:{}:{g}:12:not json", g.len()),
        format!("1:999:{g}:"),
        "\u{1}\u{2}".into(),
        "x".repeat(7999),
    ];
    for p in &payloads {
        forger
            .execute("SELECT pg_notify($1, $2)", &[&CHANNEL, p])
            .await
            .unwrap();
    }
    // Only hints about the group come out, and nothing else stops the feed.
    let mut hints = 0;
    let mut real = None;
    let writer = PostgresStore::connect(&url).await.unwrap();
    let mine = testkit::held_by("a", 1);
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match feed.next().await.expect("the feed is open") {
                tenure::store::Change::Hint { group: h } if h == group => {
                    hints += 1;
                    if hints == 2 {
                        // Both the forged record and the unparseable one
                        // arrived as hints; now a real write.
                        real = Some(applied(
                            tenure::LeaseStore::compare_and_swap(&writer, &group, None, &mine)
                                .await,
                        ));
                    }
                }
                tenure::store::Change::Written { group: w, current } if w == group => {
                    assert_eq!(Some(current.version), real, "only the real write");
                    assert_eq!(current.record, mine);
                    return;
                }
                tenure::store::Change::Resync => panic!("garbage made the feed resync"),
                _ => {}
            }
        }
    })
    .await
    .expect("the real write reported after the forgeries");
    drop(forger);
    let _ = admin
        .batch_execute(&format!("DROP ROLE IF EXISTS {role}"))
        .await;
}

/// The LISTEN connection lost (here: its backend terminated) is replaced
/// at once, and the feed says Resync, since notifications sent meanwhile
/// are gone; then it reports writes again.
#[tokio::test(flavor = "multi_thread")]
async fn a_lost_listen_connection_reconnects_and_resyncs() {
    let Some(url) = url() else { return };
    let (watcher, app) = named_store(&url, "resync").await;
    let mut feed = store_feed(&watcher).await;
    let admin = raw(&url).await;
    let killed = over_connections(&admin, "count(pg_terminate_backend(pid))", &app).await;
    assert!(killed >= 1, "the watcher's connections were found");
    let writer = PostgresStore::connect(&url).await.unwrap();
    testkit::resyncs_then_carries_writes(&mut feed, &writer, "pg-after-resync").await;
}

/// Connections do not grow with the number of groups: a few hundred
/// groups on one store handle use the pool (4) and one LISTEN connection.
#[tokio::test(flavor = "multi_thread")]
async fn connections_stay_bounded_whatever_the_number_of_groups() {
    let Some(url) = url() else { return };
    let (store, app) = named_store(&url, "pool").await;
    let prefix = testkit::unique_group("pg-pool");
    let admin = raw(&url).await;
    let most = many_groups::peak_while_groups_lead(&store, prefix.as_str(), 500, || async {
        let n = over_connections(&admin, "count(*)", &app).await;
        usize::try_from(n).expect("a count")
    })
    .await;
    assert!(
        most >= 2,
        "the pool and the LISTEN connection are seen: {most}"
    );
    assert!(most <= 5, "{most} connections for 500 groups");
}

/// A batch far larger than one statement's share, with every group
/// written twice (acquire, then renew with the version the first write
/// will give it, which only the batch's own order makes right), and read
/// back in one call.
#[tokio::test(flavor = "multi_thread")]
async fn a_huge_batch_with_repeats_applies_in_order() {
    let Some(url) = url() else { return };
    let store = PostgresStore::connect(&url).await.unwrap();
    let prefix = testkit::unique_group("pg-huge");
    many_groups::huge_batch_with_repeats_applies_in_order(&store, prefix.as_str(), 5000).await;
}

/// A write notified while the LISTEN connection was still being opened
/// (connecting with SCRAM takes a while) is not lost: a new subscription
/// hints once, so the elector reads once instead of waiting for a poll.
#[tokio::test(flavor = "multi_thread")]
async fn a_new_subscription_hints_once() {
    let Some(url) = url() else { return };
    let store = PostgresStore::connect(&url).await.unwrap();
    let group = testkit::unique_group("pg-first-hint");
    let mut feed = tenure::LeaseView::changes(&store, &group)
        .await
        .unwrap()
        .expect("a feed");
    tokio::time::timeout(Duration::from_secs(2), feed.changed())
        .await
        .expect("a hint on subscribing")
        .expect("the feed is open");
}

/// A timeout beyond what `statement_timeout` can hold (24.8 days) is
/// clamped for the server instead of failing every connect.
#[tokio::test(flavor = "multi_thread")]
async fn a_huge_timeout_still_connects() {
    let Some(url) = url() else { return };
    let store = PostgresStore::connect(&format!("{url}?timeout=100000000s"))
        .await
        .expect("connect with a huge timeout");
    let group = testkit::unique_group("pg-huge-timeout");
    assert_eq!(tenure::LeaseView::read(&store, &group).await.unwrap(), None);
}

/// A single compare-and-swap (its own plain statement) and the same write
/// in a batch (the `unnest` statement; a filler that cannot apply keeps
/// the batch from being one) answer alike: creates, stale versions,
/// current versions, versions no row can have.
#[tokio::test(flavor = "multi_thread")]
async fn single_writes_and_batches_of_one_agree() {
    use tenure::store::{CasOutcome, CasRequest};
    use tenure::{LeaseStore, Version};
    let Some(url) = url() else { return };
    let store = PostgresStore::connect(&url).await.unwrap();
    let group = testkit::unique_group("pg-single");
    let rec = testkit::held_by("a", 1);
    let filler = CasRequest {
        group: testkit::unique_group("pg-single-filler"),
        expected: Some(Version(1)),
        record: rec.clone(),
    };
    let batch = |expected: Option<Version>| {
        let store = store.clone();
        let requests = [
            CasRequest {
                group: group.clone(),
                expected,
                record: rec.clone(),
            },
            filler.clone(),
        ];
        async move {
            let mut out = store.compare_and_swap_many(&requests).await.unwrap();
            assert_eq!(out.len(), 2);
            assert_eq!(out.pop().unwrap().unwrap(), CasOutcome::Conflict);
            out.pop().unwrap().unwrap()
        }
    };
    let single = |expected: Option<Version>| store.compare_and_swap(&group, expected, &rec);

    let v1 = applied(single(None).await);
    assert_eq!(single(None).await.unwrap(), CasOutcome::Conflict);
    assert_eq!(batch(None).await, CasOutcome::Conflict);
    let v2 = applied(single(Some(v1)).await);
    assert!(v2 > v1);
    assert_eq!(single(Some(v1)).await.unwrap(), CasOutcome::Conflict);
    assert_eq!(batch(Some(v1)).await, CasOutcome::Conflict);
    let CasOutcome::Applied(v3) = batch(Some(v2)).await else {
        panic!("a batch of one at the current version conflicted");
    };
    assert!(v3 > v2);
    for beyond in [Version(u64::MAX), Version(i64::MAX as u64 + 1)] {
        assert_eq!(single(Some(beyond)).await.unwrap(), CasOutcome::Conflict);
        assert_eq!(batch(Some(beyond)).await, CasOutcome::Conflict);
    }
    let v4 = applied(single(Some(v3)).await);
    let read = tenure::LeaseView::read(&store, &group)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((read.version, read.record), (v4, rec.clone()));
    let fresh = testkit::unique_group("pg-single-batch");
    let requests = [
        CasRequest {
            group: fresh.clone(),
            expected: None,
            record: rec.clone(),
        },
        filler.clone(),
    ];
    let created = store.compare_and_swap_many(&requests).await.unwrap();
    assert!(matches!(
        created[..],
        [Ok(CasOutcome::Applied(_)), Ok(CasOutcome::Conflict)]
    ));
    assert_eq!(
        store.compare_and_swap(&fresh, None, &rec).await.unwrap(),
        CasOutcome::Conflict
    );
}

/// A version column set by hand below zero or to the largest bigint (no
/// write can follow it) is a corrupt record naming the column, in a read,
/// a batch read and a listing, not a lease that conflicts or fails on
/// every write without a word.
#[tokio::test(flavor = "multi_thread")]
async fn a_version_column_out_of_range_is_a_corrupt_record() {
    let Some(url) = url() else { return };
    let store = PostgresStore::connect(&url).await.unwrap();
    let db = raw(&url).await;
    for bad in [-5_i64, i64::MAX] {
        let group = testkit::unique_group("pg-bad-version");
        applied(
            tenure::LeaseStore::compare_and_swap(&store, &group, None, &testkit::held_by("a", 1))
                .await,
        );
        db.execute(
            "UPDATE tenure_leases SET version = $2 WHERE group_name = $1",
            &[&group.as_str(), &bad],
        )
        .await
        .unwrap();
        let check = |got: Result<Option<tenure::Versioned>, StoreError>| match got {
            Err(StoreError::Record {
                source: tenure::RecordError::Corrupt { detail },
                ..
            }) => assert!(detail.contains(&bad.to_string()), "{detail}"),
            other => panic!("version {bad}: {other:?}"),
        };
        check(tenure::LeaseView::read(&store, &group).await);
        let many = tenure::LeaseView::read_many(&store, std::slice::from_ref(&group))
            .await
            .unwrap();
        check(many.into_iter().next().unwrap());
        let listed = tenure::LeaseView::list(&store, group.as_str())
            .await
            .unwrap();
        let [entry] = &listed[..] else {
            panic!("version {bad}: {listed:?}")
        };
        assert!(
            matches!(entry.record, Err(StoreError::Record { .. })),
            "version {bad}: {entry:?}"
        );
    }
}

/// One row locked by another session fails only its own compare-and-swap
/// in a batch, at once: the rest of the statement applies (the rows are
/// locked with SKIP LOCKED, the locked one reported busy).
#[tokio::test(flavor = "multi_thread")]
async fn a_locked_row_fails_only_its_own_write_in_a_batch() {
    let Some(url) = url() else { return };
    let (store, locked, v1, operator) = locked_row(&url, "timeout=10s", "pg-batch-locked").await;
    let mut requests = Vec::new();
    for i in 0..50 {
        let group = testkit::unique_group(&format!("pg-batch-free-{i}"));
        requests.push(tenure::store::CasRequest {
            group,
            expected: None,
            record: testkit::held_by("a", 1),
        });
    }
    requests.insert(
        25,
        tenure::store::CasRequest {
            group: locked.clone(),
            expected: Some(v1),
            record: testkit::held_by("a", 1),
        },
    );
    let started = Instant::now();
    let results = tenure::LeaseStore::compare_and_swap_many(&store, &requests)
        .await
        .expect("the batch as a whole succeeds");
    let took = started.elapsed();
    for (i, result) in results.iter().enumerate() {
        match (i, result) {
            (25, Err(e)) => {
                assert!(e.not_applied(), "{e:?}");
                assert!(e.to_string().contains(locked.as_str()), "{e}");
            }
            (25, other) => panic!("the locked row's write: {other:?}"),
            (_, Ok(tenure::store::CasOutcome::Applied(_))) => {}
            (i, other) => panic!("write {i} of a free row: {other:?}"),
        }
    }
    assert!(
        took < Duration::from_secs(5),
        "the batch waited {took:?} for the lock"
    );
    operator.release().await;
    // Once the lock is gone, the same write applies.
    let outcome = tenure::LeaseStore::compare_and_swap_many(&store, &requests[25..26]).await;
    assert!(
        matches!(
            outcome.as_deref(),
            Ok([Ok(tenure::store::CasOutcome::Applied(_))])
        ),
        "{outcome:?}"
    );
}

/// 2,000 groups led by one engine; an operator's open transaction locks one
/// group's row for three terms: only that group may lose its term.
#[tokio::test(flavor = "multi_thread")]
async fn an_operators_row_lock_costs_only_that_group_its_term() {
    let Some(url) = url() else { return };
    let store = PostgresStore::connect(&url).await.unwrap();
    let figures = scenarios::one_unwritable_group_fails_alone(
        store,
        2000,
        Duration::from_secs(4),
        |group| {
            let url = url.clone();
            async move { RowLock::hold(&url, &group).await }
        },
        RowLock::release,
    )
    .await;
    eprintln!("PostgreSQL isolation: {figures:?}");
    assert!(
        figures.jammed_lost,
        "the locked group could not have renewed"
    );
}

/// Eight members of a sharded set started at the same moment at a 2 s
/// term, on a table shared with 200,000 rows of other groups (a listing by
/// prefix is a scan of all of them): they balance within the documented
/// bound, and every member sees the others.
#[tokio::test(flavor = "multi_thread")]
async fn eight_members_started_together_balance_beside_200000_other_rows() {
    let Some(url) = url() else { return };
    let table = format!("tenure_shards_{:x}", testkit::unique_suffix());
    let store_url = format!("{url}?table={table}");
    let first = PostgresStore::connect(&store_url).await.unwrap();
    raw(&url)
        .await
        .batch_execute(&format!(
            "INSERT INTO {table} (group_name, version, record)
             SELECT 'other-app/' || i, 1, '\\x00'::bytea FROM generate_series(1, 200000) i"
        ))
        .await
        .expect("fill the table");
    let mut handles = vec![first];
    for _ in 1..8 {
        handles.push(PostgresStore::connect(&store_url).await.unwrap());
    }
    let term = Duration::from_secs(2);
    let set = sharded::start_together(handles, "cs", 64, term, None);
    let within = sharded::settle_bound(term) + Duration::from_secs(5);
    let took = sharded::until_balanced(&set, 64, within).await;
    eprintln!("8 × 64 at 2 s beside 200,000 rows: balanced in {took:?} (bound {within:?})");
    for m in &set {
        m.shutdown().await;
    }
    raw(&url)
        .await
        .batch_execute(&format!("DROP TABLE {table}"))
        .await
        .expect("drop the table");
}

/// Batches of 4,096 renewals keep applying however often a connection has
/// run the batch statement. PostgreSQL may switch a prepared statement to
/// a generic plan after its fifth run, and the batch write's generic plan
/// joined its rows by nested loops: 2.5 s a batch instead of about 40 ms,
/// past this store's `statement_timeout` (¾ of `timeout=2s`), so every
/// batch from the sixth on failed. 24 batches over the pool's 4
/// connections run the statement at least 6 times on one of them.
#[tokio::test(flavor = "multi_thread")]
async fn large_batches_keep_their_plan_after_many_runs() {
    let Some(url) = url() else { return };
    let separator = if url.contains('?') { '&' } else { '?' };
    let store = PostgresStore::connect(&format!("{url}{separator}timeout=2s"))
        .await
        .unwrap();
    let prefix = testkit::unique_group("pg-plan");
    let groups: Vec<GroupName> = (0..4096)
        .map(|i| GroupName::new(format!("{prefix}-{i}")).unwrap())
        .collect();
    let record = testkit::held_by("a", 1);
    let mut expected: Vec<Option<Version>> = vec![None; groups.len()];
    for round in 0..24 {
        let requests: Vec<tenure::store::CasRequest> = groups
            .iter()
            .zip(&expected)
            .map(|(group, expected)| tenure::store::CasRequest {
                group: group.clone(),
                expected: *expected,
                record: record.clone(),
            })
            .collect();
        let results = tenure::LeaseStore::compare_and_swap_many(&store, &requests)
            .await
            .unwrap_or_else(|e| panic!("batch {round} failed as a whole: {e}"));
        for (i, result) in results.into_iter().enumerate() {
            match result {
                Ok(tenure::store::CasOutcome::Applied(v)) => expected[i] = Some(v),
                other => panic!("batch {round}, group {i}: {other:?}"),
            }
        }
    }
}
