//! [`KubernetesStore`]: the [`LeaseStore`] over Lease objects.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{ListParams, PostParams};
use kube::Api;
use tenure::store::concurrent::InFlight;
use tenure::store::Running;
use tenure::store::{CasOutcome, ChangeFeed, FeedsOff, Listed, StoreFeed};
use tenure::{
    EngineSlot, GroupName, LeaseRecord, LeaseStore, LeaseView, StoreError, Version, Versioned,
};

use crate::error::{role_needed, Failure, KubernetesStoreError};
use crate::layout::{self, Known};
use crate::options::KubernetesOptions;

/// The operations one batch call takes (see
/// [`Running::batch_size`]): requests go out together, bounded by
/// the handle's in-flight limit, so a large batch only queues.
const BATCH_SIZE: usize = 2048;

/// Items per page of a list.
pub(crate) const PAGE: u32 = 500;

/// How long per-group feeds stay off after the server refused a watch.
const FEED_RETRY_AFTER: Duration = Duration::from_secs(60);

/// A lease store on `coordination.k8s.io/v1` Lease objects in one
/// namespace. Clones share one HTTP client (one HTTP/2 connection where
/// the server speaks HTTP/2) and the engine that runs every group elected
/// through them.
///
/// See the [crate docs](crate) for the object layout.
#[derive(Clone)]
pub struct KubernetesStore {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) api: Api<Lease>,
    pub(crate) options: KubernetesOptions,
    pub(crate) server: String,
    known: Mutex<HashMap<GroupName, Known>>,
    in_flight: InFlight,
    engine: EngineSlot,
    feeds_off: FeedsOff,
}

impl fmt::Debug for KubernetesStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Not the client: its auth layer holds the token.
        f.debug_struct("KubernetesStore")
            .field("server", &self.inner.server)
            .field("options", &self.inner.options)
            .finish()
    }
}

/// A request's failure after its retries.
pub(crate) enum CallError {
    Failed(Failure),
    TimedOut,
}

async fn load_config(options: &KubernetesOptions) -> Result<kube::Config, KubernetesStoreError> {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let cfg = |e: &dyn std::error::Error| KubernetesStoreError::Config {
        detail: tenure::error::error_chain(e),
    };
    if let Some(config) = &options.config {
        return Ok(config.clone());
    }
    let kco = KubeConfigOptions {
        context: options.context.clone(),
        ..KubeConfigOptions::default()
    };
    match &options.kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path).map_err(|e| KubernetesStoreError::Config {
                detail: format!(
                    "reading {}: {}",
                    path.display(),
                    tenure::error::error_chain(&e)
                ),
            })?;
            kube::Config::from_custom_kubeconfig(kc, &kco)
                .await
                .map_err(|e| cfg(&e))
        }
        None if options.context.is_some() => kube::Config::from_kubeconfig(&kco)
            .await
            .map_err(|e| cfg(&e)),
        None => kube::Config::infer().await.map_err(|e| cfg(&e)),
    }
}

/// A kube client that speaks HTTP/2 where the server offers it (ALPN), so
/// that many groups' requests share one connection. kube 2.0's own client
/// speaks HTTP/1.1 only (one connection per request in flight); with an
/// HTTP proxy configured, that client is used as it is.
fn client(config: &kube::Config) -> Result<kube::Client, KubernetesStoreError> {
    use kube::client::ConfigExt as _;
    let server = config.cluster_url.to_string();
    let bad = |e: &dyn std::error::Error| KubernetesStoreError::Config {
        detail: format!(
            "the configuration for {server}: {}",
            tenure::error::error_chain(e)
        ),
    };
    if config.proxy_url.is_some() {
        return kube::Client::try_from(config.clone()).map_err(|e| bad(&e));
    }
    let mut tls = config.rustls_client_config().map_err(|e| bad(&e))?;
    tls.alpn_protocols.clear();
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(config.connect_timeout);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(http);
    let hyper = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .timer(hyper_util::rt::TokioTimer::new())
        // A silent connection is found by pings, not by the next request's
        // timeout alone.
        .http2_keep_alive_interval(Some(Duration::from_secs(10)))
        .http2_keep_alive_timeout(Duration::from_secs(5))
        .build(https);
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer().map_err(|e| bad(&e))?)
        .layer(config.extra_headers_layer().map_err(|e| bad(&e))?)
        .map_err(tower::BoxError::from)
        .service(hyper);
    Ok(kube::Client::new(service, config.default_namespace.clone()))
}

