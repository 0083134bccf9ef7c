//! DynamoDB errors sorted into what the store does with them: a refused
//! condition (a conflict, not an error), throttling (retried), and the rest
//! as a [`StoreError`] whose message names the problem and the fix.

use aws_credential_types::provider::error::CredentialsError;
use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_smithy_runtime_api::http::Response;
use tenure::error::find_cause;
use tenure::StoreError;

/// Why the DynamoDB store could not connect: a malformed URL or table
/// name ([`InvalidUrl`](tenure::error::ConnectError::InvalidUrl)), an
/// unusable CA file (`ca=`), or what connecting met, worded as the
/// operations word it (credentials refused, the table missing or with
/// another key schema, DynamoDB unreachable), naming the table, the region
/// or endpoint (never a secret) and the fix.
///
/// [`DynamoDbStore::connect`](crate::DynamoDbStore::connect) and
/// [`DynamoDbOptions::from_url`](crate::DynamoDbOptions::from_url) return
/// it; the [`LeaseStore`](tenure::LeaseStore) operations return
/// [`StoreError`]s.
pub type DynamoDbStoreError = tenure::error::ConnectError;

/// Where requests go, for messages: the table and the region or endpoint,
/// never credentials.
#[derive(Clone, Debug)]
pub(crate) struct Target {
    pub(crate) table: String,
    /// e.g. `in eu-west-1` or `at http://127.0.0.1:8000 (region local)`.
    pub(crate) place: String,
}

impl Target {
    pub(crate) fn new(table: &str, region: Option<&str>, endpoint: Option<&str>) -> Target {
        let region = region.unwrap_or("(no region)");
        let place = match endpoint {
            Some(e) => format!("at {e} (region {region})"),
            None => format!("in {region}"),
        };
        Target {
            table: table.to_owned(),
            place,
        }
    }
}

/// What a failed request means to the store.
#[derive(Debug)]
pub(crate) enum Failure {
    /// A conditional write's condition was false: nothing was written.
    ConditionFailed,
    /// DynamoDB refused the request for capacity; it was not applied, so it
    /// may be sent again.
    Throttled(StoreError),
    /// Anything else, already worded for the operator.
    Other(StoreError),
}

/// Error codes DynamoDB uses when it rejects a request for capacity. Each
/// means the request was not carried out.
const THROTTLE_CODES: &[&str] = &[
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
];

/// Codes for credentials DynamoDB does not accept.
const BAD_CREDENTIAL_CODES: &[&str] = &[
    "UnrecognizedClientException",
    "InvalidClientTokenId",
    "MissingAuthenticationToken",
    "MissingAuthenticationTokenException",
    "IncompleteSignature",
    "IncompleteSignatureException",
    "InvalidSignatureException",
    "ExpiredTokenException",
];

/// The IAM actions a lease store needs, for permission errors.
pub(crate) const PERMISSIONS: &str = "dynamodb:GetItem, dynamodb:BatchGetItem and dynamodb:UpdateItem on the table \
    (plus dynamodb:DescribeTable to check it when connecting, and dynamodb:CreateTable for create=true)";

/// The message for a table that does not exist, with every way to make it.
pub(crate) fn missing_table(target: &Target, detail: &str) -> String {
    let table = &target.table;
    format!(
        "DynamoDB table {table} does not exist {} ({detail}): add create=true to the store URL \
         (or call DynamoDbStore::create_table_if_missing), create it with \
         `aws dynamodb create-table --table-name {table} --attribute-definitions AttributeName=group_name,AttributeType=S \
         --key-schema AttributeName=group_name,KeyType=HASH --billing-mode PAY_PER_REQUEST`, \
         or fix the table name and region",
        target.place
    )
}

