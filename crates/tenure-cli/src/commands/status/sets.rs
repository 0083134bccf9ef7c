//! `tenure status` for a group run with `--shards` or `--slots` (or by the
//! library's `tenure::Shards`): its members and, per shard or slot, who
//! holds it.
//!
//! A sharded set named SET keeps no record under SET itself: its members'
//! leases are the groups `SET/members/ID`, its shards' `SET/shards/SHARD`
//! (a slotted group's slots `SET/slots/K`). So `status` lists those
//! prefixes when SET has no lease of its own, or one that nobody holds
//! (a plain `tenure run --group SET` that ran once and released). What a
//! store lists was written by whoever can write to it: names and holder ids
//! are escaped for the terminal, a record that cannot be decoded is shown
//! as such, and nothing in a record can make `status` fail.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::SystemTime;

use serde::Serialize;
use tenure::shards::layout;
use tenure::store::Listed;
use tenure::{GroupName, LeaseView, StoreError, Versioned};

use crate::commands::run::slot_prefix;
use crate::view;

/// A listing that failed: the store is unreachable, or refused it.
#[derive(Debug, thiserror::Error)]
#[error("cannot list the groups under {prefix} in {store} (to show the sharded set {set})")]
pub struct ListError {
    /// The set asked about.
    set: String,
    /// The prefix listed, `SET/members/` or the like.
    prefix: String,
    /// The store, redacted.
    store: String,
    #[source]
    source: StoreError,
}

/// What listing a group's set prefixes found.
#[derive(Debug)]
pub enum Probe {
    /// Nothing under the prefixes: a plain group.
    NotASet,
    /// The store cannot list groups (`StoreError::Unsupported`), so
    /// whether the group is a set cannot be told.
    Unlistable(StoreError),
    /// A sharded or slotted set.
    Set(SetView),
}

/// What kind of set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// `Shards` members (`--shards`): `SET/members/ID`, `SET/shards/SHARD`.
    Sharded,
    /// `--slots`: `SET/slots/K`, no member records.
    Slots,
}

/// A sharded or slotted set as read at one instant.
#[derive(Debug)]
pub struct SetView {
    kind: Kind,
    /// Every member record, live or not, in natural order of id.
    members: Vec<Entry>,
    /// Every shard (or slot) record, in natural order of name.
    leases: Vec<Entry>,
    /// Records under the set's prefixes that could not be decoded.
    undecodable: Vec<Undecodable>,
}

/// One decodable record under a set prefix.
#[derive(Debug)]
struct Entry {
    /// The name after the prefix: a member id, shard or slot name.
    name: String,
    record: Versioned,
}

/// A listed record that could not be decoded.
#[derive(Debug)]
struct Undecodable {
    group: String,
    error: String,
}

/// Whether a lease is held (by its record's own expiry against `now`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum State {
    /// Held, not past its expiry. Members say "live".
    Held,
    /// Held but not renewed in time by its holder's clock.
    Expired,
    /// Nobody holds it.
    Released,
}

fn state_of(v: &Versioned, now: SystemTime) -> State {
    if v.record.holder.is_none() {
        State::Released
    } else if v.record.expires_at.to_system_time() < now {
        State::Expired
    } else {
        State::Held
    }
}

/// Lists `group`'s set prefixes. `store` is the redacted URL, for errors.
pub async fn probe(
    view: &dyn LeaseView,
    group: &GroupName,
    store: &str,
) -> Result<Probe, ListError> {
    let list = |prefix: String| async move {
        match view.list(&prefix).await {
            Ok(listed) => Ok(Ok(split(&prefix, listed))),
            Err(e @ StoreError::Unsupported { .. }) => Ok(Err(e)),
            Err(source) => Err(ListError {
                set: group.to_string(),
                prefix,
                store: store.to_owned(),
                source,
            }),
        }
    };
    let members = match list(layout::member_prefix(group.as_str())).await? {
        Ok(found) => found,
        Err(unsupported) => return Ok(Probe::Unlistable(unsupported)),
    };
    let shards = list(layout::shard_prefix(group.as_str()))
        .await?
        .unwrap_or_default();
    let (kind, members, leases) = if !members.0.is_empty() || !shards.0.is_empty() {
        (Kind::Sharded, members, shards)
    } else {
        let slots = list(slot_prefix(group.as_str())).await?.unwrap_or_default();
        if slots.0.is_empty() {
            return Ok(Probe::NotASet);
        }
        (Kind::Slots, members, slots)
    };
    let (mut members, bad_members) = members;
    let (mut leases, bad_leases) = leases;
    members.sort_by(|a, b| natural_cmp(&a.name, &b.name));
    leases.sort_by(|a, b| natural_cmp(&a.name, &b.name));
    let mut undecodable: Vec<Undecodable> = bad_members.into_iter().chain(bad_leases).collect();
    undecodable.sort_by(|a, b| natural_cmp(&a.group, &b.group));
    Ok(Probe::Set(SetView {
        kind,
        members,
        leases,
        undecodable,
    }))
}