impl KubernetesStore {
    /// Connects as `url` says (`k8s://NAMESPACE?…`, see
    /// [`KubernetesOptions`]) and checks that tenure can list Leases there:
    /// server, TLS and credentials.
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), tenure_kubernetes::KubernetesStoreError> {
    /// let store = tenure_kubernetes::KubernetesStore::connect("k8s://default").await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect(url: &str) -> Result<KubernetesStore, KubernetesStoreError> {
        KubernetesStore::connect_with(KubernetesOptions::from_url(url)?).await
    }

    /// Connects with options already built.
    pub async fn connect_with(
        options: KubernetesOptions,
    ) -> Result<KubernetesStore, KubernetesStoreError> {
        let config = load_config(&options).await?;
        let server = config
            .cluster_url
            .to_string()
            .trim_end_matches('/')
            .to_owned();
        let client = client(&config)?;
        KubernetesStore::open(client, server, options).await
    }

    /// Uses a kube client the service already has (its own configuration
    /// and middleware: an operator's client, say), with `options` for the
    /// namespace, the label, the timeout and the requests in flight; the
    /// options' kubeconfig, context and config are not read. Checks, as
    /// [`connect`](Self::connect) does, that tenure can list Leases in the
    /// namespace.
    ///
    /// The client decides how requests travel: kube's own client speaks
    /// HTTP/1.1 only, one connection per request in flight, where
    /// [`connect_with`](Self::connect_with) builds one that multiplexes
    /// requests over HTTP/2.
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
    /// use tenure_kubernetes::{KubernetesOptions, KubernetesStore};
    /// let client = kube::Client::try_default().await?;
    /// let store = KubernetesStore::with_client(client, KubernetesOptions::new("billing")?).await?;
    /// # Ok(()) }
    /// ```
    pub async fn with_client(
        client: kube::Client,
        options: KubernetesOptions,
    ) -> Result<KubernetesStore, KubernetesStoreError> {
        // Errors read "the API server at …": a given client does not tell
        // its URL.
        let server = "the given kube::Client's server".to_owned();
        KubernetesStore::open(client, server, options).await
    }

    async fn open(
        client: kube::Client,
        server: String,
        options: KubernetesOptions,
    ) -> Result<KubernetesStore, KubernetesStoreError> {
        let api = Api::namespaced(client, &options.namespace);
        let store = KubernetesStore {
            inner: Arc::new(Inner {
                api,
                server,
                in_flight: InFlight::new(options.in_flight),
                options,
                known: Mutex::new(HashMap::new()),
                engine: EngineSlot::new(),
                feeds_off: FeedsOff::default(),
            }),
        };
        // One list proves the server, TLS, the credentials and the right
        // to list Leases in the namespace.
        let lp = ListParams::default()
            .labels(&store.inner.options.selector())
            .limit(1);
        store
            .inner
            .call("connect", || store.inner.api.list(&lp))
            .await
            .map_err(|e| store.inner.error("connect", "list", None, e))?;
        Ok(store)
    }

    /// The options in use.
    pub fn options(&self) -> &KubernetesOptions {
        &self.inner.options
    }

    /// The API server's URL (or, for a store made
    /// [`with_client`](Self::with_client), words saying the client was
    /// given).
    pub fn server(&self) -> &str {
        &self.inner.server
    }
}

impl Inner {
    /// Runs a request, retrying 429 answers (and 503 for reads, whose
    /// `what` is not a write: see [`Failure::retry`]) with back-off (50 ms,
    /// doubling, at most 1 s) within the operation timeout.
    pub(crate) async fn call<T, F, Fut>(&self, what: &'static str, f: F) -> Result<T, CallError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, kube::Error>>,
    {
        let deadline = tokio::time::Instant::now() + self.options.timeout;
        let mut pause = Duration::from_millis(50);
        loop {
            match tokio::time::timeout_at(deadline, f()).await {
                Err(_) => return Err(CallError::TimedOut),
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) => {
                    let failure = Failure::of(&e);
                    let write = matches!(what, "create" | "update");
                    if failure.retry(write) && tokio::time::Instant::now() + pause < deadline {
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(Duration::from_secs(1));
                        continue;
                    }
                    return Err(CallError::Failed(failure));
                }
            }
        }
    }

