//! Writes that reach etcd behind the server's back. An update starts from
//! the state the server last saw of the Lease (as kube-apiserver's watch
//! cache hands it to `GuaranteedUpdate`), so these check that a state
//! gone stale is never trusted: the etcd transaction compares the
//! `mod_revision`, and a refusal drawn from a stale state is drawn again
//! from a fresh read.

use std::process::Command;

use etcd_client::Client;
use serde_json::{json, Value};
use tenure_kube_testserver::{start, Config};

struct Private {
    url: String,
    ca: String,
    token: String,
}

impl Private {
    /// `curl` as the admin user: (HTTP code, body as JSON).
    fn curl(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let mut cmd = Command::new("curl");
        cmd.args(["-sS", "--http2", "--cacert", &self.ca, "-X", method])
            .args(["-H", &format!("Authorization: Bearer {}", self.token)])
            .args(["-H", "Content-Type: application/json"])
            .args(["-w", "\n%{http_code}"]);
        if let Some(b) = body {
            cmd.args(["--data-binary", &b.to_string()]);
        }
        let out = cmd
            .arg(format!("{}{path}", self.url))
            .output()
            .expect("curl runs");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
        let body = serde_json::from_str(body).unwrap_or_else(|_| Value::String(body.to_owned()));
        (code.trim().parse().unwrap_or(0), body)
    }
}

fn rv(lease: &Value) -> String {
    lease["metadata"]["resourceVersion"]
        .as_str()
        .expect("a Lease as answered has a resourceVersion")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_never_trusts_a_state_changed_behind_the_server() {
    let Some(etcd) = tenure_testkit::server_url("TENURE_TEST_ETCD") else {
        return;
    };
    let dir = tenure_testkit::TempDir::new("kube-behind");
    let prefix = format!("/tenure-kube-behind-{:x}/", tenure_testkit::unique_suffix());
    let running = start(Config {
        etcd: etcd.clone(),
        listen: "127.0.0.1:0".parse().unwrap(),
        dir: dir.path().to_path_buf(),
        prefix: prefix.clone(),
    })
    .await
    .expect("the test server starts on TENURE_TEST_ETCD");
    let kc: Value =
        serde_json::from_str(&std::fs::read_to_string(&running.kubeconfig).unwrap()).unwrap();
    let token = kc["users"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["name"] == "tenure-test")
        .and_then(|u| u["user"]["token"].as_str())
        .unwrap()
        .to_owned();
    let server = Private {
        url: format!("https://{}", running.addr),
        ca: running.ca.to_string_lossy().into_owned(),
        token,
    };
    let mut etcd = Client::connect([etcd.trim_start_matches("http://")], None)
        .await
        .unwrap();
    let key = format!("{prefix}leases/tenure-test/behind");
    let path = "/apis/coordination.k8s.io/v1/namespaces/tenure-test/leases";
    let lease = |holder: &str, rv: Option<&str>, uid: Option<&str>| {
        let mut l = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "behind"},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 10}});
        if let Some(rv) = rv {
            l["metadata"]["resourceVersion"] = json!(rv);
        }
        if let Some(uid) = uid {
            l["metadata"]["uid"] = json!(uid);
        }
        l
    };

    let (code, created) =
        tokio::task::block_in_place(|| server.curl("POST", path, Some(&lease("a", None, None))));
    assert_eq!(code, 201, "{created}");
    let (rv1, uid) = (
        rv(&created),
        created["metadata"]["uid"].as_str().unwrap().to_owned(),
    );

    // Another writer changes the Lease in etcd: the server's state of it
    // (revision rv1) is stale now.
    let (_, stored) = {
        let got = etcd.get(key.as_str(), None).await.unwrap();
        let kv = got.kvs().first().expect("the Lease is in etcd").clone();
        (kv.mod_revision(), kv.value().to_vec())
    };
    let mut changed: Value = serde_json::from_slice(&stored).unwrap();
    changed["spec"]["holderIdentity"] = json!("someone-else");
    let put = etcd
        .put(key.as_str(), changed.to_string(), None)
        .await
        .unwrap();
    let rv2 = put.header().unwrap().revision().to_string();
    assert_ne!(rv1, rv2);

    // An update at the stale version: refused, and nothing written.
    let (code, body) = tokio::task::block_in_place(|| {
        server.curl(
            "PUT",
            &format!("{path}/behind"),
            Some(&lease("a", Some(&rv1), Some(&uid))),
        )
    });
    assert_eq!(code, 409, "a write at a version overtaken in etcd: {body}");
    let (code, now) =
        tokio::task::block_in_place(|| server.curl("GET", &format!("{path}/behind"), None));
    assert_eq!(code, 200, "{now}");
    assert_eq!(now["spec"]["holderIdentity"], "someone-else");
    assert_eq!(rv(&now), rv2);

    // Changed behind the server again, then an update at the version it
    // has in etcd now (not the one the server saw last): applied.
    changed["spec"]["holderIdentity"] = json!("third");
    let put = etcd
        .put(key.as_str(), changed.to_string(), None)
        .await
        .unwrap();
    let rv3 = put.header().unwrap().revision().to_string();
    let (code, body) = tokio::task::block_in_place(|| {
        server.curl(
            "PUT",
            &format!("{path}/behind"),
            Some(&lease("b", Some(&rv3), Some(&uid))),
        )
    });
    assert_eq!(code, 200, "a write at etcd's current version: {body}");
    assert_eq!(body["spec"]["holderIdentity"], "b");
    assert_eq!(body["metadata"]["uid"], json!(uid), "the uid is kept");

    // Deleted and made again behind the server (a new uid): an update
    // carrying the old uid fails its precondition, whatever it last saw.
    etcd.delete(key.as_str(), None).await.unwrap();
    let mut remade = changed.clone();
    remade["metadata"]["uid"] = json!("00000000-0000-4000-8000-000000000000");
    let put = etcd
        .put(key.as_str(), remade.to_string(), None)
        .await
        .unwrap();
    let rv4 = put.header().unwrap().revision().to_string();
    let (code, body) = tokio::task::block_in_place(|| {
        server.curl(
            "PUT",
            &format!("{path}/behind"),
            Some(&lease("c", Some(&rv4), Some(&uid))),
        )
    });
    assert_eq!(
        code, 409,
        "the uid precondition on a Lease made again: {body}"
    );
    assert!(
        body["message"]
            .as_str()
            .unwrap_or("")
            .contains("Precondition failed"),
        "{body}"
    );

    // Deleted behind the server: a PUT without a uid creates it again
    // (create-on-update), though the server last saw it present.
    etcd.delete(key.as_str(), None).await.unwrap();
    let (code, body) = tokio::task::block_in_place(|| {
        server.curl(
            "PUT",
            &format!("{path}/behind"),
            Some(&lease("d", Some(&rv4), None)),
        )
    });
    assert_eq!(
        code, 201,
        "create-on-update of a Lease deleted behind the server: {body}"
    );
    etcd.delete(
        prefix.as_str(),
        Some(etcd_client::DeleteOptions::new().with_prefix()),
    )
    .await
    .unwrap();
}