/// Sorts a failed SDK call. `what` names the operation for the message
/// (`read`, `compare-and-swap`, …).
pub(crate) fn classify<E>(err: SdkError<E, Response>, target: &Target, what: &str) -> Failure
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let code = err.code().map(str::to_owned);
    let message = err.message().unwrap_or("").to_owned();
    let status = err.raw_response().map(|r| r.status().as_u16());
    let detail = DisplayErrorContext(&err).to_string();
    let mut kind = kind_of(&err, code.as_deref(), &message, status, &detail);
    if !matches!(err, SdkError::ServiceError(_)) && find_cause::<CredentialsError>(&err).is_some() {
        // The SDK resolves credentials while sending, so a chain with
        // nothing to offer shows up as a dispatch failure.
        kind = Kind::NoCredentials;
    }
    let table = &target.table;
    let place = &target.place;
    let code_text = code.as_deref().unwrap_or("no error code");
    let text = match kind {
        Kind::ConditionFailed => return Failure::ConditionFailed,
        Kind::Throttled => format!(
            "DynamoDB throttled the {what} on table {table} {place} ({code_text}: {message})"
        ),
        Kind::MissingTable => missing_table(target, &message),
        Kind::WrongKey => format!(
            "DynamoDB table {table} {place} does not have tenure's key schema ({message}): tenure needs a \
             table whose only key is the hash key group_name of type S; choose another table name or let \
             create=true make one"
        ),
        Kind::Invalid => format!(
            "DynamoDB rejected the {what} on table {table} {place} as invalid ({code_text}: {message})"
        ),
        Kind::AccessDenied => format!(
            "the AWS credentials lack permission for the {what} on table {table} {place} ({message}): grant {PERMISSIONS}"
        ),
        Kind::ClockSkew => format!(
            "DynamoDB {place} refused the request's signature as expired ({message}): this host's clock is off \
             by more than five minutes; fix its time synchronisation (NTP)"
        ),
        Kind::BadCredentials => format!(
            "DynamoDB {place} refused the credentials ({code_text}: {message}): check the access key, secret key \
             and session token in use (environment, profile or store URL), and that they belong to this region's partition"
        ),
        Kind::NoCredentials => format!(
            "no usable AWS credentials for DynamoDB {place} ({detail}): set AWS_ACCESS_KEY_ID and \
             AWS_SECRET_ACCESS_KEY, choose a profile with ?profile=, run with an IAM role, or (local servers) \
             put access_key_id and secret_access_key in the store URL"
        ),
        Kind::Unreachable => format!(
            "could not reach DynamoDB {place} for the {what} on table {table}: {detail}"
        ),
        Kind::Tls => format!(
            "TLS with DynamoDB {place} failed ({detail}): check that the endpoint URL names the server's \
             certificate, or trust a private CA with ca= in the store URL"
        ),
        Kind::BadRequestSetup => format!(
            "the {what} on table {table} could not be sent to DynamoDB {place} ({detail}): check the endpoint \
             URL and region"
        ),
        Kind::Transient => format!("DynamoDB {place} failed the {what} on table {table}: {detail}"),
    };
    let error = if kind.is_transient() {
        StoreError::unavailable(text, err)
    } else {
        StoreError::misconfigured(text, err)
    };
    if kind == Kind::Throttled {
        Failure::Throttled(error)
    } else {
        Failure::Other(error)
    }
}

/// The classes [`classify`] distinguishes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    ConditionFailed,
    Throttled,
    MissingTable,
    WrongKey,
    Invalid,
    AccessDenied,
    ClockSkew,
    BadCredentials,
    NoCredentials,
    Unreachable,
    Tls,
    BadRequestSetup,
    Transient,
}

impl Kind {
    /// Whether retrying may succeed: DynamoDB throttled the request, could
    /// not be reached, or failed on its side. Every other failure names
    /// something an operator must fix.
    fn is_transient(self) -> bool {
        matches!(self, Kind::Throttled | Kind::Unreachable | Kind::Transient)
    }
}

