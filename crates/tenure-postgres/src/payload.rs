//! What a write tells listeners: the NOTIFY payload, built in the statement
//! that writes (see [`crate::batch`]), and its decoding.
//!
//! ```text
//! 1:<group bytes>:<group>:<version>:<record>    the group was written: version and record
//! 1:<group bytes>:<group>:                      the group was written; read it (the record
//!                                               would not fit the 8000-byte payload limit)
//! ```
//!
//! The record is its JSON encoding with every non-ASCII character written
//! as a `\u` escape, so the payload converts into any server encoding (a
//! LATIN1 database would refuse the raw UTF-8 of a metadata value and fail
//! the write). The group's length comes first so that any group name, even
//! one holding `:`, parses, and so that a later format (another leading
//! number) still names its group.
//!
//! Anyone who may connect to the database may `NOTIFY` on the channel, so a
//! payload is untrusted input: one that does not parse names its group if it
//! can (a hint: the engine reads the group), and is otherwise dropped, since
//! it concerns no group tenure writes. A bare group name (what tenure wrote
//! before this format) is a hint for that group.

use tenure::store::Change;
use tenure::{GroupName, LeaseRecord, Version, Versioned};

/// The format number this build writes and reads.
const FORMAT: &str = "1";

/// The longest payload PostgreSQL accepts is one byte less than this.
pub(crate) const LIMIT: usize = 8000;

/// Room for the version (at most 20 digits of an `i64`) and its `:`.
pub(crate) const VERSION_ROOM: usize = 21;

/// The payload's start: format, group length and group, up to the version.
pub(crate) fn head(group: &GroupName) -> String {
    let g = group.as_str();
    format!("{FORMAT}:{}:{g}:", g.len())
}

/// The record for the payload (ASCII JSON), or `None` if it is not UTF-8
/// (then listeners get a hint).
pub(crate) fn record(encoded: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(encoded).ok()?;
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            // Outside JSON strings there is only ASCII, so every non-ASCII
            // character is inside one, where a \u escape means the same.
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        }
    }
    Some(out)
}

/// What a payload reports; `None` for one that concerns no group.
pub(crate) fn decode(payload: &str) -> Option<Change> {
    let Some((group, rest)) = framed(payload) else {
        // Not this format: a bare group name is what tenure wrote before.
        return GroupName::new(payload)
            .ok()
            .map(|group| Change::Hint { group });
    };
    let written = rest.split_once(':').and_then(|(version, record)| {
        let version = version.parse::<i64>().ok().filter(|v| *v >= 0)?;
        let record = LeaseRecord::decode(record.as_bytes()).ok()?;
        Some(Versioned {
            record,
            version: Version(version.unsigned_abs()),
        })
    });
    Some(match written {
        Some(current) => Change::Written { group, current },
        None => Change::Hint { group },
    })
}

/// The group of a framed payload, and what follows it (the rest of format
/// 1; anything, in a later format).
fn framed(payload: &str) -> Option<(GroupName, &str)> {
    let (format, rest) = payload.split_once(':')?;
    if format.is_empty() || !format.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (len, rest) = rest.split_once(':')?;
    let len: usize = len.parse().ok()?;
    let group = rest.get(..len)?;
    let rest = rest.get(len..)?.strip_prefix(':')?;
    let group = GroupName::new(group).ok()?;
    if format != FORMAT {
        return Some((group, ""));
    }
    Some((group, rest))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenure::{Holder, Metadata};

    fn sample(metadata: Metadata) -> LeaseRecord {
        LeaseRecord {
            holder: Some(Holder {
                id: "hôst-a".into(),
                incarnation: 7,
            }),
            metadata,
            ..tenure_testkit::sample_record()
        }
    }

    fn payload(group: &GroupName, version: i64, rec: &LeaseRecord) -> String {
        format!(
            "{}{version}:{}",
            head(group),
            record(&rec.encode()).unwrap()
        )
    }

    #[test]
    fn a_written_record_round_trips_in_ascii() {
        let group = GroupName::new("shard:7/épée 🦀").unwrap();
        let rec = sample(Metadata::address("10.0.0.7:8080").with("note", "naïve ☃ 🦀"));
        let p = payload(&group, 1_700_000_000_000_001, &rec);
        let record_part = &p[head(&group).len()..];
        assert!(record_part.is_ascii(), "{p}");
        assert_eq!(
            decode(&p),
            Some(Change::Written {
                group,
                current: Versioned {
                    record: rec,
                    version: Version(1_700_000_000_000_001),
                },
            })
        );
    }

    #[test]
    fn the_hint_form_and_old_payloads_are_hints() {
        let group = GroupName::new("a:b").unwrap();
        let hint = Some(Change::Hint {
            group: group.clone(),
        });
        assert_eq!(decode(&head(&group)), hint);
        // What tenure wrote before this format: the bare group name.
        assert_eq!(decode("a:b"), hint);
        // A later format still names its group.
        assert_eq!(decode("2:3:a:b:whatever comes next"), hint);
    }

    #[test]
    fn hostile_payloads_never_panic_nor_invent_a_record() {
        let group = GroupName::new("g").unwrap();
        let rec = sample(Metadata::new());
        let good = payload(&group, 5, &rec);
        // Every prefix of a good payload, cut anywhere (also inside a
        // multi-byte character of the group), decodes to a hint or nothing.
        for cut in 0..good.len() {
            if let Some(p) = good.get(..cut) {
                match decode(p) {
                    None | Some(Change::Hint { .. }) => {}
                    other => panic!("{p:?} decoded to {other:?}"),
                }
            }
        }
        let nasty = [
            String::new(),
            ":".into(),
            "1:".into(),
            "1:99999999999999999999999:g:".into(),
            "1:1:g:-5:{}".into(),
            "1:1:g:5:not json".into(),
            "1:4:é:5:{}".into(),
            "1:2:é:5:{}".into(),
            "1:0::5:{}".into(),
            format!("1:1:g:5:{}", r#"{"v":99}"#),
            "\u{0}\u{1}".into(),
            "x".repeat(LIMIT),
            "1:1:\u{7}:".into(),
        ];
        for p in &nasty {
            match decode(p) {
                None | Some(Change::Hint { .. }) => {}
                other => panic!("{p:?} decoded to {other:?}"),
            }
        }
        assert_eq!(decode("1:1:g:5:{}"), Some(Change::Hint { group }));
    }

    #[test]
    fn a_record_that_is_not_utf8_gets_no_payload_record() {
        assert_eq!(record(b"\xff\xfe"), None);
        assert_eq!(record(b"{}").as_deref(), Some("{}"));
    }
}
