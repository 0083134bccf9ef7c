//! The mapping between a [`LeaseRecord`] and a DynamoDB item: one attribute
//! per field, so that the console shows who leads, and a conditional
//! `UpdateItem` for every write.
//!
//! Decoding never panics and never guesses: an item without
//! [`FORMAT`] is not a tenure lease ([`RecordError::Foreign`]), one with a
//! higher format was written by a newer tenure ([`RecordError::TooNew`]),
//! and one whose attributes are missing, mistyped or contradict each other
//! is [`RecordError::Corrupt`]. Attributes tenure does not know are ignored,
//! so an operator may add their own (a TTL, a note).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use tenure::{Holder, LeaseRecord, Metadata, RecordError, Version, Versioned, WallTime};

/// The table's hash key (type S): the group name, verbatim.
pub const KEY: &str = "group_name";
/// The item format (N). Its presence marks an item as tenure's.
pub const FORMAT: &str = "tenure_format";
/// The store's version (N): 1 on the first write, +1 on every write.
/// Every compare-and-swap is conditioned on it.
pub const VERSION: &str = "version";
/// The holder's candidate id (S); absent while the lease is released.
pub const HOLDER: &str = "holder";
/// The holder's incarnation (N), a random number per elector process;
/// absent while the lease is released.
pub const INCARNATION: &str = "incarnation";
/// The fencing token (N): raised with every change of holder, kept by
/// renewals and releases.
pub const TOKEN: &str = "token";
/// The term the holder promised to respect, in milliseconds (N).
pub const TERM_MS: &str = "term_ms";
/// When the holder sent the write, in Unix milliseconds of its wall clock (N).
pub const RENEWED_AT_MS: &str = "renewed_at_ms";
/// `renewed_at_ms + term_ms` (N).
pub const EXPIRES_AT_MS: &str = "expires_at_ms";
/// What the leader publishes (its address, say), as a JSON object of
/// strings (S). JSON rather than a DynamoDB map because metadata keys may
/// be empty, which map keys may not.
pub const METADATA: &str = "metadata";
/// [`RENEWED_AT_MS`] as RFC 3339 text (S), for people; never read back.
pub const RENEWED_AT_TEXT: &str = "renewed_at";
/// [`EXPIRES_AT_MS`] as RFC 3339 text (S), for people; never read back.
pub const EXPIRES_AT_TEXT: &str = "expires_at";

/// The item format this build writes and the newest it reads.
pub const ITEM_FORMAT: u32 = 1;

/// One conditional `UpdateItem`, ready to send.
#[derive(Debug)]
pub(crate) struct Write {
    pub(crate) update: String,
    pub(crate) condition: String,
    pub(crate) names: HashMap<String, String>,
    pub(crate) values: HashMap<String, AttributeValue>,
    /// The version the item has once the write applies.
    pub(crate) next: Version,
}

