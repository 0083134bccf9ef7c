//! Where the lease objects are and how to reach them: parsed from an
//! `s3://`, `gs://` or `az://` URL or set with builder methods, shown
//! back without secrets.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::error::BucketStoreError;
use tenure::store::secret::{AccessKeys, Secret};
use tenure::store::url::{check_http_endpoint, is_secret_key, AccessKeyOptions, ShownQuery};

use crate::error::BackendKind;
use crate::key::Layout;

/// The object prefix used when the URL gives none.
pub const DEFAULT_PREFIX: &str = "tenure";

/// How long one request may take before it fails as a timeout (whose
/// outcome is unknown). An [`Elector`](tenure::Elector) gives up on an
/// operation sooner, at its own deadline (term / 4 by default).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long to wait for a TCP (and TLS) connection.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// Where the lease objects are and how to reach them.
///
/// Parsed from a URL with [`from_url`](BucketOptions::from_url):
///
/// ```text
/// s3://BUCKET[/PREFIX]?region=eu-west-1
/// s3://BUCKET[/PREFIX]?region=us-east-1&endpoint=http://127.0.0.1:9000&access_key_id=…&secret_access_key=…
/// gs://BUCKET[/PREFIX]
/// az://CONTAINER[/PREFIX]?account=NAME
/// ```
///
/// The lease objects are `PREFIX/GROUP` (the prefix defaults to
/// [`DEFAULT_PREFIX`]; see the crate docs for how group names are
/// encoded).
///
/// | parameter | scheme | meaning | default |
/// |---|---|---|---|
/// | `region` | s3 | the bucket's region | `AWS_REGION` / `AWS_DEFAULT_REGION`, else `us-east-1` |
/// | `endpoint` | all | `http(s)://host:port` of an S3-compatible server, an emulator or a private endpoint | the service's public endpoint |
/// | `access_key_id`, `secret_access_key`, `session_token` | s3 | static credentials | the environment (`AWS_ACCESS_KEY_ID` …), web identity, the ECS task role, the EC2 instance role |
/// | `virtual_hosted` | s3 | `true`: `https://BUCKET.host/` requests instead of `https://host/BUCKET/` | `false` |
/// | `service_account` | gs | path of a service-account JSON key file | `GOOGLE_SERVICE_ACCOUNT` / `GOOGLE_APPLICATION_CREDENTIALS`, then the metadata server |
/// | `anonymous` | gs, az | `true`: unsigned requests (emulators) | `false` |
/// | `account`, `access_key` | az | the storage account and its key | `AZURE_STORAGE_ACCOUNT_NAME`, `AZURE_STORAGE_ACCOUNT_KEY`, then service principal, workload and managed identity |
/// | `emulator` | az | `true`: Azurite's well-known account and key, path-style `endpoint` (default `http://127.0.0.1:10000`) | `false` |
/// | `timeout` | all | one request's limit, e.g. `2s`; a request that runs out is reported as a [`StoreError::Timeout`](tenure::StoreError::Timeout) (its outcome unknown) | [`DEFAULT_TIMEOUT`] |
/// | `connect_timeout` | all | the TCP and TLS connection's limit | [`DEFAULT_CONNECT_TIMEOUT`] |
/// | `ca` (formerly `ca_file`, still accepted) | all | a PEM file of CA certificates to trust besides the platform's (a private `https` endpoint) | the platform's roots |
///
/// Values may be percent-encoded (a `+` is a plus, not a space). Unknown
/// parameters, and parameters of another scheme, are errors, so a typo
/// does not silently fall back to a default.
///
/// ```
/// use tenure_object_store::BucketOptions;
/// let o = BucketOptions::from_url(
///     "s3://my-bucket/leases/prod?region=eu-west-1&access_key_id=AKIDEXAMPLE1234&secret_access_key=s3cr3t/+x",
/// )?;
/// assert_eq!(o.bucket(), "my-bucket");
/// assert_eq!(o.prefix(), "leases/prod");
/// assert_eq!(
///     o.redacted_url(),
///     "s3://my-bucket/leases/prod?region=eu-west-1&access_key_id=***1234&secret_access_key=***"
/// );
/// # Ok::<(), tenure_object_store::BucketStoreError>(())
/// ```
///
/// Secret keys, session tokens and account keys never appear in
/// [`Debug`], [`redacted_url`](BucketOptions::redacted_url) or an error;
/// of an access key id only the last four characters are shown.
#[derive(Clone)]
pub struct BucketOptions {
    pub(crate) kind: BackendKind,
    pub(crate) bucket: String,
    pub(crate) layout: Layout,
    pub(crate) endpoint: Option<String>,
    pub(crate) timeout: Duration,
    pub(crate) connect_timeout: Duration,
    /// The CA file, and the option that named it (`ca` or `ca_file`).
    pub(crate) ca: Option<(&'static str, PathBuf)>,
    pub(crate) anonymous: bool,
    // S3
    pub(crate) region: Option<String>,
    pub(crate) keys: Option<AccessKeys>,
    pub(crate) virtual_hosted: bool,
    // GCS
    pub(crate) service_account: Option<PathBuf>,
    // Azure
    pub(crate) account: Option<String>,
    pub(crate) access_key: Option<Secret>,
    pub(crate) emulator: bool,
}

impl fmt::Debug for BucketOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BucketOptions")
            .field("url", &self.redacted_url())
            .finish()
    }
}

