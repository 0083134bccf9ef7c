//! `tenure list`: every group of a store (or those under a prefix) with its
//! holder, token and expiry, as `kubectl get leases` shows Leases.

use std::time::SystemTime;

use anyhow::Context;
use serde::Serialize;
use tenure::{LeaderInfo, StoreError};

use crate::cli::ListArgs;
use crate::connect;
use crate::exit::usage;
use crate::out;
use crate::view;

/// The JSON printed by `list --json`; the fields are listed in its help.
#[derive(Serialize)]
struct ListJson {
    store: String,
    prefix: String,
    groups: Vec<GroupJson>,
    undecodable: Vec<Undecodable>,
}

/// One group of `list --json`.
#[derive(Serialize)]
struct GroupJson {
    group: String,
    state: &'static str,
    holder: Option<String>,
    token: u64,
    metadata: std::collections::BTreeMap<String, String>,
    expires_at: String,
    expires_in_ms: i64,
    /// The expiry, for the table.
    #[serde(skip)]
    expires: SystemTime,
}

/// A record that is not a tenure lease.
#[derive(Serialize)]
struct Undecodable {
    group: String,
    error: String,
}

/// Runs `tenure list`.
pub async fn run(args: ListArgs) -> anyhow::Result<u8> {
    let conn = connect::open_shared(args.store.store.as_deref()).await?;
    let listed = match conn.view().list(&args.prefix).await {
        Err(e @ StoreError::Unsupported { .. }) => {
            return Err(usage(format!(
            "{e}: {} cannot enumerate its groups; use `tenure status --group NAME` for one group",
            conn.url
        )))
        }
        other => other.with_context(|| format!("cannot list the groups of {}", conn.url))?,
    };
    let now = SystemTime::now();
    let mut groups = Vec::new();
    let mut undecodable = Vec::new();
    for entry in listed {
        match entry.record {
            Ok(v) => {
                let leader = LeaderInfo::from_record(&v);
                let expires_at = v.record.expires_at.to_system_time();
                groups.push(GroupJson {
                    group: entry.group.to_string(),
                    state: super::status::state_of(Some(&v), now),
                    holder: leader.as_ref().map(|l| l.candidate.clone()),
                    token: v.record.token,
                    metadata: view::metadata_map(&v.record.metadata),
                    expires_at: view::rfc3339(expires_at),
                    expires_in_ms: view::millis_from(now, expires_at),
                    expires: expires_at,
                });
            }
            Err(e) => undecodable.push(Undecodable {
                group: entry.group.to_string(),
                error: e.to_string(),
            }),
        }
    }
    groups.sort_by(|a, b| a.group.cmp(&b.group));
    undecodable.sort_by(|a, b| a.group.cmp(&b.group));
    if args.json {
        let json = ListJson {
            store: conn.url.to_string(),
            prefix: args.prefix,
            groups,
            undecodable,
        };
        out::print(&view::json(&json)?)?;
        return Ok(0);
    }
    out::print(&human(
        &groups,
        &undecodable,
        &args.prefix,
        &conn.url.to_string(),
        now,
    ))?;
    Ok(0)
}

/// The table for people: one row per group, escaped for the terminal.
fn human(
    groups: &[GroupJson],
    undecodable: &[Undecodable],
    prefix: &str,
    store: &str,
    now: SystemTime,
) -> String {
    if groups.is_empty() && undecodable.is_empty() {
        return if prefix.is_empty() {
            format!("no groups in {store}")
        } else {
            format!(
                "no groups starting with {} in {store}",
                view::escape(prefix)
            )
        };
    }
    let mut rows = vec![[
        "GROUP".to_owned(),
        "STATE".to_owned(),
        "HOLDER".to_owned(),
        "TOKEN".to_owned(),
        "EXPIRES".to_owned(),
    ]];
    for g in groups {
        let expires = if g.state == "released" {
            "-".to_owned()
        } else {
            view::relative(now, g.expires)
        };
        rows.push([
            view::escape(&g.group).into_owned(),
            g.state.to_owned(),
            g.holder
                .as_deref()
                .map_or_else(|| "-".to_owned(), |h| view::escape(h).into_owned()),
            g.token.to_string(),
            expires,
        ]);
    }
    let mut widths = [0usize; 5];
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count().min(MAX_WIDTH));
        }
    }
    let mut lines: Vec<String> = rows
        .iter()
        .map(|row| {
            let mut line = String::new();
            for (i, (cell, w)) in row.iter().zip(widths).enumerate() {
                if i > 0 {
                    line.push_str("  ");
                }
                let pad = w.saturating_sub(cell.chars().count());
                if i == 3 {
                    line.push_str(&" ".repeat(pad));
                    line.push_str(cell);
                } else {
                    line.push_str(cell);
                    line.push_str(&" ".repeat(pad));
                }
            }
            line.trim_end().to_owned()
        })
        .collect();
    for u in undecodable {
        lines.push(format!(
            "warning: {} is not a tenure lease: {}",
            view::escape(&u.group),
            view::escape(&u.error)
        ));
    }
    lines.join("\n")
}

/// Longest a column is padded to; longer cells overflow their row only.
const MAX_WIDTH: usize = 40;
