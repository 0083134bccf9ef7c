//! What can go wrong listing a stream's shards, each message naming the
//! problem and the fix. No message ever holds a credential.

use aws_sdk_kinesis::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};

/// An error of [`KinesisShards`](crate::KinesisShards): a URL that does
/// not parse, or a `ListShards` call that failed.
///
/// A [`Shards`](tenure::Shards) set that lists through the source keeps
/// its catalog as it is on any of them and tries again at its next refresh
/// (the error shows in
/// [`ShardEvent::CatalogFailed`](tenure::shards::ShardEvent::CatalogFailed));
/// [`is_transient`](KinesisError::is_transient) says whether waiting can
/// help.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KinesisError {
    /// The `kinesis://` URL is wrong; the reason names the part and the
    /// fix.
    #[error("invalid Kinesis URL {url}: {reason}")]
    InvalidUrl {
        /// The URL with its secrets replaced.
        url: String,
        /// What is wrong, and how to write it.
        reason: String,
    },
    /// No AWS region: none in the URL, the environment or the profile.
    #[error(
        "no AWS region for Kinesis stream {stream}: add region= to the kinesis:// URL, or set \
         AWS_REGION (or a region in the AWS profile)"
    )]
    NoRegion {
        /// The stream.
        stream: String,
    },
    /// `ResourceNotFoundException`: the stream does not exist (in this
    /// region and account).
    #[error(
        "Kinesis stream {stream:?} does not exist{place}: create it (aws kinesis create-stream \
         --stream-name {stream} --shard-count N), or fix the stream name, region and account"
    )]
    StreamNotFound {
        /// The stream asked for.
        stream: String,
        /// Where it was looked for (` at ENDPOINT`), or empty.
        place: String,
    },
    /// `ResourceInUseException`: the stream is being created, resharded or
    /// deleted. Listing works again once it is `ACTIVE`.
    #[error(
        "Kinesis stream {stream:?} is busy{place} (being created, resharded or deleted): the \
         listing is tried again at the next refresh; if it stays busy, check the stream's status \
         (aws kinesis describe-stream-summary --stream-name {stream})"
    )]
    StreamBusy {
        /// The stream.
        stream: String,
        /// Where (` at ENDPOINT`), or empty.
        place: String,
    },
    /// `LimitExceededException` or throttling: too many `ListShards` calls
    /// on the stream or the account.
    #[error(
        "Kinesis throttled ListShards on stream {stream:?}{place} ({code}): the listing is tried \
         again at the next refresh; if it persists, lengthen the catalog's refresh period or \
         reduce other ListShards callers on the account"
    )]
    Throttled {
        /// The stream.
        stream: String,
        /// Where (` at ENDPOINT`), or empty.
        place: String,
        /// The error code Kinesis sent.
        code: String,
    },
    /// Kinesis could not be reached, or did not answer in time: a
    /// connection refused or reset, a timeout, TLS, or no credentials to
    /// sign with.
    #[error(
        "could not reach Kinesis{place} to list stream {stream:?}: {detail}; check the endpoint \
         and region, the network, and that AWS credentials are available"
    )]
    Unavailable {
        /// The stream.
        stream: String,
        /// Where (` at ENDPOINT`), or empty.
        place: String,
        /// What the SDK reported.
        detail: String,
    },
    /// The listing did not end: more than
    /// [`MAX_LISTED_SHARDS`](crate::MAX_LISTED_SHARDS) shards, or
    /// page after empty page with a `NextToken`. No Kinesis stream has
    /// that many shards; the endpoint is something else, or broken.
    #[error(
        "listing stream {stream:?}{place} did not end ({detail}): check that the endpoint is Kinesis"
    )]
    Endless {
        /// The stream.
        stream: String,
        /// Where (` at ENDPOINT`), or empty.
        place: String,
        /// How far it went.
        detail: String,
    },
    /// Kinesis refused the call for another reason (access denied, an
    /// invalid argument, an expired paging token).
    #[error(
        "Kinesis refused ListShards on stream {stream:?}{place} ({code}: {message}): for \
         AccessDeniedException grant kinesis:ListShards on the stream; otherwise check the \
         stream name and the page size (1 to 10000)"
    )]
    Refused {
        /// The stream.
        stream: String,
        /// Where (` at ENDPOINT`), or empty.
        place: String,
        /// The error code Kinesis sent.
        code: String,
        /// Its message.
        message: String,
    },
}

impl KinesisError {
    /// Whether the same call may succeed later without a change of
    /// configuration: a busy stream, throttling, an unreachable endpoint.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            KinesisError::StreamBusy { .. }
                | KinesisError::Throttled { .. }
                | KinesisError::Unavailable { .. }
        )
    }
}

/// Sorts a failed `ListShards` call.
pub(crate) fn classify<E, R>(err: &SdkError<E, R>, stream: &str, place: &str) -> KinesisError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug,
{
    let stream = stream.to_owned();
    let place = place.to_owned();
    if !matches!(err, SdkError::ServiceError(_)) {
        return KinesisError::Unavailable {
            stream,
            place,
            detail: DisplayErrorContext(err).to_string(),
        };
    }
    let code = err.code().unwrap_or("no error code").to_owned();
    match code.as_str() {
        "ResourceNotFoundException" => KinesisError::StreamNotFound { stream, place },
        "ResourceInUseException" => KinesisError::StreamBusy { stream, place },
        "LimitExceededException"
        | "ThrottlingException"
        | "ProvisionedThroughputExceededException" => KinesisError::Throttled {
            stream,
            place,
            code,
        },
        _ => KinesisError::Refused {
            stream,
            place,
            message: err.message().unwrap_or("").to_owned(),
            code,
        },
    }
}