type Found = (Vec<Entry>, Vec<Undecodable>);

/// The listed records by the name after `prefix`, and those that could not
/// be decoded. An entry outside the prefix (a store's bug) is skipped.
fn split(prefix: &str, listed: Vec<Listed>) -> Found {
    let mut found = (Vec::new(), Vec::new());
    for Listed { group, record } in listed {
        let Some(name) = group.as_str().strip_prefix(prefix) else {
            continue;
        };
        match record {
            Ok(record) => found.0.push(Entry {
                name: name.to_owned(),
                record,
            }),
            Err(e) => found.1.push(Undecodable {
                group: group.to_string(),
                error: e.to_string(),
            }),
        }
    }
    found
}

/// Orders names the way people count: runs of ASCII digits compare as
/// numbers (`2` before `10`, `p9` before `p10`), whatever their length, and
/// before letters; ties (`01` and `1`) fall back to the bytes.
pub fn natural_cmp(a: &str, b: &str) -> Ordering {
    let (mut x, mut y) = (Chunks(a), Chunks(b));
    loop {
        match (x.next(), y.next()) {
            (None, None) => return a.cmp(b),
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(p), Some(q)) => {
                let o = match (is_number(p), is_number(q)) {
                    (true, true) => {
                        let (p, q) = (p.trim_start_matches('0'), q.trim_start_matches('0'));
                        p.len().cmp(&q.len()).then_with(|| p.cmp(q))
                    }
                    (true, false) => Ordering::Less,
                    (false, true) => Ordering::Greater,
                    (false, false) => p.cmp(q),
                };
                if o != Ordering::Equal {
                    return o;
                }
            }
        }
    }
}

fn is_number(chunk: &str) -> bool {
    chunk.starts_with(|c: char| c.is_ascii_digit())
}

/// A name split into runs of ASCII digits and runs of anything else.
struct Chunks<'a>(&'a str);

impl<'a> Iterator for Chunks<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let first = self.0.chars().next()?;
        let digits = first.is_ascii_digit();
        let end = self
            .0
            .find(|c: char| c.is_ascii_digit() != digits)
            .unwrap_or(self.0.len());
        let (chunk, rest) = self.0.split_at(end);
        self.0 = rest;
        Some(chunk)
    }
}

/// The JSON printed by `status --json` for a set; the fields are listed in
/// its help.
#[derive(Debug, Serialize)]
struct SetJson {
    group: String,
    store: String,
    kind: Kind,
    summary: SummaryJson,
    members: Vec<MemberJson>,
    leases: Vec<LeaseJson>,
    undecodable: Vec<UndecodableJson>,
    /// Live members that publish that they cannot read the set's shard
    /// catalog ([`tenure::record::CATALOG_UNREADABLE_KEY`]).
    catalog_unreadable: Vec<CatalogUnreadableJson>,
    group_lease: Option<GroupLeaseJson>,
}

#[derive(Debug, Serialize)]
struct CatalogUnreadableJson {
    member: String,
    reason: String,
}

#[derive(Debug, Serialize)]
struct SummaryJson {
    /// Live members.
    members: usize,
    /// Member records that are released or expired.
    members_gone: usize,
    /// Shard (or slot) records.
    leases: usize,
    /// Of those, held and not expired.
    held: usize,
    /// Held leases per holder (live members holding none count 0).
    loads: BTreeMap<String, usize>,
}

#[derive(Debug, Serialize)]
struct MemberJson {
    id: String,
    /// `live`, `expired` or `released`.
    state: &'static str,
    metadata: BTreeMap<String, String>,
    token: u64,
    /// Null once released.
    expires_in_ms: Option<i64>,
    /// Shards it holds now.
    holds: usize,
}

#[derive(Debug, Serialize)]
struct LeaseJson {
    /// The shard or slot name.
    name: String,
    state: State,
    holder: Option<String>,
    token: u64,
    /// Null once released; negative once expired.
    expires_in_ms: Option<i64>,
}

