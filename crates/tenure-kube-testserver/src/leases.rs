//! Lease objects in etcd, kept as kube-apiserver keeps them.
//!
//! Each rule cites the upstream file it follows. The storage layer is
//! staging/src/k8s.io/apiserver/pkg/storage/etcd3/store.go: an object is
//! stored without its `resourceVersion`, which a read sets from the key's
//! `mod_revision` (etcd3/store.go `decode` through `APIObjectVersioner`,
//! staging/src/k8s.io/apiserver/pkg/storage/api_object_versioner.go); a
//! list's `resourceVersion` is the response header's revision.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use etcd_client::{
    Client, Compare, CompareOp, EventType, GetOptions, KeyValue, Txn, TxnOp, WatchOptions,
};
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

use crate::select::{FieldSelector, LabelSelector};
use crate::status::{
    already_exists, bad_request, conflict, expired, internal, invalid, namespace_not_found,
    not_found, unavailable, ApiError, FieldError, GROUP, OPTIMISTIC_LOCK,
};

/// Where the objects live in etcd.
#[derive(Clone)]
pub struct Storage {
    /// The etcd client of reads and writes.
    pub client: Client,
    /// The etcd client of watches: a connection of its own, so that a
    /// watch whose reader is slow (its events wait in the connection's
    /// flow-control window) never holds up the replies to writes.
    pub watch_client: Client,
    /// This server's own key prefix (`/tenure-kube-test/`), as
    /// kube-apiserver's `--etcd-prefix` (`/registry`).
    pub prefix: String,
    /// The last state of each Lease this server saw (its own writes and
    /// reads): what kube-apiserver's watch cache hands to an update as
    /// the object to start from (see [`Storage::update`]).
    pub(crate) cache: Arc<Mutex<HashMap<String, Cached>>>,
    /// Namespaces known to exist (see [`Storage::namespace_exists`]).
    pub(crate) namespaces: Arc<Mutex<HashSet<String>>>,
}

/// A Lease as last seen: its `mod_revision` and its stored bytes.
#[derive(Clone)]
pub(crate) struct Cached {
    revision: i64,
    bytes: Vec<u8>,
}

fn etcd_err(e: &etcd_client::Error) -> ApiError {
    unavailable(format!("etcd: {e}"))
}

/// The largest object kube-apiserver stores: etcd's default request limit
/// (1.5 MiB, `--max-request-bytes`); bodies beyond it are refused.
pub const MAX_BODY: usize = 3 * 1024 * 1024;

fn now_rfc3339() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    rfc3339(secs)
}

/// `2006-01-02T15:04:05Z` for seconds since the epoch (civil from days,
/// Howard Hinnant's algorithm).
fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

fn random_uid() -> String {
    let b: [u8; 16] = rand::random();
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
        u16::from_be_bytes([b[4], b[5]]),
        u16::from_be_bytes([b[6], b[7]]) & 0x0fff,
        (u16::from_be_bytes([b[8], b[9]]) & 0x3fff) | 0x8000,
        u64::from_be_bytes([0, 0, b[10], b[11], b[12], b[13], b[14], b[15]])
    )
}

/// Whether `s` is a DNS-1123 subdomain
/// (staging/src/k8s.io/apimachinery/pkg/util/validation/validation.go
/// `IsDNS1123Subdomain`): what `ValidateObjectMeta` requires of a Lease's
/// name (pkg/apis/coordination/validation/validation.go `ValidateLease`
/// passes `apimachineryvalidation.NameIsDNSSubdomain`).
pub fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// Whether `s` is a DNS-1123 label (a namespace's name, ≤ 63).
pub fn is_dns1123_label(s: &str) -> bool {
    s.len() <= 63 && !s.contains('.') && is_dns1123_subdomain(s)
}

