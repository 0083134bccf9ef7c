//! What the members reported, put together: every shard's work spans on the
//! shared clock, who holds what now, and whether any shard was ever worked
//! by two members at once.

use std::collections::{BTreeMap, HashMap};

use super::report::{MemberReport, OpCounts};

/// One term's work on one shard, by one member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    pub member: String,
    pub token: u64,
    pub start: u64,
    /// When the work stopped; `None` while it runs.
    pub end: Option<u64>,
}

/// Everything the members of one set reported.
#[derive(Debug, Default)]
pub struct Ledger {
    /// Per shard, its spans in the order they were reported.
    spans: BTreeMap<String, Vec<Span>>,
    /// Per member, when it joined.
    pub started: BTreeMap<String, u64>,
    /// Per member, its latest view of the members.
    pub views: BTreeMap<String, Vec<String>>,
    /// Per member, its store operations so far, as last reported.
    pub ops: BTreeMap<String, OpCounts>,
}

impl Ledger {
    /// Takes in one report of `member`.
    pub fn apply(&mut self, member: &str, report: MemberReport) {
        match report {
            MemberReport::Started { at, .. } => {
                self.started.insert(member.to_owned(), at);
            }
            MemberReport::Acquired { shard, token, at } => {
                self.spans.entry(shard).or_default().push(Span {
                    member: member.to_owned(),
                    token,
                    start: at,
                    end: None,
                });
            }
            MemberReport::Ended { shard, token, at } => {
                if let Some(span) = self.spans.get_mut(&shard).and_then(|spans| {
                    spans
                        .iter_mut()
                        .rev()
                        .find(|s| s.member == member && s.token == token && s.end.is_none())
                }) {
                    span.end = Some(at);
                }
            }
            MemberReport::Members { ids, .. } => {
                self.views.insert(member.to_owned(), ids);
            }
            MemberReport::Ops { counts, .. } => {
                self.ops.insert(member.to_owned(), counts);
            }
            MemberReport::Left { .. } => {}
        }
    }

    /// A member was killed at `at`: whatever it was working on stopped
    /// then (it cannot report it).
    pub fn killed(&mut self, member: &str, at: u64) {
        for span in self.spans.values_mut().flatten() {
            if span.member == member && span.end.is_none() {
                span.end = Some(at);
            }
        }
    }

    /// Who works on each shard now (member, since when), if every shard of
    /// `shards` has exactly one span running.
    pub fn holders(&self, shards: usize) -> Option<BTreeMap<String, (String, u64)>> {
        let (once, more) = self.running();
        (more == 0 && once.len() == shards).then_some(once)
    }

    /// The shards with exactly one span running (member, since when), and
    /// how many have more than one.
    fn running(&self) -> (BTreeMap<String, (String, u64)>, usize) {
        let mut once = BTreeMap::new();
        let mut more = 0;
        for (shard, spans) in &self.spans {
            let mut running = spans.iter().filter(|s| s.end.is_none());
            match (running.next(), running.next()) {
                (Some(s), None) => {
                    once.insert(shard.clone(), (s.member.clone(), s.start));
                }
                (None, _) => {}
                (Some(_), Some(_)) => more += 1,
            }
        }
        (once, more)
    }

    /// [`holders`](Self::holders), if every shard is held by one of
    /// `members` and each of them holds `⌊N/M⌋` or `⌈N/M⌉` shards.
    pub fn balanced(
        &self,
        shards: usize,
        members: &[String],
    ) -> Option<BTreeMap<String, (String, u64)>> {
        let holders = self.holders(shards)?;
        let m = members.len().max(1);
        let (lo, hi) = (shards / m, shards.div_ceil(m));
        let loads = Self::loads(&holders);
        let all_members = loads.keys().all(|h| members.iter().any(|m| m == h));
        let loads_ok = members.iter().all(|id| {
            let load = loads.get(id.as_str()).copied().unwrap_or(0);
            (lo..=hi).contains(&load)
        });
        (all_members && loads_ok).then_some(holders)
    }