#[derive(Debug, Serialize)]
struct UndecodableJson {
    group: String,
    error: String,
}

#[derive(Debug, Serialize)]
struct GroupLeaseJson {
    state: State,
    holder: Option<String>,
    token: u64,
}

impl SetView {
    /// Held leases per holder, with every live member (0 if it holds none),
    /// in natural order of id.
    fn loads(&self, now: SystemTime) -> Vec<(String, usize)> {
        let mut loads: BTreeMap<&str, usize> = BTreeMap::new();
        for m in &self.members {
            if state_of(&m.record, now) == State::Held {
                loads.entry(&m.name).or_default();
            }
        }
        for l in &self.leases {
            if let (State::Held, Some(id)) = (state_of(&l.record, now), l.record.record.holder_id())
            {
                *loads.entry(id).or_default() += 1;
            }
        }
        let mut loads: Vec<(String, usize)> =
            loads.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        loads.sort_by(|a, b| natural_cmp(&a.0, &b.0));
        loads
    }

    fn held(&self, now: SystemTime) -> usize {
        self.leases
            .iter()
            .filter(|l| state_of(&l.record, now) == State::Held)
            .count()
    }

    /// Live members that publish that they cannot read the set's shard
    /// catalog, with the reason each gives, in natural order of id.
    fn catalog_unreadable(&self, now: SystemTime) -> Vec<(&str, &str)> {
        self.members
            .iter()
            .filter(|m| state_of(&m.record, now) == State::Held)
            .filter_map(|m| {
                let reason = m
                    .record
                    .record
                    .metadata
                    .get(tenure::record::CATALOG_UNREADABLE_KEY)?;
                Some((m.name.as_str(), reason))
            })
            .collect()
    }

    fn live_members(&self, now: SystemTime) -> usize {
        self.members
            .iter()
            .filter(|m| state_of(&m.record, now) == State::Held)
            .count()
    }

    /// `status --json`. `own` is the group's own record, if it has one.
    pub fn json(
        &self,
        group: &GroupName,
        store: &str,
        own: Option<&Versioned>,
        now: SystemTime,
    ) -> serde_json::Result<String> {
        let loads = self.loads(now);
        let holds = |id: &str| loads.iter().find(|(k, _)| k == id).map_or(0, |(_, n)| *n);
        let live = self.live_members(now);
        view::json(&SetJson {
            group: group.to_string(),
            store: store.to_owned(),
            kind: self.kind,
            summary: SummaryJson {
                members: live,
                members_gone: self.members.len() - live,
                leases: self.leases.len(),
                held: self.held(now),
                loads: loads.iter().cloned().collect(),
            },
            members: self
                .members
                .iter()
                .map(|m| {
                    let state = state_of(&m.record, now);
                    MemberJson {
                        id: m.name.clone(),
                        state: member_word(state),
                        metadata: view::metadata_map(&m.record.record.metadata),
                        token: m.record.record.token,
                        expires_in_ms: expires_in_ms(&m.record, now),
                        holds: if state == State::Held {
                            holds(&m.name)
                        } else {
                            0
                        },
                    }
                })
                .collect(),
            leases: self
                .leases
                .iter()
                .map(|l| LeaseJson {
                    name: l.name.clone(),
                    state: state_of(&l.record, now),
                    holder: l.record.record.holder_id().map(str::to_owned),
                    token: l.record.record.token,
                    expires_in_ms: expires_in_ms(&l.record, now),
                })
                .collect(),
            undecodable: self
                .undecodable
                .iter()
                .map(|u| UndecodableJson {
                    group: u.group.clone(),
                    error: u.error.clone(),
                })
                .collect(),
            catalog_unreadable: self
                .catalog_unreadable(now)
                .into_iter()
                .map(|(member, reason)| CatalogUnreadableJson {
                    member: member.to_owned(),
                    reason: reason.to_owned(),
                })
                .collect(),
            group_lease: own.map(|v| GroupLeaseJson {
                state: state_of(v, now),
                holder: v.record.holder_id().map(str::to_owned),
                token: v.record.token,
            }),
        })
    }

