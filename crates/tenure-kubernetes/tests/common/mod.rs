//! Helpers shared by the Kubernetes store's tests: the server (the
//! kubeconfig scripts/servers.sh exports, or any cluster's), store URLs
//! scoped to one test by a label, a plain client around the store, and a
//! private etcd with a private API server (to compact etcd).
#![allow(dead_code, reason = "each test binary uses a different part")]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, PostParams};
use serde_json::{json, Value};
use tenure::{GroupName, LeaseRecord};
use tenure_testkit::{free_port, Launch, PrivateServer, RawAccess, TempDir};

/// The namespace the tests use (it exists on the test server; on a real
/// cluster, create it).
pub const NAMESPACE: &str = "tenure-test";

/// The kubeconfig of the server under test: `TENURE_TEST_KUBERNETES`.
pub fn kubeconfig() -> Option<String> {
    tenure_testkit::server_url("TENURE_TEST_KUBERNETES")
}

/// A label value unique to this test.
pub fn run_label() -> String {
    format!("r{:x}", tenure_testkit::unique_suffix())
}

/// A store URL in [`NAMESPACE`], scoped by `label` and using `context`
/// (the kubeconfig's current one if `None`).
pub fn url(kubeconfig: &str, label: &str, context: Option<&str>) -> String {
    let mut u = format!("k8s://{NAMESPACE}?kubeconfig={kubeconfig}&label=tenure-test-run={label}");
    if let Some(c) = context {
        u.push_str(&format!("&context={c}"));
    }
    u
}

/// A plain kube client from the kubeconfig (its current context).
pub async fn plain_api(kubeconfig: &str, namespace: &str) -> Api<Lease> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    Api::namespaced(client, namespace)
}

/// A Lease name, written out by hand as the crate docs lay it down (not
/// asked of the store), so that a change of layout fails the tests.
pub fn name_by_hand(group: &str) -> String {
    let valid = !group.is_empty()
        && group.len() <= 253
        && group.split('.').all(|l| {
            !l.is_empty()
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        });
    if valid && !group.starts_with("t--") {
        return group.to_owned();
    }
    const A: &[u8] = b"abcdefghijklmnopqrstuvwxyz234567";
    let mut bits = String::new();
    for b in group.bytes() {
        use std::fmt::Write as _;
        let _ = write!(bits, "{b:08b}");
    }
    let pad = (5 - bits.len() % 5) % 5;
    bits.extend(std::iter::repeat_n('0', pad));
    let enc: String = bits
        .as_bytes()
        .chunks(5)
        .map(|c| char::from(A[usize::from_str_radix(std::str::from_utf8(c).unwrap(), 2).unwrap()]))
        .collect();
    if enc.len() + 3 <= 253 {
        return format!("t--{enc}");
    }
    use sha2::Digest as _;
    let d = sha2::Sha256::digest(group.as_bytes());
    let hex = d.iter().fold(String::new(), |mut s, b| {
        use std::fmt::Write as _;
        let _ = write!(s, "{b:02x}");
        s
    });
    format!("t--h-{hex}")
}

/// The Leases around the store: what a foreign program or a damaged
/// object looks like.
pub struct KubeRaw {
    pub api: Api<Lease>,
    pub label: String,
    /// What was planted, by Lease name: the bytes and the resourceVersion
    /// of the plant (an annotation holds text, so bytes that are not UTF-8
    /// are planted lossily; while the Lease is still at that version they
    /// are what it holds).
    planted: Mutex<HashMap<String, (Vec<u8>, String)>>,
}

impl KubeRaw {
    pub async fn new(kubeconfig: &str, label: &str) -> KubeRaw {
        KubeRaw::with_api(plain_api(kubeconfig, NAMESPACE).await, label)
    }

    /// Raw Leases through `api` (another server's, such as a fake's).
    pub fn with_api(api: Api<Lease>, label: &str) -> KubeRaw {
        KubeRaw {
            api,
            label: label.to_owned(),
            planted: Mutex::new(HashMap::new()),
        }
    }

    /// Writes `lease` (JSON) as the Lease `name`, replacing what is there.
    pub async fn put(&self, name: &str, mut lease: Value) -> Lease {
        lease["apiVersion"] = json!("coordination.k8s.io/v1");
        lease["kind"] = json!("Lease");
        lease["metadata"]["name"] = json!(name);
        let current = self.api.get_opt(name).await.unwrap();
        match current {
            Some(cur) => {
                lease["metadata"]["resourceVersion"] = json!(cur.metadata.resource_version);
                let l: Lease = serde_json::from_value(lease).unwrap();
                self.api
                    .replace(name, &PostParams::default(), &l)
                    .await
                    .unwrap()
            }
            None => {
                let l: Lease = serde_json::from_value(lease).unwrap();
                self.api.create(&PostParams::default(), &l).await.unwrap()
            }
        }
    }
}

