//! `tenure status`: one read of the group's record, shown for people or
//! scripts; for a group nobody holds, a listing of the sharded set it may
//! name ([`sets`]).

mod sets;

use std::time::SystemTime;

use anyhow::Context;
use serde::Serialize;
use tenure::{LeaderInfo, Versioned};

use crate::cli::StatusArgs;
use crate::connect;
use crate::out;
use crate::view::{self, LeaderJson};
use sets::Probe;

/// The JSON printed by `status --json`; the fields are listed in its help.
#[derive(Debug, Serialize)]
struct StatusJson {
    group: String,
    store: String,
    state: &'static str,
    token: Option<u64>,
    leader: Option<StatusLeader>,
}

#[derive(Debug, Serialize)]
struct StatusLeader {
    #[serde(flatten)]
    leader: LeaderJson,
    renewed_ago_ms: i64,
    expires_in_ms: i64,
}

/// Runs `tenure status`.
pub async fn run(args: StatusArgs) -> anyhow::Result<u8> {
    let group = connect::group(&args.group)?;
    let conn = connect::open_shared(args.store.store.as_deref()).await?;
    let record = conn
        .view()
        .read(&group)
        .await
        .with_context(|| format!("cannot read group {group} from {}", conn.url))?;
    let now = SystemTime::now();
    let state = state_of(record.as_ref(), now);
    if state != "held" {
        // A sharded set keeps no lease under its own name: its members and
        // shards are groups under it (see sets.rs).
        match sets::probe(conn.view().as_ref(), &group, &conn.url.to_string()).await? {
            Probe::Set(set) => {
                let store = conn.url.to_string();
                let text = if args.json {
                    set.json(&group, &store, record.as_ref(), now)?
                } else {
                    set.human(&group, &store, record.as_ref(), now)
                };
                out::print(&text)?;
                return Ok(0);
            }
            Probe::Unlistable(e) => tracing::warn!(
                "cannot tell whether {group} is a sharded set (its members under {group}/members/, \
                 its shards under {group}/shards/), so it is shown as a single group: {e}"
            ),
            Probe::NotASet => {}
        }
    }
    let leader = record.as_ref().and_then(LeaderInfo::from_record);
    if args.json {
        let json = StatusJson {
            group: group.to_string(),
            store: conn.url.to_string(),
            state,
            token: record.as_ref().map(|v| v.record.token),
            leader: leader.as_ref().map(|l| StatusLeader {
                leader: LeaderJson::new(l),
                renewed_ago_ms: -view::millis_from(now, l.renewed_at),
                expires_in_ms: view::millis_from(now, l.expires_at),
            }),
        };
        out::print(&view::json(&json)?)?;
        return Ok(0);
    }
    match (&leader, &record) {
        (Some(l), _) => {
            let mut lines = Vec::new();
            if state == "expired" {
                lines.push(format!(
                    "no leader: the lease of {} expired {} without renewal, so its holder has probably stopped \
                     (a challenger takes over within a term; `tenure release --group {group}` clears it)",
                    view::escape(&l.candidate),
                    view::relative(now, l.expires_at)
                ));
            }
            lines.extend([
                format!("group:    {group}"),
                format!("leader:   {}", view::escape(&l.candidate)),
                format!("token:    {}", l.token),
                format!(
                    "renewed:  {} ({})",
                    view::relative(now, l.renewed_at),
                    view::rfc3339(l.renewed_at)
                ),
                format!(
                    "expires:  {} ({})",
                    view::relative(now, l.expires_at),
                    view::rfc3339(l.expires_at)
                ),
            ]);
            if !l.metadata.is_empty() {
                lines.push(format!("metadata: {}", view::metadata_text(&l.metadata)));
            }
            lines.push(format!("store:    {}", conn.url));
            out::print(&lines.join("\n"))?;
        }
        (None, Some(v)) => out::print(&format!(
            "no leader for group {group} (released {}; last token {})",
            view::relative(now, v.record.renewed_at.to_system_time()),
            v.record.token
        ))?,
        (None, None) => out::print(&format!(
            "no leader for group {group} (no candidate has ever led it in {})",
            conn.url
        ))?,
    }
    Ok(0)
}

/// `held`, `expired`, `released` or `never`.
pub(super) fn state_of(record: Option<&Versioned>, now: SystemTime) -> &'static str {
    match record {
        None => "never",
        Some(v) if v.record.holder.is_none() => "released",
        Some(v) if v.record.expires_at.to_system_time() < now => "expired",
        Some(_) => "held",
    }
}
