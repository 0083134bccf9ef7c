//! What the DynamoDB tests share: options for the shared dynalite, the
//! conformance harness, an HTTP proxy that answers with DynamoDB's own error
//! replies, and private dynalite servers that a test may kill.

#![allow(dead_code, reason = "each test binary uses a different part")]

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tenure::GroupName;
use tenure_dynamodb::aws_sdk_dynamodb::types::AttributeValue;
use tenure_dynamodb::aws_sdk_dynamodb::Client;
use tenure_dynamodb::{DynamoDbOptions, DynamoDbStore};
use tenure_testkit::{self as testkit, Harness, HttpFront};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// An item as the SDK returns it.
pub type Item = HashMap<String, AttributeValue>;

/// The table the shared-server tests use; every test uses its own groups.
pub const TABLE: &str = "tenure_test_leases";

/// The shared dynalite, or `None` (skip) outside CI.
pub fn endpoint() -> Option<String> {
    testkit::server_url("TENURE_TEST_DYNAMODB")
}

/// Options for `table` at `endpoint`: a made-up region and keys, which
/// local servers accept. Explicit region and keys also keep the SDK from
/// ever asking instance metadata for them.
pub fn options(endpoint: &str, table: &str) -> DynamoDbOptions {
    DynamoDbOptions::new(table)
        .unwrap()
        .region("local")
        .endpoint(endpoint)
        .static_credentials("AKIDTENURETEST", SECRET_KEY)
}

/// The secret key the tests' stores sign with; no message may show it.
pub const SECRET_KEY: &str = "tenure-test-secret";

/// A store on the shared table, creating it on first use.
pub async fn store(endpoint: &str) -> DynamoDbStore {
    DynamoDbStore::connect_with(options(endpoint, TABLE).create_if_missing(true))
        .await
        .expect("connect to dynalite")
}

/// A table name no other test uses.
pub fn unique_table(label: &str) -> String {
    format!("tenure_{label}_{:08x}", rand::random::<u32>())
}

/// Reads an item verbatim.
pub async fn raw_item(
    client: &Client,
    table: &str,
    group: &GroupName,
) -> Option<HashMap<String, AttributeValue>> {
    client
        .get_item()
        .table_name(table)
        .key("group_name", AttributeValue::S(group.as_str().to_owned()))
        .consistent_read(true)
        .send()
        .await
        .expect("raw GetItem")
        .item
}

/// The conformance harness. DynamoDB keeps a lease as attributes, not as
/// bytes, so planting bytes means writing the item a foreign program (or a
/// damaged tenure) would have written: tenure's JSON wire fields become the
/// attributes of the same names (`v` becomes `tenure_format`, the holder
/// object its two attributes), other JSON keys become attributes as they
/// are, and anything that is not a JSON object is kept in a binary `raw`
/// attribute. Every plant raises `version` as a write does.
pub struct DynamoHarness {
    pub endpoint: String,
    raw: DynamoDbStore,
    planted: Mutex<HashMap<GroupName, (Vec<u8>, Item)>>,
}

impl DynamoHarness {
    pub async fn new(endpoint: String) -> DynamoHarness {
        let raw = store(&endpoint).await;
        DynamoHarness {
            endpoint,
            raw,
            planted: Mutex::new(HashMap::new()),
        }
    }

    fn client(&self) -> &Client {
        self.raw.client()
    }
}

fn json_to_attr(v: &serde_json::Value) -> AttributeValue {
    match v {
        serde_json::Value::Number(n) => AttributeValue::N(n.to_string()),
        serde_json::Value::String(s) => AttributeValue::S(s.clone()),
        serde_json::Value::Bool(b) => AttributeValue::Bool(*b),
        serde_json::Value::Null => AttributeValue::Null(true),
        other => AttributeValue::S(other.to_string()),
    }
}

