//! Parameters the tiers refuse: a kind of fault planned oftener than
//! every 100 ms on average, whichever kind it is (the store-trouble windows
//! the elector and sharded tiers share included), and per-operation fault
//! odds that are not odds of one fate.

use std::time::Duration;

use tenure_sim::elector::ElectorParams;
use tenure_sim::shards::ShardParams;
use tenure_sim::{OpFaultOdds, SimError, SimParams};

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

#[test]
fn per_operation_odds_that_add_up_to_more_than_one_are_refused() {
    let odds = |each: f64| OpFaultOdds {
        lost_reply: each,
        dropped_request: each,
        store_failure: each,
        slow_op: each,
    };
    let mut machines = SimParams::default();
    machines.faults.per_op = odds(0.25);
    assert!(machines.check().is_ok(), "odds adding up to 1 are odds");
    machines.faults.per_op = odds(0.3);
    let refused = machines.check();
    assert!(
        matches!(&refused, Err(SimError::Params(m)) if m.contains("more than 1")),
        "{refused:?}"
    );
}
