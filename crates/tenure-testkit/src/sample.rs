//! A lease record for the record-codec tests of the core and the stores.

use std::time::Duration;

use tenure::{Holder, LeaseRecord, Metadata, WallTime};

/// A held lease as a store keeps one: `host-a` (incarnation 7) holds token
/// 3 for a 10 s term renewed at 1 s, and publishes its address. Tests
/// change the fields they are about with `..sample_record()`.
pub fn sample_record() -> LeaseRecord {
    LeaseRecord {
        holder: Some(Holder {
            id: "host-a".into(),
            incarnation: 7,
        }),
        token: 3,
        term: Duration::from_secs(10),
        renewed_at: WallTime::from_millis(1_000),
        expires_at: WallTime::from_millis(11_000),
        metadata: Metadata::address("10.0.0.7:8080"),
    }
}
