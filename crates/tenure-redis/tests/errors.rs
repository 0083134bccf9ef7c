//! Misconfiguration gets a clear, typed error that names the fix, within a
//! bounded time, and never shows the password.

mod common;

use redis::AsyncCommands;
use tenure::{LeaseStore, LeaseView, RecordError, StoreError};
use tenure_redis::{RedisStore, RedisStoreError};
use tenure_testkit as testkit;

const SECRET: &str = "pw-Secret-7f3a";

fn assert_no_secret(what: &str, text: &str) {
    assert!(!text.contains(SECRET), "{what} shows the password: {text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn wrong_credentials_are_misconfigured_and_secret_free() {
    let server = common::Redis::start(&[]);
    server.cli(&[
        "ACL",
        "SETUSER",
        "app",
        "on",
        &format!(">{SECRET}"),
        "~*",
        "&*",
        "+@all",
    ]);
    let url = |pw: &str| format!("redis://app:{pw}@127.0.0.1:{}", server.port);

    let err = RedisStore::connect(&url("wrong-pw-Secret-7f3a"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, RedisStoreError::Credentials { .. }),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("user \"app\"") && text.contains("password"),
        "{text}"
    );
    assert_no_secret("Display", &text);
    assert_no_secret("Debug", &format!("{err:?}"));
    let store_err = StoreError::from(err);
    assert!(matches!(store_err, StoreError::Misconfigured { .. }));
    assert!(!store_err.is_transient());

    let store = RedisStore::connect(&url(SECRET)).await.unwrap();
    testkit::assert_store_shown_without_secret(&store, "redis://app@127.0.0.1:", &[SECRET]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_password_and_missing_permissions_name_the_fix() {
    let server = common::Redis::start(&["--requirepass", SECRET]);
    let err = RedisStore::connect(&server.url()).await.unwrap_err();
    assert!(matches!(err, RedisStoreError::NoAuth { .. }), "{err:?}");
    assert!(
        err.to_string().contains("redis://user:password@host"),
        "{err}"
    );

    // A user that may PING but not run scripts.
    let admin = format!("redis://:{SECRET}@127.0.0.1:{}", server.port);
    let mut c = redis::Client::open(admin.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = redis::cmd("ACL")
        .arg(
            &[
                "SETUSER",
                "limited",
                "on",
                ">limited-pw",
                "~tenure:*",
                "+ping",
            ][..],
        )
        .query_async(&mut c)
        .await
        .unwrap();
    let store = RedisStore::connect(&format!(
        "redis://limited:limited-pw@127.0.0.1:{}",
        server.port
    ))
    .await
    .unwrap();
    let err = store
        .read(&testkit::unique_group("perm"))
        .await
        .unwrap_err();
    testkit::assert_misconfigured(&err, "ACL SETUSER");
}

#[tokio::test(flavor = "multi_thread")]
async fn keys_of_another_type_are_reported_and_never_overwritten() {
    let server = common::Redis::start(&[]);
    let store = RedisStore::connect(&server.url()).await.unwrap();
    assert!(store.adopt_empty().await.unwrap());
    let group = testkit::unique_group("wrongtype");
    let key = store.key(&group);
    let mut c = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = c.set(&key, "somebody else's value").await.unwrap();

    let err = store.read(&group).await.unwrap_err();
    match &err {
        StoreError::Record {
            source: RecordError::Foreign { detail },
            ..
        } => assert!(detail.contains("holds a string"), "{detail}"),
        other => panic!("{other:?}"),
    }
    let held = testkit::held_by("a", 1);
    assert!(store.compare_and_swap(&group, None, &held).await.is_err());
    assert!(store
        .compare_and_swap(&group, Some(tenure::Version(1)), &held)
        .await
        .is_err());
    let still: String = c.get(&key).await.unwrap();
    assert_eq!(still, "somebody else's value");

    // A foreign hash without tenure's fields: Foreign on read, Conflict on write.
    let group2 = testkit::unique_group("foreign-hash");
    let key2 = store.key(&group2);
    let _: () = c.hset(&key2, "owner", "cron").await.unwrap();
    assert!(matches!(
        store.read(&group2).await,
        Err(StoreError::Record {
            source: RecordError::Foreign { .. },
            ..
        })
    ));
    assert_eq!(
        store.compare_and_swap(&group2, None, &held).await.unwrap(),
        tenure::store::CasOutcome::Conflict
    );

    // The marker key of another type makes the whole prefix unusable.
    let other = RedisStore::connect(&format!("{}?prefix=mine:", server.url()))
        .await
        .unwrap();
    let _: () = c.set("mine:", "x").await.unwrap();
    let err = other.read(&group).await.unwrap_err();
    testkit::assert_misconfigured(&err, "another key prefix");
}

#[tokio::test(flavor = "multi_thread")]
async fn tls_to_a_plain_server_fails_clearly_and_quickly() {
    let server = common::Redis::start(&[]);
    let err = testkit::tls_to_a_plain_server_fails(
        RedisStore::connect(&format!(
            "rediss://:{SECRET}@127.0.0.1:{}?timeout=1s",
            server.port
        )),
        "use redis:// instead of rediss://",
        SECRET,
    )
    .await;
    assert!(matches!(err, RedisStoreError::Tls { .. }), "{err:?}");
    assert!(matches!(
        StoreError::from(err),
        StoreError::Misconfigured { .. }
    ));

    let err = RedisStore::connect(&format!(
        "rediss://127.0.0.1:{}?ca=/nonexistent/ca.pem",
        server.port
    ))
    .await
    .unwrap_err();
    assert!(matches!(err, RedisStoreError::TlsFile { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_evicting_server_and_an_absent_one_are_told_apart() {
    let server = common::Redis::start(&["--maxmemory-policy", "allkeys-lru"]);
    let err = RedisStore::connect(&server.url()).await.unwrap_err();
    assert!(matches!(err, RedisStoreError::Eviction { .. }), "{err:?}");
    assert!(err.to_string().contains("noeviction"), "{err}");

    testkit::unreachable_is_unavailable(
        |at| async move { RedisStore::connect(&format!("redis://{at}?timeout=1s")).await },
        RedisStoreError::is_transient,
    )
    .await;
}
