//! Shared by the object store's tests: the servers (`scripts/servers.sh`
//! starts moto and exports `TENURE_TEST_S3`), the conformance harness,
//! a private moto a test may kill, and an HTTP proxy that injects faults.

#![allow(dead_code, reason = "each test binary uses a different part")]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tenure::GroupName;
use tenure_object_store::object_store::path::Path;
use tenure_object_store::object_store::{ObjectStoreExt, PutPayload};
use tenure_object_store::{BucketOptions, BucketStore};
use tenure_testkit::{self as testkit, Harness, HttpFront, RawAccess, UrlHarness};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The bucket `scripts/servers.sh` creates on the shared moto.
pub const BUCKET: &str = "tenure-test";
/// What moto accepts (it checks no signature unless told to).
pub const KEY_ID: &str = "AKIDTENURETEST";
pub const SECRET: &str = "tenure-test-secret/+key";
/// What the fault proxy's error replies echo as a server may (S3 puts a
/// refused session token in its 400's body): a secret the store was never
/// given, so only leaving the body out keeps it from a message.
pub const ECHOED: &str = "Zq-token-echoed-by-the-server";

/// The shared moto's endpoint, `http://127.0.0.1:PORT` (fails under
/// CI=true when missing, else skips).
pub fn endpoint() -> Option<String> {
    testkit::server_url("TENURE_TEST_S3")
}

/// A prefix no other test run uses.
pub fn unique_prefix(label: &str) -> String {
    format!("t-{label}-{:016x}", rand::random::<u64>())
}

/// A test's own prefix ([`unique_prefix`]) and a group in it, both named
/// after `label`.
pub fn own_prefix_and_group(label: &str) -> (String, GroupName) {
    (unique_prefix(label), testkit::unique_group(label))
}

/// The URL of a store on `endpoint`'s `bucket` under `prefix`.
pub fn url(endpoint: &str, bucket: &str, prefix: &str) -> String {
    format!(
        "s3://{bucket}/{prefix}?region=us-east-1&endpoint={endpoint}&access_key_id={KEY_ID}&secret_access_key={}",
        SECRET.replace('/', "%2F").replace('+', "%2B")
    )
}

/// Options for `endpoint`'s `bucket` under `prefix`.
pub fn options(endpoint: &str, bucket: &str, prefix: &str) -> BucketOptions {
    BucketOptions::from_url(&url(endpoint, bucket, prefix)).expect("options")
}

/// A handle on the shared moto's bucket (created if missing).
pub async fn store(endpoint: &str, prefix: &str) -> BucketStore {
    create_bucket(endpoint, BUCKET).await;
    BucketStore::connect_with(options(endpoint, BUCKET, prefix))
        .await
        .expect("connect to moto")
}

/// Creates a bucket on a moto (unsigned: moto does not check, or not yet).
pub async fn create_bucket(endpoint: &str, bucket: &str) {
    let reply = raw_request(endpoint, "PUT", &format!("/{bucket}"), &[], "").await;
    assert!(
        is_ok(&reply) || reply.contains("BucketAlreadyOwnedByYou"),
        "create bucket {bucket}: {reply}"
    );
}

/// Whether an HTTP reply's status is 200, whichever HTTP/1 version it
/// speaks (the one-request-at-a-time moto of scripts/moto_serial.py
/// answers in HTTP/1.0).
pub fn is_ok(reply: &str) -> bool {
    reply.starts_with("HTTP/1.") && reply.get(8..13) == Some(" 200 ")
}