/// The `UpdateItem` that writes `record` if the item's version is still
/// `expected` (`None`: only if there is no item).
///
/// A release (`holder: None`) is kinsumer's deregistration: `REMOVE` of the
/// holder under the version condition, keeping the token. A takeover sets
/// the new holder and the raised token in the same conditional write, so
/// no reader ever sees one without the other.
///
/// `None` if `expected` is `u64::MAX`: versions count writes from 1, so no
/// item this crate wrote can have it, and the next version would not fit.
pub(crate) fn write(expected: Option<Version>, record: &LeaseRecord) -> Option<Write> {
    let next = match expected {
        None => Version(1),
        Some(Version(v)) => Version(v.checked_add(1)?),
    };
    let mut names = HashMap::new();
    let mut values = HashMap::new();
    let mut sets = Vec::new();
    let mut set = |attr: &str, value: AttributeValue| {
        let i = sets.len();
        names.insert(format!("#a{i}"), attr.to_owned());
        values.insert(format!(":a{i}"), value);
        sets.push(format!("#a{i} = :a{i}"));
    };
    set(FORMAT, number(u64::from(ITEM_FORMAT)));
    set(VERSION, number(next.0));
    set(TOKEN, number(record.token));
    set(TERM_MS, number(ceil_millis(record.term)));
    set(RENEWED_AT_MS, number(record.renewed_at.as_millis()));
    set(EXPIRES_AT_MS, number(record.expires_at.as_millis()));
    set(METADATA, AttributeValue::S(metadata_json(&record.metadata)));
    let texts = [
        (RENEWED_AT_TEXT, rfc3339(record.renewed_at)),
        (EXPIRES_AT_TEXT, rfc3339(record.expires_at)),
    ];
    let mut removes = Vec::new();
    for (attr, text) in texts {
        match text {
            Some(t) => set(attr, AttributeValue::S(t)),
            // Beyond year 9999: no text, and none left over from before.
            None => removes.push(attr),
        }
    }
    match &record.holder {
        Some(h) => {
            set(HOLDER, AttributeValue::S(h.id.clone()));
            set(INCARNATION, number(h.incarnation));
        }
        None => removes.extend([HOLDER, INCARNATION]),
    }
    let mut update = format!("SET {}", sets.join(", "));
    if !removes.is_empty() {
        let mut parts = Vec::new();
        for (j, attr) in removes.into_iter().enumerate() {
            names.insert(format!("#r{j}"), attr.to_owned());
            parts.push(format!("#r{j}"));
        }
        let _ = write!(update, " REMOVE {}", parts.join(", "));
    }
    names.insert("#key".into(), KEY.into());
    names.insert("#ver".into(), VERSION.into());
    names.insert("#fmt".into(), FORMAT.into());
    let condition = match expected {
        None => "attribute_not_exists(#key)".to_owned(),
        Some(Version(v)) => {
            values.insert(":expected".into(), number(v));
            values.insert(":fmt".into(), number(u64::from(ITEM_FORMAT)));
            // The format clause is belt and braces: the elector only writes
            // with a version it decoded, but a direct caller with a guessed
            // version must not overwrite a foreign or newer item either.
            "#ver = :expected AND #fmt <= :fmt".to_owned()
        }
    };
    if expected.is_none() {
        // Unused names are a ValidationException: drop what the
        // condition does not mention.
        names.remove("#ver");
        names.remove("#fmt");
    } else {
        names.remove("#key");
    }
    Some(Write {
        update,
        condition,
        names,
        values,
        next,
    })
}

/// Decodes an item read with `GetItem`.
pub(crate) fn decode(item: &HashMap<String, AttributeValue>) -> Result<Versioned, RecordError> {
    let Some(format) = item.get(FORMAT) else {
        let mut attrs: Vec<&str> = item.keys().map(String::as_str).collect();
        attrs.sort_unstable();
        return Err(RecordError::Foreign {
            detail: format!(
                "the item has no {FORMAT} attribute (it has: {}), so tenure did not write it",
                attrs.join(", ")
            ),
        });
    };
    let format = match format {
        AttributeValue::N(n) => n
            .parse::<u64>()
            .map_err(|_| corrupt(FORMAT, "not a whole number", n))?,
        other => return Err(wrong_type(FORMAT, "N", other)),
    };
    if format > u64::from(ITEM_FORMAT) {
        return Err(RecordError::TooNew {
            found: u32::try_from(format).unwrap_or(u32::MAX),
            supported: ITEM_FORMAT,
        });
    }
    if format == 0 {
        return Err(corrupt(FORMAT, "format 0 was never written", "0"));
    }
    let version = Version(required_u64(item, VERSION)?);
    let holder = match (item.get(HOLDER), item.get(INCARNATION)) {
        (None, None) => None,
        (Some(AttributeValue::S(id)), Some(_)) => Some(Holder {
            id: id.clone(),
            incarnation: required_u64(item, INCARNATION)?,
        }),
        (Some(other), _) if !matches!(other, AttributeValue::S(_)) => {
            return Err(wrong_type(HOLDER, "S", other))
        }
        _ => {
            return Err(RecordError::Corrupt {
                detail: format!("one of {HOLDER} and {INCARNATION} is set without the other"),
            })
        }
    };
    let metadata = match item.get(METADATA) {
        None => Metadata::new(),
        Some(AttributeValue::S(json)) => serde_json::from_str::<Metadata>(json).map_err(|e| {
            corrupt(
                METADATA,
                &format!("not a JSON object of strings ({e})"),
                json,
            )
        })?,
        Some(other) => return Err(wrong_type(METADATA, "S", other)),
    };
    let record = LeaseRecord {
        holder,
        token: required_u64(item, TOKEN)?,
        term: Duration::from_millis(required_u64(item, TERM_MS)?),
        renewed_at: WallTime::from_millis(required_u64(item, RENEWED_AT_MS)?),
        expires_at: WallTime::from_millis(required_u64(item, EXPIRES_AT_MS)?),
        metadata,
    };
    record.check()?;
    Ok(Versioned { record, version })
}

