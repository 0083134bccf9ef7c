//! Connection options, parsed from a `k8s://NAMESPACE` URL or built by hand.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::error::KubernetesStoreError;
use crate::layout;

/// The default bound on connecting and on each request (with its retries
/// of 429 and 503 answers).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// The default bound on one store handle's requests in flight at once (as
/// HTTP/2 streams of one connection where the server speaks HTTP/2).
pub const DEFAULT_IN_FLIGHT: usize = 64;

/// The options a `k8s://` URL takes, in the order its error lists them.
const OPTIONS: &[&str] = &["context", "kubeconfig", "label", "timeout", "in-flight"];

/// Where and how to reach the Kubernetes API server, and which Leases are
/// this store's.
///
/// ```text
/// k8s://NAMESPACE[?context=NAME&kubeconfig=PATH&label=KEY=VALUE&timeout=5s&in-flight=64]
/// ```
///
/// | option | meaning | default |
/// |---|---|---|
/// | `context` | the kubeconfig context to use | the current context |
/// | `kubeconfig` | the kubeconfig file | `kube::Config::infer()`: `$KUBECONFIG` or `~/.kube/config`, else the pod's service account |
/// | `label` | one more label (`key=value`) on every Lease this store writes, and in the selector of its lists and watches: separates several applications' Leases in one namespace | none |
/// | `timeout` | bound on connecting and on each request, retries of 429 and 503 included | `5s` |
/// | `in-flight` | most requests of one store handle at once | `64` |
///
/// Every Lease also carries the label `app.kubernetes.io/managed-by=tenure`.
///
/// ```
/// use tenure_kubernetes::KubernetesOptions;
/// let o = KubernetesOptions::from_url("k8s://billing?context=prod&label=app=billing")?;
/// assert_eq!(o.namespace(), "billing");
/// assert_eq!(o.describe(), "k8s://billing?context=prod&label=app=billing");
/// # Ok::<(), tenure_kubernetes::KubernetesStoreError>(())
/// ```
#[derive(Clone)]
pub struct KubernetesOptions {
    pub(crate) namespace: String,
    pub(crate) context: Option<String>,
    pub(crate) kubeconfig: Option<PathBuf>,
    pub(crate) label: Option<(String, String)>,
    pub(crate) timeout: Duration,
    pub(crate) in_flight: usize,
    pub(crate) config: Option<kube::Config>,
}

impl fmt::Debug for KubernetesOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Not the config: it may hold a bearer token.
        f.debug_struct("KubernetesOptions")
            .field("namespace", &self.namespace)
            .field("context", &self.context)
            .field("kubeconfig", &self.kubeconfig)
            .field("label", &self.label)
            .field("timeout", &self.timeout)
            .field("in_flight", &self.in_flight)
            .field(
                "config",
                &self.config.as_ref().map(|c| c.cluster_url.to_string()),
            )
            .finish()
    }
}

fn bad(reason: impl ToString) -> KubernetesStoreError {
    KubernetesStoreError::InvalidUrl {
        reason: reason.to_string(),
    }
}

impl KubernetesOptions {
    /// Options for the Leases of `namespace`, connecting as
    /// `kube::Config::infer()` finds (the defaults of the table above).
    pub fn new(namespace: impl Into<String>) -> Result<Self, KubernetesStoreError> {
        let namespace = namespace.into();
        if !layout::is_dns1123_label(&namespace) {
            return Err(bad(format!(
                "{namespace:?} is no namespace name: lowercase letters, digits and '-', at most 63, starting and ending with a letter or digit"
            )));
        }
        Ok(KubernetesOptions {
            namespace,
            context: None,
            kubeconfig: None,
            label: None,
            timeout: DEFAULT_TIMEOUT,
            in_flight: DEFAULT_IN_FLIGHT,
            config: None,
        })
    }

    /// Parses a `k8s://NAMESPACE?…` URL (see the type's docs). Errors name
    /// the part that is wrong.
    pub fn from_url(url: &str) -> Result<Self, KubernetesStoreError> {
        let parts =
            tenure::store::url::split_store_url(url, &["k8s", "kubernetes"], "k8s://NAMESPACE")
                .map_err(bad)?;
        if parts.userinfo.is_some() {
            return Err(bad(
                "credentials are not allowed in the URL: they come from the kubeconfig (?context=..) or the pod's service account",
            ));
        }
        if !matches!(parts.path, "" | "/") {
            return Err(bad("a path is not allowed: write k8s://NAMESPACE"));
        }
        if parts.hosts.is_empty() {
            return Err(bad("no namespace: write k8s://NAMESPACE"));
        }
        let mut options = KubernetesOptions::new(parts.hosts)?;
        for (name, value) in tenure::store::url::query_options(parts.query, OPTIONS).map_err(bad)? {
            match name.as_str() {
                "context" if !value.is_empty() => options.context = Some(value),
                "kubeconfig" if !value.is_empty() => options.kubeconfig = Some(value.into()),
                "label" => {
                    let Some((k, v)) = value.split_once('=') else {
                        return Err(bad(format!("label {value:?}: write label=KEY=VALUE")));
                    };
                    options = options.with_label(k, v)?;
                }
                "timeout" => {
                    options.timeout =
                        tenure::store::url::parse_timeout(&name, &value).map_err(bad)?;
                }
                "in-flight" => {
                    options.in_flight = value
                        .parse::<usize>()
                        .ok()
                        .filter(|n| (1..=10_000).contains(n))
                        .ok_or_else(|| {
                            bad(format!("in-flight {value:?}: a number from 1 to 10000"))
                        })?;
                }
                "context" | "kubeconfig" => return Err(bad(format!("{name} is empty"))),
                other => return Err(bad(tenure::store::url::unknown_option(other, OPTIONS))),
            }
        }
        Ok(options)
    }

