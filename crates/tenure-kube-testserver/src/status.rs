//! The `Status` bodies kube-apiserver answers errors with.
//!
//! Follows staging/src/k8s.io/apimachinery/pkg/api/errors/errors.go (the
//! messages, reasons and codes of `NewNotFound`, `NewAlreadyExists`,
//! `NewConflict`, `NewInvalid`, `NewBadRequest`, `NewResourceExpired`,
//! `NewUnauthorized`, `NewForbidden`, `NewMethodNotSupported`).

use serde_json::{json, Value};

/// The group whose objects this server keeps.
pub const GROUP: &str = "coordination.k8s.io";

/// An error answer: the HTTP code and its `Status` body.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// The HTTP status code (also the body's `code`).
    pub code: u16,
    /// The `Status` object.
    pub body: Value,
}

fn status(code: u16, reason: &str, message: String, details: Option<Value>) -> ApiError {
    let mut body = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    });
    if let (Some(details), Some(map)) = (details, body.as_object_mut()) {
        map.insert("details".into(), details);
    }
    ApiError { code, body }
}

/// `"resource.group"`, as the errors name a resource (`leases.coordination.k8s.io`).
fn qualified(resource: &str, group: &str) -> String {
    if group.is_empty() {
        resource.to_owned()
    } else {
        format!("{resource}.{group}")
    }
}

/// errors.go `NewNotFound`: 404 NotFound.
pub fn not_found(resource: &str, group: &str, name: &str) -> ApiError {
    status(
        404,
        "NotFound",
        format!("{} \"{name}\" not found", qualified(resource, group)),
        Some(json!({"name": name, "group": group, "kind": resource})),
    )
}

/// errors.go `NewAlreadyExists`: 409 AlreadyExists.
pub fn already_exists(name: &str) -> ApiError {
    status(
        409,
        "AlreadyExists",
        format!("{} \"{name}\" already exists", qualified("leases", GROUP)),
        Some(json!({"name": name, "group": GROUP, "kind": "leases"})),
    )
}

/// errors.go `NewConflict`: 409 Conflict, "Operation cannot be fulfilled".
pub fn conflict(name: &str, why: &str) -> ApiError {
    status(
        409,
        "Conflict",
        format!(
            "Operation cannot be fulfilled on {} \"{name}\": {why}",
            qualified("leases", GROUP)
        ),
        Some(json!({"name": name, "group": GROUP, "kind": "leases"})),
    )
}

/// The message of an optimistic-lock conflict
/// (registry/generic/registry/store.go `OptimisticLockErrorMsg`).
pub const OPTIMISTIC_LOCK: &str =
    "the object has been modified; please apply your changes to the latest version and try again";

/// One field's complaint in a 422 (apimachinery/pkg/util/validation/field/errors.go).
pub struct FieldError {
    /// `spec.leaseDurationSeconds`.
    pub field: String,
    /// `FieldValueInvalid`, `FieldValueRequired`, …
    pub kind: &'static str,
    /// The whole message after the field: `Invalid value: 0: must be greater than 0`.
    pub detail: String,
}

/// errors.go `NewInvalid`: 422 Invalid, the causes listed.
pub fn invalid(kind: &str, name: &str, errors: &[FieldError]) -> ApiError {
    let causes: Vec<Value> = errors
        .iter()
        .map(|e| json!({"reason": e.kind, "message": e.detail, "field": e.field}))
        .collect();
    let joined = errors
        .iter()
        .map(|e| format!("{}: {}", e.field, e.detail))
        .collect::<Vec<_>>()
        .join(", ");
    let message = if errors.len() == 1 {
        format!("{kind} \"{name}\" is invalid: {joined}")
    } else {
        format!("{kind} \"{name}\" is invalid: [{joined}]")
    };
    status(
        422,
        "Invalid",
        message,
        Some(json!({"name": name, "group": GROUP, "kind": kind, "causes": causes})),
    )
}

/// errors.go `NewBadRequest`: 400 BadRequest.
pub fn bad_request(message: impl Into<String>) -> ApiError {
    status(400, "BadRequest", message.into(), None)
}

/// errors.go `NewResourceExpired`: 410 Expired (a compacted watch or list).
pub fn expired(message: impl Into<String>) -> ApiError {
    status(410, "Expired", message.into(), None)
}

/// errors.go `NewUnauthorized`: 401 Unauthorized.
pub fn unauthorized() -> ApiError {
    status(401, "Unauthorized", "Unauthorized".into(), None)
}

/// errors.go `NewForbidden`, with the message the authorization filter
/// writes (staging/src/k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/errors.go
/// `forbiddenMessage`).
pub fn forbidden(user: &str, verb: &str, resource: &str, group: &str, namespace: &str) -> ApiError {
    let scope = if namespace.is_empty() {
        "at the cluster scope".to_owned()
    } else {
        format!("in the namespace \"{namespace}\"")
    };
    status(
        403,
        "Forbidden",
        format!(
            "{} is forbidden: User \"{user}\" cannot {verb} resource \"{resource}\" in API group \"{group}\" {scope}",
            qualified(resource, group)
        ),
        Some(json!({"group": group, "kind": resource})),
    )
}

/// errors.go `NewMethodNotSupported`: 405 MethodNotAllowed.
pub fn method_not_supported(action: &str) -> ApiError {
    status(
        405,
        "MethodNotAllowed",
        format!("{action} is not supported on resources of kind \"leases.coordination.k8s.io\" by this test server"),
        None,
    )
}

/// errors.go `NewInternalError`: 500 InternalError.
pub fn internal(message: impl Into<String>) -> ApiError {
    status(500, "InternalError", message.into(), None)
}

/// A 503 when etcd fails (registry/generic/registry/store.go hands storage
/// errors to `storeerr.Interpret*Error`; an unavailable etcd is a 5xx).
pub fn unavailable(message: impl Into<String>) -> ApiError {
    status(503, "ServiceUnavailable", message.into(), None)
}

/// errors.go `NewNotFound` for a namespace, as the NamespaceLifecycle
/// admission plugin refuses a create in a namespace that does not exist
/// (plugin/pkg/admission/namespace/lifecycle/admission.go).
pub fn namespace_not_found(namespace: &str) -> ApiError {
    not_found("namespaces", "", namespace)
}
