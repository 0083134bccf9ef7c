//! Misconfiguration gets a clear, typed error that names the fix, within a
//! bounded time, and never shows the password or token: credentials,
//! permissions, TLS, a server without JetStream, buckets that would lose
//! leases. Each against a private nats-server configured for the case.

mod common;

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, stream};
use tenure::store::CasOutcome;
use tenure::{GroupName, LeaseStore, LeaseView, StoreError};
use tenure_nats::{NatsStore, NatsStoreError};
use tenure_testkit::{self as testkit, held_by, TlsFiles};

/// A password with every character that cuts a URL short.
const SECRET: &str = "Qa1/Qb2?Qc3#Qd4@Qe5+Qf6";
const PIECES: [&str; 6] = ["Qa1", "Qb2", "Qc3", "Qd4", "Qe5", "Qf6"];
/// The same secret as a URL carries it: `/ ? # @` percent-encoded.
const ESCAPED: &str = "Qa1%2FQb2%3FQc3%23Qd4%40Qe5+Qf6";

fn assert_no_secret(what: &str, text: &str) {
    for p in PIECES {
        assert!(
            !text.contains(p),
            "{what} shows a piece of the secret: {text}"
        );
    }
}

/// Connecting fails within a bound, with the error returned.
async fn refused(url: &str) -> NatsStoreError {
    let started = Instant::now();
    let err = NatsStore::connect(url).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "{url}: took {:?}",
        started.elapsed()
    );
    assert_no_secret("Display", &err.to_string());
    assert_no_secret("Debug", &format!("{err:?}"));
    eprintln!("{}\n  -> {err}", tenure::store::url::redact(url));
    err
}

async fn works(store: &NatsStore) {
    let group = testkit::unique_group("works");
    assert!(store.read(&group).await.unwrap().is_none());
    assert!(matches!(
        store.compare_and_swap(&group, None, &held_by("a", 1)).await,
        Ok(CasOutcome::Applied(_))
    ));
}

#[tokio::test(flavor = "multi_thread")]
async fn user_and_password_errors_are_misconfigured_and_secret_free() {
    let server = common::Nats::with_config(&format!(
        r#"authorization {{ users = [ {{ user: "tenure", password: "{SECRET}" }} ] }}"#
    ));
    let url = |userinfo: &str| {
        format!(
            "nats://{userinfo}@127.0.0.1:{}/auth?timeout=2s",
            server.port
        )
    };

    let err = refused(&url(&format!("tenure:wrong-{ESCAPED}"))).await;
    assert!(matches!(err, NatsStoreError::Credentials { .. }), "{err:?}");
    assert!(
        err.to_string().contains("nats://user:password@host:port"),
        "{err}"
    );
    assert!(matches!(
        StoreError::from(err),
        StoreError::Misconfigured { .. }
    ));

    let err = refused(&format!("nats://127.0.0.1:{}/auth?timeout=2s", server.port)).await;
    assert!(
        matches!(err, NatsStoreError::AuthRequired { .. }),
        "{err:?}"
    );

    // The password exactly as pasted, unescaped, is refused (it cannot be
    // told from a path and a query), naming the fix and no piece of it.
    let err = refused(&url(&format!("tenure:{SECRET}"))).await;
    assert!(matches!(err, NatsStoreError::InvalidUrl { .. }), "{err:?}");
    assert!(err.to_string().contains("%2F"), "{err}");
    // Percent-encoded, it works.
    let store = NatsStore::connect(&url(&format!("tenure:{ESCAPED}")))
        .await
        .unwrap();
    works(&store).await;
    testkit::assert_store_shown_without_secret(&store, "nats://tenure@127.0.0.1:", &PIECES);
}

