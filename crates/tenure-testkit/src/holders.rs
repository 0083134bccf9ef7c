//! Who holds which shard of a sharded set, as a test sees it: a map from
//! each shard to the member holding it. The library's tests read it from
//! [`Shards::held`](tenure::Shards::held), the CLI's from the processes
//! running; both ask the same questions of two such maps.

use std::collections::{BTreeMap, BTreeSet};

use tenure::shards::Shards;

/// Each held shard → the member holding it.
pub type Holders = BTreeMap<String, String>;

/// Who holds each shard with a valid term, as `members` report it.
///
/// # Panics
///
/// If two members report a valid term on one shard at once: the per-shard
/// guarantee every sharded test checks at every step.
pub fn of_members<'a>(members: impl IntoIterator<Item = &'a Shards>) -> Holders {
    let mut out = Holders::new();
    for m in members {
        for shard in m.held().keys() {
            if let Some(other) = out.insert(shard.clone(), m.member_id().to_owned()) {
                panic!(
                    "shard {shard} held by {other} and {} at once",
                    m.member_id()
                );
            }
        }
    }
    out
}

/// Whether all `shards` shards are held, by exactly `members` members,
/// each holding `⌊shards/members⌋` or `⌈shards/members⌉`.
pub fn balanced(holders: &Holders, shards: usize, members: usize) -> bool {
    let l = loads(holders);
    members > 0
        && holders.len() == shards
        && l.len() == members
        && l.values()
            .all(|&x| x == shards / members || x == shards.div_ceil(members))
}

/// How many shards each member holds.
pub fn loads(holders: &Holders) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for member in holders.values() {
        *out.entry(member.clone()).or_default() += 1;
    }
    out
}

/// The shards of `before` whose holder is another one, or none, in
/// `after`.
pub fn moved<'a>(before: &'a Holders, after: &Holders) -> BTreeSet<&'a String> {
    before
        .iter()
        .filter(|(shard, member)| after.get(*shard) != Some(*member))
        .map(|(shard, _)| shard)
        .collect()
}

/// The shards `member` holds.
pub fn held_by<'a>(holders: &'a Holders, member: &str) -> BTreeSet<&'a String> {
    holders
        .iter()
        .filter(|(_, holder)| *holder == member)
        .map(|(shard, _)| shard)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holders(pairs: &[(&str, &str)]) -> Holders {
        pairs
            .iter()
            .map(|(s, m)| (s.to_string(), m.to_string()))
            .collect()
    }

    #[test]
    fn the_questions_a_sharded_test_asks() {
        let before = holders(&[("0", "a"), ("1", "b"), ("2", "a"), ("3", "c")]);
        let after = holders(&[("0", "a"), ("1", "c"), ("2", "b")]);
        assert_eq!(
            loads(&before),
            BTreeMap::from([("a".into(), 2), ("b".into(), 1), ("c".into(), 1)])
        );
        let names = |set: BTreeSet<&String>| set.into_iter().cloned().collect::<Vec<_>>();
        assert_eq!(names(moved(&before, &after)), ["1", "2", "3"]);
        assert_eq!(names(held_by(&before, "a")), ["0", "2"]);
        assert!(held_by(&before, "z").is_empty());
    }
}