    /// The typed error of a failed request.
    pub(crate) fn error(
        &self,
        what: &'static str,
        verb: &'static str,
        group: Option<&GroupName>,
        e: CallError,
    ) -> KubernetesStoreError {
        let server = self.server.clone();
        match e {
            CallError::TimedOut => KubernetesStoreError::Timeout {
                server,
                what,
                after: self.options.timeout,
            },
            CallError::Failed(Failure::Transport(detail)) => KubernetesStoreError::Unreachable {
                server,
                what,
                detail,
            },
            CallError::Failed(Failure::Status {
                code,
                reason,
                message,
            }) => match code {
                401 => KubernetesStoreError::Unauthorized { server, message },
                403 => KubernetesStoreError::Forbidden {
                    server,
                    namespace: self.options.namespace.clone(),
                    verb,
                    message,
                    role: role_needed(&self.options.namespace),
                },
                400 | 422 => KubernetesStoreError::Refused {
                    server,
                    group: group.map(|g| g.as_str().to_owned()).unwrap_or_default(),
                    code,
                    reason,
                    message,
                },
                _ => KubernetesStoreError::Api {
                    server,
                    what,
                    code,
                    reason,
                    message,
                },
            },
        }
    }

    pub(crate) fn remember(&self, group: &GroupName, known: Known) {
        let mut map = self.known.lock().unwrap_or_else(|p| p.into_inner());
        match map.get(group) {
            Some(k) if k.version > known.version => {}
            _ => {
                map.insert(group.clone(), known);
            }
        }
    }

    fn forget(&self, group: &GroupName) {
        self.known
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(group);
    }

    fn known_at(&self, group: &GroupName, version: u64) -> Option<Known> {
        self.known
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(group)
            .filter(|k| k.version == version)
            .cloned()
    }

    /// A Lease as read: its record (remembered for the next write).
    pub(crate) fn decode(&self, group: &GroupName, lease: &Lease) -> Result<Versioned, StoreError> {
        let (versioned, known) = layout::record_of(group, lease)?;
        self.remember(group, known);
        Ok(versioned)
    }

    /// A Lease this store just wrote: its new version.
    fn written(&self, group: &GroupName, lease: &Lease, what: &str) -> Result<Version, StoreError> {
        self.decode(group, lease).map(|v| v.version).map_err(|e| {
            StoreError::Unavailable {
                message: format!(
                    "the Kubernetes API server at {} applied the {what} of group {group} but answered with a Lease that does not read back ({e})",
                    self.server
                ),
                source: None,
            }
        })
    }

    async fn create(
        &self,
        group: &GroupName,
        record: &LeaseRecord,
    ) -> Result<CasOutcome, StoreError> {
        let lease = layout::lease_for(group, record, None, self.options.label.as_ref());
        let pp = PostParams::default();
        match self.call("create", || self.api.create(&pp, &lease)).await {
            Ok(created) => Ok(CasOutcome::Applied(
                self.written(group, &created, "create")?,
            )),
            // registry/generic/registry/store.go Create: 409 AlreadyExists.
            Err(CallError::Failed(Failure::Status { code: 409, .. })) => Ok(CasOutcome::Conflict),
            // A create can only miss its namespace (the NamespaceLifecycle
            // admission plugin).
            Err(CallError::Failed(Failure::Status { code: 404, .. })) => {
                Err(KubernetesStoreError::NamespaceMissing {
                    server: self.server.clone(),
                    namespace: self.options.namespace.clone(),
                }
                .into())
            }
            Err(e) => Err(self.error("create", "create", Some(group), e).into()),
        }
    }

    async fn update(
        &self,
        group: &GroupName,
        expected: u64,
        record: &LeaseRecord,
    ) -> Result<CasOutcome, StoreError> {
        let name = layout::lease_name(group);
        let known = match self.known_at(group, expected) {
            Some(k) => k,
            None => {
                // Not the version last seen here: read the Lease for its
                // uid; if it is not at that version, the write would
                // conflict anyway.
                let got = self
                    .call("read", || self.api.get_opt(&name))
                    .await
                    .map_err(|e| self.error("read", "get", Some(group), e))?;
                let Some(lease) = got else {
                    return Ok(CasOutcome::Conflict);
                };
                match layout::record_of(group, &lease) {
                    Ok((v, known)) if v.version.0 == expected => known,
                    Ok(_) => return Ok(CasOutcome::Conflict),
                    // Not a record of tenure's at any version it could
                    // have read: never overwritten.
                    Err(_) => return Ok(CasOutcome::Conflict),
                }
            }
        };
        let lease = layout::lease_for(group, record, Some(&known), self.options.label.as_ref());
        let pp = PostParams::default();
        match self
            .call("update", || self.api.replace(&name, &pp, &lease))
            .await
        {
            Ok(updated) => Ok(CasOutcome::Applied(
                self.written(group, &updated, "update")?,
            )),
            // store.go Update: a stale resourceVersion, or (rest/update.go)
            // a uid that is no longer the object's (deleted, perhaps made
            // again): 409 Conflict, nothing written.
            Err(CallError::Failed(Failure::Status {
                code: 409 | 404, ..
            })) => Ok(CasOutcome::Conflict),
            Err(e) => Err(self.error("update", "update", Some(group), e).into()),
        }
    }