#[async_trait]
impl RawAccess for KubeRaw {
    async fn plant_raw(&self, group: &GroupName, bytes: &[u8]) {
        let name = name_by_hand(group.as_str());
        let holder = LeaseRecord::decode(bytes)
            .ok()
            .and_then(|r| r.holder_id().map(str::to_owned));
        let lease = json!({
            "metadata": {
                "labels": {"app.kubernetes.io/managed-by": "tenure", "tenure-test-run": self.label},
                "annotations": {
                    "tenure.dev/group": group.as_str(),
                    "tenure.dev/record": String::from_utf8_lossy(bytes),
                },
            },
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 10},
        });
        let written = self.put(&name, lease).await;
        self.planted.lock().unwrap().insert(
            name,
            (
                bytes.to_vec(),
                written.metadata.resource_version.unwrap_or_default(),
            ),
        );
    }

    async fn read_raw(&self, group: &GroupName) -> Option<Vec<u8>> {
        let name = name_by_hand(group.as_str());
        let lease = self.api.get_opt(&name).await.unwrap()?;
        let rv = lease.metadata.resource_version.clone().unwrap_or_default();
        if let Some((bytes, at)) = self.planted.lock().unwrap().get(&name) {
            if *at == rv {
                return Some(bytes.clone());
            }
        }
        lease
            .metadata
            .annotations
            .and_then(|a| a.get("tenure.dev/record").cloned())
            .map(String::into_bytes)
    }
}

/// A kubeconfig like `kubeconfig` whose server is `addr` (a proxy in
/// front of it), written to `dir`.
pub fn kubeconfig_via(kubeconfig: &str, addr: std::net::SocketAddr, dir: &Path) -> PathBuf {
    let mut kc: Value = serde_json::from_str(&std::fs::read_to_string(kubeconfig).unwrap())
        .expect("the test server's kubeconfig is JSON");
    kc["clusters"][0]["cluster"]["server"] = json!(format!("https://{addr}"));
    let path = dir.join("kubeconfig-via-proxy");
    std::fs::write(&path, kc.to_string()).unwrap();
    path
}

/// The address of the server of a kubeconfig.
pub fn server_addr(kubeconfig: &str) -> std::net::SocketAddr {
    let kc: Value = serde_json::from_str(&std::fs::read_to_string(kubeconfig).unwrap())
        .expect("the test server's kubeconfig is JSON");
    kc["clusters"][0]["cluster"]["server"]
        .as_str()
        .unwrap()
        .trim_start_matches("https://")
        .parse()
        .unwrap()
}

/// A private one-member etcd.
pub struct Etcd {
    pub port: u16,
    peer: u16,
    dir: TempDir,
}

impl Etcd {
    pub fn start() -> PrivateServer<Etcd> {
        PrivateServer::start(Etcd {
            port: free_port(),
            peer: free_port(),
            dir: TempDir::new("kube-etcd"),
        })
    }

    /// Runs etcdctl: (success, output).
    pub fn ctl(&self, args: &[&str]) -> (bool, String) {
        let out = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints=127.0.0.1:{}", self.port))
            .args(["--command-timeout=2s", "--dial-timeout=1s"])
            .args(args)
            .output()
            .expect("etcdctl is installed");
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }
}

impl Launch for Etcd {
    fn port(&self) -> u16 {
        self.port
    }

    fn command(&self) -> Command {
        let client = format!("http://127.0.0.1:{}", self.port);
        let peer = format!("http://127.0.0.1:{}", self.peer);
        let mut cmd = Command::new("etcd");
        cmd.args(["--name", "t", "--data-dir"])
            .arg(self.dir.path().join("data"))
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .arg("--initial-cluster")
            .arg(format!("t={peer}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        cmd
    }

    fn choose_other_ports(&mut self) -> bool {
        self.port = free_port();
        self.peer = free_port();
        true
    }

    fn wait_until_serving(&self) {
        for _ in 0..300 {
            if self.ctl(&["get", "probe"]).0 {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("etcd on port {} did not become ready", self.port);
    }
}