/// validation.go `IsQualifiedName`: an annotation or label key.
fn is_qualified_name(key: &str) -> bool {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if prefix.is_some_and(|p| !is_dns1123_subdomain(p)) {
        return false;
    }
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// validation.go `IsValidLabelValue`.
fn is_label_value(v: &str) -> bool {
    let b = v.as_bytes();
    b.is_empty()
        || (b.len() <= 63
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric()
            && b.iter()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.')))
}

fn field(field: &str, kind: &'static str, detail: String) -> FieldError {
    FieldError {
        field: field.into(),
        kind,
        detail,
    }
}

/// pkg/apis/coordination/validation/validation.go `ValidateLease`,
/// `ValidateLeaseSpec`, and the object meta rules of
/// staging/src/k8s.io/apimachinery/pkg/api/validation/objectmeta.go
/// (name, annotations with their 256 KiB total, labels).
fn validate(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    if name.is_empty() {
        errs.push(field(
            "metadata.name",
            "FieldValueRequired",
            "Required value: name or generateName is required".into(),
        ));
    } else if !is_dns1123_subdomain(name) {
        errs.push(field(
            "metadata.name",
            "FieldValueInvalid",
            format!("Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"),
        ));
    }
    if let Some(annotations) = obj.pointer("/metadata/annotations") {
        match annotations.as_object() {
            None if !annotations.is_null() => errs.push(field(
                "metadata.annotations",
                "FieldValueInvalid",
                "Invalid value: not a map of strings".into(),
            )),
            None => {}
            Some(map) => {
                let mut total = 0;
                for (k, v) in map {
                    total += k.len() + v.as_str().map_or(0, str::len);
                    if !is_qualified_name(k) {
                        errs.push(field(
                            "metadata.annotations",
                            "FieldValueInvalid",
                            format!("Invalid value: {k:?}: name part must consist of alphanumeric characters, '-', '_' or '.'"),
                        ));
                    }
                    if !v.is_string() {
                        errs.push(field(
                            "metadata.annotations",
                            "FieldValueInvalid",
                            format!("Invalid value: {k:?}: the value must be a string"),
                        ));
                    }
                }
                // objectmeta.go TotalAnnotationSizeLimitB.
                if total > 256 * 1024 {
                    errs.push(field(
                        "metadata.annotations",
                        "FieldValueTooLong",
                        "Too long: may not be more than 262144 bytes".into(),
                    ));
                }
            }
        }
    }
    if let Some(labels) = obj.pointer("/metadata/labels").and_then(Value::as_object) {
        for (k, v) in labels {
            let ok = is_qualified_name(k) && v.as_str().is_some_and(is_label_value);
            if !ok {
                errs.push(field(
                    "metadata.labels",
                    "FieldValueInvalid",
                    format!("Invalid value: {k:?}: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.'"),
                ));
            }
        }
    }
    // validation.go ValidateLeaseSpec: durations and transitions.
    for (key, path, min, rule) in [
        (
            "leaseDurationSeconds",
            "spec.leaseDurationSeconds",
            1,
            "must be greater than 0",
        ),
        (
            "leaseTransitions",
            "spec.leaseTransitions",
            0,
            "must be greater than or equal to 0",
        ),
    ] {
        if let Some(v) = obj.pointer(&format!("/spec/{key}")) {
            if v.is_null() {
                continue;
            }
            // int32 fields: a value beyond i32 fails to decode (a 400 in
            // the real server); reported as invalid here.
            match v.as_i64().and_then(|n| i32::try_from(n).ok()) {
                Some(n) if n >= min => {}
                _ => errs.push(field(
                    path,
                    "FieldValueInvalid",
                    format!("Invalid value: {v}: {rule}"),
                )),
            }
        }
    }
    for key in ["acquireTime", "renewTime"] {
        if let Some(v) = obj.pointer(&format!("/spec/{key}")) {
            if !v.is_null() && !v.as_str().is_some_and(is_micro_time) {
                errs.push(field(
                    &format!("spec.{key}"),
                    "FieldValueInvalid",
                    format!("Invalid value: {v}: not a MicroTime (RFC 3339 with microseconds)"),
                ));
            }
        }
    }
    errs
}

/// staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/micro_time.go parses
/// RFC 3339 (`2006-01-02T15:04:05.000000Z07:00`, fractions optional).
fn is_micro_time(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 20
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[13] == b':'
        && b[16] == b':'
        && [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18]
            .iter()
            .all(|&i| b[i].is_ascii_digit())
        && (s.ends_with('Z') || s[19..].contains(['+', '-']))
}

/// The fields a Lease has (staging/src/k8s.io/api/coordination/v1/types.go,
/// and ObjectMeta in staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/types.go).
const LEASE_FIELDS: [&str; 4] = ["apiVersion", "kind", "metadata", "spec"];
const META_FIELDS: [&str; 15] = [
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];
const SPEC_FIELDS: [&str; 7] = [
    "holderIdentity",
    "leaseDurationSeconds",
    "acquireTime",
    "renewTime",
    "leaseTransitions",
    "strategy",
    "preferredHolder",
];

/// Unknown fields: dropped, as decoding into the typed object drops them;
/// with `fieldValidation=Strict`, a 400 naming the first
/// (staging/src/k8s.io/apiserver/pkg/endpoints/handlers/create.go and
/// update.go, `fieldValidation`; the decoder's "strict decoding error").
fn prune(obj: &mut Value, strict: bool) -> Result<(), ApiError> {
    fn keep(
        map: Option<&mut Map<String, Value>>,
        known: &[&str],
        path: &str,
        strict: bool,
    ) -> Result<(), ApiError> {
        let Some(map) = map else { return Ok(()) };
        let unknown: Vec<String> = map
            .keys()
            .filter(|k| !known.contains(&k.as_str()))
            .cloned()
            .collect();
        if strict {
            if let Some(k) = unknown.first() {
                return Err(bad_request(format!(
                    "strict decoding error: unknown field \"{path}{k}\""
                )));
            }
        }
        for k in unknown {
            map.remove(&k);
        }
        Ok(())
    }
    keep(obj.as_object_mut(), &LEASE_FIELDS, "", strict)?;
    keep(
        obj.get_mut("metadata").and_then(Value::as_object_mut),
        &META_FIELDS,
        "metadata.",
        strict,
    )?;
    keep(
        obj.get_mut("spec").and_then(Value::as_object_mut),
        &SPEC_FIELDS,
        "spec.",
        strict,
    )
}

/// A parsed request body: a Lease object.
fn parse_lease(body: &[u8], strict: bool) -> Result<Value, ApiError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        bad_request(format!(
            "the body of the request was in an unknown format: {e}"
        ))
    })?;
    if !v.is_object() {
        return Err(bad_request("the body of the request is not an object"));
    }
    // staging/src/k8s.io/apiserver/pkg/endpoints/handlers/rest.go: a body
    // of another kind than the endpoint's is refused by the decoder.
    if let Some(kind) = v.get("kind").and_then(Value::as_str) {
        if kind != "Lease" {
            return Err(bad_request(format!(
                "the kind of the body ({kind}) is not Lease"
            )));
        }
    }
    if let Some(api) = v.get("apiVersion").and_then(Value::as_str) {
        if api != "coordination.k8s.io/v1" {
            return Err(bad_request(format!(
                "the apiVersion of the body ({api}) is not coordination.k8s.io/v1"
            )));
        }
    }
    let mut v = v;
    prune(&mut v, strict)?;
    Ok(v)
}

fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.get("metadata").is_some_and(Value::is_object) {
        if let Some(o) = obj.as_object_mut() {
            o.insert("metadata".into(), json!({}));
        }
    }
    match obj.get_mut("metadata").and_then(Value::as_object_mut) {
        Some(m) => m,
        None => unreachable_meta(),
    }
}

#[allow(
    clippy::panic,
    reason = "parse_lease guarantees an object; metadata was just inserted"
)]
fn unreachable_meta() -> ! {
    panic!("metadata is an object")
}

fn meta_str<'a>(obj: &'a Value, key: &str) -> &'a str {
    obj.get("metadata")
        .and_then(|m| m.get(key))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// An object as stored: the kind and apiVersion, no resourceVersion
/// (etcd3/store.go `PrepareObjectForStorage`).
fn for_storage(mut obj: Value) -> Vec<u8> {
    meta_mut(&mut obj).remove("resourceVersion");
    if let Some(o) = obj.as_object_mut() {
        o.insert("kind".into(), json!("Lease"));
        o.insert("apiVersion".into(), json!("coordination.k8s.io/v1"));
    }
    serde_json::to_vec(&obj).unwrap_or_default()
}

/// A stored object as answered: its resourceVersion is the revision given.
fn answered(bytes: &[u8], revision: i64) -> Value {
    let mut obj: Value = serde_json::from_slice(bytes).unwrap_or_else(|_| json!({}));
    meta_mut(&mut obj).insert("resourceVersion".into(), json!(revision.to_string()));
    obj
}

/// Parses a resourceVersion (api_object_versioner.go `ParseResourceVersion`:
/// empty is 0, anything else a non-negative integer or a 400).
fn parse_rv(rv: &str) -> Result<i64, ApiError> {
    if rv.is_empty() {
        return Ok(0);
    }
    rv.parse::<i64>()
        .ok()
        .filter(|v| *v >= 0)
        .ok_or_else(|| bad_request(format!("invalid resource version {rv:?}")))
}

fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// A continue token (staging/src/k8s.io/apiserver/pkg/storage/continue.go:
/// base64 of `{"v":"meta.k8s.io/v1","rv":N,"start":"KEY\x00"}`).
fn encode_continue(rv: i64, start: &str) -> String {
    use base64::Engine as _;
    let token = json!({"v": "meta.k8s.io/v1", "rv": rv, "start": start});
    base64::engine::general_purpose::URL_SAFE.encode(token.to_string())
}

fn decode_continue(token: &str) -> Result<(i64, String), ApiError> {
    use base64::Engine as _;
    let bad = || bad_request("continue key is not valid: the token was not issued by this server");
    let bytes = base64::engine::general_purpose::URL_SAFE
        .decode(token)
        .map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&bytes).map_err(|_| bad())?;
    if v.get("v").and_then(Value::as_str) != Some("meta.k8s.io/v1") {
        return Err(bad());
    }
    let rv = v
        .get("rv")
        .and_then(Value::as_i64)
        .filter(|r| *r > 0)
        .ok_or_else(bad)?;
    let start = v.get("start").and_then(Value::as_str).ok_or_else(bad)?;
    if start.contains("..") || start.starts_with('/') {
        return Err(bad());
    }
    Ok((rv, start.to_owned()))
}

/// What a list asks for.
pub struct ListQuery {
    /// `None`: every namespace.
    pub namespace: Option<String>,
    /// `labelSelector`.
    pub labels: LabelSelector,
    /// `fieldSelector`.
    pub fields: FieldSelector,
    /// `limit` (0: all).
    pub limit: usize,
    /// `continue`.
    pub continue_token: Option<String>,
}

impl Storage {
    /// Storage over `client` (reads and writes) and `watch_client`
    /// (watches), under `prefix`.
    pub fn new(client: Client, watch_client: Client, prefix: String) -> Storage {
        Storage {
            client,
            watch_client,
            prefix,
            cache: Arc::default(),
            namespaces: Arc::default(),
        }
    }

    fn cached(&self, key: &str) -> Option<Cached> {
        self.cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .cloned()
    }

