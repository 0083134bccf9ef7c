//! A Kubernetes API server for tenure's tests: `coordination.k8s.io/v1`
//! Lease objects kept in etcd the way kube-apiserver keeps them, answered
//! the way kube-apiserver answers, over HTTPS (HTTP/2 and HTTP/1.1) with a
//! CA it makes at start and bearer tokens it checks.
//!
//! No kube-apiserver can be installed on the machines tenure is tested
//! on, and the mocks that exist are unfaithful (one accepts a write with a
//! stale resourceVersion). This server covers what a Lease store depends
//! on, each rule with a comment citing the upstream file it follows:
//!
//! * `resourceVersion` is the etcd `mod_revision`, a list's the header
//!   revision; create is a transaction on `create_revision == 0`, update
//!   one on `mod_revision == resourceVersion`;
//! * 201 on create, 409 AlreadyExists, 409 Conflict on a stale
//!   resourceVersion or a failed uid precondition, 422 for an update
//!   without resourceVersion, 201 for create-on-update, 400 when the
//!   body's name differs from the URL's, 404 with a `Status` body, 422 on
//!   validation (`leaseDurationSeconds > 0`, names, annotations);
//! * watch (ADDED/MODIFIED/DELETED, resumed from a resourceVersion, an
//!   ERROR event with 410 Expired once etcd compacted it), list with
//!   `limit`/`continue`, label and field selectors;
//! * bearer tokens: an unknown one is 401, one without rights 403;
//! * enough discovery for `kubectl get/create/replace/delete`.
//!
//! What it does not show (so what tests against it cannot prove): admission
//! webhooks and quotas, API priority and fairness (429s), the watch cache
//! (stale reads and a watch from a cached, older state), several API
//! servers behind one load balancer, server-side apply and patches (405
//! here), RBAC beyond the three fixed users below.
//!
//! Its log (standard error) has one line per request that failed, with its
//! time; `TENURE_KUBE_TESTSERVER_LOG=all` logs every request.
//!
//! Users, in the kubeconfig it writes (`DIR/kubeconfig`, current context
//! `tenure-test`): `tenure-test` (every right), `reader` (get, list and
//! watch only), `limited` (every right, in the namespace `tenure-limited`
//! only) and `wrong-token` (a token this server never issued).
//! Namespaces: `default`, `tenure-test` and `tenure-limited` exist from
//! the start; `POST /api/v1/namespaces` creates more.

mod leases;
mod select;
mod status;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{combinators::UnsyncBoxBody, BodyExt, Full, Limited, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Method, Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

pub use leases::is_dns1123_subdomain;
use leases::{ListQuery, Storage, MAX_BODY};
use select::{query, FieldSelector, LabelSelector};
use status::{bad_request, forbidden, method_not_supported, not_found, unauthorized, ApiError};

/// Streams one HTTP/2 connection may have open at once: kube-apiserver's
/// default.
const HTTP2_MAX_STREAMS: u32 = 250;

/// How to start the server.
#[derive(Debug, Clone)]
pub struct Config {
    /// etcd's client URL (`http://127.0.0.1:2379`).
    pub etcd: String,
    /// Where to listen (`127.0.0.1:0` for a free port).
    pub listen: SocketAddr,
    /// Where to write `ca.crt` and `kubeconfig`.
    pub dir: PathBuf,
    /// The etcd key prefix of this server's objects.
    pub prefix: String,
}

/// A failure to start.
#[derive(Debug)]
pub struct StartError(pub String);

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StartError {}

fn fail(what: &str, e: impl std::fmt::Display) -> StartError {
    StartError(format!("{what}: {e}"))
}

/// What a token may do.
#[derive(Debug, Clone)]
struct Rights {
    user: String,
    /// `None`: every namespace.
    namespace: Option<String>,
    write: bool,
    admin: bool,
}

struct State {
    storage: Storage,
    tokens: Vec<(String, Rights)>,
    addr: SocketAddr,
    log_all: bool,
}

/// A running server.
#[derive(Debug, Clone)]
pub struct Running {
    /// Where it listens.
    pub addr: SocketAddr,
    /// The kubeconfig it wrote.
    pub kubeconfig: PathBuf,
    /// The CA certificate (PEM) clients trust.
    pub ca: PathBuf,
}

fn random_token() -> String {
    let b: [u8; 24] = rand::random();
    b.iter().fold(String::with_capacity(48), |mut s, x| {
        use std::fmt::Write as _;
        let _ = write!(s, "{x:02x}");
        s
    })
}

/// Makes the CA and the server certificate (for `127.0.0.1` and
/// `localhost`): (CA PEM, server cert DER, server key DER).
fn certificates() -> Result<(String, Vec<u8>, Vec<u8>), StartError> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
    let ca_key = KeyPair::generate().map_err(|e| fail("CA key", e))?;
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(|e| fail("CA", e))?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "tenure kube test CA");
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca.self_signed(&ca_key).map_err(|e| fail("CA", e))?;
    let key = KeyPair::generate().map_err(|e| fail("server key", e))?;
    let mut params = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
        .map_err(|e| fail("server certificate", e))?;
    params
        .distinguished_name
        .push(DnType::CommonName, "tenure-kube-testserver");
    let cert = params
        .signed_by(&key, &ca_cert, &ca_key)
        .map_err(|e| fail("server certificate", e))?;
    Ok((ca_cert.pem(), cert.der().to_vec(), key.serialize_der()))
}

