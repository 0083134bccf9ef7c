//! The heartbeat record the holder of partition 0 writes to the leader
//! topic, and how its offset becomes a fencing token.
//!
//! goneli writes `timestamp%name`; this crate writes a small JSON object so
//! that the record also says who leads, with which token and where to reach
//! it (the known leader), and so that a reader can tell it from anything
//! else in the topic:
//!
//! ```json
//! {"tenure_neli":1,"candidate":"host-a","incarnation":912,"generation":3,"seq":17,
//!  "sent_mono_ns":5123000000,"sent_wall_ms":1732900000000,"timeout_ms":5000,
//!  "token":42,"metadata":{"address":"10.0.0.7:8080"}}
//! ```
//!
//! * `tenure_neli` is the format version; a reader skips records without it
//!   (foreign) or with a newer one.
//! * `incarnation`, `generation` and `sent_mono_ns` are for the writer
//!   itself: one elector instance, the assignment the heartbeat was sent
//!   under, and when on the writer's monotonic clock (meaningless
//!   elsewhere).
//! * `token` is the writer's current fencing token, absent while it holds
//!   the partition without a term (waiting for its first heartbeat, or
//!   fenced).
//! * `timeout_ms` is the writer's heartbeat timeout: how long a reader may
//!   take it as leader after this record.

use serde::{Deserialize, Serialize};
use tenure::Metadata;

/// The format version written, and the newest one read.
pub const FORMAT_VERSION: u32 = 1;

/// Larger records are not heartbeats (metadata is bounded at 4 KiB).
const MAX_RECORD_BYTES: usize = 16 * 1024;

/// One heartbeat, as written to partition 0 of the leader topic.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heartbeat {
    /// The format version ([`FORMAT_VERSION`]).
    #[serde(rename = "tenure_neli")]
    pub format: u32,
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

    /// Parses a record; never panics, whatever the bytes.
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
        Ok(hb)
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
            candidate: "host-a".into(),
            incarnation: u64::MAX,
            generation: 3,
            seq: 17,
            sent_mono_ns: 5_123_000_000,
            sent_wall_ms: 1_732_900_000_000,
            timeout_ms: 5000,
            token: Some(42),
            metadata: Metadata::address("10.0.0.7:8080"),
        }
    }

    #[test]
    fn round_trips() {
        let hb = sample();
        assert_eq!(Heartbeat::decode(&hb.encode()).unwrap(), hb);
        let no_token = Heartbeat {
            token: None,
            ..sample()
        };
        let bytes = no_token.encode();
        assert!(!String::from_utf8_lossy(&bytes).contains("token"));
        assert_eq!(Heartbeat::decode(&bytes).unwrap(), no_token);
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
        v["tenure_neli"] = serde_json::json!(2);
        v["candidate"] = serde_json::json!(7);
        let bytes = serde_json::to_vec(&v).unwrap();
        assert_eq!(Heartbeat::decode(&bytes), Err(HeartbeatError::TooNew(2)));
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
}