fn required_u64(item: &HashMap<String, AttributeValue>, attr: &str) -> Result<u64, RecordError> {
    match item.get(attr) {
        None => Err(RecordError::Corrupt {
            detail: format!("attribute {attr} is missing"),
        }),
        Some(AttributeValue::N(n)) => n
            .parse::<u64>()
            .map_err(|_| corrupt(attr, "not a whole number from 0 to 2^64 - 1", n)),
        Some(other) => Err(wrong_type(attr, "N", other)),
    }
}

fn corrupt(attr: &str, why: &str, value: &str) -> RecordError {
    // Values are bounded for the message: a damaged item may be large.
    let shown: String = value.chars().take(64).collect();
    RecordError::Corrupt {
        detail: format!("attribute {attr} is {why}: {shown:?}"),
    }
}

fn wrong_type(attr: &str, want: &str, got: &AttributeValue) -> RecordError {
    let got = match got {
        AttributeValue::B(_) => "B",
        AttributeValue::Bool(_) => "BOOL",
        AttributeValue::Bs(_) => "BS",
        AttributeValue::L(_) => "L",
        AttributeValue::M(_) => "M",
        AttributeValue::N(_) => "N",
        AttributeValue::Ns(_) => "NS",
        AttributeValue::Null(_) => "NULL",
        AttributeValue::S(_) => "S",
        AttributeValue::Ss(_) => "SS",
        _ => "an unknown type",
    };
    RecordError::Corrupt {
        detail: format!("attribute {attr} has type {got}, expected {want}"),
    }
}

fn number(n: u64) -> AttributeValue {
    AttributeValue::N(n.to_string())
}

/// Rounded up, as `LeaseRecord::encode` does: a challenger must never wait
/// less than the holder's term.
fn ceil_millis(d: Duration) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

fn metadata_json(md: &Metadata) -> String {
    // A map of strings always serialises; the fallback is unreachable and
    // would still decode, as empty metadata.
    serde_json::to_string(md).unwrap_or_else(|_| "{}".to_owned())
}