fn kubeconfig(addr: SocketAddr, ca_pem: &str, tokens: &[(String, Rights)], wrong: &str) -> Value {
    use base64::Engine as _;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let mut users = vec![json!({"name": "wrong-token", "user": {"token": wrong}})];
    let mut contexts = vec![
        json!({"name": "wrong-token", "context": {"cluster": "tenure-test", "user": "wrong-token", "namespace": "tenure-test"}}),
    ];
    for (token, rights) in tokens {
        let name = match (rights.admin, rights.write) {
            (true, _) => "tenure-test",
            (false, false) => "reader",
            (false, true) => "limited",
        };
        let ns = rights.namespace.as_deref().unwrap_or("tenure-test");
        users.push(json!({"name": name, "user": {"token": token}}));
        contexts.push(json!({"name": name, "context": {"cluster": "tenure-test", "user": name, "namespace": ns}}));
    }
    json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "tenure-test", "cluster": {"server": format!("https://{addr}"), "certificate-authority-data": ca}}],
        "users": users,
        "contexts": contexts,
        "current-context": "tenure-test",
        "preferences": {},
    })
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<(), StartError> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let _ = std::fs::remove_file(path);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| fail(&format!("write {}", path.display()), e))?;
    f.write_all(bytes)
        .map_err(|e| fail(&format!("write {}", path.display()), e))
}