impl BucketOptions {
    /// Options for an S3 bucket (or an S3-compatible server's), with
    /// everything else from the environment.
    pub fn s3(bucket: impl Into<String>) -> Result<Self, BucketStoreError> {
        Self::new(BackendKind::S3, bucket.into())
    }

    /// Options for a Google Cloud Storage bucket.
    pub fn gcs(bucket: impl Into<String>) -> Result<Self, BucketStoreError> {
        Self::new(BackendKind::Gcs, bucket.into())
    }

    /// Options for an Azure Blob Storage container.
    pub fn azure(container: impl Into<String>) -> Result<Self, BucketStoreError> {
        Self::new(BackendKind::Azure, container.into())
    }

    fn new(kind: BackendKind, bucket: String) -> Result<Self, BucketStoreError> {
        let shown = format!("{}://{bucket}", scheme(kind));
        check_bucket_name(&bucket).map_err(|why| bad(&shown, why))?;
        let layout = Layout::new(DEFAULT_PREFIX).map_err(|why| bad(&shown, why))?;
        Ok(BucketOptions {
            kind,
            bucket,
            layout,
            endpoint: None,
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            ca: None,
            anonymous: false,
            region: None,
            keys: None,
            virtual_hosted: false,
            service_account: None,
            account: None,
            access_key: None,
            emulator: false,
        })
    }

