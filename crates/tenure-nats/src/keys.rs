//! Group names as NATS key-value keys, and back.
//!
//! A key is a NATS subject: tokens of `A-Z a-z 0-9 - _ = /` separated by
//! `.`, none empty. A group name is any UTF-8 text of up to 255 bytes, so
//! it is encoded, reversibly and with one key per name:
//!
//! * the key is `tenure.` followed by the name's `/`-separated segments,
//!   one token each (`jobs/eu/7` is `tenure.jobs.eu.7`);
//! * within a segment, the bytes `A-Z a-z 0-9 - _` stand for themselves and
//!   every other byte is `=` and two upper-case hex digits (`.` is `=2E`, a
//!   space `=20`, `é` `=C3=A9`);
//! * an empty segment is the token `=`.
//!
//! Decoding accepts exactly what encoding produces (upper-case hex, no
//! escape of a byte that stands for itself): a key that is not the
//! encoding of a group name is no group, so no group has two keys.
//!
//! Because segments are tokens, the groups under a prefix that ends in `/`
//! (a sharded set's members, `set/members/`) are exactly the keys a
//! subject filter such as `tenure.set.members.>` matches: the server lists
//! them without sending the rest of the bucket.

use tenure::GroupName;

/// The first token of every key tenure writes. Keys without it are not
/// tenure's, and keys starting with `_kv` (reserved by NATS) never occur.
pub(crate) const ROOT: &str = "tenure";

/// Whether a byte stands for itself in a key token.
fn plain(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// One segment of a name as a key token.
fn encode_segment(segment: &str, out: &mut String) {
    if segment.is_empty() {
        out.push('=');
        return;
    }
    for b in segment.bytes() {
        if plain(b) {
            out.push(char::from(b));
        } else {
            out.push('=');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
        }
    }
}

/// One key token back to its segment's bytes; `None` if it is not the
/// encoding of any segment.
fn decode_token(token: &str, out: &mut Vec<u8>) -> Option<()> {
    if token == "=" {
        return Some(());
    }
    let bytes = token.as_bytes();
    if bytes.is_empty() {
        return None;
    }
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if plain(b) {
            out.push(b);
            i += 1;
        } else if b == b'=' {
            let hi = hex_digit(*bytes.get(i + 1)?)?;
            let lo = hex_digit(*bytes.get(i + 2)?)?;
            let byte = hi << 4 | lo;
            // An escaped byte that stands for itself, or the separator, is
            // not what encoding produces.
            if plain(byte) || byte == b'/' {
                return None;
            }
            out.push(byte);
            i += 3;
        } else {
            return None;
        }
    }
    Some(())
}