/// Starts the server: connects to etcd, makes the certificates, writes the
/// kubeconfig and the CA, and serves in a background task until the
/// runtime ends.
pub async fn start(config: Config) -> Result<Running, StartError> {
    let endpoint = config
        .etcd
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let connect = || {
        etcd_client::Client::connect(
            [endpoint.clone()],
            Some(etcd_client::ConnectOptions::new().with_connect_timeout(Duration::from_secs(5))),
        )
    };
    // Boxed: two connections' futures would make this one large.
    let client = Box::pin(connect())
        .await
        .map_err(|e| fail("connect to etcd", e))?;
    let watch_client = Box::pin(connect())
        .await
        .map_err(|e| fail("connect to etcd", e))?;
    let storage = Storage::new(client, watch_client, config.prefix.clone());
    for ns in ["default", "tenure-test", "tenure-limited"] {
        storage
            .ensure_namespace(ns)
            .await
            .map_err(|e| fail("create namespace", e.body))?;
    }
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|e| fail(&format!("listen on {}", config.listen), e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| fail("local address", e))?;
    let tokens = vec![
        (
            random_token(),
            Rights {
                user: "tenure-admin".into(),
                namespace: None,
                write: true,
                admin: true,
            },
        ),
        (
            random_token(),
            Rights {
                user: "system:serviceaccount:tenure-test:reader".into(),
                namespace: None,
                write: false,
                admin: false,
            },
        ),
        (
            random_token(),
            Rights {
                user: "system:serviceaccount:tenure-limited:limited".into(),
                namespace: Some("tenure-limited".into()),
                write: true,
                admin: false,
            },
        ),
    ];
    let (ca_pem, cert, key) = certificates()?;
    std::fs::create_dir_all(&config.dir).map_err(|e| fail("create the directory", e))?;
    let ca_path = config.dir.join("ca.crt");
    let kube_path = config.dir.join("kubeconfig");
    write_private(&ca_path, ca_pem.as_bytes())?;
    let kc = kubeconfig(addr, &ca_pem, &tokens, "not-a-token-this-server-issued");
    write_private(
        &kube_path,
        serde_json::to_string_pretty(&kc)
            .unwrap_or_default()
            .as_bytes(),
    )?;

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| fail("TLS", e))?
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.into()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.into()),
        )
        .map_err(|e| fail("TLS", e))?;
    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let state = Arc::new(State {
        storage,
        tokens,
        addr,
        log_all: std::env::var_os("TENURE_KUBE_TESTSERVER_LOG").is_some_and(|v| v == "all"),
    });
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            let acceptor = acceptor.clone();
            let state = state.clone();
            tokio::spawn(async move {
                let Ok(stream) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper::service::service_fn(move |req| {
                    let state = state.clone();
                    async move { Ok::<_, Infallible>(handle(&state, req).await) }
                });
                let mut builder =
                    hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                // staging/src/k8s.io/apiserver/pkg/server/secure_serving.go:
                // 250 concurrent streams per HTTP/2 connection unless
                // --http2-max-streams-per-connection says otherwise (hyper's
                // own default is 200).
                builder.http2().max_concurrent_streams(HTTP2_MAX_STREAMS);
                let _ = builder
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(Running {
        addr,
        kubeconfig: kube_path,
        ca: ca_path,
    })
}

type Body = UnsyncBoxBody<Bytes, Infallible>;

fn respond(code: u16, body: &Value) -> Response<Body> {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let mut resp = Response::new(Full::new(Bytes::from(bytes)).boxed_unsync());
    *resp.status_mut() = hyper::StatusCode::from_u16(code).unwrap_or(hyper::StatusCode::OK);
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    resp
}

fn error(e: &ApiError) -> Response<Body> {
    respond(e.code, &e.body)
}

async fn handle(state: &State, req: Request<Incoming>) -> Response<Body> {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let began = std::time::Instant::now();
    let resp = route(state, req).await;
    // One line per request that did not succeed, and per success with
    // TENURE_KUBE_TESTSERVER_LOG=all (kube-apiserver logs each request
    // only at -v=3): at thousands of requests a second a line each is a
    // log of gigabytes. Never the Authorization header.
    if !resp.status().is_success() || state.log_all {
        eprintln!(
            "{method} {path} {} {} µs",
            resp.status().as_u16(),
            began.elapsed().as_micros()
        );
    }
    resp
}

fn rights<'a>(state: &'a State, req: &Request<Incoming>) -> Option<&'a Rights> {
    let header = req
        .headers()
        .get(hyper::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let token = header.strip_prefix("Bearer ")?.trim();
    state
        .tokens
        .iter()
        .find(|(t, _)| t.as_bytes() == token.as_bytes())
        .map(|(_, r)| r)
}

/// RBAC as the three fixed users have it (plugin/pkg/auth/authorizer/rbac/rbac.go
/// answers "no opinion" and the request is refused 403 by
/// staging/src/k8s.io/apiserver/pkg/endpoints/filters/authorization.go).
fn authorize(r: &Rights, verb: &str, namespace: &str) -> Result<(), ApiError> {
    let writes = !matches!(verb, "get" | "list" | "watch");
    let ns_ok = r.namespace.as_deref().is_none_or(|n| n == namespace);
    if (writes && !r.write) || !ns_ok {
        return Err(forbidden(&r.user, verb, "leases", status::GROUP, namespace));
    }
    Ok(())
}

async fn read_body(req: Request<Incoming>) -> Result<Bytes, ApiError> {
    match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => Ok(b.to_bytes()),
        Err(e) => Err(ApiError {
            code: 413,
            body: json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
                "message": format!("the request body could not be read: {e}"),"reason":"RequestEntityTooLarge","code":413}),
        }),
    }
}

fn discovery_leases() -> Value {
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": "coordination.k8s.io/v1",
        "resources": [{
            "name": "leases", "singularName": "lease", "namespaced": true, "kind": "Lease",
            "verbs": ["create", "delete", "get", "list", "update", "watch"],
        }],
    })
}

fn discovery_core() -> Value {
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": "v1",
        "resources": [{
            "name": "namespaces", "singularName": "namespace", "namespaced": false, "kind": "Namespace",
            "verbs": ["create", "get"], "shortNames": ["ns"],
        }],
    })
}