/// RFC 3339 with milliseconds, or `None` past year 9999 (where the
/// formatter fails; the record itself allows any u64 of milliseconds).
fn rfc3339(t: WallTime) -> Option<String> {
    const YEAR_10000_MS: u64 = 253_402_300_800_000;
    if t.as_millis() >= YEAR_10000_MS {
        return None;
    }
    let mut s = String::new();
    write!(
        s,
        "{}",
        humantime::format_rfc3339_millis(t.to_system_time())
    )
    .ok()?;
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> LeaseRecord {
        LeaseRecord {
            holder: Some(Holder {
                id: "host-a".into(),
                incarnation: u64::MAX,
            }),
            token: 7,
            term: Duration::from_secs(10),
            renewed_at: WallTime::from_millis(1_700_000_000_123),
            expires_at: WallTime::from_millis(1_700_000_010_123),
            metadata: Metadata::address("10.0.0.7:8080").with("", "empty key"),
        }
    }

    /// What DynamoDB would store after applying `w` to `before`.
    fn apply(
        before: &HashMap<String, AttributeValue>,
        w: &Write,
    ) -> HashMap<String, AttributeValue> {
        let mut item = before.clone();
        let (set, remove) = match w.update.split_once(" REMOVE ") {
            Some((s, r)) => (s, Some(r)),
            None => (w.update.as_str(), None),
        };
        for clause in set.trim_start_matches("SET ").split(", ") {
            let (n, v) = clause.split_once(" = ").unwrap();
            item.insert(w.names[n].clone(), w.values[v].clone());
        }
        for n in remove.into_iter().flat_map(|r| r.split(", ")) {
            item.remove(&w.names[n]);
        }
        item
    }

    #[test]
    fn round_trips_held_and_released_records() {
        let rec = sample();
        let w = write(None, &rec).unwrap();
        assert_eq!(w.condition, "attribute_not_exists(#key)");
        assert_eq!(w.next, Version(1));
        let item = apply(&HashMap::new(), &w);
        assert_eq!(item[HOLDER], AttributeValue::S("host-a".into()));
        assert_eq!(
            item[RENEWED_AT_TEXT],
            AttributeValue::S("2023-11-14T22:13:20.123Z".into())
        );
        assert_eq!(
            item[METADATA],
            AttributeValue::S(r#"{"":"empty key","address":"10.0.0.7:8080"}"#.into())
        );
        let got = decode(&item).unwrap();
        assert_eq!(got.record, rec);
        assert_eq!(got.version, Version(1));

        let released = LeaseRecord {
            holder: None,
            ..sample()
        };
        let w = write(Some(Version(1)), &released).unwrap();
        assert_eq!(w.condition, "#ver = :expected AND #fmt <= :fmt");
        assert!(
            w.update.contains(" REMOVE "),
            "a release removes the holder: {}",
            w.update
        );
        let item = apply(&item, &w);
        assert!(!item.contains_key(HOLDER) && !item.contains_key(INCARNATION));
        assert_eq!(
            item[TOKEN],
            AttributeValue::N("7".into()),
            "the token survives a release"
        );
        let got = decode(&item).unwrap();
        assert_eq!(got.record, released);
        assert_eq!(got.version, Version(2));
    }

    #[test]
    fn every_placeholder_is_used_and_defined() {
        for (expected, rec) in [
            (None, sample()),
            (Some(Version(4)), sample()),
            (
                Some(Version(4)),
                LeaseRecord {
                    holder: None,
                    ..sample()
                },
            ),
        ] {
            let w = write(expected, &rec).unwrap();
            let text = format!("{} {}", w.update, w.condition);
            for n in w.names.keys() {
                assert!(text.contains(n.as_str()), "unused name {n} in {text}");
            }
            for v in w.values.keys() {
                assert!(text.contains(v.as_str()), "unused value {v} in {text}");
            }
        }
    }

    #[test]
    fn extreme_values_survive_and_the_last_version_conflicts() {
        let mut rec = sample();
        rec.token = u64::MAX - 1;
        rec.renewed_at = WallTime::from_millis(u64::MAX / 2);
        rec.expires_at = WallTime::from_millis(u64::MAX);
        let w = write(Some(Version(u64::MAX - 1)), &rec).unwrap();
        let item = apply(&HashMap::new(), &w);
        assert!(
            !item.contains_key(RENEWED_AT_TEXT),
            "no text past year 9999"
        );
        let got = decode(&item).unwrap();
        assert_eq!(got.record, rec);
        assert_eq!(got.version, Version(u64::MAX));
        assert!(write(Some(Version(u64::MAX)), &rec).is_none());
    }

    fn item(pairs: &[(&str, AttributeValue)]) -> HashMap<String, AttributeValue> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    fn n(x: &str) -> AttributeValue {
        AttributeValue::N(x.into())
    }

    fn s(x: &str) -> AttributeValue {
        AttributeValue::S(x.into())
    }

    fn valid() -> HashMap<String, AttributeValue> {
        apply(&HashMap::new(), &write(None, &sample()).unwrap())
    }

    #[test]
    fn foreign_items_are_foreign() {
        let kinsumer = item(&[
            ("Key", s("Leader")),
            ("ID", s("abc")),
            ("LastUpdate", n("1")),
        ]);
        let e = decode(&kinsumer).unwrap_err();
        assert!(matches!(e, RecordError::Foreign { .. }), "{e:?}");
        assert!(e.to_string().contains("it has: ID, Key, LastUpdate"), "{e}");
        assert!(matches!(
            decode(&HashMap::new()),
            Err(RecordError::Foreign { .. })
        ));
    }

    #[test]
    fn newer_formats_are_too_new() {
        let mut i = valid();
        i.insert(FORMAT.into(), n("2"));
        assert_eq!(
            decode(&i).unwrap_err(),
            RecordError::TooNew {
                found: 2,
                supported: 1
            }
        );
        i.insert(FORMAT.into(), n("99999999999"));
        assert!(matches!(
            decode(&i),
            Err(RecordError::TooNew {
                found: u32::MAX,
                ..
            })
        ));
    }

    #[test]
    fn damaged_items_are_corrupt_never_a_panic() {
        /// What a case does to a valid item.
        enum Damage {
            Set(&'static str, AttributeValue),
            Remove(&'static str),
        }
        use Damage::{Remove, Set};
        let big = format!(r#"{{"x":"{}"}}"#, "y".repeat(5000));
        let cases = [
            ("format as text", Set(FORMAT, s("1"))),
            ("format fractional", Set(FORMAT, n("1.5"))),
            ("format zero", Set(FORMAT, n("0"))),
            ("no version", Remove(VERSION)),
            ("negative version", Set(VERSION, n("-1"))),
            ("huge token", Set(TOKEN, n("18446744073709551616"))),
            ("token as text", Set(TOKEN, s("7"))),
            ("no term", Remove(TERM_MS)),
            ("holder as number", Set(HOLDER, n("7"))),
            ("holder without incarnation", Remove(INCARNATION)),
            ("incarnation without holder", Remove(HOLDER)),
            ("empty holder", Set(HOLDER, s(""))),
            ("held with token 0", Set(TOKEN, n("0"))),
            ("metadata not JSON", Set(METADATA, s("{oops"))),
            ("metadata of numbers", Set(METADATA, s(r#"{"a":1}"#))),
            (
                "metadata as a map",
                Set(METADATA, AttributeValue::M(HashMap::new())),
            ),
            ("metadata too large", Set(METADATA, s(&big))),
            (
                "renewed_at as bool",
                Set(RENEWED_AT_MS, AttributeValue::Bool(true)),
            ),
        ];
        for (label, damage) in cases {
            let mut i = valid();
            match damage {
                Set(key, value) => drop(i.insert(key.into(), value)),
                Remove(key) => drop(i.remove(key)),
            }
            match decode(&i) {
                Err(RecordError::Corrupt { detail }) => assert!(!detail.is_empty(), "{label}"),
                other => panic!("{label}: expected Corrupt, got {other:?}"),
            }
        }
    }

    #[test]
    fn unknown_attributes_are_ignored() {
        let mut i = valid();
        i.insert("ttl".into(), n("1700000000"));
        i.insert("note".into(), s("rotated by ops"));
        assert_eq!(decode(&i).unwrap().record, sample());
    }
}