    /// `status` for people. Every name and holder id read from the store
    /// is escaped ([`view::escape`]).
    pub fn human(
        &self,
        group: &GroupName,
        store: &str,
        own: Option<&Versioned>,
        now: SystemTime,
    ) -> String {
        let (what, kind) = match self.kind {
            Kind::Sharded => ("shard", "sharded set"),
            Kind::Slots => ("slot", "slotted group"),
        };
        let live = self.live_members(now);
        let mut summary = format!("{kind} {group}: ");
        if self.kind == Kind::Sharded {
            let gone = self.members.len() - live;
            let _ = write!(summary, "{live} member{}", plural(live));
            if gone > 0 {
                let _ = write!(summary, " ({gone} gone)");
            }
            summary.push_str(", ");
        }
        let _ = write!(
            summary,
            "{} {what}{}, {} held",
            self.leases.len(),
            plural(self.leases.len()),
            self.held(now)
        );
        let loads = self.loads(now);
        if !loads.is_empty() {
            let shown: Vec<String> = loads
                .iter()
                .map(|(id, n)| format!("{}={n}", shown_name(id)))
                .collect();
            let _ = write!(summary, "; loads {}", shown.join(" "));
        }
        let mut lines = vec![summary, format!("store:   {store}")];
        if let Some(v) = own {
            lines.push(format!("note:    {}", own_note(group, v, now)));
        }
        for (member, reason) in self.catalog_unreadable(now) {
            lines.push(format!(
                "warning: member {} cannot read the shard catalog (it stands for no shard it has not read in one): {}",
                shown_name(member),
                view::escape(reason)
            ));
        }
        if self.kind == Kind::Sharded {
            let rows = self
                .members
                .iter()
                .map(|m| {
                    let state = state_of(&m.record, now);
                    let holds = if state == State::Held {
                        loads
                            .iter()
                            .find(|(k, _)| *k == m.name)
                            .map_or(0, |(_, n)| *n)
                    } else {
                        0
                    };
                    vec![
                        shown_name(&m.name),
                        member_word(state).to_owned(),
                        holds.to_string(),
                        expires_text(&m.record, now),
                        view::metadata_text(&m.record.record.metadata),
                    ]
                })
                .collect();
            lines.extend(table(
                &["member", "state", "shards", "expires", "metadata"],
                &[false, false, true, false, false],
                rows,
            ));
        }
        let rows = self
            .leases
            .iter()
            .map(|l| {
                vec![
                    shown_name(&l.name),
                    l.record
                        .record
                        .holder_id()
                        .map_or_else(|| "unheld".to_owned(), shown_name),
                    l.record.record.token.to_string(),
                    expires_text(&l.record, now),
                ]
            })
            .collect();
        lines.extend(table(
            &[what, "holder", "token", "expires"],
            &[false, false, true, false],
            rows,
        ));
        for u in &self.undecodable {
            lines.push(format!(
                "undecodable: {}: {}",
                view::escape(&u.group),
                view::escape(&u.error)
            ));
        }
        lines.join("\n")
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

fn member_word(state: State) -> &'static str {
    match state {
        State::Held => "live",
        State::Expired => "expired",
        State::Released => "released",
    }
}

fn expires_in_ms(v: &Versioned, now: SystemTime) -> Option<i64> {
    v.record
        .holder
        .as_ref()
        .map(|_| view::millis_from(now, v.record.expires_at.to_system_time()))
}

/// "in 1.3s", "expired 2.0s ago", or "-" once released.
fn expires_text(v: &Versioned, now: SystemTime) -> String {
    let at = v.record.expires_at.to_system_time();
    match state_of(v, now) {
        State::Held => view::relative(now, at),
        State::Expired => format!("expired {}", view::relative(now, at)),
        State::Released => "-".to_owned(),
    }
}

/// A name read from the store, escaped; `""` for an empty one.
fn shown_name(name: &str) -> String {
    if name.is_empty() {
        "\"\"".to_owned()
    } else {
        view::escape(name).into_owned()
    }
}

/// What the group's own record, beside the set, says.
fn own_note(group: &GroupName, v: &Versioned, now: SystemTime) -> String {
    let r = &v.record;
    let state = match (state_of(v, now), r.holder_id()) {
        (State::Released, _) | (_, None) => format!(
            "released {}",
            view::relative(now, r.renewed_at.to_system_time())
        ),
        (_, Some(id)) => format!(
            "held by {}, expired {}",
            shown_name(id),
            view::relative(now, r.expires_at.to_system_time())
        ),
    };
    format!(
        "group {group} also has a single lease of its own ({state}; last token {}), not part of the set",
        r.token
    )
}

/// Longest a column is padded to; longer cells overflow their row only.
const MAX_WIDTH: usize = 32;

/// Rows under a header, columns padded to their widest cell (at most
/// [`MAX_WIDTH`]), right-aligned where `right` says; the last column is not
/// padded.
fn table(header: &[&str], right: &[bool], rows: Vec<Vec<String>>) -> Vec<String> {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count().min(MAX_WIDTH));
        }
    }
    let line = |cells: &[String]| {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            let last = i + 1 == cells.len();
            if i > 0 {
                out.push_str("  ");
            }
            let w = widths.get(i).copied().unwrap_or(0);
            if right.get(i).copied().unwrap_or(false) {
                let _ = write!(out, "{cell:>w$}");
            } else if last {
                out.push_str(cell);
            } else {
                let _ = write!(out, "{cell:<w$}");
            }
        }
        out.trim_end().to_owned()
    };
    let header: Vec<String> = header.iter().map(|h| (*h).to_owned()).collect();
    std::iter::once(line(&header))
        .chain(rows.iter().map(|r| line(r)))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tenure::{Holder, LeaseRecord, LeaseStore, MemoryStore, Metadata, WallTime};

    use super::*;

    #[test]
    fn names_sort_naturally() {
        let mut names = vec![
            "10",
            "9",
            "p10",
            "",
            "p9",
            "010",
            "1",
            "b",
            "a2",
            "a10",
            "2",
            "99999999999999999999999",
            "100000000000000000000000",
        ];
        names.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(
            names,
            [
                "",
                "1",
                "2",
                "9",
                "010",
                "10",
                "99999999999999999999999",
                "100000000000000000000000",
                "a2",
                "a10",
                "b",
                "p9",
                "p10"
            ]
        );
    }

    fn record(holder: Option<&str>, token: u64, expires_in: i64) -> LeaseRecord {
        let now = WallTime::now();
        LeaseRecord {
            holder: holder.map(|id| Holder {
                id: id.to_owned(),
                incarnation: 1,
            }),
            token,
            term: Duration::from_secs(2),
            renewed_at: now,
            expires_at: if expires_in >= 0 {
                now + Duration::from_millis(expires_in as u64)
            } else {
                WallTime::from_millis(now.as_millis().saturating_sub(expires_in.unsigned_abs()))
            },
            metadata: Metadata::new(),
        }
    }

    async fn plant(store: &MemoryStore, group: &str, r: LeaseRecord) {
        let g = GroupName::new(group).unwrap();
        store.compare_and_swap(&g, None, &r).await.unwrap();
    }

    #[tokio::test]
    async fn a_set_is_found_and_shown_with_its_members_and_shards() {
        let store = MemoryStore::new();
        plant(&store, "cs", record(None, 1, 0)).await;
        plant(&store, "cs/members/m1", record(Some("m1"), 1, 2000)).await;
        plant(&store, "cs/members/m0", record(Some("m0"), 1, 2000)).await;
        plant(&store, "cs/members/m9", record(None, 3, 0)).await;
        plant(&store, "cs/members/m8", record(Some("m8"), 2, -5000)).await;
        plant(&store, "cs/shards/10", record(Some("m1"), 4, 1500)).await;
        plant(&store, "cs/shards/2", record(Some("m0"), u64::MAX, 1500)).await;
        plant(&store, "cs/shards/1", record(None, 2, 0)).await;
        plant(&store, "cs/shards/3", record(Some("m8"), 2, -4000)).await;
        plant(&store, "csx/members/other", record(Some("x"), 1, 2000)).await;
        let group = GroupName::new("cs").unwrap();
        let Probe::Set(set) = probe(&store, &group, "memory://").await.unwrap() else {
            panic!("not seen as a set");
        };
        let names: Vec<&str> = set.leases.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["1", "2", "3", "10"]);
        let now = SystemTime::now();
        let own = store.read(&group).await.unwrap();
        let text = set.human(&group, "memory://", own.as_ref(), now);
        let first = text.lines().next().unwrap();
        assert_eq!(
            first,
            "sharded set cs: 2 members (2 gone), 4 shards, 2 held; loads m0=1 m1=1"
        );
        assert!(
            text.contains("group cs also has a single lease of its own (released"),
            "{text}"
        );
        assert!(text.contains(&format!("{}", u64::MAX)), "{text}");
        assert!(
            text.lines()
                .any(|l| l.starts_with("m8") && l.contains("expired")),
            "{text}"
        );
        assert!(
            text.lines()
                .any(|l| l.starts_with("1 ") && l.contains("unheld")),
            "{text}"
        );
        let v: serde_json::Value =
            serde_json::from_str(&set.json(&group, "memory://", own.as_ref(), now).unwrap())
                .unwrap();
        assert_eq!(v["kind"], "sharded");
        assert_eq!(v["summary"]["members"], 2);
        assert_eq!(v["summary"]["members_gone"], 2);
        assert_eq!(v["summary"]["held"], 2);
        assert_eq!(v["summary"]["loads"]["m0"], 1);
        assert_eq!(v["members"][3]["id"], "m9");
        assert_eq!(v["members"][3]["state"], "released");
        assert!(v["members"][3]["expires_in_ms"].is_null());
        assert_eq!(v["leases"][1]["token"], u64::MAX);
        assert_eq!(v["leases"][2]["state"], "expired");
        assert_eq!(v["group_lease"]["state"], "released");

        assert_eq!(v["catalog_unreadable"], serde_json::json!([]));
        assert!(!text.contains("cannot read the shard catalog"), "{text}");

        // A live member that cannot read the catalog says so in its record;
        // status shows it (escaped), a gone member's word is not shown.
        let mut blind = record(Some("m2"), 1, 2000);
        blind.metadata = Metadata::new().with(
            tenure::record::CATALOG_UNREADABLE_KEY,
            "catalog part 1 of 2 (generation 3) is missing\u{1b}[31m",
        );
        plant(&store, "cs/members/m2", blind).await;
        let mut gone = record(Some("m7"), 1, -5000);
        gone.metadata = Metadata::new().with(tenure::record::CATALOG_UNREADABLE_KEY, "old");
        plant(&store, "cs/members/m7", gone).await;
        let Probe::Set(set) = probe(&store, &group, "memory://").await.unwrap() else {
            panic!("not seen as a set");
        };
        let text = set.human(&group, "memory://", None, now);
        let warning = text
            .lines()
            .find(|l| l.contains("cannot read the shard catalog"))
            .unwrap_or_else(|| panic!("{text}"));
        assert!(
            warning.starts_with("warning: member m2 cannot read the shard catalog")
                && warning.contains("part 1 of 2")
                && !warning.contains('\u{1b}'),
            "{warning}"
        );
        assert_eq!(
            text.matches("cannot read the shard catalog").count(),
            1,
            "{text}"
        );
        let v: serde_json::Value =
            serde_json::from_str(&set.json(&group, "memory://", None, now).unwrap()).unwrap();
        assert_eq!(v["catalog_unreadable"][0]["member"], "m2");
        assert!(v["catalog_unreadable"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("part 1 of 2"));
        assert_eq!(v["catalog_unreadable"].as_array().unwrap().len(), 1);

        let plain = GroupName::new("plain").unwrap();
        plant(&store, "plain", record(None, 1, 0)).await;
        assert!(matches!(
            probe(&store, &plain, "memory://").await.unwrap(),
            Probe::NotASet
        ));
    }

    /// A view that can read but not list, as the CLI's kafka:// view.
    struct NoList;

    #[async_trait::async_trait]
    impl LeaseView for NoList {
        async fn read(&self, _: &GroupName) -> Result<Option<Versioned>, StoreError> {
            Ok(None)
        }

        fn describe(&self) -> String {
            "nolist://".to_owned()
        }
    }

    #[tokio::test]
    async fn a_store_that_cannot_list_is_named() {
        let group = GroupName::new("cs").unwrap();
        match probe(&NoList, &group, "nolist://").await.unwrap() {
            Probe::Unlistable(e) => {
                let text = e.to_string();
                assert!(
                    text.contains("nolist://") && text.contains("listing"),
                    "{text}"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_table_pads_to_its_widest_cell_and_no_further() {
        let rows = vec![
            vec![
                "0".to_owned(),
                "m1".to_owned(),
                "7".to_owned(),
                "in 1s".to_owned(),
            ],
            vec![
                "10".to_owned(),
                "x".repeat(100),
                "123".to_owned(),
                "-".to_owned(),
            ],
        ];
        let t = table(
            &["shard", "holder", "token", "expires"],
            &[false, false, true, false],
            rows,
        );
        assert_eq!(t[0], format!("shard  {:<32}  token  expires", "holder"));
        assert_eq!(t[1], format!("0      {:<32}      7  in 1s", "m1"));
        assert!(t[2].starts_with(&format!("10     {}    123", "x".repeat(100))));
    }
}
