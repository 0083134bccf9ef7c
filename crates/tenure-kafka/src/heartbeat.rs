//! The heartbeat record the holder of partition 0 writes to the leader
//! topic, and how its offset becomes a fencing token.
//!
//! goneli writes `timestamp%name`; this crate writes a small JSON object so
//! that the record also says who leads, with which token and where to reach
//! it (the known leader), and so that a reader can tell it from anything
//! else in the topic:
//!
//! ```json
//! {"tenure_neli":2,"group":"billing","group_generation":7,"candidate":"host-a",
//!  "incarnation":912,"generation":3,"seq":17,"sent_mono_ns":5123000000,
//!  "sent_wall_ms":1732900000000,"timeout_ms":5000,"token":42,
//!  "metadata":{"address":"10.0.0.7:8080"}}
//! ```
//!
//! * `tenure_neli` is the format version; a reader skips records without it
//!   (foreign) or with a newer one. Version 1 lacked `group`,
//!   `group_generation` and `released`; it is still read.
//! * `group` is the consumer group id the writer belongs to: readers skip
//!   heartbeats of other groups sharing the topic.
//! * `group_generation` is the consumer group's generation under which the
//!   writer holds partition 0 (Kafka's, as librdkafka reports it): a holder
//!   that reads a heartbeat of a later generation knows its own assignment
//!   is stale.
//! * `incarnation`, `generation`, `seq` and `sent_mono_ns` are for the
//!   writer itself: one elector instance, the assignment the heartbeat was
//!   sent under (counted by the writer), its sequence number and when on
//!   the writer's boot clock. A writer never trusts these fields when it
//!   reads its own heartbeats back: it looks the sequence number up in what
//!   it sent, so a record forged in its name renews nothing.
//! * `token` is the writer's current fencing token, absent while it holds
//!   the partition without a term (waiting for its first heartbeat, or
//!   fenced). A token is the offset (plus one) of an earlier record, so a
//!   token above the record's own offset plus one is impossible and the
//!   record is not trusted.
//! * `timeout_ms` is the writer's heartbeat timeout (1 ms to
//!   [`MAX_TIMEOUT`]): how long a reader may take it as leader after this
//!   record.
//! * `released` marks the last record a holder writes when it gives up
//!   partition 0 after its term has drained: readers need not wait for its
//!   term to run out.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tenure::Metadata;

/// The format version written, and the newest one read.
pub const FORMAT_VERSION: u32 = 2;

/// The longest heartbeat timeout: its session timeout (three of them) is
/// then Kafka's default `group.max.session.timeout.ms`, 30 minutes.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(600);

/// Larger records are not heartbeats (metadata is bounded at 4 KiB).
const MAX_RECORD_BYTES: usize = 16 * 1024;

/// One heartbeat, as written to partition 0 of the leader topic.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heartbeat {
    /// The format version ([`FORMAT_VERSION`]).
    #[serde(rename = "tenure_neli")]
    pub format: u32,
    /// The consumer group id of the writer (absent in format 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// The consumer group generation under which the writer holds
    /// partition 0 (absent in format 1, or if librdkafka did not know it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_generation: Option<i32>,
    /// The writer's candidate id.
    pub candidate: String,
    /// The writer's elector instance.
    pub incarnation: u64,
    /// Which assignment of partition 0 (counted by the writer) it was sent
    /// under.
    pub generation: u64,
    /// The writer's sequence number.
    pub seq: u64,
    /// When it was sent, on the writer's monotonic clock, in nanoseconds.
    pub sent_mono_ns: u64,
    /// When it was sent, by the writer's wall clock, in Unix milliseconds.
    pub sent_wall_ms: u64,
    /// The writer's heartbeat timeout in milliseconds.
    pub timeout_ms: u64,
    /// The writer's fencing token, if it leads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<u64>,
    /// The writer gave up partition 0 after its term (if any) drained.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub released: bool,
    /// What the writer publishes (its address, say).
    #[serde(default)]
    pub metadata: Metadata,
}

/// Why a record of the leader topic is not a heartbeat this build reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeartbeatError {
    /// Not a tenure heartbeat: another program writes to the topic.
    #[error("not a tenure heartbeat ({0}): another program writes to the leader topic; give tenure a topic of its own")]
    Foreign(String),
    /// Written by a newer tenure-kafka.
    #[error("heartbeat format {0} is newer than this build reads ({FORMAT_VERSION}): upgrade tenure-kafka on this host")]
    TooNew(u32),
}