/// The item a program would write for `bytes` (see [`DynamoHarness`]).
pub fn item_for_bytes(group: &GroupName, bytes: &[u8]) -> HashMap<String, AttributeValue> {
    let mut item = HashMap::new();
    item.insert(
        "group_name".to_owned(),
        AttributeValue::S(group.as_str().to_owned()),
    );
    match serde_json::from_slice::<serde_json::Value>(bytes) {
        Ok(serde_json::Value::Object(map)) => {
            for (k, v) in map {
                match (k.as_str(), &v) {
                    ("v", _) => {
                        item.insert("tenure_format".into(), json_to_attr(&v));
                    }
                    ("holder", serde_json::Value::Object(h)) => {
                        if let Some(id) = h.get("id") {
                            item.insert("holder".into(), json_to_attr(id));
                        }
                        if let Some(inc) = h.get("incarnation") {
                            item.insert("incarnation".into(), json_to_attr(inc));
                        }
                    }
                    ("holder", serde_json::Value::Null) => {}
                    ("metadata", m) => {
                        item.insert("metadata".into(), AttributeValue::S(m.to_string()));
                    }
                    _ => {
                        item.insert(k, json_to_attr(&v));
                    }
                }
            }
        }
        // DynamoDB allows an empty binary attribute, but there is nothing
        // to keep for empty bytes anyway.
        _ if bytes.is_empty() => {}
        _ => {
            item.insert("raw".into(), AttributeValue::B(bytes.to_vec().into()));
        }
    }
    item
}

#[async_trait]
impl Harness for DynamoHarness {
    type Store = DynamoDbStore;

    async fn store(&self) -> DynamoDbStore {
        // A client of its own per handle: its own connections, so racers
        // race for real.
        DynamoDbStore::connect_with(options(&self.endpoint, TABLE))
            .await
            .expect("connect")
    }

    async fn plant_raw(&self, group: &GroupName, bytes: &[u8]) {
        let before = raw_item(self.client(), TABLE, group).await;
        let version = before
            .as_ref()
            .and_then(|i| i.get("version"))
            .and_then(|v| v.as_n().ok())
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0);
        let mut item = item_for_bytes(group, bytes);
        item.insert(
            "version".into(),
            AttributeValue::N((version + 1).to_string()),
        );
        self.client()
            .put_item()
            .table_name(TABLE)
            .set_item(Some(item.clone()))
            .send()
            .await
            .expect("plant PutItem");
        self.planted
            .lock()
            .unwrap()
            .insert(group.clone(), (bytes.to_vec(), item));
    }

    /// The planted bytes while the item is exactly as planted; otherwise
    /// (overwritten, or never planted) a rendering of the item, which never
    /// equals what was planted.
    async fn read_raw(&self, group: &GroupName) -> Option<Vec<u8>> {
        let item = raw_item(self.client(), TABLE, group).await?;
        let planted = self.planted.lock().unwrap().get(group).cloned();
        match planted {
            Some((bytes, planted)) if planted == item => Some(bytes),
            _ => {
                let mut attrs: Vec<_> = item.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
                attrs.sort();
                Some(format!("item {{{}}}", attrs.join(", ")).into_bytes())
            }
        }
    }
}

/// What the fault proxy answers to one request.
#[derive(Clone, Debug)]
pub enum Reply {
    /// Pass the request to the server and its answer back.
    Forward,
    /// For a `BatchGetItem`: pass on only its first key, and answer the
    /// others as `UnprocessedKeys`, as DynamoDB does when a request goes
    /// over the table's capacity.
    UnprocessedAllButFirst,
    /// Answer with DynamoDB's error reply: HTTP `status`, a JSON body with
    /// `__type` and `message`, and the `x-amz-crc32` checksum DynamoDB sends.
    Error {
        status: u16,
        type_: &'static str,
        message: &'static str,
    },
}

impl Reply {
    pub fn throughput_exceeded() -> Reply {
        Reply::Error {
            status: 400,
            type_: "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",
            message: "The level of configured provisioned throughput for the table was exceeded. \
                      Consider increasing your provisioning level with the UpdateTable API.",
        }
    }

    pub fn throttling() -> Reply {
        Reply::Error {
            status: 400,
            type_: "com.amazonaws.dynamodb.v20120810#ThrottlingException",
            message: "Throughput exceeds the current capacity of your table or index.",
        }
    }

    pub fn access_denied() -> Reply {
        Reply::Error {
            status: 400,
            type_: "com.amazon.coral.service#AccessDeniedException",
            message: "User: arn:aws:iam::123456789012:user/app is not authorized to perform: \
                      dynamodb:GetItem on resource: arn:aws:dynamodb:local:123456789012:table/tenure_test_leases \
                      because no identity-based policy allows the dynamodb:GetItem action",
        }
    }

