//! Reading partition 0 of the leader topic, in order, from its last record
//! on, without joining the consumer group: what every candidate (for its
//! elections and the known leader) and every observer reads.
//!
//! A candidate reads the partition with this reader for its whole life, not
//! with its group consumer (whose assignment comes and goes), so that it
//! has read every record written since it started before it elects: the
//! heartbeats of a holder that keeps renewing while the group has already
//! given partition 0 away come before its own, and hold its election back
//! (see [`neli`](crate::neli)).

use std::time::Duration;

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use crate::config::KafkaConfig;
use crate::error::KafkaBackendError;
use crate::heartbeat::Heartbeat;

/// What a poll of the reader found.
#[derive(Debug)]
pub(crate) enum Read {
    /// The reader is positioned: every record written from now on will be
    /// read; earlier ones were not.
    Positioned,
    /// A record at `offset`: a heartbeat this build reads, or `None`.
    Record {
        /// Its offset.
        offset: i64,
        /// The heartbeat, if it is one.
        heartbeat: Option<Heartbeat>,
    },
    /// The reader cannot read (the message, without secrets).
    Error(String),
}

/// An assign-only consumer of partition 0.
pub(crate) struct Reader {
    consumer: BaseConsumer<ReaderCtx>,
    topic: String,
    positioned: bool,
}

impl Reader {
    /// A reader of partition 0 of `topic`, starting at its last record.
    pub(crate) fn new(config: &KafkaConfig, topic: &str) -> Result<Reader, KafkaBackendError> {
        let consumer: BaseConsumer<ReaderCtx> = config
            .client_config(&config.reader_properties())
            .create_with_context(ReaderCtx)
            .map_err(|e| KafkaBackendError::Client {
                what: "leader topic reader",
                detail: config.scrub(&e.to_string()),
            })?;
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, 0, Offset::OffsetTail(1))
            .and_then(|()| consumer.assign(&tpl))
            .map_err(|e| KafkaBackendError::Client {
                what: "leader topic reader",
                detail: config.scrub(&format!("cannot read partition 0 of {topic}: {e}")),
            })?;
        Ok(Reader {
            consumer,
            topic: topic.to_owned(),
            positioned: false,
        })
    }

    /// Reads what has arrived, waiting up to `wait` for the first of it,
    /// at most `max` records; hands each finding to `found`.
    pub(crate) fn poll(&mut self, wait: Duration, max: usize, mut found: impl FnMut(Read)) {
        for i in 0..max {
            let timeout = if i == 0 { wait } else { Duration::ZERO };
            match self.consumer.poll(timeout) {
                None => return,
                Some(Ok(msg)) => {
                    if msg.topic() != self.topic || msg.partition() != 0 {
                        continue;
                    }
                    if !self.positioned {
                        self.positioned = true;
                        found(Read::Positioned);
                    }
                    let heartbeat = match msg.payload().map(Heartbeat::decode) {
                        Some(Ok(hb)) => Some(hb),
                        Some(Err(e)) => {
                            tracing::debug!(offset = msg.offset(), error = %e, "skipping a record of the leader topic");
                            None
                        }
                        None => None,
                    };
                    found(Read::Record {
                        offset: msg.offset(),
                        heartbeat,
                    });
                }
                // Reached the end: whatever comes next is read.
                Some(Err(KafkaError::PartitionEOF(0))) => {
                    if !self.positioned {
                        self.positioned = true;
                        found(Read::Positioned);
                    }
                }
                Some(Err(KafkaError::PartitionEOF(_))) => {}
                Some(Err(e)) => {
                    found(Read::Error(e.to_string()));
                    return;
                }
            }
        }
    }

    /// The fatal error of the reader's client, if librdkafka reported one.
    pub(crate) fn fatal_error(&self) -> Option<String> {
        self.consumer
            .client()
            .fatal_error()
            .map(|(code, detail)| format!("{detail} ({code:?})"))
    }
}

/// Closes `reader` on a thread of its own and waits at most `bound`:
/// librdkafka's consumer close can hang on a hung broker, and the caller
/// must end regardless (the closing thread is then abandoned).
pub(crate) fn close_bounded(reader: Reader, bound: Duration, topic: &str) {
    let (done_tx, done) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("tenure-kafka-close".into())
        .spawn(move || {
            drop(reader);
            let _ = done_tx.send(());
        });
    if spawned.is_ok() && done.recv_timeout(bound).is_err() {
        tracing::warn!(topic, timeout = ?bound, "closing the leader topic reader timed out; abandoning it");
    }
}

struct ReaderCtx;

impl ClientContext for ReaderCtx {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        crate::worker::log(level, fac, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::debug!(error = %error, reason, "kafka reader error");
    }
}

impl ConsumerContext for ReaderCtx {}
