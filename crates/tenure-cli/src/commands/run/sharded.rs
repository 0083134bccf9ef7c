//! `tenure run --shards N` and `tenure run --slots N`: many leases per group.
//!
//! * Shards: the group is a sharded set ([`tenure::Shards`]); this process is
//!   one member, and runs one CMD per shard it holds, each under that
//!   shard's own term (its token, its deadline, its watchdog). When CMD exits
//!   on its own, the shard is given back and taken again after a poll
//!   period, so a crash-looping CMD is retried at that pace.
//! * Slots: at most N copies of CMD across every process of the group, at
//!   most one per process. Each slot `GROUP/slots/K` is a lease; a process
//!   stands for every slot until it holds one, then withdraws from the rest,
//!   and stands for all again when its slot is lost.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tenure::{Config, Elector, ElectorError, Metadata, Shards, Term};

use crate::cli::RunArgs;
use crate::connect::Connected;
use crate::exit::start_error;
use crate::process::supervise::{self, CmdPlan, Ran};
use crate::signals::Stop;

/// What every CMD of this process shares.
struct Common {
    group: String,
    id: String,
    plan: CmdPlan,
    stop: Stop,
    term: Duration,
}

impl Common {
    /// What every CMD of `group` shares, from the set-up.
    fn new(group: &str, setup: &Setup) -> Common {
        Common {
            group: group.to_owned(),
            id: setup.id.clone(),
            plan: setup.plan.clone(),
            stop: setup.stop.clone(),
            term: setup.config.term,
        }
    }
}

/// What `tenure run` has set up before it knows how many leases it runs.
pub struct Setup {
    pub conn: Connected,
    pub config: Config,
    pub metadata: Metadata,
    pub plan: CmdPlan,
    pub stop: Stop,
    pub id: String,
}

/// Runs `tenure run --shards N`.
pub async fn run_shards(args: &RunArgs, setup: Setup, count: u32) -> anyhow::Result<u8> {
    let common = Arc::new(Common::new(&args.group, &setup));
    let shards = Shards::builder(setup.conn.store()?, &args.group)
        .member_id(setup.id)
        .shards(count as usize)
        .config(setup.config)
        .metadata(setup.metadata)
        .start()
        .map_err(start_error)?;
    tracing::info!(store = %setup.conn.url, shards = count, "joined the set");
    let runner = shards.clone();
    let work = tokio::spawn(async move {
        runner
            .run_per_shard(move |shard, term| {
                let common = common.clone();
                async move {
                    let mut env =
                        supervise::term_env(&common.group, &common.id, &term, common.term);
                    env.push(("TENURE_SHARD".into(), shard.clone()));
                    env.push(("TENURE_SHARDS".into(), count.to_string()));
                    run_one(&common, &term, &env, &format!("shard {shard}")).await;
                    Ok::<(), ElectorError>(())
                }
            })
            .await
    });
    setup.stop.stopped().await;
    tracing::info!("leaving the set: stopping every shard's CMD and releasing");
    shards.shutdown().await;
    work.await
        .context("the shard runner panicked")?
        .context("the sharded set stopped")?;
    Ok(0)
}

/// Runs CMD under one term and logs how it ended. Returns when the term
/// should be given up (CMD exited) or is over.
async fn run_one(common: &Common, term: &Term, env: &[(String, String)], what: &str) {
    match supervise::run_term(&common.plan, &common.stop, term, env).await {
        Ran::Stopped | Ran::Lost | Ran::LostBeforeStart => {}
        Ran::Exited { status, ran } => {
            tracing::info!(%status, ran_ms = supervise::millis(ran), what, "CMD exited; giving the lease back");
        }
        Ran::SpawnFailed(e) => {
            let cmd = supervise::show_command(&common.plan.command);
            tracing::error!(error = %e, what, command = %cmd, "cannot start CMD; giving the lease back");
            // Do not retake the lease at once only to fail again.
            tokio::select! {
                _ = term.cancelled() => {}
                _ = tokio::time::sleep(common.term) => {}
            }
        }
    }
}

/// The prefix of every slot lease of the slotted group `group`.
pub(crate) fn slot_prefix(group: &str) -> String {
    format!("{group}/slots/")
}

/// The lease of slot `slot` of the slotted group `group`.
fn slot_group(group: &str, slot: u32) -> String {
    format!("{}{slot}", slot_prefix(group))
}

/// Runs `tenure run --slots N`.
pub async fn run_slots(args: &RunArgs, setup: Setup, count: u32) -> anyhow::Result<u8> {
    let common = Common::new(&args.group, &setup);
    let stop = &setup.stop;
    let stand = |slot: u32| {
        Elector::builder(setup.conn.store()?, slot_group(&args.group, slot))
            .candidate_id(setup.id.clone())
            .config(setup.config.clone())
            .metadata(setup.metadata.clone())
            .start()
            .map_err(start_error)
    };
    tracing::info!(store = %setup.conn.url, slots = count, "standing for a slot");
    loop {
        let electors: Vec<Elector> = (0..count).map(stand).collect::<anyhow::Result<_>>()?;
        // The first slot won; any other won at the same time is given back.
        let won = tokio::select! {
            _ = stop.stopped() => None,
            won = first_won(&electors) => Some(won),
        };
        let Some((slot, term)) = won else {
            for e in &electors {
                e.shutdown().await;
            }
            return Ok(0);
        };
        let mut kept = None;
        for (k, e) in electors.into_iter().enumerate() {
            if k == slot {
                kept = Some(e);
            } else {
                // Withdraw: a slot won at the same moment is released.
                tokio::spawn(async move { e.shutdown().await });
            }
        }
        let Some(elector) = kept else {
            continue;
        };
        let mut env = supervise::term_env(&common.group, &common.id, &term, common.term);
        env.push(("TENURE_SLOT".into(), slot.to_string()));
        env.push(("TENURE_SLOTS".into(), count.to_string()));
        run_one(&common, &term, &env, &format!("slot {slot}")).await;
        elector.shutdown().await;
        if stop.is_stopped() {
            return Ok(0);
        }
    }
}

/// The first slot this process is elected in, with its term. Checked every
/// few milliseconds: a handful of slots, and a win is rare.
async fn first_won(electors: &[Elector]) -> (usize, Term) {
    loop {
        for (k, e) in electors.iter().enumerate() {
            if let Some(term) = e.current_term() {
                return (k, term);
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
