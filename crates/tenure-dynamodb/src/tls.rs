//! The HTTPS client: rustls with ring (never OpenSSL), trusting the
//! platform's roots plus, optionally, a CA file for a private endpoint.

use std::path::Path;

use aws_sdk_dynamodb::config::SharedHttpClient;
use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode, TlsContext, TrustStore};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use tenure::StoreError;

/// The HTTP client for the SDK.
pub(crate) fn http_client(ca_file: Option<&Path>) -> Result<SharedHttpClient, StoreError> {
    let mut builder = aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(CryptoMode::Ring));
    if let Some(path) = ca_file {
        let pem = read_ca_file(path)?;
        let trust = TrustStore::default().with_pem_certificate(pem);
        let context = TlsContext::builder()
            .with_trust_store(trust)
            .build()
            .map_err(|e| {
                StoreError::misconfigured(format!("TLS setup with ca_file {}", path.display()), e)
            })?;
        builder = builder.tls_context(context);
    }
    Ok(builder.build_https())
}

/// Reads and checks a PEM file of CA certificates. The SDK parses it only
/// when it opens the first connection, and panics on a bad one, so every
/// certificate is parsed here first, as the SDK will.
fn read_ca_file(path: &Path) -> Result<Vec<u8>, StoreError> {
    let shown = path.display();
    let pem = std::fs::read(path).map_err(|e| {
        StoreError::misconfigured(
            format!(
                "cannot read ca_file {shown}: {e}; give a readable PEM file of CA certificates"
            ),
            e,
        )
    })?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            StoreError::misconfigured(
                format!("ca_file {shown} is not valid PEM ({e}): give CA certificates in PEM form (-----BEGIN CERTIFICATE-----)"),
                e,
            )
        })?;
    if certs.is_empty() {
        return Err(StoreError::Misconfigured {
            message: format!(
                "ca_file {shown} holds no certificate: give CA certificates in PEM form"
            ),
            source: None,
        });
    }
    let mut roots = rustls::RootCertStore::empty();
    for cert in certs {
        roots.add(cert).map_err(|e| {
            StoreError::misconfigured(
                format!("ca_file {shown} holds a certificate that cannot be a trust anchor ({e})"),
                e,
            )
        })?;
    }
    Ok(pem)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_ca_files_are_errors_not_panics() {
        let dir = std::env::temp_dir().join(format!("tenure-dynamodb-ca-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = dir.join("missing.pem");
        let e = http_client(Some(&missing)).unwrap_err().to_string();
        assert!(e.contains("cannot read ca_file"), "{e}");
        for (name, body, why) in [
            ("empty.pem", "", "holds no certificate"),
            (
                "text.pem",
                "not a certificate at all",
                "holds no certificate",
            ),
            (
                "broken.pem",
                "-----BEGIN CERTIFICATE-----\nnot base64 !!\n-----END CERTIFICATE-----\n",
                "not valid PEM",
            ),
            (
                "garbage-der.pem",
                "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
                "cannot be a trust anchor",
            ),
        ] {
            let path = dir.join(name);
            std::fs::write(&path, body).unwrap();
            let e = http_client(Some(&path)).unwrap_err();
            assert!(
                matches!(e, StoreError::Misconfigured { .. }),
                "{name}: {e:?}"
            );
            assert!(e.to_string().contains(why), "{name}: {e}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