async fn route(state: &State, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path().to_owned();
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    // Health endpoints answer without credentials, as kube-apiserver's do
    // for the system:public-info-viewer role.
    if matches!(segs.as_slice(), ["healthz" | "readyz" | "livez"]) {
        let mut r = Response::new(Full::new(Bytes::from_static(b"ok")).boxed_unsync());
        *r.status_mut() = hyper::StatusCode::OK;
        return r;
    }
    // staging/src/k8s.io/apiserver/pkg/endpoints/filters/authentication.go:
    // a request whose token no authenticator accepts is 401.
    let Some(rights) = rights(state, &req).cloned() else {
        return error(&unauthorized());
    };
    let q = query(req.uri().query());
    let param = |name: &str| q.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
    let method = req.method().clone();
    match (method.clone(), segs.as_slice()) {
        (Method::GET, ["version"]) => respond(
            200,
            &json!({"major": "1", "minor": "32", "gitVersion": "v1.32.0-tenure-kube-testserver",
                "gitCommit": "", "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z",
                "goVersion": "none (Rust)", "compiler": "rustc", "platform": "linux/amd64"}),
        ),
        (Method::GET, ["api"]) => respond(
            200,
            &json!({"kind": "APIVersions", "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": state.addr.to_string()}]}),
        ),
        (Method::GET, ["api", "v1"]) => respond(200, &discovery_core()),
        (Method::GET, ["apis"]) => respond(
            200,
            &json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [{
                "name": "coordination.k8s.io",
                "versions": [{"groupVersion": "coordination.k8s.io/v1", "version": "v1"}],
                "preferredVersion": {"groupVersion": "coordination.k8s.io/v1", "version": "v1"},
            }]}),
        ),
        (Method::GET, ["apis", "coordination.k8s.io"]) => respond(
            200,
            &json!({"kind": "APIGroup", "apiVersion": "v1", "name": "coordination.k8s.io",
                "versions": [{"groupVersion": "coordination.k8s.io/v1", "version": "v1"}],
                "preferredVersion": {"groupVersion": "coordination.k8s.io/v1", "version": "v1"}}),
        ),
        (Method::GET, ["apis", "coordination.k8s.io", "v1"]) => respond(200, &discovery_leases()),
        // kubectl (1.27 and later, `--validate=strict` by default) asks the
        // OpenAPI v3 document of the group whether PATCH takes the
        // `fieldValidation` query parameter; if so it sends
        // `fieldValidation=Strict` and leaves validation to the server,
        // else it downloads /openapi/v2 to validate itself
        // (staging/src/k8s.io/cli-runtime/pkg/resource/query_param_verifier_v3.go).
        // Only that much of the documents is served.
        (Method::GET, ["openapi", "v3"]) => respond(
            200,
            &json!({"paths": {"apis/coordination.k8s.io/v1": {
                "serverRelativeURL": "/openapi/v3/apis/coordination.k8s.io/v1?hash=0"}}}),
        ),
        (Method::GET, ["openapi", "v3", "apis", "coordination.k8s.io", "v1"]) => respond(
            200,
            &json!({"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.32.0"},
                "paths": {"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}": {
                    "patch": {
                        "x-kubernetes-group-version-kind": {"group": "coordination.k8s.io", "version": "v1", "kind": "Lease"},
                        "parameters": [{"name": "fieldValidation", "in": "query", "schema": {"type": "string"}}],
                        "responses": {"200": {"description": "OK"}},
                    }}},
                "components": {"schemas": {}}}),
        ),
        (Method::POST, ["api", "v1", "namespaces"]) => {
            if !rights.admin {
                return error(&forbidden(&rights.user, "create", "namespaces", "", ""));
            }
            let body = match read_body(req).await {
                Ok(b) => b,
                Err(e) => return error(&e),
            };
            match state.storage.create_namespace(&body).await {
                Ok((code, v)) => respond(code, &v),
                Err(e) => error(&e),
            }
        }
        (Method::GET, ["api", "v1", "namespaces", ns]) => {
            match state.storage.get_namespace(ns).await {
                Ok(v) => respond(200, &v),
                Err(e) => error(&e),
            }
        }
        (Method::GET, ["apis", "coordination.k8s.io", "v1", "leases"]) => {
            if rights.namespace.is_some() {
                return error(&forbidden(
                    &rights.user,
                    "list",
                    "leases",
                    status::GROUP,
                    "",
                ));
            }
            list_or_watch(state, None, &q, param("watch")).await
        }
        (_, ["apis", "coordination.k8s.io", "v1", "namespaces", ns, "leases", rest @ ..]) => {
            let ns = (*ns).to_owned();
            let name = rest.first().map(|s| (*s).to_owned());
            if rest.len() > 1 {
                return error(&not_found("leases", status::GROUP, &rest.join("/")));
            }
            let verb = match (&method, &name) {
                (&Method::GET, None) if param("watch").is_some_and(|w| w == "1" || w == "true") => {
                    "watch"
                }
                (&Method::GET, None) => "list",
                (&Method::GET, Some(_)) => "get",
                (&Method::POST, None) => "create",
                (&Method::PUT, Some(_)) => "update",
                (&Method::DELETE, Some(_)) => "delete",
                (&Method::PATCH, Some(_)) => "patch",
                _ => return error(&method_not_supported(method.as_str())),
            };
            if let Err(e) = authorize(&rights, verb, &ns) {
                return error(&e);
            }
            let strict = param("fieldValidation") == Some("Strict");
            let result = match (verb, name) {
                ("list" | "watch", _) => {
                    return list_or_watch(state, Some(ns), &q, param("watch")).await
                }
                ("get", Some(name)) => state.storage.get(&ns, &name).await.map(|v| (200, v)),
                ("create", _) => match read_body(req).await {
                    Ok(body) => state.storage.create(&ns, &body, strict).await,
                    Err(e) => Err(e),
                },
                ("update", Some(name)) => match read_body(req).await {
                    Ok(body) => state.storage.update(&ns, &name, &body, strict).await,
                    Err(e) => Err(e),
                },
                ("delete", Some(name)) => match read_body(req).await {
                    Ok(body) => state.storage.delete(&ns, &name, &body).await,
                    Err(e) => Err(e),
                },
                // Patches (merge, JSON, strategic, apply) are not kept by
                // this server: tenure never sends one.
                _ => Err(method_not_supported("patch")),
            };
            match result {
                Ok((code, v)) => respond(code, &v),
                Err(e) => error(&e),
            }
        }
        _ => error(&ApiError {
            code: 404,
            body: json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
                "message":"the server could not find the requested resource","reason":"NotFound","details":{},"code":404}),
        }),
    }
}