fn hex_digit(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// The key of a group (without the bucket's subject prefix).
pub(crate) fn key_of(group: &GroupName) -> String {
    let mut key = String::with_capacity(ROOT.len() + 1 + group.as_str().len());
    key.push_str(ROOT);
    for segment in group.as_str().split('/') {
        key.push('.');
        encode_segment(segment, &mut key);
    }
    key
}

/// The group a key names; `None` for a key tenure would never write (a
/// foreign key in the bucket).
pub(crate) fn group_of(key: &str) -> Option<GroupName> {
    let rest = key.strip_prefix(ROOT)?.strip_prefix('.')?;
    let mut name = Vec::with_capacity(rest.len());
    for (i, token) in rest.split('.').enumerate() {
        if i > 0 {
            name.push(b'/');
        }
        decode_token(token, &mut name)?;
    }
    GroupName::new(String::from_utf8(name).ok()?).ok()
}

/// The subject filter (relative to the bucket) that matches every group
/// whose name starts with `prefix`, and as few others as subjects allow:
/// the prefix's complete segments, then `>`. Names under it must still be
/// checked against the prefix (its last, partial segment).
pub(crate) fn filter_for_prefix(prefix: &str) -> String {
    let mut filter = String::from(ROOT);
    let mut segments: Vec<&str> = prefix.split('/').collect();
    // The last piece is partial (empty when the prefix ends with '/').
    segments.pop();
    for segment in segments {
        filter.push('.');
        encode_segment(segment, &mut filter);
    }
    filter.push_str(".>");
    filter
}

/// The filter matching every key tenure writes.
pub(crate) fn filter_all() -> String {
    format!("{ROOT}.>")
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenure_testkit::group;

    /// What NATS accepts as a key (async-nats checks the same).
    fn valid_key(k: &str) -> bool {
        !k.is_empty()
            && !k.starts_with('.')
            && !k.ends_with('.')
            && !k.contains("..")
            && k.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-/_=.".contains(&b))
    }

    #[test]
    fn names_become_readable_keys() {
        assert_eq!(key_of(&group("nightly-billing")), "tenure.nightly-billing");
        assert_eq!(key_of(&group("set/members/h1")), "tenure.set.members.h1");
        assert_eq!(key_of(&group("a.b c")), "tenure.a=2Eb=20c");
        assert_eq!(key_of(&group("/x//")), "tenure.=.x.=.=");
        assert_eq!(key_of(&group("épée")), "tenure.=C3=A9p=C3=A9e");
        assert_eq!(key_of(&group("a=b*>")), "tenure.a=3Db=2A=3E");
    }

    #[test]
    fn every_name_round_trips_through_a_valid_key() {
        let names = [
            "a",
            "/",
            "//",
            "a/",
            "/a",
            "=",
            "==",
            ".",
            "..",
            "a.b/c.d",
            "*",
            ">",
            "$KV.x",
            "_kv",
            "🦀/épée/名前",
            "list%_*?[\\/a",
            "tenure.x",
        ];
        for n in names {
            let key = key_of(&group(n));
            assert!(valid_key(&key), "{n:?} -> {key:?}");
            assert_eq!(group_of(&key), Some(group(n)), "{n:?} -> {key:?}");
        }
        // The longest names fit: 255 bytes of escapes are 765 characters.
        let long = "é".repeat(127);
        let key = key_of(&group(&long));
        assert!(valid_key(&key) && key.len() < 800);
        assert_eq!(group_of(&key), Some(group(&long)));
    }

    #[test]
    fn keys_tenure_never_writes_are_no_group() {
        for key in [
            "tenure",
            "tenure.",
            "other.a",
            "tenurex.a",
            "tenure.a=41",  // an escape of a byte that stands for itself
            "tenure.a=2f",  // lower-case hex
            "tenure.a=2F",  // an escaped separator
            "tenure.a=2",   // a truncated escape
            "tenure.=FF",   // not UTF-8
            "tenure.=07",   // a control character
            "tenure.a/b",   // '/' is the token separator's stand-in
            "tenure.a..b",  // an empty token
            "tenure.==",    // two escapes of nothing
            "tenure.a=20=", // a trailing lone escape
        ] {
            assert_eq!(group_of(key), None, "{key:?}");
        }
        let too_long = format!("tenure.{}", "a".repeat(256));
        assert_eq!(group_of(&too_long), None);
    }

    #[test]
    fn a_prefix_filter_matches_exactly_the_names_under_it_up_to_its_partial_segment() {
        for (prefix, filter) in [
            ("", "tenure.>"),
            ("set/members/", "tenure.set.members.>"),
            ("set/mem", "tenure.set.>"),
            ("a.b/", "tenure.a=2Eb.>"),
            ("/", "tenure.=.>"),
        ] {
            assert_eq!(filter_for_prefix(prefix), filter, "{prefix:?}");
        }
        // Every name under a prefix has a key the filter matches.
        let matches = |filter: &str, key: &str| {
            let f: Vec<&str> = filter.split('.').collect();
            let k: Vec<&str> = key.split('.').collect();
            let (last, head) = f.split_last().unwrap();
            assert_eq!(*last, ">");
            k.len() > head.len() && k[..head.len()] == *head
        };
        let names = [
            "set/members/h1",
            "set/members/",
            "set/membersX",
            "set",
            "sets/a",
            "/a",
            "//",
        ];
        for prefix in ["", "set/", "set/members/", "set/mem", "s", "/", "//"] {
            for n in names {
                if n.starts_with(prefix) {
                    assert!(
                        matches(&filter_for_prefix(prefix), &key_of(&group(n))),
                        "{prefix:?} should match {n:?}"
                    );
                }
            }
        }
        assert!(!matches(
            &filter_for_prefix("set/members/"),
            &key_of(&group("set/membersX"))
        ));
        assert!(!matches(&filter_for_prefix("set/"), &key_of(&group("set"))));
    }
}