impl Heartbeat {
    /// The record's bytes.
    pub fn encode(&self) -> Vec<u8> {
        // Serialising plain strings, integers and a string map cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Parses a record; never panics, whatever the bytes. Checks what a
    /// record says about itself (sizes, a heartbeat timeout within 1 ms and
    /// [`MAX_TIMEOUT`]); [`Heartbeat::token_fits`] checks its token against
    /// its offset.
    pub fn decode(bytes: &[u8]) -> Result<Heartbeat, HeartbeatError> {
        if bytes.len() > MAX_RECORD_BYTES {
            return Err(HeartbeatError::Foreign(format!(
                "{} bytes long",
                bytes.len()
            )));
        }
        // Read the version first so a newer format with other fields is
        // reported as newer, not as foreign.
        #[derive(Deserialize)]
        struct Version {
            #[serde(rename = "tenure_neli")]
            format: u32,
        }
        let version: Version =
            serde_json::from_slice(bytes).map_err(|e| HeartbeatError::Foreign(e.to_string()))?;
        if version.format > FORMAT_VERSION {
            return Err(HeartbeatError::TooNew(version.format));
        }
        let hb: Heartbeat =
            serde_json::from_slice(bytes).map_err(|e| HeartbeatError::Foreign(e.to_string()))?;
        if hb.candidate.is_empty() || hb.candidate.len() > tenure::record::MAX_CANDIDATE_BYTES {
            return Err(HeartbeatError::Foreign(
                "candidate id empty or too long".into(),
            ));
        }
        if hb
            .group
            .as_ref()
            .is_some_and(|g| g.is_empty() || g.len() > 255)
        {
            return Err(HeartbeatError::Foreign("group id empty or too long".into()));
        }
        if hb.timeout_ms == 0 || u128::from(hb.timeout_ms) > MAX_TIMEOUT.as_millis() {
            return Err(HeartbeatError::Foreign(format!(
                "heartbeat timeout of {} ms, outside 1 ms to {MAX_TIMEOUT:?}",
                hb.timeout_ms
            )));
        }
        Ok(hb)
    }

    /// The writer's heartbeat timeout.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }

    /// Whether the record's token could have been handed out before the
    /// record was written at `offset`: a token is an earlier record's
    /// offset plus one, so it is at most `offset`. A higher one is forged,
    /// or was carried over from a topic that has since been recreated.
    pub fn token_fits(&self, offset: i64) -> bool {
        match self.token {
            None => true,
            Some(t) => u64::try_from(offset).is_ok_and(|o| t >= 1 && t <= o),
        }
    }

    /// Whether it belongs to consumer group `group` (format 1 records
    /// carry no group and are taken as this group's).
    pub fn is_of_group(&self, group: &str) -> bool {
        self.group.as_deref().is_none_or(|g| g == group)
    }
}

/// The fencing token of a term that began with the heartbeat at `offset`.
///
/// It is the offset plus one, so that tokens start at 1 as with every other
/// tenure backend and a resource initialised to 0 accepts the first term.
/// Offsets of a partition only grow, so tokens rise across leaders.
pub fn token_of(offset: i64) -> Option<u64> {
    u64::try_from(offset).ok()?.checked_add(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Heartbeat {
        Heartbeat {
            format: FORMAT_VERSION,
            group: Some("billing".into()),
            group_generation: Some(7),
            candidate: "host-a".into(),
            incarnation: u64::MAX,
            generation: 3,
            seq: 17,
            sent_mono_ns: 5_123_000_000,
            sent_wall_ms: 1_732_900_000_000,
            timeout_ms: 5000,
            token: Some(42),
            released: false,
            metadata: Metadata::address("10.0.0.7:8080"),
        }
    }

    /// Encodes `hb`, checks that it decodes to `hb` again, and returns
    /// the record as text.
    #[track_caller]
    fn round_trip(hb: &Heartbeat) -> String {
        let bytes = hb.encode();
        assert_eq!(Heartbeat::decode(&bytes).unwrap(), *hb);
        String::from_utf8(bytes).expect("a JSON record")
    }

    #[test]
    fn round_trips() {
        round_trip(&sample());
        let no_token = Heartbeat {
            token: None,
            ..sample()
        };
        assert!(!round_trip(&no_token).contains("token"));
    }

    #[test]
    fn unknown_fields_are_accepted() {
        let mut v: serde_json::Value = serde_json::from_slice(&sample().encode()).unwrap();
        v["future"] = serde_json::json!("x");
        let bytes = serde_json::to_vec(&v).unwrap();
        assert_eq!(Heartbeat::decode(&bytes).unwrap(), sample());
    }

    #[test]
    fn foreign_and_newer_records_are_refused_without_panic() {
        for bytes in [
            &b""[..],
            b"1732900000000000000%goneli-leader",
            b"{}",
            b"[1,2]",
            b"{\"tenure_neli\":1}",
            b"{\"tenure_neli\":\"1\"}",
            b"\xff\xfe",
        ] {
            assert!(
                matches!(Heartbeat::decode(bytes), Err(HeartbeatError::Foreign(_))),
                "{bytes:?}"
            );
        }
        let big = vec![b' '; MAX_RECORD_BYTES + 1];
        assert!(matches!(
            Heartbeat::decode(&big),
            Err(HeartbeatError::Foreign(_))
        ));
        let mut v: serde_json::Value = serde_json::from_slice(&sample().encode()).unwrap();
        v["tenure_neli"] = serde_json::json!(FORMAT_VERSION + 1);
        v["candidate"] = serde_json::json!(7);
        let bytes = serde_json::to_vec(&v).unwrap();
        assert_eq!(
            Heartbeat::decode(&bytes),
            Err(HeartbeatError::TooNew(FORMAT_VERSION + 1))
        );
        let empty = Heartbeat {
            candidate: String::new(),
            ..sample()
        };
        assert!(Heartbeat::decode(&empty.encode()).is_err());
    }

    #[test]
    fn tokens_are_offsets_plus_one() {
        assert_eq!(token_of(0), Some(1));
        assert_eq!(token_of(41), Some(42));
        assert_eq!(token_of(-1), None);
        assert!(token_of(5) < token_of(6));
    }

    #[test]
    fn format_1_records_are_read_as_this_groups() {
        let v1 = br#"{"tenure_neli":1,"candidate":"old","incarnation":1,"generation":1,"seq":1,
            "sent_mono_ns":1,"sent_wall_ms":1,"timeout_ms":5000,"token":3}"#;
        let hb = Heartbeat::decode(v1).unwrap();
        assert_eq!(hb.group, None);
        assert_eq!(hb.group_generation, None);
        assert!(!hb.released);
        assert!(hb.is_of_group("anything"));
        let mine = sample();
        assert!(mine.is_of_group("billing"));
        assert!(!mine.is_of_group("payroll"));
    }

    #[test]
    fn released_round_trips_and_is_left_out_when_false() {
        assert!(!round_trip(&sample()).contains("released"));
        round_trip(&Heartbeat {
            released: true,
            ..sample()
        });
    }

    #[test]
    fn timeouts_outside_the_allowed_range_are_refused() {
        for timeout_ms in [0, u64::MAX, 600_001] {
            let hb = Heartbeat {
                timeout_ms,
                ..sample()
            };
            assert!(
                matches!(
                    Heartbeat::decode(&hb.encode()),
                    Err(HeartbeatError::Foreign(_))
                ),
                "{timeout_ms}"
            );
        }
        let max = Heartbeat {
            timeout_ms: 600_000,
            ..sample()
        };
        assert_eq!(
            Heartbeat::decode(&max.encode()).unwrap().timeout(),
            MAX_TIMEOUT
        );
        let empty_group = Heartbeat {
            group: Some(String::new()),
            ..sample()
        };
        assert!(Heartbeat::decode(&empty_group.encode()).is_err());
    }

    #[test]
    fn a_token_must_come_from_an_earlier_offset() {
        let with = |token| Heartbeat { token, ..sample() };
        assert!(with(None).token_fits(0));
        assert!(
            with(Some(42)).token_fits(42),
            "elected at 41, renewing at 42"
        );
        assert!(with(Some(42)).token_fits(1000));
        assert!(!with(Some(43)).token_fits(42));
        assert!(!with(Some(u64::MAX)).token_fits(i64::MAX));
        assert!(!with(Some(0)).token_fits(5), "tokens start at 1");
        assert!(!with(Some(1)).token_fits(-1));
    }
}
