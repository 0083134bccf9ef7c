//! The lease record's codec and the bounds on names and metadata: the
//! bytes every store keeps, so a record written by one version of tenure
//! reads in the next, and a foreign, corrupt or newer one is a typed error.

use std::time::Duration;

use tenure::record::MAX_METADATA_BYTES;
use tenure::{ConfigError, GroupName, LeaseRecord, Metadata, RecordError};
use tenure_testkit::sample_record;

/// Asserts that `result` is an error matching `pattern`, and shows what
/// it was otherwise (an `Ok` record, or another error).
macro_rules! assert_err {
    ($result:expr, $pattern:pat) => {
        match $result {
            Err($pattern) => {}
            other => panic!("expected Err({}), got {other:?}", stringify!($pattern)),
        }
    };
}

/// `record` encoded, then decoded.
fn round_trip(record: &LeaseRecord) -> LeaseRecord {
    LeaseRecord::decode(&record.encode()).unwrap()
}

#[test]
fn round_trips() {
    let released = LeaseRecord {
        holder: None,
        ..sample_record()
    };
    for record in [sample_record(), released] {
        assert_eq!(round_trip(&record), record);
    }
}

#[test]
fn foreign_corrupt_and_new_records_are_typed_errors() {
    assert_err!(
        LeaseRecord::decode(b"\x00\xffgarbage"),
        RecordError::Foreign { .. }
    );
    assert_err!(
        LeaseRecord::decode(br#"{"owner":"someone"}"#),
        RecordError::Foreign { .. }
    );
    assert_err!(
        LeaseRecord::decode(br#"{"v":99,"anything":true}"#),
        RecordError::TooNew { found: 99, .. }
    );
    assert_err!(
        LeaseRecord::decode(br#"{"v":1,"holder":null}"#),
        RecordError::Corrupt { .. }
    );
    let zero_token = LeaseRecord {
        token: 0,
        ..sample_record()
    };
    assert_err!(
        LeaseRecord::decode(&zero_token.encode()),
        RecordError::Corrupt { .. }
    );
}

#[test]
fn term_rounds_up_to_whole_milliseconds() {
    let r = LeaseRecord {
        term: Duration::from_micros(1500),
        ..sample_record()
    };
    assert_eq!(round_trip(&r).term, Duration::from_millis(2));
}

#[test]
fn group_names() {
    assert!(GroupName::new("a").is_ok());
    assert!(GroupName::new("ü".repeat(127)).is_ok(), "254 bytes");
    assert!(GroupName::new("x".repeat(255)).is_ok());
    assert_err!(
        GroupName::new("x".repeat(256)),
        ConfigError::NameTooLong { len: 256, .. }
    );
    assert_err!(GroupName::new(""), ConfigError::EmptyName { .. });
    assert_err!(GroupName::new("a\nb"), ConfigError::ControlCharacter { .. });
}

#[test]
fn metadata_is_bounded() {
    assert!(Metadata::address("x").validate().is_ok());
    let big = Metadata::new().with("blob", "x".repeat(MAX_METADATA_BYTES));
    assert_err!(big.validate(), ConfigError::MetadataTooLarge { .. });
}
