//! Digest authentication: with a user in the URL, tenure's nodes carry an
//! ACL for that user alone; another password, another user, or none is
//! refused with a typed error naming the fix, never the password.

mod common;

use tenure::{LeaseStore, LeaseView, StoreError};
use tenure_testkit::{self as testkit, held_by};
use tenure_zookeeper::{ZkStore, ZkStoreError};
use zookeeper_client as zk;

/// A password holding every URL delimiter, in distinctive pieces.
const PASSWORD: &str = "Qa1/Qb2?Qc3#Qd4@Qe5+Qf6";
const PIECES: [&str; 6] = ["Qa1", "Qb2", "Qc3", "Qd4", "Qe5", "Qf6"];
/// The same password as a URL carries it: `/ ? # @` percent-encoded.
const ESCAPED: &str = "Qa1%2FQb2%3FQc3%23Qd4%40Qe5+Qf6";

fn shows_no_password(text: &str) {
    for p in PIECES {
        assert!(!text.contains(p), "showed {p}: {text}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn nodes_belong_to_the_digest_user_and_others_are_refused() {
    let Some(server) = testkit::server_url("TENURE_TEST_ZOOKEEPER") else {
        return;
    };
    let hosts = common::hosts(&server);
    let prefix = common::unique_prefix("auth");
    let url = |userinfo: &str| format!("zk://{userinfo}{hosts}{prefix}");

    let alice = ZkStore::connect(&url(&format!("alice:{ESCAPED}@")))
        .await
        .unwrap();
    shows_no_password(&alice.describe());
    shows_no_password(&format!("{alice:?}"));
    let g = testkit::unique_group("auth");
    let v1 = testkit::applied(&alice, &g, None, &held_by("alice", 1)).await;
    assert_eq!(
        alice.read(&g).await.unwrap().unwrap().record.holder_id(),
        Some("alice")
    );

    // The nodes carry the digest user's ACL, and nobody else's.
    let as_alice = zk::Client::connector()
        .with_auth("digest", format!("alice:{PASSWORD}").as_bytes())
        .connect(&hosts)
        .await
        .unwrap();
    for node in [prefix.clone(), format!("{prefix}/{}", g.as_str())] {
        let (acls, _) = as_alice.get_acl(&node).await.unwrap();
        assert_eq!(acls.len(), 1, "{node}: {acls:?}");
        assert_eq!(acls[0].scheme(), "digest");
        assert!(acls[0].id().starts_with("alice:"), "{node}: {acls:?}");
        assert_eq!(acls[0].permission(), zk::Permission::ALL);
    }
    let raw = zk::Client::connect(&hosts).await.unwrap();
    assert!(matches!(
        raw.get_data(&prefix).await,
        Err(zk::Error::NoAuth)
    ));

    // A wrong password, another user, no user: refused at connect, naming
    // the fix, never the password.
    for who in [
        "alice:wrong-Qa1@".to_owned(),
        format!("bob:{ESCAPED}@"),
        String::new(),
    ] {
        let e = ZkStore::connect(&url(&who)).await.unwrap_err();
        assert!(
            matches!(e, ZkStoreError::NotAuthorized { .. }),
            "{who}: {e}"
        );
        let text = e.to_string();
        assert!(text.contains("setAcl"), "{text}");
        shows_no_password(&text);
        assert_eq!(StoreError::from(e).kind(), "misconfigured");
    }

    // A handle that connected before the ACL changed fails the same way on
    // each operation: misconfigured, not a conflict, not transient.
    let mallory = ZkStore::connect(&format!("zk://{hosts}{prefix}-open"))
        .await
        .unwrap();
    let open = tenure::GroupName::new("open").unwrap();
    mallory
        .compare_and_swap(&open, None, &held_by("m", 1))
        .await
        .unwrap();
    raw.set_acl(
        &format!("{prefix}-open/open"),
        &[zk::Acl::new(zk::Permission::READ, zk::AuthId::anyone())],
        None,
    )
    .await
    .unwrap();
    let read = mallory.read(&open).await.unwrap().unwrap();
    let e = mallory
        .compare_and_swap(&open, Some(read.version), &held_by("m", 1))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), "misconfigured", "{e}");
    assert!(!e.is_transient());

    // Alice goes on.
    testkit::applied(&alice, &g, Some(v1), &held_by("alice", 1)).await;
}