pub(crate) fn kind_of<E, R>(
    err: &SdkError<E, R>,
    code: Option<&str>,
    message: &str,
    status: Option<u16>,
    detail: &str,
) -> Kind {
    match err {
        SdkError::ServiceError(_) => {}
        // No request went out, or no answer came: nothing DynamoDB said.
        SdkError::DispatchFailure(d) => {
            let lower = detail.to_lowercase();
            return if lower.contains("certificate") || lower.contains("tls") {
                Kind::Tls
            } else if d.is_user() {
                Kind::BadRequestSetup
            } else {
                // An I/O error, a timeout or a connector failure: the
                // server may be down or unreachable; it may come back.
                Kind::Unreachable
            };
        }
        SdkError::TimeoutError(_) => return Kind::Unreachable,
        // Building the request failed (credential failures are sorted out
        // by the caller, from the error's sources).
        SdkError::ConstructionFailure(_) => return Kind::BadRequestSetup,
        // A reply that did not parse, usually a proxy or a server error page.
        SdkError::ResponseError(_) => return Kind::Transient,
        _ => return Kind::Transient,
    }
    let code = code.unwrap_or("");
    let lower = message.to_lowercase();
    if code == "ConditionalCheckFailedException" {
        Kind::ConditionFailed
    } else if THROTTLE_CODES.contains(&code) {
        Kind::Throttled
    } else if code == "ResourceNotFoundException" {
        Kind::MissingTable
    } else if code == "ValidationException" {
        // DynamoDB words key-schema mismatches as "The provided key element
        // does not match the schema" or "Type mismatch for key …".
        if lower.contains("key") && (lower.contains("schema") || lower.contains("mismatch")) {
            Kind::WrongKey
        } else {
            Kind::Invalid
        }
    } else if code == "AccessDeniedException" {
        Kind::AccessDenied
    } else if (code == "InvalidSignatureException" && lower.contains("signature expired"))
        || code == "RequestTimeTooSkewed"
    {
        Kind::ClockSkew
    } else if BAD_CREDENTIAL_CODES.contains(&code) {
        Kind::BadCredentials
    } else if status.is_some_and(|s| s == 429) {
        // Throttling from something in front of DynamoDB that sets no code.
        Kind::Throttled
    } else {
        // InternalServerError, ServiceUnavailable, TransactionConflict,
        // ReplicatedWriteConflict, and codes newer than this build.
        Kind::Transient
    }
}

#[cfg(test)]
pub(crate) mod tests {
    //! The classifier against real SDK error values, as the SDK builds them
    //! from DynamoDB's replies.

    use super::*;
    use aws_sdk_dynamodb::error::ErrorMetadata;
    use aws_sdk_dynamodb::operation::get_item::GetItemError;
    use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
    use aws_sdk_dynamodb::types::error::{
        ConditionalCheckFailedException, ProvisionedThroughputExceededException,
        RequestLimitExceeded, ResourceNotFoundException, ThrottlingException,
    };
    use aws_smithy_runtime_api::client::result::ConnectorError;
    use aws_smithy_runtime_api::http::StatusCode;
    use aws_smithy_types::body::SdkBody;

    fn reply(status: u16) -> Response {
        Response::new(
            StatusCode::try_from(status).expect("status"),
            SdkBody::empty(),
        )
    }

    fn target() -> Target {
        Target::new("leases", Some("eu-west-1"), None)
    }

    fn get(e: GetItemError, status: u16) -> SdkError<GetItemError, Response> {
        SdkError::service_error(e, reply(status))
    }

    fn update(e: UpdateItemError, status: u16) -> SdkError<UpdateItemError, Response> {
        SdkError::service_error(e, reply(status))
    }

    /// Error metadata as the SDK's deserializer attaches it to every
    /// modeled error: the code from the reply's `__type`, and its message.
    pub(crate) fn sdk_meta(code: &str, message: &str) -> ErrorMetadata {
        ErrorMetadata::builder().code(code).message(message).build()
    }

    fn generic(code: &str, message: &str) -> GetItemError {
        GetItemError::generic(ErrorMetadata::builder().code(code).message(message).build())
    }

    fn message(f: Failure) -> String {
        match f {
            Failure::Other(e) | Failure::Throttled(e) => e.to_string(),
            Failure::ConditionFailed => "condition failed".into(),
        }
    }

    /// A read that DynamoDB refused (status 400) with `code` and `message`,
    /// classified.
    fn refused_read(code: &str, message: &str) -> Failure {
        classify(get(generic(code, message), 400), &target(), "read")
    }

    /// The message of `e` classified as a read's failure, which must be
    /// transient: throttling if `throttled`, another failure if not.
    fn transient_read(e: SdkError<GetItemError, Response>, throttled: bool) -> String {
        let (err, was_throttled) = match classify(e, &target(), "read") {
            Failure::Throttled(err) => (err, true),
            Failure::Other(err) => (err, false),
            Failure::ConditionFailed => panic!("a failed condition, not a transient failure"),
        };
        assert_eq!(was_throttled, throttled, "{err}");
        assert!(err.is_transient(), "{err}");
        err.to_string()
    }