    /// Remembers what `key` holds at `revision` (`None`: nothing), unless
    /// a later state is already known.
    fn remember(&self, key: &str, state: Option<(i64, &[u8])>, revision: i64) {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.get(key).is_some_and(|c| c.revision > revision) {
            return;
        }
        match state {
            Some((rev, bytes)) => {
                cache.insert(
                    key.to_owned(),
                    Cached {
                        revision: rev,
                        bytes: bytes.to_vec(),
                    },
                );
            }
            None => {
                cache.remove(key);
            }
        }
    }

    fn lease_key(&self, namespace: &str, name: &str) -> String {
        format!("{}leases/{namespace}/{name}", self.prefix)
    }

    fn leases_prefix(&self, namespace: Option<&str>) -> String {
        match namespace {
            Some(ns) => format!("{}leases/{ns}/", self.prefix),
            None => format!("{}leases/", self.prefix),
        }
    }

    fn namespace_key(&self, namespace: &str) -> String {
        format!("{}namespaces/{namespace}", self.prefix)
    }

    /// Whether the namespace exists. plugin/pkg/admission/namespace/lifecycle/admission.go
    /// asks its informer's cache first and reads the namespace live only
    /// when the cache does not have it; this server never deletes a
    /// namespace, so one seen once exists.
    pub async fn namespace_exists(&self, namespace: &str) -> Result<bool, ApiError> {
        if self
            .namespaces
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(namespace)
        {
            return Ok(true);
        }
        let resp = self
            .client
            .kv_client()
            .get(
                self.namespace_key(namespace),
                Some(GetOptions::new().with_count_only()),
            )
            .await
            .map_err(|e| etcd_err(&e))?;
        let exists = resp.count() > 0;
        if exists {
            self.namespaces
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(namespace.to_owned());
        }
        Ok(exists)
    }