    /// Parses an `s3://`, `gs://` or `az://` URL; see the table above.
    pub fn from_url(url: &str) -> Result<Self, BucketStoreError> {
        // Until parsed, nothing of the URL may be echoed: it can hold a
        // secret key. Errors show a redaction of the raw text instead.
        let shown = tenure::store::url::redact(url);
        let (scheme_text, rest) = url
            .split_once("://")
            .ok_or_else(|| bad(&shown, "it must start with s3://, gs:// or az://"))?;
        let kind = match scheme_text.to_ascii_lowercase().as_str() {
            "s3" => BackendKind::S3,
            "gs" => BackendKind::Gcs,
            "az" => BackendKind::Azure,
            _ => return Err(bad(&shown, "it must start with s3://, gs:// or az://")),
        };
        let (location, query) = rest.split_once('?').unwrap_or((rest, ""));
        if location.contains('#') {
            return Err(bad(&shown, "a store URL takes no #fragment"));
        }
        let (bucket, prefix) = location.split_once('/').unwrap_or((location, ""));
        // No bucket name holds '@' or ':'; keys pasted before the bucket,
        // as user info, do (a secret with a '/' cuts the bucket short).
        if bucket.contains(['@', ':']) {
            return Err(bad(
                &shown,
                "credentials go in the query (access_key_id=…&secret_access_key=…, or access_key=… on az://), not before the bucket",
            ));
        }
        let bucket = tenure::store::url::percent_decode(bucket)
            .ok_or_else(|| bad(&shown, "the bucket name has an invalid %-escape"))?;
        let mut o = Self::new(kind, bucket).map_err(|_| {
            bad(
                &shown,
                "the bucket (container) name must be 3 to 222 characters of a-z, 0-9, . - _",
            )
        })?;
        if !prefix.trim_matches('/').is_empty() {
            let prefix = tenure::store::url::percent_decode(prefix)
                .ok_or_else(|| bad(&shown, "the prefix has an invalid %-escape or is not UTF-8"))?;
            o.layout = Layout::new(&prefix).map_err(|why| bad(&shown, why))?;
        }
        let mut keys = AccessKeyOptions::default();
        // Whether the pair before held a secret: this one's name may be
        // its tail, and is then not named (see shown_option_name).
        let mut after_secret = false;
        for pair in tenure::store::url::query_pairs(query) {
            let (k, v) = pair.map_err(|why| bad(&shown, &why.to_string()))?;
            let k = k.as_str();
            let name = tenure::store::url::shown_option_name(k, after_secret);
            after_secret = tenure::store::url::is_secret_key(k);
            if v.is_empty() {
                return Err(bad(&shown, &format!("parameter {name} is empty")));
            }
            let only = |allowed: &[BackendKind]| -> Result<(), BucketStoreError> {
                if allowed.contains(&kind) {
                    Ok(())
                } else {
                    Err(bad(
                        &shown,
                        &format!("parameter {k} does not apply to {}://", scheme(kind)),
                    ))
                }
            };
            let flag = |v: &str| {
                tenure::store::url::parse_bool(k, v).map_err(|why| bad(&shown, &why.to_string()))
            };
            let duration = |v: &str| {
                tenure::store::url::parse_duration(k, v)
                    .map_err(|why| bad(&shown, &why.to_string()))
            };
            use BackendKind::{Azure, Gcs, S3};
            match k {
                "endpoint" => o.endpoint = Some(v),
                "timeout" => o.timeout = duration(&v)?,
                "connect_timeout" => o.connect_timeout = duration(&v)?,
                "ca" => o.ca = Some(("ca", PathBuf::from(v))),
                "ca_file" => o.ca = Some(("ca_file", PathBuf::from(v))),
                "region" => {
                    only(&[S3])?;
                    o.region = Some(v)
                }
                k if AccessKeyOptions::is_option(k) => {
                    only(&[S3])?;
                    keys.set(k, v)
                }
                "virtual_hosted" => {
                    only(&[S3])?;
                    o.virtual_hosted = flag(&v)?
                }
                "service_account" => {
                    only(&[Gcs])?;
                    o.service_account = Some(PathBuf::from(v))
                }
                "anonymous" => {
                    only(&[Gcs, Azure])?;
                    o.anonymous = flag(&v)?
                }
                "account" => {
                    only(&[Azure])?;
                    o.account = Some(v)
                }
                "access_key" => {
                    only(&[Azure])?;
                    o.access_key = Some(Secret::from(v))
                }
                "emulator" => {
                    only(&[Azure])?;
                    o.emulator = flag(&v)?
                }
                _ => {
                    return Err(bad(
                        &shown,
                        &format!("unknown parameter {name}: {}", parameters(kind)),
                    ))
                }
            }
        }
        o.keys = keys
            .finish("the environment")
            .map_err(|why| bad(&shown, &why.to_string()))?;
        o.check().map_err(|why| bad(&o.redacted_url(), &why))?;
        Ok(o)
    }

    /// Keeps the lease objects under this prefix instead of
    /// [`DEFAULT_PREFIX`].
    pub fn prefix_path(mut self, prefix: &str) -> Result<Self, BucketStoreError> {
        self.layout = Layout::new(prefix).map_err(|why| bad(&self.redacted_url(), why))?;
        Ok(self)
    }

    /// Sends requests to this endpoint (an S3-compatible server, an
    /// emulator) instead of the service's public one.
    pub fn endpoint(mut self, url: impl Into<String>) -> Self {
        self.endpoint = Some(url.into());
        self
    }