#[tokio::test(flavor = "multi_thread")]
async fn token_authentication_works_and_a_wrong_token_is_named() {
    let server = common::Nats::with_config(&format!(r#"authorization {{ token: "{SECRET}" }}"#));
    let url = |token: &str| format!("nats://{token}@127.0.0.1:{}/tok?timeout=2s", server.port);
    let err = refused(&url("wrong-Qa1-Qf6")).await;
    assert!(matches!(err, NatsStoreError::Credentials { .. }), "{err:?}");
    assert!(err.to_string().contains("token"), "{err}");
    let store = NatsStore::connect(&url(ESCAPED)).await.unwrap();
    works(&store).await;
    assert_no_secret("describe", &store.describe());
    assert_no_secret("Debug", &format!("{store:?}"));
}

/// The URL of `rest` (a bucket and query) on `server` as `user`, whose
/// password [`with_users_and_bucket`] sets to `{user}-pw`.
fn as_user(server: &common::NatsServer, user: &str, rest: &str) -> String {
    format!("nats://{user}:{user}-pw@127.0.0.1:{}/{rest}", server.port)
}

/// A private server whose users are `admin`, who may do anything, and
/// `users` (entries of an authorization block's user list, each password
/// `{user}-pw`), with `bucket` created by the admin's connection.
async fn with_users_and_bucket(users: &str, bucket: &str) -> common::NatsServer {
    let server = common::Nats::with_config(&format!(
        r#"authorization {{ users = [ {{ user: "admin", password: "admin-pw" }}, {users} ] }}"#
    ));
    NatsStore::connect(&as_user(&server, "admin", bucket))
        .await
        .expect("the admin creates the bucket");
    server
}

/// A user who may use the JetStream API but not publish to the bucket's
/// keys: connecting (which only reads the bucket) works, a write is
/// refused by the server, and the store names the permission rather than
/// reporting a bare timeout. A user who may not even ask JetStream is
/// refused at connect, naming the permission.
#[tokio::test(flavor = "multi_thread")]
async fn refused_permissions_are_named() {
    let reader = r#"{ user: "reader", password: "reader-pw", permissions: {
        publish: { allow: ["$JS.API.>"] }, subscribe: { allow: ["_INBOX.>"] } } }"#;
    let nobody = r#"{ user: "nobody", password: "nobody-pw", permissions: {
        publish: { deny: [">"] }, subscribe: { allow: ["_INBOX.>"] } } }"#;
    let server = with_users_and_bucket(&format!("{reader}, {nobody}"), "perm").await;
    let url = |user: &str| as_user(&server, user, "perm?timeout=1s");

    let reader = NatsStore::connect(&url("reader")).await.unwrap();
    let group = testkit::unique_group("perm");
    let err = reader
        .compare_and_swap(&group, None, &held_by("a", 1))
        .await
        .unwrap_err();
    eprintln!("a refused write: {err}");
    assert!(
        matches!(&err, StoreError::Misconfigured { message, .. } if message.contains("$KV.perm.>")),
        "{err}"
    );

    let err = refused(&url("nobody")).await;
    assert!(matches!(err, NatsStoreError::Permission { .. }), "{err:?}");
    assert!(err.to_string().contains("$JS.API.>"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn tls_with_a_ca_of_the_tests_own() {
    let tls = TlsFiles::make();
    let server = common::Nats::with_config(&format!(
        "tls {{ cert_file: {:?}, key_file: {:?} }}\nauthorization {{ users = [ {{ user: \"tenure\", password: \"{SECRET}\" }} ] }}",
        tls.cert, tls.key
    ));
    let base = format!("127.0.0.1:{}/tls", server.port);
    let ca = tls.ca.display().to_string();

    let store = NatsStore::connect(&format!(
        "nats+tls://tenure:{ESCAPED}@{base}?ca={ca}&timeout=2s"
    ))
    .await
    .unwrap();
    works(&store).await;
    testkit::assert_store_shown_without_secret(&store, "nats+tls://tenure@", &PIECES);

    // The system's roots do not know the test's CA.
    let err = refused(&format!("nats+tls://tenure:{ESCAPED}@{base}?timeout=2s")).await;
    assert!(matches!(err, NatsStoreError::Tls { .. }), "{err:?}");
    assert!(err.to_string().contains("ca="), "{err}");

    // A CA file that is not there.
    let err = refused(&format!(
        "nats+tls://tenure:{ESCAPED}@{base}?ca=/nonexistent/ca.pem&timeout=2s"
    ))
    .await;
    assert!(
        matches!(
            err,
            NatsStoreError::TlsFile(tenure::store::tls::PemError::Unreadable { option: "ca", .. })
        ),
        "{err:?}"
    );

    // TLS asked of a plain-text server.
    let plain = common::Nats::start();
    let err = refused(&format!(
        "nats+tls://127.0.0.1:{}/tls?ca={ca}&timeout=2s",
        plain.port
    ))
    .await;
    assert!(matches!(err, NatsStoreError::Tls { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_without_jetstream_is_named() {
    let server = common::Nats::without_jetstream();
    let err = refused(&format!("nats://127.0.0.1:{}/b?timeout=2s", server.port)).await;
    assert!(matches!(err, NatsStoreError::NoJetStream { .. }), "{err:?}");
    assert!(err.to_string().contains("-js"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn nothing_listening_is_unreachable_within_the_timeout() {
    let port = testkit::free_port();
    let err = refused(&format!("nats://127.0.0.1:{port}/b?timeout=1s")).await;
    assert!(matches!(err, NatsStoreError::Unreachable { .. }), "{err:?}");
    assert!(err.is_transient());
}

/// Buckets whose settings would lose leases (and send tokens back) are
/// refused, naming the setting: memory storage, entries that expire.
#[tokio::test(flavor = "multi_thread")]
async fn buckets_that_would_lose_leases_are_refused() {
    let server = common::Nats::start();
    let client = async_nats::connect(server.addr().to_string())
        .await
        .unwrap();
    let js = jetstream::new(client);
    let bucket = |name: &str, edit: &dyn Fn(&mut stream::Config)| {
        let mut config = stream::Config {
            name: format!("KV_{name}"),
            subjects: vec![format!("$KV.{name}.>")],
            max_messages_per_subject: 1,
            discard: stream::DiscardPolicy::New,
            allow_rollup: true,
            deny_delete: true,
            ..Default::default()
        };
        edit(&mut config);
        config
    };
    js.create_stream(bucket("mem", &|c| c.storage = stream::StorageType::Memory))
        .await
        .unwrap();
    js.create_stream(bucket("ttl", &|c| c.max_age = Duration::from_secs(60)))
        .await
        .unwrap();
    js.create_stream(bucket("notkv", &|c| c.max_messages_per_subject = -1))
        .await
        .unwrap();
    for (name, needle) in [
        ("mem", "memory"),
        ("ttl", "max_age"),
        ("notkv", "no key-value"),
    ] {
        let err = refused(&server.url(name)).await;
        assert!(
            matches!(err, NatsStoreError::UnsafeBucket { .. }),
            "{name}: {err:?}"
        );
        assert!(err.to_string().contains(needle), "{name}: {err}");
        assert!(err.to_string().contains("nats kv add"), "{name}: {err}");
    }
    // A bucket tenure made itself is fine, and so is opening it again.
    NatsStore::connect(&server.url("fine")).await.unwrap();
    NatsStore::connect(&server.url("fine")).await.unwrap();
    // A stream of someone else's that holds the bucket's subjects: no
    // bucket can be made, and the error says why.
    foreign_stream(&js, "OTHER", "taken").await;
    let err = refused(&server.url("taken")).await;
    assert!(
        matches!(err, NatsStoreError::BucketCreate { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("$KV.taken.>"), "{err}");
}

/// Creates a stream `name`, not a key-value bucket, that holds the
/// subjects of the bucket `bucket`.
async fn foreign_stream(js: &jetstream::Context, name: &str, bucket: &str) {
    js.create_stream(stream::Config {
        name: name.into(),
        subjects: vec![format!("$KV.{bucket}.>")],
        ..Default::default()
    })
    .await
    .unwrap();
}

/// A creation refused because the subjects overlap a stream that then
/// goes (as the server may answer a creation racing another process's)
/// is tried again: the open succeeds once the subjects are free.
#[tokio::test(flavor = "multi_thread")]
async fn an_overlap_that_clears_is_waited_out() {
    let server = common::Nats::start();
    let client = async_nats::connect(server.addr().to_string())
        .await
        .unwrap();
    let js = jetstream::new(client);
    foreign_stream(&js, "PASSING", "passing").await;
    let url = server.url("passing");
    let open = tokio::spawn(async move { NatsStore::connect(&url).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    js.delete_stream("PASSING").await.unwrap();
    let store = open.await.unwrap().unwrap_or_else(|e| panic!("{e}"));
    works(&store).await;
}

/// Processes that start at once on a server without the bucket all open
/// it: one creates it, and the others, whose creations the server refuses
/// meanwhile (its name in use, or its subjects overlapping a stream being
/// created), open what is there.
#[tokio::test(flavor = "multi_thread")]
async fn many_opening_a_missing_bucket_at_once_all_open_it() {
    let server = common::Nats::start();
    for round in 0..5 {
        let url = server.url(&format!("racing{round}"));
        let opens: Vec<_> = (0..8)
            .map(|_| {
                let url = url.clone();
                tokio::spawn(async move { NatsStore::connect(&url).await })
            })
            .collect();
        for open in opens {
            let store = open.await.unwrap().unwrap_or_else(|e| panic!("{e}"));
            works(&store).await;
        }
    }
}

/// A refusal of one group's key says nothing about another request that
/// timed out on the same connection: with the server frozen, a write to a
/// group the user may write stays a timeout (it may have been applied),
/// even right after the server refused a write to another group. The
/// refused write itself still names the permission.
#[tokio::test(flavor = "multi_thread")]
async fn a_timeout_is_no_permission_error_because_another_key_was_refused() {
    let some = r#"{ user: "some", password: "some-pw", permissions: {
        publish: { allow: ["$JS.API.>", "$KV.part.tenure.mine"] },
        subscribe: { allow: ["_INBOX.>"] } } }"#;
    let server = with_users_and_bucket(some, "part").await;
    let store = NatsStore::connect(&as_user(&server, "some", "part?timeout=2s"))
        .await
        .unwrap();
    let mine = GroupName::new("mine").unwrap();
    let theirs = GroupName::new("theirs").unwrap();
    assert_eq!(NatsStore::key_of(&mine), "tenure.mine");
    let Ok(CasOutcome::Applied(v1)) = store.compare_and_swap(&mine, None, &held_by("a", 1)).await
    else {
        panic!("the user may write its own group");
    };

    // The server reports the violation at once; the refused write waits
    // out its timeout meanwhile.
    let refused_write = tokio::spawn({
        let store = store.clone();
        async move {
            store
                .compare_and_swap(&theirs, None, &held_by("a", 1))
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.freeze();
    let err = store
        .compare_and_swap(&mine, Some(v1), &held_by("a", 1))
        .await
        .unwrap_err();
    server.thaw();
    assert!(matches!(err, StoreError::Timeout(_)), "{err}");

    let refused = refused_write.await.unwrap().unwrap_err();
    assert!(
        matches!(&refused, StoreError::Misconfigured { message, .. } if message.contains("$KV.part.>")),
        "{refused}"
    );
}
