//! The HTTPS client: rustls with ring (never OpenSSL), trusting the
//! platform's roots plus, optionally, a CA file for a private endpoint.

use std::path::Path;

use aws_sdk_dynamodb::config::SharedHttpClient;
use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode, TlsContext, TrustStore};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use tenure::tls::{read_pem, Expected};
use tenure::StoreError;

use crate::error::DynamoDbStoreError;

/// The HTTP client for the SDK; `ca` is the CA file and the option that
/// named it.
pub(crate) fn http_client(
    ca: Option<(&'static str, &Path)>,
) -> Result<SharedHttpClient, DynamoDbStoreError> {
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

    /// The file checks themselves are tenure's (`tenure::tls`); here, that
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