    pub fn internal_error() -> Reply {
        Reply::Error {
            status: 500,
            type_: "com.amazonaws.dynamodb.v20120810#InternalServerError",
            message: "Internal server error",
        }
    }

    pub fn unrecognized_client() -> Reply {
        Reply::Error {
            status: 400,
            type_: "com.amazon.coral.service#UnrecognizedClientException",
            message: "The security token included in the request is invalid.",
        }
    }
}

/// How the proxy picks replies.
#[derive(Default)]
struct Plan {
    /// Replies for the next requests of an operation (`GetItem`, …), in
    /// order; `None` matches every operation.
    queue: VecDeque<(Option<String>, Reply)>,
    /// With this probability, any request is throttled.
    throttle_ratio: f64,
}

/// An HTTP proxy in front of a DynamoDB server that can answer requests
/// with DynamoDB's own error replies, byte for byte as DynamoDB sends them,
/// so the SDK parses and the store handles them as it would in AWS.
pub struct FaultProxy {
    front: HttpFront,
    plan: Arc<Mutex<Plan>>,
    injected: Arc<AtomicU64>,
    forwarded: Arc<AtomicU64>,
    by_op: Arc<Mutex<HashMap<String, u64>>>,
}

impl FaultProxy {
    pub async fn start(upstream: &str) -> FaultProxy {
        let plan = Arc::new(Mutex::new(Plan::default()));
        let injected = Arc::new(AtomicU64::new(0));
        let forwarded = Arc::new(AtomicU64::new(0));
        let by_op = Arc::new(Mutex::new(HashMap::new()));
        let (p, i, f, o) = (
            plan.clone(),
            injected.clone(),
            forwarded.clone(),
            by_op.clone(),
        );
        let front = HttpFront::start(upstream, move |conn, upstream| {
            let (p, i, f, o) = (p.clone(), i.clone(), f.clone(), o.clone());
            async move {
                let _ = serve(conn, upstream, p, i, f, o).await;
            }
        })
        .await;
        FaultProxy {
            front,
            plan,
            injected,
            forwarded,
            by_op,
        }
    }

    pub fn endpoint(&self) -> String {
        self.front.endpoint()
    }

    /// Answers the next request for `op` (any operation if `None`) with
    /// `reply`.
    pub fn push(&self, op: Option<&str>, reply: Reply) {
        self.plan
            .lock()
            .unwrap()
            .queue
            .push_back((op.map(str::to_owned), reply));
    }

    /// Answers the next requests for `op`, one each, with `replies` in
    /// order.
    pub fn push_each(&self, op: &str, replies: impl IntoIterator<Item = Reply>) {
        for reply in replies {
            self.push(Some(op), reply);
        }
    }

    /// Throttles this fraction of all requests from now on.
    pub fn throttle_ratio(&self, ratio: f64) {
        self.plan.lock().unwrap().throttle_ratio = ratio;
    }

    /// Error replies sent so far.
    pub fn injected(&self) -> u64 {
        self.injected.load(Ordering::Relaxed)
    }

    /// Requests passed to the server so far.
    pub fn forwarded(&self) -> u64 {
        self.forwarded.load(Ordering::Relaxed)
    }

    /// Requests for `op` (`GetItem`, `BatchGetItem`, …) that reached the
    /// proxy so far, answered by the server or not.
    pub fn requests(&self, op: &str) -> u64 {
        self.by_op.lock().unwrap().get(op).copied().unwrap_or(0)
    }
}