    /// Every Lease of this store (its label selector), in pages.
    pub(crate) async fn list_all(&self) -> Result<(Vec<Lease>, String), KubernetesStoreError> {
        let mut items = Vec::new();
        let mut token: Option<String> = None;
        let mut version = String::new();
        loop {
            let mut lp = ListParams::default()
                .labels(&self.options.selector())
                .limit(PAGE);
            if let Some(t) = &token {
                lp = lp.continue_token(t);
            }
            let page = self
                .call("list", || self.api.list(&lp))
                .await
                .map_err(|e| self.error("list", "list", None, e))?;
            if version.is_empty() {
                version = page.metadata.resource_version.clone().unwrap_or_default();
            }
            items.extend(page.items);
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(next) => token = Some(next),
                None => return Ok((items, version)),
            }
        }
    }
}

/// The group a Lease of this store's is for: its annotation, else its name.
pub(crate) fn group_of(lease: &Lease) -> Option<GroupName> {
    let from_annotation = lease
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(layout::GROUP_ANNOTATION))
        .cloned();
    let name =
        from_annotation.or_else(|| layout::group_of_name(lease.metadata.name.as_deref()?))?;
    GroupName::new(name).ok()
}

#[async_trait]
impl LeaseView for KubernetesStore {
    async fn read(&self, group: &GroupName) -> Result<Option<Versioned>, StoreError> {
        let inner = &self.inner;
        let name = layout::lease_name(group);
        match inner.call("read", || inner.api.get_opt(&name)).await {
            Ok(None) => {
                inner.forget(group);
                Ok(None)
            }
            Ok(Some(lease)) => inner.decode(group, &lease).map(Some),
            Err(e) => Err(inner.error("read", "get", Some(group), e).into()),
        }
    }

    async fn changes(&self, group: &GroupName) -> Result<Option<ChangeFeed>, StoreError> {
        if self.inner.feeds_off.now() {
            return Ok(None);
        }
        let (tx, feed) = ChangeFeed::channel();
        let inner = self.inner.clone();
        let name = layout::lease_name(group);
        tokio::spawn(async move {
            if let Err(e) = crate::feed::per_group(inner.clone(), name, tx).await {
                tracing::warn!(
                    error = %e,
                    "the Kubernetes API server refused the watch; candidates poll instead of taking over at once"
                );
                inner.feeds_off.for_a_while(FEED_RETRY_AFTER);
            }
        });
        Ok(Some(feed))
    }

    /// The Leases of the store's label selector, in pages of 500, whose
    /// group starts with `prefix`.
    async fn list(&self, prefix: &str) -> Result<Vec<Listed>, StoreError> {
        let (items, _) = self.inner.list_all().await?;
        Ok(items
            .iter()
            .filter_map(|lease| {
                let group = group_of(lease)?;
                if !group.as_str().starts_with(prefix) {
                    return None;
                }
                let record = self.inner.decode(&group, lease);
                Some(Listed { group, record })
            })
            .collect())
    }

    /// One watch of the namespace's Leases (the store's label selector),
    /// its events carrying the records (see [the crate docs](crate#change-feed)).
    async fn watch(&self) -> Result<Option<StoreFeed>, StoreError> {
        Ok(Some(crate::feed::store_wide(self.inner.clone()).await?))
    }

    fn describe(&self) -> String {
        format!(
            "{} (server {})",
            self.inner.options.describe(),
            self.inner.server
        )
    }

    fn running(&self) -> Running<'_> {
        // Single requests in flight together, bounded per handle: let the
        // engine's own limit decide the batch.
        Running::new(BATCH_SIZE, &self.inner.engine).bounded_by(&self.inner.in_flight)
    }
}

#[async_trait]
impl LeaseStore for KubernetesStore {
    async fn compare_and_swap(
        &self,
        group: &GroupName,
        expected: Option<Version>,
        record: &LeaseRecord,
    ) -> Result<CasOutcome, StoreError> {
        match expected {
            None => self.inner.create(group, record).await,
            // resourceVersions are etcd revisions: positive, and no stored
            // object has one beyond i64.
            Some(Version(v)) if v == 0 || i64::try_from(v).is_err() => Ok(CasOutcome::Conflict),
            Some(Version(v)) => self.inner.update(group, v, record).await,
        }
    }
}
