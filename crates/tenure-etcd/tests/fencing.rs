//! Fencing etcd keys (docs/fencing.md), against the real server: the
//! example itself, and the transaction's comparison of tokens.

use etcd_client::{Client, TxnOp};
use tenure::fence::StaleToken;
use tenure_etcd::{fence, EtcdOptions};
use tenure_testkit as testkit;

#[allow(
    dead_code,
    reason = "its main() is for `cargo run --example fencing_etcd`"
)]
#[path = "../examples/fencing_etcd.rs"]
mod example;

async fn connect() -> Option<Client> {
    let url = testkit::server_url("TENURE_TEST_ETCD")?;
    let endpoints = EtcdOptions::from_url(&url)
        .expect("an etcd URL")
        .endpoints();
    Some(Client::connect(endpoints, None).await.expect("connect"))
}

/// The example as `cargo run --example fencing_etcd` runs it: A's late write
/// with token n after B wrote with n+1 is refused.
#[tokio::test(flavor = "multi_thread")]
async fn the_example_refuses_the_leader_whose_term_ended() {
    let Some(url) = testkit::server_url("TENURE_TEST_ETCD") else {
        return;
    };
    tenure_testkit::story_holds(example::run(&url)).await;
}

/// A fence key and a data key of their own under `fence-test/`.
struct TestKeys(String);

impl TestKeys {
    fn fresh() -> TestKeys {
        TestKeys(format!("fence-test/{:x}/", testkit::unique_suffix()))
    }

    fn fence(&self) -> String {
        format!("{}fence", self.0)
    }

    fn data(&self) -> String {
        format!("{}data", self.0)
    }

    /// Deletes both.
    async fn remove(&self, client: &mut Client) {
        let prefix = Some(etcd_client::DeleteOptions::new().with_prefix());
        client.delete(self.0.as_str(), prefix).await.unwrap();
    }
}

async fn value(client: &mut Client, key: &str) -> Option<Vec<u8>> {
    let got = client.get(key, None).await.unwrap();
    got.kvs().first().map(|kv| kv.value().to_vec())
}

#[tokio::test]
async fn tokens_compare_as_numbers_and_a_missing_fence_admits() {
    let Some(mut client) = connect().await else {
        return;
    };
    // (admitted, then refused): unpadded, etcd's byte comparison would
    // order 9 above 10.
    for (higher, lower) in [(10, 9), (100, 99), (u64::MAX, u64::MAX - 1)] {
        let keys = TestKeys::fresh();
        let (fence_key, data) = (keys.fence(), keys.data());
        let set = |token: u64, body: &'static str| {
            let mut client = client.clone();
            let (fence_key, data) = (fence_key.clone(), data.clone());
            async move {
                let writes = vec![TxnOp::put(data, body, None)];
                fence::fenced_txn(&mut client, &fence_key, token, writes)
                    .await
                    .unwrap()
                    .map(drop)
            }
        };
        assert_eq!(
            set(lower, "lower").await,
            Ok(()),
            "a missing fence admits {lower}"
        );
        assert_eq!(
            set(higher, "higher").await,
            Ok(()),
            "{higher} after {lower}"
        );
        assert_eq!(set(higher, "again").await, Ok(()), "{higher} again");
        assert_eq!(
            set(lower, "stale").await,
            Err(StaleToken {
                token: lower,
                highest: higher
            }),
            "{lower} after {higher}"
        );
        assert_eq!(
            value(&mut client, &fence_key).await,
            Some(fence::fence_value(higher).into_bytes())
        );
        assert_eq!(value(&mut client, &data).await, Some(b"again".to_vec()));
        keys.remove(&mut client).await;
    }
}

#[tokio::test]
async fn a_fence_key_holding_something_else_is_an_error_not_a_token() {
    let Some(mut client) = connect().await else {
        return;
    };
    let keys = TestKeys::fresh();
    let (fence_key, data) = (keys.fence(), keys.data());
    client.put(fence_key.as_str(), "zzz", None).await.unwrap();
    let writes = vec![TxnOp::put(data.as_str(), "v", None)];
    let e = fence::fenced_txn(&mut client, &fence_key, 5, writes)
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("something other than a 20-digit token"),
        "{e}"
    );
    assert_eq!(value(&mut client, &data).await, None, "nothing was written");
    keys.remove(&mut client).await;
}
