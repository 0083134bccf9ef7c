//! What the crate's tests share: streams on kinesalite, the lease store on
//! dynalite, and a scripted Kinesis (an HTTP server answering from a
//! closure, for the replies kinesalite never sends).

// Each test binary uses a part of this module.
#![allow(dead_code, reason = "each test binary uses a part of this module")]

use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_kinesis::types::StreamStatus;
use aws_sdk_kinesis::Client;
use tenure_dynamodb::{DynamoDbOptions, DynamoDbStore};
use tenure_kinesis::KinesisShards;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A `kinesis://` URL of `stream` at `endpoint`, with local credentials.
pub fn kinesis_url(endpoint: &str, stream: &str) -> String {
    format!(
        "kinesis://{stream}?endpoint={endpoint}&region=us-east-1\
         &access_key_id=local&secret_access_key=local"
    )
}

/// A source on `stream`, and the SDK client it uses (for the test's own
/// CreateStream, PutRecord, SplitShard and MergeShards).
pub async fn source(endpoint: &str, stream: &str) -> (KinesisShards, Client) {
    let source = KinesisShards::connect(&kinesis_url(endpoint, stream))
        .await
        .expect("connect");
    let client = source.client().clone();
    (source, client)
}

/// Waits until the stream is ACTIVE (kinesalite runs with 0 ms state
/// changes, so at once).
pub async fn wait_active(client: &Client, stream: &str) {
    let start = Instant::now();
    loop {
        let d = client
            .describe_stream_summary()
            .stream_name(stream)
            .send()
            .await
            .expect("describe stream");
        if d.stream_description_summary().map(|s| s.stream_status()) == Some(&StreamStatus::Active)
        {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{stream} never became ACTIVE"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Creates `stream` with `shards` shards and waits until it is ACTIVE.
pub async fn create_stream(client: &Client, stream: &str, shards: i32) {
    client
        .create_stream()
        .stream_name(stream)
        .shard_count(shards)
        .send()
        .await
        .expect("create stream");
    wait_active(client, stream).await;
}

/// Deletes the test's stream (kinesalite keeps every stream until it
/// stops, and counts their shards against its account limit).
pub async fn delete_stream(client: &Client, stream: &str) {
    client
        .delete_stream()
        .stream_name(stream)
        .send()
        .await
        .expect("delete stream");
}

/// Writes record `n` (its data the number as text) to the shard whose
/// hash key range holds `hash_key`.
pub async fn put_numbered(client: &Client, stream: &str, hash_key: &str, n: u64) {
    client
        .put_record()
        .stream_name(stream)
        .partition_key("k")
        .explicit_hash_key(hash_key)
        .data(aws_sdk_kinesis::primitives::Blob::new(n.to_string()))
        .send()
        .await
        .expect("put record");
}

/// The tests' lease table on dynalite (created if missing); its client
/// also serves the checkpoint tables.
pub async fn dynalite(endpoint: &str) -> DynamoDbStore {
    DynamoDbStore::connect_with(
        DynamoDbOptions::new("tenure_kinesis_test_leases")
            .unwrap()
            .region("local")
            .endpoint(endpoint)
            .static_credentials("local", "local")
            .create_if_missing(true),
    )
    .await
    .expect("connect to dynalite")
}

/// A scripted Kinesis on a port of its own: each request's operation (the
/// `X-Amz-Target` after its dot, `ListShards` say) and body go to
/// `answer`, whose status and JSON body are sent back. Returns the
/// endpoint.
pub async fn scripted<F>(answer: F) -> String
where
    F: Fn(&str, &str) -> (u16, String) + Send + Sync + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let answer = Arc::new(answer);
    tokio::spawn(async move {
        loop {
            let Ok((mut conn, _)) = listener.accept().await else {
                return;
            };
            let answer = answer.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                while let Some((op, body)) = read_request(&mut conn, &mut buf).await {
                    let (status, reply) = answer(&op, &body);
                    let reason = if status == 200 { "OK" } else { "Bad Request" };
                    let response = format!(
                        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/x-amz-json-1.1\r\n\
                         x-amzn-requestid: test\r\ncontent-length: {}\r\n\r\n{reply}",
                        reply.len()
                    );
                    if conn.write_all(response.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    endpoint
}

/// Reads one request from `conn` (headers, then Content-Length bytes;
/// `buf` keeps what came after it): its operation and body, or `None`
/// once the connection ends.
async fn read_request(conn: &mut TcpStream, buf: &mut Vec<u8>) -> Option<(String, String)> {
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        read_more(conn, buf).await?;
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let header = |name: &str| {
        head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_owned())
        })
    };
    let length: usize = header("content-length").map_or(0, |v| v.parse().unwrap());
    let op = header("x-amz-target")
        .and_then(|v| v.split('.').nth(1).map(str::to_owned))
        .unwrap_or_default();
    while buf.len() < head_end + length {
        read_more(conn, buf).await?;
    }
    let body = String::from_utf8_lossy(&buf[head_end..head_end + length]).into_owned();
    buf.drain(..head_end + length);
    Some((op, body))
}

async fn read_more(conn: &mut TcpStream, buf: &mut Vec<u8>) -> Option<()> {
    let mut chunk = [0; 4096];
    match conn.read(&mut chunk).await {
        Ok(0) | Err(_) => None,
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            Some(())
        }
    }
}
