//! The test server against clients nobody here wrote: `kubectl` (get,
//! create, replace, delete, and a replace with a stale resourceVersion that
//! must be refused) and `curl` for the exact status codes.

use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};

struct Server {
    kubeconfig: String,
    ca: String,
    url: String,
    tokens: Vec<(String, String)>,
}

fn server() -> Option<Server> {
    let kubeconfig = tenure_testkit::server_url("TENURE_TEST_KUBERNETES")?;
    let text = std::fs::read_to_string(&kubeconfig).expect("the kubeconfig servers.sh wrote");
    let kc: Value =
        serde_json::from_str(&text).expect("the test server writes its kubeconfig as JSON");
    let url = kc["clusters"][0]["cluster"]["server"]
        .as_str()
        .unwrap()
        .to_owned();
    let tokens = kc["users"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| {
            (
                u["name"].as_str().unwrap().to_owned(),
                u["user"]["token"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let ca = Path::new(&kubeconfig).with_file_name("ca.crt");
    Some(Server {
        kubeconfig,
        ca: ca.to_string_lossy().into_owned(),
        url,
        tokens,
    })
}

impl Server {
    fn token(&self, user: &str) -> &str {
        &self.tokens.iter().find(|(n, _)| n == user).unwrap().1
    }

    /// `curl` as `user`: (HTTP code, body as JSON or text).
    fn curl(&self, user: &str, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let mut cmd = Command::new("curl");
        cmd.args(["-sS", "--http2", "--cacert", &self.ca, "-X", method])
            .args(["-H", &format!("Authorization: Bearer {}", self.token(user))])
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
        let code = code.trim().parse().unwrap_or(0);
        let body = serde_json::from_str(body).unwrap_or_else(|_| Value::String(body.to_owned()));
        (code, body)
    }

    fn kubectl(&self, ns: &str, args: &[&str], stdin: Option<&str>) -> (bool, String) {
        use std::io::Write as _;
        let mut cmd = Command::new("kubectl");
        cmd.args(["--kubeconfig", &self.kubeconfig, "-n", ns])
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = cmd
            .spawn()
            .expect("kubectl is installed (/usr/bin/kubectl)");
        if let Some(text) = stdin {
            child
                .stdin
                .take()
                .unwrap()
                .write_all(text.as_bytes())
                .unwrap();
        }
        drop(child.stdin.take());
        let out = child.wait_with_output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    }

    fn namespace(&self, label: &str) -> String {
        let ns = format!(
            "{label}-{:x}",
            tenure_testkit::unique_suffix() & 0xffff_ffff
        );
        let (code, body) = self.curl(
            "tenure-test",
            "POST",
            "/api/v1/namespaces",
            Some(&json!({"metadata": {"name": ns}})),
        );
        assert_eq!(code, 201, "{body}");
        ns
    }
}

fn leases(ns: &str) -> String {
    format!("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases")
}

fn lease(name: &str, holder: &str) -> Value {
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name, "labels": {"app": "t"}},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 10}})
}

