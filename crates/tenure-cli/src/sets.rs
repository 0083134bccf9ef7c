//! `tenure status` for a group run with `--shards` or `--slots`: its
//! members and, per shard or slot, who holds it.

use std::time::SystemTime;

use serde::Serialize;
use tenure::{GroupName, Listed, StoreError, Versioned};

use crate::connect::Connected;
use crate::out;
use crate::view;

#[derive(Debug, Serialize)]
struct SetJson {
    group: String,
    store: String,
    /// `sharded` or `slots`.
    kind: &'static str,
    members: Vec<MemberJson>,
    leases: Vec<LeaseJson>,
}

#[derive(Debug, Serialize)]
struct MemberJson {
    id: String,
    metadata: std::collections::BTreeMap<String, String>,
    expires_in_ms: i64,
}

#[derive(Debug, Serialize)]
struct LeaseJson {
    /// The shard or slot name.
    name: String,
    holder: Option<String>,
    token: u64,
    expires_in_ms: Option<i64>,
}

/// Shows the set if `group` is one (has member or slot leases); `false` if
/// it is not, or the store cannot list.
pub async fn show(conn: &Connected, group: &GroupName, json: bool) -> anyhow::Result<bool> {
    let members = list(conn, &format!("{group}/members/")).await?;
    let shards = list(conn, &format!("{group}/shards/")).await?;
    let slots = list(conn, &format!("{group}/slots/")).await?;
    let (kind, leases) = if !shards.is_empty() || !members.is_empty() {
        ("sharded", shards)
    } else if !slots.is_empty() {
        ("slots", slots)
    } else {
        return Ok(false);
    };
    let now = SystemTime::now();
    let members: Vec<MemberJson> = members
        .into_iter()
        .filter(|(_, v)| v.record.holder.is_some())
        .map(|(id, v)| MemberJson {
            id,
            metadata: view::metadata_map(&v.record.metadata),
            expires_in_ms: view::millis_from(now, v.record.expires_at.to_system_time()),
        })
        .collect();
    let mut leases: Vec<LeaseJson> = leases
        .into_iter()
        .map(|(name, v)| LeaseJson {
            name,
            holder: v.record.holder_id().map(str::to_owned),
            token: v.record.token,
            expires_in_ms: v
                .record
                .holder
                .as_ref()
                .map(|_| view::millis_from(now, v.record.expires_at.to_system_time())),
        })
        .collect();
    // Numbered shards in numeric order, named ones after them.
    leases.sort_by(|a, b| {
        let n = |s: &str| s.parse::<u64>().ok();
        n(&a.name)
            .map_or(u64::MAX, |x| x)
            .cmp(&n(&b.name).map_or(u64::MAX, |x| x))
            .then(a.name.cmp(&b.name))
    });
    if json {
        out::print(&view::json(&SetJson {
            group: group.to_string(),
            store: conn.url.to_string(),
            kind,
            members,
            leases,
        })?)?;
        return Ok(true);
    }
    let what = if kind == "sharded" { "shard" } else { "slot" };
    let mut lines = vec![
        format!("group:   {group} ({kind}: {} {what}s known)", leases.len()),
        format!("store:   {}", conn.url),
    ];
    if kind == "sharded" {
        let shown: Vec<String> = members
            .iter()
            .map(|m| {
                let md = tenure::Metadata::from_iter(m.metadata.clone());
                if md.is_empty() {
                    view::escape(&m.id).into_owned()
                } else {
                    format!("{} ({})", view::escape(&m.id), view::metadata_text(&md))
                }
            })
            .collect();
        lines.push(format!("members: {}", shown.join(", ")));
    }
    lines.push(format!(
        "{:<8} {:<24} {:>8}  expires",
        what, "holder", "token"
    ));
    for l in &leases {
        let expires = match l.expires_in_ms {
            Some(ms) if ms >= 0 => format!(
                "in {}",
                view::short(std::time::Duration::from_millis(ms as u64))
            ),
            Some(_) => "expired".to_owned(),
            None => "released".to_owned(),
        };
        lines.push(format!(
            "{:<8} {:<24} {:>8}  {}",
            view::escape(&l.name),
            l.holder.as_deref().map_or("-".into(), view::escape),
            l.token,
            expires
        ));
    }
    out::print(&lines.join("\n"))?;
    Ok(true)
}

/// The decodable records under `prefix`, by the name after it; none if the
/// store cannot list.
async fn list(conn: &Connected, prefix: &str) -> anyhow::Result<Vec<(String, Versioned)>> {
    let listed = match conn.view().list(prefix).await {
        Ok(l) => l,
        Err(StoreError::Unsupported { .. }) => return Ok(Vec::new()),
        Err(e) => {
            return Err(
                anyhow::Error::new(e).context(format!("cannot list {prefix}* in {}", conn.url))
            )
        }
    };
    Ok(listed
        .into_iter()
        .filter_map(|Listed { group, record }| {
            let name = group.as_str().strip_prefix(prefix)?.to_owned();
            Some((name, record.ok()?))
        })
        .collect())
}
