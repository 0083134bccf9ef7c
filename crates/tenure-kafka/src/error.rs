//! Typed errors of the Kafka backend, each naming the problem and the fix.

/// A failure of the Kafka backend.
///
/// Construction ([`KafkaCoordinator::new`](crate::KafkaCoordinator::new),
/// [`from_url`](crate::KafkaCoordinator::from_url),
/// [`KafkaObserver::start`](crate::KafkaObserver::start)) returns it
/// directly. While running, recoverable broker errors are logged and
/// retried by librdkafka, and reported as
/// [`Event::StoreHealth`](tenure::Event::StoreHealth); a fatal one stops the
/// elector and is kept in [`KafkaStatus::fatal_error`](crate::KafkaStatus::fatal_error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KafkaBackendError {
    /// A setting is invalid.
    #[error("invalid Kafka configuration: {reason}")]
    Config {
        /// What is wrong and how to fix it.
        reason: String,
    },
    /// A `kafka://` URL is malformed.
    #[error("invalid Kafka URL: {reason}; the form is kafka://host:port[,host:port…]/TOPIC[?group=ID&heartbeat_timeout=5s&…]")]
    InvalidUrl {
        /// What is wrong.
        reason: String,
    },
    /// librdkafka refused to create a client.
    #[error("cannot create the Kafka {what}: {detail}")]
    Client {
        /// Which client (consumer, producer, observer, admin).
        what: &'static str,
        /// librdkafka's message.
        detail: String,
    },
    /// The leader topic could not be created or has the wrong shape.
    #[error("leader topic {topic:?}: {detail}")]
    Topic {
        /// The leader topic, which the fix names.
        topic: String,
        /// What went wrong and how to fix it.
        detail: String,
    },
    /// librdkafka reported a fatal error: the client cannot continue.
    #[error("fatal Kafka error: {detail}; the elector has stopped, start a new one after fixing the cause")]
    Fatal {
        /// librdkafka's message.
        detail: String,
    },
    /// The leader topic's offsets went back: it was deleted and recreated,
    /// or lost data (one replica, an unclean leader election, a broker
    /// that keeps its data in memory restarted). Fencing tokens would
    /// restart below ones already handed out, so the candidate stopped.
    #[error("the offsets of leader topic {topic:?} went back: the next fencing token would be {next}, after {highest} may have been handed out; the topic was deleted and recreated, or lost data, so this candidate stopped. Give the group a new leader topic (or group name) and restart the candidates; keep the topic at replication 3 with min.insync.replicas=2 so it cannot happen again")]
    TopicRecreated {
        /// The leader topic, which the fix names.
        topic: String,
        /// The highest token that may have been handed out.
        highest: u64,
        /// The token the partition offers now.
        next: u64,
    },
    /// A thread could not be started.
    #[error("cannot start the Kafka client thread: {detail}")]
    Thread {
        /// The operating system's message.
        detail: String,
    },
}

impl KafkaBackendError {
    pub(crate) fn config(reason: impl Into<String>) -> Self {
        KafkaBackendError::Config {
            reason: reason.into(),
        }
    }

    pub(crate) fn url(reason: impl ToString) -> Self {
        KafkaBackendError::InvalidUrl {
            reason: reason.to_string(),
        }
    }
}
