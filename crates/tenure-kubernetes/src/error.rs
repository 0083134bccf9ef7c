//! Typed errors of the Kubernetes store, each naming the server, the
//! problem and the fix, and their mapping onto [`StoreError`]. No message
//! carries a bearer token: kube's errors are reduced to their status and
//! message, and the token lives only in the client's auth layer.

use std::time::Duration;

use tenure::error::{BackendError, BoxError};
use tenure::StoreError;

/// The Role (and RoleBinding) tenure's service account needs in
/// `namespace`: exactly the verbs the store uses on Leases.
pub fn role_needed(namespace: &str) -> String {
    format!(
        "apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: tenure
  namespace: {namespace}
rules:
- apiGroups: [\"coordination.k8s.io\"]
  resources: [\"leases\"]
  verbs: [\"get\", \"list\", \"watch\", \"create\", \"update\"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: tenure
  namespace: {namespace}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: tenure
subjects:
- kind: ServiceAccount
  name: YOUR-SERVICE-ACCOUNT
  namespace: {namespace}"
    )
}

/// A failure of the Kubernetes store.
///
/// [`KubernetesStore::connect`](crate::KubernetesStore::connect) returns it
/// directly; the [`LeaseStore`](tenure::LeaseStore) operations return it
/// converted into a [`StoreError`]: transient failures become
/// [`StoreError::Unavailable`], everything an operator must fix becomes
/// [`StoreError::Misconfigured`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KubernetesStoreError {
    /// The URL or an option is malformed.
    #[error("invalid Kubernetes store URL: {reason}")]
    InvalidUrl {
        /// What is wrong.
        reason: String,
    },
    /// No usable configuration: no kubeconfig and not in a pod, a context
    /// that does not exist, a kubeconfig that cannot be read.
    #[error("no Kubernetes configuration: {detail}; set KUBECONFIG or ?kubeconfig=PATH (and ?context=NAME), or run in a pod with a service account")]
    Config {
        /// What kube's loader reported.
        detail: String,
    },
    /// The API server refused the credentials (401).
    #[error("the Kubernetes API server at {server} refused the credentials (401 Unauthorized: {message}): the token is wrong or expired; check the kubeconfig's user for this context, or the pod's service account token")]
    Unauthorized {
        /// The server's URL.
        server: String,
        /// The server's message.
        message: String,
    },
    /// The credentials lack a right on Leases (403). The message prints
    /// the Role the store needs.
    #[error("the Kubernetes API server at {server} forbids {verb} on leases.coordination.k8s.io in namespace {namespace:?} (403 Forbidden: {message}); the store needs the verbs get, list, watch, create and update on leases in that namespace, for example:\n{role}")]
    Forbidden {
        /// The server's URL.
        server: String,
        /// The namespace.
        namespace: String,
        /// The verb refused.
        verb: &'static str,
        /// The server's message.
        message: String,
        /// The Role and RoleBinding to apply.
        role: String,
    },
    /// The namespace does not exist.
    #[error("namespace {namespace:?} does not exist on the Kubernetes API server at {server}: create it (`kubectl create namespace {namespace}`) or name another in k8s://NAMESPACE")]
    NamespaceMissing {
        /// The server's URL.
        server: String,
        /// The namespace.
        namespace: String,
    },
    /// The server refused the Lease tenure wrote as invalid (422, or 400):
    /// an admission policy, or a server that validates differently.
    #[error("the Kubernetes API server at {server} refused the Lease for group {group:?} ({code} {reason}: {message}); an admission policy or webhook may restrict Leases in this namespace")]
    Refused {
        /// The server's URL.
        server: String,
        /// The group.
        group: String,
        /// The HTTP status.
        code: u16,
        /// The Status reason.
        reason: String,
        /// The server's message.
        message: String,
    },
    /// The server answered with an error that may pass (429, 5xx) after
    /// the retries within the timeout, or an unexpected one.
    #[error(
        "the Kubernetes API server at {server} answered {what} with {code} {reason}: {message}"
    )]
    Api {
        /// The server's URL.
        server: String,
        /// The operation.
        what: &'static str,
        /// The HTTP status.
        code: u16,
        /// The Status reason.
        reason: String,
        /// The server's message.
        message: String,
    },
    /// The server could not be reached, the connection broke, or its
    /// answer could not be read.
    #[error("the Kubernetes API server at {server} is unreachable or answered what cannot be read during {what} ({detail})")]
    Unreachable {
        /// The server's URL.
        server: String,
        /// The operation.
        what: &'static str,
        /// What failed (kube's error, which carries no token).
        detail: String,
    },
    /// No answer in time.
    #[error("the Kubernetes API server at {server} did not answer {what} within {after:?}")]
    Timeout {
        /// The server's URL.
        server: String,
        /// The operation.
        what: &'static str,
        /// The bound that ran out.
        after: Duration,
    },
}

