//! Where a group's lease object lives: `{prefix}/{encoded group}`.
//!
//! Group names are any UTF-8 without control characters, so they may hold
//! `/`, `%`, spaces or a leading `.`, none of which should turn into a
//! directory level, an escape the server decodes, or a `.`/`..` path
//! segment. A name is encoded byte by byte: ASCII letters, digits and
//! `-_.~` stay as they are (so `nightly-billing` is
//! `tenure/nightly-billing` in the console), every other byte becomes
//! `%XX` (upper-case hex), and so does a `.` in first position. The
//! encoding is
//!
//! * **one segment**: no `/` survives, so a key is one level below the
//!   prefix, whatever the name;
//! * **prefix-preserving**: the encoding of a prefix of a name is a
//!   prefix of the name's encoding, and every encoded name starting
//!   with it comes from a name starting with that prefix. A
//!   listing of `{prefix}/{encoded p}` is exactly the groups starting
//!   with `p`, which is what [`LeaseView::list`](tenure::LeaseView::list)
//!   needs;
//! * **canonical**: only the encoding of a name decodes to it, so a
//!   foreign object whose key merely decodes (`a%41`) is not taken for a
//!   group (`aA` is stored as `aA`).

use object_store::path::Path;
use tenure::GroupName;

/// The layout of lease objects under one prefix of a bucket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    /// The prefix, without leading or trailing `/` (never empty).
    prefix: String,
}

impl Layout {
    /// A layout under `prefix` (slashes at either end are trimmed; empty
    /// segments and `.`/`..` segments are refused).
    pub(crate) fn new(prefix: &str) -> Result<Layout, &'static str> {
        let prefix = prefix.trim_matches('/');
        if prefix.is_empty() {
            return Err(
                "the object prefix is empty: give a path after the bucket, such as /tenure",
            );
        }
        for segment in prefix.split('/') {
            if segment.is_empty() || segment == "." || segment == ".." {
                return Err("the object prefix has an empty, `.` or `..` segment");
            }
            if segment.chars().any(char::is_control) {
                return Err("the object prefix has a control character");
            }
        }
        Path::parse(prefix).map_err(|_| "the object prefix is not a valid object path")?;
        Ok(Layout {
            prefix: prefix.to_owned(),
        })
    }

    /// The prefix, as given (without slashes at the ends).
    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The object key of a group's lease.
    pub(crate) fn key(&self, group: &GroupName) -> Path {
        self.path(&encode(group.as_str()))
    }

    /// The key every group starting with `name_prefix` starts with (a
    /// string, not a path: it usually ends mid-segment).
    pub(crate) fn key_prefix(&self, name_prefix: &str) -> String {
        format!("{}/{}", self.prefix, encode(name_prefix))
    }

    /// The directory every lease object is in, for listing.
    pub(crate) fn dir(&self) -> Path {
        // Checked in `new`.
        Path::parse(&self.prefix).unwrap_or_default()
    }

    /// The group whose lease `key` is, if it is one: directly under the
    /// prefix, canonically encoded, a valid group name.
    pub(crate) fn group_of(&self, key: &Path) -> Option<GroupName> {
        let rest = key.as_ref().strip_prefix(&self.prefix)?.strip_prefix('/')?;
        let name = decode(rest)?;
        (encode(&name) == rest).then_some(())?;
        GroupName::new(name).ok()
    }

    fn path(&self, encoded: &str) -> Path {
        // Encoded names are non-empty, have no '/', no control character
        // and never start with '.', so the key is a valid path.
        Path::parse(format!("{}/{encoded}", self.prefix)).unwrap_or_default()
    }
}

fn kept(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~')
}

/// Encodes a group name (or a prefix of one) as described in the module
/// docs.
pub(crate) fn encode(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for (i, b) in name.bytes().enumerate() {
        if kept(b) && !(i == 0 && b == b'.') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Decodes an encoded name; `None` unless it is `%XX` escapes and kept
/// bytes forming UTF-8.
fn decode(encoded: &str) -> Option<String> {
    let bytes = encoded.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b if kept(b) => {
                out.push(b);
                i += 1;
            }
            _ => return None,
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenure_testkit::group;

    #[test]
    fn readable_names_stay_readable() {
        let l = Layout::new("/tenure/").unwrap();
        assert_eq!(
            l.key(&group("nightly-billing")).as_ref(),
            "tenure/nightly-billing"
        );
        assert_eq!(l.key(&group("a.b_c~d")).as_ref(), "tenure/a.b_c~d");
    }

    #[test]
    fn awkward_names_are_one_segment() {
        let l = Layout::new("leases/prod").unwrap();
        for (name, key) in [
            ("a/b", "leases/prod/a%2Fb"),
            ("..", "leases/prod/%2E."),
            (".", "leases/prod/%2E"),
            ("50%", "leases/prod/50%25"),
            ("épée 🦀", "leases/prod/%C3%A9p%C3%A9e%20%F0%9F%A6%80"),
            ("a?b#c", "leases/prod/a%3Fb%23c"),
        ] {
            let k = l.key(&group(name));
            assert_eq!(k.as_ref(), key, "{name}");
            assert_eq!(l.group_of(&k), Some(group(name)), "{name} round trips");
        }
    }

    #[test]
    fn encoding_preserves_prefixes() {
        let names = [
            "shard-1",
            "shard-10",
            "shard-1/x",
            "shard-",
            ".hidden",
            "é",
            "éa",
        ];
        for name in names {
            for cut in (0..=name.len()).filter(|&i| name.is_char_boundary(i)) {
                let prefix = &name[..cut];
                assert!(
                    encode(name).starts_with(&encode(prefix)),
                    "{prefix:?} of {name:?}"
                );
            }
            for other in names {
                // Encoded prefix matching implies name prefix matching.
                if encode(other).starts_with(&encode(name)) {
                    assert!(other.starts_with(name), "{other:?} vs {name:?}");
                }
            }
        }
    }

    #[test]
    fn foreign_keys_are_not_groups() {
        let l = Layout::new("tenure").unwrap();
        for key in [
            "tenure/a%41",    // not canonical: `aA` is stored as `aA`
            "tenure/sub/dir", // a level below
            "tenure/%ZZ",     // not an escape
            "tenure/%FF",     // not UTF-8
            "tenure/a%0Ab",   // a control character
            "tenure/a b",     // an unencoded space
            "other/x",        // another prefix
            "tenurex/y",      // a longer prefix
        ] {
            let p = Path::parse(key).unwrap();
            assert_eq!(l.group_of(&p), None, "{key}");
        }
        assert_eq!(
            l.group_of(&Path::parse("tenure/ok").unwrap()),
            Some(group("ok"))
        );
    }

    #[test]
    fn prefixes_are_checked() {
        assert!(Layout::new("").is_err());
        assert!(Layout::new("/").is_err());
        assert!(Layout::new("a//b").is_err());
        assert!(Layout::new("a/../b").is_err());
        assert!(Layout::new("a/./b").is_err());
        assert_eq!(Layout::new("/a/b/").unwrap().prefix(), "a/b");
        assert_eq!(Layout::new("a").unwrap().key_prefix("x/"), "a/x%2F");
    }
}
