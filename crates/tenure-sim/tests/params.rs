//! Parameters every tier refuses: a kind of fault planned oftener than
//! every 100 ms on average, whichever kind it is (the store-trouble windows
//! the elector and sharded tiers share included).

use std::time::Duration;

use tenure_sim::elector::ElectorParams;
use tenure_sim::shards::ShardParams;
use tenure_sim::{SimError, SimParams, Tier};

fn refused(result: Result<(), SimError>) -> bool {
    matches!(result, Err(SimError::Params(m)) if m.contains("at least 100 ms"))
}

#[test]
fn every_tier_refuses_a_fault_kind_oftener_than_every_100_ms() {
    let too_often = Some(Duration::from_millis(99));
    let just_enough = Some(Duration::from_millis(100));
    for every in [too_often, just_enough] {
        let mut machines = SimParams::default();
        machines.faults.stall_every = every;
        let mut electors = ElectorParams::default();
        electors.faults.store_trouble.slow_every = every;
        let mut sets = ShardParams::default();
        sets.faults.store_trouble.lost_replies_every = every;
        let mut joins = ShardParams::default();
        joins.faults.join_every = every;
        let results = [
            machines.check(),
            electors.check(),
            sets.check(),
            joins.check(),
        ];
        for (i, result) in results.into_iter().enumerate() {
            if every == too_often {
                assert!(refused(result), "case {i}: not refused");
            } else {
                assert!(result.is_ok(), "case {i}: {result:?}");
            }
        }
    }
}
