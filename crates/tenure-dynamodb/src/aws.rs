//! How tenure's AWS clients are set up, in one place for this crate's
//! DynamoDB client and `tenure-kinesis`'s Kinesis client: HTTPS on rustls
//! with ring (never OpenSSL), trusting the platform's roots plus,
//! optionally, a CA file for a private endpoint; the SDK's own retries off;
//! bounded connection and attempt times; static credentials or the
//! standard AWS chain.

use std::path::Path;
use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, SdkConfig};
use aws_sdk_dynamodb::config::{Credentials, Region, SharedHttpClient};
use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode, TlsContext, TrustStore};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use tenure::error::ConnectError;
use tenure::store::secret::AccessKeys;
use tenure::store::tls::{read_pem, Expected};
use tenure::StoreError;

/// How long to wait for a TCP (and TLS) connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// How long one request may take before it fails as unreachable. An
/// elector cancels sooner, at its operation deadline; this bounds callers
/// that use a client directly (a status command, a consumer's listing).
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);

/// Where an AWS client connects and as whom. Every field left `None` comes
/// from the standard AWS chain (environment, profile, SSO, web identity,
/// container and instance roles).
#[derive(Clone, Copy, Default)]
pub struct AwsAccess<'a> {
    /// The region.
    pub region: Option<&'a str>,
    /// An `http(s)://host:port` to send requests to instead of the
    /// region's public endpoint.
    pub endpoint: Option<&'a str>,
    /// A profile of `~/.aws/config`.
    pub profile: Option<&'a str>,
    /// Static credentials.
    pub credentials: Option<&'a AccessKeys>,
    /// A PEM file of CA certificates to trust besides the platform's, and
    /// the option that named it (for errors).
    pub ca: Option<(&'static str, &'a Path)>,
}

/// The SDK configuration for `access`, with `source` naming static
/// credentials in the SDK's logs (`tenure-dynamodb-static`, …).
///
/// The SDK's retries are off: a lost reply to a conditional write must
/// reach the elector as an error, not be resent and come back as a
/// spurious conflict, and each caller retries throttling itself, with a
/// back-off it documents and tests. Whether a region was found is the
/// caller's to check (`config.region()`), with an error naming its URL.
pub async fn sdk_config(
    access: AwsAccess<'_>,
    source: &'static str,
) -> Result<SdkConfig, StoreError> {
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .http_client(http_client(access.ca)?)
        .retry_config(RetryConfig::disabled())
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(CONNECT_TIMEOUT)
                .operation_attempt_timeout(ATTEMPT_TIMEOUT)
                .build(),
        );
    if let Some(r) = access.region {
        loader = loader.region(Region::new(r.to_owned()));
    }
    if let Some(e) = access.endpoint {
        loader = loader.endpoint_url(e);
    }
    if let Some(p) = access.profile {
        loader = loader.profile_name(p);
    }
    if let Some(k) = access.credentials {
        loader = loader.credentials_provider(Credentials::new(
            k.access_key_id(),
            k.secret_access_key().expose(),
            k.session_token().map(|t| t.expose().to_owned()),
            None,
            source,
        ));
    }
    Ok(loader.load().await)
}

/// The HTTP client for the SDK; `ca` is the CA file and the option that
/// named it.
fn http_client(ca: Option<(&'static str, &Path)>) -> Result<SharedHttpClient, ConnectError> {
    let mut builder = aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(CryptoMode::Ring));
    if let Some((option, path)) = ca {
        let pem = read_pem(option, path, Expected::Certificates)?;
        check_anchors(option, path, &pem)?;
        let trust = TrustStore::default().with_pem_certificate(pem);
        let context = TlsContext::builder()
            .with_trust_store(trust)
            .build()
            .map_err(|e| {
                StoreError::misconfigured(
                    format!("TLS setup with the {option} file {}", path.display()),
                    e,
                )
            })?;
        builder = builder.tls_context(context);
    }
    Ok(builder.build_https())
}

/// Checks that every certificate of a CA file can be a trust anchor. The
/// SDK parses the file only when it opens the first connection, and panics
/// on a certificate it cannot use, so each is parsed here first, as the SDK
/// will.
fn check_anchors(option: &str, path: &Path, pem: &[u8]) -> Result<(), StoreError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| {
            StoreError::misconfigured(format!("the {option} file {}", path.display()), e)
        })?;
        roots.add(cert).map_err(|e| {
            StoreError::misconfigured(
                format!(
                    "the {option} file {} holds a certificate that cannot be a trust anchor",
                    path.display()
                ),
                e,
            )
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The file checks themselves are tenure's (`tenure::store::tls`); here, that
    /// they run, and that a well-formed certificate the SDK could not use
    /// as a trust anchor (it would panic on its first connection) is an
    /// error too.
    #[test]
    fn bad_ca_files_are_errors_not_panics() {
        let dir = std::env::temp_dir().join(format!("tenure-dynamodb-ca-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = dir.join("missing.pem");
        let e = http_client(Some(("ca", &missing))).unwrap_err().to_string();
        assert!(e.contains("cannot read the ca file"), "{e}");
        for (name, body, why) in [
            (
                "text.pem",
                "not a certificate at all",
                "holds no certificate",
            ),
            (
                // An empty DER sequence: well-formed, but no certificate.
                "empty-sequence.pem",
                "-----BEGIN CERTIFICATE-----\nMAA=\n-----END CERTIFICATE-----\n",
                "cannot be a trust anchor",
            ),
        ] {
            let path = dir.join(name);
            std::fs::write(&path, body).unwrap();
            let e = StoreError::from(http_client(Some(("ca_file", &path))).unwrap_err());
            assert!(
                matches!(e, StoreError::Misconfigured { .. }),
                "{name}: {e:?}"
            );
            let text = e.to_string();
            assert!(
                text.contains(why) && text.contains("ca_file"),
                "{name}: {text}"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
