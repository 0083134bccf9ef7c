//! The contents of a lease object: the record's JSON
//! ([`LeaseRecord::encode`]) with one more field, `store_version`, the
//! counter tenure's [`Version`] is read from.

use tenure::{LeaseRecord, RecordError, Version, WallTime};

/// The field holding the version counter.
pub(crate) const VERSION_FIELD: &str = "store_version";

/// Largest object read as a lease. A record is at most a few KiB (its
/// metadata is bounded at 4 KiB); anything far larger is not tenure's, and
/// is refused before its body is read, so a hostile object cannot make a
/// candidate download gigabytes.
pub(crate) const MAX_OBJECT_BYTES: u64 = 64 * 1024;

/// The version a group's first record gets: the wall clock in
/// microseconds. A version so drawn is above every version of an earlier
/// object of the same name (which rose by one per write from an earlier
/// clock reading), so a version is not reused even if the object was
/// deleted and created again.
pub(crate) fn first_version(now: WallTime) -> u64 {
    now.as_millis().saturating_mul(1000).max(1)
}

/// The bytes of the object holding `record` at `version`.
pub(crate) fn encode(record: &LeaseRecord, version: u64) -> Vec<u8> {
    let encoded = record.encode();
    // The record encodes as a JSON object; add the counter to it. Both
    // steps only fail on a bug, and then the record is written without
    // the counter, which reads back as corrupt rather than as a version.
    match serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(&encoded) {
        Ok(mut fields) => {
            fields.insert(VERSION_FIELD.to_owned(), version.into());
            serde_json::to_vec(&fields).unwrap_or(encoded)
        }
        Err(_) => encoded,
    }
}

/// Reads an object's bytes as a record and its version. Not a tenure
/// record, a record from a newer tenure, a damaged record and a record
/// without its counter are [`RecordError`]s: such an object is never
/// written over.
pub(crate) fn decode(bytes: &[u8]) -> Result<(LeaseRecord, Version), RecordError> {
    let record = LeaseRecord::decode(bytes)?;
    #[derive(serde::Deserialize)]
    struct Counter {
        store_version: Option<u64>,
    }
    let counter: Counter = serde_json::from_slice(bytes).map_err(|e| RecordError::Corrupt {
        detail: format!("the {VERSION_FIELD} field: {e}"),
    })?;
    match counter.store_version {
        Some(v) if v > 0 => Ok((record, Version(v))),
        Some(_) => Err(RecordError::Corrupt {
            detail: format!("{VERSION_FIELD} is 0"),
        }),
        None => Err(RecordError::Corrupt {
            detail: format!(
                "no {VERSION_FIELD} field (edited by hand? every write must raise it by one)"
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenure_testkit::sample_record;

    #[test]
    fn round_trips_with_its_version() {
        let bytes = encode(&sample_record(), 42);
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(text.contains("\"store_version\":42"), "{text}");
        assert!(text.contains("\"holder\""), "{text}");
        assert_eq!(decode(&bytes).unwrap(), (sample_record(), Version(42)));
    }

    /// Whether an error is of the expected kind.
    type IsKind = fn(&RecordError) -> bool;

    #[test]
    fn hostile_contents_are_record_errors() {
        let plain = sample_record().encode();
        assert!(matches!(decode(&plain), Err(RecordError::Corrupt { .. })));
        let cases: [(&[u8], IsKind); 6] = [
            (b"", |e| matches!(e, RecordError::Foreign { .. })),
            (b"\xff\xfe", |e| matches!(e, RecordError::Foreign { .. })),
            (b"[1,2]", |e| matches!(e, RecordError::Foreign { .. })),
            (br#"{"v":99}"#, |e| matches!(e, RecordError::TooNew { .. })),
            (
                br#"{"v":1,"holder":null,"token":1,"term_ms":1,"renewed_at_ms":1,"expires_at_ms":1,"store_version":-1}"#,
                |e| matches!(e, RecordError::Corrupt { .. }),
            ),
            (
                br#"{"v":1,"holder":null,"token":1,"term_ms":1,"renewed_at_ms":1,"expires_at_ms":1,"store_version":0}"#,
                |e| matches!(e, RecordError::Corrupt { .. }),
            ),
        ];
        for (bytes, is) in cases {
            let e = decode(bytes).unwrap_err();
            assert!(is(&e), "{:?}: {e:?}", String::from_utf8_lossy(bytes));
        }
        let huge = format!(
            r#"{{"v":1,"holder":null,"token":1,"term_ms":1,"renewed_at_ms":1,"expires_at_ms":1,"store_version":{}}}"#,
            u64::MAX
        );
        assert_eq!(decode(huge.as_bytes()).unwrap().1, Version(u64::MAX));
    }

    #[test]
    fn first_versions_come_from_the_clock() {
        assert_eq!(first_version(WallTime::from_millis(0)), 1);
        assert_eq!(first_version(WallTime::from_millis(5)), 5000);
    }
}