impl BackendError for KubernetesStoreError {
    fn is_transient(&self) -> bool {
        matches!(
            self,
            KubernetesStoreError::Api { .. }
                | KubernetesStoreError::Unreachable { .. }
                | KubernetesStoreError::Timeout { .. }
        )
    }

    fn timed_out(&self) -> Option<Duration> {
        match self {
            KubernetesStoreError::Timeout { after, .. } => Some(*after),
            _ => None,
        }
    }

    fn into_source(self) -> Option<BoxError> {
        None
    }
}

impl From<KubernetesStoreError> for StoreError {
    fn from(e: KubernetesStoreError) -> StoreError {
        StoreError::from_backend(e)
    }
}

/// What a failed request says, from kube's error: the status of an API
/// error, or kube's text for the rest (connection, TLS, decoding), which
/// never carries the Authorization header.
pub(crate) enum Failure {
    /// An API error: code, reason, message, and the kind in its details.
    Status {
        code: u16,
        reason: String,
        message: String,
    },
    /// No usable answer.
    Transport(String),
}

impl Failure {
    pub(crate) fn of(e: &kube::Error) -> Failure {
        match e {
            kube::Error::Api(status) => Failure::Status {
                code: status.code,
                reason: status.reason.clone(),
                message: status.message.clone(),
            },
            other => Failure::Transport(tenure::error::error_chain(other)),
        }
    }

    /// Whether a retry within the operation's timeout may succeed and is
    /// safe. 429 (API priority and fairness refused the request before it
    /// ran) always; 503 (the server starting, stopping, or failing to reach
    /// etcd) only for a read: a write answered 503 may have been applied
    /// (etcd can commit what it did not confirm in time), and its retry
    /// would then conflict with itself, so it is reported as it is.
    pub(crate) fn retry(&self, write: bool) -> bool {
        match self {
            Failure::Status { code: 429, .. } => true,
            Failure::Status { code: 503, .. } => !write,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16) -> Failure {
        Failure::Status {
            code,
            reason: String::new(),
            message: String::new(),
        }
    }

    #[test]
    fn only_answers_that_ran_nothing_are_retried() {
        assert!(status(429).retry(true) && status(429).retry(false));
        assert!(status(503).retry(false), "a read answered 503");
        assert!(
            !status(503).retry(true),
            "a write answered 503 may have applied"
        );
        for code in [400, 401, 403, 404, 409, 410, 422, 500, 504] {
            assert!(!status(code).retry(false), "{code}");
        }
        assert!(!Failure::Transport("reset".into()).retry(false));
    }

    #[test]
    fn the_role_names_exactly_the_verbs() {
        let role = role_needed("billing");
        assert!(
            role.contains(r#"verbs: ["get", "list", "watch", "create", "update"]"#),
            "{role}"
        );
        assert!(
            role.contains("namespace: billing")
                && !role.contains("patch")
                && !role.contains("delete")
        );
    }
}