/// One HTTP/1.1 request on a connection of its own; the whole reply.
pub async fn raw_request(
    endpoint: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> String {
    let addr: SocketAddr = endpoint
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()
        .expect("endpoint host:port");
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    let mut s = TcpStream::connect(addr).await.expect("connect to moto");
    s.write_all(request.as_bytes()).await.expect("send");
    let mut reply = Vec::new();
    let _ = s.read_to_end(&mut reply).await;
    String::from_utf8_lossy(&reply).into_owned()
}

/// The conformance harness for any bucket URL: each `store()` is a new
/// handle with its own HTTP client; raw bytes go through one more
/// handle's `object_store` client ([`Objects`]).
pub async fn conformance_harness(url: String) -> impl Harness<Store = BucketStore> {
    let objects = Objects(BucketStore::connect(&url).await.expect("connect"));
    UrlHarness::new(url, BucketStore::connect, objects)
}

/// A handle's objects, written and read through its `object_store` client,
/// unconditionally, as a foreign writer would.
pub struct Objects(BucketStore);

#[async_trait]
impl RawAccess for Objects {
    async fn plant_raw(&self, group: &GroupName, bytes: &[u8]) {
        let key = Path::parse(self.0.object_key(group)).expect("key");
        self.0
            .object_store()
            .put(&key, PutPayload::from(bytes.to_vec()))
            .await
            .expect("plant raw bytes");
    }

    async fn read_raw(&self, group: &GroupName) -> Option<Vec<u8>> {
        let key = Path::parse(self.0.object_key(group)).expect("key");
        match self.0.object_store().get(&key).await {
            Ok(got) => Some(got.bytes().await.expect("body").to_vec()),
            Err(tenure_object_store::object_store::Error::NotFound { .. }) => None,
            Err(e) => panic!("read raw: {e}"),
        }
    }
}

/// The raw bytes of a group's object.
pub async fn raw_object(s: &BucketStore, group: &GroupName) -> Option<serde_json::Value> {
    let key = Path::parse(s.object_key(group)).expect("key");
    match s.object_store().get(&key).await {
        Ok(got) => Some(serde_json::from_slice(&got.bytes().await.expect("body")).expect("JSON")),
        Err(tenure_object_store::object_store::Error::NotFound { .. }) => None,
        Err(e) => panic!("raw object: {e}"),
    }
}

/// A moto server of a test's own, to kill and start again.
pub struct PrivateMoto {
    pub port: u16,
    env: Vec<(String, String)>,
    child: Option<tokio::process::Child>,
}

impl PrivateMoto {
    /// Starts `moto_server` on a free port, with extra environment; on
    /// another port if another test's server took that one first.
    pub async fn start(env: &[(&str, &str)]) -> PrivateMoto {
        let mut m = PrivateMoto {
            port: testkit::free_port(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            child: None,
        };
        for _ in 0..3 {
            match m.try_start().await {
                Ok(()) => return m,
                Err(e) => {
                    eprintln!("moto_server on {}: {e}; another port", m.port);
                    m.kill().await;
                    m.port = testkit::free_port();
                }
            }
        }
        m.start_again().await;
        m
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Starts it again on its port (a restart keeps the endpoint).
    pub async fn start_again(&mut self) {
        if let Err(e) = self.try_start().await {
            panic!("moto_server on {}: {e}", self.port);
        }
    }

    /// Starts it on its port, and waits until it is what listens there.
    async fn try_start(&mut self) -> Result<(), String> {
        let bin = std::env::var("TENURE_MOTO_BIN").unwrap_or_else(|_| "moto_server".into());
        let mut cmd = tokio::process::Command::new(bin);
        cmd.args(["-H", "127.0.0.1", "-p", &self.port.to_string()])
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        let child = cmd.spawn().expect("start moto_server (TENURE_MOTO_BIN)");
        let pid = child.id().ok_or("moto_server exited at once")?;
        self.child = Some(child);
        testkit::wait_for_own_listener(pid, self.port, Duration::from_secs(10)).await
    }

    pub async fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill().await;
            let _ = c.wait().await;
        }
    }
}

/// What the fault proxy does with the next request of a method.
#[derive(Clone, Debug)]
pub enum Fault {
    /// Forwards the request, then never answers (the reply is lost; the
    /// connection stays open and silent).
    SwallowReply,
    /// Answers itself, without forwarding.
    Reply { status: u16, code: &'static str },
}

struct ProxyState {
    faults: Mutex<VecDeque<(String, Fault)>>,
    forwarded: AtomicU64,
    requests: Mutex<Vec<String>>,
}

/// An HTTP/1.1 proxy to moto that reads each request whole and forwards
/// it on a connection of its own, unless a fault queued for its method
/// says otherwise. One request per client connection (it answers with
/// `Connection: close`), which reqwest handles by reconnecting.
pub struct FaultProxy {
    front: HttpFront,
    state: Arc<ProxyState>,
}

impl FaultProxy {
    pub async fn start(upstream: &str) -> FaultProxy {
        let state = Arc::new(ProxyState {
            faults: Mutex::new(VecDeque::new()),
            forwarded: AtomicU64::new(0),
            requests: Mutex::new(Vec::new()),
        });
        let st = state.clone();
        let front = HttpFront::start(upstream, move |client, upstream| {
            let st = st.clone();
            async move {
                let _ = serve(client, upstream, st).await;
            }
        })
        .await;
        FaultProxy { front, state }
    }

    pub fn endpoint(&self) -> String {
        self.front.endpoint()
    }

    /// Queues a fault for the next request with this method.
    pub fn push(&self, method: &str, fault: Fault) {
        self.state
            .faults
            .lock()
            .unwrap()
            .push_back((method.to_owned(), fault));
    }

    /// "METHOD path" of every request seen, in order.
    pub fn requests(&self) -> Vec<String> {
        self.state.requests.lock().unwrap().clone()
    }

    pub fn forwarded(&self) -> u64 {
        self.state.forwarded.load(Ordering::Relaxed)
    }
}

/// Reads one request (headers and a Content-Length body).
async fn read_request(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let header_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..header_end]).to_ascii_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while buf.len() < header_end + len {
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Some(buf)
}

async fn serve(mut client: TcpStream, upstream: SocketAddr, st: Arc<ProxyState>) -> Option<()> {
    let request = read_request(&mut client).await?;
    let line = String::from_utf8_lossy(&request)
        .lines()
        .next()
        .unwrap_or("")
        .to_owned();
    let method = line.split(' ').next().unwrap_or("").to_owned();
    st.requests.lock().unwrap().push(
        line.rsplit_once(' ')
            .map_or(line.clone(), |(a, _)| a.to_owned()),
    );
    let fault = {
        let mut q = st.faults.lock().unwrap();
        let at = q.iter().position(|(m, _)| *m == method);
        at.and_then(|i| q.remove(i)).map(|(_, f)| f)
    };
    match fault {
        Some(Fault::Reply { status, code }) => {
            let body = format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{code}</Code><Message>injected by the test</Message><Token-0>{ECHOED}</Token-0></Error>"
            );
            let reply = format!(
                "HTTP/1.1 {status} Injected\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            client.write_all(reply.as_bytes()).await.ok()?;
            let _ = client.shutdown().await;
        }
        Some(Fault::SwallowReply) => {
            let mut up = TcpStream::connect(upstream).await.ok()?;
            up.write_all(&with_close(&request)).await.ok()?;
            let mut sink = Vec::new();
            let _ = up.read_to_end(&mut sink).await;
            st.forwarded.fetch_add(1, Ordering::Relaxed);
            // The client hears nothing until it gives up.
            tokio::time::sleep(Duration::from_secs(120)).await;
        }
        None => {
            let mut up = TcpStream::connect(upstream).await.ok()?;
            up.write_all(&with_close(&request)).await.ok()?;
            let mut reply = Vec::new();
            let _ = up.read_to_end(&mut reply).await;
            st.forwarded.fetch_add(1, Ordering::Relaxed);
            client.write_all(&reply).await.ok()?;
            let _ = client.shutdown().await;
        }
    }
    Some(())
}

/// The request with `Connection: close`, so the upstream ends the reply
/// by closing (no need to parse its framing).
fn with_close(request: &[u8]) -> Vec<u8> {
    let Some(end) = request.windows(4).position(|w| w == b"\r\n\r\n") else {
        return request.to_vec();
    };
    let head = String::from_utf8_lossy(&request[..end]);
    let mut out = String::new();
    for l in head.split("\r\n") {
        if l.to_ascii_lowercase().starts_with("connection:") {
            continue;
        }
        out.push_str(l);
        out.push_str("\r\n");
    }
    out.push_str("Connection: close\r\n\r\n");
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(&request[end + 4..]);
    bytes
}
