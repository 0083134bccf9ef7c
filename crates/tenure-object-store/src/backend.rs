//! Builds the `object_store` client of a bucket from [`BucketOptions`]:
//! conditional puts on, retries off, the timeouts and TLS roots given.

use std::sync::Arc;

use object_store::aws::{AmazonS3Builder, S3ConditionalPut};
use object_store::azure::MicrosoftAzureBuilder;
use object_store::gcp::{GcpCredential, GoogleCloudStorageBuilder};
use object_store::{
    Certificate, ClientOptions, ObjectStore, RetryConfig, StaticCredentialProvider,
};
use tenure::store::secret::Secret;
use tenure::store::tls::{read_pem, Expected};
use tenure::StoreError;

use crate::error::{BackendKind, BucketStoreError, Place};
use crate::options::BucketOptions;

/// Azurite's documented development account and key.
const AZURITE_ACCOUNT: &str = "devstoreaccount1";
const AZURITE_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// Retries off. A conditional put whose reply was lost (a timeout, a
/// 5xx, a reset connection) may have been applied; sent again, it would
/// be refused by its own effect and come back as a conflict, and the
/// elector would take an applied write for a lost race. Every failure
/// reaches the elector instead, which knows the outcome is unknown and
/// re-reads; `object_store` would also retry a 409 of S3's concurrent
/// conditional writes, which is a conflict.
fn no_retries() -> RetryConfig {
    RetryConfig {
        max_retries: 0,
        ..RetryConfig::default()
    }
}

fn client_options(o: &BucketOptions) -> Result<ClientOptions, BucketStoreError> {
    let mut c = ClientOptions::new()
        .with_timeout(o.timeout)
        .with_connect_timeout(o.connect_timeout)
        .with_allow_http(
            o.endpoint
                .as_deref()
                .is_some_and(|e| e.starts_with("http://"))
                || o.emulator,
        );
    if let Some((option, path)) = &o.ca {
        let pem = read_pem(option, path, Expected::Certificates)?;
        let certs = Certificate::from_pem_bundle(&pem).map_err(|e| {
            StoreError::misconfigured(
                format!(
                    "object store {}: the {option} file {} holds a certificate the HTTP client cannot use",
                    o.redacted_url(),
                    path.display()
                ),
                e,
            )
        })?;
        for cert in certs {
            c = c.with_root_certificate(cert);
        }
    }
    Ok(c)
}

/// The client for the options' bucket. Nothing is sent yet.
pub(crate) fn build(
    o: &BucketOptions,
    place: &Place,
) -> Result<Arc<dyn ObjectStore>, BucketStoreError> {
    let client = client_options(o)?;
    let failed = |e: object_store::Error| StoreError::Misconfigured {
        // Builder errors name missing settings and malformed values;
        // they do not echo secrets, but scrub them anyway.
        message: place.scrub(&format!("object store {}: {e}", o.redacted_url())),
        source: None,
    };
    let store: Arc<dyn ObjectStore> = match o.kind {
        BackendKind::S3 => Arc::new(s3(o, client).build().map_err(failed)?),
        BackendKind::Gcs => Arc::new(gcs(o, client).build().map_err(failed)?),
        BackendKind::Azure => Arc::new(azure(o, client).build().map_err(failed)?),
    };
    Ok(store)
}

/// S3 (or an S3-compatible server at `endpoint`): conditional puts on the
/// ETag, static keys if the URL gives them, else the standard AWS chain.
fn s3(o: &BucketOptions, client: ClientOptions) -> AmazonS3Builder {
    let mut b = AmazonS3Builder::from_env()
        .with_bucket_name(&o.bucket)
        .with_conditional_put(S3ConditionalPut::ETagMatch)
        .with_virtual_hosted_style_request(o.virtual_hosted)
        .with_retry(no_retries())
        .with_client_options(client);
    if let Some(r) = &o.region {
        b = b.with_region(r);
    }
    if let Some(e) = &o.endpoint {
        b = b.with_endpoint(e);
    }
    if let Some(k) = &o.keys {
        b = b
            .with_access_key_id(k.access_key_id())
            .with_secret_access_key(k.secret_access_key().expose());
        if let Some(t) = k.session_token() {
            b = b.with_token(t.expose());
        }
    }
    b
}

/// Google Cloud Storage: a service account file, the environment's
/// credentials, or unsigned requests to an emulator.
fn gcs(o: &BucketOptions, client: ClientOptions) -> GoogleCloudStorageBuilder {
    let mut b = GoogleCloudStorageBuilder::from_env()
        .with_bucket_name(&o.bucket)
        .with_retry(no_retries())
        .with_client_options(client);
    if let Some(e) = &o.endpoint {
        b = b.with_base_url(e.trim_end_matches('/'));
    }
    if let Some(p) = &o.service_account {
        b = b.with_service_account_path(p.display().to_string());
    }
    if o.anonymous {
        // Unsigned requests. `skip_signature` alone covers reads only
        // (object_store 0.13 fetches a token for writes), so the
        // credential is an empty one too.
        b = b
            .with_skip_signature(true)
            .with_credentials(Arc::new(StaticCredentialProvider::new(GcpCredential {
                bearer: String::new(),
            })));
    }
    b
}

/// Azure Blob Storage, or Azurite (path-style requests to its development
/// account) when the URL says `emulator`.
fn azure(o: &BucketOptions, client: ClientOptions) -> MicrosoftAzureBuilder {
    let mut b = MicrosoftAzureBuilder::from_env()
        .with_container_name(&o.bucket)
        .with_retry(no_retries())
        .with_client_options(client);
    if o.emulator {
        // Path-style requests to Azurite's account, at its
        // default address unless an endpoint is given.
        let base = o
            .endpoint
            .as_deref()
            .unwrap_or("http://127.0.0.1:10000")
            .trim_end_matches('/');
        let account = o.account.as_deref().unwrap_or(AZURITE_ACCOUNT);
        b = b
            .with_account(account)
            .with_endpoint(format!("{base}/{account}"))
            .with_access_key(o.access_key.as_ref().map_or(AZURITE_KEY, Secret::expose))
            .with_allow_http(true);
    } else {
        if let Some(a) = &o.account {
            b = b.with_account(a);
        }
        if let Some(e) = &o.endpoint {
            b = b.with_endpoint(e.clone());
        }
        if let Some(k) = &o.access_key {
            b = b.with_access_key(k.expose());
        }
    }
    if o.anonymous {
        b = b.with_skip_signature(true);
    }
    b
}