async fn list_or_watch(
    state: &State,
    namespace: Option<String>,
    q: &[(String, String)],
    watch: Option<&str>,
) -> Response<Body> {
    let param = |name: &str| q.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
    let labels = match LabelSelector::parse(param("labelSelector").unwrap_or("")) {
        Ok(s) => s,
        Err(e) => return error(&e),
    };
    let fields = match FieldSelector::parse(param("fieldSelector").unwrap_or("")) {
        Ok(s) => s,
        Err(e) => return error(&e),
    };
    let limit = match param("limit").map(str::parse::<usize>).transpose() {
        Ok(l) => l.unwrap_or(0),
        Err(_) => return error(&bad_request("limit must be a non-negative integer")),
    };
    let list = ListQuery {
        namespace,
        labels,
        fields,
        limit,
        continue_token: param("continue")
            .filter(|c| !c.is_empty())
            .map(str::to_owned),
    };
    if watch.is_some_and(|w| w == "1" || w == "true") {
        let rv = param("resourceVersion").unwrap_or("").to_owned();
        let timeout = param("timeoutSeconds")
            .and_then(|t| t.parse::<u64>().ok())
            .map_or(Duration::from_secs(1800), Duration::from_secs);
        let (tx, rx) = mpsc::channel::<Vec<u8>>(64);
        let storage = state.storage.clone();
        tokio::spawn(async move {
            if let Err(e) = storage.watch(list, &rv, timeout, tx.clone()).await {
                let mut line = serde_json::to_vec(&json!({"type": "ERROR", "object": e.body}))
                    .unwrap_or_default();
                line.push(b'\n');
                let _ = tx.send(line).await;
            }
        });
        let stream = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv()
                .await
                .map(|line| (Ok::<_, Infallible>(Frame::data(Bytes::from(line))), rx))
        });
        let mut resp = Response::new(BodyExt::boxed_unsync(StreamBody::new(stream)));
        resp.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("application/json"),
        );
        return resp;
    }
    match state.storage.list(&list).await {
        Ok(v) => respond(200, &v),
        Err(e) => error(&e),
    }
}