    /// How many shards each member works on.
    fn loads(holders: &BTreeMap<String, (String, u64)>) -> HashMap<&str, usize> {
        let mut loads = HashMap::new();
        for (h, _) in holders.values() {
            *loads.entry(h.as_str()).or_default() += 1;
        }
        loads
    }

    /// Where the set stands, for a message when it does not balance: how
    /// many shards have one span running, and the loads of `members`.
    pub fn progress(&self, members: &[String]) -> String {
        let (one, twice) = self.running();
        let loads = Self::loads(&one);
        let of = |id: &String| loads.get(id.as_str()).copied().unwrap_or(0);
        let lo = members.iter().map(of).min().unwrap_or(0);
        let hi = members.iter().map(of).max().unwrap_or(0);
        format!(
            "{} shards worked once, {twice} by more than one span; loads {lo}-{hi} over the {} members",
            one.len(),
            members.len()
        )
    }

    /// Work spans reported, over every shard.
    pub fn span_count(&self) -> usize {
        self.spans.values().map(Vec::len).sum()
    }

    /// Every pair of spans of different members on one shard that overlap
    /// in time (a span still running lasts until `now`), described.
    pub fn overlaps(&self, now: u64) -> Vec<String> {
        let mut out = Vec::new();
        for (shard, spans) in &self.spans {
            for (i, a) in spans.iter().enumerate() {
                for b in &spans[i + 1..] {
                    let (a_end, b_end) = (a.end.unwrap_or(now), b.end.unwrap_or(now));
                    if a.member != b.member && a.start < b_end && b.start < a_end {
                        out.push(format!(
                            "shard {shard}: {} (token {}) from {} to {a_end} and {} (token {}) from {} to {b_end}",
                            a.member, a.token, a.start, b.member, b.token, b.start
                        ));
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acquired(shard: &str, token: u64, at: u64) -> MemberReport {
        MemberReport::Acquired {
            shard: shard.into(),
            token,
            at,
        }
    }

    fn ended(shard: &str, token: u64, at: u64) -> MemberReport {
        MemberReport::Ended {
            shard: shard.into(),
            token,
            at,
        }
    }

    #[test]
    fn holders_balance_and_overlaps_follow_the_reports() {
        let mut l = Ledger::default();
        let members = ["a".to_owned(), "b".to_owned()];
        l.apply("a", acquired("0", 1, 10));
        l.apply("a", acquired("1", 1, 10));
        assert!(l.holders(2).is_some());
        assert!(l.balanced(2, &members).is_none(), "b holds nothing");
        // Shard 1 moves to b: a stops at 20, b starts at 25.
        l.apply("a", ended("1", 1, 20));
        assert!(l.holders(2).is_none(), "shard 1 held by nobody");
        l.apply("b", acquired("1", 2, 25));
        let h = l.balanced(2, &members).expect("one each");
        assert_eq!(h["1"], ("b".to_owned(), 25));
        assert!(l.overlaps(100).is_empty());
        // b's report of shard 0 arrives before a's end, stamped after it:
        // two running spans (not balanced), and no overlap once a's end
        // arrives.
        l.apply("b", acquired("0", 2, 40));
        assert!(l.holders(2).is_none());
        l.apply("a", ended("0", 1, 35));
        assert!(l.overlaps(100).is_empty());
        // A killed member's work stops when it is killed; one started
        // before that is an overlap.
        l.apply("c", acquired("1", 3, 50));
        l.killed("b", 60);
        let o = l.overlaps(100);
        assert_eq!(o.len(), 1, "{o:?}");
        assert!(
            o[0].contains("shard 1: b (token 2) from 25 to 60 and c (token 3) from 50"),
            "{o:?}"
        );
        assert_eq!(l.span_count(), 5);
    }
}
