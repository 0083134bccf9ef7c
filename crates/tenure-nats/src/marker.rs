//! What a message in the bucket's stream is: a lease record, or a marker
//! left where someone deleted or purged the key (`nats kv del`, `nats kv
//! purge`) or where the server removed it.
//!
//! A marker is never read as "no record": the key's last fencing token went
//! with the record, and creating the group again would start its tokens
//! over at 1 while an old holder may still act on a higher one. Reads (one
//! group or a batch) report it as an error naming the key and the fix; the
//! change feed turns it into a hint, so the elector reads and reports the
//! same error. A `KV-Operation` value this build does not know is treated
//! the same way in both: it is no record tenure can trust.

use async_nats::HeaderMap;
use tenure::{GroupName, RecordError, StoreError};

/// The header JetStream key-value marks deletions and purges with.
const KV_OPERATION: &str = "KV-Operation";

/// The header servers from 2.11 mark messages they removed with (an
/// expired or purged key, with subject delete markers enabled).
const MARKER_REASON: &str = "Nats-Marker-Reason";

/// Longest part of a header value shown in an error (store contents, not
/// secrets, but not to be trusted with the length of a message either).
const SHOWN: usize = 40;

/// What a message in the bucket's stream holds.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A value written with put or update: decoded as a lease record.
    Record,
    /// No record: what kind of marker, for the error.
    Marker(String),
}

/// Classifies a message by its headers.
pub(crate) fn kind_of(headers: Option<&HeaderMap>) -> Kind {
    let Some(headers) = headers else {
        return Kind::Record;
    };
    if let Some(op) = headers.get(KV_OPERATION) {
        return match op.as_str() {
            "PUT" => Kind::Record,
            "DEL" => Kind::Marker("a deletion marker (`nats kv del`)".into()),
            "PURGE" => Kind::Marker("a purge marker (`nats kv purge`)".into()),
            other => Kind::Marker(format!(
                "a message with an unknown KV-Operation {:?}",
                shown(other)
            )),
        };
    }
    if let Some(reason) = headers.get(MARKER_REASON) {
        return Kind::Marker(format!(
            "a marker the server left removing the key (Nats-Marker-Reason {:?})",
            shown(reason.as_str())
        ));
    }
    Kind::Record
}

fn shown(value: &str) -> String {
    value.chars().take(SHOWN).collect()
}

/// The error a read reports for a marker on `key`: a record that must not
/// be used, naming the key and how to recover.
pub(crate) fn marker_error(group: &GroupName, bucket: &str, key: &str, what: &str) -> StoreError {
    StoreError::Record {
        group: group.clone(),
        source: RecordError::Corrupt {
            detail: format!(
                "key {key} of the NATS key-value bucket {bucket:?} holds {what} instead of the \
                 lease: the group's last fencing token is gone, and tenure will not start its \
                 tokens over at 1 while an old holder may still act. Never delete or purge a \
                 group's key (`tenure release --force` clears a group and keeps its token). To \
                 recover, stop the group's candidates for at least one term, then elect under \
                 another group name; or, if whatever the tokens guard accepts them from 1 again, \
                 remove the marker with `nats stream purge KV_{bucket} --subject '$KV.{bucket}.{key}'` \
                 (buckets tenure creates refuse purges)"
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, *v);
        }
        h
    }

    #[test]
    fn markers_and_unknown_operations_are_no_record() {
        assert_eq!(kind_of(None), Kind::Record);
        assert_eq!(kind_of(Some(&headers(&[]))), Kind::Record);
        assert_eq!(
            kind_of(Some(&headers(&[(KV_OPERATION, "PUT")]))),
            Kind::Record
        );
        for (name, value, needle) in [
            (KV_OPERATION, "DEL", "deletion"),
            (KV_OPERATION, "PURGE", "purge"),
            (KV_OPERATION, "put", "unknown KV-Operation \"put\""),
            (KV_OPERATION, "ROLLUP", "unknown KV-Operation"),
            (MARKER_REASON, "MaxAge", "MaxAge"),
        ] {
            match kind_of(Some(&headers(&[(name, value)]))) {
                Kind::Marker(what) => assert!(what.contains(needle), "{value}: {what}"),
                Kind::Record => panic!("{name}: {value} read as a record"),
            }
        }
    }

    #[test]
    fn the_error_names_the_key_and_the_fix() {
        let group = GroupName::new("billing").unwrap();
        let e = marker_error(&group, "leases", "tenure.billing", "a deletion marker").to_string();
        for needle in [
            "billing",
            "tenure.billing",
            "\"leases\"",
            "another group name",
            "nats stream purge KV_leases --subject '$KV.leases.tenure.billing'",
        ] {
            assert!(e.contains(needle), "{needle}: {e}");
        }
    }
}
