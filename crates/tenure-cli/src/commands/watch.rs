//! `tenure watch`: one line per change of leader, from a
//! [`tenure::Observer`].

use std::time::SystemTime;

use anyhow::Context;
use serde::Serialize;
use tenure::{LeaderInfo, Observer};

use crate::cli::WatchArgs;
use crate::connect;
use crate::exit::usage;
use crate::out;
use crate::signals::Stop;
use crate::view::{self, LeaderJson};

/// One line of `watch --json`.
#[derive(Serialize)]
struct WatchLine<'a> {
    at: String,
    group: &'a str,
    leader: Option<LeaderJson>,
}

/// Runs `tenure watch` until SIGINT/SIGTERM or until stdout is closed.
pub async fn run(args: WatchArgs) -> anyhow::Result<u8> {
    let group = connect::group(&args.group)?;
    let conn = connect::open_shared(args.store.store.as_deref()).await?;
    let stop = Stop::listen()?;
    // One direct read first, so the current state prints at once (and a
    // store that cannot be read fails here, not silently in the observer).
    let first = conn
        .view()
        .read(&group)
        .await
        .with_context(|| format!("cannot read group {group} from {}", conn.url))?;
    let mut shown = first.as_ref().and_then(LeaderInfo::from_record);
    if !emit(&args, group.as_str(), shown.as_ref())? {
        return Ok(0);
    }
    let observer = Observer::builder(conn.view(), group.as_str())
        .poll_interval(args.poll)
        .start()
        .map_err(usage)?;
    let mut rx = observer.watch();
    loop {
        tokio::select! {
            _ = stop.stopped() => return Ok(0),
            changed = rx.changed() => {
                if changed.is_err() {
                    anyhow::bail!("the observer of group {group} stopped");
                }
            }
        }
        let leader = rx.borrow_and_update().clone();
        if same(shown.as_ref(), leader.as_ref()) {
            continue;
        }
        if !emit(&args, group.as_str(), leader.as_ref())? {
            return Ok(0);
        }
        shown = leader;
    }
}

/// The same leader, term and published metadata.
fn same(a: Option<&LeaderInfo>, b: Option<&LeaderInfo>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => {
            a.candidate == b.candidate && a.token == b.token && a.metadata == b.metadata
        }
        (None, None) => true,
        _ => false,
    }
}

/// Prints one line; `Ok(false)` once the reader has gone away.
fn emit(args: &WatchArgs, group: &str, leader: Option<&LeaderInfo>) -> anyhow::Result<bool> {
    let now = SystemTime::now();
    let text = if args.json {
        view::json(&WatchLine {
            at: view::rfc3339(now),
            group,
            leader: leader.map(LeaderJson::new),
        })?
    } else {
        match leader {
            Some(l) => {
                let md = view::metadata_text(&l.metadata);
                format!(
                    "{}  leader {}  token {}{}{}",
                    view::rfc3339(now),
                    view::escape(&l.candidate),
                    l.token,
                    if md.is_empty() { "" } else { "  " },
                    md
                )
            }
            None => format!("{}  no leader", view::rfc3339(now)),
        }
    };
    match out::line(&text) {
        Ok(()) => Ok(true),
        Err(e) if out::is_closed(&e) => Ok(false),
        Err(e) => Err(e.into()),
    }
}