    #[test]
    fn throttling_is_told_apart_by_every_code() {
        let cases = [
            get(
                GetItemError::ProvisionedThroughputExceededException(
                    ProvisionedThroughputExceededException::builder()
                        .message("The level of configured provisioned throughput for the table was exceeded.")
                        .meta(sdk_meta("ProvisionedThroughputExceededException", "The level of configured provisioned throughput for the table was exceeded."))
                        .build(),
                ),
                400,
            ),
            get(
                GetItemError::ThrottlingException(
                    ThrottlingException::builder()
                        .message("Rate exceeded")
                        .meta(sdk_meta("ThrottlingException", "Rate exceeded"))
                        .build(),
                ),
                400,
            ),
            get(
                GetItemError::RequestLimitExceeded(
                    RequestLimitExceeded::builder()
                        .message("Throughput exceeds the current throughput limit for your account.")
                        .meta(sdk_meta("RequestLimitExceeded", "Throughput exceeds the current throughput limit for your account."))
                        .build(),
                ),
                400,
            ),
            get(generic("SomethingNew", "slow down"), 429),
        ];
        for e in cases {
            let m = transient_read(e, true);
            assert!(
                m.contains("throttled the read on table leases in eu-west-1"),
                "{m}"
            );
        }
    }

    #[test]
    fn a_failed_condition_is_a_conflict_not_an_error() {
        let e = update(
            UpdateItemError::ConditionalCheckFailedException(
                ConditionalCheckFailedException::builder()
                    .message("The conditional request failed")
                    .meta(sdk_meta(
                        "ConditionalCheckFailedException",
                        "The conditional request failed",
                    ))
                    .build(),
            ),
            400,
        );
        assert!(matches!(
            classify(e, &target(), "compare-and-swap"),
            Failure::ConditionFailed
        ));
    }

    #[test]
    fn operator_problems_name_the_fix() {
        let missing = get(
            GetItemError::ResourceNotFoundException(
                ResourceNotFoundException::builder()
                    .message("Requested resource not found")
                    .meta(sdk_meta(
                        "ResourceNotFoundException",
                        "Requested resource not found",
                    ))
                    .build(),
            ),
            400,
        );
        let text = message(classify(missing, &target(), "read"));
        assert!(
            text.contains("table leases does not exist in eu-west-1"),
            "{text}"
        );
        assert!(text.contains("create=true"), "{text}");

        let text = message(refused_read(
            "ValidationException",
            "The provided key element does not match the schema",
        ));
        assert!(text.contains("does not have tenure's key schema"), "{text}");
        assert!(text.contains("group_name of type S"), "{text}");

        let f = refused_read(
            "AccessDeniedException",
            "User: arn:aws:iam::123456789012:user/app is not authorized to perform: dynamodb:GetItem",
        );
        assert!(matches!(
            &f,
            Failure::Other(StoreError::Misconfigured { .. })
        ));
        let text = message(f);
        assert!(
            text.contains("lack permission") && text.contains("dynamodb:UpdateItem"),
            "{text}"
        );

        for code in ["UnrecognizedClientException", "InvalidSignatureException"] {
            let text = message(refused_read(
                code,
                "The security token included in the request is invalid.",
            ));
            assert!(text.contains("refused the credentials"), "{code}: {text}");
        }
        let skew = refused_read(
            "InvalidSignatureException",
            "Signature expired: 20240101T000000Z is now earlier than 20240101T001000Z",
        );
        assert!(message(skew).contains("clock is off"));
    }

    #[test]
    fn server_and_network_failures_are_transient() {
        let e = get(generic("InternalServerError", "Internal server error"), 500);
        transient_read(e, false);
        let e: SdkError<GetItemError, Response> =
            SdkError::dispatch_failure(ConnectorError::io("connection refused".into()));
        let m = transient_read(e, false);
        assert!(m.contains("could not reach DynamoDB in eu-west-1"), "{m}");
        let e: SdkError<GetItemError, Response> =
            SdkError::dispatch_failure(ConnectorError::timeout("timed out".into()));
        assert!(matches!(
            classify(e, &target(), "read"),
            Failure::Other(StoreError::Unavailable { .. })
        ));
    }
}