    /// Sets the S3 region.
    pub fn region(mut self, region: impl Into<String>) -> Self {
        self.region = Some(region.into());
        self
    }

    /// Static S3 credentials instead of the environment's.
    pub fn static_credentials(
        mut self,
        access_key_id: impl Into<String>,
        secret_access_key: impl Into<String>,
        session_token: Option<String>,
    ) -> Self {
        self.keys = Some(AccessKeys::new(
            access_key_id,
            secret_access_key,
            session_token,
        ));
        self
    }

    /// One request's time limit (see [`DEFAULT_TIMEOUT`]).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Trusts the CA certificates in this PEM file besides the platform's.
    pub fn ca(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca = Some(("ca", path.into()));
        self
    }

    /// The bucket (or container).
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The prefix the lease objects are under.
    pub fn prefix(&self) -> &str {
        self.layout.prefix()
    }

    /// The options as a URL without secrets: the only form that appears
    /// in logs, errors and [`describe`](tenure::LeaseView::describe).
    pub fn redacted_url(&self) -> String {
        let mut shown = ShownQuery::default();
        shown
            .value("region", self.region.as_ref())
            .endpoint(self.endpoint.as_deref())
            .value("account", self.account.as_ref())
            .flag("emulator", self.emulator)
            .flag("anonymous", self.anonymous)
            .flag("virtual_hosted", self.virtual_hosted)
            .value(
                "service_account",
                self.service_account.as_ref().map(|s| s.display()),
            )
            .duration("timeout", self.timeout, DEFAULT_TIMEOUT)
            .duration(
                "connect_timeout",
                self.connect_timeout,
                DEFAULT_CONNECT_TIMEOUT,
            );
        if let Some((option, ca)) = &self.ca {
            shown.value(option, Some(ca.display()));
        }
        shown
            .access_keys(self.keys.as_ref())
            .secret("access_key", self.access_key.is_some());
        shown.url(&format!(
            "{}://{}/{}",
            scheme(self.kind),
            self.bucket,
            self.layout.prefix()
        ))
    }

    /// The secrets these options hold, to scrub from any message.
    pub(crate) fn secrets(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(k) = &self.keys {
            out.push(k.secret_access_key().expose().to_owned());
            if let Some(t) = k.session_token() {
                out.push(t.expose().to_owned());
            }
        }
        if let Some(k) = &self.access_key {
            out.push(k.expose().to_owned());
        }
        // `object_store` reads every AWS_*, AZURE_* and GOOGLE_* variable
        // as a setting of its client: a server that echoes a session token
        // or a SAS token must not bring it into a message either.
        for (name, value) in std::env::vars_os() {
            let (Some(name), Some(value)) = (name.to_str(), value.to_str()) else {
                continue;
            };
            let cloud = ["AWS_", "AZURE_", "GOOGLE_"]
                .iter()
                .any(|p| name.starts_with(p));
            if cloud && is_secret_key(name) {
                out.push(value.to_owned());
            }
        }
        // Short values would mask ordinary words; a real secret is long.
        out.retain(|s| s.len() >= 6);
        out
    }

    /// Checks what builder methods could not.
    pub(crate) fn check(&self) -> Result<(), String> {
        if let Some(e) = &self.endpoint {
            check_http_endpoint(e, "http://127.0.0.1:9000").map_err(|e| e.to_string())?;
            // Object stores take no user:password@ (requests are signed
            // with the keys), and the client would show one in its errors.
            if e.contains('@') {
                return Err("the endpoint takes no user:password@: give S3 keys as \
                     access_key_id and secret_access_key, an Azure key as access_key"
                    .into());
            }
        }
        if self.timeout.is_zero() || self.connect_timeout.is_zero() {
            return Err("timeouts must be longer than zero".into());
        }
        if self.kind == BackendKind::Azure
            && self.account.is_none()
            && !self.emulator
            && std::env::var_os("AZURE_STORAGE_ACCOUNT_NAME").is_none()
        {
            return Err(
                "no storage account: add account=NAME to the URL or set AZURE_STORAGE_ACCOUNT_NAME"
                    .into(),
            );
        }
        Ok(())
    }
}