    /// Creates a namespace (POST /api/v1/namespaces): 201, or 409.
    pub async fn create_namespace(&self, body: &[u8]) -> Result<(u16, Value), ApiError> {
        let v: Value = serde_json::from_slice(body).map_err(|e| {
            bad_request(format!(
                "the body of the request was in an unknown format: {e}"
            ))
        })?;
        let name = v
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        if !is_dns1123_label(name) {
            return Err(invalid(
                "Namespace",
                name,
                &[field(
                    "metadata.name",
                    "FieldValueInvalid",
                    format!("Invalid value: {name:?}: a lowercase RFC 1123 label"),
                )],
            ));
        }
        let obj = json!({
            "kind": "Namespace", "apiVersion": "v1",
            "metadata": {"name": name, "uid": random_uid(), "creationTimestamp": now_rfc3339()},
            "status": {"phase": "Active"},
        });
        let key = self.namespace_key(name);
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key, obj.to_string(), None)]);
        let resp = self
            .client
            .kv_client()
            .txn(txn)
            .await
            .map_err(|e| etcd_err(&e))?;
        if !resp.succeeded() {
            return Err(crate::status::ApiError {
                code: 409,
                body: json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
                    "message": format!("namespaces \"{name}\" already exists"),
                    "reason":"AlreadyExists","details":{"name":name,"kind":"namespaces"},"code":409}),
            });
        }
        Ok((201, obj))
    }

    /// Ensures the namespace exists (used at start for `default`).
    pub async fn ensure_namespace(&self, name: &str) -> Result<(), ApiError> {
        match self
            .create_namespace(json!({"metadata": {"name": name}}).to_string().as_bytes())
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.code == 409 => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// GET a namespace: 200 or 404.
    pub async fn get_namespace(&self, name: &str) -> Result<Value, ApiError> {
        let resp = self
            .client
            .kv_client()
            .get(self.namespace_key(name), None)
            .await
            .map_err(|e| etcd_err(&e))?;
        let kv = resp
            .kvs()
            .first()
            .ok_or_else(|| namespace_not_found(name))?;
        let mut obj: Value = serde_json::from_slice(kv.value()).unwrap_or_else(|_| json!({}));
        meta_mut(&mut obj).insert(
            "resourceVersion".into(),
            json!(kv.mod_revision().to_string()),
        );
        Ok(obj)
    }

    async fn get_kv(&self, key: &str) -> Result<Option<KeyValue>, ApiError> {
        let resp = self
            .client
            .kv_client()
            .get(key, None)
            .await
            .map_err(|e| etcd_err(&e))?;
        let kv = resp.kvs().first().cloned();
        let at = resp
            .header()
            .map_or(0, etcd_client::ResponseHeader::revision);
        self.remember(
            key,
            kv.as_ref().map(|kv| (kv.mod_revision(), kv.value())),
            kv.as_ref().map_or(at, KeyValue::mod_revision),
        );
        Ok(kv)
    }

    /// GET one Lease: 200 or 404 (store.go `Get`, etcd3/store.go `Get`).
    pub async fn get(&self, namespace: &str, name: &str) -> Result<Value, ApiError> {
        match self.get_kv(&self.lease_key(namespace, name)).await? {
            Some(kv) => Ok(answered(kv.value(), kv.mod_revision())),
            None => Err(not_found("leases", GROUP, name)),
        }
    }

    /// POST: registry/generic/registry/store.go `Create`; etcd3/store.go
    /// `Create` is a transaction on `create_revision == 0`.
    pub async fn create(
        &self,
        namespace: &str,
        body: &[u8],
        strict: bool,
    ) -> Result<(u16, Value), ApiError> {
        let mut obj = parse_lease(body, strict)?;
        // staging/src/k8s.io/apiserver/pkg/registry/rest/create.go
        // BeforeCreate: the body's namespace must be the URL's (or empty).
        let body_ns = meta_str(&obj, "namespace").to_owned();
        if !body_ns.is_empty() && body_ns != namespace {
            return Err(bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        // create.go BeforeCreate: generateName, when no name is given.
        if meta_str(&obj, "name").is_empty() {
            let generate = meta_str(&obj, "generateName").to_owned();
            if !generate.is_empty() {
                let suffix: String = (0..5)
                    .map(|_| {
                        char::from(b"bcdfghjklmnpqrstvwxz2456789"[rand::random::<usize>() % 27])
                    })
                    .collect();
                meta_mut(&mut obj).insert("name".into(), json!(format!("{generate}{suffix}")));
            }
        }
        let name = meta_str(&obj, "name").to_owned();
        // etcd3/store.go Create: "resourceVersion should not be set on
        // objects to be created" (storage.ErrResourceVersionSetOnCreate,
        // answered as an internal error).
        if !meta_str(&obj, "resourceVersion").is_empty() {
            return Err(internal(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        self.fill_for_create(namespace, &mut obj);
        let errs = validate(&obj);
        if !errs.is_empty() {
            return Err(invalid("Lease.coordination.k8s.io", &name, &errs));
        }
        // plugin/pkg/admission/namespace/lifecycle/admission.go: no create
        // in a namespace that does not exist.
        if !self.namespace_exists(namespace).await? {
            return Err(namespace_not_found(namespace));
        }
        let key = self.lease_key(namespace, &name);
        let stored = for_storage(obj);
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.clone(), stored.clone(), None)]);
        let resp = self
            .client
            .kv_client()
            .txn(txn)
            .await
            .map_err(|e| etcd_err(&e))?;
        if !resp.succeeded() {
            // etcd3/store.go Create: the key exists → storage.NewKeyExistsError,
            // interpreted as 409 AlreadyExists (registry/generic/registry/storage_factory.go
            // → storeerr.InterpretCreateError).
            return Err(already_exists(&name));
        }
        let rev = resp
            .header()
            .map_or(0, etcd_client::ResponseHeader::revision);
        self.remember(&key, Some((rev, &stored)), rev);
        Ok((201, answered(&stored, rev)))
    }

    /// rest.FillObjectMetaSystemFields (registry/rest/meta.go): a new uid
    /// and creationTimestamp; the namespace from the URL.
    fn fill_for_create(&self, namespace: &str, obj: &mut Value) {
        let meta = meta_mut(obj);
        meta.insert("namespace".into(), json!(namespace));
        meta.insert("uid".into(), json!(random_uid()));
        meta.insert("creationTimestamp".into(), json!(now_rfc3339()));
        meta.remove("resourceVersion");
        meta.remove("deletionTimestamp");
        meta.remove("deletionGracePeriodSeconds");
        meta.remove("generation");
        meta.remove("managedFields");
    }

    /// PUT: registry/generic/registry/store.go `Update` over etcd3/store.go
    /// `GuaranteedUpdate`, as kube-apiserver runs it behind its watch
    /// cache: staging/src/k8s.io/apiserver/pkg/storage/cacher/cacher.go
    /// `GuaranteedUpdate` hands etcd3/store.go the object the cache holds
    /// as the state to start from, so an update whose resourceVersion is
    /// the cached object's costs one etcd transaction on `mod_revision`
    /// (`If(mod_revision == rev) Then(Put) Else(Get)`). A failed
    /// transaction's `Get` is the fresh state to try again with; an
    /// answer of Conflict (or a failed uid precondition) drawn from a
    /// state that may be stale is drawn again from a fresh read first
    /// (etcd3/store.go: `origStateIsCurrent`, `getCurrentState`). With
    /// nothing cached, the first state is read from etcd.
    pub async fn update(
        &self,
        namespace: &str,
        name: &str,
        body: &[u8],
        strict: bool,
    ) -> Result<(u16, Value), ApiError> {
        let mut obj = parse_lease(body, strict)?;
        // staging/src/k8s.io/apiserver/pkg/endpoints/handlers/update.go
        // (through rest.go checkName): the body's name must be the URL's.
        let body_name = meta_str(&obj, "name").to_owned();
        if body_name != name {
            return Err(bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        let body_ns = meta_str(&obj, "namespace").to_owned();
        if !body_ns.is_empty() && body_ns != namespace {
            return Err(bad_request(format!(
                "the namespace of the provided object ({body_ns}) does not match the namespace sent on the request ({namespace})"
            )));
        }
        // registry/rest/update.go defaultUpdatedObjectInfo.Preconditions:
        // a uid in the body is a precondition, checked by etcd3/store.go
        // GuaranteedUpdate against the stored object (a missing one has
        // no uid), answered 409 Conflict (storeerr.InterpretUpdateError).
        let uid_precondition = meta_str(&obj, "uid").to_owned();
        let new_rv = parse_rv(meta_str(&obj, "resourceVersion"))?;
        let key = self.lease_key(namespace, name);
        // The state to start from, and whether it was read from etcd just
        // now (`origStateIsCurrent`).
        let (mut state, mut current) = match self.cached(&key) {
            Some(c) => (Some(c), false),
            None => (
                self.get_kv(&key).await?.map(|kv| Cached {
                    revision: kv.mod_revision(),
                    bytes: kv.value().to_vec(),
                }),
                true,
            ),
        };
        loop {
            let old: Option<Value> = state
                .as_ref()
                .map(|c| serde_json::from_slice(&c.bytes).unwrap_or_else(|_| json!({})));
            let existing_uid = old
                .as_ref()
                .map(|o| meta_str(o, "uid").to_owned())
                .unwrap_or_default();
            let refused = if !uid_precondition.is_empty() && uid_precondition != existing_uid {
                Some(conflict(
                    name,
                    &format!(
                        "Precondition failed: UID in precondition: {uid_precondition}, UID in object meta: {existing_uid}"
                    ),
                ))
            } else if let Some(c) = state.as_ref() {
                // strategy.go AllowUnconditionalUpdate is false: an update
                // without a resourceVersion is 422 (store.go Update, "must
                // be specified for an update", with the resource as the
                // kind).
                if new_rv == 0 {
                    return Err(invalid(
                        "leases.coordination.k8s.io",
                        name,
                        &[field(
                            "metadata.resourceVersion",
                            "FieldValueInvalid",
                            "Invalid value: 0x0: must be specified for an update".into(),
                        )],
                    ));
                }
                // store.go Update: a stale resourceVersion is 409 Conflict.
                (new_rv != c.revision).then(|| conflict(name, OPTIMISTIC_LOCK))
            } else {
                None
            };
            if let Some(e) = refused {
                if current {
                    return Err(e);
                }
                state = self.get_kv(&key).await?.map(|kv| Cached {
                    revision: kv.mod_revision(),
                    bytes: kv.value().to_vec(),
                });
                current = true;
                continue;
            }
            let (code, stored, compare) = match (&state, old) {
                (None, _) | (_, None) => {
                    // pkg/registry/coordination/lease/strategy.go
                    // AllowCreateOnUpdate is true: a PUT of a missing
                    // Lease creates it (store.go Update,
                    // existingResourceVersion == 0), whatever
                    // resourceVersion the body carries, answered 201.
                    let mut created = obj.clone();
                    self.fill_for_create(namespace, &mut created);
                    let errs = validate(&created);
                    if !errs.is_empty() {
                        return Err(invalid("Lease.coordination.k8s.io", name, &errs));
                    }
                    if !self.namespace_exists(namespace).await? {
                        return Err(namespace_not_found(namespace));
                    }
                    (
                        201,
                        for_storage(created),
                        Compare::create_revision(key.clone(), CompareOp::Equal, 0),
                    )
                }
                (Some(c), Some(old)) => {
                    // registry/rest/update.go BeforeUpdate: system fields
                    // kept from the stored object (uid, creationTimestamp,
                    // namespace).
                    let meta = meta_mut(&mut obj);
                    meta.insert("namespace".into(), json!(namespace));
                    for keep in ["uid", "creationTimestamp"] {
                        match old.pointer(&format!("/metadata/{keep}")) {
                            Some(v) => meta.insert(keep.into(), v.clone()),
                            None => meta.remove(keep),
                        };
                    }
                    meta.remove("managedFields");
                    let errs = validate(&obj);
                    if !errs.is_empty() {
                        return Err(invalid("Lease.coordination.k8s.io", name, &errs));
                    }
                    (
                        200,
                        for_storage(obj.clone()),
                        Compare::mod_revision(key.clone(), CompareOp::Equal, c.revision),
                    )
                }
            };
            let txn = Txn::new()
                .when([compare])
                .and_then([TxnOp::put(key.clone(), stored.clone(), None)])
                .or_else([TxnOp::get(key.clone(), None)]);
            let resp = self
                .client
                .kv_client()
                .txn(txn)
                .await
                .map_err(|e| etcd_err(&e))?;
            let at = resp
                .header()
                .map_or(0, etcd_client::ResponseHeader::revision);
            if resp.succeeded() {
                self.remember(&key, Some((at, &stored)), at);
                return Ok((code, answered(&stored, at)));
            }
            // Lost a race (or started from a stale state): the Else's
            // read is the current state, and GuaranteedUpdate tries again
            // with it (then answering a stale resourceVersion with a
            // Conflict).
            let fresh = resp.op_responses().into_iter().find_map(|op| match op {
                etcd_client::TxnOpResponse::Get(g) => Some(g.kvs().first().cloned()),
                _ => None,
            });
            let fresh = fresh.flatten();
            self.remember(
                &key,
                fresh.as_ref().map(|kv| (kv.mod_revision(), kv.value())),
                fresh.as_ref().map_or(at, KeyValue::mod_revision),
            );
            state = fresh.map(|kv| Cached {
                revision: kv.mod_revision(),
                bytes: kv.value().to_vec(),
            });
            current = true;
        }
    }

    /// DELETE: store.go `Delete` with the DeleteOptions' preconditions
    /// (uid, resourceVersion: 409 Conflict when they do not hold).
    pub async fn delete(
        &self,
        namespace: &str,
        name: &str,
        body: &[u8],
    ) -> Result<(u16, Value), ApiError> {
        let opts: Value = if body.iter().all(u8::is_ascii_whitespace) {
            json!({})
        } else {
            serde_json::from_slice(body).map_err(|e| {
                bad_request(format!(
                    "the body of the request was in an unknown format: {e}"
                ))
            })?
        };
        let want_uid = opts.pointer("/preconditions/uid").and_then(Value::as_str);
        let want_rv = opts
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str)
            .map(parse_rv)
            .transpose()?;
        let key = self.lease_key(namespace, name);
        loop {
            let kv = self
                .get_kv(&key)
                .await?
                .ok_or_else(|| not_found("leases", GROUP, name))?;
            let obj = answered(kv.value(), kv.mod_revision());
            let uid = meta_str(&obj, "uid").to_owned();
            if let Some(want) = want_uid {
                if want != uid {
                    return Err(conflict(
                        name,
                        &format!("Precondition failed: UID in precondition: {want}, UID in object meta: {uid}"),
                    ));
                }
            }
            if let Some(want) = want_rv {
                if want != kv.mod_revision() {
                    return Err(conflict(
                        name,
                        &format!(
                            "Precondition failed: ResourceVersion in precondition: {want}, ResourceVersion in object meta: {}",
                            kv.mod_revision()
                        ),
                    ));
                }
            }
            let txn = Txn::new()
                .when([Compare::mod_revision(
                    key.clone(),
                    CompareOp::Equal,
                    kv.mod_revision(),
                )])
                .and_then([TxnOp::delete(key.clone(), None)]);
            let resp = self
                .client
                .kv_client()
                .txn(txn)
                .await
                .map_err(|e| etcd_err(&e))?;
            if resp.succeeded() {
                let at = resp
                    .header()
                    .map_or(0, etcd_client::ResponseHeader::revision);
                self.remember(&key, None, at);
                // store.go Delete without ReturnDeletedObject: a Status of
                // Success naming what was deleted.
                return Ok((
                    200,
                    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                        "details": {"name": name, "group": GROUP, "kind": "leases", "uid": uid}}),
                ));
            }
        }
    }

    /// LIST: etcd3/store.go `GetList`: a range read (pages of `limit`, a
    /// later page read at the first page's revision, 410 when compacted);
    /// selectors filter after reading, so a page may hold fewer than `limit`.
    pub async fn list(&self, q: &ListQuery) -> Result<Value, ApiError> {
        let prefix = self.leases_prefix(q.namespace.as_deref());
        let (revision, mut start) = match &q.continue_token {
            Some(token) => {
                let (rv, start) = decode_continue(token)?;
                (rv, format!("{prefix}{start}"))
            }
            None => (0, prefix.clone()),
        };
        let end = prefix_end(prefix.as_bytes());
        let mut items = Vec::new();
        let mut at = revision;
        let mut more = None;
        // etcd3/store.go GetList: with a limit, fetch `limit` keys, and
        // while the selectors leave the page short, fetch again, twice as
        // many each time (at most 10,000), stopping at `limit` matches.
        let mut fetch = q.limit;
        'pages: loop {
            let mut opts = GetOptions::new().with_range(end.clone());
            if at > 0 {
                opts = opts.with_revision(at);
            }
            if fetch > 0 {
                opts = opts.with_limit(i64::try_from(fetch).unwrap_or(i64::MAX));
            }
            // etcd's Go client (clientv3, which kube-apiserver uses)
            // takes replies of any size (MaxCallRecvMsgSize defaults to
            // math.MaxInt32); etcd-client's default of 4 MiB refused a
            // selector's fetch of 10,000 Leases (6.8 MB) with 503.
            let resp = match self
                .client
                .kv_client()
                .max_decoding_message_size(usize::MAX)
                .get(start.clone(), Some(opts))
                .await
            {
                Ok(r) => r,
                Err(e) if e.to_string().contains("compacted") => {
                    return Err(expired("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter."));
                }
                Err(e) => return Err(etcd_err(&e)),
            };
            if at == 0 {
                at = resp
                    .header()
                    .map_or(0, etcd_client::ResponseHeader::revision);
            }
            let kvs = resp.kvs();
            for (i, kv) in kvs.iter().enumerate() {
                let obj = answered(kv.value(), kv.mod_revision());
                if q.labels.matches(&obj) && q.fields.matches(&obj) {
                    items.push(obj);
                }
                if q.limit > 0 && items.len() >= q.limit {
                    if i + 1 < kvs.len() || resp.more() {
                        let rel = String::from_utf8_lossy(&kv.key()[prefix.len()..]).into_owned();
                        more = Some(encode_continue(at, &format!("{rel}\u{0}")));
                    }
                    break 'pages;
                }
            }
            match (resp.more(), kvs.last()) {
                (true, Some(last)) => {
                    let mut next = last.key().to_vec();
                    next.push(0);
                    start = String::from_utf8_lossy(&next).into_owned();
                    fetch = (fetch * 2).min(10_000);
                }
                _ => break,
            }
        }
        let mut meta = json!({"resourceVersion": at.to_string()});
        if let Some(token) = more {
            meta["continue"] = json!(token);
        }
        Ok(
            json!({"kind": "LeaseList", "apiVersion": "coordination.k8s.io/v1", "metadata": meta, "items": items}),
        )
    }

    /// WATCH: staging/src/k8s.io/apiserver/pkg/storage/etcd3/watcher.go: an
    /// etcd watch from `resourceVersion + 1` (with no resourceVersion, or
    /// 0, first an ADDED event for every object that exists); a put of a
    /// new key is ADDED, of an existing one MODIFIED, a delete DELETED; an
    /// object that stops matching the selectors is DELETED, one that
    /// starts matching ADDED (watcher.go `transform`); a compacted start
    /// revision ends the watch with an ERROR event carrying 410 Expired
    /// (watcher.go, `interpretWatchError` of `ErrCompacted`).
    pub async fn watch(
        &self,
        q: ListQuery,
        resource_version: &str,
        timeout: Duration,
        tx: mpsc::Sender<Vec<u8>>,
    ) -> Result<(), ApiError> {
        let prefix = self.leases_prefix(q.namespace.as_deref());
        let matches = |obj: &Value| q.labels.matches(obj) && q.fields.matches(obj);
        let rv = parse_rv(resource_version)?;
        let start = if rv == 0 {
            let all = self
                .list(&ListQuery {
                    namespace: q.namespace.clone(),
                    labels: q.labels.clone(),
                    fields: q.fields.clone(),
                    limit: 0,
                    continue_token: None,
                })
                .await?;
            let at = all
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .and_then(|s| s.parse::<i64>().ok())
                .unwrap_or(0);
            for obj in all
                .get("items")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if send(&tx, "ADDED", obj).await.is_err() {
                    return Ok(());
                }
            }
            at + 1
        } else {
            rv + 1
        };
        let mut stream = self
            .watch_client
            .watch_client()
            .watch(
                prefix.clone(),
                Some(
                    WatchOptions::new()
                        .with_prefix()
                        .with_start_revision(start)
                        .with_prev_key(),
                ),
            )
            .await
            .map_err(|e| etcd_err(&e))?;
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        loop {
            let next = tokio::select! {
                () = &mut deadline => return Ok(()),
                () = tx.closed() => return Ok(()),
                next = stream.message() => next,
            };
            let resp = match next {
                Ok(Some(resp)) => resp,
                Ok(None) => return Ok(()),
                Err(e) => {
                    let status = if e.to_string().contains("compacted") {
                        expired(format!("too old resource version: {rv}"))
                    } else {
                        unavailable(format!("etcd watch: {e}"))
                    };
                    let _ = send(&tx, "ERROR", &status.body).await;
                    return Ok(());
                }
            };
            if resp.compact_revision() > 0 {
                let status = expired(format!(
                    "too old resource version: {rv} ({})",
                    resp.compact_revision()
                ));
                let _ = send(&tx, "ERROR", &status.body).await;
                return Ok(());
            }
            if resp.canceled() {
                let status = expired(format!("the watch was canceled: {}", resp.cancel_reason()));
                let _ = send(&tx, "ERROR", &status.body).await;
                return Ok(());
            }
            for event in resp.events() {
                let Some(kv) = event.kv() else { continue };
                let prev = event
                    .prev_kv()
                    .map(|p| answered(p.value(), p.mod_revision()))
                    .filter(|o| matches(o));
                let (kind, obj) = match event.event_type() {
                    EventType::Delete => match prev {
                        Some(mut p) => {
                            meta_mut(&mut p).insert(
                                "resourceVersion".into(),
                                json!(kv.mod_revision().to_string()),
                            );
                            ("DELETED", p)
                        }
                        None => continue,
                    },
                    EventType::Put => {
                        let cur = answered(kv.value(), kv.mod_revision());
                        match (prev.is_some(), matches(&cur)) {
                            (true, true) => ("MODIFIED", cur),
                            (false, true) => ("ADDED", cur),
                            (true, false) => ("DELETED", cur),
                            (false, false) => continue,
                        }
                    }
                };
                if send(&tx, kind, &obj).await.is_err() {
                    return Ok(());
                }
            }
        }
    }
}

async fn send(tx: &mpsc::Sender<Vec<u8>>, kind: &str, obj: &Value) -> Result<(), ()> {
    let mut line = serde_json::to_vec(&json!({"type": kind, "object": obj})).unwrap_or_default();
    line.push(b'\n');
    tx.send(line).await.map_err(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_and_names() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
        assert!(is_dns1123_subdomain("a.b-c"));
        assert!(!is_dns1123_subdomain("A"));
        assert!(!is_dns1123_subdomain("-a"));
        assert!(is_qualified_name("tenure.dev/record"));
        assert!(!is_qualified_name("tenure.dev/"));
        assert!(is_micro_time("2024-01-02T03:04:05.123456Z"));
        assert!(!is_micro_time("yesterday"));
        let (rv, start) = decode_continue(&encode_continue(7, "b\u{0}")).unwrap();
        assert_eq!((rv, start.as_str()), (7, "b\u{0}"));
    }
}
