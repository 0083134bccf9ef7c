//! Sharded sets started together: the same start and the same check for
//! the library's paused-clock tests and each store's real-server test.

use std::sync::Arc;
use std::time::Duration;

use super::holders::{balanced, loads, of_members};
use tenure::clock::Clock;
use tenure::config::Config;
use tenure::shards::Shards;
use tenure::store::LeaseStore;

/// One member of `set` per handle (`m0`, `m1`, …), each on its own handle
/// as separate processes would be, all started at the same moment, with
/// `shards` shards at `term`; on `clock` if given (a paused clock), else
/// the system clock.
///
/// # Panics
///
/// If the set's configuration is refused (a bad set name).
pub fn start_together<S: LeaseStore>(
    handles: Vec<S>,
    set: &str,
    shards: usize,
    term: Duration,
    clock: Option<Arc<dyn Clock>>,
) -> Vec<Shards> {
    handles
        .into_iter()
        .enumerate()
        .map(|(i, store)| {
            let mut b = Shards::builder(store, set)
                .member_id(format!("m{i}"))
                .shards(shards)
                .config(Config::new(term));
            if let Some(clock) = &clock {
                b = b.clock(clock.clone());
            }
            b.start().expect("a valid sharded set")
        })
        .collect()
}

/// Waits, checking every 20 ms, until every shard is held, every member
/// holds `⌊shards/members⌋` or `⌈shards/members⌉` and every member sees
/// all the others. Returns how long it took.
///
/// # Panics
///
/// If two members report a valid term on one shard at once, or if the set
/// is not balanced within `within` (naming the loads and what each member
/// sees).
pub async fn until_balanced(set: &[Shards], shards: usize, within: Duration) -> Duration {
    let start = tokio::time::Instant::now();
    let n = set.len();
    loop {
        let holders = of_members(set);
        let seen = set.iter().all(|m| m.members().len() == n);
        let took = start.elapsed();
        if balanced(&holders, shards, n) && seen {
            return took;
        }
        let l = loads(&holders);
        let views: Vec<usize> = set.iter().map(|m| m.members().len()).collect();
        assert!(
            took <= within,
            "not balanced after {took:?}: loads {l:?}, members seen by each {views:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The documented bound once membership is stable,
/// `2·(T(1+ρ)/(1−ρ) + P)`, for the default timing at `term`.
///
/// # Panics
///
/// If `term` is not a valid term.
pub fn settle_bound(term: Duration) -> Duration {
    let timing = Config::new(term).validate().expect("a valid term");
    (timing.bounds().crash_failover + timing.retry_interval + timing.retry_jitter) * 2
}