/// Reads one HTTP/1.1 message (head and `Content-Length` body); `None` at
/// a clean end of the stream.
async fn read_message(
    conn: &mut TcpStream,
    buf: &mut Vec<u8>,
) -> std::io::Result<Option<(String, Vec<u8>)>> {
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            let len = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            let total = end + 4 + len;
            while buf.len() < total {
                let mut chunk = [0u8; 8192];
                let n = conn.read(&mut chunk).await?;
                if n == 0 {
                    return Err(std::io::ErrorKind::UnexpectedEof.into());
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            let body = buf[end + 4..total].to_vec();
            buf.drain(..total);
            return Ok(Some((head, body)));
        }
        let mut chunk = [0u8; 8192];
        let n = conn.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

async fn serve(
    mut conn: TcpStream,
    upstream: SocketAddr,
    plan: Arc<Mutex<Plan>>,
    injected: Arc<AtomicU64>,
    forwarded: Arc<AtomicU64>,
    by_op: Arc<Mutex<HashMap<String, u64>>>,
) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let mut up: Option<(TcpStream, Vec<u8>)> = None;
    while let Some((head, body)) = read_message(&mut conn, &mut buf).await? {
        // DynamoDB names the operation in X-Amz-Target:
        // DynamoDB_20120810.GetItem.
        let op = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("x-amz-target")
                    .then(|| v.trim().rsplit('.').next().unwrap_or("").to_owned())
            })
            .unwrap_or_default();
        *by_op.lock().unwrap().entry(op.clone()).or_default() += 1;
        let reply = {
            let mut p = plan.lock().unwrap();
            let pos = p
                .queue
                .iter()
                .position(|(want, _)| want.as_deref().is_none_or(|w| w == op));
            match pos.and_then(|i| p.queue.remove(i)) {
                Some((_, r)) => r,
                None if p.throttle_ratio > 0.0 && rand::random::<f64>() < p.throttle_ratio => {
                    Reply::throughput_exceeded()
                }
                None => Reply::Forward,
            }
        };
        match reply {
            Reply::Error {
                status,
                type_,
                message,
            } => {
                injected.fetch_add(1, Ordering::Relaxed);
                let body = serde_json::json!({ "__type": type_, "message": message }).to_string();
                let head = format!(
                    "HTTP/1.1 {status} Bad Request\r\nx-amzn-RequestId: TENURETESTFAULTPROXY\r\n\
                     x-amz-crc32: {}\r\nContent-Type: application/x-amz-json-1.0\r\nContent-Length: {}\r\n\r\n",
                    crc32(body.as_bytes()),
                    body.len()
                );
                conn.write_all(head.as_bytes()).await?;
                conn.write_all(body.as_bytes()).await?;
            }
            Reply::Forward => {
                forwarded.fetch_add(1, Ordering::Relaxed);
                let Some((rhead, rbody)) = exchange(&mut up, upstream, &head, &body).await? else {
                    return Ok(());
                };
                conn.write_all(rhead.as_bytes()).await?;
                conn.write_all(b"\r\n\r\n").await?;
                conn.write_all(&rbody).await?;
            }
            Reply::UnprocessedAllButFirst => {
                forwarded.fetch_add(1, Ordering::Relaxed);
                let mut request: serde_json::Value =
                    serde_json::from_slice(&body).expect("a BatchGetItem body");
                let mut held_back = serde_json::Map::new();
                for (table, asked) in request["RequestItems"]
                    .as_object_mut()
                    .expect("RequestItems")
                {
                    let keys = asked["Keys"].as_array_mut().expect("Keys");
                    let rest: Vec<serde_json::Value> = keys.drain(1..).collect();
                    if !rest.is_empty() {
                        let mut unprocessed = asked.clone();
                        unprocessed["Keys"] = serde_json::Value::Array(rest);
                        held_back.insert(table.clone(), unprocessed);
                    }
                }
                let body = serde_json::to_vec(&request).unwrap();
                let head = with_length(&head, body.len());
                let Some((rhead, rbody)) = exchange(&mut up, upstream, &head, &body).await? else {
                    return Ok(());
                };
                let mut answer: serde_json::Value =
                    serde_json::from_slice(&rbody).expect("a BatchGetItem answer");
                answer["UnprocessedKeys"] = serde_json::Value::Object(held_back);
                let rbody = serde_json::to_vec(&answer).unwrap();
                let rhead = with_length(&rhead, rbody.len())
                    .lines()
                    .map(|l| match l.split_once(':') {
                        Some((k, _)) if k.eq_ignore_ascii_case("x-amz-crc32") => {
                            format!("{k}: {}", crc32(&rbody))
                        }
                        _ => l.to_owned(),
                    })
                    .collect::<Vec<_>>()
                    .join("\r\n");
                conn.write_all(rhead.as_bytes()).await?;
                conn.write_all(b"\r\n\r\n").await?;
                conn.write_all(&rbody).await?;
            }
        }
    }
    Ok(())
}

