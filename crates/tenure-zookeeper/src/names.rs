//! Group names as ZooKeeper node names, and back.
//!
//! Every group is one child of the prefix node, so a group name must
//! become ONE node name: `/` (which sharded sets use in their group names)
//! and the characters ZooKeeper refuses in a path are %-escaped, as are `%`
//! itself and the names `.` and `..`. Everything else is kept, so the
//! nodes read as the group names in `zkCli.sh`. The escaping is canonical
//! (upper-case hex, only what must be escaped), and a child whose name is
//! not the canonical form of a group name is no group of tenure's.

use tenure::GroupName;

/// Whether ZooKeeper refuses `c` anywhere in a path. Its `PathUtils`
/// checks UTF-16 code units, so besides the ranges it names (controls,
/// surrogates, the private use area, specials) every character beyond the
/// Basic Multilingual Plane (an emoji: a surrogate pair in Java) is refused.
fn refused(c: char) -> bool {
    matches!(
        u32::from(c),
        0x0000..=0x001f | 0x007f..=0x009f | 0xd800..=0xf8ff | 0xfff0..=0x0010_ffff
    )
}

/// Whether `name` may be one node name as it is: not empty, not `.` or
/// `..`, no `/`, nothing ZooKeeper refuses.
pub(crate) fn is_valid_node_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains('/')
        && !name.chars().any(refused)
}

/// The node name of a group (one path segment, never empty).
pub(crate) fn encode(group: &GroupName) -> String {
    let name = group.as_str();
    if name == "." || name == ".." {
        return "%2E".repeat(name.len());
    }
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if c == '%' || c == '/' || refused(c) {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The group whose node this is: `None` for a child of the prefix node
/// that tenure did not name (no valid group name, or not escaped the way
/// [`encode`] escapes).
pub(crate) fn decode(node: &str) -> Option<GroupName> {
    let name = tenure::store::url::percent_decode(node)?;
    let group = GroupName::new(name).ok()?;
    (encode(&group) == node).then_some(group)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenure_testkit::group;

    #[test]
    fn names_round_trip_as_one_valid_node_name() {
        for name in [
            "jobs",
            "set/members/host-a",
            "100%",
            ".",
            "..",
            "...",
            ".hidden",
            "zookeeper",
            "a b+c@d",
            "ünïcödé",
            "private\u{e000}use",
            "special\u{fff9}",
            "épée/🦀",
            "%2F",
        ] {
            let node = encode(&group(name));
            assert!(is_valid_node_name(&node), "{name:?} -> {node:?}");
            assert_eq!(decode(&node), Some(group(name)), "{name:?} -> {node:?}");
        }
        assert_eq!(encode(&group("set/members/a")), "set%2Fmembers%2Fa");
        assert_eq!(encode(&group("..")), "%2E%2E");
        assert_eq!(encode(&group("100%")), "100%25");
    }

    #[test]
    fn foreign_children_are_no_groups() {
        for node in ["%zz", "%2f", "%61", "%2e", "a%00b", "%FF"] {
            assert_eq!(decode(node), None, "{node}");
        }
        assert_eq!(decode("%2E%2E"), Some(group("..")));
    }
}
