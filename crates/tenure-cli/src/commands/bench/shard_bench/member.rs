//! `tenure bench-member` (hidden): one member of a sharded set for
//! `tenure bench --shards`. It runs `Shards::run_per_shard` with work that
//! does nothing but report when it starts and stops, reports its view of
//! the members and its store operations (counted by [`Counted`](tenure::store::Counted)), and leaves gracefully (`Shards::shutdown`) on SIGTERM.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tenure::{ElectorError, ShardEvent, Shards};

use super::report::MemberReport;
use crate::cli::BenchMemberArgs;
use crate::commands::demo::now;
use crate::exit::usage;
use crate::out;
use crate::signals::Stop;
use crate::store_url::StoreUrl;
use tenure::store::{Counted, OpCounters};

/// Runs one member until SIGTERM/SIGINT.
pub async fn member(args: BenchMemberArgs) -> anyhow::Result<u8> {
    let url = StoreUrl::resolve(args.store.store.as_deref()).map_err(usage)?;
    let store = url
        .open()
        .await
        .with_context(|| format!("cannot open {url}"))?;
    let stop = Stop::listen()?;
    let ops = Arc::new(OpCounters::default());
    let store = Counted::new(store).counting_into(ops.clone());
    let shards = Shards::builder(store, args.set)
        .member_id(args.id)
        .shards(args.shards)
        .term(args.term)
        .start()
        .map_err(usage)?;
    emit(&MemberReport::Started {
        pid: std::process::id(),
        at: now(),
    });
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_millis(250));
        loop {
            every.tick().await;
            emit(&MemberReport::Ops {
                counts: ops.snapshot(),
                at: now(),
            });
        }
    });
    let mut events = shards.events();
    tokio::spawn(async move {
        while let Some(event) = events.next().await {
            if let ShardEvent::MembersChanged { members } = event {
                let ids = members.into_iter().map(|m| m.id).collect();
                emit(&MemberReport::Members { ids, at: now() });
            }
        }
    });
    let runner = {
        let shards = shards.clone();
        tokio::spawn(async move {
            shards
                .run_per_shard(|shard, term| async move {
                    let token = term.token();
                    emit(&MemberReport::Acquired {
                        shard: shard.clone(),
                        token,
                        at: now(),
                    });
                    // Reports the end however the work ends: told to stop,
                    // or dropped at the deadline.
                    let _ended = Ended { shard, token };
                    term.cancelled().await;
                    Ok::<(), ElectorError>(())
                })
                .await
        })
    };
    stop.stopped().await;
    shards.shutdown().await;
    emit(&MemberReport::Left { at: now() });
    runner.await??;
    Ok(0)
}

/// Reports [`MemberReport::Ended`] when dropped.
struct Ended {
    shard: String,
    token: u64,
}

impl Drop for Ended {
    fn drop(&mut self) {
        emit(&MemberReport::Ended {
            shard: std::mem::take(&mut self.shard),
            token: self.token,
            at: now(),
        });
    }
}

fn emit(report: &MemberReport) {
    if let Ok(line) = serde_json::to_string(report) {
        // The orchestrator may be gone; then nobody needs the line.
        let _ = out::line(&line);
    }
}
