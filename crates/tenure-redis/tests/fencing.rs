//! Fencing Redis keys (docs/fencing.md), against the real server: the
//! example itself, and the script's comparison of tokens.

use redis::AsyncCommands;
use tenure::fence::StaleToken;
use tenure_redis::fence;
use tenure_testkit as testkit;

#[allow(
    dead_code,
    reason = "its main() is for `cargo run --example fencing_redis`"
)]
#[path = "../examples/fencing_redis.rs"]
mod example;

async fn connect() -> Option<redis::aio::MultiplexedConnection> {
    let url = testkit::server_url("TENURE_TEST_REDIS")?;
    let client = redis::Client::open(url).expect("a Redis URL");
    Some(
        client
            .get_multiplexed_async_connection()
            .await
            .expect("connect"),
    )
}

fn keys() -> (String, String) {
    let id = testkit::unique_suffix();
    (
        format!("fence-test:{{{id:x}}}:fence"),
        format!("fence-test:{{{id:x}}}:data"),
    )
}

/// The example as `cargo run --example fencing_redis` runs it: A's late write
/// with token n after B wrote with n+1 is refused.
#[tokio::test(flavor = "multi_thread")]
async fn the_example_refuses_the_leader_whose_term_ended() {
    let Some(url) = testkit::server_url("TENURE_TEST_REDIS") else {
        return;
    };
    tenure_testkit::story_holds(example::run(&url)).await;
}

#[tokio::test]
async fn tokens_compare_as_u64_not_as_strings_or_doubles() {
    let Some(mut conn) = connect().await else {
        return;
    };
    // (admitted, then refused): a string compare would order 9 above 10, a
    // double would take 2^53 + 1 for 2^53.
    let pairs = [
        (10, 9),
        (100, 99),
        (9_007_199_254_740_993, 9_007_199_254_740_992),
        (u64::MAX, u64::MAX - 1),
    ];
    for (higher, lower) in pairs {
        let (fence_key, data) = keys();
        let set = |token: u64, value: &'static [u8]| {
            let (mut conn, fence_key, data) = (conn.clone(), fence_key.clone(), data.clone());
            async move {
                fence::fenced_set(&mut conn, &fence_key, token, &[(&data, value)])
                    .await
                    .unwrap()
            }
        };
        assert_eq!(
            set(lower, b"lower").await,
            Ok(()),
            "a fresh fence admits {lower}"
        );
        assert_eq!(
            set(higher, b"higher").await,
            Ok(()),
            "{higher} after {lower}"
        );
        assert_eq!(set(higher, b"again").await, Ok(()), "{higher} again");
        assert_eq!(
            set(lower, b"stale").await,
            Err(StaleToken {
                token: lower,
                highest: higher
            }),
            "{lower} after {higher}"
        );
        let stored: (String, Vec<u8>) = (
            conn.get(&fence_key).await.unwrap(),
            conn.get(&data).await.unwrap(),
        );
        assert_eq!(stored, (higher.to_string(), b"again".to_vec()));
        let _: () = conn.del(&[&fence_key, &data]).await.unwrap();
    }
}

#[tokio::test]
async fn several_keys_are_written_together_or_not_at_all() {
    let Some(mut conn) = connect().await else {
        return;
    };
    let (fence_key, data) = keys();
    let other = format!("{data}:other");
    let writes: [(&str, &[u8]); 2] = [(&data, b"one"), (&other, b"two")];
    assert_eq!(
        fence::fenced_set(&mut conn, &fence_key, 7, &writes)
            .await
            .unwrap(),
        Ok(())
    );
    let late: [(&str, &[u8]); 2] = [(&data, b"late one"), (&other, b"late two")];
    assert!(fence::fenced_set(&mut conn, &fence_key, 6, &late)
        .await
        .unwrap()
        .is_err());
    let values: Vec<Vec<u8>> = conn.mget(&[&data, &other]).await.unwrap();
    assert_eq!(values, [b"one".to_vec(), b"two".to_vec()]);
    let _: () = conn.del(&[&fence_key, &data, &other]).await.unwrap();
}

#[tokio::test]
async fn a_malformed_token_or_fence_value_is_an_error_not_a_write() {
    let Some(mut conn) = connect().await else {
        return;
    };
    let (fence_key, data) = keys();
    let script = redis::Script::new(fence::FENCED_SET_LUA);
    for token in ["0", "007", "-1", "1e3", "", "123456789012345678901"] {
        let reply: redis::RedisResult<redis::Value> = script
            .key(&fence_key)
            .key(&data)
            .arg(token)
            .arg("v")
            .invoke_async(&mut conn)
            .await;
        let e = reply.expect_err(token);
        assert!(e.to_string().contains("tenure fence"), "{token}: {e}");
    }
    let exists: bool = conn.exists(&data).await.unwrap();
    assert!(!exists, "nothing was written");

    let _: () = conn.set(&fence_key, "not a token").await.unwrap();
    let e = fence::fenced_set(&mut conn, &fence_key, 5, &[(&data, b"v")])
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("holds something other than a token"),
        "{e}"
    );
    let exists: bool = conn.exists(&data).await.unwrap();
    assert!(!exists, "nothing was written");
    let _: () = conn.del(&fence_key).await.unwrap();
}