/// The URL scheme of a backend.
pub(crate) fn scheme(kind: BackendKind) -> &'static str {
    match kind {
        BackendKind::S3 => "s3",
        BackendKind::Gcs => "gs",
        BackendKind::Azure => "az",
    }
}

fn parameters(kind: BackendKind) -> &'static str {
    match kind {
        BackendKind::S3 => "s3:// takes region, endpoint, access_key_id, secret_access_key, session_token, virtual_hosted, timeout, connect_timeout, ca",
        BackendKind::Gcs => "gs:// takes endpoint, service_account, anonymous, timeout, connect_timeout, ca",
        BackendKind::Azure => "az:// takes account, access_key, endpoint, emulator, anonymous, timeout, connect_timeout, ca",
    }
}

fn bad(shown: &str, why: &str) -> BucketStoreError {
    BucketStoreError::InvalidUrl {
        store: "object store",
        url: shown.to_owned(),
        reason: why.to_owned(),
    }
}

/// A rule every one of S3's, GCS's and Azure's naming rules implies.
fn check_bucket_name(name: &str) -> Result<(), &'static str> {
    let ok_len = (3..=222).contains(&name.len());
    let ok_chars = name
        .bytes()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'.' | b'-' | b'_'));
    if ok_len && ok_chars {
        Ok(())
    } else {
        Err("the bucket (container) name must be 3 to 222 characters of a-z, 0-9, . - _")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_parameter() {
        let o = BucketOptions::from_url(
            "s3://b-1.x/a/b/?region=eu-west-1&endpoint=http://127.0.0.1:9000&access_key_id=AKIDEXAMPLE&secret_access_key=a%2Fb+c&session_token=tok3n-value&timeout=2s&connect_timeout=500ms&ca=/ca.pem&virtual_hosted=true",
        )
        .unwrap();
        assert_eq!(o.kind, BackendKind::S3);
        assert_eq!((o.bucket(), o.prefix()), ("b-1.x", "a/b"));
        assert_eq!(o.region.as_deref(), Some("eu-west-1"));
        assert_eq!(o.endpoint.as_deref(), Some("http://127.0.0.1:9000"));
        let k = o.keys.as_ref().unwrap();
        assert_eq!(k.secret_access_key().expose(), "a/b+c", "a + stays a plus");
        assert_eq!(o.timeout, Duration::from_secs(2));
        assert_eq!(o.connect_timeout, Duration::from_millis(500));
        assert!(o.virtual_hosted);
        assert_eq!(o.ca, Some(("ca", "/ca.pem".into())));
        // The former name of `ca` is still read, and shown as given.
        let f = BucketOptions::from_url("s3://bkt?ca_file=/old.pem").unwrap();
        assert_eq!(f.ca, Some(("ca_file", "/old.pem".into())));
        assert!(f.redacted_url().contains("ca_file=/old.pem"));
        let g = BucketOptions::from_url(
            "gs://bkt?service_account=/k.json&anonymous=true&endpoint=http://127.0.0.1:4443",
        )
        .unwrap();
        assert_eq!((g.kind, g.prefix()), (BackendKind::Gcs, DEFAULT_PREFIX));
        assert!(g.anonymous);
        let a = BucketOptions::from_url(
            "az://cont/p?account=acct&access_key=c2VjcmV0a2V5&emulator=true",
        )
        .unwrap();
        assert_eq!(a.kind, BackendKind::Azure);
        assert_eq!(a.account.as_deref(), Some("acct"));
    }

    #[test]
    fn secrets_never_show() {
        let url = "s3://bkt/p?access_key_id=AKIDEXAMPLE&secret_access_key=Qa1/Qb2?Qc3#Qd4@Qe5+Qf6&session_token=Zz9-token";
        let o = BucketOptions::from_url(url).unwrap();
        for shown in [o.redacted_url(), format!("{o:?}")] {
            for piece in ["Qa1", "Qb2", "Qc3", "Qd4", "Qe5", "Qf6", "Zz9", "AKIDEX"] {
                assert!(!shown.contains(piece), "{shown}");
            }
            assert!(shown.contains("access_key_id=***MPLE"), "{shown}");
        }
        // A password in the endpoint (here with a '/', which cuts a user
        // info short for a parser) is refused without being shown.
        let e = BucketOptions::from_url("s3://bkt?endpoint=http://u:Qa1/Qb2@127.0.0.1:1")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no user:password@"), "{e}");
        assert!(!e.contains("Qa1") && !e.contains("Qb2"), "{e}");
        let a = BucketOptions::from_url("az://cont?account=a&access_key=c2VjcmV0a2V5").unwrap();
        assert!(!a.redacted_url().contains("c2Vj"), "{}", a.redacted_url());
        assert!(!format!("{a:?}").contains("c2Vj"));
        // Errors name the part, never the value.
        let e =
            BucketOptions::from_url("s3://bkt?secret_access_key=Qa1sEcReT&bogus=1").unwrap_err();
        assert!(!e.to_string().contains("Qa1sEcReT"), "{e}");
        for url in ["s3://AK:Qa1sEcReT@bkt/p", "s3://AK:Qa1sE/cReT@bkt/p"] {
            let e = BucketOptions::from_url(url).unwrap_err();
            assert!(!e.to_string().contains("Qa1sE"), "{e}");
            assert!(e.to_string().contains("access_key_id="), "{url}: {e}");
        }
    }

    /// `object_store` takes credentials from AWS_*, AZURE_* and GOOGLE_*
    /// variables as well: their secret values are scrubbed like the URL's.
    #[test]
    fn secrets_from_the_environment_are_scrubbed_too() {
        std::env::set_var("AWS_SESSION_TOKEN", "Zz9-env-session-token");
        let o = BucketOptions::from_url("s3://bkt").unwrap();
        assert!(
            o.secrets().iter().any(|s| s == "Zz9-env-session-token"),
            "{:?}",
            o.secrets().len()
        );
        assert!(!o.redacted_url().contains("Zz9"));
    }

    /// Each refusal names the part to fix, and never the password the
    /// cases carry ([`tenure_testkit::REFUSED_URL_PASSWORD`]).
    #[test]
    fn rejects_bad_urls_naming_the_fix() {
        let cases = [
            ("s3:/bkt", "s3://"),
            ("ftp://bkt", "s3://"),
            // No scheme, a password holding "://": neither piece shows.
            ("key:pw-secret://pw-secret@bucket/p", "s3://"),
            ("s3://BK", "bucket"),
            ("s3://bkt?nope=1", "unknown parameter \"nope\""),
            // A secret with an unescaped '&': its tail is not named.
            (
                "s3://bkt?access_key_id=AKIDX&secret_access_key=Qa1&Qb2=",
                "a name after a secret option, not shown",
            ),
            (
                "az://cont?account=acct&access_key=Qa1&Qb2=Qc3",
                "a name after a secret option, not shown",
            ),
            ("s3://bkt?account=x", "does not apply to s3://"),
            ("gs://bkt?region=x", "does not apply to gs://"),
            (
                "s3://bkt?access_key_id=x",
                "both access_key_id and secret_access_key",
            ),
            ("s3://bkt?endpoint=127.0.0.1:9000", "http:// or https://"),
            ("s3://bkt?timeout=soon", "timeout"),
            ("s3://bkt?timeout=0s", "longer than zero"),
            ("s3://bkt/a//b", "empty"),
            ("s3://bkt/a/../b", "`..`"),
            ("s3://bkt?region=", "empty"),
            ("s3://bkt#frag", "fragment"),
            ("az://cont", "account"),
        ];
        // The account may come from the environment instead.
        let account_set = std::env::var_os("AZURE_STORAGE_ACCOUNT_NAME").is_some();
        let cases: Vec<_> = cases
            .into_iter()
            .filter(|(url, _)| !(account_set && *url == "az://cont"))
            .collect();
        tenure_testkit::assert_url_refusals(BucketOptions::from_url, &cases);
    }
}