/// Sends one request upstream (connecting on first use) and reads its
/// answer; `None` if the server closed the connection.
async fn exchange(
    up: &mut Option<(TcpStream, Vec<u8>)>,
    upstream: SocketAddr,
    head: &str,
    body: &[u8],
) -> std::io::Result<Option<(String, Vec<u8>)>> {
    if up.is_none() {
        *up = Some((TcpStream::connect(upstream).await?, Vec::new()));
    }
    let Some((u, ubuf)) = up.as_mut() else {
        unreachable!()
    };
    u.write_all(head.as_bytes()).await?;
    u.write_all(b"\r\n\r\n").await?;
    u.write_all(body).await?;
    read_message(u, ubuf).await
}

/// A message head with its `Content-Length` set to `len`.
fn with_length(head: &str, len: usize) -> String {
    head.lines()
        .map(|l| match l.split_once(':') {
            Some((k, _)) if k.eq_ignore_ascii_case("content-length") => format!("{k}: {len}"),
            _ => l.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\r\n")
}

/// CRC-32 (IEEE), as in DynamoDB's `x-amz-crc32` header.
pub fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// A dynalite of a test's own, on a free port, optionally keeping its data
/// in a directory so that it survives a restart.
pub struct PrivateDynalite {
    pub port: u16,
    path: Option<PathBuf>,
    tls: Option<TlsFiles>,
    child: Option<tokio::process::Child>,
}

pub use tenure_testkit::TlsFiles;

fn npm_dir() -> String {
    std::env::var("TENURE_NPM_DIR").unwrap_or_else(|_| "/var/tmp/tenure-npm".into())
}

use tenure_testkit::free_port;

fn dynalite_bin() -> String {
    format!("{}/node_modules/.bin/dynalite", npm_dir())
}

fn dynalite_lib() -> String {
    format!("{}/node_modules/dynalite", npm_dir())
}

impl PrivateDynalite {
    /// Starts one; `persistent` keeps the data on disk across restarts.
    pub async fn start(persistent: bool) -> PrivateDynalite {
        let port = free_port();
        let path = persistent.then(|| {
            let dir =
                std::env::temp_dir().join(format!("tenure-dynalite-{}-{port}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            dir
        });
        let mut server = PrivateDynalite {
            port,
            path,
            tls: None,
            child: None,
        };
        server.start_again().await;
        server
    }

    /// Starts one serving HTTPS with a certificate from `tls`'s CA.
    pub async fn start_tls(tls: TlsFiles) -> PrivateDynalite {
        let mut server = PrivateDynalite {
            port: free_port(),
            path: None,
            tls: Some(tls),
            child: None,
        };
        server.start_again().await;
        server
    }

    pub fn endpoint(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    pub fn tls(&self) -> Option<&TlsFiles> {
        self.tls.as_ref()
    }

    pub async fn start_again(&mut self) {
        let mut cmd = match &self.tls {
            None => {
                let mut cmd = tokio::process::Command::new(dynalite_bin());
                cmd.args(["--port", &self.port.to_string()]).args([
                    "--createTableMs",
                    "0",
                    "--deleteTableMs",
                    "0",
                    "--updateTableMs",
                    "0",
                ]);
                if let Some(p) = &self.path {
                    cmd.arg("--path").arg(p);
                }
                cmd
            }
            // The command line takes no certificate files; the library does.
            Some(t) => {
                let script = format!(
                    "const fs = require('fs'); require({lib:?})({{ ssl: true, key: fs.readFileSync({key:?}), \
                     cert: fs.readFileSync({cert:?}), createTableMs: 0, deleteTableMs: 0, updateTableMs: 0 }})\
                     .listen({port}, '127.0.0.1')",
                    lib = dynalite_lib(),
                    key = t.key.display().to_string(),
                    cert = t.cert.display().to_string(),
                    port = self.port,
                );
                let mut cmd = tokio::process::Command::new("node");
                cmd.args(["-e", &script]);
                cmd
            }
        };
        cmd.stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true);
        self.child = Some(cmd.spawn().expect("start dynalite"));
        testkit::wait_for_listener("dynalite", self.port, Duration::from_secs(30)).await;
    }

    /// SIGKILL, as a crash.
    pub async fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().await.expect("kill dynalite");
        }
    }
}

impl Drop for PrivateDynalite {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = c.start_kill();
        }
        if let Some(p) = &self.path {
            let _ = std::fs::remove_dir_all(p);
        }
    }
}