#[test]
fn kubectl_gets_creates_replaces_and_deletes_leases() {
    let Some(s) = server() else { return };
    let ns = s.namespace("kubectl");
    let yaml = "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: demo\nspec:\n  holderIdentity: a\n  leaseDurationSeconds: 10\n";
    let (ok, out) = s.kubectl(&ns, &["create", "-f", "-"], Some(yaml));
    assert!(ok, "kubectl create: {out}");
    let (ok, out) = s.kubectl(&ns, &["get", "lease", "demo", "-o", "json"], None);
    assert!(ok, "kubectl get: {out}");
    let got: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(got["spec"]["holderIdentity"], "a");
    let rv = got["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(rv.parse::<u64>().is_ok(), "resourceVersion {rv}");
    let (ok, out) = s.kubectl(&ns, &["get", "lease"], None);
    assert!(ok && out.contains("demo"), "kubectl get lease: {out}");

    // replace with the current resourceVersion: applied.
    let mut next = got.clone();
    next["spec"]["holderIdentity"] = json!("b");
    let (ok, out) = s.kubectl(&ns, &["replace", "-f", "-"], Some(&next.to_string()));
    assert!(ok, "kubectl replace: {out}");
    // The same again: its resourceVersion is now stale, refused.
    next["spec"]["holderIdentity"] = json!("c");
    let (ok, out) = s.kubectl(&ns, &["replace", "-f", "-"], Some(&next.to_string()));
    assert!(
        !ok,
        "a replace with a stale resourceVersion was accepted: {out}"
    );
    assert!(
        out.contains("Conflict") && out.contains("the object has been modified"),
        "{out}"
    );
    let (_, out) = s.kubectl(
        &ns,
        &[
            "get",
            "lease",
            "demo",
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ],
        None,
    );
    assert_eq!(out.trim(), "b");

    let (ok, out) = s.kubectl(&ns, &["delete", "lease", "demo"], None);
    assert!(ok && out.contains("deleted"), "kubectl delete: {out}");
    let (ok, out) = s.kubectl(&ns, &["get", "lease", "demo"], None);
    assert!(!ok && out.contains("NotFound"), "{out}");
}

#[test]
fn answers_as_kube_apiserver_does() {
    let Some(s) = server() else { return };
    let ns = s.namespace("codes");
    let base = leases(&ns);
    let (code, created) = s.curl("tenure-test", "POST", &base, Some(&lease("x", "a")));
    assert_eq!(code, 201, "{created}");
    let rv = created["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let uid = created["metadata"]["uid"].as_str().unwrap().to_owned();
    let (code, body) = s.curl("tenure-test", "POST", &base, Some(&lease("x", "b")));
    assert_eq!(
        (code, body["reason"].as_str()),
        (409, Some("AlreadyExists")),
        "{body}"
    );

    // An update without a resourceVersion: 422 (no unconditional update for Leases).
    let (code, body) = s.curl(
        "tenure-test",
        "PUT",
        &format!("{base}/x"),
        Some(&lease("x", "b")),
    );
    assert_eq!(
        (code, body["reason"].as_str()),
        (422, Some("Invalid")),
        "{body}"
    );
    // With the current one: 200, a new resourceVersion, the uid kept.
    let mut up = lease("x", "b");
    up["metadata"]["resourceVersion"] = json!(rv);
    let (code, body) = s.curl("tenure-test", "PUT", &format!("{base}/x"), Some(&up));
    assert_eq!(code, 200, "{body}");
    assert_ne!(
        body["metadata"]["resourceVersion"].as_str(),
        Some(rv.as_str())
    );
    assert_eq!(body["metadata"]["uid"].as_str(), Some(uid.as_str()));
    // The same resourceVersion again: stale, 409 Conflict.
    let (code, body) = s.curl("tenure-test", "PUT", &format!("{base}/x"), Some(&up));
    assert_eq!(
        (code, body["reason"].as_str()),
        (409, Some("Conflict")),
        "{body}"
    );
    // The body's name differs from the URL's: 400.
    let (code, body) = s.curl("tenure-test", "PUT", &format!("{base}/y"), Some(&up));
    assert_eq!(
        (code, body["reason"].as_str()),
        (400, Some("BadRequest")),
        "{body}"
    );
    // Create on update, whatever resourceVersion the body carries: 201.
    let mut missing = lease("made-by-put", "a");
    missing["metadata"]["resourceVersion"] = json!("12345");
    let (code, body) = s.curl(
        "tenure-test",
        "PUT",
        &format!("{base}/made-by-put"),
        Some(&missing),
    );
    assert_eq!(code, 201, "{body}");
    // ... but not with a uid precondition: a missing object has no uid.
    let mut with_uid = lease("not-made", "a");
    with_uid["metadata"]["resourceVersion"] = json!("12345");
    with_uid["metadata"]["uid"] = json!(uid);
    let (code, body) = s.curl(
        "tenure-test",
        "PUT",
        &format!("{base}/not-made"),
        Some(&with_uid),
    );
    assert_eq!(
        (code, body["reason"].as_str()),
        (409, Some("Conflict")),
        "{body}"
    );
    let (code, body) = s.curl("tenure-test", "GET", &format!("{base}/not-made"), None);
    assert_eq!(
        (code, body["kind"].as_str(), body["reason"].as_str()),
        (404, Some("Status"), Some("NotFound")),
        "{body}"
    );
    // Validation: leaseDurationSeconds must be > 0.
    let mut bad = lease("bad", "a");
    bad["spec"]["leaseDurationSeconds"] = json!(0);
    let (code, body) = s.curl("tenure-test", "POST", &base, Some(&bad));
    assert_eq!(
        (code, body["reason"].as_str()),
        (422, Some("Invalid")),
        "{body}"
    );
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("spec.leaseDurationSeconds"),
        "{body}"
    );
    // A namespace that does not exist.
    let (code, body) = s.curl(
        "tenure-test",
        "POST",
        &leases("no-such-namespace-here"),
        Some(&lease("x", "a")),
    );
    assert_eq!(code, 404, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("namespaces \"no-such-namespace-here\" not found"),
        "{body}"
    );

    // Credentials: an unknown token 401, a token without rights 403.
    let (code, body) = s.curl("wrong-token", "GET", &base, None);
    assert_eq!(code, 401, "{body}");
    let (code, _) = s.curl("reader", "GET", &format!("{base}/x"), None);
    assert_eq!(code, 200);
    let (code, body) = s.curl("reader", "PUT", &format!("{base}/x"), Some(&up));
    assert_eq!(
        (code, body["reason"].as_str()),
        (403, Some("Forbidden")),
        "{body}"
    );
    let (code, body) = s.curl("limited", "GET", &format!("{base}/x"), None);
    assert_eq!(code, 403, "{body}");
    let (code, body) = s.curl(
        "limited",
        "POST",
        &leases("tenure-limited"),
        Some(&lease(&ns, "a")),
    );
    assert_eq!(code, 201, "{body}");
}

#[test]
fn lists_in_pages_with_selectors_and_watches_from_a_resource_version() {
    let Some(s) = server() else { return };
    let ns = s.namespace("pages");
    let base = leases(&ns);
    for i in 0..7 {
        let mut l = lease(&format!("l{i}"), "a");
        if i % 2 == 1 {
            l["metadata"]["labels"]["app"] = json!("other");
        }
        let (code, body) = s.curl("tenure-test", "POST", &base, Some(&l));
        assert_eq!(code, 201, "{body}");
    }
    let mut names = Vec::new();
    let mut cont = String::new();
    let mut pages = 0;
    loop {
        let path = format!("{base}?labelSelector=app%3Dt&limit=2{cont}");
        let (code, body) = s.curl("tenure-test", "GET", &path, None);
        assert_eq!(code, 200, "{body}");
        let items = body["items"].as_array().unwrap();
        assert!(
            items.len() <= 2,
            "a page of {} items beyond the limit 2",
            items.len()
        );
        names.extend(
            items
                .iter()
                .map(|i| i["metadata"]["name"].as_str().unwrap().to_owned()),
        );
        pages += 1;
        match body["metadata"]["continue"].as_str() {
            Some(c) if !c.is_empty() => cont = format!("&continue={c}"),
            _ => break,
        }
    }
    assert_eq!(names, ["l0", "l2", "l4", "l6"], "pages {pages}");
    assert!(pages >= 2);

    // A watch from the list's resourceVersion sees a later update as
    // MODIFIED and a delete as DELETED, nothing before.
    let (_, list) = s.curl(
        "tenure-test",
        "GET",
        &format!("{base}?labelSelector=app%3Dt"),
        None,
    );
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut l0 = list["items"][0].clone();
    l0["spec"]["holderIdentity"] = json!("z");
    let (code, body) = s.curl("tenure-test", "PUT", &format!("{base}/l0"), Some(&l0));
    assert_eq!(code, 200, "{body}");
    let (code, body) = s.curl("tenure-test", "DELETE", &format!("{base}/l2"), None);
    assert_eq!(code, 200, "{body}");
    let (code, body) = s.curl(
        "tenure-test",
        "GET",
        &format!("{base}?watch=1&labelSelector=app%3Dt&resourceVersion={rv}&timeoutSeconds=1"),
        None,
    );
    assert_eq!(code, 200);
    let text = match &body {
        Value::String(t) => t.clone(),
        v => v.to_string(),
    };
    let events: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let kinds: Vec<(&str, &str)> = events
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap(),
                e["object"]["metadata"]["name"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(kinds, [("MODIFIED", "l0"), ("DELETED", "l2")], "{text}");
}
