//! The target assignment: which member should hold which shard. Every
//! member computes it from the same inputs (the live members and who holds
//! each shard now), so members that see the same state agree without
//! talking to each other.
//!
//! * **Balanced:** every member's share is `⌊shards / members⌋` or one
//!   more; the first `shards mod members` members by id get the larger
//!   shares. Shares depend on the member list alone, never on who holds
//!   what: holdings change while shards move, and shares that followed
//!   them would change a move's targets half-way through.
//! * **Sticky:** a member keeps what it holds, up to its share (the shards
//!   where it scores highest). So when a member leaves, only its shards
//!   move; when one joins, the others give up only their excess over their
//!   new share, which is the least any balanced assignment must move. (In
//!   id order a leave never shrinks a remaining member's share and a join
//!   never grows an old member's share, so a set settled by this rule
//!   moves no more than that.)
//! * **Placed by score:** shards nobody keeps go to the members with room
//!   in descending order of a score of (shard, member): rendezvous hashing.
//!   The score is FNV-1a with a final mix, fixed across processes, hosts
//!   and versions, as it must be (two members computing different scores
//!   would disagree).
//!
//! Once every shard is held by its target, the assignment of that state is
//! the state itself: a fixed point, so a settled set stays settled. And
//! while shards move to their targets (each released, then taken), every
//! state on the way assigns the same targets, so members that read the
//! state at different moments of a move still agree.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};

/// For each shard (by index into `shards`), the index into `members` of the
/// member that should hold it; `None` for every shard when there are no
/// members. `held` maps a shard to the member holding it now (entries for
/// other shards or members are ignored). `members` must be free of
/// duplicates; the result does not depend on the order of either slice.
pub fn assign(
    shards: &[String],
    members: &[String],
    held: &BTreeMap<String, String>,
) -> Vec<Option<usize>> {
    let (n, m) = (shards.len(), members.len());
    let mut out = vec![None; n];
    if m == 0 {
        return out;
    }
    let index: HashMap<&str, usize> = members
        .iter()
        .enumerate()
        .map(|(i, name)| (name.as_str(), i))
        .collect();
    let mut holding: Vec<Vec<usize>> = vec![Vec::new(); m];
    for (s, shard) in shards.iter().enumerate() {
        if let Some(&i) = held.get(shard).and_then(|h| index.get(h.as_str())) {
            holding[i].push(s);
        }
    }
    // Shares: ⌊n/m⌋ each, one more for the first n mod m members by id.
    // Not for those holding the most now: holdings change while shards
    // move, so such shares (and with them the targets) would change half-way
    // through a move, and members would start over on shards they were
    // taking and give up shards they need not.
    let mut rank: Vec<usize> = (0..m).collect();
    rank.sort_by(|&a, &b| members[a].cmp(&members[b]));
    let mut share = vec![n / m; m];
    for &i in rank.iter().take(n % m) {
        share[i] += 1;
    }
    // Each member keeps its best-scoring shards, up to its share.
    let mut load = vec![0usize; m];
    for (i, shards_held) in holding.iter_mut().enumerate() {
        // Each score once (a comparison sort would hash every shard about
        // log n times): at 10,000 shards this is most of the cost.
        shards_held.sort_by_cached_key(|&s| (Reverse(score(&shards[s], &members[i])), &shards[s]));
        for &s in shards_held.iter().take(share[i]) {
            out[s] = Some(i);
            load[i] += 1;
        }
    }
    // The rest, by descending score, to members with room.
    let mut pairs: Vec<(u64, usize, usize)> = Vec::new();
    for (s, shard) in shards.iter().enumerate() {
        if out[s].is_some() {
            continue;
        }
        for (i, member) in members.iter().enumerate() {
            if load[i] < share[i] {
                pairs.push((score(shard, member), s, i));
            }
        }
    }
    pairs.sort_unstable_by(|a, b| {
        b.0.cmp(&a.0)
            .then(shards[a.1].cmp(&shards[b.1]))
            .then(members[a.2].cmp(&members[b.2]))
    });
    for (_, s, i) in pairs {
        if out[s].is_none() && load[i] < share[i] {
            out[s] = Some(i);
            load[i] += 1;
        }
    }
    out
}