    /// Uses the kubeconfig context `context`.
    pub fn with_context(mut self, context: impl Into<String>) -> Self {
        self.context = Some(context.into());
        self
    }

    /// Reads the kubeconfig file at `path` (instead of `$KUBECONFIG` or
    /// `~/.kube/config`).
    pub fn with_kubeconfig(mut self, path: impl Into<PathBuf>) -> Self {
        self.kubeconfig = Some(path.into());
        self
    }

    /// Connects with this `kube::Config` as it is (server, TLS,
    /// credentials), ignoring `context` and `kubeconfig`.
    pub fn with_config(mut self, config: kube::Config) -> Self {
        self.config = Some(config);
        self
    }

    /// Adds the label `key=value` to every Lease written, and to the
    /// selector of lists and watches.
    pub fn with_label(mut self, key: &str, value: &str) -> Result<Self, KubernetesStoreError> {
        if !layout::is_qualified_name(key) || key == layout::MANAGED_BY_LABEL {
            return Err(bad(format!(
                "label key {key:?}: a qualified name ([prefix/]name, name of alphanumerics, '-', '_', '.'), not {}",
                layout::MANAGED_BY_LABEL
            )));
        }
        if !layout::is_label_value(value) {
            return Err(bad(format!(
                "label value {value:?}: at most 63 alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
            )));
        }
        self.label = Some((key.to_owned(), value.to_owned()));
        Ok(self)
    }

    /// Replaces the bound on connecting and on each request.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Replaces the bound on one handle's requests in flight at once.
    pub fn with_in_flight(mut self, in_flight: usize) -> Self {
        self.in_flight = in_flight.max(1);
        self
    }

    /// The namespace of the Leases.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The bound on connecting and on each request.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The label selector of this store's Leases.
    pub fn selector(&self) -> String {
        let mut s = format!("{}={}", layout::MANAGED_BY_LABEL, layout::MANAGED_BY_VALUE);
        if let Some((k, v)) = &self.label {
            s.push_str(&format!(",{k}={v}"));
        }
        s
    }

    /// The URL form, without secrets (there are none in it):
    /// what [`describe`](tenure::LeaseView::describe) shows.
    pub fn describe(&self) -> String {
        let mut q = Vec::new();
        if let Some(c) = &self.context {
            q.push(format!("context={c}"));
        }
        if let Some(k) = &self.kubeconfig {
            q.push(format!("kubeconfig={}", k.display()));
        }
        if let Some((k, v)) = &self.label {
            q.push(format!("label={k}={v}"));
        }
        if self.timeout != DEFAULT_TIMEOUT {
            q.push(format!("timeout={}", humantime_ms(self.timeout)));
        }
        if self.in_flight != DEFAULT_IN_FLIGHT {
            q.push(format!("in-flight={}", self.in_flight));
        }
        if q.is_empty() {
            format!("k8s://{}", self.namespace)
        } else {
            format!("k8s://{}?{}", self.namespace, q.join("&"))
        }
    }
}

fn humantime_ms(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_forms_users_write() {
        let o = KubernetesOptions::from_url("k8s://default").unwrap();
        assert_eq!((o.namespace(), o.timeout), ("default", DEFAULT_TIMEOUT));
        assert_eq!(o.selector(), "app.kubernetes.io/managed-by=tenure");
        let o = KubernetesOptions::from_url(
            "kubernetes://jobs/?context=kind-kind&kubeconfig=/k/c&label=team=a.b&timeout=250ms&in-flight=8",
        )
        .unwrap();
        assert_eq!(o.context.as_deref(), Some("kind-kind"));
        assert_eq!(o.kubeconfig.as_deref(), Some(std::path::Path::new("/k/c")));
        assert_eq!(o.selector(), "app.kubernetes.io/managed-by=tenure,team=a.b");
        assert_eq!((o.timeout, o.in_flight), (Duration::from_millis(250), 8));
    }

    #[test]
    fn refusals_name_the_part() {
        tenure_testkit::assert_url_refusals(
            |u: &str| {
                KubernetesOptions::from_url(u)
                    .map(drop)
                    .map_err(|e| e.to_string())
            },
            &[
                ("k8s://u:pw-secret@ns", "credentials"),
                ("k8s://Not_A_Namespace", "namespace"),
                ("k8s://ns/path", "path"),
                ("k8s://ns?bogus=1", "bogus"),
                ("k8s://ns?label=novalue", "label"),
                ("k8s://ns?label=app.kubernetes.io/managed-by=x", "label key"),
                ("k8s://ns?label=k=bad%20value", "label value"),
                ("k8s://ns?in-flight=0", "in-flight"),
                ("k8s://ns?timeout=soon", "timeout"),
                ("postgres://ns", "k8s://"),
            ],
        );
    }
}