/// The assignment as a map from shard name to member name.
pub fn assign_names(
    shards: &[String],
    members: &[String],
    held: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    assign(shards, members, held)
        .into_iter()
        .enumerate()
        .filter_map(|(s, m)| m.map(|m| (shards[s].clone(), members[m].clone())))
        .collect()
}

fn score(shard: &str, member: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    eat(shard.as_bytes());
    // A separator that cannot occur in either name's UTF-8 bytes (0xff is
    // never a UTF-8 byte), so ("ab", "c") and ("a", "bc") differ.
    eat(&[0xff]);
    eat(member.as_bytes());
    // FNV alone mixes the last bytes poorly; finish like SplitMix64.
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(prefix: &str, n: usize) -> Vec<String> {
        (0..n).map(|i| format!("{prefix}{i}")).collect()
    }

    fn loads(a: &BTreeMap<String, String>, members: &[String]) -> Vec<usize> {
        members
            .iter()
            .map(|m| a.values().filter(|v| *v == m).count())
            .collect()
    }

    fn moved(a: &BTreeMap<String, String>, b: &BTreeMap<String, String>) -> usize {
        a.iter().filter(|(s, m)| b.get(*s) != Some(*m)).count()
    }

    /// The settled assignment of a fresh set: assign until it is a fixed
    /// point (the members then hold what they target).
    fn settled(shards: &[String], members: &[String]) -> BTreeMap<String, String> {
        let mut held = BTreeMap::new();
        for _ in 0..3 {
            let next = assign_names(shards, members, &held);
            if next == held {
                return held;
            }
            held = next;
        }
        panic!("no fixed point after three rounds");
    }

    #[test]
    fn every_shard_is_assigned_and_shares_differ_by_at_most_one() {
        for (n, m) in [(64, 8), (16, 4), (16, 5), (10, 3), (3, 5), (1, 1), (100, 7)] {
            let (shards, members) = (names("s", n), names("host-", m));
            let a = assign_names(&shards, &members, &BTreeMap::new());
            assert_eq!(a.len(), n, "{n} shards over {m}");
            for load in loads(&a, &members) {
                assert!(
                    load == n / m || load == n / m + 1,
                    "{n}/{m}: a load of {load}"
                );
            }
        }
    }

    #[test]
    fn no_members_no_assignment() {
        assert_eq!(assign(&names("s", 4), &[], &BTreeMap::new()), vec![None; 4]);
    }

    #[test]
    fn the_order_of_the_inputs_does_not_matter() {
        let shards = names("s", 40);
        let members = names("m", 6);
        let held = assign_names(&shards[..20], &members[..4], &BTreeMap::new());
        let a = assign_names(&shards, &members, &held);
        let mut shards_rev = shards.clone();
        shards_rev.reverse();
        let mut members_rot = members.clone();
        members_rot.rotate_left(2);
        assert_eq!(a, assign_names(&shards_rev, &members_rot, &held));
    }

    #[test]
    fn a_settled_set_stays_settled() {
        let shards = names("shard-", 64);
        let members = names("host-", 8);
        let s = settled(&shards, &members);
        assert_eq!(assign_names(&shards, &members, &s), s);
    }

    /// Every way one member can leave the settled assignment `before`:
    /// the leaver, the members left, and the assignment they compute.
    fn each_leave<'a>(
        shards: &'a [String],
        members: &'a [String],
        before: &'a BTreeMap<String, String>,
    ) -> impl Iterator<Item = (&'a String, Vec<String>, BTreeMap<String, String>)> + 'a {
        members.iter().map(move |leaver| {
            let rest: Vec<String> = members.iter().filter(|x| *x != leaver).cloned().collect();
            let after = assign_names(shards, &rest, before);
            (leaver, rest, after)
        })
    }

    #[test]
    fn a_leave_moves_exactly_the_leavers_shards() {
        for (n, m) in [(16, 4), (64, 8), (5, 4), (7, 6), (100, 7), (3, 2), (12, 5)] {
            for seed in 0..5 {
                let shards = names(&format!("shard{seed}-"), n);
                let members = names(&format!("h{seed}-"), m);
                let before = settled(&shards, &members);
                for (leaver, rest, after) in each_leave(&shards, &members, &before) {
                    let own = before.values().filter(|h| *h == leaver).count();
                    assert_eq!(
                        moved(&before, &after),
                        own,
                        "{n}/{m}: {leaver} leaving moved more than its {own} shards"
                    );
                    for load in loads(&after, &rest) {
                        let k = rest.len();
                        assert!(
                            load == n / k || load == n / k + 1,
                            "{n}/{k}: a load of {load}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_join_moves_only_the_newcomers_share() {
        for (n, m) in [(16, 4), (64, 8), (5, 4), (100, 7), (3, 5)] {
            let shards = names("shard-", n);
            let members = names("host-", m);
            let before = settled(&shards, &members);
            let mut more = members.clone();
            more.push("newcomer".into());
            let after = assign_names(&shards, &more, &before);
            let theirs = after.values().filter(|h| *h == "newcomer").count();
            assert_eq!(moved(&before, &after), theirs, "{n}/{m}");
            assert!(theirs >= n / (m + 1), "{n}/{m}: the newcomer got {theirs}");
            assert_eq!(
                assign_names(&shards, &more, &after),
                after,
                "settles at once"
            );
        }
    }

    /// Moves `from`'s holdings towards `to` one shard at a time (each first
    /// released, then taken), checking at every step that the assignment
    /// of the state reached is still `to`: the targets of a move must not
    /// change while it proceeds, or members start over (a new takeover
    /// wait) and move shards they did not have to.
    fn assert_steady_move(
        shards: &[String],
        members: &[String],
        from: &BTreeMap<String, String>,
        to: &BTreeMap<String, String>,
        what: &str,
    ) {
        let state: BTreeMap<String, String> = from
            .iter()
            .filter(|(_, m)| members.contains(m))
            .map(|(s, m)| (s.clone(), m.clone()))
            .collect();
        let moving: Vec<&String> = to
            .iter()
            .filter(|(s, m)| state.get(*s) != Some(*m))
            .map(|(s, _)| s)
            .collect();
        for order in [false, true] {
            let mut steps: Vec<&String> = moving.clone();
            if order {
                steps.reverse();
            }
            let mut h = state.clone();
            for s in steps {
                h.remove(s);
                assert_eq!(
                    &assign_names(shards, members, &h),
                    to,
                    "{what}: {s} released"
                );
                h.insert(s.clone(), to[s].clone());
                assert_eq!(&assign_names(shards, members, &h), to, "{what}: {s} taken");
            }
        }
    }

    #[test]
    fn the_targets_of_a_move_stay_put_while_it_proceeds() {
        for (n, m) in [
            (14, 4),
            (16, 4),
            (64, 8),
            (19, 4),
            (24, 5),
            (7, 3),
            (40, 7),
            (5, 4),
        ] {
            for seed in 0..4 {
                let shards = names(&format!("s{seed}-"), n);
                let members = names(&format!("m{seed}-"), m);
                let before = settled(&shards, &members);
                for (leaver, rest, after) in each_leave(&shards, &members, &before) {
                    assert_steady_move(
                        &shards,
                        &rest,
                        &before,
                        &after,
                        &format!("{n}/{m}, {leaver} left"),
                    );
                }
                let mut more = members.clone();
                more.push(format!("m{seed}-new"));
                let after = assign_names(&shards, &more, &before);
                assert_steady_move(&shards, &more, &before, &after, &format!("{n}/{m}, a join"));
            }
        }
    }

    #[test]
    fn the_score_is_fixed() {
        // Every member must compute the same scores on every host and
        // build: a pinned value (computed independently from the
        // definition: FNV-1a 64 of shard, 0xff, member; then SplitMix64).
        assert_eq!(score("shard-0", "host-a"), 0xe573_beca_1c53_47c9);
        assert_ne!(score("ab", "c"), score("a", "bc"));
    }
}
